"""Icechunk repositories as SOURCE: a read-only session at a branch, tag or snapshot, seen as a key store.

Icechunk (transactional, versioned Zarr) keeps snapshots, manifests and
chunks under its own layout; its Python package gives a zarr-python `Store`
(`session.store`, async `get` / `list_dir` / `exists`) over one snapshot.
`IcechunkFileSystem` presents that store as an fsspec async file system, so
the same `Store` class reads it with the same timeouts, retries, concurrency
bound and counters as every other source.

Two on-disk formats: format 1 (icechunk 1.x, and 2.x with spec_version=1)
has `refs/` and `snapshots/` at its top; format 2 (icechunk 2.x's default)
has a `repo` object and `snapshots/`, no `refs/`. icechunk 2 reads both,
icechunk 1 only format 1, and icechunk 2 needs Python >= 3.12.

Virtual chunks point into other files through the containers the
repository's config declares (`file:///data/nc/`, `s3://bucket/`). Following
them reads whatever the repository points at, so a container is authorized
only when it lies under a prefix the user names (`--virtual-chunks PREFIX`,
a plain path meaning `file://` + that absolute path; compared as trust.py
compares every target); nothing is followed by default. Credentials of
remote containers come from storage options spelled `virtual.KEY`
(`-S virtual.key=@env:NAME`, fsspec's names: key, secret, token, anon), so
they take the same way off the command line and out of logs as every other
credential; without them, from the environment. A chunk in a
container not authorized is a permanent error that names the container and
the option (EIO, not retried).

Needs the optional `icechunk` extra (`pip install 'zarrfs[icechunk]'`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any
from urllib.parse import urlsplit

from fsspec.asyn import AsyncFileSystem

from ..errors import IcechunkReadError, NotZarrError
from .trust import TrustRule

log = logging.getLogger(__name__)

SNAPSHOTS = "snapshots"
FORMAT1_REFS = "refs"  # a directory: branches and tags
FORMAT2_REPO = "repo"  # an object: branches, tags and config
# Storage options for virtual chunk containers, not for the repository's own storage.
VIRTUAL_OPTION_PREFIX = "virtual."
VIRTUAL_CHUNKS_OPTION = "--virtual-chunks"
# What icechunk says when a chunk points into a container nobody authorized.
_UNAUTHORIZED = re.compile(r"resolves to the url prefix (\S+?),? to be able")
_NEWER_FORMAT = "please upgrade"


def load_icechunk() -> Any:
    try:
        import icechunk
    except ImportError:
        raise NotZarrError("this is an Icechunk repository: reading it needs the icechunk package "
                           "(`pip install 'zarrfs[icechunk]'`)") from None
    # Its own log warns that local storage is unsafe for concurrent commits: zarrfs never commits.
    icechunk.set_logs_filter("error")
    return icechunk


def looks_like_repository(directories: list[str] | set[str], files: list[str] | set[str]) -> bool:
    """Whether a directory listing is an Icechunk repository's top level (format 1 or 2)."""
    return SNAPSHOTS in directories and (FORMAT1_REFS in directories or FORMAT2_REPO in files)


def local_repository(source: str) -> bool:
    """Whether SOURCE is a local directory holding an Icechunk repository (no Zarr metadata at its top)."""
    path = source.removeprefix("file://")
    if "://" in path or not os.path.isdir(os.path.join(path, SNAPSHOTS)):
        return False
    return os.path.isdir(os.path.join(path, FORMAT1_REFS)) or os.path.isfile(os.path.join(path, FORMAT2_REPO))


def split_virtual_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the repository's storage options, the virtual chunk containers' ones with `virtual.` taken off)."""
    own = {k: v for k, v in options.items() if not k.startswith(VIRTUAL_OPTION_PREFIX)}
    virtual = {k.removeprefix(VIRTUAL_OPTION_PREFIX): v for k, v in options.items()
               if k.startswith(VIRTUAL_OPTION_PREFIX)}
    return own, virtual


def open_session_store(source: str, storage_options: dict[str, Any], ref: str | None,
                       virtual_chunks: tuple[str, ...] = ()) -> Any:
    """The zarr-python store of a read-only session of the repository at SOURCE, at `ref` (default: branch main).

    `virtual_chunks`: the prefixes under which the repository's virtual chunk containers may be followed.
    """
    icechunk = load_icechunk()
    own, virtual = split_virtual_options(storage_options)
    storage = _storage(icechunk, source, own)
    try:
        access = _virtual_access(icechunk, storage, source, virtual_chunks, virtual)
        repository = icechunk.Repository.open(storage, authorize_virtual_chunk_access=access or None)
    except icechunk.IcechunkError as exc:
        if _NEWER_FORMAT in str(exc):
            raise NotZarrError(f"{source}: {_newer_icechunk_needed(icechunk)}") from None
        raise NotZarrError(f"{source}: not an Icechunk repository, or it cannot be read: {_first_line(exc)}") from None
    session = _session(icechunk, repository, source, ref)
    _check_snapshot(icechunk, repository, session, source)
    return session.store


def _check_snapshot(icechunk: Any, repository: Any, session: Any, source: str) -> None:
    """Read the session's snapshot now. Icechunk's store answers "absent" for every key of a
    snapshot it cannot read, which would call a damaged repository "not Zarr"."""
    snapshot = session.snapshot_id
    try:
        next(iter(repository.ancestry(snapshot_id=snapshot)), None)
    except icechunk.IcechunkError as exc:
        raise NotZarrError(f"{source}: snapshot {snapshot} cannot be read ({_first_line(exc)}): "
                           "the repository is damaged or incomplete") from None


def _newer_icechunk_needed(icechunk: Any) -> str:
    if not icechunk.__version__.startswith(("0.", "1.")):  # a format newer than any this code knows
        return (f"an Icechunk repository in a newer format than icechunk {icechunk.__version__} reads: "
                "upgrade it (`pip install -U icechunk`)")
    python = "" if sys.version_info >= (3, 12) else (
        f", which needs Python 3.12 or newer (this is Python {sys.version.split()[0]}): "
        "make zarrfs's venv with python3.12 or newer")
    return (f"an Icechunk format 2 repository, which icechunk {icechunk.__version__} cannot read: "
            f"install icechunk 2 (`pip install 'icechunk>=2.1'`){python}")


def _virtual_access(icechunk: Any, storage: Any, source: str, allowed: tuple[str, ...],
                    options: dict[str, Any]) -> dict[str, Any]:
    """Credentials for each container the repository declares that lies under an allowed prefix."""
    config = icechunk.Repository.fetch_config(storage)
    declared = sorted((config.virtual_chunk_containers or {}) if config is not None else {})
    rule = TrustRule(None, allowed)  # the prefixes, as the trust rule reads them (trust.py)
    access = {}
    for container in declared:
        if rule.authorises_prefix(container):
            access[container] = _credentials(icechunk, container, options)
    refused = [c for c in declared if c not in access]
    if refused:
        log.info("%s: virtual chunk containers not followed (%s names what may be): %s",
                 source, VIRTUAL_CHUNKS_OPTION, ", ".join(refused))
    return access


def _credentials(icechunk: Any, container: str, options: dict[str, Any]) -> Any:
    """Icechunk's credentials for one container, from its `virtual.*` storage options (fsspec's names)."""
    scheme = urlsplit(container).scheme
    # icechunk >= 2.1 wants explicit no-credential sentinels where 1.x took None.
    sentinels = getattr(icechunk, "credentials", None)
    if scheme == "file":
        return getattr(sentinels, "LocalFileSystemAccess", None)
    if scheme in ("http", "https"):
        return getattr(sentinels, "HttpAccess", None)
    anonymous = bool(options.get("anon")) or None
    if scheme in ("s3", "s3a"):
        credentials = icechunk.s3_credentials(
            access_key_id=options.get("key"), secret_access_key=options.get("secret"),
            session_token=options.get("token"), anonymous=anonymous,
            from_env=None if anonymous or options.get("key") else True)
    elif scheme in ("gs", "gcs"):
        credentials = icechunk.gcs_credentials(anonymous=anonymous, from_env=None if anonymous else True)
    else:
        credentials = icechunk.azure_credentials(from_env=True)
    return icechunk.containers_credentials({container: credentials})[container]


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
    """Icechunk storage for a local path, s3://, gs:// or (icechunk 2) http(s):// URL; options in fsspec's spelling."""
    url = urlsplit(source)
    if url.scheme in ("", "file"):
        return icechunk.local_filesystem_storage(url.path if url.scheme else source)
    bucket, prefix = url.netloc, url.path.strip("/") or None
    if url.scheme in ("s3", "s3a"):
        client = options.get("client_kwargs") or {}
        endpoint = options.get("endpoint_url") or client.get("endpoint_url")
        return icechunk.s3_storage(
            bucket=bucket, prefix=prefix, endpoint_url=endpoint,
            allow_http=bool(endpoint and endpoint.startswith("http:")),
            region=options.get("region") or client.get("region_name"),
            access_key_id=options.get("key"), secret_access_key=options.get("secret"),
            session_token=options.get("token"), anonymous=options.get("anon"),
            from_env=None if options.get("anon") or options.get("key") else True,
            force_path_style=bool(endpoint))
    if url.scheme in ("gs", "gcs"):
        return icechunk.gcs_storage(bucket=bucket, prefix=prefix,
                                    anonymous=options.get("anon") or options.get("token") == "anon",
                                    from_env=None if options.get("anon") else True)
    if url.scheme in ("http", "https") and hasattr(icechunk, "http_storage"):
        return icechunk.http_storage(source, headers=options.get("headers"))
    raise NotZarrError(f"{source}: Icechunk repositories are read from local paths, s3:// or gs:// URLs"
                       " (and http(s):// with icechunk 2)")


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
            unauthorized = _UNAUTHORIZED.search(str(exc))
            if unauthorized:  # permanent: the same answer until the user allows the container
                container = unauthorized.group(1)
                raise PermissionError(f"virtual chunk container {container} is not authorized "
                                      f"(allow it with {VIRTUAL_CHUNKS_OPTION} {container})") from None
            if isinstance(exc, KeyError):  # icechunk 2's NotFoundError: absent
                raise
            # Icechunk's messages carry a multi-line context trace: the log and the user get its first line.
            if type(exc).__name__ == "FormatError":  # icechunk 2 reads the snapshot at the first key
                raise IcechunkReadError(f"FormatError: {_first_line(exc)}: the repository is damaged or "
                                        f"incomplete", permanent=True) from None
            raise IcechunkReadError(f"{type(exc).__name__}: {_first_line(exc)}") from None
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
