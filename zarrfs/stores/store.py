"""The one place that talks to fsspec: a read-only key/value view of SOURCE.

Keys are '/'-separated paths relative to the store root. A missing key is
`None` (Zarr treats an absent chunk as fill), every other failure is a
`StoreError` after a bounded number of retries.

Its parts, one job each: opening.py says what a SOURCE is read through;
backends.py calls that file system, one typed method per operation;
requests.py bounds every request (in number, time and tries); versioned.py
says which version an answer is; listing.py reads listings; disk_cache.py
keeps remote answers on disk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from typing import Any

import fsspec
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.local import LocalFileSystem

from ..byte_ranges import ByteRequest, RangeRequest, expected_nbytes, within
from ..errors import StoreError
from ..options import StoreOptions
from .backends import AsyncFsBackend, Backend, FsBackend, HttpBackend, LocalBackend, fsspec_bounds
from .disk_cache import DiskCache, Fetched
from .guarded_references import GuardedReferenceFileSystem
from .http import HttpReader
from .listing import Listed, listed_under, local_entries
from .opening import open_icechunk, open_source
from .requests import MISSING, Requests, StoreStats
from .s3_stream import S3Streams
from .trust import Refusal
from .versioned import ABSENT, ChangedWhileRead, Versioned, http_version, read_local, remote_versioned, s3_get

__all__ = ["ABSENT", "Listed", "Store", "Versioned"]


class Store:
    """Read-only access to the keys below `root` on an fsspec file system."""

    def __init__(self, fs: fsspec.AbstractFileSystem | Callable[[], fsspec.AbstractFileSystem], root: str,
                 display_name: str, options: StoreOptions | None = None, http: HttpReader | None = None,
                 identity: str | None = None, immutable: bool = False) -> None:
        # `fs` may be a function that makes it: a plain http(s) source reads and lists through
        # `http` and needs fsspec's file system (aiohttp: ~9 MiB resident) for nothing else.
        self._fs = fs if isinstance(fs, fsspec.AbstractFileSystem) else None
        self._make_fs = None if self._fs is not None else fs
        self._fs_lock = threading.Lock()
        self._http = http  # reads and lists in place of fs (http.py, http_listing.py)
        # '' is the top of an archive (zip::...), '/' a local file system's root.
        self.root = root if root == "/" else root.rstrip("/")
        self.display_name = display_name
        self.options = options or StoreOptions()
        self.stats = StoreStats()
        self._requests = Requests(display_name, self.options, self.stats)
        # Async backends (HTTP, S3, GCS) run on fsspec's event loop: calling
        # their coroutines directly lets a timeout cancel the request. (fsspec's HTTP is one.)
        self._async = http is not None or (isinstance(self._fs, AsyncFileSystem) and not self._fs.asynchronous)
        self._backend = self._backend_for(http)
        # Long reads of an S3 object (s3fs's file system: `_call_s3`) stream through zarrfs's HTTP client.
        backend = self._backend
        self._s3_streams = S3Streams(backend) \
            if isinstance(backend, AsyncFsBackend) and hasattr(backend.async_fs, "_call_s3") else None
        # `identity`: what tells this store's answers from any other's in a shared disk cache (None: not
        # remote, or nothing tells); `immutable`: its answers never change (an Icechunk snapshot).
        self.disk_cache = DiskCache(self.options.disk_cache, identity, immutable) \
            if self.options.disk_cache is not None and identity is not None and self._async else None
        self.stats.disk_cache = self.disk_cache

    def _backend_for(self, http: HttpReader | None) -> Backend:
        if http is not None:
            return HttpBackend(http, self._async_fs_backend)
        if self._async:
            return self._async_fs_backend()
        return LocalBackend(self.fs) if isinstance(self._fs, LocalFileSystem) else FsBackend(self.fs)

    def _async_fs_backend(self) -> AsyncFsBackend:
        fs = self.fs
        assert isinstance(fs, AsyncFileSystem)  # (an http(s) URL's file system is fsspec's async one)
        return AsyncFsBackend(fs, self.options.timeout)

    @classmethod
    def open(cls, url: str, storage_options: dict[str, Any] | None = None,
             options: StoreOptions | None = None) -> Store:
        """Open SOURCE (a local path or any fsspec URL, chained ones too: opening.py)."""
        options = options or StoreOptions()
        opened = open_source(url, storage_options, options)
        return cls(opened.fs, opened.root, opened.display_name, options, opened.http, opened.identity,
                   opened.immutable)

    @classmethod
    def open_icechunk(cls, source: str, storage_options: dict[str, Any] | None = None,
                      options: StoreOptions | None = None) -> Store:
        """A read-only session of the Icechunk repository at SOURCE, at `options.ref` (default branch main)."""
        options = options or StoreOptions()
        opened = open_icechunk(source, storage_options, options)
        return cls(opened.fs, opened.root, opened.display_name, options, identity=opened.identity,
                   immutable=opened.immutable)

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None:
            with self._fs_lock:
                if self._fs is None:
                    assert self._make_fs is not None
                    self._fs = self._make_fs()
        return self._fs

    @property
    def remote(self) -> bool:
        """Whether requests wait on a network (then many should be in flight at once)."""
        return self._async

    # Counters read by the mount's log and benchmarks.
    @property
    def requests(self) -> int:
        return self.stats.requests

    @property
    def bytes_fetched(self) -> int:
        return self.stats.bytes_fetched

    def refusals(self) -> list[Refusal]:
        """The targets of a reference set that the trust rule refuses, once per prefix (none for other
        sources): what `zarrfs tree` lists. Reads the references (a Parquet set's files), no target."""
        return self._fs.refusals() if isinstance(self._fs, GuardedReferenceFileSystem) else []

    def local_path(self, key: str) -> str | None:
        """The operating-system path of `key` when the store is a local directory, else None."""
        return self._path(key) if isinstance(self._fs, LocalFileSystem) else None  # (a lazy one is http)

    def _path(self, key: str) -> str:
        if not key or not self.root:
            return key or self.root
        return f"{self.root.rstrip('/')}/{key}"

    def close(self) -> None:
        """The mount ends: the disk cache finishes (or discards) the entries it is writing."""
        if self.disk_cache is not None:
            self.disk_cache.close()

    def get(self, key: str) -> bytes | bytearray | None:
        """The whole value of `key`, or None if it does not exist."""
        return self._read(key, None)

    def get_versioned(self, key: str) -> Versioned:
        """The whole value of `key` and the version it is (`Versioned`), from the one answer that
        carried it: a local file's identity, an HTTP answer's validators, a disk cache entry's."""
        what = f"reading {key!r}"
        local = self.local_path(key)
        try:
            if local is not None:
                return self._requests.call(what, lambda: read_local(local))
            if self.disk_cache is not None:
                return self._kept_versioned(key, None)
            backend, path = self._backend, self._path(key)
            if isinstance(backend, HttpBackend):
                data, got = self._requests.call(what, lambda: backend.fetch(path))
                return remote_versioned(data, http_version(got), got.get("Last-Modified"), got.get("Date"),
                                        time.time_ns())
            if isinstance(backend, AsyncFsBackend) and hasattr(backend.async_fs, "_call_s3"):  # s3fs
                return self._requests.call(what, lambda: backend.run(s3_get, backend.async_fs, path))
        except MISSING:
            return Versioned(None, ABSENT)
        data = self.get(key)
        return Versioned(data, ABSENT if data is None else None)

    def get_range(self, key: str, byte_range: ByteRequest) -> bytes | bytearray | None:
        """The bytes of `key` that `byte_range` asks for (fewer past its end), or None if it does not exist."""
        return self._read(key, byte_range)

    def _kept_versioned(self, key: str, byte_range: ByteRequest | None) -> Versioned:
        """Through the disk cache: the bytes and the version of the answer its entry kept (or fetched)."""
        assert self.disk_cache is not None
        fetched = self.disk_cache.get_fetched(key, byte_range,
                                              lambda validators: self._fetch(key, byte_range, validators))
        return Versioned(fetched.data, ABSENT if fetched.data is None else http_version(fetched.validators))

    def get_document(self, key: str, limit: int) -> bytes | bytearray | None:
        """Metadata document `key` (its first `limit` bytes at most), or None if it does not exist; in
        flight beside chunk reads, up to `StoreOptions.document_concurrency` at once."""
        return self._read(key, RangeRequest(0, limit), document=True)

    @property
    def streams(self) -> bool:
        """Whether `get_range_pieces` hands each piece on as it arrives (over plain HTTP and S3, without a
        disk cache), rather than once the whole range is in."""
        return self.disk_cache is None and (isinstance(self._backend, HttpBackend) or self._s3_streams is not None)

    def get_range_pieces(self, key: str, span: RangeRequest, piece: int,
                         on_version: Callable[[str | None], None] | None = None,
                         ) -> Generator[bytes | bytearray | memoryview, None, None]:
        """The bytes `span` asks for of `key`, in pieces of `piece` bytes (the last one shorter; fewer bytes,
        or none, if the object is shorter or missing). Where the store `streams`, from one request whose
        body is read a piece at a time (a failure part-way goes on from the byte it got to), each answer's
        version told to `on_version` before its bytes (ChangedWhileRead from it ends the stream); else
        from one `get_range`, cut up, the version a disk cache entry kept told likewise."""
        if not self.streams:
            got = self._kept_versioned(key, span) if self.disk_cache is not None else \
                Versioned(self.get_range(key, span), None)
            if on_version is not None and got.data is not None:
                try:
                    on_version(None if got.version is None else str(got.version))
                except ChangedWhileRead as exc:  # as a streamed answer's mismatch reaches the reader
                    raise StoreError(f"{self.display_name}: reading {key!r} [{span.start}:{span.end}] "
                                     f"failed: {exc}") from exc
            data = got.data or b""
            if len(data) <= piece:  # one piece: the answer itself, not a copy of it
                if data:
                    yield data
                return
            view = memoryview(data)
            for at in range(0, len(view), piece):
                yield bytes(view[at:at + piece])  # each piece its own buffer, as a streamed one is
            return
        backend, path, stop = self._backend, self._path(key), span.end

        def open_at(start: int) -> Generator[bytes | bytearray | memoryview, None, None]:
            if isinstance(backend, HttpBackend):
                return backend.reader.pieces(path, start, stop, piece, on_version)
            assert self._s3_streams is not None
            return self._s3_streams.pieces(path, start, stop, piece, on_version)

        try:
            yield from self._requests.stream(f"reading {key!r} [{span.start}:{span.end}]", open_at, span.start)
        except MISSING:
            return

    def get_run(self, key: str, span: RangeRequest, pieces: list[tuple[int, int]]) -> bytes | bytearray | None:
        """The bytes `span` asks for of `key` in one request, as `get_range`; `pieces` are the ranges
        [start, end) in it the reader uses (a shard's inner chunks), which the disk cache keeps one by one."""
        if self.disk_cache is None:
            return self._read(key, span)
        return self.disk_cache.get_run(key, span, pieces, lambda validators: self._fetch(key, span, validators))

    def _read(self, key: str, byte_range: ByteRequest | None, document: bool = False) -> bytes | bytearray | None:
        if self.disk_cache is None:
            return self._fetch(key, byte_range, None, document).data
        return self.disk_cache.get(key, byte_range,
                                   lambda validators: self._fetch(key, byte_range, validators, document))

    def _fetch(self, key: str, byte_range: ByteRequest | None, validators: dict[str, str] | None,
               document: bool = False) -> Fetched:
        """`key` (the bytes `byte_range` asks for; None: all of it) from the store, with its validators
        when the store tells them; given `validators` of a kept copy, `unchanged` when that copy is current.
        `document`: a metadata document's read (`Requests.call`)."""
        start, end = fsspec_bounds(byte_range)
        what = f"reading {key!r}" if byte_range is None else f"reading {key!r} [{start}:{'' if end is None else end}]"
        backend, path = self._backend, self._path(key)
        try:
            if isinstance(backend, HttpBackend) and self.disk_cache is not None:
                data, got = self._requests.call(what, lambda: backend.fetch(path, start, end, validators), document)
                if data is None:
                    return Fetched(None, got or validators or {}, unchanged=True)
            else:
                got = self._version(key, validators) if validators is not None else {}
                if validators and got and got == validators:
                    return Fetched(None, got, unchanged=True)
                data = self._requests.call(what, lambda: backend.cat_file(path, start, end), document)
        except MISSING:
            return Fetched(None)
        nbytes = None if byte_range is None else expected_nbytes(byte_range)
        if byte_range is not None and nbytes is not None and len(data) > nbytes:
            # The server ignored the Range header (python -m http.server does) and sent the whole object.
            # (An offset's length is the object's to tell: an answer to one is taken as it comes.)
            data = data[within(byte_range, len(data))]
        return Fetched(data, got)

    def _version(self, key: str, validators: dict[str, str]) -> dict[str, str]:
        """The ETag of `key` as the store's `info` tells it ({} when it does not), to revalidate a copy."""
        path = self._path(key)
        info = self._requests.call(f"checking {key!r}", lambda: self._backend.info(path))
        etag = info.get("ETag") or info.get("etag") if isinstance(info, dict) else None
        return {"ETag": str(etag)} if etag else {}

    def exists(self) -> bool:
        """Whether the store root exists at all (for telling 'missing' from 'not Zarr')."""
        try:
            return self._requests.call("checking the root", lambda: self._backend.exists(self.root))
        except StoreError:
            return True  # cannot tell; let the caller say "not Zarr"

    def listdir(self, prefix: str) -> tuple[list[str], list[str]]:
        """(sub-directory names, file names) directly under `prefix`.

        An empty listing is returned for a prefix that does not exist or a
        store that cannot list (plain HTTP without an index page).
        """
        entries = self.list_entries(prefix)
        return [e.name for e in entries if e.directory], [e.name for e in entries if not e.directory]

    def list_entries(self, prefix: str) -> list[Listed]:
        """What is directly under `prefix`, with each file's size and modification time as the listing
        tells them (one request; nothing is asked of each entry). Empty as `listdir` is."""
        local = self.local_path(prefix)
        if local is not None:
            return local_entries(local)
        base = self._path(prefix)
        try:
            entries = self._requests.call(f"listing {prefix!r}", lambda: self._backend.ls(base))
        except MISSING:
            return []
        return listed_under(base, entries)

    def __repr__(self) -> str:
        return f"Store({self.display_name!r})"
