"""Icechunk repositories as SOURCE: a read-only session at a branch, tag or snapshot, seen as a key store.

Icechunk (transactional, versioned Zarr) keeps snapshots, manifests and
chunks under its own layout; its Python package gives a zarr-python `Store`
(`session.store`, async `get` / `list_dir` / `exists`) over one snapshot.
`IcechunkFileSystem` presents that store as an fsspec async file system, so
the same `Store` class reads it with the same timeouts, retries, concurrency
bound and counters as every other source.

Needs the optional `icechunk` extra (`pip install 'zarrfs[icechunk]'`).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from fsspec.asyn import AsyncFileSystem

from ..errors import NotZarrError

# A repository's top level: refs/ (branches and tags) and snapshots/, whatever else its version adds.
LAYOUT_DIRECTORIES = ("refs", "snapshots")


def load_icechunk() -> Any:
    try:
        import icechunk
    except ImportError:
        raise NotZarrError("this is an Icechunk repository: reading it needs the icechunk package "
                           "(`pip install 'zarrfs[icechunk]'`)") from None
    # Its own log warns that local storage is unsafe for concurrent commits: zarrfs never commits.
    icechunk.set_logs_filter("error")
    return icechunk


def looks_like_repository(names: list[str] | set[str]) -> bool:
    """Whether a directory listing is an Icechunk repository's top level."""
    return all(name in names for name in LAYOUT_DIRECTORIES)


def local_repository(source: str) -> bool:
    """Whether SOURCE is a local directory holding an Icechunk repository (no Zarr metadata at its top)."""
    path = source.removeprefix("file://")
    return "://" not in path and all(os.path.isdir(os.path.join(path, d)) for d in LAYOUT_DIRECTORIES)


def open_session_store(source: str, storage_options: dict[str, Any], ref: str | None) -> Any:
    """The zarr-python store of a read-only session of the repository at SOURCE, at `ref` (default: branch main)."""
    icechunk = load_icechunk()
    try:
        repository = icechunk.Repository.open(_storage(icechunk, source, storage_options))
    except icechunk.IcechunkError as exc:
        raise NotZarrError(f"{source}: not an Icechunk repository, or it cannot be read: {_first_line(exc)}") from None
    return _session(icechunk, repository, source, ref).store


def _session(icechunk: Any, repository: Any, source: str, ref: str | None) -> Any:
    """A read-only session at `ref`, tried as a branch, then a tag, then a snapshot id."""
    if ref is None:
        ref = "main"
    failures = []
    for kind in ("branch", "tag", "snapshot_id"):
        try:
            return repository.readonly_session(**{kind: ref})
        except (icechunk.IcechunkError, ValueError) as exc:
            failures.append(f"{kind}: {_first_line(exc)}")
    names = _ref_names(repository)
    raise NotZarrError(f"{source}: --ref {ref!r} names no branch, tag or snapshot of the repository"
                       f"{names} ({'; '.join(failures)})")


def _ref_names(repository: Any) -> str:
    try:
        branches = sorted(repository.list_branches())
        tags = sorted(repository.list_tags())
    except Exception:  # noqa: BLE001 - only a hint for the message
        return ""
    return f" (branches: {', '.join(branches) or 'none'}; tags: {', '.join(tags) or 'none'})"


def _first_line(exc: BaseException) -> str:
    return next((line.strip(" |x") for line in str(exc).splitlines() if line.strip(" |x")), type(exc).__name__)


def _storage(icechunk: Any, source: str, options: dict[str, Any]) -> Any:
    """Icechunk storage for a local path, s3:// or gs:// URL; storage options in fsspec's spelling."""
    url = urlsplit(source)
    if url.scheme in ("", "file"):
        return icechunk.local_filesystem_storage(url.path if url.scheme else source)
    bucket, prefix = url.netloc, url.path.strip("/") or None
    if url.scheme in ("s3", "s3a"):
        client = options.get("client_kwargs") or {}
        endpoint = options.get("endpoint_url") or client.get("endpoint_url")
        return icechunk.s3_storage(
            bucket=bucket, prefix=prefix, endpoint_url=endpoint, allow_http=bool(endpoint and endpoint.startswith("http:")),
            region=options.get("region") or client.get("region_name"),
            access_key_id=options.get("key"), secret_access_key=options.get("secret"),
            session_token=options.get("token"), anonymous=options.get("anon"),
            from_env=None if options.get("anon") or options.get("key") else True,
            force_path_style=bool(endpoint))
    if url.scheme in ("gs", "gcs"):
        return icechunk.gcs_storage(bucket=bucket, prefix=prefix, anonymous=options.get("anon") or options.get("token") == "anon",
                                    from_env=None if options.get("anon") else True)
    raise NotZarrError(f"{source}: Icechunk repositories are read from local paths, s3:// or gs:// URLs")


class IcechunkFileSystem(AsyncFileSystem):
    """Read-only fsspec view of one Icechunk session's zarr store: keys are paths, `ls` lists a prefix."""

    protocol = "icechunk"
    cachable = False  # one instance per session, never shared through fsspec's instance cache

    def __init__(self, session_store: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._store = session_store

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        from zarr.abc.store import (
            OffsetByteRequest,
            RangeByteRequest,
            SuffixByteRequest,
        )
        from zarr.core.buffer import default_buffer_prototype

        byte_range: Any = None
        if start is not None and start < 0 and end is None:
            byte_range = SuffixByteRequest(-start)
        elif end is not None and start:
            byte_range = RangeByteRequest(start, end)
        elif start:
            byte_range = OffsetByteRequest(start)
        # A prefix ([0, end): "at most end bytes", how metadata is read) is fetched whole and cut here:
        # Icechunk fails a range that runs past the end of a value instead of shortening it.
        key = path.strip("/")
        try:
            buffer = await self._store.get(key, default_buffer_prototype(), byte_range)
        except Exception as exc:
            # Icechunk refuses keys that cannot be Zarr keys ('invalid zarr key format'): absent by definition.
            if "invalid zarr key" in str(exc):
                raise FileNotFoundError(path) from None
            raise
        if buffer is None:
            raise FileNotFoundError(path)
        data = buffer.to_bytes()
        return data[:end] if byte_range is None and end is not None else data

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        prefix = path.strip("/")
        entries = []
        async for name in self._store.list_dir(prefix):
            full = f"{prefix}/{name}" if prefix else name
            entries.append({"name": full, "type": "file" if await self._is_key(full) else "directory", "size": None})
        return entries if detail else [entry["name"] for entry in entries]

    async def _is_key(self, key: str) -> bool:
        try:
            return bool(await self._store.exists(key))
        except Exception as exc:
            if "invalid zarr key" in str(exc):  # a prefix such as an array's name: not a key
                return False
            raise

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        key = path.strip("/")
        return not key or await self._is_key(key)

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if await self._exists(path):
            return {"name": path.strip("/"), "type": "file", "size": None}
        raise FileNotFoundError(path)
