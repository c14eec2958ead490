"""A byte-bounded LRU of decoded chunks, holding futures so each key loads once.

Whoever misses a key first creates its future; every other thread that wants
the same key while it loads waits on that future instead of loading again.
Finished values enter the LRU with their size; the least recently used leave
until the budget holds. Failed loads are not cached: the next read retries.

A `Batch` lets misses that belong together (inner chunks of one shard) load
in one task, so the loader can fetch adjacent byte ranges in one request;
each key still has its own future, created under the lock, so a key loads
once however many threads or batches want it.

The memory of chunks evicted to make room for loads is handed to those
loads' decodes (`take_spare`, see spare.py). Spares never exceed the bytes
reserved by loads in flight, and are dropped as those loads finish: they
stand in for memory the loads would otherwise allocate. Only when a load
allocated its own while a spare of another size waited do both exist at
once, and spares are capped (an eighth of the budget, at most 64 MiB).

Chunks a sequential stream has passed (`demote`) go first. When the stream's
array is larger than the budget they go even before the cache is full: a
C-order pass over it would evict them before any later pass came back, so
a load takes their memory (`_recycle`) instead of faulting in fresh pages,
and the daemon's memory stays at what the bands in use need.

Readahead loads (`prefetch=True`) get a bounded share of the budget: half
of what is left beside the bands sequential streams are reading (`claim`)
and the windows they hold (`hold`); loads beyond it are not started. Chunks
readahead loaded count against that share until a read asks for them.

The worker pool is created on first use, never at import or construction, so
no thread exists before the daemon forks.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, InvalidStateError
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import ZarrfsError
from .pool import DEMAND, PREFETCH, PriorityPool, Task
from .served import ServedChunks
from .spare import SpareBuffers, reusable

log = logging.getLogger(__name__)

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
    spares_reused: int = 0  # decodes written into the memory of an evicted chunk (spare.py)
    cached_bytes: int = 0
    cached_entries: int = 0
    spare_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ChunkCache:
    def __init__(self, budget_bytes: int, max_workers: int) -> None:
        self.budget_bytes = budget_bytes
        self.max_workers = max_workers
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._inflight: dict[Hashable, Future] = {}
        self._workers: PriorityPool | None = None
        self._queued: dict[Hashable, Task] = {}  # readahead loads not started yet, for promotion
        self._reserved = 0  # decoded bytes that loads in flight will add
        self._held = 0  # bytes held outside the cache against its budget (streams' windows: `hold`)
        # Bytes given back by `release`, taken off `_held` under the lock. `release` runs from a
        # buffer's finalizer, which the garbage collector may call in any thread at any moment,
        # this one's critical sections included: it must not take the lock (deque.append is atomic).
        self._released: deque[int] = deque()
        # Readahead's share of the budget (`prefetch`): the bytes of the bands that sequential
        # streams are reading now (`claim`), and per key the bytes of chunks readahead loaded (or
        # is loading) that no read has asked for yet.
        self._claimed = 0
        self._unclaimed: deque[int] = deque()  # as `_released`: given back from finalizers
        self._unread: dict[Hashable, int] = {}
        self._unread_bytes = 0
        # Readahead reserves a band at a time (64 MiB for 16 chunks of 4 MiB): spares up to
        # that cover one band's decodes.
        self._spare = SpareBuffers(min(budget_bytes // 8, 64 << 20))
        # Cached chunks a stream has passed whose memory loads take before fresh memory
        # (`demote(recycle=True)`), oldest first.
        self._recyclable: dict[Hashable, None] = {}
        self._stats = CacheStats()
        # Cached chunks as the C read path sees them (served.py): told of every chunk
        # that enters or leaves `_entries`, always before its memory can go to another decode.
        self.served = ServedChunks()

    # ---------------------------------------------------------------- public

    def get(self, key: Hashable, loader: Loader) -> Any:
        """The value for `key`, loading it in this thread on a miss.

        For side data that chunk loads need (shard indexes): counted as
        `side_loads`, so that `loads` stays the number of chunk decodes.
        """
        with self._lock:
            entry = self._hit(key)
            if entry is not None:
                return entry[0]
            future, is_new = self._pending(key, size_hint=0, prefetch=False)
        if is_new:
            self._run(key, loader, future, 0, side=True)
        return future.result()

    def get_many(self, keys: Iterable[Hashable], loader: Loader, *, size_hint: int = 0,
                 prefetch: bool = False, batch: Batch | None = None,
                 ) -> tuple[dict[Hashable, Any], dict[Hashable, Future]]:
        """(values of the keys cached now, futures of the others).

        Misses load in parallel on the worker pool, grouped by `batch` when
        given; `size_hint` (the decoded size of one value) is reserved from
        the budget while a load runs, so loads in flight cannot push memory
        past it.
        """
        values: dict[Hashable, Any] = {}
        pending: dict[Hashable, Future] = {}
        to_start: list[tuple[Hashable, Future]] = []
        promote: dict[int, Task] = {}
        with self._lock:
            for key in keys:
                if self._unread and not prefetch:
                    self._mark_read(key)
                entry = self._hit(key)
                if entry is not None:
                    values[key] = entry[0]
                    continue
                if prefetch and key not in self._inflight and not self._room_to_prefetch(size_hint):
                    self._stats.prefetches_refused += 1
                    break  # keys come in read order: the rest wait for room, or for their reads
                future, is_new = self._pending(key, size_hint=size_hint, prefetch=prefetch)
                pending[key] = future
                if is_new:
                    to_start.append((key, future))
                    if prefetch:
                        self._unread[key] = size_hint
                        self._unread_bytes += size_hint
                elif not prefetch and key in self._queued:
                    task = self._queued.pop(key)
                    promote[id(task)] = task
            if not to_start and not promote:  # all cached or loading: the common case of a small read
                return values, pending
            tasks = [(self._task(group, loader, batch, size_hint), group) for group in self._groups(to_start, batch)]
            if prefetch:
                self._queued.update((key, task) for task, group in tasks for key, _ in group)
        if tasks or promote:
            workers = self._pool()
            for task, _ in tasks:
                workers.submit(task, PREFETCH if prefetch else DEMAND)
            for task in promote.values():
                if not task.claimed:
                    workers.submit(task, DEMAND)
        return values, pending

    def lookup(self, keys: list[Hashable]) -> list[Any] | None:
        """The values of `keys` when every one is cached, each counted as `get_many` counts a hit;
        else None, counting nothing and loading nothing."""
        with self._lock:
            entries = self._entries
            if not all(key in entries for key in keys):
                return None
            if self._unread:
                for key in keys:
                    self._mark_read(key)
            return [self._hit(key)[0] for key in keys]  # type: ignore[index]

    def take_spare(self, nbytes: int) -> Any:
        """Memory of an evicted chunk to decode `nbytes` into (a flat uint8 array), or None.

        The load that takes it had reserved `nbytes`: from here on the reservation covers it.
        """
        with self._lock:
            buffer = self._spare.take(nbytes)
            if buffer is not None:
                self._stats.spares_reused += 1
            return buffer

    def hold(self, nbytes: int) -> bool:
        """Take `nbytes` of the budget for memory kept outside the cache (a stream's read window),
        evicting chunks to make room; False, taking nothing, when all such memory would pass half
        the budget. The holder gives it back with `release`."""
        with self._lock:
            self._drain_released()
            if self._held + nbytes > self.budget_bytes // 2:
                return False
            self._held += nbytes
            self._evict()
            return True

    def release(self, nbytes: int) -> None:
        """Give back what `hold` took; never blocks (see `_released`)."""
        self._released.append(nbytes)

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
                self._mark_read(key)
                if key in self._entries:
                    self._entries.move_to_end(key)

    def claim(self, nbytes: int) -> None:
        """Note that a sequential stream is reading a band of `nbytes` now: chunks the cache must
        keep for reads, which readahead may not take (`unclaim` gives it back; never blocks)."""
        with self._lock:
            self._claimed += nbytes

    def unclaim(self, nbytes: int) -> None:
        self._unclaimed.append(nbytes)

    @property
    def held_bytes(self) -> int:
        with self._lock:
            self._drain_released()
            return self._held

    @property
    def claimed_bytes(self) -> int:
        """Bytes of the bands sequential streams are reading now (`claim`)."""
        with self._lock:
            self._drain_released()
            return self._claimed

    def stats(self) -> CacheStats:
        served_hits = self.served.table.counters()["chunk_hits"]
        with self._lock:
            self._stats.cached_entries = len(self._entries)
            self._stats.spare_bytes = self._spare.nbytes
            figures = self._stats.as_dict()
        figures["hits"] += served_hits  # reads the C path answered hit the cache too
        return CacheStats(**figures)

    def close(self) -> None:
        """Stop the pool, fail the loads it never started, and drop every entry."""
        with self._lock:
            workers, self._workers = self._workers, None
            self._entries.clear()
            self.served.clear()
            self._stats.cached_bytes = 0
            self._spare.shrink_to(0)
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

    def _hit(self, key: Hashable) -> tuple[Any, int] | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self._recyclable.pop(key, None)  # read again: in use after all
            self._stats.hits += 1
        return entry

    def _room_to_prefetch(self, nbytes: int) -> bool:
        """Whether readahead may load `nbytes` more now.

        Readahead of all streams together gets half of what the budget has
        left beside the bands being read and the streams' windows. Without
        this bound each stream took half the budget for itself: four
        streams over one 1 GiB array on a 512 MiB budget evicted each
        other's bands and decoded every chunk 50 times.
        """
        return self._unread_bytes + nbytes <= self._readahead_share()

    def _readahead_share(self) -> int:
        self._drain_released()
        return (self.budget_bytes - self._held - self._claimed) // 2

    def _mark_read(self, key: Hashable) -> None:
        """A read asked for `key`: if readahead loaded it, it no longer counts as readahead's."""
        charge = self._unread.pop(key, None)
        if charge is not None:
            self._unread_bytes -= charge

    def _pending(self, key: Hashable, *, size_hint: int, prefetch: bool) -> tuple[Future, bool]:
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

    @staticmethod
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
        """Deliver a value (cached) or an exception (not cached) to the key's waiters."""
        failed = isinstance(outcome, BaseException)
        with self._lock:
            self._inflight.pop(key, None)
            self._queued.pop(key, None)
            self._reserved -= size_hint
            self._spare.shrink_to(self._reserved)
            if failed:
                self._mark_read(key)  # nothing is kept: no longer readahead's
                self._stats.load_errors += 1
            else:
                if side:
                    self._stats.side_loads += 1
                else:
                    self._stats.loads += 1
                self._insert(key, outcome)
        _resolve(future, outcome)

    def _insert(self, key: Hashable, value: Any) -> None:
        size = value_nbytes(value)
        if key in self._unread:  # charged its size hint while loading: now its real size
            self._unread_bytes += size - self._unread[key]
            self._unread[key] = size
        if size > self.budget_bytes:
            self._mark_read(key)
            return
        self._recyclable.pop(key, None)
        old = self._entries.pop(key, None)
        if old is not None:
            self.served.left(key)
            self._stats.cached_bytes -= old[1]
        self._entries[key] = (value, size)
        self.served.cached(key, value)
        self._stats.cached_bytes += size
        self._evict()

    def _drain_released(self) -> None:
        while self._released:
            self._held -= self._released.popleft()
        while self._unclaimed:
            self._claimed -= self._unclaimed.popleft()

    def _evict(self) -> None:
        """Evict until cached, reserved and held bytes fit the budget.

        An evicted chunk's memory becomes a spare for the loads in flight when nothing else
        refers to it, as long as all spares together stay within what those loads reserved.
        """
        self._drain_released()
        second_chances = len(self._entries)  # bounded: the C path may touch chunks meanwhile
        while self._stats.cached_bytes + self._reserved + self._held > self.budget_bytes and self._entries:
            key = self._surplus_readahead()
            if key is None:
                key = next(iter(self._entries))  # least recently used
                if second_chances and self.served.touched(key):  # the C path read it: recently used
                    second_chances -= 1
                    self._entries.move_to_end(key)
                    continue
            value, size = self._entries.pop(key)
            self.served.left(key)
            self._forget(key, size)
            if self._spare.nbytes < self._reserved:  # a load in flight may take it
                memory = reusable(value)  # `value` must be this frame's only reference (see spare.py)
                if memory is not None and self._spare.nbytes + memory.nbytes <= self._reserved:
                    self._spare.keep(memory)

    def _recycle(self) -> None:
        """Hand the memory of passed chunks (`demote(recycle=True)`) to the loads in flight, up to
        what they reserved; a passed chunk something still refers to stays cached."""
        while self._recyclable and self._spare.nbytes < self._reserved:
            key = next(iter(self._recyclable))
            del self._recyclable[key]
            if key not in self._entries:
                continue
            value, size = self._entries.pop(key)
            self.served.left(key)
            memory = reusable(value)  # `value` must be this frame's only reference (see spare.py)
            if memory is None or self._spare.nbytes + memory.nbytes > self._reserved:
                self._entries[key] = (value, size)
                self._entries.move_to_end(key, last=False)
                self.served.cached(key, value)
                continue
            self._forget(key, size)
            self._spare.keep(memory)

    def _forget(self, key: Hashable, size: int) -> None:
        """Account for entry `key` of `size` bytes having left the cache."""
        self._stats.cached_bytes -= size
        self._stats.evictions += 1
        self._recyclable.pop(key, None)
        if key in self._unread:
            self._mark_read(key)
            self._stats.prefetches_unread += 1

    def _surplus_readahead(self) -> Hashable | None:
        """The chunk readahead loaded last, while readahead holds more than its share (a stream
        claimed a band after readahead for the others had started): it goes before the chunks
        reads are using, and it is the one needed last."""
        if self._unread_bytes <= self._readahead_share():
            return None
        return next((key for key in reversed(self._unread) if key in self._entries), None)

    def _pool(self) -> PriorityPool:
        with self._lock:
            if self._workers is None:
                self._workers = PriorityPool(self.max_workers, "zarrfs-load")
            return self._workers


def _resolve(future: Future, outcome: Any) -> None:
    """Settle a future once; a load that finishes after shutdown settled it finds it done."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except InvalidStateError:
        pass
