"""Byte ranges of one object fetched side by side, handed out in order.

A load task that needs several ranges of one shard (inner chunks that do not
sit next to each other) would otherwise wait for each request in turn, and
decode nothing while it waits. On a network store `RangeFetches` keeps up to
`AHEAD` of them in flight while the task decodes the ones that have arrived.

Fetches run on their own small pool of daemon threads (started on first use,
after the daemon forks), never on the loaders' pool: a loader waits for them,
and waiting for a task queued behind itself on its own pool could deadlock.
A span no fetch thread has started when the load needs it, the load fetches
itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from itertools import islice

from ..byte_ranges import RangeRequest
from ..errors import StoreError, ZarrfsError
from ..stores.store import Store
from .pool import DEMAND, PREFETCH, PriorityPool, Task

# Ranges of one load task in flight at once, the one being decoded included: with runs of at
# most COALESCE_MAX (chunks.py) a task holds at most this many of them.
AHEAD = 4
# Fetch threads per store, as a share of its `max_concurrency`: a load fetches the spans no
# thread has started itself, so few threads serve many loads, and each thread costs memory
# (its stack).
THREADS_PER_REQUEST_SLOT = 0.25

Fetched = bytes | bytearray | None | ZarrfsError
Pieces = list[tuple[int, int]]  # byte ranges within one span


class RangeFetches:
    """Ranges of store objects, several at once on a network store, one after another on a local one."""

    def __init__(self, store: Store) -> None:
        self.store = store
        threads = max(1, int(store.options.max_concurrency * THREADS_PER_REQUEST_SLOT))
        self._pool = PriorityPool(threads, "fetch") if store.remote else None

    def ranges(self, key: str, spans: list[tuple[int, int]],
               pieces: list[Pieces] | None = None) -> Iterator[Fetched]:
        """Each span's bytes (None: the object is gone; an error: that span failed), in the order given.

        `pieces`, one list per span: the ranges in it the reader uses (the
        inner chunks a run covers), for the disk cache to keep one by one.
        """
        runs = [(start, stop, pieces[n] if pieces else None) for n, (start, stop) in enumerate(spans)]
        if self._pool is None or len(runs) < 2:
            yield from (self._fetch(key, *run) for run in runs)
            return
        upcoming = iter(runs)
        first = next(upcoming)
        pending: deque[tuple[tuple[int, int, Pieces | None], Task, Future]] = deque(
            (span, *self._submit(key, *span)) for span in islice(upcoming, AHEAD - 1))
        yield self._fetch(key, *first)
        while pending:
            span, task, future = pending.popleft()
            # A span no pool thread has started is fetched here: a pool busy with other loads'
            # spans delays none of this one's, and the pool can stay small.
            fetched = self._fetch(key, *span) if task.claim() else self._result(future)
            for later in islice(upcoming, 1):
                pending.append((later, *self._submit(key, *later)))
            yield fetched

    def ahead(self, fetch: Callable[[], None]) -> bool:
        """Run `fetch` (bytes no load waits for yet: a shard fetched whole ahead of its decodes,
        shard_spans.py) on the fetch threads, after the fetches loads wait for. False on a local
        store, where nothing is worth fetching ahead (and nothing runs)."""
        if self._pool is None:
            return False
        self._pool.submit(Task(fetch), PREFETCH)
        return True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def _result(self, future: Future) -> Fetched:
        # Each fetch ends within the store's bounds; only a pool shut down under it (the engine
        # closing) leaves one unrun, and its waiter must not hang.
        try:
            return future.result(timeout=self.store.options.worst_case_seconds() + 1)
        except TimeoutError:
            return StoreError(f"{self.store.display_name}: a fetch did not run (the mount is closing)")

    def _submit(self, key: str, start: int, stop: int, pieces: Pieces | None) -> tuple[Task, Future]:
        future: Future = Future()

        def run() -> None:
            try:
                future.set_result(self._fetch(key, start, stop, pieces))
            except BaseException as exc:  # a bug, not a store failure: still delivered to the waiter
                future.set_exception(exc)

        task = Task(run)
        assert self._pool is not None
        self._pool.submit(task, DEMAND)
        return task, future

    def _fetch(self, key: str, start: int, stop: int, pieces: Pieces | None) -> Fetched:
        try:
            span = RangeRequest(start, stop)
            return self.store.get_run(key, span, pieces) if pieces else self.store.get_range(key, span)
        except ZarrfsError as exc:
            return exc
