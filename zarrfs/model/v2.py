"""Zarr v1 (`meta`) and v2 (`.zarray`) array documents."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numcodecs.abc import Codec

from ..codecs import V2ChunkCodec, numcodecs_codec
from ..codecs.vlen import object_codec_kind
from ..elements.dtypes import explicit_byte_order, fill_array, parse_typestr, vlen_fill
from ..elements.shapes import check_sizes, parse_shape
from ..errors import MetadataError, UnsupportedError
from .grids import RegularGrid
from .limits import check_vlen_elements
from .meta import ArrayMeta, ChunkKeyFn, join_key, require, require_object


def v2_chunk_key(prefix: str, separator: str) -> ChunkKeyFn:
    def key(coords: tuple[int, ...]) -> str:
        return join_key(prefix, separator.join(map(str, coords)) if coords else "0")

    return key


def _common_fields(doc: dict[str, Any], version: int, where: str) -> tuple[tuple[int, ...], tuple[int, ...],
                                                                          np.dtype, str]:
    """(shape, chunks, dtype, order): the fields v1 `meta` and v2 `.zarray` share (v2 allows `|O`)."""
    if doc.get("zarr_format") != version:
        raise MetadataError(f"{where}: zarr_format must be {version}, got {doc.get('zarr_format')!r}")
    shape = parse_shape(require(doc, "shape", list, where), "shape", where, positive=False)
    chunks = parse_shape(require(doc, "chunks", list, where), "chunks", where, positive=True)
    dtype = explicit_byte_order(parse_typestr(doc.get("dtype"), where, allow_object=version == 2))
    check_sizes(shape, chunks, dtype, where)
    order = doc.get("order", "C")
    if order not in ("C", "F"):
        raise MetadataError(f"{where}: order must be 'C' or 'F', got {order!r}")
    return shape, chunks, dtype, order


def parse_v2_array(doc: Any, path: str, prefix: str, attributes: dict[str, Any], where: str) -> ArrayMeta:
    """`.zarray` of the node at `path`, whose keys start with `prefix`."""
    doc = require_object(doc, where)
    shape, chunks, dtype, order = _common_fields(doc, 2, where)
    separator = doc.get("dimension_separator", ".")
    if separator not in (".", "/"):
        raise MetadataError(f"{where}: dimension_separator must be '.' or '/', got {separator!r}")
    compressor = _codec_or_none(doc.get("compressor"), f"{where}: compressor")
    filters = _filters(doc.get("filters"), f"{where}: filters")
    vlen = None
    if dtype.hasobject:  # variable-length elements: the object codec (filters[0]) says which kind
        vlen = object_codec_kind(filters, f"{where}: filters")
        check_vlen_elements(math.prod(shape), where)
    return ArrayMeta(
        path=path,
        zarr_format="2",
        shape=shape,
        dtype=dtype,
        grid=RegularGrid(shape, chunks),
        fill_value=vlen_fill(vlen, doc.get("fill_value"), where) if vlen else
        fill_array(dtype, doc.get("fill_value"), where),
        codec=V2ChunkCodec(compressor, filters, order),
        chunk_key=v2_chunk_key(prefix, separator),
        attributes=attributes,
        dimension_names=_xarray_dimensions(attributes, len(shape)),
        fill_value_null=doc.get("fill_value") is None,
        vlen=vlen,
        key_separator_guessed="dimension_separator" not in doc,
    )


def _codec_or_none(config: Any, where: str) -> Codec | None:
    if config is None:
        return None
    if not isinstance(config, dict):
        raise MetadataError(f"{where} must be an object or null, got {config!r}")
    return numcodecs_codec(config, where)


def _filters(value: Any, where: str) -> tuple[Codec, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(f, dict) for f in value):
        raise MetadataError(f"{where} must be a list of codec objects or null")
    return tuple(numcodecs_codec(f, where) for f in value)


def _xarray_dimensions(attributes: dict[str, Any], ndim: int) -> tuple[str | None, ...] | None:
    """xarray keeps v2 dimension names in the `_ARRAY_DIMENSIONS` attribute."""
    names = attributes.get("_ARRAY_DIMENSIONS")
    if isinstance(names, list) and len(names) == ndim and all(isinstance(n, str) for n in names):
        return tuple(names)
    return None


# ----------------------------------------------------------------- Zarr v1

# v1 compression ids -> numcodecs configs (zarr 1.1.0 `compressors.py`).
def _v1_compressor(name: Any, opts: Any, where: str) -> Codec | None:
    if name in (None, "none"):
        return None
    # blosc and lzma take an object of options, zlib and bz2 a level; null means the defaults.
    kind = dict if name in ("blosc", "lzma") else int
    if opts is not None and (not isinstance(opts, kind) or isinstance(opts, bool)):
        raise MetadataError(f"{where}: compression_opts for {name!r} must be "
                            f"{'an object' if kind is dict else 'an integer'} or null, got {opts!r}")
    if name == "blosc":
        opts = opts or {}
        return numcodecs_codec({"id": "blosc", "cname": opts.get("cname", "lz4"),
                                "clevel": opts.get("clevel", 5), "shuffle": opts.get("shuffle", 1)}, where)
    if name in ("zlib", "gzip"):  # 1.x "gzip" was a zlib stream; the zlib decoder sniffs both
        return numcodecs_codec({"id": "zlib", "level": 1 if opts is None else opts}, where)
    if name == "bz2":
        return numcodecs_codec({"id": "bz2", "level": 1 if opts is None else opts}, where)
    if name == "lzma":
        return numcodecs_codec({"id": "lzma", **(opts if isinstance(opts, dict) else {})}, where)
    raise UnsupportedError(f"{where}: unknown v1 compression {name!r}")


def parse_v1_array(doc: Any, attributes: dict[str, Any], where: str) -> ArrayMeta:
    """A v1 store: `meta` at the store root, chunk keys 'i.j' at the root."""
    doc = require_object(doc, where)
    shape, chunks, dtype, order = _common_fields(doc, 1, where)
    compressor = _v1_compressor(doc.get("compression"), doc.get("compression_opts"), where)
    return ArrayMeta(
        path="",
        zarr_format="1",
        shape=shape,
        dtype=dtype,
        grid=RegularGrid(shape, chunks),
        fill_value=fill_array(dtype, doc.get("fill_value"), where),
        codec=V2ChunkCodec(compressor, (), order),
        chunk_key=v2_chunk_key("", "."),
        attributes=attributes,
    )
