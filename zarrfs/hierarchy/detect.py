"""Which dialect wrote the hierarchy at a store's root (formats.md §0)."""

from __future__ import annotations

import logging

from ..errors import MetadataError, NotFoundError, NotZarrError
from ..model.meta import require_object
from ..stores.store import Store
from .dialects import Dialect, V1Dialect, V2Dialect, V3Dialect
from .documents import get_json
from .drafts import SeedDraftDialect, Zp2DraftDialect

log = logging.getLogger(__name__)


def detect(store: Store) -> Dialect:
    """The dialect of the hierarchy at the store root (formats.md §0)."""
    where = store.display_name
    zarr_json = get_json(store, "zarr.json")
    if zarr_json is not None:
        doc = require_object(zarr_json, f"{where}: zarr.json")
        version = doc.get("zarr_format")
        if version == 3:
            return V3Dialect(store, doc)
        if isinstance(version, str) and version.rstrip("/").endswith("protocol/core/3.0"):
            return Zp2DraftDialect(store)
        if isinstance(version, str) and version.rstrip("/").endswith("core/3.0"):
            return SeedDraftDialect(store)
        raise MetadataError(f"{where}: zarr.json has an unknown zarr_format {version!r}")
    zmetadata = get_json(store, ".zmetadata")
    if zmetadata is not None:
        consolidated = require_object(zmetadata, f"{where}: .zmetadata").get("metadata")
        if isinstance(consolidated, dict):
            return V2Dialect(store, consolidated)
        log.warning("%s: .zmetadata has no 'metadata' object; listing the store instead", where)
    if store.get(".zarray") is not None or store.get(".zgroup") is not None:
        return V2Dialect(store, None)
    meta = get_json(store, "meta")
    if isinstance(meta, dict) and meta.get("zarr_format") == 1:
        return V1Dialect(store)
    # The root's listing tells a folder that is no store from one that is missing (asked only when nothing
    # is listed: an empty folder, a store that cannot list, or nothing there), and travels with the error
    # to whoever reads the root next (an Icechunk repository, a share), who then need not list it again.
    listing = store.list_entries("")
    if not listing and not store.exists():
        raise NotFoundError(f"{where} does not exist (check the path or URL)")
    not_zarr = NotZarrError(
        f"{where}: not a Zarr hierarchy (no zarr.json, .zarray, .zgroup, .zmetadata or v1 meta at its root)"
    )
    not_zarr.root_listing = listing
    raise not_zarr
