"""The one place that talks to fsspec: a read-only key/value view of SOURCE.

Keys are '/'-separated paths relative to the store root. A missing key is
`None` (Zarr treats an absent chunk as fill), every other failure is a
`StoreError` after a bounded number of retries.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

import fsspec
from fsspec.core import url_to_fs

from .errors import NotZarrError, StoreError, StoreTimeoutError

log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors that mean "this key is not there" across fsspec backends.
_MISSING = (FileNotFoundError, KeyError, IsADirectoryError, NotADirectoryError)
# Credentials that may sit in a URL (user:password@host); never log them.
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")


def redact_url(url: str) -> str:
    """`url` without user:password, for log lines and error messages."""
    return _URL_CREDENTIALS.sub("***@", url)


class Store:
    """Read-only access to the keys below `root` on an fsspec file system."""

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        root: str,
        display_name: str,
        retries: int = 3,
        retry_backoff: float = 0.2,
    ) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.display_name = display_name
        self.retries = retries
        self.retry_backoff = retry_backoff
        # Counters a user can see (`zarrfs tree --stats`, the mount's log).
        self.requests = 0
        self.bytes_fetched = 0

    @classmethod
    def open(cls, url: str, storage_options: dict[str, Any] | None = None) -> Store:
        """Open SOURCE (a local path or any fsspec URL, chained ones too)."""
        try:
            fs, root = url_to_fs(url, **(storage_options or {}))
        except (ValueError, ImportError, TypeError) as exc:
            raise NotZarrError(f"cannot open {redact_url(url)}: {exc}") from exc
        return cls(fs, root, redact_url(url))

    def _path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one store operation with retries; FileNotFoundError passes through."""
        for attempt in range(self.retries + 1):
            try:
                self.requests += 1
                return fn()
            except _MISSING:
                raise
            except TimeoutError as exc:
                error: Exception = exc
                kind: type[StoreError] = StoreTimeoutError
            except (OSError, RuntimeError, ValueError) as exc:
                # fsspec backends raise plain OSError, aiohttp errors wrapped in
                # OSError/RuntimeError, or ValueError for bad ranges/bodies.
                error, kind = exc, StoreError
            if attempt < self.retries:
                time.sleep(self.retry_backoff * 2**attempt)
        raise kind(f"{self.display_name}: {what} failed after {self.retries + 1} tries: {error}")

    def get(self, key: str) -> bytes | None:
        """The whole value of `key`, or None if it does not exist."""
        try:
            data = self._call(f"reading {key!r}", lambda: self.fs.cat_file(self._path(key)))
        except _MISSING:
            return None
        self.bytes_fetched += len(data)
        return data

    def get_range(self, key: str, start: int, stop: int) -> bytes | None:
        """Bytes [start, stop) of `key`; negative `start` counts from the end."""
        path = self._path(key)
        try:
            data = self._call(
                f"reading {key!r} [{start}:{stop}]",
                lambda: self.fs.cat_file(path, start=start, end=stop if stop else None),
            )
        except _MISSING:
            return None
        self.bytes_fetched += len(data)
        if len(data) > stop - start:  # (stop 0 with a negative start: the last -start bytes)
            # The server ignored the Range header (python -m http.server does) and sent the whole object.
            data = data[start:stop] if stop else data[start:]
        return data

    def exists(self) -> bool:
        """Whether the store root exists at all (for telling 'missing' from 'not Zarr')."""
        try:
            return bool(self._call("checking the root", lambda: self.fs.exists(self.root)))
        except StoreError:
            return True  # cannot tell; let the caller say "not Zarr"

    def size(self, key: str) -> int | None:
        try:
            info = self._call(f"stat {key!r}", lambda: self.fs.info(self._path(key)))
        except _MISSING:
            return None
        size = info.get("size")
        return int(size) if size is not None else None

    def listdir(self, prefix: str) -> tuple[list[str], list[str]]:
        """(sub-directory names, file names) directly under `prefix`.

        An empty listing is returned for a prefix that does not exist or a
        store that cannot list (plain HTTP without an index page).
        """
        base = self._path(prefix)
        try:
            entries = self._call(f"listing {prefix!r}", lambda: self.fs.ls(base, detail=True))
        except _MISSING:
            return [], []
        dirs: list[str] = []
        files: list[str] = []
        strip = len(base.rstrip("/")) + 1
        for entry in entries:
            name = str(entry["name"]).rstrip("/")
            if not name.startswith(base.rstrip("/") + "/") and base:
                # HTTP listings may return absolute URLs of other places.
                continue
            child = name[strip:]
            if not child or "/" in child:
                continue
            (dirs if entry.get("type") == "directory" else files).append(child)
        return dirs, files

    def __repr__(self) -> str:
        return f"Store({self.display_name!r})"
