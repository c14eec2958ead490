"""A byte-bounded LRU of decoded chunks, holding futures so each key loads once.

Whoever misses a key first creates its future; every other thread that wants
the same key while it loads waits on that future instead of loading again.
Finished values enter the LRU with their size; the least recently used leave
until the budget holds. Failed loads are not cached: the next read retries.

The worker pool is created on first use, never at import or construction, so
no thread exists before the daemon forks.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

# Bookkeeping per entry (dict slot, key tuple, future, array header): charged
# so that a cache full of tiny or empty chunks stays bounded too.
ENTRY_OVERHEAD = 256

Loader = Callable[[Hashable], Any]


def value_nbytes(value: Any) -> int:
    return int(getattr(value, "nbytes", 0)) + ENTRY_OVERHEAD


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    loads: int = 0  # loader calls that finished (fetch + decode)
    load_errors: int = 0
    evictions: int = 0
    prefetches: int = 0  # misses started by readahead, not by a read
    cached_bytes: int = 0
    cached_entries: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class ChunkCache:
    def __init__(self, budget_bytes: int, max_workers: int) -> None:
        self.budget_bytes = budget_bytes
        self.max_workers = max_workers
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._inflight: dict[Hashable, Future] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._stats = CacheStats()

    # ---------------------------------------------------------------- public

    def get(self, key: Hashable, loader: Loader) -> Any:
        """The value for `key`, loading it in this thread on a miss."""
        with self._lock:
            future, is_new = self._lookup(key, prefetch=False)
        if is_new:
            self._run(key, loader, future)
        return future.result()

    def submit(self, keys: Iterable[Hashable], loader: Loader, *, prefetch: bool = False) -> list[Future]:
        """Futures for `keys`; misses load in parallel on the worker pool."""
        futures: list[Future] = []
        to_start: list[tuple[Hashable, Future]] = []
        with self._lock:
            for key in keys:
                future, is_new = self._lookup(key, prefetch=prefetch)
                futures.append(future)
                if is_new:
                    to_start.append((key, future))
        if to_start:
            executor = self._pool()
            for key, future in to_start:
                executor.submit(self._run, key, loader, future)
        return futures

    def contains(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._entries or key in self._inflight

    def stats(self) -> CacheStats:
        with self._lock:
            self._stats.cached_entries = len(self._entries)
            return CacheStats(**self._stats.as_dict())

    def close(self) -> None:
        """Stop the pool (queued loads are cancelled) and drop every entry."""
        with self._lock:
            executor, self._executor = self._executor, None
            self._entries.clear()
            self._stats.cached_bytes = 0
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    # -------------------------------------------------------------- internal

    def _lookup(self, key: Hashable, *, prefetch: bool) -> tuple[Future, bool]:
        """(future, is_new); caller holds the lock."""
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self._stats.hits += 1
            done: Future = Future()
            done.set_result(entry[0])
            return done, False
        future = self._inflight.get(key)
        if future is not None:
            self._stats.hits += 1
            return future, False
        self._stats.misses += 1
        if prefetch:
            self._stats.prefetches += 1
        future = Future()
        self._inflight[key] = future
        return future, True

    def _run(self, key: Hashable, loader: Loader, future: Future) -> None:
        try:
            value = loader(key)
        except BaseException as exc:  # delivered to every waiter, not cached
            with self._lock:
                self._inflight.pop(key, None)
                self._stats.load_errors += 1
            future.set_exception(exc)
            return
        size = value_nbytes(value)
        with self._lock:
            self._inflight.pop(key, None)
            self._stats.loads += 1
            if size <= self.budget_bytes:
                self._entries[key] = (value, size)
                self._stats.cached_bytes += size
                self._evict()
        future.set_result(value)

    def _evict(self) -> None:
        while self._stats.cached_bytes > self.budget_bytes and self._entries:
            _, (_, size) = self._entries.popitem(last=False)
            self._stats.cached_bytes -= size
            self._stats.evictions += 1

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.max_workers, thread_name_prefix="zarrfs-load")
            return self._executor
