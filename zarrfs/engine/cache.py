"""A byte-bounded LRU of decoded chunks, holding futures so each key loads once.

Whoever misses a key first creates its future (`SingleFlight.join`,
single_flight.py); every other thread that wants the same key while it
loads waits on that future instead of loading again. The loads themselves
run on the pool (one key, or one batch group, per task), not in the caller.
Finished values enter the LRU with their size; the least recently used leave
until the budget holds. Failed loads are not cached: the next read retries.

A `Batch` lets misses that belong together (inner chunks of one shard) load
in one task, so the loader can fetch adjacent byte ranges in one request;
each key still has its own future, created under the lock, so a key loads
once however many threads or batches want it.

Values handed to reads are leased (`get_many`; `release` ends the leases).
Which entries leave when the budget is short, and where their
memory goes, is lru.py's; what else the budget covers (streams' windows,
bands being read, readahead's share) is budget.py's. The cache evicts for
both and asks the budget before starting a readahead load. The worker pool
is created on first use, never at import or construction, so no thread
exists before the daemon forks.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from ..errors import ZarrfsError
from ..single_flight import SingleFlight
from .budget import ReadaheadBudget
from .loads import Batch, Loader, load_groups, load_task, resolve, run_one
from .lru import ChunkLru, Entry
from .pool import DEMAND, PREFETCH, PriorityPool, Task
from .served import ServedChunks

K = TypeVar("K", bound=Hashable)  # a caller's keys, handed back as they were given

# Bookkeeping per entry (dict slot, key tuple, future, array header): charged
# so that a cache full of tiny or empty chunks stays bounded too.
ENTRY_OVERHEAD = 256



_tokens = itertools.count()


def new_token() -> int:
    """A process-unique number for cache keys. Never `id()`: ids are reused once
    an object dies, and a reused id would serve another object's cached bytes."""
    return next(_tokens)


def value_nbytes(value: Any) -> int:
    return int(getattr(value, "nbytes", 0)) + ENTRY_OVERHEAD


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    loads: int = 0  # chunks loaded (fetch + decode) by get_many
    side_loads: int = 0  # small side data loaded by get (shard indexes)
    load_errors: int = 0
    evictions: int = 0
    prefetches: int = 0  # misses started by readahead, not by a read
    prefetches_refused: int = 0  # readahead loads not started: the budget had no room for them
    prefetches_unread: int = 0  # chunks readahead loaded that were evicted before any read asked for them
    spares_reused: int = 0  # decodes written into the memory of an evicted chunk (buffers.py)
    cached_bytes: int = 0
    cached_entries: int = 0
    spare_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ChunkCache:
    def __init__(self, budget_bytes: int, max_workers: int) -> None:
        self.budget_bytes = budget_bytes
        self.max_workers = max_workers
        self.budget = ReadaheadBudget(budget_bytes)
        # Cached chunks as the C read path sees them (served.py).
        self.served = ServedChunks()
        self._stats = CacheStats()
        # Readahead reserves a band at a time (64 MiB for 16 chunks of 4 MiB): a buffer pool up
        # to that covers one band's decodes.
        self._lru = ChunkLru(self.budget, self.served, self._stats, min(budget_bytes // 8, 64 << 20))
        self._lock = threading.Lock()
        # The loads under way, one per key: joined and landed under `_lock` (single_flight.py).
        self._flights: SingleFlight[Hashable] = SingleFlight()
        self._waiting: Counter[Hashable] = Counter()  # leases of reads waiting on a load, per key
        self._workers: PriorityPool | None = None
        self._queued: dict[Hashable, Task] = {}  # readahead loads not started yet, for promotion
        self._reserved = 0  # decoded bytes that loads in flight will add

    def get(self, key: Hashable, loader: Loader) -> Any:
        """The value for `key` (side data: shard indexes), loading it in this thread on a miss.
        Counted as `side_loads`, so that `loads` stays the number of chunk decodes; never leased,
        never reused."""
        with self._lock:
            entry = self._hit(key)
            if entry is not None:
                return entry.value
            future, is_new = self._pending(key, 0, prefetch=False)
        if is_new:
            run_one(self._finish, key, loader, future, 0, side=True)
        return future.result()

    def get_many(self, keys: Iterable[K], loader: Loader, *, size_hint: int = 0,
                 prefetch: bool = False, batch: Batch | None = None,
                 ) -> tuple[dict[K, Any], dict[K, Future]]:
        """(values of the keys cached now, futures of the others).

        A read (not `prefetch`) holds a lease on every value it gets, from
        either, until it calls `release`. Misses load in parallel on the
        worker pool, grouped by `batch` when given; `size_hint` (the decoded
        size of one value) is reserved from the budget while a load runs, so
        loads in flight cannot push memory past it.
        """
        values: dict[K, Any] = {}
        pending: dict[K, Future] = {}
        to_start: list[tuple[Hashable, Future]] = []
        promote: dict[int, Task] = {}
        budget = self.budget
        with self._lock:
            for key in keys:
                if not prefetch and budget.has_unread():
                    budget.mark_read(key)
                entry = self._hit(key)
                if entry is not None:
                    if not prefetch:
                        entry.leases += 1
                    values[key] = entry.value
                    continue
                if prefetch and not self._flights.under_way(key) and not budget.room_to_load_ahead(size_hint):
                    self._stats.prefetches_refused += 1
                    break  # keys come in read order: the rest wait for room, or for their reads
                future, is_new = self._pending(key, size_hint, prefetch)
                pending[key] = future
                if not prefetch:
                    self._waiting[key] += 1
                if is_new:
                    to_start.append((key, future))
                    if prefetch:
                        budget.loading_ahead(key, size_hint)
                elif not prefetch and key in self._queued:
                    task = self._queued.pop(key)
                    promote[id(task)] = task
            if not to_start and not promote:  # all cached or loading: the common case of a small read
                return values, pending
            tasks = [(load_task(self._finish, group, loader, batch, size_hint), group)
                     for group in load_groups(to_start, batch)]
            if prefetch:
                self._queued.update((key, task) for task, group in tasks for key, _ in group)
        workers = self._pool()
        for task, _ in tasks:
            workers.submit(task, PREFETCH if prefetch else DEMAND)
        for task in promote.values():
            if not task.claimed:
                workers.submit(task, DEMAND)
        return values, pending

    def release(self, leased: Mapping[Any, Any]) -> None:
        """End the leases a read took on these values (by key)."""
        with self._lock:
            self._lru.release(leased)

    def take_buffer(self, nbytes: int) -> Any:
        """Memory of an evicted chunk to decode `nbytes` into (flat uint8), or None. The load
        taking it had reserved `nbytes`: from here on the reservation covers it."""
        with self._lock:
            return self._lru.take_buffer(nbytes)

    def hold(self, nbytes: int) -> bool:
        """Take `nbytes` of the budget for a stream's window (budget.py), evicting chunks to make
        room; False, taking nothing, when the windows would pass half the budget. The holder gives
        it back with `budget.release`."""
        with self._lock:
            if not self.budget.try_hold(nbytes):
                return False
            self._evict()
            return True

    def claim(self, nbytes: int) -> None:
        """A sequential stream is reading a band of `nbytes` now (`budget.unclaim` gives it back)."""
        with self._lock:
            self.budget.claim(nbytes)

    def demote(self, keys: Iterable[Hashable], *, recycle: bool = False) -> None:
        """Make these entries (those cached) the next to be evicted: a stream is done with them.
        With `recycle`, the next loads take their memory even while the budget has room."""
        with self._lock:
            self._lru.demote(keys, recycle)

    def note_read(self, keys: Iterable[Hashable]) -> None:
        """Reads answered in C (engine/served.py) use these chunks: like a read here, they take
        them out of readahead's share of the budget and make them the most recently used."""
        keys = list(keys)
        with self._lock:
            for key in keys:
                self.budget.mark_read(key)
            self._lru.touch(keys)

    def stats(self) -> CacheStats:
        served_hits = self.served.counters()["chunk_hits"]
        with self._lock:
            self._stats.cached_entries = len(self._lru)
            self._stats.spare_bytes = self._lru.pool.nbytes
            figures = self._stats.as_dict()
        figures["hits"] += served_hits  # reads the C path answered hit the cache too
        return CacheStats(**figures)

    def budget_figures(self) -> dict[str, int]:
        """Bytes the budget covers outside the LRU: windows held, bands claimed."""
        with self._lock:
            self.budget.settle()
            return {"held_bytes": self.budget.held, "claimed_bytes": self.budget.claimed}

    def cached_keys(self) -> list[Hashable]:
        """The keys cached now, least recently used first."""
        with self._lock:
            return self._lru.keys()

    def close(self) -> None:
        """Stop the pool, fail the loads it never started, and drop every entry."""
        with self._lock:
            workers, self._workers = self._workers, None
            self._lru.clear()
        if workers is not None:
            workers.shutdown()
        with self._lock:
            abandoned = self._flights.abandon()
            self._queued.clear()
        for future in abandoned:
            resolve(future, ZarrfsError("zarrfs is shutting down"))

    # The underscore methods below that take no lock expect the caller to hold it.

    def _hit(self, key: Hashable) -> Entry | None:
        entry = self._lru.hit(key)
        if entry is not None:
            self._stats.hits += 1
        return entry

    def _pending(self, key: Hashable, size_hint: int, prefetch: bool) -> tuple[Future, bool]:
        """(future, is_new) for a key that is not cached."""
        future, is_new = self._flights.join(key)
        if not is_new:
            self._stats.hits += 1
            return future, False
        self._stats.misses += 1
        if prefetch:
            self._stats.prefetches += 1
        self._reserved += size_hint
        self._lru.recycle(self._reserved)
        self._evict()
        return future, True

    def _evict(self) -> None:
        """Evict until cached, reserved and held bytes fit the budget."""
        self._lru.evict_to(self.budget_bytes - self._reserved - self.budget.outside_lru(), self._reserved)

    def _finish(self, key: Hashable, future: Future, outcome: Any, size_hint: int, side: bool = False) -> None:
        """Deliver a value (cached, leased to the reads waiting for it) or an exception (not
        cached) to the key's waiters."""
        with self._lock:
            self._flights.land(key, future)
            self._queued.pop(key, None)
            self._reserved -= size_hint
            self._lru.pool.shrink_to(self._reserved)
            leases = self._waiting.pop(key, 0)
            if isinstance(outcome, BaseException):
                self.budget.mark_read(key)  # nothing is kept: no longer readahead's
                self._stats.load_errors += 1
            else:
                self._stats.side_loads += side
                self._stats.loads += not side
                entry = Entry(outcome, value_nbytes(outcome), leases, reusable=not side)
                self.budget.loaded(key, entry.size)
                if entry.size <= self.budget_bytes:
                    self._lru.insert(key, entry)
                    self._evict()
                else:
                    self.budget.mark_read(key)
        resolve(future, outcome)

    def _pool(self) -> PriorityPool:
        with self._lock:
            if self._workers is None:
                self._workers = PriorityPool(self.max_workers, "zarrfs-load")
            return self._workers
