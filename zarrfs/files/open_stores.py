"""The stores of a mount of many stores that are open: each opened at the first lookup below it, under its
own lock; past `--max-open-stores` the least recently used that nothing uses are closed."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from ..engine.engine import SharedParts
from ..errors import NotZarrError, StoreError, ZarrfsError
from ..hierarchy.folders import ShareFolders, shown_url
from .share_nodes import Folder, StoreMount
from .tree import SharedLayouts, VirtualTree

log = logging.getLogger(__name__)

# The most directories below stores whose resolution is kept (~200 bytes each); past it all are let go.
MAX_RESOLVED_PREFIXES = 16384


class ResolvedPrefixes:
    """Directory mount paths at or below a store root -> (that store, the directory's path inside it): a
    lookup in a known directory is one dict look-up, not a walk from the root. Bounded; a store's entries
    go when it closes (its mount path is resolved again, and the store reopened, at its next lookup)."""

    def __init__(self, bound: int = MAX_RESOLVED_PREFIXES) -> None:
        self._bound = bound
        self._by_path: dict[str, tuple[StoreMount, str]] = {}
        self._by_store: dict[StoreMount, list[str]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_path)

    def get(self, path: str) -> tuple[StoreMount, str] | None:
        return self._by_path.get(path)  # (one dict read: atomic)

    def put(self, path: str, mount: StoreMount, rest: str) -> None:
        with self._lock:
            if path in self._by_path:
                return
            if len(self._by_path) >= self._bound:
                self._by_path.clear()  # (letting all go keeps it one dict: a walk rebuilds what is used)
                self._by_store.clear()
            self._by_path[path] = (mount, rest)
            self._by_store.setdefault(mount, []).append(path)

    def drop(self, mount: StoreMount) -> None:
        with self._lock:
            for path in self._by_store.pop(mount, ()):
                self._by_path.pop(path, None)

    def clear(self) -> None:
        with self._lock:
            self._by_path.clear()
            self._by_store.clear()


class OpenStores:
    """The open stores, least recently used first, with what opening and closing them counted."""

    def __init__(self, shared: SharedParts, suffixes: tuple[str, ...], max_open_stores: int) -> None:
        self.shared = shared
        self.suffixes = suffixes
        self.max_open_stores = max_open_stores
        # One set for every store: a layout is made of an array's shape, dtype and semantics alone, so a
        # share's like stores (a plate's wells, a series of products) plan and size their files once.
        self.layouts = SharedLayouts()
        self._open: OrderedDict[StoreMount, None] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0
        self.closed = 0
        self.prefixes = ResolvedPrefixes()

    def count(self) -> int:
        with self._lock:
            return len(self._open)

    def close_all(self) -> None:
        with self._lock:
            stores = list(self._open)
            self._open.clear()
        for mount in stores:
            self._close_store(mount)

    def tree_of(self, mount: StoreMount) -> VirtualTree | None:
        """The store's tree, opened now if it is not (None when it cannot be, with `mount.error` set, or when a
        catalog's entry turned out to be a share, with `mount.folder` set)."""
        with mount.lock:
            if mount.tree is None and mount.error is None and mount.folder is None:
                self._open_store(mount)
            tree = mount.tree
        if tree is not None:
            self._note_open(mount)
        return tree

    def _open_store(self, mount: StoreMount) -> None:
        source = mount.source
        try:
            mount.tree = VirtualTree.of_source(source.url, source.storage_options, source.options, self.suffixes,
                                               self.shared, self.layouts)
            self.opened += 1
        except NotZarrError as exc:
            folder = self._as_share(mount) if mount.may_be_share else None
            if folder is None:
                mount.error = exc
                log.error("%s: cannot be opened: %s", shown_url(source.url), exc)
            mount.folder = folder
        except ZarrfsError as exc:
            mount.error = exc
            log.error("%s: cannot be opened: %s", shown_url(source.url), exc)
        except Exception as exc:  # noqa: BLE001 - one store's bug must not break the mount
            log.exception("%s: cannot be opened", shown_url(source.url))
            mount.error = StoreError(f"{shown_url(source.url)}: cannot be opened: {type(exc).__name__}: {exc}")

    @staticmethod
    def _as_share(mount: StoreMount) -> Folder | None:
        """A catalog entry's SOURCE as a share, when it is a folder or prefix with something in it."""
        source = mount.source
        try:
            share = ShareFolders.open(source.url, source.storage_options, source.options.store)
        except ZarrfsError:
            return None
        return None if share is None else Folder(share, "", source.options)

    def _note_open(self, mount: StoreMount) -> None:
        """`mount` is in use: the most recently used open store. Past the bound, the least recently used ones
        that no open file reads are closed."""
        idle: list[StoreMount] = []
        with self._lock:
            self._open[mount] = None
            self._open.move_to_end(mount)
            # (a walk only past the bound: every lookup below a store comes here)
            for candidate in list(self._open) if len(self._open) > self.max_open_stores else ():
                if len(self._open) <= self.max_open_stores:
                    break
                if candidate is not mount and candidate.users == 0:
                    idle.append(candidate)
                    del self._open[candidate]
        for candidate in idle:
            self._close_store(candidate)

    def _close_store(self, mount: StoreMount) -> None:
        self.prefixes.drop(mount)
        with mount.lock:
            tree, mount.tree = mount.tree, None
        if tree is not None:
            summary = tree.close()
            self.closed += 1
            log.debug("%s: closed (%s)", shown_url(mount.source.url), summary)
