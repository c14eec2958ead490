"""Final Zarr v3 (3.0/3.1) array documents and the v3 codec list."""

from __future__ import annotations

import math
from typing import Any

from ..codecs import parse_codecs
from ..codecs.sharding import ShardingCodec
from ..elements.dtypes import (
    VLEN_V3_TYPES,
    fill_array,
    opaque_fill,
    opaque_type_name,
    parse_v3_data_type,
    vlen_fill,
    with_byte_order,
)
from ..elements.shapes import check_sizes, parse_shape
from ..errors import MetadataError, UnsupportedError
from .grids import ChunkGrid, RegularGrid, parse_rectilinear, refine
from .limits import check_vlen_elements
from .meta import ArrayMeta, ChunkKeyFn, join_key, parse_dimension_names, require, require_object

_ARRAY_KEYS = {
    "zarr_format", "node_type", "shape", "data_type", "chunk_grid", "chunk_key_encoding",
    "fill_value", "codecs", "attributes", "storage_transformers", "dimension_names",
}


def extension(value: Any, where: str) -> tuple[str, dict[str, Any], bool]:
    """(name, configuration, must_understand) of a v3 extension point."""
    if isinstance(value, str):
        return value, {}, True
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        config = value.get("configuration") or {}
        if not isinstance(config, dict):
            raise MetadataError(f"{where}: configuration of {value['name']!r} must be an object")
        return value["name"], config, value.get("must_understand", True) is not False
    raise MetadataError(f"{where}: expected a name or {{name, configuration}}, got {value!r}")


def check_must_understand(doc: dict[str, Any], known: set[str], where: str) -> None:
    for key, value in doc.items():
        if key in known:
            continue
        if isinstance(value, dict) and value.get("must_understand") is False:
            continue
        raise UnsupportedError(f"{where}: unknown metadata field {key!r} that must be understood")


def parse_v3_array(doc: Any, path: str, prefix: str, where: str) -> ArrayMeta:
    doc = require_object(doc, where)
    check_must_understand(doc, _ARRAY_KEYS, where)
    shape = parse_shape(require(doc, "shape", list, where), "shape", where, positive=False)
    grid = parse_grid(require(doc, "chunk_grid", (str, dict), where), shape, where)
    # The largest stored object bounds sizes; codecs are built for the first (a rectilinear grid's
    # other shapes differ only in extents, which the sharding codec checks per shard: `refine`).
    chunks = grid.max_stored_shape()
    codec_docs = require(doc, "codecs", list, where)
    data_type = require(doc, "data_type", (str, dict), where)
    base_dtype = parse_v3_data_type(data_type, f"{where}: data_type")
    big_endian = find_endian(codec_docs, where) == "big"
    dtype = with_byte_order(base_dtype, ">" if big_endian else "<")
    check_sizes(shape, chunks, dtype, where)
    opaque = opaque_type_name(data_type)
    vlen = vlen_kind(data_type)
    if vlen:
        check_vlen_elements(math.prod(shape), where)
        fill = vlen_fill(vlen, doc.get("fill_value"), where)
    elif opaque:
        fill = opaque_fill(opaque, doc.get("fill_value"), big_endian, where)
    else:
        fill = fill_array(dtype, doc.get("fill_value"), where, v3=True)
    transformers = doc.get("storage_transformers") or []
    if not isinstance(transformers, list):
        raise MetadataError(f"{where}: storage_transformers must be a list, got {transformers!r}")
    for transformer in transformers:
        name, _, must = extension(transformer, f"{where}: storage_transformers")
        if must:
            raise UnsupportedError(f"{where}: storage transformer {name!r} is not supported")
    attributes = doc.get("attributes", {})
    if not isinstance(attributes, dict):
        raise MetadataError(f"{where}: attributes must be an object")
    codec = parse_codecs(codec_docs, grid.stored_shape((0,) * len(shape)), fill, where)
    sharding = codec.array_bytes
    if isinstance(sharding, ShardingCodec):
        refine(grid, sharding.chunk_shape, where)  # the inner chunks must divide every shard
    return ArrayMeta(
        path=path,
        zarr_format="3",
        shape=shape,
        dtype=dtype,
        grid=grid,
        fill_value=fill,
        codec=codec,
        chunk_key=chunk_key_encoding(doc.get("chunk_key_encoding"), prefix, where),
        attributes=attributes,
        dimension_names=parse_dimension_names(doc.get("dimension_names"), len(shape), where),
        opaque_type=opaque,
        vlen=vlen,
    )


def vlen_kind(data_type: Any) -> str | None:
    """"str" or "bytes" for a variable-length `data_type`, else None."""
    name = data_type if isinstance(data_type, str) else data_type.get("name") if isinstance(data_type, dict) else None
    return VLEN_V3_TYPES.get(name) if isinstance(name, str) else None


def parse_grid(value: Any, shape: tuple[int, ...], where: str) -> ChunkGrid:
    name, config, _ = extension(value, f"{where}: chunk_grid")
    if name == "regular":
        chunks = parse_shape(config.get("chunk_shape"), "chunk_shape", where, positive=True)
        if len(chunks) != len(shape):
            raise MetadataError(f"{where}: shape {list(shape)} and chunk shape {list(chunks)} differ in rank")
        return RegularGrid(shape, chunks)
    if name == "rectilinear":
        return parse_rectilinear(config, shape, where)
    raise UnsupportedError(f"{where}: chunk_grid {name!r} is not supported (only 'regular' and 'rectilinear')")


def chunk_key_encoding(value: Any, prefix: str, where: str) -> ChunkKeyFn:
    where = f"{where}: chunk_key_encoding"
    name, config, _ = extension(value if value is not None else "default", where)
    if name == "default":
        separator = config.get("separator", "/")
        lead = "c"
    elif name == "v2":
        separator = config.get("separator", ".")
        lead = ""
    else:
        raise UnsupportedError(f"{where}: chunk key encoding {name!r} is not supported")
    if separator not in ("/", "."):
        raise MetadataError(f"{where}: chunk key separator must be '/' or '.', got {separator!r}")

    return V3ChunkKey(prefix, lead, separator)


class V3ChunkKey:
    """A v3 array's chunk keys: `prefix/c/0/1` (default) or `prefix/0.1` (v2 encoding). An object with
    slots, not a closure: a wide group holds one per array (a closure and its cells took 340 bytes)."""

    __slots__ = ("prefix", "lead", "separator")

    def __init__(self, prefix: str, lead: str, separator: str) -> None:
        self.prefix, self.lead, self.separator = prefix, lead, separator

    def __call__(self, coords: tuple[int, ...]) -> str:
        parts = [self.lead] if self.lead else []
        parts += [str(c) for c in coords]
        return join_key(self.prefix, self.separator.join(parts) if parts else "0")


def find_endian(codec_docs: list[Any], where: str) -> str | None:
    """Endianness of the array->bytes codec, looking inside sharding."""
    for item in codec_docs:
        name, config, _ = extension(item, f"{where}: codecs")
        if name in ("bytes", "endian"):
            return config.get("endian")
        if name == "sharding_indexed":
            return find_endian(config.get("codecs") or [], where)
    return None
