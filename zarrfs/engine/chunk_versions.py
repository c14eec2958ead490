"""One version per open file: the version of each chunk an array's reader may serve.

A reader is the layout its open files were opened with (a metadata refresh gives the array a new
reader for the files opened after it: engine.py). Each chunk the reader loads is checked against:

- the version the reader first loaded it at (a local file's identity, an HTTP answer's ETag or
  Last-Modified, "absent" for a chunk of fill value: stores/store.py `Versioned`), so that a
  chunk reloaded after eviction is the same one;
- the moment the reader began, where the chunk's modification time is known (a local file's
  mtime; a remote answer's Last-Modified, told by the server's own clock through its Date, less
  precisely: `REMOTE_SLACK_NS`): a chunk modified after that was written under the files open on
  the reader, even if the reader never loaded it before.

A chunk that fails either check fails the read with `StaleChunkError` (ESTALE), whose message
names store, array and chunk; the cache never keeps it, so the C path never holds it either. A
chunk that did not change keeps serving: an append that leaves the old chunks alone breaks no
reader of the old shape. A chunk that was absent (fill value) and now exists is a change too: a
reader that served its fill value must not serve its elements next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

from ..errors import StaleChunkError
from ..stores.store import Versioned

Coords = tuple[int, ...]

# How much later than a remote reader's beginning a chunk's Last-Modified must be to be a change:
# the header and the server's Date both have a resolution of a second, and the answer took a while.
REMOTE_SLACK_NS = 2_000_000_000
# Chunks whose first version a reader remembers at most (about 100 bytes each): past it, chunks
# loaded for the first time are checked against the reader's beginning alone (local files).
MAX_REMEMBERED = 1 << 20


class ChunkVersions:
    """The versions one reader's chunks were first loaded at; safe from many loader threads."""

    def __init__(self, where: str) -> None:
        self.where = where  # "store: array /path", for the error's message
        self.began_ns = time.time_ns()  # the wall clock, as a local file's mtime is
        self._first: dict[Coords, Hashable] = {}
        self._lock = threading.Lock()

    def check(self, coords: Coords, key: str, got: Versioned) -> None:
        """Raise `StaleChunkError` when chunk `coords` (stored under `key`) as loaded now is not
        the version this reader serves."""
        if got.modified_ns is not None:
            began = self.began_ns if got.clock_offset_ns is None else \
                self.began_ns + got.clock_offset_ns + REMOTE_SLACK_NS
            if got.modified_ns > began:
                raise self.stale(key, "was written after the files reading it were opened")
        if got.version is None:  # the store tells no version (fsspec's other backends)
            return
        with self._lock:
            first = self._first.get(coords)
            if first is None and len(self._first) < MAX_REMEMBERED:
                self._first[coords] = got.version
        if first is not None and first != got.version:
            raise self.stale(key, "changed since the files reading it first read it")

    def stale(self, key: str, why: str) -> StaleChunkError:
        return StaleChunkError(f"{self.where}: chunk {key!r} {why}: reopen the file to read the store as it "
                               "is now (a changing store needs --metadata-ttl)")
