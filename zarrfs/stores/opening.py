"""Where a SOURCE's bytes come from: the file system, root, name and identity `Store.open` opens it with.

A local path reads through fsspec's one local file system; a plain http(s)
URL through zarrfs's own client (http.py), fsspec's file system made only if
ever needed; a reference set through the guarded reference file system
(trust.py); an Icechunk repository through a read-only session; anything
else through fsspec's `url_to_fs`, with zarrfs's defaults for its backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import fsspec
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from ..errors import NotZarrError
from ..options import StoreOptions
from .guarded_references import GuardedReferenceFileSystem
from .http import HttpReader
from .icechunk import IcechunkFileSystem, local_repository, open_session_store, split_virtual_options
from .redact import redact_url
from .references import PROTOCOL, is_reference_source, reference_options
from .trust import HTTP_SCHEMES, guarded_options, trust_rule


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
class Opened:
    """What a store reads through, as `Store`'s constructor takes it."""

    # The file system, or a function that makes it: a plain http(s) source reads and lists through
    # `http` and needs fsspec's file system (aiohttp: ~9 MiB resident) for nothing else.
    fs: fsspec.AbstractFileSystem | Callable[[], fsspec.AbstractFileSystem]
    root: str
    display_name: str
    http: HttpReader | None = None
    identity: str | None = None  # what tells its answers from any other store's (disk_cache.py)
    immutable: bool = False  # its answers never change (an Icechunk snapshot)


def open_source(url: str, storage_options: dict[str, Any] | None, options: StoreOptions) -> Opened:
    """How to read SOURCE (a local path or any fsspec URL, chained ones too)."""
    if options.ref is not None or local_repository(url):
        return open_icechunk(url, storage_options, options)
    url = zipped_ome_zarr(url)
    protocol = url.split("::")[-1].partition("://")[0] if "://" in url else "file"
    given, _ = split_virtual_options(dict(storage_options or {}))  # those are for an Icechunk repository's
    try:
        if is_reference_source(url, given, options.virtual_chunks):
            return _open_references(url, given, options)
        # What the source may make zarrfs read besides itself: a redirect's target (trust.py).
        rule = trust_rule(url, options.virtual_chunks)
    except ValueError as exc:
        raise NotZarrError(f"cannot open {redact_url(url)}: {exc}") from exc
    # Plain http(s) URLs read their objects with zarrfs's own client (http.py); given storage
    # options (headers, auth, client arguments) or credentials in the URL, fsspec does it all.
    plain_http = (protocol in HTTP_SCHEMES and "::" not in url and not given
                  and "@" not in urlsplit(url).netloc)
    if plain_http:  # fsspec's root for an http(s) URL is the URL itself; its file system waits
        return Opened(lambda: url_to_fs(url)[0], url, redact_url(url), HttpReader(options.timeout, rule),
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
        return Opened(_LOCAL_FS, _LOCAL_FS._strip_protocol(url), redact_url(url), identity=_identity(url, given))
    fs, root = _opened_fs(url, protocol, lambda: url_to_fs(url, **kwargs))
    return Opened(fs, root, redact_url(url), identity=_identity(url, given))


def _open_references(url: str, given: dict[str, Any], options: StoreOptions) -> Opened:
    """A reference set, its every target judged by the trust rule of the reference file's origin."""
    _, given = reference_options(url, given)
    rule = trust_rule(str(given["fo"]), options.virtual_chunks)
    fs, root = _opened_fs(url, PROTOCOL, lambda: (GuardedReferenceFileSystem(rule=rule, **given), ""))
    return Opened(fs, root, redact_url(url), identity=_identity(url, given))


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


def open_icechunk(source: str, storage_options: dict[str, Any] | None, options: StoreOptions) -> Opened:
    """A read-only session of the Icechunk repository at SOURCE, at `options.ref` (default branch main)."""
    session_store = open_session_store(source, storage_options or {}, options.ref, options.virtual_chunks)
    name = f"{redact_url(source)}@{options.ref or 'main'}"
    snapshot = getattr(getattr(session_store, "session", None), "snapshot_id", None)
    identity = None if local_repository(source) or not snapshot else f"{redact_url(source)}@{snapshot}"
    return Opened(IcechunkFileSystem(session_store), "", name, identity=identity, immutable=True)
