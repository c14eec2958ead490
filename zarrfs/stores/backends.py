"""What `Store` asks of a file system, one typed method each, for the three kinds it reads through.

`FsBackend` calls a synchronous fsspec file system (local, zip, reference
sets, Icechunk's); `AsyncFsBackend` runs an async one's coroutines (HTTP, S3,
GCS) on its event loop, each within the per-request timeout, so that a
timeout cancels the request and closes its connection; `HttpBackend` is a
plain http(s) source read through zarrfs's own client (http.py), which bounds
its own time. Each method is fsspec's of the same name; a missing key raises
what fsspec raises (FileNotFoundError and kin).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import fsspec
from fsspec.asyn import AsyncFileSystem, sync

from ..byte_ranges import ByteRequest, OffsetRequest, RangeRequest
from . import http_listing
from .http import HttpReader

T = TypeVar("T")


def fsspec_bounds(byte_range: ByteRequest | None) -> tuple[int | None, int | None]:
    """(start, end) as fsspec's `cat_file` takes them: a suffix is a negative start with no end."""
    if byte_range is None:
        return None, None
    if isinstance(byte_range, RangeRequest):
        return byte_range.start, byte_range.end
    if isinstance(byte_range, OffsetRequest):
        return byte_range.start, None
    return -byte_range.length, None


class FsBackend:
    """A synchronous fsspec file system, called as it is."""

    def __init__(self, fs: fsspec.AbstractFileSystem) -> None:
        self.fs = fs

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes | bytearray:
        """The object at `path`, or bytes [start, end) of it (a negative start, no end: a suffix)."""
        return self.fs.cat_file(path, start=start, end=end)

    def info(self, path: str) -> dict[str, Any]:
        return self.fs.info(path)

    def ls(self, path: str) -> list[dict[str, Any]]:
        # Asked of the server every time: fsspec's object-store clients (s3fs, gcsfs) keep each listing
        # until told otherwise, so a bucket prefix would show its stores as first listed however often
        # the mount lists again. When to list again is the mount's to decide (--metadata-ttl).
        self.fs.invalidate_cache(path)
        return self.fs.ls(path, detail=True)

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))


class LocalBackend(FsBackend):
    """A local directory: whole files read with one `open` and `read`, not through fsspec's file object
    (a share's `find` reads a metadata document per store: 4.5 against 11 us each). Ranges go to fsspec."""

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes | bytearray:
        if start is not None or end is not None:
            return super().cat_file(path, start, end)
        with open(path, "rb", buffering=0) as file:
            return file.readall()


class AsyncFsBackend(FsBackend):
    """An async fsspec file system, each call a coroutine run on its loop within `timeout` seconds."""

    def __init__(self, fs: AsyncFileSystem, timeout: float) -> None:
        super().__init__(fs)
        self.async_fs = fs
        self.timeout = timeout

    def run(self, coroutine_function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`coroutine_function(*args)` awaited on the file system's loop, cancelled after the timeout."""
        return sync(self.async_fs.loop, coroutine_function, *args, timeout=self.timeout)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes | bytearray:
        return sync(self.async_fs.loop, self.async_fs._cat_file, path, start=start, end=end, timeout=self.timeout)

    def info(self, path: str) -> dict[str, Any]:
        return self.run(self.async_fs._info, path)

    def ls(self, path: str) -> list[dict[str, Any]]:
        self.async_fs.invalidate_cache(path)  # as FsBackend.ls
        return sync(self.async_fs.loop, self.async_fs._ls, path, detail=True, timeout=self.timeout)

    def exists(self, path: str) -> bool:
        return bool(self.run(self.async_fs._exists, path))


class HttpBackend:
    """A plain http(s) source: reads and listings through zarrfs's client; `info` (which only a
    revalidation without conditional GETs would ask) through fsspec's file system, made on first use."""

    def __init__(self, reader: HttpReader, fsspec_backend: Callable[[], AsyncFsBackend]) -> None:
        self.reader = reader
        self._fsspec_backend = fsspec_backend

    def cat_file(self, path: str, start: int | None = None, end: int | None = None) -> bytes | bytearray:
        return self.reader.cat_file(path, start, end)

    def fetch(self, path: str, start: int | None = None, end: int | None = None,
              validators: dict[str, str] | None = None) -> tuple[bytes | bytearray | None, dict[str, str]]:
        """As `HttpReader.fetch`: the bytes (None: `validators` name the current version) and the
        answer's validators."""
        return self.reader.fetch(path, start, end, validators)

    def info(self, path: str) -> dict[str, Any]:
        return self._fsspec_backend().info(path)

    def ls(self, path: str) -> list[dict[str, Any]]:
        return http_listing.listing(self.reader, path)  # the index page's entries: all the details there are

    def exists(self, path: str) -> bool:
        return http_listing.exists(self.reader, path)


Backend = FsBackend | AsyncFsBackend | HttpBackend
