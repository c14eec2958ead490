"""The nodes of one store, discovered lazily through its dialect and the conventions, and remembered.

A group's children are the union of what the store lists (or its
consolidated metadata holds) and what metadata names below it
(`named.py`): a store that cannot list, the normal case for public data
over plain HTTP, is walked through its conventions alone.

On a remote store, metadata is fetched at the store's concurrency: the
children of a group are fetched side by side, and every node a group's
metadata names is fetched ahead, in the background, so that walking an
OME-Zarr plate does not wait one round trip per directory. Each node is
fetched once (single flight: a lookup that wants a node being fetched ahead
waits for that fetch, or runs it itself when it has not started), an absent
node is remembered, and a lookup never waits behind the background's queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import NotFoundError, ZarrfsError
from ..model.limits import check_children
from ..model.meta import GroupMeta, join_key
from ..stores.store import Store
from .detect import detect
from .dialects import Dialect, Node
from .named import CONSECUTIVE_BATCH, naming

log = logging.getLogger(__name__)


# NAME_MAX (255) less the longest suffix a node's file gets ('.bigtiff.tif').
MAX_NAME_BYTES = 255 - 12
# Nodes fetched ahead of any lookup, at most, per metadata generation: a hierarchy that names millions of
# nodes is still walked on demand past this, and its metadata never outgrows the daemon.
MAX_FETCHED_AHEAD = 200_000


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


class _Load:
    """One node's fetch, shared by everyone who wants it: the first to claim it runs it."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.claimed = False
        self.done = threading.Event()
        self.node: Node | None = None
        self.error: ZarrfsError | None = None


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
        self._absent: set[str] = set()
        self._loads: dict[str, _Load] = {}
        self._named: dict[str, set[str]] = {}  # group path -> child names its or an ancestor's metadata names
        self._children: dict[str, list[Child]] = {}
        self._fetched_ahead = 0
        self._generation = 0
        self.refreshes = 0
        # A remote store's metadata is fetched side by side: lookups in `_demand`, names fetched ahead in
        # `_ahead`. Separate pools, so that a lookup never queues behind the work ahead.
        workers = store.options.max_concurrency
        self._demand = ThreadPoolExecutor(workers, "zarrfs-metadata") if store.remote else None
        self._ahead = ThreadPoolExecutor(max(1, workers // 2), "zarrfs-discovery") if store.remote else None
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
        with self._lock:
            return {"ttl": self.ttl, "refreshes": self.refreshes, "nodes": len(self._nodes),
                    "absent": len(self._absent), "fetched_ahead": self._fetched_ahead}

    def close(self) -> None:
        """Stop fetching ahead (the daemon is stopping); fetches under way end by the store's timeout."""
        for pool in (self._ahead, self._demand):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def root(self) -> Node:
        return self.node("")

    def node(self, path: str) -> Node:
        self._refresh_if_stale()
        found = self._get(path)
        if found is None:
            raise NotFoundError(f"{self.store.display_name}: no Zarr node at /{path}")
        return found

    def fetch_named_below(self, path: str) -> None:
        """Fetch every node the metadata of group `path` names, and what those name in turn, side by side
        on a remote store: for a file built from a whole subtree (a plate's OME-TIFF), before its build
        looks the nodes up one by one."""
        seen = {path}
        frontier = [path]
        while frontier:
            groups = [node for node, _ in self._get_many(frontier) if isinstance(node, GroupMeta)]
            frontier = [named for group in groups for named in naming(group).paths if named not in seen]
            seen.update(frontier)

    def children(self, path: str) -> list[Child]:
        """The child nodes of group `path`; a broken child carries its error."""
        dialect = self.dialect
        with self._lock:
            cached = self._children.get(path)
        if cached is not None:
            return cached
        try:
            group = self._get(path)  # its metadata names children: before they are gathered
        except ZarrfsError:
            group = None  # reported where it is looked up; its listing may still show children
        names = set(dialect.child_names(path))
        if isinstance(group, GroupMeta) and naming(group).consecutive is not None:
            names.update(self._consecutive(path))
        children: list[Child] = []
        gathered: set[str] = set()
        while True:
            # A child may name siblings (a collection's OME group names its series): gather until
            # no new name turns up.
            with self._lock:
                names.update(self._named.get(path, ()))
            new = sorted(names - gathered)
            if not new:
                break
            gathered.update(new)
            check_children(len(gathered), f"{self.store.display_name}: /{path}")
            children += self._gather(path, new)
        children.sort(key=lambda child: child.name)
        with self._lock:
            return self._children.setdefault(path, children)

    def _gather(self, path: str, names: list[str]) -> list[Child]:
        """The children `names` of `path` that are nodes, and the broken ones with their errors."""
        valid = []
        for name in names:
            if valid_node_name(name):
                valid.append(name)
            else:
                log.warning("%s: /%s: skipping child %r%s: not a valid node name", self.store.display_name, path,
                            name[:64], f" ({len(name)} characters)" if len(name) > 64 else "")
        children = []
        for name, (found, error) in zip(valid, self._get_many(join_key(path, name) for name in valid), strict=True):
            if error is not None:
                log.warning("%s", error)
                children.append(Child(name, None, error))
            elif found is not None:  # None: a directory that is not a node (chunk folders), or named but absent
                children.append(Child(name, found))
        return children

    # ------------------------------------------------------------ fetching

    def _get(self, path: str) -> Node | None:
        """The node at `path`, None when there is none; fetched once however many ask at once."""
        load, run = self._claim(path)
        if load is None:
            with self._lock:
                return self._nodes.get(path)
        if run:
            self._run(path, load)
        else:
            load.done.wait()
        if load.error is not None:
            raise load.error
        return load.node

    def _get_many(self, paths: Iterable[str]) -> list[tuple[Node | None, ZarrfsError | None]]:
        """(node or None, error) of each path, fetched side by side on a remote store."""

        def one(path: str) -> tuple[Node | None, ZarrfsError | None]:
            try:
                return self._get(path), None
            except NotFoundError:
                return None, None
            except ZarrfsError as exc:
                return None, exc

        paths = list(paths)
        if self._demand is None or len(paths) < 2:
            return [one(path) for path in paths]
        return list(self._demand.map(one, paths))

    def _claim(self, path: str) -> tuple[_Load | None, bool]:
        """(the load of `path`, whether the caller runs it); (None, False) when the answer is known."""
        with self._lock:
            if path in self._nodes or path in self._absent:
                return None, False
            load = self._loads.get(path)
            if load is None:
                load = self._loads[path] = _Load(self._generation)
            run = not load.claimed
            load.claimed = True
            return load, run

    def _run(self, path: str, load: _Load) -> None:
        try:
            load.node = self._dialect.node(path)
        except ZarrfsError as exc:
            load.error = exc  # not remembered: a store may fail only for a while
        except Exception as exc:  # noqa: BLE001 - the waiters must wake whatever happened
            load.error = ZarrfsError(f"{self.store.display_name}: /{path}: {type(exc).__name__}: {exc}")
        with self._lock:
            if load.generation == self._generation:
                if load.node is not None:
                    self._nodes[path] = load.node
                elif load.error is None:
                    self._absent.add(path)
            if self._loads.get(path) is load:
                del self._loads[path]
        load.done.set()
        if isinstance(load.node, GroupMeta) and load.generation == self._generation:
            self._learn_names(load.node)

    def _learn_names(self, group: GroupMeta) -> None:
        """Remember the children `group`'s metadata names, and fetch them ahead on a remote store."""
        paths = naming(group).paths
        if not paths:
            return
        with self._lock:
            for path in paths:
                parts = path.split("/")
                for depth in range(1, len(parts) + 1):
                    self._named.setdefault("/".join(parts[:depth - 1]), set()).add(parts[depth - 1])
            ahead = [p for p in paths if p not in self._nodes and p not in self._absent and p not in self._loads]
            ahead = ahead[:max(0, MAX_FETCHED_AHEAD - self._fetched_ahead)]
            self._fetched_ahead += len(ahead)
        if self._ahead is not None:
            for path in ahead:
                try:
                    self._ahead.submit(self._fetch_ahead, path)
                except RuntimeError:  # shut down: the daemon is stopping
                    return

    def _fetch_ahead(self, path: str) -> None:
        load, run = self._claim(path)
        if load is not None and run:
            self._run(path, load)

    def _consecutive(self, path: str) -> list[str]:
        """The series `0`, `1`, ... of a collection without a `series` list, up to the first missing one."""
        listed = self._get(join_key(path, "OME"))
        if isinstance(listed, GroupMeta) and isinstance(listed.attributes.get("series"), list):
            return []  # the list is named by the OME group (named.py)
        found: list[str] = []
        while True:
            check_children(len(found) + CONSECUTIVE_BATCH, f"{self.store.display_name}: /{path}")
            batch = [str(number) for number in range(len(found), len(found) + CONSECUTIVE_BATCH)]
            for name, (node, _) in zip(batch, self._get_many(join_key(path, name) for name in batch), strict=True):
                if not isinstance(node, GroupMeta):
                    return found
                found.append(name)
        return found

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
                self._absent.clear()
                self._loads.clear()
                self._named.clear()
                self._children.clear()
                self._fetched_ahead = 0
                self._generation += 1
                self.refreshes += 1
                self._loaded_at = time.monotonic()
