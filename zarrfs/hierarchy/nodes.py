"""The nodes of one store, discovered lazily through its dialect and the conventions, and remembered.

A group's children are the union of what the store lists (or its
consolidated metadata holds) and what metadata names below it
(`named.py`): a store that cannot list, the normal case for public data
over plain HTTP, is walked through its conventions alone.

On a remote store, metadata is fetched at the store's concurrency: the
children of a group are fetched side by side, and every node a group's
metadata names is fetched ahead, in walk order (`ahead.py`), so that walking
an OME-Zarr plate does not wait one round trip per directory. Each node is
loaded once (`SingleFlight`: a lookup that wants a node being fetched waits
for that fetch, or runs it itself when it has not started), an absent node
is remembered (`learnt.py`), and a lookup never waits behind the queue of
nodes fetched ahead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import NotFoundError, ZarrfsError
from ..model.limits import check_children
from ..model.meta import GroupMeta, join_key
from ..single_flight import SingleFlight
from ..stores.store import Store
from .ahead import FetchAhead
from .detect import detect
from .dialects import Dialect, Node
from .learnt import Child, Learnt
from .named import CONSECUTIVE_BATCH, naming

log = logging.getLogger(__name__)


# NAME_MAX (255) less the longest suffix a node's file gets ('.bigtiff.tif').
MAX_NAME_BYTES = 255 - 12
# Nodes queued to be fetched ahead of any lookup, at most, per metadata generation: a hierarchy that names
# millions of nodes is still walked on demand past this, and its metadata never outgrows the daemon.
MAX_FETCHED_AHEAD = 200_000
# The store's requests in flight that fetching ahead leaves to lookups and chunk reads: one in this many.
DEMAND_SHARE = 8


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
        self._lock = threading.Lock()  # guards `_learnt` and `_dialect`
        self._refresh_lock = threading.Lock()
        self._learnt = Learnt(generation=0)
        self._loads: SingleFlight[tuple[int, str]] = SingleFlight()  # by (generation, path)
        self.refreshes = 0
        # A remote store's metadata is fetched side by side: lookups in `_demand`, the nodes metadata names
        # in `_ahead`. Apart, so that a lookup never queues behind the work ahead. The store bounds the
        # documents in flight (`document_concurrency`, beside its chunk reads); the work ahead leaves some
        # of them to lookups, which would otherwise wait for the whole queue (a slot freed goes to the
        # thread that asks first).
        workers = store.options.document_concurrency
        self._demand = ThreadPoolExecutor(workers, "zarrfs-metadata") if store.remote else None
        self._ahead = FetchAhead(self._fetch_ahead, max(1, workers - max(1, workers // DEMAND_SHARE)),
                                 MAX_FETCHED_AHEAD, "zarrfs-discovery") if store.remote else None
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
        return self._learnt.generation

    @property
    def zarr_format(self) -> str:
        return self.dialect.zarr_format

    def stats(self) -> dict[str, Any]:
        with self._lock:
            learnt = self._learnt
            figures = {"ttl": self.ttl, "refreshes": self.refreshes, "nodes": len(learnt.nodes),
                       "absent": len(learnt.absent)}
        return {**figures, "fetched_ahead": self._ahead.queued if self._ahead is not None else 0}

    def close(self) -> None:
        """Stop fetching ahead (the daemon is stopping); fetches under way end by the store's timeout."""
        if self._ahead is not None:
            self._ahead.close()
        if self._demand is not None:
            self._demand.shutdown(wait=False, cancel_futures=True)

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
            learnt = self._learnt
            cached = learnt.children.get(path)
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
                names.update(learnt.named.get(path, ()))
            new = sorted(names - gathered)
            if not new:
                break
            gathered.update(new)
            check_children(len(gathered), f"{self.store.display_name}: /{path}")
            children += self._gather(path, new)
        children.sort(key=lambda child: child.name)
        with self._lock:
            return learnt.children.setdefault(path, children)

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
        """The node at `path`, None when there is none; loaded once however many ask at once."""
        with self._lock:
            learnt = self._learnt
            if learnt.knows(path):
                return learnt.nodes.get(path)
        return self._loads.run((learnt.generation, path), lambda: self._load(path, learnt))

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
        with self._lock:
            learnt = self._learnt
            unknown = [path for path in paths if not learnt.knows(path)]
        if self._demand is None or len(unknown) < 2:
            return [one(path) for path in paths]
        # Only what is unknown goes to the pool: a hand-over costs a thread switch, which on a busy
        # interpreter waits for the GIL; known nodes (most of them, once fetched ahead) answer here.
        answers = dict(zip(unknown, self._demand.map(one, unknown), strict=True))
        return [answers[path] if path in answers else one(path) for path in paths]

    def _load(self, path: str, learnt: Learnt) -> Node | None:
        """Read the node at `path` (None: there is none) into `learnt`; a group's named nodes are learnt,
        and fetched ahead, before its waiters wake. An error is not remembered: a store may fail only for
        a while."""
        with self._lock:
            if learnt.knows(path):  # loaded while this caller was on its way to the flight
                return learnt.nodes.get(path)
            dialect = self._dialect
        try:
            node = dialect.node(path)
        except ZarrfsError:
            raise
        except Exception as exc:  # the waiters must wake whatever happened
            raise ZarrfsError(f"{self.store.display_name}: /{path}: {type(exc).__name__}: {exc}") from exc
        with self._lock:
            if learnt is not self._learnt:
                return node  # the metadata was read anew meanwhile: this answer is the old reading's
            learnt.found(path, node)
            ahead = learnt.name(naming(node).paths) if isinstance(node, GroupMeta) else []
        if ahead and self._ahead is not None:
            self._ahead.add(ahead, learnt.generation)
        return node

    def _fetch_ahead(self, path: str, generation: int) -> None:
        """Load `path` unless it is known or being loaded (`FetchAhead`'s fetch)."""
        with self._lock:
            learnt = self._learnt
            if learnt.generation != generation or learnt.knows(path):
                return
        try:
            self._loads.run_unless_under_way((generation, path), lambda: self._load(path, learnt))
        except ZarrfsError:
            pass  # not remembered: the lookup that wants this node loads it again, and reports it

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
                # Everything learnt from the old reading goes at once; a load under way for it still
                # answers its waiters, but is not remembered, and queues nothing ahead.
                self._learnt = Learnt(self._learnt.generation + 1)
                if self._ahead is not None:
                    self._ahead.forget(self._learnt.generation)
                self.refreshes += 1
                self._loaded_at = time.monotonic()
