"""One dialect per Zarr layout: what is at a node path, and which child names might be nodes.

A dialect answers two questions about a logical node path: what is there
(`node`), and which child names might be nodes (`child_names`). Everything is
read from metadata keys only, never from chunks. Consolidated metadata, when
present, answers both without further requests: a whole hierarchy then costs
the one or two GETs of detection (`zarr.json`; `.zmetadata` for v2).

Without consolidated metadata, children are found by listing the store;
`Hierarchy` adds the children that metadata names (`named.py`), which is all
a store that cannot list (an HTTP server without index pages) shows
(`documents.Listings`). The 2022 v3 drafts are in `drafts.py`.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from ..errors import MetadataError
from ..model.meta import ArrayMeta, GroupMeta, join_key, require_object
from ..model.v2 import parse_v1_array, parse_v2_array
from ..model.v3 import check_must_understand, chunk_key_encoding, parse_v3_array
from ..stores.store import Store
from .documents import Listings, get_document, get_json, parse_attributes, parse_document

Node = ArrayMeta | GroupMeta


class Dialect(Protocol):
    zarr_format: str

    def node(self, path: str) -> Node | None: ...

    def child_names(self, path: str) -> list[str]: ...


# ------------------------------------------------------------------------ v2


class V2Dialect:
    """A v2 node is up to three documents: `.zarray` or `.zgroup`, and `.zattrs`. On a remote store
    all three are asked for at once (one round trip, not three in a row)."""

    zarr_format = "2"
    _KEYS = (".zarray", ".zgroup", ".zattrs")

    def __init__(self, store: Store, consolidated: dict[str, Any] | None) -> None:
        self.store = store
        self.consolidated = consolidated
        self.listings = Listings(store)
        self._side_by_side = ThreadPoolExecutor(store.options.document_concurrency, "zarrfs-documents") \
            if store.remote and consolidated is None else None

    def _documents(self, path: str) -> dict[str, Any]:
        """.zarray, .zgroup and .zattrs of `path` by name, parsed (None: absent); {} when `path` is no node."""
        keys = [join_key(path, name) for name in self._KEYS]
        if self.consolidated is not None:
            # Consolidated metadata holds every metadata key of the hierarchy:
            # an absent .zattrs is absent, not a reason for a request.
            return {name: self.consolidated.get(key) for name, key in zip(self._KEYS, keys, strict=True)}
        if self._side_by_side is None:
            raw = {name: get_document(self.store, key) for name, key in zip(self._KEYS[:2], keys[:2], strict=True)}
            if raw[".zarray"] is not None or raw[".zgroup"] is not None:
                raw[".zattrs"] = get_document(self.store, keys[2])
        else:
            raw = dict(zip(self._KEYS, self._side_by_side.map(lambda key: get_document(self.store, key), keys),
                           strict=True))
        if raw[".zarray"] is None and raw[".zgroup"] is None:
            return {}  # no node here (its .zattrs, if any, is nobody's)
        return {name: parse_document(self.store, key, raw.get(name))
                for name, key in zip(self._KEYS, keys, strict=True)}

    def node(self, path: str) -> Node | None:
        where = f"{self.store.display_name}: /{path}"
        documents = self._documents(path)
        parsed = documents.get(".zarray") or documents.get(".zgroup")
        if isinstance(parsed, ArrayMeta | GroupMeta):
            return parsed
        node: Node | None = None
        if documents.get(".zarray") is not None:
            attrs = parse_attributes(documents[".zattrs"], where)
            node = parse_v2_array(documents[".zarray"], path, path, attrs, where)
        elif documents.get(".zgroup") is not None:
            require_object(documents[".zgroup"], where)
            node = GroupMeta(path, "2", parse_attributes(documents[".zattrs"], where))
        if node is not None and self.consolidated is not None:
            # The documents are let go once parsed (as V3Dialect.node does); the node's key stays, for
            # `child_names`.
            kind = ".zarray" if isinstance(node, ArrayMeta) else ".zgroup"
            self.consolidated[join_key(path, kind)] = node
            if join_key(path, ".zattrs") in self.consolidated:  # (kept as a key: no listing sees the dict resized)
                self.consolidated[join_key(path, ".zattrs")] = None
        return node

    def child_names(self, path: str) -> list[str]:
        if self.consolidated is not None:
            prefix = path + "/" if path else ""
            names = set()
            for key in self.consolidated:
                rest = key[len(prefix):] if key.startswith(prefix) else None
                if rest and rest.count("/") == 1 and rest.endswith(("/.zarray", "/.zgroup")):
                    names.add(rest.split("/")[0])
            return sorted(names)
        return sorted(d for d in self.listings.dirs(path) if not d.startswith("."))


class V1Dialect:
    """A v1 store is one array at the store root."""

    zarr_format = "1"

    def __init__(self, store: Store) -> None:
        self.store = store

    def node(self, path: str) -> Node | None:
        if path:
            return None
        where = f"{self.store.display_name}: meta"
        attrs = parse_attributes(get_json(self.store, "attrs"), where)
        return parse_v1_array(get_json(self.store, "meta"), attrs, where)

    def child_names(self, path: str) -> list[str]:
        return []


# ------------------------------------------------------------------------ v3


_GROUP_KEYS = {"zarr_format", "node_type", "attributes", "consolidated_metadata"}
# Documents of alike arrays remembered at once (the oldest forgotten past it).
MAX_ALIKE_ARRAYS = 4096


class AlikeArrays:
    """v3 arrays whose documents differ only in their attributes share everything parsed of them but their
    path, chunk keys and attributes (shape, data type, grid, fill value, codec pipeline: immutable, and
    free of the array's path): a wide group of like arrays parses one document, and holds one of each."""

    def __init__(self) -> None:
        self._parsed: dict[str, ArrayMeta] = {}
        self._lock = threading.Lock()

    def array(self, doc: dict[str, Any], path: str, where: str) -> ArrayMeta:
        signature = json.dumps({key: value for key, value in doc.items() if key != "attributes"}, sort_keys=True)
        with self._lock:
            alike = self._parsed.get(signature)
        if alike is None:
            meta = parse_v3_array(doc, path, path, where)
            with self._lock:
                if len(self._parsed) >= MAX_ALIKE_ARRAYS:
                    del self._parsed[next(iter(self._parsed))]
                self._parsed[signature] = meta
            return meta
        attributes = doc.get("attributes", {})
        if not isinstance(attributes, dict):
            raise MetadataError(f"{where}: attributes must be an object")
        if attributes == alike.attributes:  # held once (most often `{}`): nothing changes a node's attributes
            attributes = alike.attributes
        return dataclasses.replace(alike, path=path, attributes=attributes,
                                   chunk_key=chunk_key_encoding(doc.get("chunk_key_encoding"), path, where))


class V3Dialect:
    zarr_format = "3"

    def __init__(self, store: Store, root_doc: dict[str, Any]) -> None:
        self.store = store
        self.consolidated = self._consolidated(root_doc)
        # Read by detection: no second GET for the root. Without its consolidated block, which
        # `consolidated` holds (and lets go of node by node, see `node`).
        self.root_doc = {key: value for key, value in root_doc.items() if key != "consolidated_metadata"} \
            if self.consolidated is not None else root_doc
        if self.consolidated is not None:
            self.consolidated[""] = self.root_doc
        self.listings = Listings(store)
        self._alike = AlikeArrays()

    @staticmethod
    def _consolidated(root_doc: dict[str, Any]) -> dict[str, Any] | None:
        block = root_doc.get("consolidated_metadata")
        if isinstance(block, dict) and isinstance(block.get("metadata"), dict):
            return dict(block["metadata"])
        return None

    def _doc(self, path: str) -> Any | None:
        if self.consolidated is not None:
            return self.consolidated.get(path)  # holds every node of the hierarchy
        if not path:
            return self.root_doc
        return get_json(self.store, join_key(path, "zarr.json"))

    def node(self, path: str) -> Node | None:
        where = f"{self.store.display_name}: /{path}"
        doc = self._doc(path)
        if doc is None or isinstance(doc, ArrayMeta | GroupMeta):
            return doc
        node = self._parse(require_object(doc, where), path, where)
        if self.consolidated is not None:
            # The document is let go once parsed: the daemon holds one form of each node, not both
            # (a flat group of 100,000 arrays would hold 35 MB of JSON twice over). Its key stays, for
            # `child_names`.
            self.consolidated[path] = node
        return node

    def _parse(self, doc: dict[str, Any], path: str, where: str) -> Node:
        if doc.get("zarr_format") != 3:
            raise MetadataError(f"{where}: zarr_format must be 3, got {doc.get('zarr_format')!r}")
        node_type = doc.get("node_type")
        if node_type == "array":
            return self._alike.array(doc, path, where)
        if node_type == "group":
            check_must_understand(doc, _GROUP_KEYS, where)
            return GroupMeta(path, "3", parse_attributes(doc.get("attributes"), where))
        raise MetadataError(f"{where}: node_type must be 'array' or 'group', got {node_type!r}")

    def child_names(self, path: str) -> list[str]:
        if self.consolidated is not None:
            prefix = path + "/" if path else ""
            names = {k[len(prefix):] for k in self.consolidated
                     if k and k.startswith(prefix) and "/" not in k[len(prefix):]}
        else:
            names = set(self.listings.dirs(path))
        return sorted(n for n in names if not n.startswith("__"))  # '__' names are reserved in v3
