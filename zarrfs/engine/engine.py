"""The read engine: one store, its hierarchy, one chunk cache, a reader per array."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NotFoundError
from ..hierarchy import Hierarchy, open_hierarchy
from ..model.meta import ArrayMeta
from ..options import EngineOptions
from ..stores.store import Store
from .cache import ChunkCache
from .chunks import make_source
from .direct import ChunkFiles
from .fetches import RangeFetches
from .reader import ArrayReader
from .vlen_widths import VlenArrays


def pool_size(options: EngineOptions, store: Store) -> int:
    """Loader threads: enough to keep `max_concurrency` requests in flight on a network
    store (each thread waits on its request); on local disks `workers` keep the CPUs busy."""
    return max(options.workers, options.store.max_concurrency) if store.remote else options.workers


@dataclass
class SharedParts:
    """What the engines of one mount of many stores share: one chunk cache (one budget, one C table of
    open files) and one bounded set of open chunk files. Whoever made it closes it, after its engines."""

    cache: ChunkCache
    files: ChunkFiles

    @classmethod
    def make(cls, options: EngineOptions, remote: bool) -> SharedParts:
        workers = max(options.workers, options.store.max_concurrency) if remote else options.workers
        return cls(ChunkCache(options.cache_bytes, workers), ChunkFiles())

    def close(self) -> None:
        self.cache.close()
        self.files.close()


class Engine:
    def __init__(self, store: Store, options: EngineOptions | None = None, hierarchy: Hierarchy | None = None,
                 shared: SharedParts | None = None) -> None:
        self.options = options or EngineOptions()
        self.store = store
        self.hierarchy = hierarchy or Hierarchy(store, ttl=self.options.metadata_ttl)
        self._shared = shared  # not ours to close
        self.cache = shared.cache if shared is not None else \
            ChunkCache(self.options.cache_bytes, pool_size(self.options, store))
        # The pool may be larger than `workers` (threads waiting on requests); decoding stays at `workers`.
        self._decode_slots = threading.BoundedSemaphore(self.options.workers)
        self.files = shared.files if shared is not None else ChunkFiles()
        self.fetches = RangeFetches(store)
        self.vlen = VlenArrays(store, self.cache, self._decode_slots, pool_size(self.options, store), self.fetches)
        self._readers: dict[str, ArrayReader] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(cls, source: str, storage_options: dict[str, Any] | None = None,
             options: EngineOptions | None = None, shared: SharedParts | None = None) -> Engine:
        options = options or EngineOptions()
        hierarchy = open_hierarchy(source, storage_options or {}, options.store, options.metadata_ttl)
        return cls(hierarchy.store, options, hierarchy, shared)

    def reader(self, path: str) -> ArrayReader:
        meta = self.hierarchy.node(path)
        if not isinstance(meta, ArrayMeta):
            raise NotFoundError(f"{self.store.display_name}: /{path} is a group, not an array")
        vlen = meta if meta.vlen else None
        if vlen is not None:  # served at its fixed width, found by reading it once
            meta = self.vlen.fixed(vlen).meta
        with self._lock:
            found = self._readers.get(path)
        # With a metadata TTL a refreshed array is a new node: it gets a new reader
        # (and new cache keys), never chunks decoded for the old shape.
        if found is not None and found.meta is meta:
            return found
        source = self.vlen.source(vlen) if vlen is not None else \
            make_source(self.store, meta, self.cache, self._decode_slots, self.fetches)
        reader = ArrayReader(source, self.cache,
                             timeout=max(self.options.read_timeout, self.options.store.worst_case_seconds()),
                             files=self.files, remote=self.store.remote)
        with self._lock:
            found = self._readers.get(path)
            if found is not None and found.meta is meta:
                return found
            self._readers[path] = reader
            return reader

    def fast_read_entry(self) -> Any:
        """The C function answering reads of attached open files from cached chunks, as a capsule
        (fuse/_fast_read.c calls it before Python); None without the compiled C side."""
        return self.cache.served.serve_capsule()

    def fast_read_counters(self) -> dict[str, Any]:
        """How many reads the C function answered, and its latency histogram."""
        return self.cache.served.counters()

    def read_array(self, meta: ArrayMeta) -> np.ndarray:
        """The whole array, through the cache (for small arrays: coordinates read by the conventions)."""
        data = self.reader(meta.path).read(0, meta.nbytes)
        return np.frombuffer(data, meta.dtype).reshape(meta.shape)

    def stats(self) -> dict[str, Any]:
        """Counters a user can read from the mount's `.zarrfs-stats.json`."""
        return {"cache": {"budget_bytes": self.cache.budget_bytes, **self.cache.stats().as_dict(),
                          **self.cache.budget_figures()},
                "store": {"source": self.store.display_name, **self.store.stats.as_dict()},
                "metadata": self.hierarchy.stats(),
                "raw_chunk_reads": self.files.stats(),
                "arrays_open": len(self._readers)}

    def close(self) -> None:
        """Stop this engine. With shared parts, its chunks stay cached until the budget evicts them
        (their keys are this engine's own, so nothing else is served them) and the cache runs on."""
        self.hierarchy.close()
        if self._shared is None:
            self.cache.close()
        self.fetches.close()
        if self._shared is None:
            self.files.close()
        self.store.close()
