"""Metadata documents and listings as the dialects read them from a store.

Every document is read with a bounded ranged GET (`limits.max_document_bytes`),
so a hostile store cannot make the daemon hold a huge one whole. A store that
cannot list is reported once, with what to do about it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..errors import MetadataError
from ..model.limits import max_document_bytes
from ..model.meta import parse_json
from ..stores.store import Store

log = logging.getLogger(__name__)


def get_document(store: Store, key: str) -> bytes | bytearray | None:
    """The bytes of metadata document `key`, None when absent.

    At most the size limit + 1 bytes: a document over the limit is refused
    (by `parse_json`) without being held whole."""
    return store.get_document(key, max_document_bytes() + 1)


def parse_document(store: Store, key: str, raw: bytes | bytearray | None) -> Any | None:
    return None if raw is None else parse_json(raw, f"{store.display_name}: {key}")


def get_json(store: Store, key: str) -> Any | None:
    return parse_document(store, key, get_document(store, key))


def parse_attributes(doc: Any, where: str) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise MetadataError(f"{where}: attributes must be a JSON object")
    return doc


class Listings:
    """A store's directory listings as the dialects read them.

    A group always holds its own metadata file, so an empty listing means the
    store cannot list (or hides it). That is learnt once per store: no
    further listing is asked for, and it is reported once. Its hierarchy is
    then walked through what metadata names (`named.py`).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self.unlistable = False

    def dirs(self, path: str) -> list[str]:
        """Sub-directories of group `path` ([] on a store that cannot list)."""
        if self.unlistable:
            return []
        dirs, files = self.store.listdir(path)
        if dirs or files:
            return dirs
        with self._lock:
            first, self.unlistable = not self.unlistable, True
        if first:
            log.warning(
                "%s: /%s cannot be listed (e.g. an HTTP server without directory index pages) and the store has "
                "no consolidated metadata: groups and arrays are found through what their metadata names "
                "(OME-Zarr multiscales, labels, plates and wells, bioformats2raw series, GeoZarr multiscales); "
                "a node that no metadata names is not shown. Consolidate the metadata (zarr.consolidate_metadata) "
                "or serve directory listings to see such nodes.", self.store.display_name, path)
        return []
