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
import fcntl
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

from ..byte_ranges import ByteRequest, OffsetRequest, RangeRequest
from ..options import DiskCacheOptions

log = logging.getLogger(__name__)

# magic, header length, payload length, payload CRC-32, header CRC-32; then the JSON header, then the payload.
_FIXED = struct.Struct("<8sIQII")
MAGIC = b"zarrfsC1"
LAYOUT = "v1"  # the directory under DIR this layout lives in: another layout never reads these files
MAX_HEADER = 1 << 16
# A hit renews the entry's mtime (its place in the LRU order) when it is older than this: hot entries
# cost no write per read.
TOUCH_AFTER = 60.0
# Temporary files this old belong to a writer that died (killed mid-write): the scan removes them.
STALE_TEMP_SECONDS = 600.0
# When a mount ends, writes under way get this long to be renamed into place; none start after.
CLOSE_SECONDS = 2.0
# After a failed write for lack of space, nothing is written for this long.
FULL_PAUSE_SECONDS = 30.0
MIN_SLACK = 4 << 20
MAX_SLACK = 1 << 30
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


class DiskCacheStats:
    """Counters for `.zarrfs-stats.json`, updated from many loader threads."""

    FIELDS = ("hits", "misses", "revalidated", "refetched", "bytes_served", "bytes_stored", "evictions",
              "evicted_bytes", "dropped_corrupt", "not_stored", "write_errors", "scans", "disk_bytes")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values = dict.fromkeys(self.FIELDS, 0)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self.values[name] += amount

    def set(self, name: str, value: int) -> None:
        with self._lock:
            self.values[name] = value

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self.values)


def _recorded_range(byte_range: ByteRequest | None) -> tuple[int | None, int | None]:
    """The (start, stop) an entry's name and header record for a byte range: the layout's own encoding,
    kept so that the entries earlier daemons wrote stay found (a whole object (None, None), a suffix
    (-length, 0), an offset (start, None))."""
    if byte_range is None:
        return None, None
    if isinstance(byte_range, RangeRequest):
        return byte_range.start, byte_range.end
    if isinstance(byte_range, OffsetRequest):
        return byte_range.start, None
    return -byte_range.length, 0


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
        self.max_bytes = options.max_bytes
        self.slack = min(MAX_SLACK, max(MIN_SLACK, options.max_bytes // 10))
        self.opened_at = time.time()
        self.stats = DiskCacheStats()
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._no_writes = threading.Condition(self._lock)  # notified when `_writing` falls to 0
        self._closed = False
        self._written = 0  # bytes written since the last scan began
        self._writing = 0  # bytes of writes under way (a scan that begins now may not see them)
        self._paused_until = 0.0
        self._temp_serial = 0
        self._scan_wanted = threading.Event()
        self._scan_wanted.set()  # DIR may be over the cap already (a smaller --disk-cache-size)
        self._scans = threading.Condition()
        self._scans_finished = 0
        threading.Thread(target=self._scanner, name="zarrfs-disk-cache", daemon=True).start()

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
            _unlink_if_same(path, status)
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
        if len(header) > MAX_HEADER or not self._reserve(size):
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
            with self._lock:
                self._writing -= size
                if not self._writing:
                    self._no_writes.notify_all()
        self.stats.add("bytes_stored", len(payload))

    def _reserve(self, size: int) -> bool:
        """Count `size` bytes against what may be written before the next scan; False when over it."""
        with self._lock:
            if self._closed:
                return False
            if time.monotonic() < self._paused_until or self._written + size > self.slack // 2:
                self._scan_wanted.set()
                return False
            self._written += size
            self._writing += size
            if self._written > self.slack // 4:
                self._scan_wanted.set()
            return True

    def _write_failed(self, exc: OSError, temp: Path) -> None:
        self.stats.add("write_errors")
        try:
            temp.unlink()
        except OSError:
            pass
        if self._closed:
            return  # `close` gave up on this write and took its file away
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            with self._lock:
                first = self._paused_until == 0.0
                self._paused_until = time.monotonic() + FULL_PAUSE_SECONDS
            if first:
                log.warning("disk cache %s: no space left; not caching for %g s at a time (reads go to "
                            "the store)", self.root.parent, FULL_PAUSE_SECONDS)
            self._scan_wanted.set()
        else:
            log.warning("disk cache %s: cannot write an entry: %s", self.root.parent, exc)

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Stop writing, as the mount ends: entries under way get `timeout` seconds to be renamed into
        place, and the temporary files of any still unfinished are deleted (the process ends next:
        they would only wait, as garbage counted against the cap, for a scan to find them stale)."""
        with self._lock:
            self._closed = True
            finished = self._no_writes.wait_for(lambda: not self._writing, timeout)
        if finished:
            return
        for temp in (self.root / "tmp").glob(f"*.{os.getpid()}.*"):
            try:
                temp.unlink()
            except OSError:
                pass
        log.info("disk cache %s: discarded the entries still being written %g s after the mount ended",
                 self.root.parent, timeout)

    # -------------------------------------------------------------- eviction

    def _scanner(self) -> None:
        while True:
            self._scan_wanted.wait()
            self._scan_wanted.clear()
            try:
                self.scan()
            except OSError as exc:
                log.warning("disk cache %s: scan failed: %s", self.root.parent, exc)
            with self._scans:
                self._scans_finished += 1
                self._scans.notify_all()

    def scan(self) -> int:
        """Delete least recently used entries until DIR is `slack` (and its margin) below the cap; the bytes
        DIR holds after."""
        with open(self.root / "evict.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one daemon's scan at a time; released on close
            # The new budget begins with the walk, not before the wait for the lock: what this daemon
            # writes while another daemon's walk runs may be missed by that walk, so it must still count
            # against this daemon's old budget until its own walk sees it.
            with self._lock:
                self._written = self._writing  # written from now on (or still being written): the walk may miss it
            entries, total = self._entries()
            # A walk's block counts can fall short of what the files will occupy (writes under way,
            # entries renamed into a folder the walk has passed): a margin of slack / 8 covers that.
            target = self.max_bytes - self.slack - self.slack // 8
            if total > target:
                entries.sort()
                for _mtime, nbytes, path in entries:
                    if total <= target:
                        break
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
                    total -= nbytes
                    self.stats.add("evictions")
                    self.stats.add("evicted_bytes", nbytes)
        self.stats.add("scans")
        self.stats.set("disk_bytes", total)
        return total

    def _entries(self) -> tuple[list[tuple[float, int, str]], int]:
        """(mtime, bytes on disk, path) of every entry, and the bytes DIR holds; dead writers' temp files go."""
        entries: list[tuple[float, int, str]] = []
        total = 0
        now = time.time()
        with os.scandir(self.root) as top:
            folders = [item.path for item in top if item.is_dir(follow_symlinks=False)]
        for folder in folders:
            temporary = folder.endswith("/tmp")
            try:
                with os.scandir(folder) as files:
                    for item in files:
                        try:
                            status = item.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        if temporary and now - status.st_mtime > STALE_TEMP_SECONDS:
                            _unlink_if_same(Path(item.path), status)
                            continue
                        nbytes = status.st_blocks * 512
                        total += nbytes
                        if not temporary:
                            entries.append((status.st_mtime, nbytes, item.path))
            except FileNotFoundError:
                continue
        return entries, total

    def wait_for_scan(self, timeout: float = 30.0) -> bool:
        """Block until a whole scan ran after the call (for tests and benchmarks)."""
        with self._scans:
            first = self._scans_finished
            for wanted in (first + 1, first + 2):  # a scan under way began before the call: the next counts
                self._scan_wanted.set()
                if not self._scans.wait_for(lambda: self._scans_finished >= wanted, timeout):  # noqa: B023
                    return False
        return True

    def describe(self) -> dict[str, Any]:
        return {"directory": str(self.root.parent), "max_bytes": self.max_bytes, **self.stats.as_dict()}


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


def _unlink_if_same(path: Path, status: os.stat_result) -> None:
    """Delete `path` if it is still the file `status` describes (another daemon may have replaced it)."""
    try:
        now = os.stat(path, follow_symlinks=False)
        if (now.st_ino, now.st_dev) == (status.st_ino, status.st_dev):
            os.unlink(path)
    except OSError:
        pass
