"""kerchunk / VirtualiZarr reference sets as SOURCE (fsspec's `reference://` file system).

A reference set maps Zarr keys to inline values or to byte ranges of other
files (an HDF5/NetCDF file on S3, say). It comes as one JSON document (v0:
`{key: value}`, v1: `{"version": 1, "refs": ..., "templates": ...}`) or as a
Parquet directory (`.zmetadata` with a `record_size`, `refs.N.parq` per
array). fsspec reads both; this module recognises a SOURCE that is one, so
`zarrfs mount refs.json MP` works without naming the protocol, and fills in
what fsspec needs: the reference file as `fo`, and for Parquet the protocol
of the referenced files (fsspec would otherwise read every Parquet file at
open to find it).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.core import split_protocol, url_to_fs

from ..errors import NotZarrError
from .trust import guarded_options, is_local_source, trust_rule

PROTOCOL = "reference"
PARQUET_SUFFIXES = (".parq", ".parquet")
# How many bytes of a JSON file are looked at to tell a reference set from other JSON.
SNIFF_BYTES = 4096


def is_reference_source(source: str, storage_options: dict[str, Any], allowed: tuple[str, ...] = ()) -> bool:
    """Whether SOURCE names a reference set: `reference://…`, or a JSON file / Parquet directory of references.

    `allowed`: the prefixes the user authorised, for a redirect met while looking (trust.py).
    """
    if source.split("::")[-1].startswith(f"{PROTOCOL}://") or "fo" in storage_options:
        return True
    if "::" in source:
        return False  # a chained URL says what it is
    # Reference sets are recognised by name first (a .json file, a Parquet directory): telling a
    # Parquet set from a consolidated Zarr v2 store by content would cost every such store an extra
    # read of its .zmetadata, and a store of any other name needs no fsspec options built (for
    # http(s), building them imports aiohttp, a tenth of a second of every mount).
    parquet = source.rstrip("/").lower().endswith(PARQUET_SUFFIXES)
    if not parquet and not source.lower().endswith(".json"):
        return False
    try:
        options = guarded_options(split_protocol(source)[0], {}, trust_rule(source, allowed))
    except ValueError:
        return False  # a URL the trust rule cannot judge: Store.open says why
    return _looks_like_parquet_references(source, options) if parquet else _looks_like_json_references(source, options)


def reference_options(source: str, storage_options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the URL fsspec opens, its options) for a reference SOURCE in any of the accepted spellings.

    `reference://refs.json`, `reference:// -S fo=refs.json` and plain
    `refs.json` (or `refs.parq`, a Parquet directory) are the same. Options
    other than `fo` pass through: `target_options` (for reading the
    reference file), `remote_protocol` and `remote_options` (for the files
    the references point into). A remote reference set's remote protocol is
    its origin's unless given (guarded_references.py), never looked up in
    its references.
    """
    options = dict(storage_options)
    target = source.split("::")[-1]
    target = target[len(PROTOCOL) + 3:] if target.startswith(f"{PROTOCOL}://") else target
    if target and "fo" in options and target != options["fo"]:
        raise NotZarrError(f"reference set given twice: {target!r} in the URL and fo={options['fo']!r}")
    options.setdefault("fo", target)
    if not options["fo"]:
        raise NotZarrError("reference:// needs the kerchunk reference file (JSON or a Parquet reference "
                           "directory): `reference://refs.json`, or `reference:// -S fo=refs.json`")
    if "remote_protocol" not in options and is_local_source(str(options["fo"])) and \
            _looks_like_parquet_references(str(options["fo"]), options.get("target_options")):
        options["remote_protocol"] = _parquet_remote_protocol(str(options["fo"]), options.get("target_options"))
    return f"{PROTOCOL}://", options


def _looks_like_json_references(source: str, options: dict[str, Any]) -> bool:
    try:
        fs, path = url_to_fs(source, **options)
        with fs.open(path, "rb") as head:
            start = head.read(SNIFF_BYTES).lstrip()
    except (OSError, ValueError, ImportError):
        return False
    return looks_like_references(start)


def looks_like_references(head: bytes | bytearray) -> bool:
    """Whether the first bytes of a JSON document are a kerchunk reference set."""
    start = head.lstrip()
    # v1 names its version; v0 maps Zarr keys (a root .zgroup/.zattrs/.zarray, or zarr.json) to values.
    return start.startswith(b"{") and any(marker in start for marker in (
        b'"version"', b'".zgroup"', b'".zarray"', b'"refs"', b'".zattrs"', b'"zarr.json"'))


def _looks_like_parquet_references(source: str, target_options: dict[str, Any] | None = None) -> bool:
    try:
        fs, path = url_to_fs(source, **(target_options or {}))
        with fs.open(posixpath.join(path, ".zmetadata"), "rb") as metadata:
            doc = json.loads(metadata.read(SNIFF_BYTES * 1024))
    except (OSError, ValueError, ImportError):
        return False
    return isinstance(doc, dict) and "record_size" in doc


def _parquet_remote_protocol(source: str, target_options: dict[str, Any] | None) -> str:
    """The protocol of the files a Parquet reference set points into, from its first non-inline reference."""
    fs, path = url_to_fs(source, **(target_options or {}))
    for target in parquet_targets(fs, path):
        return split_protocol(str(target))[0] or "file"
    return "file"


def parquet_targets(fs: AbstractFileSystem, root: str) -> Iterator[str]:
    """The distinct target paths of each `refs.N.parq` file of a Parquet reference directory, file by file."""
    import pandas  # a Parquet reference set needs it anyway (fsspec's LazyReferenceMapper)

    for parquet in sorted(fs.glob(posixpath.join(root, "**", "refs.*.parq"))):
        with fs.open(parquet, "rb") as handle:
            paths = pandas.read_parquet(handle, columns=["path"])["path"].dropna()
        yield from (str(path) for path in paths.unique())

