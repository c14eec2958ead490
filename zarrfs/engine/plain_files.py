"""Ordinary files of a share, passed through byte for byte.

A local file is read with `preadv` straight into the reply from a
descriptor the open file keeps: one copy, and the kernel's page cache is the
cache. A remote one is read in blocks of `BLOCK_BYTES` through the mount's
chunk cache (one budget with the stores' chunks). A read that continues
where the last one ended keeps blocks loading ahead of it: the reach starts
at `FIRST_AHEAD_BLOCKS` and doubles with each top-up to `MAX_AHEAD_BYTES` (or
a quarter of the budget); the top-ups read on one ranged GET to the file's
end, each block served as its bytes arrive (over HTTP and S3), so a stream
makes one request rather than one per block. Each block is checked against the
size the listing gave (a file that changed size since it was listed fails the
read, EIO) and every answer for one open file against the version the first
carried (a file rewritten in between fails it, ESTALE), rather than mixing two
versions.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Generator, Iterator
from typing import Any

import numpy as np

from ..byte_ranges import RangeRequest
from ..errors import StaleChunkError, StoreError
from ..stores.store import Store
from ..stores.versioned import ChangedWhileRead, OneVersion
from .cache import ChunkCache
from .chunks import coalesce
from .geometry import Coords
from .loads import Batch
from .served import continues_stream

# 8 MiB blocks, the cache's entries and the smallest request: at 20 ms per request, 2 requests in
# flight already carry ~800 MB/s, and a block is small beside the cache budget.
BLOCK_BYTES = 8 << 20
# How far ahead of a sequential reader blocks load: this many blocks at first, doubling with each
# top-up to MAX_AHEAD_BYTES (or a quarter of the budget), so its reach stays bounded. The top-ups read
# on, in turn, one GET to the file's end, as its body arrives: the body waits in the socket between
# them (the server held back by TCP), and a block is served as soon as its own bytes are in. One GET
# per stream: every request costs a round trip and the server's work per request (moto reads the
# whole object for each ranged GET), and a stream that carries its reach's bytes needs no second.
FIRST_AHEAD_BLOCKS = 4
MAX_AHEAD_BYTES = 128 << 20
# GETs left part-read per open file, for its stream's next top-up: one where the reader goes on, one
# more for a top-up that started before the one ahead of it was read (it opened its own).
PARKED_GETS = 2


class PlainFileReader:
    """One open ordinary file: `read_into(offset, out)`; `close` lets its descriptor go."""

    def __init__(self, store: Store, key: str, size: int, mtime_ns: int | None, cache: ChunkCache,
                 timeout: float) -> None:
        self.store = store
        self.key = key
        self.size = size
        self._cache = cache
        self._timeout = timeout
        # Blocks are named by the file's version as listed, so a later open of the same version reuses them
        # and a changed file (another size or time) never gets the old one's blocks.
        self.version = (store.display_name, key, size, mtime_ns)
        self._lock = threading.Lock()
        self._next_offset = -1  # where the last read ended: the next read there is sequential
        self._blocks = -(-size // BLOCK_BYTES)
        self._max_ahead = max(FIRST_AHEAD_BLOCKS, min(MAX_AHEAD_BYTES, cache.budget_bytes // 4) // BLOCK_BYTES)
        self._ahead = FIRST_AHEAD_BLOCKS  # the stream's reach now, in blocks
        self._requested_until = 0  # blocks before this one were asked for ahead of the stream
        # GETs that top-ups left part-read, by the offset of their next byte, for the next top-up to go on
        # with; and how many being read now will be left at each offset.
        self._parked: dict[int, Generator[bytes | bytearray | memoryview, None, None]] = {}
        self._arriving: Counter[int] = Counter()
        self._gets_changed = threading.Condition(self._lock)
        # Every answer for this open file (a stream's GETs, a lone block's) must carry the version the
        # first carried: a file rewritten between two of them would mix their bytes.
        self._one_version = OneVersion(f"{store.display_name}: {key}")
        self._closed = False
        path = store.local_path(key)
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC) if path is not None else None

    def read_into(self, offset: int, out: np.ndarray) -> int:
        """Write up to `len(out)` bytes of the file at `offset` into `out`; return how many."""
        stop = min(self.size, offset + len(out))
        if stop <= offset:
            return 0
        if self._fd is not None:
            return self._read_local(offset, out[:stop - offset])
        return self._read_remote(offset, stop, out)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            parked, self._parked = self._parked, {}
            self._closed = True
        if fd is not None:
            os.close(fd)
        for pieces in parked.values():
            pieces.close()

    # ------------------------------------------------------------- internal

    def _read_local(self, offset: int, out: np.ndarray) -> int:
        assert self._fd is not None
        done = 0
        while done < len(out):
            count = os.preadv(self._fd, [memoryview(out[done:])], offset + done)
            if count == 0:
                raise StoreError(f"{self.store.display_name}: {self.key}: the file is shorter than its listed "
                                 f"size ({offset + done} of {self.size} bytes): it changed since it was listed")
            done += count
        return done

    def _read_remote(self, offset: int, stop: int, out: np.ndarray) -> int:
        first, last = offset // BLOCK_BYTES, (stop - 1) // BLOCK_BYTES
        keys = [self._block_key(index) for index in range(first, last + 1)]
        with self._lock:
            # The kernel's readahead sends a stream's reads several at a time, so they may arrive out of
            # order: the stream rule of the arrays' reads (served.py) tells them, not an exact offset.
            sequential = offset == 0 or continues_stream(self._next_offset, offset, stop)
            self._next_offset = max(self._next_offset, stop) if sequential else stop
            if not sequential:  # a new stream, wherever it goes next, starts its reach afresh
                self._ahead, self._requested_until = FIRST_AHEAD_BLOCKS, 0
        if sequential:  # the read's own blocks come first in the stream's GET
            self._load_ahead(first)
        values, futures = self._cache.get_many(keys, self._load_block, size_hint=BLOCK_BYTES)
        try:
            for key, future in futures.items():
                values[key] = future.result(timeout=self._timeout)
            for key in keys:
                block = values[key]
                block_start = key[2] * BLOCK_BYTES
                begin, end = max(offset, block_start), min(stop, block_start + len(block))
                out[begin - offset:end - offset] = block[begin - block_start:end - block_start]
        finally:
            self._cache.release({key: values.get(key) for key in keys if key in values})
        return stop - offset

    def _load_ahead(self, first: int) -> None:
        """Top up the blocks loading for a stream whose read starts in block `first`: once at least half
        its reach (from `first` on) is not asked for yet, with one GET for all of them."""
        with self._lock:
            start = max(self._requested_until, first)
            stop = min(self._blocks, first + self._ahead)
            if start >= stop or (stop - start < self._ahead // 2 and stop < self._blocks):
                return
            self._requested_until = stop
            self._ahead = min(self._max_ahead, 2 * self._ahead)
        keys = [self._block_key(index) for index in range(start, stop)]
        values, futures = self._cache.get_many(keys, self._load_block, size_hint=BLOCK_BYTES, prefetch=True,
                                               batch=Batch(lambda key: 0, self._load_span))
        taken = len(values) + len(futures)  # the cache takes keys in order until it has no room
        if taken < len(keys):
            with self._lock:  # a later read asks for the rest
                self._requested_until = min(self._requested_until, start + taken)

    def _block_key(self, index: int) -> tuple[str, tuple[str, str, int, int | None], int]:
        return ("plain-file", self.version, index)

    def _load_block(self, key: Any) -> np.ndarray:
        return np.frombuffer(self._get(key[2], key[2] + 1), np.uint8)

    def _load_span(self, keys: list[Any]) -> Iterator[tuple[Any, np.ndarray]]:
        """The blocks of `keys` (one top-up's, those not cached yet), each handed to the cache as soon as
        its bytes are in: a stream's reader waits for the block it reads, not for a whole GET. Each run
        of neighbours (`coalesce`) goes on with a GET an earlier top-up left where the run starts, else
        opens one to the file's end (`Store.get_range_pieces`); it is left at the run's end after."""
        blocks: list[tuple[Coords, int, int]] = [((key[2],), key[2] * BLOCK_BYTES, BLOCK_BYTES) for key in keys]
        for run in coalesce(blocks, gap=0, limit=len(blocks) * BLOCK_BYTES):
            first, last = run.start // BLOCK_BYTES, run.start // BLOCK_BYTES + len(run.members)
            end = min(self.size, last * BLOCK_BYTES)
            pieces = self._take_get(run.start, end)
            try:
                for index in range(first, last):
                    piece = _next_piece(pieces)
                    if piece is None or len(piece) != min(BLOCK_BYTES, self.size - index * BLOCK_BYTES):
                        raise self._changed(index * BLOCK_BYTES, end, "fewer bytes")
                    yield self._block_key(index), np.frombuffer(piece, np.uint8)
            except BaseException:
                self._leave_get(end, None)
                pieces.close()
                raise
            self._leave_get(end, pieces)

    def _take_get(self, offset: int, end: int) -> Generator[bytes | bytearray | memoryview, None, None]:
        """A GET whose next byte is at `offset`: the one a top-up being read now will leave there (waited
        for: the stream's top-ups read one GET in turn), else one left there, else a new one to the file's
        end. `end`: where this run will leave it."""
        if not self.store.streams:  # the run's bytes in one answer: nothing to go on with after
            return self.store.get_range_pieces(self.key, RangeRequest(offset, end), BLOCK_BYTES,
                                               self._one_version.check)
        with self._gets_changed:
            self._arriving[end] += 1  # first: a top-up after this one waits for it even while it waits
            while self._arriving[offset]:
                self._gets_changed.wait()
            pieces = self._parked.pop(offset, None)
        return pieces or self.store.get_range_pieces(self.key, RangeRequest(offset, self.size), BLOCK_BYTES,
                                                     self._one_version.check)

    def _leave_get(self, end: int, pieces: Generator[bytes | bytearray | memoryview, None, None] | None) -> None:
        """A run that ended at `end` leaves its GET there for the next top-up (None: it failed). At most
        `PARKED_GETS` wait, the furthest on; none at the file's end or once the file is closed."""
        if not self.store.streams:
            if pieces is not None:
                pieces.close()
            return
        closing: list[Generator[bytes | bytearray | memoryview, None, None]] = []
        with self._gets_changed:
            self._arriving[end] -= 1
            if not self._arriving[end]:
                del self._arriving[end]  # (a long stream would leave one zero per top-up)
            if pieces is not None:
                if end < self.size and not self._closed:
                    if (other := self._parked.pop(end, None)) is not None:
                        closing.append(other)  # (two GETs at one place: a top-up that opened its own)
                    self._parked[end] = pieces
                else:
                    closing.append(pieces)
            while len(self._parked) > PARKED_GETS:
                closing.append(self._parked.pop(min(self._parked)))
            self._gets_changed.notify_all()
        for stale in closing:
            stale.close()

    def _get(self, first: int, stop_block: int) -> bytes | bytearray | memoryview:
        """The file's bytes of blocks [first, stop_block), checked against its listed size and against
        the version the file's other answers carried (a lone block is one GET as a stream is)."""
        start, stop = first * BLOCK_BYTES, min(self.size, stop_block * BLOCK_BYTES)
        pieces = self.store.get_range_pieces(self.key, RangeRequest(start, stop), stop - start,
                                             self._one_version.check)
        try:
            data = _next_piece(pieces)
        finally:
            pieces.close()
        if data is None or len(data) != stop - start:
            raise self._changed(start, stop, "nothing" if data is None else f"{len(data)} bytes")
        return data

    def _changed(self, start: int, stop: int, got: str) -> StoreError:
        return StoreError(f"{self.store.display_name}: {self.key}: bytes [{start}:{stop}] came back as {got}: "
                          f"the file changed since it was listed ({self.size} bytes)")


def _next_piece(pieces: Generator[bytes | bytearray | memoryview, None, None]) -> bytes | bytearray | memoryview | None:
    """The stream's next piece (None at its end); a file that changed between two of its GETs is
    StaleChunkError (ESTALE: reopen it to read it as it is now), as an array's rewritten chunk is."""
    try:
        return next(pieces, None)
    except StoreError as exc:
        if isinstance(exc.__cause__, ChangedWhileRead):
            raise StaleChunkError(str(exc)) from exc
        raise
