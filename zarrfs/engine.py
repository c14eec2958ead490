"""The read engine: one store, its hierarchy, one chunk cache, a reader per array."""

from __future__ import annotations

import threading
from typing import Any

from .cache import ChunkCache
from .chunks import make_source
from .errors import NotFoundError
from .hierarchy import Hierarchy
from .metadata.model import ArrayMeta
from .options import EngineOptions
from .reader import ArrayReader
from .store import Store


class Engine:
    def __init__(self, store: Store, options: EngineOptions | None = None) -> None:
        self.options = options or EngineOptions()
        self.store = store
        self.hierarchy = Hierarchy(store)
        self.cache = ChunkCache(self.options.cache_bytes, self.options.workers)
        self._readers: dict[str, ArrayReader] = {}
        self._lock = threading.Lock()

    @classmethod
    def open(cls, source: str, storage_options: dict[str, Any] | None = None,
             options: EngineOptions | None = None) -> Engine:
        return cls(Store.open(source, storage_options), options)

    def reader(self, path: str) -> ArrayReader:
        with self._lock:
            found = self._readers.get(path)
        if found is not None:
            return found
        meta = self.hierarchy.node(path)
        if not isinstance(meta, ArrayMeta):
            raise NotFoundError(f"{self.store.display_name}: /{path} is a group, not an array")
        reader = ArrayReader(make_source(self.store, meta, self.cache), self.cache,
                             timeout=self.options.read_timeout,
                             readahead_max=None if self.options.readahead else 0)
        with self._lock:
            return self._readers.setdefault(path, reader)

    def stats(self) -> dict[str, Any]:
        """Counters a user can read from the mount's `.zarrfs-stats.json`."""
        return {"cache": {"budget_bytes": self.cache.budget_bytes, **self.cache.stats().as_dict()},
                "store": {"source": self.store.display_name, "requests": self.store.requests,
                          "bytes_fetched": self.store.bytes_fetched},
                "arrays_open": len(self._readers)}

    def close(self) -> None:
        self.cache.close()
