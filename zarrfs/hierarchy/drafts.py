"""The 2022 Zarr v3 drafts' layouts: `meta/` documents, groups implied by their descendants."""

from __future__ import annotations

from typing import Any

from ..model.v3_drafts import parse_seed_array, parse_zp2_array
from ..model.meta import GroupMeta, join_key, require_object
from ..stores.store import Store
from .dialects import Node
from .documents import get_json, parse_attributes


class Zp2DraftDialect:
    """zarr-python 2.12-2.18 `ZARR_V3_EXPERIMENTAL_API`: `meta/root/<path>.array.json`."""

    zarr_format = "3-draft-zp2"

    def __init__(self, store: Store) -> None:
        self.store = store

    def _meta_key(self, path: str, kind: str) -> str:
        return f"meta/root.{kind}.json" if not path else f"meta/root/{path}.{kind}.json"

    def node(self, path: str) -> Node | None:
        where = f"{self.store.display_name}: /{path}"
        doc = get_json(self.store, self._meta_key(path, "array"))
        if doc is not None:
            return parse_zp2_array(doc, path, where)
        doc = get_json(self.store, self._meta_key(path, "group"))
        if doc is not None:
            return _group(path, self.zarr_format, doc, where)
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
        doc = get_json(self.store, f"meta/{path}.array.json" if path else "meta/array.json")
        if doc is not None:
            return parse_seed_array(doc, path, where)
        doc = get_json(self.store, f"meta/{path}.group.json" if path else "meta/group.json")
        if doc is not None:
            return _group(path, self.zarr_format, doc, where)
        # Groups may be implicit: implied by descendants, the root always.
        if not path or any(self.store.listdir(f"meta/{path}")):
            return GroupMeta(path, self.zarr_format, {})
        return None

    def child_names(self, path: str) -> list[str]:
        names = _draft_children(self.store, join_key("meta", path))
        return [n for n in names if path or n not in ("array", "group")]


def _group(path: str, zarr_format: str, doc: Any, where: str) -> GroupMeta:
    """A draft's group document: its attributes sit under `attributes`."""
    return GroupMeta(path, zarr_format, parse_attributes(require_object(doc, where).get("attributes"), where))


def _draft_children(store: Store, meta_prefix: str) -> list[str]:
    dirs, files = store.listdir(meta_prefix)
    names = set(dirs)
    for name in files:
        for suffix in (".array.json", ".group.json"):
            if name.endswith(suffix):
                names.add(name[: -len(suffix)])
    return sorted(names)
