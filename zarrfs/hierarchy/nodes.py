"""The nodes of one store, discovered lazily through its dialect and remembered."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import NotFoundError, ZarrfsError
from ..model.limits import bounded_children
from ..model.meta import join_key
from ..stores.store import Store
from .detect import detect
from .dialects import Dialect, Node

log = logging.getLogger(__name__)


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
