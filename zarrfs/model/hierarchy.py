"""Find the nodes of a Zarr hierarchy: format detection and one dialect per layout.

A dialect answers two questions about a logical node path: what is there
(`node`), and which child names might be nodes (`child_names`). Everything is
read from metadata keys only, never from chunks. Consolidated metadata, when
present, answers both without further requests: a whole hierarchy then costs
the one or two GETs of detection (`zarr.json`; `.zmetadata` for v2).

Without consolidated metadata, children are found by listing the store. A
store that cannot list (an HTTP server without index pages) shows the root
node only; that is logged once, with what to do about it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import MetadataError, NotFoundError, NotZarrError, ZarrfsError
from ..options import StoreOptions
from ..stores.icechunk import IcechunkFileSystem, looks_like_repository
from ..stores.store import Store
from .draft import parse_seed_array, parse_zp2_array
from .limits import bounded_children, max_document_bytes
from .meta import ArrayMeta, GroupMeta, join_key, parse_json, require_object
from .v2 import parse_v1_array, parse_v2_array
from .v3 import check_must_understand, parse_v3_array

log = logging.getLogger(__name__)

Node = ArrayMeta | GroupMeta


# NAME_MAX (255) less the longest suffix a node's file gets ('.bigtiff.tif').
MAX_NAME_BYTES = 255 - 12


def valid_node_name(name: str) -> bool:
    """A child name that may become a path component (spec node-name rules)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        return False
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes from a local listing (surrogates)
        return False
    # Its files add a suffix; the kernel refuses longer names (and a listing
    # with a name over 1024 bytes fails whole, hiding every sibling).
    return len(encoded) <= MAX_NAME_BYTES


class Dialect(Protocol):
    zarr_format: str

    def node(self, path: str) -> Node | None: ...

    def child_names(self, path: str) -> list[str]: ...


def _get_json(store: Store, key: str) -> Any | None:
    # At most the size limit + 1 bytes: a document over the limit is refused without being held whole.
    raw = store.get_range(key, 0, max_document_bytes() + 1)
    return None if raw is None else parse_json(raw, f"{store.display_name}: {key}")


def _attributes(doc: Any, where: str) -> dict[str, Any]:
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


def _listed_dirs(store: Store, path: str) -> list[str]:
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


# ------------------------------------------------------------------------ v2


class V2Dialect:
    zarr_format = "2"

    def __init__(self, store: Store, consolidated: dict[str, Any] | None) -> None:
        self.store = store
        self.consolidated = consolidated

    def _doc(self, key: str) -> Any | None:
        if self.consolidated is not None:
            # Consolidated metadata holds every metadata key of the hierarchy:
            # an absent .zattrs is absent, not a reason for a request.
            return self.consolidated.get(key)
        return _get_json(self.store, key)

    def node(self, path: str) -> Node | None:
        where = f"{self.store.display_name}: /{path}"
        zarray = self._doc(join_key(path, ".zarray"))
        if zarray is not None:
            attrs = _attributes(self._doc(join_key(path, ".zattrs")), where)
            return parse_v2_array(zarray, path, path, attrs, where)
        zgroup = self._doc(join_key(path, ".zgroup"))
        if zgroup is not None:
            require_object(zgroup, where)
            return GroupMeta(path, "2", _attributes(self._doc(join_key(path, ".zattrs")), where))
        return None

    def child_names(self, path: str) -> list[str]:
        if self.consolidated is not None:
            prefix = path + "/" if path else ""
            names = set()
            for key in self.consolidated:
                rest = key[len(prefix):] if key.startswith(prefix) else None
                if rest and rest.count("/") == 1 and rest.endswith(("/.zarray", "/.zgroup")):
                    names.add(rest.split("/")[0])
            return sorted(names)
        return sorted(d for d in _listed_dirs(self.store, path) if not d.startswith("."))


class V1Dialect:
    """A v1 store is one array at the store root."""

    zarr_format = "1"

    def __init__(self, store: Store) -> None:
        self.store = store

    def node(self, path: str) -> Node | None:
        if path:
            return None
        where = f"{self.store.display_name}: meta"
        attrs = _attributes(_get_json(self.store, "attrs"), where)
        return parse_v1_array(_get_json(self.store, "meta"), attrs, where)

    def child_names(self, path: str) -> list[str]:
        return []


# ------------------------------------------------------------------------ v3


_GROUP_KEYS = {"zarr_format", "node_type", "attributes", "consolidated_metadata"}


class V3Dialect:
    zarr_format = "3"

    def __init__(self, store: Store, root_doc: dict[str, Any]) -> None:
        self.store = store
        self.root_doc = root_doc  # read by detection: no second GET for the root
        self.consolidated = self._consolidated(root_doc)

    @staticmethod
    def _consolidated(root_doc: dict[str, Any]) -> dict[str, Any] | None:
        block = root_doc.get("consolidated_metadata")
        if isinstance(block, dict) and isinstance(block.get("metadata"), dict):
            return {**block["metadata"], "": root_doc}
        return None

    def _doc(self, path: str) -> Any | None:
        if self.consolidated is not None:
            return self.consolidated.get(path)  # holds every node of the hierarchy
        if not path:
            return self.root_doc
        return _get_json(self.store, join_key(path, "zarr.json"))

    def node(self, path: str) -> Node | None:
        where = f"{self.store.display_name}: /{path}"
        doc = self._doc(path)
        if doc is None:
            return None
        doc = require_object(doc, where)
        if doc.get("zarr_format") != 3:
            raise MetadataError(f"{where}: zarr_format must be 3, got {doc.get('zarr_format')!r}")
        node_type = doc.get("node_type")
        if node_type == "array":
            return parse_v3_array(doc, path, path, where)
        if node_type == "group":
            check_must_understand(doc, _GROUP_KEYS, where)
            return GroupMeta(path, "3", _attributes(doc.get("attributes"), where))
        raise MetadataError(f"{where}: node_type must be 'array' or 'group', got {node_type!r}")

    def child_names(self, path: str) -> list[str]:
        if self.consolidated is not None:
            prefix = path + "/" if path else ""
            names = {k[len(prefix):] for k in self.consolidated
                     if k and k.startswith(prefix) and "/" not in k[len(prefix):]}
        else:
            names = set(_listed_dirs(self.store, path))
        return sorted(n for n in names if not n.startswith("__"))  # '__' names are reserved in v3


# --------------------------------------------------------------- v3 drafts


class Zp2DraftDialect:
    """zarr-python 2.12-2.18 `ZARR_V3_EXPERIMENTAL_API`: `meta/root/<path>.array.json`."""

    zarr_format = "3-draft-zp2"

    def __init__(self, store: Store) -> None:
        self.store = store

    def _meta_key(self, path: str, kind: str) -> str:
        return f"meta/root.{kind}.json" if not path else f"meta/root/{path}.{kind}.json"

    def node(self, path: str) -> Node | None:
        where = f"{self.store.display_name}: /{path}"
        doc = _get_json(self.store, self._meta_key(path, "array"))
        if doc is not None:
            return parse_zp2_array(doc, path, where)
        doc = _get_json(self.store, self._meta_key(path, "group"))
        if doc is not None:
            return GroupMeta(path, self.zarr_format, _attributes(require_object(doc, where).get("attributes"), where))
        dirs, files = self.store.listdir(join_key("meta/root", path))
        if dirs or files:  # implicit group: only its descendants exist
            return GroupMeta(path, self.zarr_format, {})
        return None

    def child_names(self, path: str) -> list[str]:
        return _draft_children(self.store, join_key("meta/root", path))


class SeedDraftDialect:
    """The seed's 2022 editor's draft: `meta/<path>.array.json`, root `meta/array.json`."""

    zarr_format = "3-draft-seed"

    def __init__(self, store: Store) -> None:
        self.store = store

    def node(self, path: str) -> Node | None:
        where = f"{self.store.display_name}: /{path}"
        doc = _get_json(self.store, f"meta/{path}.array.json" if path else "meta/array.json")
        if doc is not None:
            return parse_seed_array(doc, path, where)
        doc = _get_json(self.store, f"meta/{path}.group.json" if path else "meta/group.json")
        if doc is not None:
            return GroupMeta(path, self.zarr_format, _attributes(require_object(doc, where).get("attributes"), where))
        # Groups may be implicit: implied by descendants, the root always.
        if not path or any(self.store.listdir(f"meta/{path}")):
            return GroupMeta(path, self.zarr_format, {})
        return None

    def child_names(self, path: str) -> list[str]:
        names = _draft_children(self.store, join_key("meta", path))
        return [n for n in names if path or n not in ("array", "group")]


def _draft_children(store: Store, meta_prefix: str) -> list[str]:
    dirs, files = store.listdir(meta_prefix)
    names = set(dirs)
    for name in files:
        for suffix in (".array.json", ".group.json"):
            if name.endswith(suffix):
                names.add(name[: -len(suffix)])
    return sorted(names)


# ----------------------------------------------------------------- detection


def detect(store: Store) -> Dialect:
    """The dialect of the hierarchy at the store root (formats.md §0)."""
    where = store.display_name
    zarr_json = _get_json(store, "zarr.json")
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
    zmetadata = _get_json(store, ".zmetadata")
    if zmetadata is not None:
        consolidated = require_object(zmetadata, f"{where}: .zmetadata").get("metadata")
        if isinstance(consolidated, dict):
            return V2Dialect(store, consolidated)
        log.warning("%s: .zmetadata has no 'metadata' object; listing the store instead", where)
    if store.get(".zarray") is not None or store.get(".zgroup") is not None:
        return V2Dialect(store, None)
    meta = _get_json(store, "meta")
    if isinstance(meta, dict) and meta.get("zarr_format") == 1:
        return V1Dialect(store)
    if not store.exists():
        raise NotFoundError(f"{where} does not exist (check the path or URL)")
    raise NotZarrError(
        f"{where}: not a Zarr hierarchy (no zarr.json, .zarray, .zgroup, .zmetadata or v1 meta at its root)"
    )


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
    except NotZarrError:
        if options.ref is None and store.fs.protocol != IcechunkFileSystem.protocol:
            directories, files = store.listdir("")
            if looks_like_repository(directories, files):
                return Hierarchy(Store.open_icechunk(source, storage_options, options), ttl=ttl)
        raise


@dataclass(frozen=True)
class Child:
    name: str
    node: Node | None  # None when `error` says why it cannot be served
    error: ZarrfsError | None = None


class Hierarchy:
    """The nodes of one store, discovered lazily and remembered.

    With `ttl` (seconds), everything learnt is forgotten that long after it
    was first read: detection runs again (re-reading consolidated metadata),
    so arrays added to the store appear. `generation` changes at each
    refresh, for caches built on top (the virtual tree). Without a TTL the
    hierarchy is read once per mount: stores are usually immutable.
    """

    def __init__(self, store: Store, dialect: Dialect | None = None, ttl: float | None = None) -> None:
        self.store = store
        self.ttl = ttl
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._nodes: dict[str, Node] = {}
        self._children: dict[str, list[Child]] = {}
        self._generation = 0
        self.refreshes = 0
        self._dialect = dialect or detect(store)
        self._loaded_at = time.monotonic()

    @property
    def dialect(self) -> Dialect:
        self._refresh_if_stale()
        return self._dialect

    @property
    def generation(self) -> int:
        """Changes whenever the metadata was read anew (checked, and refreshed if stale, here)."""
        self._refresh_if_stale()
        return self._generation

    @property
    def zarr_format(self) -> str:
        return self.dialect.zarr_format

    def stats(self) -> dict[str, Any]:
        return {"ttl": self.ttl, "refreshes": self.refreshes}

    def root(self) -> Node:
        return self.node("")

    def node(self, path: str) -> Node:
        dialect = self.dialect
        with self._lock:
            cached = self._nodes.get(path)
        if cached is not None:
            return cached
        found = dialect.node(path)
        if found is None:
            raise NotFoundError(f"{self.store.display_name}: no Zarr node at /{path}")
        with self._lock:
            return self._nodes.setdefault(path, found)

    def children(self, path: str) -> list[Child]:
        """The child nodes of group `path`; a broken child carries its error."""
        dialect = self.dialect
        with self._lock:
            cached = self._children.get(path)
        if cached is not None:
            return cached
        children: list[Child] = []
        names, too_many = bounded_children(dialect.child_names(path), f"{self.store.display_name}: /{path}")
        if too_many:
            log.warning("%s", too_many)
        for name in names:
            if not valid_node_name(name):
                log.warning("%s: /%s: skipping child %r%s: not a valid node name", self.store.display_name, path,
                            name[:64], f" ({len(name)} characters)" if len(name) > 64 else "")
                continue
            child_path = join_key(path, name)
            try:
                children.append(Child(name, self.node(child_path)))
            except NotFoundError:
                continue  # a directory that is not a node (e.g. chunk folders)
            except ZarrfsError as exc:
                log.warning("%s", exc)
                children.append(Child(name, None, exc))
        with self._lock:
            return self._children.setdefault(path, children)

    def _refresh_if_stale(self) -> None:
        if self.ttl is None or time.monotonic() - self._loaded_at < self.ttl:
            return
        with self._refresh_lock:  # one thread refreshes; the others wait for its result
            if time.monotonic() - self._loaded_at < self.ttl:
                return
            try:
                dialect = detect(self.store)
            except ZarrfsError as exc:
                # Keep serving what we know rather than emptying a mounted tree
                # because the store hiccuped; try again after another TTL.
                log.warning("%s: refreshing metadata failed, keeping the previous view: %s",
                            self.store.display_name, exc)
                self._loaded_at = time.monotonic()
                return
            with self._lock:
                self._dialect = dialect
                self._nodes.clear()
                self._children.clear()
                self._generation += 1
                self.refreshes += 1
                self._loaded_at = time.monotonic()
