"""A byte-bounded LRU of decoded chunks, holding futures so each key loads once.

Whoever misses a key first creates its future; every other thread that wants
the same key while it loads waits on that future instead of loading again.
Finished values enter the LRU with their size; the least recently used leave
until the budget holds. Failed loads are not cached: the next read retries.

A `Batch` lets misses that belong together (inner chunks of one shard) load
in one task, so the loader can fetch adjacent byte ranges in one request;
each key still has its own future, created under the lock, so a key loads
once however many threads or batches want it.

Values handed to reads are leased (`get_many`, `lookup`; `release` ends the
leases): the memory of a chunk that leaves the cache with no lease open goes
to the buffer pool, for the decodes of loads in flight (buffers.py). The
pool never holds more than those loads reserved, so it stands in for memory
they would otherwise allocate.

Chunks a sequential stream has passed (`demote`) go first. When the stream's
array is larger than the budget they go even before the cache is full: a
C-order pass over it would evict them before any later pass came back, so
a load takes their memory (`_recycle`) instead of faulting in fresh pages.

What else the budget covers (streams' windows, bands being read, readahead's
share) is budget.py's; the cache evicts for it and asks it before starting a
readahead load. The worker pool is created on first use, never at import or
construction, so no thread exists before the daemon forks.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import ZarrfsError
from .budget import ReadaheadBudget
from .buffers import BufferPool, owned_memory
from .pool import DEMAND, PREFETCH, PriorityPool, Task
from .served import ServedChunks

# Bookkeeping per entry (dict slot, key tuple, future, array header): charged
# so that a cache full of tiny or empty chunks stays bounded too.
ENTRY_OVERHEAD = 256

Loader = Callable[[Hashable], Any]


@dataclass(frozen=True)
class Batch:
    """How to load several missing keys together.

    `group(key)`: keys with the same non-None group may load in one call;
    `load(keys)`: yields (key, value) for each key, where a value that is an
    exception is that key's failure (the others still succeed).
    """

    group: Callable[[Hashable], Hashable | None]
    load: Callable[[list[Hashable]], Iterable[tuple[Hashable, Any]]]


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


class _Entry:
    __slots__ = ("value", "size", "leases", "reusable")

    def __init__(self, value: Any, size: int, leases: int, reusable: bool) -> None:
        self.value = value
        self.size = size
        self.leases = leases  # reads copying from it now
        self.reusable = reusable  # chunk data (not side data) whose memory may go to the pool


class ChunkCache:
    def __init__(self, budget_bytes: int, max_workers: int) -> None:
        self.budget_bytes = budget_bytes
        self.max_workers = max_workers
        self.budget = ReadaheadBudget(budget_bytes)
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._inflight: dict[Hashable, Future] = {}
        self._waiting: Counter[Hashable] = Counter()  # leases of reads waiting on a load, per key
        self._workers: PriorityPool | None = None
        self._queued: dict[Hashable, Task] = {}  # readahead loads not started yet, for promotion
        self._reserved = 0  # decoded bytes that loads in flight will add
        # Readahead reserves a band at a time (64 MiB for 16 chunks of 4 MiB): a pool up to
        # that covers one band's decodes.
        self._pool_buffers = BufferPool(min(budget_bytes // 8, 64 << 20))
        # Passed chunks whose memory loads take before fresh memory (`demote(recycle=True)`).
        self._recyclable: dict[Hashable, None] = {}
        self._stats = CacheStats()
        # Cached chunks as the C read path sees them (served.py): told of every chunk
        # that enters or leaves `_entries`, always before its memory can go to another decode.
        self.served = ServedChunks()

    # ---------------------------------------------------------------- public

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
            self._run(key, loader, future, 0, side=True)
        return future.result()

    def get_many(self, keys: Iterable[Hashable], loader: Loader, *, size_hint: int = 0,
                 prefetch: bool = False, batch: Batch | None = None,
                 ) -> tuple[dict[Hashable, Any], dict[Hashable, Future]]:
        """(values of the keys cached now, futures of the others).

        A read (not `prefetch`) holds a lease on every value it gets, from
        either, until it calls `release`. Misses load in parallel on the
        worker pool, grouped by `batch` when given; `size_hint` (the decoded
        size of one value) is reserved from the budget while a load runs, so
        loads in flight cannot push memory past it.
        """
        values: dict[Hashable, Any] = {}
        pending: dict[Hashable, Future] = {}
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
                if prefetch and key not in self._inflight and not budget.room_to_load_ahead(size_hint):
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
            tasks = [(self._task(group, loader, batch, size_hint), group) for group in _groups(to_start, batch)]
            if prefetch:
                self._queued.update((key, task) for task, group in tasks for key, _ in group)
        workers = self._pool()
        for task, _ in tasks:
            workers.submit(task, PREFETCH if prefetch else DEMAND)
        for task in promote.values():
            if not task.claimed:
                workers.submit(task, DEMAND)
        return values, pending

    def lookup(self, keys: list[Hashable]) -> list[Any] | None:
        """The values of `keys`, leased, when every one is cached (each counted as `get_many`
        counts a hit); else None, counting, leasing and loading nothing."""
        with self._lock:
            entries = self._entries
            if not all(key in entries for key in keys):
                return None
            values = []
            for key in keys:
                self.budget.mark_read(key)
                entry = self._hit(key)
                entry.leases += 1  # type: ignore[union-attr]
                values.append(entry.value)  # type: ignore[union-attr]
            return values

    def release(self, leased: Mapping[Hashable, Any]) -> None:
        """End the leases a read took on these values (by key). A value that left the cache
        meanwhile, or was replaced there, is no longer the cache's to count."""
        with self._lock:
            for key, value in leased.items():
                entry = self._entries.get(key)
                if entry is not None and entry.value is value and entry.leases:
                    entry.leases -= 1

    def take_buffer(self, nbytes: int) -> Any:
        """Memory of an evicted chunk to decode `nbytes` into (flat uint8), or None. The load
        taking it had reserved `nbytes`: from here on the reservation covers it."""
        with self._lock:
            buffer = self._pool_buffers.take(nbytes)
            if buffer is not None:
                self._stats.spares_reused += 1
            return buffer

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
            for key in keys:
                if key in self._entries:
                    self._entries.move_to_end(key, last=False)
                    self.served.touched(key)  # reads in C are done with it too: no second chance
                    if recycle:
                        self._recyclable[key] = None

    def note_read(self, keys: Iterable[Hashable]) -> None:
        """Reads answered in C (engine/served.py) use these chunks: like a read here, they take
        them out of readahead's share of the budget and make them the most recently used."""
        with self._lock:
            for key in keys:
                self.budget.mark_read(key)
                if key in self._entries:
                    self._entries.move_to_end(key)

    def stats(self) -> CacheStats:
        served_hits = self.served.table.counters()["chunk_hits"]
        with self._lock:
            self._stats.cached_entries = len(self._entries)
            self._stats.spare_bytes = self._pool_buffers.nbytes
            figures = self._stats.as_dict()
        figures["hits"] += served_hits  # reads the C path answered hit the cache too
        return CacheStats(**figures)

    def budget_figures(self) -> dict[str, int]:
        """Bytes the budget covers outside the LRU: windows held, bands claimed."""
        with self._lock:
            self.budget.settle()
            return {"held_bytes": self.budget.held, "claimed_bytes": self.budget.claimed}

    def close(self) -> None:
        """Stop the pool, fail the loads it never started, and drop every entry."""
        with self._lock:
            workers, self._workers = self._workers, None
            self._entries.clear()
            self.served.clear()
            self._stats.cached_bytes = 0
            self._pool_buffers.shrink_to(0)
            self._recyclable.clear()
        if workers is not None:
            workers.shutdown()
        with self._lock:
            abandoned, self._inflight = self._inflight, {}
            self._queued.clear()
        for future in abandoned.values():
            _resolve(future, ZarrfsError("zarrfs is shutting down"))

    # -------------------------------------------------------------- internal
    # The underscore methods below that take no lock expect the caller to hold it.

    def _hit(self, key: Hashable) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self._recyclable.pop(key, None)  # read again: in use after all
            self._stats.hits += 1
        return entry

    def _pending(self, key: Hashable, size_hint: int, prefetch: bool) -> tuple[Future, bool]:
        """(future, is_new) for a key that is not cached."""
        future = self._inflight.get(key)
        if future is not None:
            self._stats.hits += 1
            return future, False
        self._stats.misses += 1
        if prefetch:
            self._stats.prefetches += 1
        future = Future()
        self._inflight[key] = future
        self._reserved += size_hint
        self._recycle()
        self._evict()
        return future, True

    def _task(self, group: list[tuple[Hashable, Future]], loader: Loader, batch: Batch | None,
              size_hint: int) -> Task:
        """One load task: a single key, or a batch group loaded by one call."""
        if len(group) == 1 or batch is None:
            [(key, future)] = group if len(group) == 1 else [group[0]]
            return Task(self._run, key, loader, future, size_hint)
        return Task(self._run_batch, dict(group), batch, size_hint)

    def _run(self, key: Hashable, loader: Loader, future: Future, size_hint: int, side: bool = False) -> None:
        try:
            value = loader(key)
        except BaseException as exc:  # delivered to every waiter, not cached
            self._finish(key, future, exc, size_hint)
            return
        self._finish(key, future, value, size_hint, side)

    def _run_batch(self, futures: dict[Hashable, Future], batch: Batch, size_hint: int) -> None:
        """Load a group of keys in one call; every future ends resolved, whatever happens."""
        try:
            for key, outcome in batch.load(list(futures)):
                future = futures.pop(key, None)
                if future is not None:
                    self._finish(key, future, outcome, size_hint)
        except BaseException as exc:  # the whole batch failed: every key not yet answered gets it
            for key, future in futures.items():
                self._finish(key, future, exc, size_hint)
            return
        for key, future in futures.items():  # a loader that skipped keys is a bug, not fill value
            self._finish(key, future, RuntimeError(f"batch load gave no value for {key!r}"), size_hint)

    def _finish(self, key: Hashable, future: Future, outcome: Any, size_hint: int, side: bool = False) -> None:
        """Deliver a value (cached, leased to the reads waiting for it) or an exception (not
        cached) to the key's waiters."""
        with self._lock:
            self._inflight.pop(key, None)
            self._queued.pop(key, None)
            self._reserved -= size_hint
            self._pool_buffers.shrink_to(self._reserved)
            leases = self._waiting.pop(key, 0)
            if isinstance(outcome, BaseException):
                self.budget.mark_read(key)  # nothing is kept: no longer readahead's
                self._stats.load_errors += 1
            else:
                if side:
                    self._stats.side_loads += 1
                else:
                    self._stats.loads += 1
                self._insert(key, _Entry(outcome, value_nbytes(outcome), leases, reusable=not side))
        _resolve(future, outcome)

    def _insert(self, key: Hashable, entry: _Entry) -> None:
        self.budget.loaded(key, entry.size)
        if entry.size > self.budget_bytes:
            self.budget.mark_read(key)
            return
        self._recyclable.pop(key, None)
        old = self._entries.pop(key, None)
        if old is not None:
            self.served.left(key)
            self._stats.cached_bytes -= old.size
        self._entries[key] = entry
        self.served.cached(key, entry.value)
        self._stats.cached_bytes += entry.size
        self._evict()

    def _evict(self) -> None:
        """Evict until cached, reserved and held bytes fit the budget; the memory of a chunk
        leaving with no lease open goes to the loads in flight, up to what they reserved."""
        outside = self.budget.outside_lru()
        second_chances = len(self._entries)  # bounded: the C path may touch chunks meanwhile
        while self._stats.cached_bytes + self._reserved + outside > self.budget_bytes and self._entries:
            key = self.budget.surplus(self._entries)
            if key is None:
                key = next(iter(self._entries))  # least recently used
                if second_chances and self.served.touched(key):  # the C path read it: recently used
                    second_chances -= 1
                    self._entries.move_to_end(key)
                    continue
            self._remove(key)

    def _recycle(self) -> None:
        """Hand the memory of passed chunks (`demote(recycle=True)`) to the loads in flight, up to
        what they reserved; a passed chunk a read still leases stays cached."""
        while self._recyclable and self._pool_buffers.nbytes < self._reserved:
            key = next(iter(self._recyclable))
            del self._recyclable[key]
            entry = self._entries.get(key)
            if entry is not None and self._reusable_memory(entry) is not None:
                self._remove(key)

    def _remove(self, key: Hashable) -> None:
        """Take `key` out of the cache (and out of C, first); keep its memory for the loads in
        flight when no lease is open and the pool stays within what they reserved."""
        entry = self._entries.pop(key)
        self.served.left(key)
        self._stats.cached_bytes -= entry.size
        self._stats.evictions += 1
        self._recyclable.pop(key, None)
        if self.budget.mark_read(key):
            self._stats.prefetches_unread += 1
        memory = self._reusable_memory(entry)
        if memory is not None:
            self._pool_buffers.keep(memory)

    def _reusable_memory(self, entry: _Entry) -> Any:
        """The entry's memory, when the loads in flight may take it now: no lease, plain memory of
        its own, and room in the pool within what those loads reserved."""
        if entry.leases or not entry.reusable:
            return None
        memory = owned_memory(entry.value)
        if memory is None or self._pool_buffers.nbytes + memory.nbytes > self._reserved:
            return None
        return memory

    def _pool(self) -> PriorityPool:
        with self._lock:
            if self._workers is None:
                self._workers = PriorityPool(self.max_workers, "zarrfs-load")
            return self._workers


def _groups(started: list[tuple[Hashable, Future]], batch: Batch | None) -> list[list[tuple[Hashable, Future]]]:
    """New misses split into load tasks: one per key, or one per batch group."""
    if batch is None:
        return [[item] for item in started]
    groups: dict[Hashable, list[tuple[Hashable, Future]]] = {}
    singles: list[list[tuple[Hashable, Future]]] = []
    for key, future in started:
        group = batch.group(key)
        if group is None:
            singles.append([(key, future)])
        else:
            groups.setdefault(group, []).append((key, future))
    return [*groups.values(), *singles]


def _resolve(future: Future, outcome: Any) -> None:
    """Settle a future once; a load that finishes after shutdown settled it finds it done."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except InvalidStateError:
        pass
