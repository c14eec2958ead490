"""A persistent cache on local disk of what a remote store answered (`--disk-cache DIR`).

What is kept: the stored (still encoded) bytes of every whole object and byte
range `Store` fetched (chunks, shard ranges, shard indexes, metadata
documents), and "no such key" answers (the fill-value chunks a store never
wrote), one file per answer; a run of a shard's inner chunks fetched in one
request is kept inner chunk by inner chunk (`get_run`). A remount reads them from disk instead of the
network; decoding happens as for any fetch.

Keys: an entry's file name is a digest of (store identity, key, byte range).
The identity (`Store.open`) is the redacted URL, the endpoint the storage
options point at, and for Icechunk the snapshot id the ref resolved to: two
stores, or two refs of one repository at different snapshots, never share an
entry. An entry records the validators the store sent with it (ETag,
Last-Modified) and when it was last validated.

When an entry is used without asking the store:
- Icechunk snapshots never change: always.
- with a TTL (`--metadata-ttl`): while validated less than TTL ago; an older
  entry is revalidated (a conditional GET over HTTP, answered 304 with no
  body when unchanged; an ETag comparison through `info` elsewhere) and
  refetched when it changed;
- without one, chunks as the store is taken to be while mounted (unchanging),
  and metadata documents are revalidated once per mount, so that a remount
  shows a rewritten hierarchy as it did before there was a disk cache.

Sharing and failures: several daemons may use one DIR at once. An entry is
written under a temporary name and renamed into place, so a reader sees a
whole file or none; every entry carries CRC-32s of its header and payload
and is checked on every read, so a file cut short or altered (a crash, a
full disk, a bad sector, another program) is dropped and fetched again,
never served. Any failure of the cache itself (no space, no permission, an
unreadable file) makes it a miss and the read goes to the store: the cache
can slow nothing down to a failure. A full disk pauses writing.

Size: the size cap counts the blocks the entries occupy. A background thread
of each daemon scans DIR after every `slack / 4` bytes it wrote and deletes
the least recently used entries (by mtime, which a hit renews) until DIR is
`slack` (and a margin of `slack / 8`) below the cap; a daemon writes nothing more until its scan ran once it
has written `slack / 2` bytes since its last walk of DIR began (not since its scan began to wait for
another daemon's walk, which may miss what it writes meanwhile). So two daemons sharing DIR
stay within the cap; k daemons exceed it by at most (k - 2) x slack / 2.
Scans of several daemons take turns (flock on a lock file).

Why not a library: diskcache keeps its index in SQLite (a write transaction
for every hit under its LRU policy, SQLite's locking is unsafe on network
file systems, and it does not checksum the values it stores in files, so a
truncated file would be served); fsspec's caching file systems (filecache,
simplecache, blockcache) cache whole objects or blocks of files, have no size
cap or LRU eviction, and keep their index in one JSON file that two processes
rewrite over each other. The layout here needs no index at all: the file
system is the index, and each file checks itself.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..byte_ranges import ByteRequest, RangeRequest, SuffixRequest
from ..options import DiskCacheOptions
from .backends import fsspec_bounds
from .disk_budget import FULL_PAUSE_SECONDS, DiskBudget, DiskCacheStats, unlink_if_same

log = logging.getLogger(__name__)

# magic, header length, payload length, payload CRC-32, header CRC-32; then the JSON header, then the payload.
_FIXED = struct.Struct("<8sIQII")
MAGIC = b"zarrfsC1"
LAYOUT = "v1"  # the directory under DIR this layout lives in: another layout never reads these files
MAX_HEADER = 1 << 16
# A hit renews the entry's mtime (its place in the LRU order) when it is older than this: hot entries
# cost no write per read.
TOUCH_AFTER = 60.0
# When a mount ends, writes under way get this long to be renamed into place; none start after.
CLOSE_SECONDS = 2.0
BLOCK = 4096
# Documents that say what the hierarchy is: revalidated once per mount when there is no TTL.
METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"})


@dataclass
class Fetched:
    """What the store answered a fetch (`unchanged`: a revalidation found the kept copy current)."""

    data: bytes | bytearray | None  # None: no such key
    validators: dict[str, str] = field(default_factory=dict)
    unchanged: bool = False


# A fetch from the store; given the validators of a kept copy, it may answer `unchanged`.
Fetch = Callable[[dict[str, str] | None], Fetched]


@dataclass
class _Entry:
    data: bytes | None
    validators: dict[str, str]
    validated: float  # time.time() of the fetch or revalidation


def _recorded_range(byte_range: ByteRequest | None) -> tuple[int | None, int | None]:
    """The (start, stop) an entry's name and header record for a byte range: the layout's own encoding,
    kept so that the entries earlier daemons wrote stay found (a whole object (None, None), a suffix
    (-length, 0), an offset (start, None))."""
    start, end = fsspec_bounds(byte_range)
    return (start, 0) if isinstance(byte_range, SuffixRequest) else (start, end)


def is_metadata(key: str) -> bool:
    return key.rpartition("/")[2] in METADATA_NAMES


def occupied(nbytes: int) -> int:
    """Bytes a file of `nbytes` takes on disk (whole blocks)."""
    return -(-nbytes // BLOCK) * BLOCK


class DiskCache:
    """The entries of one store (one identity) in a cache directory that other daemons may share."""

    def __init__(self, options: DiskCacheOptions, identity: str, immutable: bool = False) -> None:
        self.root = Path(options.directory) / LAYOUT
        self.identity = identity
        self.immutable = immutable
        self.ttl = options.ttl
        self.opened_at = time.time()
        self.stats = DiskCacheStats()
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        self.budget = DiskBudget(self.root, options.max_bytes, self.stats)
        self.slack = self.budget.slack
        self._lock = threading.Lock()
        self._temp_serial = 0

    # ----------------------------------------------------------------- reads

    def get(self, key: str, byte_range: ByteRequest | None, fetch: Fetch) -> bytes | bytearray | None:
        """The bytes of `key` that `byte_range` asks for (None: all of it), or None for no such key, from
        disk when a valid copy is there."""
        return self.get_fetched(key, byte_range, fetch).data

    def get_fetched(self, key: str, byte_range: ByteRequest | None, fetch: Fetch) -> Fetched:
        """As `get`, with the validators of the version the bytes are (what an open file checks a
        chunk by: stores/store.py `Versioned`)."""
        start, stop = _recorded_range(byte_range)
        name = self._name(key, start, stop)
        entry = self._load(name, key, start, stop)
        if entry is not None and not self._stale(entry, key):
            self.stats.add("hits")
            self.stats.add("bytes_served", len(entry.data or b""))
            return Fetched(entry.data, entry.validators)
        fetched = fetch(None if entry is None else entry.validators)
        if entry is not None and fetched.unchanged:
            self.stats.add("revalidated")
            self.stats.add("bytes_served", len(entry.data or b""))
            validators = fetched.validators or entry.validators
            self._store(name, key, start, stop, entry.data, validators)
            return Fetched(entry.data, validators)
        self.stats.add("misses" if entry is None else "refetched")
        self._store(name, key, start, stop, fetched.data, fetched.validators)
        return fetched

    def get_run(self, key: str, span: RangeRequest, pieces: list[tuple[int, int]],
                fetch: Fetch) -> bytes | bytearray | None:
        """The bytes `span` asks for of `key`, fetched as one request but kept as `pieces`, the ranges in
        it a reader uses (a shard's inner chunks), one entry each.

        A run is what one batch of loads wanted together, and batches form by
        timing: kept whole, a run would be found again only by a read batched
        the same way. Kept by piece, a later run of any of them is served from
        disk when every piece is there (bytes between pieces, which no reader
        uses, are zeros then); one missing or stale piece fetches the run.
        """
        start, stop = span.start, span.end
        kept: list[bytes | bytearray] = []
        for first, last in pieces:
            entry = self._load(self._name(key, first, last), key, first, last)
            if entry is None or entry.data is None or len(entry.data) != last - first or self._stale(entry, key):
                break
            kept.append(entry.data)
        else:
            self.stats.add("hits", len(pieces))
            self.stats.add("bytes_served", sum(len(data) for data in kept))
            return _assemble(start, stop, pieces, kept)
        fetched = fetch(None)
        self.stats.add("misses")
        if fetched.data is not None:
            for first, last in pieces:
                if last - start <= len(fetched.data):  # (a short answer: only the pieces it holds whole)
                    piece = fetched.data[first - start:last - start]
                    self._store(self._name(key, first, last), key, first, last, piece, fetched.validators)
        return fetched.data

    def _stale(self, entry: _Entry, key: str) -> bool:
        if self.immutable:
            return False
        if self.ttl is not None:
            return time.time() - entry.validated > self.ttl
        return is_metadata(key) and entry.validated < self.opened_at

    def _name(self, key: str, start: int | None, stop: int | None) -> str:
        digest = hashlib.blake2b(f"{self.identity}\0{key}\0{start}\0{stop}".encode(), digest_size=20)
        return digest.hexdigest()

    def _path(self, name: str) -> Path:
        return self.root / name[:2] / name

    def _load(self, name: str, key: str, start: int | None, stop: int | None) -> _Entry | None:
        """The entry if its file is there and whole; a file that fails a check is deleted."""
        path = self._path(name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            status = os.fstat(fd)
            entry = self._parse(fd, status.st_size, key, start, stop)
        except OSError as exc:
            log.debug("disk cache: cannot read %s: %s", path, exc)
            return None
        finally:
            os.close(fd)
        if entry is None:
            self.stats.add("dropped_corrupt")
            log.warning("disk cache: %s (for %s) failed its check; dropped, fetching again", path, key)
            unlink_if_same(path, status)
            return None
        if time.time() - status.st_mtime > TOUCH_AFTER:
            try:
                os.utime(path)
            except OSError:
                pass
        return entry

    def _parse(self, fd: int, size: int, key: str, start: int | None, stop: int | None) -> _Entry | None:
        whole = read_entry(fd, size)
        if whole is None:
            return None
        header, payload = whole
        if header.get("identity") != self.identity or header.get("key") != key or \
                header.get("range") != [start, stop]:
            return None  # (a digest collision, or a file put here by hand)
        data = None if header.get("missing") else payload
        return _Entry(data, dict(header.get("validators") or {}), float(header.get("validated", 0.0)))

    # ---------------------------------------------------------------- writes

    def _store(self, name: str, key: str, start: int | None, stop: int | None,
               data: bytes | bytearray | None, validators: dict[str, str]) -> None:
        """Keep an answer, if the cap and the disk allow it now; a failure only means it is not kept."""
        header = json.dumps({"identity": self.identity, "key": key, "range": [start, stop],
                             "missing": data is None, "validators": validators,
                             "validated": time.time()}).encode()
        payload = data if data is not None else b""
        size = occupied(_FIXED.size + len(header) + len(payload))
        if len(header) > MAX_HEADER or not self.budget.reserve(size):
            self.stats.add("not_stored")
            return
        fixed = _FIXED.pack(MAGIC, len(header), len(payload), zlib.crc32(payload), zlib.crc32(header))
        path = self._path(name)
        with self._lock:
            self._temp_serial += 1
            temp = self.root / "tmp" / f"{name}.{os.getpid()}.{threading.get_ident()}.{self._temp_serial}"
        try:
            with open(temp, "xb") as f:
                f.write(fixed)
                f.write(header)
                f.write(payload)
            path.parent.mkdir(exist_ok=True)
            os.replace(temp, path)
        except OSError as exc:
            self._write_failed(exc, temp)
            return
        finally:
            self.budget.written(size)
        self.stats.add("bytes_stored", len(payload))

    def _write_failed(self, exc: OSError, temp: Path) -> None:
        self.stats.add("write_errors")
        try:
            temp.unlink()
        except OSError:
            pass
        if self.budget.closed:
            return  # `close` gave up on this write and took its file away
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            if self.budget.out_of_space():
                log.warning("disk cache %s: no space left; not caching for %g s at a time (reads go to "
                            "the store)", self.root.parent, FULL_PAUSE_SECONDS)
        else:
            log.warning("disk cache %s: cannot write an entry: %s", self.root.parent, exc)

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Stop writing, as the mount ends: entries under way get `timeout` seconds to be renamed into
        place, and the temporary files of any still unfinished are deleted (the process ends next:
        they would only wait, as garbage counted against the cap, for a scan to find them stale)."""
        if self.budget.close(timeout):
            return
        for temp in (self.root / "tmp").glob(f"*.{os.getpid()}.*"):
            try:
                temp.unlink()
            except OSError:
                pass
        log.info("disk cache %s: discarded the entries still being written %g s after the mount ended",
                 self.root.parent, timeout)

    def scan(self) -> int:
        """An eviction scan now (disk_budget.py); the bytes DIR holds after."""
        return self.budget.scan()

    def wait_for_scan(self, timeout: float = 30.0) -> bool:
        """Block until a whole scan ran after the call (for tests and benchmarks)."""
        return self.budget.wait_for_scan(timeout)

    def describe(self) -> dict[str, Any]:
        return {"directory": str(self.root.parent), "max_bytes": self.budget.max_bytes, **self.stats.as_dict()}


def read_entry(fd: int, size: int) -> tuple[dict[str, Any], bytes] | None:
    """(header, payload) of the entry file open as `fd` (`size` bytes), or None if any check fails."""
    head = os.pread(fd, min(size, _FIXED.size + MAX_HEADER), 0)
    if len(head) < _FIXED.size:
        return None
    magic, header_length, payload_length, payload_crc, header_crc = _FIXED.unpack_from(head)
    offset = _FIXED.size + header_length
    if magic != MAGIC or header_length > MAX_HEADER or size != offset + payload_length or len(head) < offset:
        return None
    header_bytes = head[_FIXED.size:offset]
    if zlib.crc32(header_bytes) != header_crc:
        return None
    try:
        header = json.loads(header_bytes)
    except ValueError:
        return None
    payload = head[offset:] if len(head) == size else os.pread(fd, payload_length, offset)
    if len(payload) != payload_length or zlib.crc32(payload) != payload_crc or not isinstance(header, dict):
        return None
    return header, payload


def _assemble(start: int, stop: int, pieces: list[tuple[int, int]],
              kept: list[bytes | bytearray]) -> bytes | bytearray:
    """Bytes [start, stop) from the pieces in it: joined when they tile it, else placed over zeros."""
    if len(kept) == 1 and pieces[0] == (start, stop):
        return kept[0]
    tiled = all(a == b for (_, a), (b, _) in itertools.pairwise(pieces)) and pieces[0][0] == start \
        and pieces[-1][1] == stop
    if tiled:
        return b"".join(kept)
    whole = bytearray(stop - start)
    for (first, last), data in zip(pieces, kept, strict=True):
        whole[first - start:last - start] = data
    return whole


def entry_is_whole(path: Path) -> bool:
    """Whether the entry file at `path` passes every check (for tests and benchmarks)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_entry(fd, os.fstat(fd).st_size) is not None
    finally:
        os.close(fd)
