"""`sharding_indexed`: the shard index and the inner chunks it points at.

A shard is one stored object holding a grid of inner chunks plus an index of
(offset, nbytes) pairs, uint64, in C order over the inner grid. zarrfs reads
the index once (cached) and then only the byte ranges of the inner chunks a
read needs; `ShardingCodec.decode` decodes a whole shard in memory, which is
what a shard nested inside another shard needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .codecs import V3ChunkCodec
from .errors import ChunkError, UnsupportedError

EMPTY = np.uint64(2**64 - 1)
_INDEX_DTYPE = np.dtype("<u8")
# Bytes each index bytes->bytes codec adds; the spec only allows fixed-size ones.
_INDEX_CODEC_OVERHEAD = {"crc32c": 4}


@dataclass(frozen=True)
class ShardingCodec:
    chunk_shape: tuple[int, ...]  # inner chunk shape
    codec: V3ChunkCodec  # decodes one inner chunk
    index_codec: V3ChunkCodec  # decodes the index
    index_location: str  # "start" or "end"
    fill_value: np.ndarray  # for inner chunks the index marks empty

    def chunks_per_shard(self, shard_shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(shard_shape, self.chunk_shape, strict=True))

    def index_nbytes(self, shard_shape: tuple[int, ...]) -> int:
        n = int(np.prod(self.chunks_per_shard(shard_shape), dtype=np.int64))
        size = 16 * n
        for codec in self.index_codec.bytes_codecs:
            if codec.name not in _INDEX_CODEC_OVERHEAD:
                raise UnsupportedError(f"shard index codec {codec.name!r} has no fixed size")
            size += _INDEX_CODEC_OVERHEAD[codec.name]
        return size

    def index_range(self, shard_shape: tuple[int, ...]) -> tuple[int, int]:
        """(start, stop) of the index; a negative start counts from the shard's end."""
        nbytes = self.index_nbytes(shard_shape)
        return (0, nbytes) if self.index_location == "start" else (-nbytes, 0)

    def parse_index(self, raw: bytes, shard_shape: tuple[int, ...]) -> np.ndarray:
        """The index as a (n_inner, 2) uint64 array of (offset, nbytes), checked."""
        cps = self.chunks_per_shard(shard_shape)
        expected = self.index_nbytes(shard_shape)
        if len(raw) != expected:
            raise ChunkError(f"shard index is {len(raw)} bytes, expected {expected} (truncated shard?)")
        index = self.index_codec.decode(raw, (*cps, 2), _INDEX_DTYPE).reshape(-1, 2)
        offsets, sizes = index[:, 0], index[:, 1]
        empty = (offsets == EMPTY) & (sizes == EMPTY)
        half_empty = (offsets == EMPTY) != (sizes == EMPTY)
        if half_empty.any():
            raise ChunkError("shard index has an entry with only one of offset/nbytes empty")
        ends = offsets[~empty].astype(object) + sizes[~empty].astype(object)
        if len(ends) and max(ends) > 2**63:
            raise ChunkError("shard index points beyond any possible shard size")
        return np.ascontiguousarray(index)

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Decode a whole shard held in memory (used for nested sharding)."""
        data = bytes(data)
        start, stop = self.index_range(shape)
        raw_index = data[start:] if start < 0 else data[start:stop]
        index = self.parse_index(raw_index, shape)
        out = np.full(shape, self.fill_value, dtype)
        cps = self.chunks_per_shard(shape)
        for flat, (offset, nbytes) in enumerate(index):
            if offset == EMPTY:
                continue
            if int(offset) + int(nbytes) > len(data):
                raise ChunkError(f"shard index entry {flat} points outside the {len(data)}-byte shard")
            inner = self.codec.decode(data[int(offset) : int(offset) + int(nbytes)], self.chunk_shape, dtype)
            coords = np.unravel_index(flat, cps)
            region = tuple(slice(c * s, (c + 1) * s) for c, s in zip(coords, self.chunk_shape, strict=True))
            out[region] = inner
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(self.chunk_shape),
                "codecs": self.codec.describe(),
                "index_codecs": self.index_codec.describe(),
                "index_location": self.index_location,
            },
        }
