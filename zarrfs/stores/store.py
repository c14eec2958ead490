"""The one place that talks to fsspec: a read-only key/value view of SOURCE.

Keys are '/'-separated paths relative to the store root. A missing key is
`None` (Zarr treats an absent chunk as fill), every other failure is a
`StoreError` after a bounded number of retries.

Every request is bounded three ways: at most `max_concurrency` in flight (a
semaphore), at most `timeout` seconds each (the coroutine of an async
file system is cancelled, which also closes its connection), and at most
`retries` further tries with jittered exponential backoff.
"""

from __future__ import annotations

import datetime
import email.utils
import inspect
import logging
import os
import random
import stat
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import fsspec
from fsspec.asyn import AsyncFileSystem, sync
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from ..byte_ranges import ByteRequest, OffsetRequest, RangeRequest
from ..errors import NotZarrError, StoreError
from ..options import MAX_BACKOFF, StoreOptions
from . import http_listing
from .disk_cache import DiskCache, Fetched
from .guarded_references import GuardedReferenceFileSystem
from .http import HttpReader
from .icechunk import IcechunkFileSystem, local_repository, open_session_store, split_virtual_options
from .redact import redact_url
from .references import PROTOCOL, is_reference_source, reference_options
from .trust import HTTP_SCHEMES, Refusal, guarded_options, trust_rule

log = logging.getLogger(__name__)

# Errors that mean "this key is not there" across fsspec backends.
_MISSING = (FileNotFoundError, KeyError, IsADirectoryError, NotADirectoryError)
# Errors that another try cannot fix: fail at once instead of after the backoff.
_PERMANENT = (PermissionError,)
# A zipped OME-Zarr (RFC-9): a zip archive with the hierarchy at its top.
OZX_SUFFIX = ".ozx"


# fsspec's local file system holds no state a store could change: every local store reads through this one.
_LOCAL_FS = LocalFileSystem()


def zipped_ome_zarr(url: str) -> str:
    """`zip::URL` for a bare `*.ozx` SOURCE (local or remote), so that it opens as the zip archive it is.

    A chained URL (`zip://inside::x.ozx`) already says how to open it and is
    left as given.
    """
    if "::" in url or not urlsplit(url).path.rstrip("/").lower().endswith(OZX_SUFFIX):
        return url
    return f"zip::{url}"


def backend_defaults(protocol: str, options: StoreOptions) -> dict[str, Any]:
    """Storage options zarrfs sets for a backend unless the user set them.

    s3fs: one GET per whole object (with its default max_concurrency > 1 it
    first sends a HEAD for the size), and botocore's own timeouts and retries
    aligned with ours instead of multiplying them (its default: 60 s, 5 tries).
    """
    if protocol in ("s3", "s3a"):
        return {"max_concurrency": 1,
                "config_kwargs": {"connect_timeout": options.timeout, "read_timeout": options.timeout,
                                  "retries": {"max_attempts": 1}}}
    return {}


def _identity(url: str, storage_options: dict[str, Any]) -> str:
    """What names a store's objects: its URL without credentials, and the endpoint the options point at."""
    client = storage_options.get("client_kwargs") or {}
    endpoint = storage_options.get("endpoint_url") or (client.get("endpoint_url") if isinstance(client, dict) else None)
    return f"{redact_url(url)} {redact_url(str(endpoint))}" if endpoint else redact_url(url)


def _merged(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`given` over `defaults`, one level of nested dicts merged too (config_kwargs)."""
    merged = dict(defaults)
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


@dataclass(frozen=True)
class Listed:
    """One entry of a listing: a name directly under the listed prefix."""

    name: str
    directory: bool
    size: int  # bytes of a file as listed (0 for a directory)
    mtime_ns: int | None  # as the listing tells it; None when it does not (HTTP index pages)


# Where fsspec's backends put an entry's modification time: local (seconds), S3 (a datetime),
# GCS/Azure (an ISO string or datetime), zip (a date tuple).
_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modified", "date_time")


def modified_ns(entry: dict[str, Any]) -> int | None:
    """An fsspec listing entry's modification time in ns since the epoch, or None when it has none."""
    for key in _MTIME_KEYS:
        value = entry.get(key)
        if value is None:
            continue
        if isinstance(value, int | float):
            return int(value * 1_000_000_000)
        if isinstance(value, datetime.datetime):
            moment = value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
            return int(moment.timestamp() * 1_000_000_000)
        if isinstance(value, tuple) and len(value) == 6:  # zipfile's (year, month, day, h, m, s)
            return int(datetime.datetime(*value, tzinfo=datetime.timezone.utc).timestamp() * 1_000_000_000)
        if isinstance(value, str):
            try:
                moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            moment = moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)
            return int(moment.timestamp() * 1_000_000_000)
    return None


def _local_entries(path: str) -> list[Listed]:
    """A local directory's entries: a directory's type comes from the listing itself (no `stat` of each,
    which a folder of 10,000 stores would pay), a file's size and time from one `stat`. What vanishes
    between the two is left out; a symlink is what it points to."""
    listed: list[Listed] = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_dir():
                        listed.append(Listed(entry.name, True, 0, None))
                        continue
                    status = entry.stat()
                except OSError:
                    continue
                listed.append(Listed(entry.name, False, status.st_size, status.st_mtime_ns))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise StoreError(f"{path}: cannot list: {exc.strerror}") from exc
    return listed


# The version of a key the store does not have: a chunk of fill value.
ABSENT = "absent"


@dataclass(frozen=True)
class Versioned:
    """A key's value and the version it is, as told by the answer that carried the value (no
    request of its own): what an open file checks each chunk it reads against
    (engine/chunk_versions.py)."""

    data: bytes | bytearray | None  # None: no such key
    # (inode, size, mtime_ns) of a local file; the ETag (else Last-Modified) an HTTP answer carried;
    # ABSENT for no such key; None when the store tells none (fsspec's other backends).
    version: Hashable | None
    # When the value was last modified (a local file's mtime; an answer's Last-Modified), ns since the
    # epoch by the clock `clock_offset_ns` ahead of ours (None: ours): a change after a reader began is
    # a change under it.
    modified_ns: int | None = None
    clock_offset_ns: int | None = None  # the server's clock minus ours, from the answer's Date


def _http_moment(text: str | None) -> int | None:
    """An HTTP date (Last-Modified, Date) in ns since the epoch, None when absent or unreadable."""
    if not text:
        return None
    try:
        return int(email.utils.parsedate_to_datetime(text).timestamp()) * 1_000_000_000
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _remote_versioned(data: bytes | bytearray | None, version: str | None, modified: Any, date: Any,
                      received_ns: int) -> Versioned:
    """A remote answer's value and version, its Last-Modified told by the server's clock (its Date)."""
    modified_ns = modified if isinstance(modified, int) else _http_moment(modified) \
        if isinstance(modified, str) else None
    server_ns = _http_moment(date) if isinstance(date, str) else None
    if modified_ns is None or server_ns is None:
        return Versioned(data, version)
    return Versioned(data, version, modified_ns, server_ns - received_ns)


def _read_local(path: str) -> Versioned:
    """A local file's bytes and its identity, both from one descriptor. A file written while it was
    read (its size or mtime differ after the read from before) is an OSError: the retry reads it again."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        before = os.fstat(fd)
        if stat.S_ISDIR(before.st_mode):
            raise IsADirectoryError(path)
        with open(fd, "rb", buffering=0, closefd=False) as file:  # the descriptor stays ours to fstat
            data = file.readall()
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or len(data) != after.st_size:
        raise OSError(f"{path} changed while it was read")
    return Versioned(data, (after.st_ino, after.st_size, after.st_mtime_ns), after.st_mtime_ns)


async def _s3_get(fs: Any, path: str) -> Versioned:
    """A whole S3 object and the ETag of the GET that carried it, as s3fs's `cat_file` GETs it
    (which drops the answer's headers); a missing key is FileNotFoundError, as s3fs says it."""
    bucket, key, version_id = fs.split_path(path)
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key,
                                 **({"VersionId": version_id} if version_id else {}))
    try:
        data = await response["Body"].read()
    finally:
        response["Body"].close()
    etag = response.get("ETag")
    modified = response.get("LastModified")
    modified_ns = int(modified.timestamp()) * 1_000_000_000 if isinstance(modified, datetime.datetime) else None
    date = ((response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}).get("date")
    return _remote_versioned(data, str(etag) if etag else None, modified_ns, date, time.time_ns())


def _fsspec_bounds(byte_range: ByteRequest | None) -> tuple[int | None, int | None]:
    """(start, end) as fsspec's `cat_file` takes them: a suffix is a negative start with no end."""
    if byte_range is None:
        return None, None
    if isinstance(byte_range, RangeRequest):
        return byte_range.start, byte_range.end
    if isinstance(byte_range, OffsetRequest):
        return byte_range.start, None
    return -byte_range.length, None


def _http_version(validators: dict[str, str]) -> str | None:
    """What tells versions of an HTTP object apart: its ETag, else its Last-Modified (None: neither sent)."""
    return validators.get("ETag") or validators.get("Last-Modified")


class StoreStats:
    """Request counters, updated from many loader threads at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0  # attempts sent, retries included
        self.retries = 0
        self.failures = 0  # requests that failed after every try
        self.bytes_fetched = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.disk_cache: DiskCache | None = None  # its figures are reported with these

    def started(self) -> None:
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def finished(self, nbytes: int = 0) -> None:
        with self._lock:
            self.in_flight -= 1
            self.bytes_fetched += nbytes

    def count(self, field: str) -> None:
        with self._lock:
            setattr(self, field, getattr(self, field) + 1)

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            figures: dict[str, Any] = {
                "requests": self.requests, "retries": self.retries, "failures": self.failures,
                "bytes_fetched": self.bytes_fetched, "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight}
        if self.disk_cache is not None:
            figures["disk_cache"] = self.disk_cache.describe()
        return figures


def _http_ls(reader: HttpReader, url: str, detail: bool = True) -> list[dict[str, Any]]:
    return http_listing.listing(reader, url)  # `listdir` asks for details; they are all there are


# What a plain http(s) source does with zarrfs's own client instead of fsspec's file system.
_HTTP_METHODS: dict[str, Callable[..., Any]] = {
    "cat_file": HttpReader.cat_file, "fetch": HttpReader.fetch, "ls": _http_ls, "exists": http_listing.exists,
}


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
        self._slots = threading.BoundedSemaphore(self.options.max_concurrency)
        # Async backends (HTTP, S3, GCS) run on fsspec's event loop: calling
        # their coroutines directly lets a timeout cancel the request. (fsspec's HTTP is one.)
        self._async = http is not None or (isinstance(self._fs, AsyncFileSystem) and not self._fs.asynchronous)
        # `identity`: what tells this store's answers from any other's in a shared disk cache (None: not
        # remote, or nothing tells); `immutable`: its answers never change (an Icechunk snapshot).
        self.disk_cache = DiskCache(self.options.disk_cache, identity, immutable) \
            if self.options.disk_cache is not None and identity is not None and self._async else None
        self.stats.disk_cache = self.disk_cache

    @classmethod
    def open(cls, url: str, storage_options: dict[str, Any] | None = None,
             options: StoreOptions | None = None) -> Store:
        """Open SOURCE (a local path or any fsspec URL, chained ones too)."""
        options = options or StoreOptions()
        if options.ref is not None or local_repository(url):
            return cls.open_icechunk(url, storage_options, options)
        url = zipped_ome_zarr(url)
        protocol = url.split("::")[-1].partition("://")[0] if "://" in url else "file"
        given, _ = split_virtual_options(dict(storage_options or {}))  # those are for an Icechunk repository's
        try:
            if is_reference_source(url, given, options.virtual_chunks):
                return cls._open_references(url, given, options)
            # What the source may make zarrfs read besides itself: a redirect's target (trust.py).
            rule = trust_rule(url, options.virtual_chunks)
        except ValueError as exc:
            raise NotZarrError(f"cannot open {redact_url(url)}: {exc}") from exc
        # Plain http(s) URLs read their objects with zarrfs's own client (http.py); given storage
        # options (headers, auth, client arguments) or credentials in the URL, fsspec does it all.
        plain_http = (protocol in HTTP_SCHEMES and "::" not in url and not given
                      and "@" not in urlsplit(url).netloc)
        if plain_http:  # fsspec's root for an http(s) URL is the URL itself; its file system waits
            return cls(lambda: url_to_fs(url)[0], url, redact_url(url), options, HttpReader(options.timeout, rule),
                       identity=redact_url(url))
        if "::" not in url:
            given = guarded_options(protocol, given, rule)
        kwargs = _merged(backend_defaults(protocol, options), given)
        if "::" in url and kwargs and protocol not in kwargs:
            # A chained URL (zip::s3://...): fsspec gives options named by a protocol to that layer, the rest
            # to the outermost (the archive): the given ones are for the place the bytes come from.
            kwargs = {protocol: kwargs}
        if protocol == "file" and "::" not in url and not kwargs:
            # A plain local path (every store of a local share): the one local file system, its root the
            # absolute path url_to_fs would give, without parsing a chain (url_to_fs: ~1/10 of a store's open).
            return cls(_LOCAL_FS, _LOCAL_FS._strip_protocol(url), redact_url(url), options,
                       identity=_identity(url, given))
        fs, root = cls._opened_fs(url, protocol, lambda: url_to_fs(url, **kwargs))
        return cls(fs, root, redact_url(url), options, identity=_identity(url, given))

    @classmethod
    def _open_references(cls, url: str, given: dict[str, Any], options: StoreOptions) -> Store:
        """A reference set, its every target judged by the trust rule of the reference file's origin."""
        _, given = reference_options(url, given)
        rule = trust_rule(str(given["fo"]), options.virtual_chunks)
        fs, root = cls._opened_fs(url, PROTOCOL, lambda: (GuardedReferenceFileSystem(rule=rule, **given), ""))
        return cls(fs, root, redact_url(url), options, identity=_identity(url, given))

    @staticmethod
    def _opened_fs(url: str, protocol: str, make: Callable[[], tuple[fsspec.AbstractFileSystem, str]],
                 ) -> tuple[fsspec.AbstractFileSystem, str]:
        """`make()`'s file system and root, its failures as NotZarrError."""
        try:
            return make()
        except FileNotFoundError as exc:
            raise NotZarrError(f"cannot open {redact_url(url)}: {exc.filename or exc} does not exist "
                               "(check the path or URL)") from exc
        except ValueError as exc:
            what = "is not a kerchunk reference set (JSON or Parquet)" if protocol == PROTOCOL else "failed"
            raise NotZarrError(f"cannot open {redact_url(url)}: {what}: {exc}") from exc
        except (ImportError, TypeError, OSError) as exc:
            raise NotZarrError(f"cannot open {redact_url(url)}: {exc}") from exc

    @classmethod
    def open_icechunk(cls, source: str, storage_options: dict[str, Any] | None = None,
                      options: StoreOptions | None = None) -> Store:
        """A read-only session of the Icechunk repository at SOURCE, at `options.ref` (default branch main)."""
        options = options or StoreOptions()
        session_store = open_session_store(source, storage_options or {}, options.ref, options.virtual_chunks)
        name = f"{redact_url(source)}@{options.ref or 'main'}"
        snapshot = getattr(getattr(session_store, "session", None), "snapshot_id", None)
        identity = None if local_repository(source) or not snapshot else f"{redact_url(source)}@{snapshot}"
        return cls(IcechunkFileSystem(session_store), "", name, options, identity=identity, immutable=True)

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

    def _invoke(self, method: str | Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fs.<method>(*args, **kwargs) within the per-request timeout (a coroutine function: run on the
        file system's loop, given it first; another function: called as it is)."""
        if inspect.iscoroutinefunction(method):  # on the file system's loop, with it
            return sync(self.fs.loop, method, self.fs, *args, timeout=self.options.timeout, **kwargs)
        if callable(method):
            return method(*args, **kwargs)
        if self._http is not None and method in _HTTP_METHODS:  # each bounds its own time
            return _HTTP_METHODS[method](self._http, *args, **kwargs)
        if self._async:
            return sync(self.fs.loop, getattr(self.fs, "_" + method), *args, timeout=self.options.timeout, **kwargs)
        return getattr(self.fs, method)(*args, **kwargs)

    def _call(self, what: str, method: str | Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One store operation with retries; FileNotFoundError passes through."""
        tries = self.options.retries + 1
        for attempt in range(tries):
            with self._slots:
                self.stats.started()
                nbytes = 0
                try:
                    result = self._invoke(method, *args, **kwargs)
                    body = result[0] if isinstance(result, tuple) else \
                        result.data if isinstance(result, Versioned) else result  # (HttpReader.fetch's)
                    nbytes = len(body) if isinstance(body, bytes | bytearray) else 0
                    return result
                except _MISSING:
                    raise
                except TimeoutError:
                    error = f"no complete answer within {self.options.timeout:g} s"
                except _PERMANENT as exc:
                    self.stats.count("failures")
                    raise StoreError(f"{self.display_name}: {what} refused: {exc}") from exc
                except Exception as exc:  # noqa: BLE001 - backends raise aiohttp, botocore and OS errors alike
                    # Transient until proven otherwise: 5xx answers, resets,
                    # truncated bodies, refused connections while a server restarts. A backend
                    # marks what no retry changes `permanent` (a damaged Icechunk file).
                    error = redact_url(f"{type(exc).__name__}: {exc}".strip().rstrip(":"))
                    if getattr(exc, "permanent", False) is True:
                        self.stats.count("failures")
                        raise StoreError(f"{self.display_name}: {what} failed: {error}") from exc
                finally:
                    self.stats.finished(nbytes)
            if attempt + 1 < tries:
                self.stats.count("retries")
                delay = min(MAX_BACKOFF, self.options.retry_backoff * 2**attempt) * random.uniform(0.5, 1.0)
                log.debug("%s: %s: %s; retrying in %.2f s", self.display_name, what, error, delay)
                time.sleep(delay)
        self.stats.count("failures")
        raise StoreError(f"{self.display_name}: {what} failed after {tries} tries: {error}")

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
                return self._call(what, _read_local, local)
            if self.disk_cache is not None:
                fetched = self.disk_cache.get_fetched(key, None, lambda validators: self._fetch(key, None, validators))
                return Versioned(fetched.data, ABSENT if fetched.data is None else _http_version(fetched.validators))
            if self._http is not None:
                data, got = self._call(what, "fetch", self._path(key))
                return _remote_versioned(data, _http_version(got), got.get("Last-Modified"), got.get("Date"),
                                         time.time_ns())
            if self._async and hasattr(self.fs, "_call_s3"):  # s3fs
                return self._call(what, _s3_get, self._path(key))
        except _MISSING:
            return Versioned(None, ABSENT)
        data = self.get(key)
        return Versioned(data, ABSENT if data is None else None)

    def get_range(self, key: str, byte_range: ByteRequest) -> bytes | bytearray | None:
        """The bytes of `key` that `byte_range` asks for (fewer past its end), or None if it does not exist."""
        return self._read(key, byte_range)

    def get_run(self, key: str, span: RangeRequest, pieces: list[tuple[int, int]]) -> bytes | bytearray | None:
        """The bytes `span` asks for of `key` in one request, as `get_range`; `pieces` are the ranges
        [start, end) in it the reader uses (a shard's inner chunks), which the disk cache keeps one by one."""
        if self.disk_cache is None:
            return self._read(key, span)
        return self.disk_cache.get_run(key, span, pieces, lambda validators: self._fetch(key, span, validators))

    def _read(self, key: str, byte_range: ByteRequest | None) -> bytes | bytearray | None:
        if self.disk_cache is None:
            return self._fetch(key, byte_range, None).data
        return self.disk_cache.get(key, byte_range, lambda validators: self._fetch(key, byte_range, validators))

    def _fetch(self, key: str, byte_range: ByteRequest | None, validators: dict[str, str] | None) -> Fetched:
        """`key` (the bytes `byte_range` asks for; None: all of it) from the store, with its validators
        when the store tells them; given `validators` of a kept copy, `unchanged` when that copy is current."""
        what = f"reading {key!r}" if byte_range is None else f"reading {key!r} {byte_range}"
        start, end = _fsspec_bounds(byte_range)
        try:
            if self._http is not None and self.disk_cache is not None:
                data, got = self._call(what, "fetch", self._path(key), start=start, end=end, validators=validators)
                if data is None:
                    return Fetched(None, got or validators or {}, unchanged=True)
            else:
                got = self._version(key, validators) if validators is not None else {}
                if validators and got and got == validators:
                    return Fetched(None, got, unchanged=True)
                data = self._call(what, "cat_file", self._path(key), start=start, end=end) \
                    if byte_range is not None else self._call(what, "cat_file", self._path(key))
        except _MISSING:
            return Fetched(None)
        nbytes = None if byte_range is None else byte_range.nbytes
        if byte_range is not None and nbytes is not None and len(data) > nbytes:
            # The server ignored the Range header (python -m http.server does) and sent the whole object.
            # (An offset's length is the object's to tell: an answer to one is taken as it comes.)
            data = data[byte_range.within(len(data))]
        return Fetched(data, got)

    def _version(self, key: str, validators: dict[str, str]) -> dict[str, str]:
        """The ETag of `key` as the store's `info` tells it ({} when it does not), to revalidate a copy."""
        info = self._call(f"checking {key!r}", "info", self._path(key))
        etag = info.get("ETag") or info.get("etag") if isinstance(info, dict) else None
        return {"ETag": str(etag)} if etag else {}

    def exists(self) -> bool:
        """Whether the store root exists at all (for telling 'missing' from 'not Zarr')."""
        try:
            return bool(self._call("checking the root", "exists", self.root))
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
            return _local_entries(local)
        base = self._path(prefix)
        try:
            entries = self._call(f"listing {prefix!r}", "ls", base, detail=True)
        except _MISSING:
            return []
        listed: list[Listed] = []
        # Names come back as full paths; a root of '' (the top of a zip archive) has no '/' to strip.
        parent = base.rstrip("/") + "/" if base else ""
        for entry in entries:
            name = str(entry["name"]).rstrip("/")
            if not name.startswith(parent):
                # HTTP listings may return absolute URLs of other places.
                continue
            child = name[len(parent):]
            if not child or "/" in child:
                continue
            directory = entry.get("type") == "directory"
            size = entry.get("size") if not directory else 0
            listed.append(Listed(child, directory, int(size) if isinstance(size, int | float) else 0,
                                 modified_ns(entry)))
        return listed

    def __repr__(self) -> str:
        return f"Store({self.display_name!r})"
