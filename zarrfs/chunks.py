"""Where decoded chunks come from: one `ChunkSource` per array.

A source knows the *read unit* of its array (the chunk, or the inner chunk of
a shard) and loads one unit by grid coordinates: fetch, decode, check. `None`
means "all fill value" (the key is absent or the shard marks it empty), so
missing chunks cost no memory.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable
from typing import Protocol

import numpy as np

from .cache import ChunkCache, new_token
from .errors import ChunkError, ZarrfsError
from .metadata.model import ArrayMeta
from .sharding import EMPTY, ShardingCodec
from .store import Store

log = logging.getLogger(__name__)


class ChunkSource(Protocol):
    meta: ArrayMeta
    read_shape: tuple[int, ...]

    def load(self, coords: tuple[int, ...]) -> np.ndarray | None: ...


def make_source(store: Store, meta: ArrayMeta, cache: ChunkCache) -> ChunkSource:
    sharding = getattr(meta.codec, "array_bytes", None)
    if isinstance(sharding, ShardingCodec) and not meta.codec.array_codecs and not meta.codec.bytes_codecs:
        return ShardedChunkSource(store, meta, sharding, cache)
    return PlainChunkSource(store, meta)


def _located(store: Store, meta: ArrayMeta, key: str, exc: ZarrfsError) -> ZarrfsError:
    """The same error type, its message naming store, array and chunk key."""
    located = type(exc)(f"{store.display_name}: array /{meta.path}: chunk {key!r}: {exc}")
    located.__cause__ = exc
    return located


def _checked(chunk: np.ndarray, meta: ArrayMeta, shape: tuple[int, ...]) -> np.ndarray:
    if chunk.shape != shape:
        raise ChunkError(f"decoded to shape {chunk.shape}, expected {shape}")
    if chunk.dtype != meta.dtype:
        chunk = chunk.astype(meta.dtype)
    return chunk


class PlainChunkSource:
    """One stored object per chunk."""

    def __init__(self, store: Store, meta: ArrayMeta) -> None:
        self.store = store
        self.meta = meta
        self.read_shape = meta.chunk_shape
        # Pre-2.8 zarr NestedDirectoryStore wrote 'i/j' keys without saying so.
        # None = not known yet: a missing dotted key also tries the nested one,
        # until a chunk is found either way. Loads run on many threads at once,
        # so the layout only ever changes from unknown to known.
        self._nested: bool | None = None if meta.zarr_format == "2" and meta.ndim > 1 else False

    def _nested_key(self, coords: tuple[int, ...]) -> str:
        prefix, _, name = self.meta.chunk_key(coords).rpartition("/")
        return f"{prefix}/{name.replace('.', '/')}" if prefix else name.replace(".", "/")

    def load(self, coords: tuple[int, ...]) -> np.ndarray | None:
        layout = self._nested  # read once: another thread may settle it meanwhile
        key = self._nested_key(coords) if layout else self.meta.chunk_key(coords)
        data = self.store.get(key)
        if layout is None:
            if data is not None:
                self._nested = False
            elif (nested := self._nested_key(coords)) != key:
                data = self.store.get(nested)
                if data is not None:
                    self._nested, key = True, nested
        if data is None:
            return None
        try:
            return _checked(self.meta.codec.decode(data, self.meta.chunk_shape, self.meta.dtype),
                            self.meta, self.meta.chunk_shape)
        except ZarrfsError as exc:
            raise _located(self.store, self.meta, key, exc) from exc


class ShardedChunkSource:
    """Inner chunks of shards, read by byte range after reading the shard index."""

    def __init__(self, store: Store, meta: ArrayMeta, sharding: ShardingCodec, cache: ChunkCache) -> None:
        self.store = store
        self.meta = meta
        self.sharding = sharding
        self.cache = cache
        self.read_shape = sharding.chunk_shape
        self.chunks_per_shard = sharding.chunks_per_shard(meta.chunk_shape)
        self._index_key_prefix: Hashable = ("shard-index", new_token())

    def load(self, coords: tuple[int, ...]) -> np.ndarray | None:
        shard = tuple(c // n for c, n in zip(coords, self.chunks_per_shard, strict=True))
        key = self.meta.chunk_key(shard)
        try:
            index = self.cache.get((self._index_key_prefix, shard), lambda _: self._load_index(key))
            if index is None:
                return None
            within = tuple(c % n for c, n in zip(coords, self.chunks_per_shard, strict=True))
            offset, nbytes = (int(v) for v in index[int(np.ravel_multi_index(within, self.chunks_per_shard))])
            if offset == int(EMPTY):
                return None
            data = self.store.get_range(key, offset, offset + nbytes)
            if data is None:
                raise ChunkError("shard vanished after its index was read")
            if len(data) != nbytes:
                raise ChunkError(f"shard index entry {within} [{offset}:{offset + nbytes}] points outside the shard")
            chunk = self.sharding.codec.decode(data, self.read_shape, self.meta.dtype)
            return _checked(chunk, self.meta, self.read_shape)
        except ZarrfsError as exc:
            raise _located(self.store, self.meta, f"{key} inner {list(coords)}", exc) from exc

    def _load_index(self, key: str) -> np.ndarray | None:
        start, stop = self.sharding.index_range(self.meta.chunk_shape)
        raw = self.store.get_range(key, start, stop)
        if raw is None:
            return None
        return self.sharding.parse_index(raw, self.meta.chunk_shape)


def band_nbytes(meta: ArrayMeta, read_shape: tuple[int, ...]) -> int:
    """Bytes of the chunks one C-order run of rows crosses (the readahead unit)."""
    if meta.ndim == 0:
        return meta.dtype.itemsize
    grid = [-(-s // c) for s, c in zip(meta.shape, read_shape, strict=True)]
    return math.prod(read_shape) * meta.dtype.itemsize * math.prod(grid[1:])
