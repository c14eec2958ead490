"""Final Zarr v3 (3.0/3.1) array documents and the v3 codec list."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..codecs import (
    ArrayToArray,
    ArrayToBytes,
    BytesCodec,
    NumcodecsArrayCodec,
    NumcodecsBytesCodec,
    TransposeCodec,
    V3ChunkCodec,
    numcodecs_codec,
)
from ..errors import MetadataError, UnsupportedError
from ..sharding import ShardingCodec
from .dtypes import fill_array, parse_v3_data_type, with_byte_order
from .model import (
    ArrayMeta,
    ChunkKeyFn,
    check_sizes,
    join_key,
    parse_dimension_names,
    parse_shape,
    require,
    require_object,
)

_ARRAY_KEYS = {
    "zarr_format", "node_type", "shape", "data_type", "chunk_grid", "chunk_key_encoding",
    "fill_value", "codecs", "attributes", "storage_transformers", "dimension_names",
}
# numcodecs filters that work on arrays (everything else `numcodecs.*` is bytes->bytes).
_NUMCODECS_ARRAY = {"delta", "bitround", "fixedscaleoffset", "quantize", "astype", "packbits"}
_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


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
    grid_name, grid_config, _ = extension(require(doc, "chunk_grid", (str, dict), where), f"{where}: chunk_grid")
    if grid_name != "regular":
        raise UnsupportedError(f"{where}: chunk_grid {grid_name!r} is not supported (only 'regular')")
    chunks = parse_shape(grid_config.get("chunk_shape"), "chunk_shape", where, positive=True)
    codec_docs = require(doc, "codecs", list, where)
    base_dtype = parse_v3_data_type(require(doc, "data_type", (str, dict), where), f"{where}: data_type")
    dtype = with_byte_order(base_dtype, "<" if find_endian(codec_docs, where) != "big" else ">")
    check_sizes(shape, chunks, dtype, where)
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
    return ArrayMeta(
        path=path,
        zarr_format="3",
        shape=shape,
        dtype=dtype,
        chunk_shape=chunks,
        fill_value=fill,
        codec=parse_codecs(codec_docs, chunks, fill, where),
        chunk_key=chunk_key_encoding(doc.get("chunk_key_encoding"), prefix, where),
        attributes=attributes,
        dimension_names=parse_dimension_names(doc.get("dimension_names"), len(shape), where),
    )


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

    def key(coords: tuple[int, ...]) -> str:
        parts = [lead] if lead else []
        parts += [str(c) for c in coords]
        return join_key(prefix, separator.join(parts) if parts else "0")

    return key


def find_endian(codec_docs: list[Any], where: str) -> str | None:
    """Endianness of the array->bytes codec, looking inside sharding."""
    for item in codec_docs:
        name, config, _ = extension(item, f"{where}: codecs")
        if name in ("bytes", "endian"):
            return config.get("endian")
        if name == "sharding_indexed":
            return find_endian(config.get("codecs") or [], where)
    return None


def parse_codecs(docs: list[Any], chunk_shape: tuple[int, ...], fill: np.ndarray, where: str) -> V3ChunkCodec:
    """Split a v3 `codecs` list into its three stages, checking their order."""
    array_codecs: list[ArrayToArray] = []
    array_bytes: ArrayToBytes | None = None
    bytes_codecs: list[NumcodecsBytesCodec] = []
    shape = chunk_shape
    for item in docs:
        name, config, _ = extension(item, f"{where}: codecs")
        codec = _build_codec(name, config, shape, fill, where)
        if isinstance(codec, NumcodecsBytesCodec):
            if array_bytes is None:
                raise MetadataError(f"{where}: bytes->bytes codec {name!r} before the array->bytes codec")
            bytes_codecs.append(codec)
        elif isinstance(codec, (BytesCodec, ShardingCodec)):
            if array_bytes is not None:
                raise MetadataError(f"{where}: more than one array->bytes codec")
            array_bytes = codec
        else:
            if array_bytes is not None:
                raise MetadataError(f"{where}: array->array codec {name!r} after the array->bytes codec")
            shape = codec.encoded_representation(shape, fill.dtype)[0]
            array_codecs.append(codec)
    if array_bytes is None:
        raise MetadataError(f"{where}: codecs need exactly one array->bytes codec (e.g. 'bytes')")
    return V3ChunkCodec(tuple(array_codecs), array_bytes, tuple(bytes_codecs))


def _build_codec(name: str, config: dict[str, Any], shape: tuple[int, ...], fill: np.ndarray, where: str) -> Any:
    if name in ("bytes", "endian"):
        endian = config.get("endian")
        if endian not in (None, "little", "big"):
            raise MetadataError(f"{where}: bytes codec endian must be 'little' or 'big', got {endian!r}")
        return BytesCodec(endian)
    if name == "transpose":
        return TransposeCodec(_transpose_order(config.get("order"), len(shape), where))
    if name == "sharding_indexed":
        return _sharding(config, shape, fill, where)
    if name == "blosc":
        shuffle = config.get("shuffle", "noshuffle")
        numeric = _BLOSC_SHUFFLE.get(shuffle, shuffle) if isinstance(shuffle, str) else shuffle
        if numeric not in (-1, 0, 1, 2):
            raise MetadataError(f"{where}: blosc shuffle {shuffle!r} is not one of {list(_BLOSC_SHUFFLE)}")
        numcodecs_config = {"id": "blosc", "cname": config.get("cname", "lz4"),
                            "clevel": config.get("clevel", 5), "shuffle": numeric,
                            "blocksize": config.get("blocksize", 0)}
        return NumcodecsBytesCodec(numcodecs_codec(numcodecs_config, where), name, config)
    if name in ("gzip", "zstd", "crc32c"):
        params = {k: v for k, v in config.items() if not (name == "zstd" and k == "checksum")}
        return NumcodecsBytesCodec(numcodecs_codec({"id": name, **params}, where), name, config)
    if name.startswith("numcodecs."):
        codec_id = name.removeprefix("numcodecs.")
        params = {k: v for k, v in config.items() if k != "id"}  # numcodecs 0.14 wrote a redundant id
        codec = numcodecs_codec({"id": codec_id, **params}, where)
        if codec_id in _NUMCODECS_ARRAY:
            return NumcodecsArrayCodec(codec, name)
        return NumcodecsBytesCodec(codec, name, config)
    if name in ("vlen-utf8", "vlen-bytes"):
        raise UnsupportedError(f"{where}: codec {name!r} encodes variable-length elements")
    raise UnsupportedError(f"{where}: unknown codec {name!r}")


def _transpose_order(order: Any, ndim: int, where: str) -> tuple[int, ...]:
    if order == "C":  # tensorstore accepts the letters
        return tuple(range(ndim))
    if order == "F":
        return tuple(reversed(range(ndim)))
    integers = isinstance(order, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in order)
    if not integers or sorted(order) != list(range(ndim)):
        raise MetadataError(f"{where}: transpose order must be a permutation of 0..{ndim - 1}, got {order!r}")
    return tuple(order)


def _sharding(config: dict[str, Any], shard_shape: tuple[int, ...], fill: np.ndarray, where: str) -> ShardingCodec:
    inner = parse_shape(config.get("chunk_shape"), "sharding chunk_shape", where, positive=True)
    if len(inner) != len(shard_shape) or any(s % c for s, c in zip(shard_shape, inner, strict=True)):
        raise MetadataError(f"{where}: inner chunk shape {list(inner)} does not divide shard shape {list(shard_shape)}")
    location = config.get("index_location", "end")
    if location not in ("start", "end"):
        raise MetadataError(f"{where}: index_location must be 'start' or 'end', got {location!r}")
    index_docs = config.get("index_codecs", [{"name": "bytes", "configuration": {"endian": "little"}}])
    cps = tuple(s // c for s, c in zip(shard_shape, inner, strict=True))
    index_fill = np.zeros((), np.dtype("<u8"))
    return ShardingCodec(
        chunk_shape=inner,
        codec=parse_codecs(config.get("codecs") or [], inner, fill, where),
        index_codec=parse_codecs(index_docs, (*cps, 2), index_fill, where),
        index_location=location,
        fill_value=fill,
    )
