"""The 2022 Zarr v3 drafts: the seed's editor's draft and what zarr-python 2.12-2.18 wrote.

Both keep metadata under `meta/` and chunks under `data/`, and both decode
with v2 semantics (bytes codecs in reverse, then reshape with
`chunk_memory_layout`); they differ in key names and in how codecs and data
types are spelled (formats.md §3, §8.1).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from ..codecs import V2ChunkCodec, V3ChunkCodec, numcodecs_codec
from ..codecs.layout_codecs import BytesCodec
from ..codecs.sharding import ShardingCodec
from ..elements.dtypes import (
    explicit_byte_order,
    fill_array,
    parse_typestr,
    parse_v3_data_type,
    with_byte_order,
)
from ..elements.shapes import check_sizes, parse_shape
from ..errors import MetadataError, UnsupportedError
from .grids import RegularGrid
from .meta import ArrayMeta, ChunkKeyFn, require, require_object

# The seed spells it both ways: storage_transformers (examples) and storage-transformers (URI line).
SHARDING_URI_SUFFIXES = ("storage_transformers/sharding/1.0", "storage-transformers/sharding/1.0")


def draft_chunk_key(prefix: str, separator: str, scalar_key: str) -> ChunkKeyFn:
    """`<prefix>/c` + indices joined by the separator (`data/root/a/c0/1`).

    A 0-d array's only chunk is `c` in the seed draft, but zarr-python 2.x wrote `c0`.
    """

    def key(coords: tuple[int, ...]) -> str:
        return f"{prefix}/c" + separator.join(map(str, coords)) if coords else f"{prefix}/{scalar_key}"

    return key


def _codec_id(uri: Any, where: str) -> str:
    """'https://purl.org/zarr/spec/codec/gzip/1.0' (or .../codecs/...) -> 'gzip'."""
    if not isinstance(uri, str) or "/" not in uri:
        raise MetadataError(f"{where}: codec must be named by a URI, got {uri!r}")
    parts = uri.rstrip("/").split("/")
    if len(parts) >= 3 and parts[-3] in ("codec", "codecs"):
        return parts[-2]
    if len(parts) >= 2 and parts[-2] in ("codec", "codecs"):  # the seed's gzip page omits the version
        return parts[-1]
    raise UnsupportedError(f"{where}: unknown codec {uri!r}")


def _data_type(value: Any, where: str) -> np.dtype:
    if isinstance(value, dict) and "extension" in value:  # zp2: {"extension": URL, "type": ..., "fallback": ...}
        return parse_typestr(value.get("type"), where)
    if isinstance(value, str) and value[:1] in "<>|=" or isinstance(value, list):
        return parse_typestr(value, where)
    if isinstance(value, str) and value in ("i1", "u1", "b1"):
        return parse_typestr(value, where)
    return parse_v3_data_type(value, where)


def _fill(dtype: np.dtype, value: Any, where: str) -> np.ndarray:
    if value == "+Infinity":
        value = "Infinity"
    return fill_array(dtype, value, where)


def _grid(doc: dict[str, Any], where: str) -> tuple[tuple[int, ...], str]:
    grid = require(doc, "chunk_grid", dict, where)
    if grid.get("type", "regular") != "regular":
        raise UnsupportedError(f"{where}: chunk grid {grid.get('type')!r} is not supported")
    chunks = parse_shape(grid.get("chunk_shape"), "chunk_grid.chunk_shape", where, positive=True)
    separator = grid.get("separator", "/")
    if separator not in ("/", "."):
        raise MetadataError(f"{where}: chunk separator must be '/' or '.', got {separator!r}")
    return chunks, separator


def _configuration(codec_doc: dict[str, Any], where: str) -> dict[str, Any]:
    config = codec_doc.get("configuration") or {}
    if not isinstance(config, dict):
        raise MetadataError(f"{where}: codec configuration must be an object, got {config!r}")
    return config


def _attributes(doc: dict[str, Any], where: str) -> dict[str, Any]:
    attributes = doc.get("attributes")
    if attributes is None:
        return {}
    if not isinstance(attributes, dict):
        raise MetadataError(f"{where}: attributes must be an object, got {type(attributes).__name__}")
    return dict(attributes)


def _check_extensions(doc: dict[str, Any], where: str) -> None:
    """Both drafts: an extension must be understood unless it says `must_understand: false`."""
    extensions = doc.get("extensions")
    if extensions is None:
        return
    if not isinstance(extensions, list):
        raise MetadataError(f"{where}: extensions must be a list, got {type(extensions).__name__}")
    for item in extensions:
        if not isinstance(item, dict):
            raise MetadataError(f"{where}: extensions entries must be objects, got {item!r}")
        if item.get("must_understand") is not False:
            raise UnsupportedError(f"{where}: extensions: {item.get('extension', item)!r} is not supported")


def _layout(doc: dict[str, Any], where: str) -> str:
    order = doc.get("chunk_memory_layout", "C")
    if order not in ("C", "F"):
        raise MetadataError(f"{where}: chunk_memory_layout must be 'C' or 'F', got {order!r}")
    return order


def _sharded(meta_args: dict[str, Any], transformers: Any, inner: V2ChunkCodec, where: str) -> dict[str, Any]:
    """Rewrite the chunk grid and codec for the sharding storage transformer, if present."""
    for transformer in transformers or []:
        uri = transformer.get("extension") or transformer.get("type") if isinstance(transformer, dict) else None
        if not isinstance(uri, str) or not uri.endswith(SHARDING_URI_SUFFIXES):
            raise UnsupportedError(f"{where}: storage transformer {transformer!r} is not supported")
        config = transformer.get("configuration") or {}
        cps = parse_shape(config.get("chunks_per_shard"), "chunks_per_shard", where, positive=True)
        inner_shape = meta_args["chunk_shape"]
        if len(cps) != len(inner_shape):
            raise MetadataError(f"{where}: chunks_per_shard {list(cps)} has the wrong rank")
        shard_shape = tuple(c * n for c, n in zip(inner_shape, cps, strict=True))
        sharding = ShardingCodec(
            chunk_shape=inner_shape,
            codec=inner,
            index_codec=V3ChunkCodec((), BytesCodec("little"), ()),
            index_location="end",
            fill_value=meta_args["fill_value"],
        )
        return {**meta_args, "chunk_shape": shard_shape, "codec": V3ChunkCodec((), sharding, ())}
    return meta_args


def _meta(args: dict[str, Any]) -> ArrayMeta:
    chunks = args.pop("chunk_shape")
    return ArrayMeta(**args, grid=RegularGrid(args["shape"], chunks))


def parse_zp2_array(doc: Any, path: str, where: str) -> ArrayMeta:
    """An array document as zarr-python 2.12-2.18 wrote it (`meta/root/<path>.array.json`)."""
    doc = require_object(doc, where)
    shape = parse_shape(require(doc, "shape", list, where), "shape", where, positive=False)
    chunks, separator = _grid(doc, where)
    separator = doc.get("dimension_separator", separator)
    dtype = explicit_byte_order(_data_type(doc.get("data_type"), f"{where}: data_type"))
    check_sizes(shape, chunks, dtype, where)
    _check_extensions(doc, where)
    attributes = _attributes(doc, where)
    filters = attributes.pop("filters", None) or []
    compressor_doc = doc.get("compressor")
    compressor = None
    if compressor_doc is not None:
        compressor_doc = require_object(compressor_doc, f"{where}: compressor")
        codec_id = _codec_id(compressor_doc.get("codec"), f"{where}: compressor")
        compressor = numcodecs_codec({"id": codec_id, **_configuration(compressor_doc, where)}, where)
    if not isinstance(filters, list):
        raise MetadataError(f"{where}: attributes.filters must be a list")
    codec = V2ChunkCodec(compressor, tuple(numcodecs_codec(f, where) for f in filters), _layout(doc, where))
    prefix = "data/root" + ("/" + path if path else "")
    args = dict(path=path, zarr_format="3-draft-zp2", shape=shape, dtype=dtype, chunk_shape=chunks,
                fill_value=_fill(dtype, doc.get("fill_value"), where), codec=codec,
                chunk_key=draft_chunk_key(prefix, separator, "c0"), attributes=attributes)
    return _meta(_sharded(args, doc.get("storage_transformers"), codec, where))


_SEED_ARRAY_KEYS = {"shape", "data_type", "chunk_grid", "chunk_memory_layout", "fill_value", "extensions",
                    "attributes", "codecs", "storage_transformers"}


def parse_seed_array(doc: Any, path: str, where: str) -> ArrayMeta:
    """An array document of the seed's 2022 editor's draft (`meta/<path>.array.json`)."""
    doc = require_object(doc, where)
    unknown = set(doc) - _SEED_ARRAY_KEYS
    if unknown:  # the draft: "unknown keys must fail"
        raise UnsupportedError(f"{where}: unknown metadata fields {sorted(unknown)}")
    shape = parse_shape(require(doc, "shape", list, where), "shape", where, positive=False)
    chunks, separator = _grid(doc, where)
    dtype = _data_type(doc.get("data_type"), f"{where}: data_type")
    _check_extensions(doc, where)
    codec_docs = doc.get("codecs") or []
    if not isinstance(codec_docs, list):
        raise MetadataError(f"{where}: codecs must be a list")
    endian: Literal["<", ">"] = "<"
    stages = []
    for item in codec_docs:
        item = require_object(item, f"{where}: codecs")
        codec_id = _codec_id(item.get("type") or item.get("codec"), f"{where}: codecs")
        config = _configuration(item, where)
        if codec_id == "endian":
            endian = ">" if config.get("endian") == "big" else "<"
            continue
        stages.append(numcodecs_codec({"id": codec_id, **config}, where))
    dtype = with_byte_order(dtype, endian) if dtype.byteorder in "=<>" else dtype
    check_sizes(shape, chunks, dtype, where)
    # The draft's codecs all act on bytes, in list order on encode.
    codec = V2ChunkCodec(None, tuple(stages), _layout(doc, where))
    prefix = "data" + ("/" + path if path else "")
    args = dict(path=path, zarr_format="3-draft-seed", shape=shape, dtype=dtype, chunk_shape=chunks,
                fill_value=_fill(dtype, doc.get("fill_value"), where), codec=codec,
                chunk_key=draft_chunk_key(prefix, separator, "c"),
                attributes=_attributes(doc, where))
    return _meta(_sharded(args, doc.get("storage_transformers"), codec, where))

