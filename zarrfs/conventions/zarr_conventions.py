"""The `zarr_conventions` registry of a node's attributes: which of the conventions zarrfs reads it declares.

A node declares a convention with an entry `{uuid?, schema_url?, spec_url?,
name?, description?}` in its `zarr_conventions` list. The uuid identifies the
convention when present (the registry specification's rule); writers that
leave it out (rioxarray's layouts as its docs show them) are matched by name,
spelled with or without the namespace colon (`"spatial:"`, `"spatial"`). An
entry with a uuid of another convention is never taken for one of ours by its
name: names are not unique.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MULTISCALES = "multiscales"  # github.com/zarr-conventions/multiscales: a `multiscales` object with a `layout`
SPATIAL = "spatial"  # github.com/zarr-conventions/spatial: `spatial:transform`, `spatial:registration`...
PROJ = "proj"  # github.com/zarr-conventions/geo-proj: `proj:code`, `proj:wkt2`, `proj:projjson`

_BY_UUID = {
    "d35379db-88df-4056-af3a-620245f8e347": MULTISCALES,
    "689b58e2-cf7b-45e0-9fff-9cfc0883d6b4": SPATIAL,
    "f17cb550-5864-4468-aeb7-f3180cfb622f": PROJ,
}
_BY_NAME = {MULTISCALES: MULTISCALES, SPATIAL: SPATIAL, "spatial:": SPATIAL, PROJ: PROJ, "proj:": PROJ}


def declared(attributes: Mapping[str, Any]) -> frozenset[str]:
    """The conventions of ours (`MULTISCALES`, `SPATIAL`, `PROJ`) the node's `zarr_conventions` declares."""
    registry = attributes.get("zarr_conventions")
    if not isinstance(registry, list):
        return frozenset()
    found = set()
    for entry in registry:
        if not isinstance(entry, dict):
            continue
        uuid, name = entry.get("uuid"), entry.get("name")
        if isinstance(uuid, str):
            convention = _BY_UUID.get(uuid.strip().lower())
        else:
            convention = _BY_NAME.get(name.strip().lower()) if isinstance(name, str) else None
        if convention is not None:
            found.add(convention)
    return frozenset(found)
