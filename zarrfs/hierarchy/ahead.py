"""Nodes fetched ahead of their lookups: what a group's metadata names is loaded before anyone asks.

A store that cannot list is walked through what metadata names (`named.py`):
a plate names its wells, a well its fields, a field its levels and labels.
Waiting for each directory's lookup before fetching what it names would cost
one round trip per directory, in a row; so as soon as a group's metadata is
known, every node it names is queued here, and `workers` threads (the store's
`--max-concurrency`) fetch the queue side by side. What they fetch names more
nodes in turn, which join the queue: the whole tree is fetched at the store's
concurrency, ahead of a walk such as `find`.

The queue is ordered as a walk visits the tree (depth first, children by
name, as `find` and `ls -R` do): what a walk will ask for next is fetched
first, so it rarely waits. Each path is queued once per metadata generation,
and at most `limit` paths per generation: past that a hierarchy is walked on
demand, so naming millions of nodes never makes the daemon hold them all.
The fetch itself (single flight, absent nodes remembered) is the caller's.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)


def walk_order(path: str) -> str:
    """A sort key putting a node after its parent and before its parent's next sibling ('A/1' < 'A/1/0' <
    'A/1-x' < 'A/10'): a '/' sorts below every character a name holds."""
    return path.replace("/", "\x00")


class FetchAhead:
    """A queue of node paths in walk order and the threads that fetch it.

    `fetch(path, generation)` loads one node (and, for a group, queues what
    it names by calling `add`); it skips a node that is known or being
    loaded already. Threads are started as the queue needs them, up to
    `workers`, and end when it is empty: an idle hierarchy (a share holds
    many) keeps none.
    """

    def __init__(self, fetch: Callable[[str, int], None], workers: int, limit: int, name: str) -> None:
        self._fetch = fetch
        self._workers = workers
        self._limit = limit
        self._name = name
        self._lock = threading.Lock()
        self._queue: list[tuple[str, str]] = []  # a heap of (walk order, path)
        self._queued: set[str] = set()  # every path queued in this generation: each once
        self._generation = 0
        self._running = 0  # threads started and not ended
        self._closed = False

    @property
    def queued(self) -> int:
        """Paths queued in this generation (fetched, being fetched or waiting)."""
        with self._lock:
            return len(self._queued)

    def add(self, paths: Iterable[str], generation: int) -> None:
        """Queue `paths` of metadata generation `generation` (ignored if that is no longer the current one)."""
        with self._lock:
            if self._closed or generation != self._generation:
                return
            added = 0
            for path in paths:
                if len(self._queued) >= self._limit:
                    break
                if path not in self._queued:
                    self._queued.add(path)
                    heapq.heappush(self._queue, (walk_order(path), path))
                    added += 1
            starting = min(added, self._workers - self._running)
            self._running += starting
        for _ in range(starting):
            threading.Thread(target=self._work, name=self._name, daemon=True).start()

    def forget(self, generation: int) -> None:
        """The metadata was read anew (`generation`): what was queued for the old one is dropped."""
        with self._lock:
            self._generation = generation
            self._queue.clear()
            self._queued.clear()

    def close(self) -> None:
        """Stop: the threads end after the fetch each has under way (bounded by the store's timeout)."""
        with self._lock:
            self._closed = True
            self._queue.clear()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running -= 1
                    return
                _, path = heapq.heappop(self._queue)
                generation = self._generation
            try:
                self._fetch(path, generation)
            except Exception:  # one node's fetch failing must not leave the rest of the queue undone
                log.exception("fetching /%s ahead", path)
