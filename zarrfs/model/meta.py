"""One frozen description of an array or group, whatever Zarr version wrote it."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MetadataError
from .grids import ChunkGrid, RegularGrid
from .limits import MAX_JSON_DEPTH, check_depth, check_document_size
from .shared_json import loads_shared

if TYPE_CHECKING:
    from ..codecs import ChunkCodec

# A chunk key function maps grid coordinates to the store key of that chunk.
ChunkKeyFn = Callable[[tuple[int, ...]], str]


@dataclass(frozen=True, eq=False, slots=True)  # slots: a wide group holds one per array
class ArrayMeta:
    path: str  # logical path inside the hierarchy, '' for the root
    zarr_format: str  # "1", "2", "3", "3-draft-seed", "3-draft-zp2"
    shape: tuple[int, ...]
    dtype: np.dtype  # explicit byte order: the order the virtual files expose
    grid: ChunkGrid  # where the stored objects (shards, if sharded) lie, and their shapes
    fill_value: np.ndarray  # 0-d, of `dtype`
    codec: ChunkCodec  # decodes one stored object
    chunk_key: ChunkKeyFn
    attributes: dict[str, Any] = field(default_factory=dict)
    dimension_names: tuple[str | None, ...] | None = None
    # v2/v1 `fill_value: null`: `fill_value` then holds zeros, but no value was declared
    # (conventions must not take it for a nodata value).
    fill_value_null: bool = False
    # A registered data type numpy has no type for ("bfloat16", "int4", ...): `dtype` is then
    # void of its stored size, and the array is served as its stored bytes only (.raw, .json).
    opaque_type: str | None = None
    # Variable-length elements: "str" or "bytes" (`dtype` is then numpy's object dtype and
    # `fill_value` a 0-d object array). Such an array has no byte layout until the engine
    # finds its width (engine/vlen_widths.py); its files are .npy and .json only.
    vlen: str | None = None
    # v2 without `dimension_separator`: pre-2.8 NestedDirectoryStore may have written 'i/j' keys
    # while the metadata says nothing, so a missing dotted key is tried nested too.
    key_separator_guessed: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        """The one shape of every stored object. Only a regular grid has one (every v1/v2/draft
        array); the engine asks `grid` instead, and a rectilinear grid raises here."""
        if not isinstance(self.grid, RegularGrid):
            raise TypeError(f"array /{self.path} has a {type(self.grid).__name__}, no single chunk shape")
        return self.grid.chunk_shape

    def describe(self) -> dict[str, Any]:
        """JSON-able summary: `zarrfs tree --json` and the `.json` virtual file."""
        from ..codecs.sharding import ShardingCodec

        sharding = getattr(self.codec, "array_bytes", None)
        sharded = isinstance(sharding, ShardingCodec)
        # A rectilinear grid has no one chunk (or shard) shape: `chunk_grid` gives its edges.
        outer = list(self.grid.chunk_shape) if isinstance(self.grid, RegularGrid) else None
        return {
            "node_type": "array",
            "path": "/" + self.path,
            "zarr_format": self.zarr_format,
            "shape": list(self.shape),
            "dtype": dtype_json(self.dtype),
            "data_type": self.opaque_type,
            "chunk_shape": list(sharding.chunk_shape) if isinstance(sharding, ShardingCodec) else outer,
            "shard_shape": outer if sharded else None,
            "chunk_grid": self.grid.describe(),
            "codecs": self.codec.describe(),
            "fill_value": fill_json(self.fill_value),
            "dimension_names": list(self.dimension_names) if self.dimension_names else None,
            "nbytes": None if self.vlen else self.nbytes,
            "attributes": self.attributes,
            **({"vlen": self.vlen} if self.vlen else {}),
        }


@dataclass(frozen=True, eq=False)
class GroupMeta:
    path: str
    zarr_format: str
    attributes: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"node_type": "group", "path": "/" + self.path, "zarr_format": self.zarr_format,
                "attributes": self.attributes}


def dtype_json(dtype: np.dtype) -> Any:
    return dtype.descr if dtype.fields is not None else dtype.str


def fill_json(fill: np.ndarray) -> Any:
    """The fill value as plain JSON (NaN/Infinity as strings, bytes as lists)."""
    value = fill.item()
    if isinstance(value, bytes) and fill.dtype.hasobject:  # a vlen bytes fill: base64, as v3 writes it
        return base64.standard_b64encode(value).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, complex):
        return [fill_json(np.array(value.real)), fill_json(np.array(value.imag))]
    if isinstance(value, (bytes, tuple)) or fill.dtype.kind in "VMm":
        return list(fill.tobytes())
    return value


# --------------------------------------------------------- shared validation


# Documents from this size are parsed with their equal parts held once (shared_json.py): a consolidated
# group's, a wide group's listing. Below it, plain `json.loads`.
SHARED_PARSE_BYTES = 16 << 10


def parse_json(raw: bytes | bytearray, where: str) -> Any:
    """JSON as real writers emit it (bare NaN/Infinity accepted), within the bounds of `limits`; equal
    objects and arrays held once (shared_json.py)."""
    check_document_size(len(raw), where)
    try:
        text = raw.decode("utf-8")
        # A small document holds too little to repeat (one array's); sharing would cost 6x the parse.
        doc = loads_shared(text) if len(raw) >= SHARED_PARSE_BYTES else json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetadataError(f"{where}: invalid JSON: {exc}") from exc
    except RecursionError as exc:
        raise MetadataError(f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep") from exc
    check_depth(doc, where)
    return doc


def require(doc: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise MetadataError(f"{where}: required field {key!r} is missing")
    value = doc[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise MetadataError(f"{where}: field {key!r} has the wrong type ({type(value).__name__})")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def require_object(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise MetadataError(f"{where}: metadata must be a JSON object, got {type(doc).__name__}")
    return doc


def parse_dimension_names(value: Any, ndim: int, where: str) -> tuple[str | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != ndim or not all(v is None or isinstance(v, str) for v in value):
        raise MetadataError(f"{where}: dimension_names must be {ndim} strings or nulls, got {value!r}")
    return tuple(value)


def join_key(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key
