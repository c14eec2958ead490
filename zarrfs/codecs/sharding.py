"""`sharding_indexed`: the shard index and the inner chunks it points at.

A shard is one stored object holding a grid of inner chunks plus an index of
(offset, nbytes) pairs, uint64, in C order over the inner grid. zarrfs reads
the index once (cached) and then only the byte ranges of the inner chunks a
read needs; `ShardingCodec.decode` decodes a whole shard in memory, which is
what a shard nested inside another shard needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..byte_ranges import RangeRequest, SuffixRequest, within
from ..elements.shapes import parse_shape
from ..errors import ChunkError, MetadataError, UnsupportedError
from .pipeline import ChunkCodec, V3ChunkCodec, parse_codecs
from .registry import check_keys, register
from .spec import ChunkSpec

EMPTY = np.uint64(2**64 - 1)
_INDEX_DTYPE = np.dtype("<u8")
# Bytes each index bytes->bytes codec adds; the spec only allows fixed-size ones.
_INDEX_CODEC_OVERHEAD = {"crc32c": 4}


_DEFAULT_INDEX_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}]


@register("sharding_indexed")
@dataclass(frozen=True)
class ShardingCodec:
    kind: ClassVar[str] = "array_bytes"
    chunk_shape: tuple[int, ...]  # inner chunk shape
    codec: ChunkCodec  # decodes one inner chunk (a v3 pipeline; the v2 one for the zp2 draft's shards)
    index_codec: V3ChunkCodec  # decodes the index
    index_location: str  # "start" or "end"
    fill_value: np.ndarray  # for inner chunks the index marks empty

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], spec: ChunkSpec, where: str) -> ShardingCodec:
        check_keys(name, config, {"chunk_shape", "codecs", "index_codecs", "index_location"}, where)
        shard_shape = spec.shape
        inner = parse_shape(config.get("chunk_shape"), "sharding chunk_shape", where, positive=True)
        if len(inner) != len(shard_shape) or any(s % c for s, c in zip(shard_shape, inner, strict=True)):
            raise MetadataError(f"{where}: inner chunk shape {list(inner)} does not divide shard shape "
                                f"{list(shard_shape)}")
        location = config.get("index_location", "end")
        if location not in ("start", "end"):
            raise MetadataError(f"{where}: index_location must be 'start' or 'end', got {location!r}")
        if spec.fill is None:
            raise UnsupportedError(f"{where}: sharding after a codec that cannot encode the fill value")
        cps = tuple(s // c for s, c in zip(shard_shape, inner, strict=True))
        return cls(
            chunk_shape=inner,
            codec=parse_codecs(config.get("codecs") or [], inner, spec.fill, where),
            index_codec=parse_codecs(config.get("index_codecs", _DEFAULT_INDEX_CODECS), (*cps, 2),
                                     np.zeros((), np.dtype("<u8")), where),
            index_location=location,
            fill_value=spec.fill,
        )

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

    def index_range(self, shard_shape: tuple[int, ...]) -> RangeRequest | SuffixRequest:
        """Where the index lies: the shard's first bytes, or its last (a shard's size is not known
        before it is read)."""
        nbytes = self.index_nbytes(shard_shape)
        return RangeRequest(0, nbytes) if self.index_location == "start" else SuffixRequest(nbytes)

    def parse_index(self, raw: bytes | bytearray, shard_shape: tuple[int, ...],
                    shard_nbytes: int | None = None) -> np.ndarray:
        """The index as a (n_inner, 2) uint64 array of (offset, nbytes), checked.

        Refused: a wrong length, half-empty entries, ranges past 2**63, ranges
        that overlap the index itself or each other (a damaged offset that
        lands inside another chunk would otherwise decode that chunk's bytes
        as this one's), and, when `shard_nbytes` is known, ranges past the end.
        Identical ranges are allowed: a writer may store equal chunks once.
        """
        cps = self.chunks_per_shard(shard_shape)
        expected = self.index_nbytes(shard_shape)
        if len(raw) != expected:
            raise ChunkError(f"shard index is {len(raw)} bytes, expected {expected} (truncated shard?)")
        index = np.ascontiguousarray(self.index_codec.decode(raw, (*cps, 2), _INDEX_DTYPE).reshape(-1, 2))
        offsets, sizes = index[:, 0], index[:, 1]
        empty = (offsets == EMPTY) & (sizes == EMPTY)
        half_empty = (offsets == EMPTY) != (sizes == EMPTY)
        if half_empty.any():
            raise ChunkError(f"shard index entry {int(np.argmax(half_empty))} has only one of offset/nbytes empty")
        used = np.flatnonzero(~empty)
        if not len(used):
            return index
        if int(offsets[used].max()) >= 2**63 or int(sizes[used].max()) >= 2**63:
            raise ChunkError("shard index points beyond any possible shard size")
        starts, stops = offsets[used], offsets[used] + sizes[used]  # no wrap: both below 2**63
        at_start = self.index_location == "start"
        data_start = expected if at_start else 0
        data_stop = None if shard_nbytes is None else shard_nbytes - (0 if at_start else expected)
        _check_ranges(used, starts, stops, data_start, data_stop)
        return index

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Decode a whole shard held in memory (used for nested sharding)."""
        data = bytes(data)
        raw_index = data[within(self.index_range(shape), len(data))]
        index = self.parse_index(raw_index, shape, len(data))
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


def _check_ranges(entries: np.ndarray, starts: np.ndarray, stops: np.ndarray, data_start: int,
                  data_stop: int | None) -> None:
    """Every non-empty (start, stop) inside [data_start, data_stop) and no two partly overlapping."""
    if int(starts.min()) < data_start:
        bad = entries[int(np.argmin(starts))]
        raise ChunkError(f"shard index entry {bad} starts at byte {int(starts.min())}, inside the index")
    if data_stop is not None and int(stops.max()) > data_stop:
        bad = entries[int(np.argmax(stops))]
        raise ChunkError(f"shard index entry {bad} ends at byte {int(stops.max())}, past the chunk data "
                         f"(which ends at byte {data_stop})")
    # Sorted by (start, stop), distinct ranges must not overlap their predecessor.
    order = np.lexsort((stops, starts))
    s, e = starts[order], stops[order]
    distinct = np.flatnonzero((s[1:] != s[:-1]) | (e[1:] != e[:-1])) + 1
    if len(distinct):
        # Each distinct range against the end of the latest range before it.
        ends_so_far = np.maximum.accumulate(e)
        overlap = distinct[s[distinct] < ends_so_far[distinct - 1]]
        if len(overlap):
            i = int(overlap[0])
            raise ChunkError(f"shard index entries {entries[order[i - 1]]} and {entries[order[i]]} overlap "
                             f"([{int(s[i - 1])}:{int(e[i - 1])}] and [{int(s[i])}:{int(e[i])}])")


def sharding_alone(codec: ChunkCodec) -> ShardingCodec | None:
    """The sharding codec of a v3 pipeline that is nothing else, else None: such an array is read
    inner chunk by inner chunk (engine.chunks.make_source, model.tiling.read_unit_shape); a
    sharding codec with other codecs around it decodes whole shards."""
    if isinstance(codec, V3ChunkCodec) and isinstance(codec.array_bytes, ShardingCodec) \
            and not codec.array_codecs and not codec.bytes_codecs:
        return codec.array_bytes
    return None
