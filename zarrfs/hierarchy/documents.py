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


def get_json(store: Store, key: str) -> Any | None:
    # At most the size limit + 1 bytes: a document over the limit is refused without being held whole.
    raw = store.get_range(key, 0, max_document_bytes() + 1)
    return None if raw is None else parse_json(raw, f"{store.display_name}: {key}")


def parse_attributes(doc: Any, where: str) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise MetadataError(f"{where}: attributes must be a JSON object")
    return doc


_unlistable_reported: set[str] = set()
_report_lock = threading.Lock()


def _first_time(store_name: str) -> bool:
    with _report_lock:
        first = store_name not in _unlistable_reported
        _unlistable_reported.add(store_name)
    return first


def listed_dirs(store: Store, path: str) -> list[str]:
    """Sub-directories of group `path`; a listing with nothing in it is reported once.

    A group always holds its own metadata file, so an empty listing means the
    store cannot list (or hides it): its children cannot be discovered.
    """
    dirs, files = store.listdir(path)
    if not dirs and not files and _first_time(store.display_name):
        log.warning(
            "%s: /%s cannot be listed (e.g. an HTTP server without directory index pages) and the store has "
            "no consolidated metadata, so groups and arrays below the root cannot be discovered and are not "
            "shown; the root node itself is served. Consolidate the metadata (zarr.consolidate_metadata) or "
            "serve directory listings to see the whole hierarchy.", store.display_name, path)
    return dirs
