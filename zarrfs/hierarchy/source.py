"""Open the hierarchy at a SOURCE: a Zarr store, a reference set, or an Icechunk repository."""

from __future__ import annotations

from typing import Any

from ..errors import NotZarrError
from ..options import StoreOptions
from ..stores.icechunk import IcechunkFileSystem, looks_like_repository
from ..stores.store import Store
from .nodes import Hierarchy


def open_hierarchy(source: str, storage_options: dict[str, Any], options: StoreOptions,
                   ttl: float | None = None) -> Hierarchy:
    """The hierarchy at SOURCE: a Zarr store, a reference set, or an Icechunk repository.

    A remote Icechunk repository is recognised only once SOURCE turned out
    not to be Zarr (its top lists snapshots/ and refs/ (format 1) or a `repo`
    object (format 2)), so ordinary stores pay no extra request for it.
    """
    store = Store.open(source, storage_options, options)
    try:
        return Hierarchy(store, ttl=ttl)
    except NotZarrError as not_zarr:
        if options.ref is None and store.fs.protocol != IcechunkFileSystem.protocol:
            listing = not_zarr.root_listing if not_zarr.root_listing is not None else store.list_entries("")
            directories = [entry.name for entry in listing if entry.directory]
            if looks_like_repository(directories, [entry.name for entry in listing if not entry.directory]):
                return Hierarchy(Store.open_icechunk(source, storage_options, options), ttl=ttl)
            not_zarr.root_listing = listing
        raise
