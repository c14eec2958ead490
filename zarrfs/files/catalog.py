"""`--catalog FILE`: named sources, each a top-level directory of the mount.

For what no server can list (public HTTPS stores) and for putting stores of
several places side by side. The file is TOML, one entry per source:

    # the name is the directory; the value its SOURCE
    plate = "https://example.org/data/plate.zarr"

    [era5]                              # a table gives a source its own options
    source = "s3://bucket/era5.zarr"
    storage-options = { anon = true }   # as -S key=value; "@env:NAME" and "@file:PATH" values too
    ref = "v2"                          # an Icechunk repository's branch, tag or snapshot

A source may be a store or a folder of stores (a share); which one is
decided when its directory is first looked into, never at mount.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from typing import Any

from ..errors import OptionsError
from ..options import parse_storage_options

# Keys of an entry's table, and what they are.
ENTRY_KEYS = {"source": "its SOURCE (required)", "storage-options": "a table of storage options (as -S)",
              "ref": "an Icechunk branch, tag or snapshot"}


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    source: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    ref: str | None = None


def read_catalog(path: str) -> list[CatalogEntry]:
    """The entries of a catalog file, in its order; OptionsError naming the entry and what to fix."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise OptionsError(f"--catalog {path}: cannot read it: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise OptionsError(f"--catalog {path}: not valid TOML: {exc}") from exc
    entries = [_entry(path, name, value) for name, value in document.items()]
    if not entries:
        raise OptionsError(f"--catalog {path}: names no source (write `NAME = \"URL\"` lines)")
    return entries


def _entry(path: str, name: str, value: Any) -> CatalogEntry:
    where = f"--catalog {path}: entry {name!r}"
    if not name or name in (".", "..") or "/" in name or "\0" in name or name.startswith(".zarrfs"):
        raise OptionsError(f"{where}: a name must be one directory name (no '/', not '.' or '..')")
    if isinstance(value, str):
        return CatalogEntry(name, value)
    if not isinstance(value, dict):
        raise OptionsError(f"{where}: must be a URL string or a table with `source = \"URL\"`")
    unknown = set(value) - set(ENTRY_KEYS)
    if unknown:
        known = "; ".join(f"{key}: {what}" for key, what in ENTRY_KEYS.items())
        raise OptionsError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {known})")
    source = value.get("source")
    if not isinstance(source, str) or not source:
        raise OptionsError(f"{where}: needs `source = \"URL\"`")
    options = value.get("storage-options", {})
    if not isinstance(options, dict):
        raise OptionsError(f"{where}: storage-options must be a table")
    ref = value.get("ref")
    if ref is not None and not isinstance(ref, str):
        raise OptionsError(f"{where}: ref must be a string")
    # Values spelled as on the command line (@env:NAME, @file:PATH) are resolved the same way.
    resolved = {key: (parse_storage_options([f"{key}={item}"])[key] if isinstance(item, str) else item)
                for key, item in options.items()}
    return CatalogEntry(name, source, resolved, ref)
