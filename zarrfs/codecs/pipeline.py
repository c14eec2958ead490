"""Decode-only codec pipelines: stored bytes -> one chunk as a numpy array.

Two shapes of pipeline exist. Zarr v1/v2 and zarr-python's v3 draft use
"compressor, then filters in reverse, then reshape with `order`"
(`V2ChunkCodec`). Final v3 splits its `codecs` list into array->array codecs,
one array->bytes codec and bytes->bytes codecs (`V3ChunkCodec`), each built by
the class the registry names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numcodecs.abc import Codec

from ..errors import ChunkError, MetadataError
from .bounds import chunk_output_bound, decode_bytes, decodes_into
from .layout_codecs import BytesCodec
from .registry import lookup, named
from .spec import ChunkSpec, as_objects, view_as_chunk


class ChunkCodec(Protocol):
    """Turns one stored object into the chunk it encodes."""

    def decode(self, data: bytes | bytearray | memoryview, shape: tuple[int, ...], dtype: np.dtype,
               out: np.ndarray | None = None) -> np.ndarray:
        """The chunk as an array of `shape` and `dtype`, in logical (C-index) order.

        `out`: flat uint8 memory of the chunk's size, used for the chunk when `decodes_into`
        says the pipeline can (and the stored frame states that size); otherwise ignored.
        """
        ...

    def decodes_into(self, dtype: np.dtype) -> bool:
        """Whether a chunk of `dtype` is its last decode stage's output as is, so that stage can
        write into memory it is given (`decode(..., out=)`)."""
        ...

    def describe(self) -> list[dict[str, Any]]:
        """JSON-able description for `zarrfs tree` and the `.json` sidecar."""
        ...


class ArrayToArray(Protocol):
    def encoded_representation(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype]: ...
    def encode_fill(self, fill: np.ndarray) -> np.ndarray | None: ...
    def decode(self, array: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...
    def describe(self) -> dict[str, Any]: ...


class ArrayToBytes(Protocol):
    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...
    def describe(self) -> dict[str, Any]: ...


class BytesToBytes(Protocol):
    name: str

    def decode(self, data: Any, limit: int, out: np.ndarray | None = None) -> memoryview | np.ndarray: ...
    def decodes_into(self) -> bool: ...
    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class V2ChunkCodec:
    """v1/v2 semantics: compressor, filters in reverse, reshape with `order`."""

    compressor: Codec | None
    filters: tuple[Codec, ...] = ()
    order: str = "C"

    def decode(self, data: bytes | bytearray | memoryview, shape: tuple[int, ...], dtype: np.dtype,
               out: np.ndarray | None = None) -> np.ndarray:
        limit = chunk_output_bound(shape, dtype)
        buf: Any = data
        stages = ([self.compressor] if self.compressor is not None else []) + list(reversed(self.filters))
        # An object array's first filter (its object codec) turns bytes into elements: it runs last,
        # unbounded by `decode_bytes` (its input is bounded) and its output is not bytes to view.
        object_codec = stages.pop() if dtype.hasobject else None
        if out is not None and not self.decodes_into(dtype):
            out = None
        try:
            for codec in stages:
                buf = decode_bytes(codec, buf, limit, out)
            if object_codec is not None:
                return as_objects(object_codec.decode(buf), shape, self.order)
        except ChunkError:
            raise
        except Exception as exc:  # numcodecs raises anything from RuntimeError to numpy errors
            raise ChunkError(f"cannot decode: {type(exc).__name__}: {exc}") from exc
        return view_as_chunk(buf, shape, dtype, self.order)

    def stores_plain_elements(self, dtype: np.dtype) -> bool:
        """Whether a stored chunk is exactly its C-order elements as `dtype` (decoding is a copy)."""
        return self.compressor is None and not self.filters and self.order == "C" and not dtype.hasobject

    def decodes_into(self, dtype: np.dtype) -> bool:
        return self.compressor is not None and not self.filters and self.order == "C" \
            and not dtype.hasobject and decodes_into(self.compressor)

    def describe(self) -> list[dict[str, Any]]:
        configs = [c.get_config() for c in self.filters]
        if self.compressor is not None:
            configs.append(self.compressor.get_config())
        return configs


@dataclass(frozen=True)
class V3ChunkCodec:
    """The v3 pipeline: array->array codecs, one array->bytes, bytes->bytes codecs."""

    array_codecs: tuple[ArrayToArray, ...]
    array_bytes: ArrayToBytes
    bytes_codecs: tuple[BytesToBytes, ...]

    def decode(self, data: bytes | bytearray | memoryview, shape: tuple[int, ...], dtype: np.dtype,
               out: np.ndarray | None = None) -> np.ndarray:
        representations = [(shape, dtype)]
        for codec in self.array_codecs:
            representations.append(codec.encoded_representation(*representations[-1]))
        encoded_shape, encoded_dtype = representations[-1]
        limit = chunk_output_bound(encoded_shape, encoded_dtype)
        buf: Any = data
        # Decoded last, its output is the chunk: the one stage that may write into `out`.
        last = self.bytes_codecs[0] if out is not None and self.decodes_into(dtype) else None
        for stage in reversed(self.bytes_codecs):
            buf = stage.decode(buf, limit, out if stage is last else None)
        array = self.array_bytes.decode(buf, encoded_shape, encoded_dtype)
        for codec, (rep_shape, rep_dtype) in zip(
            reversed(self.array_codecs), reversed(representations[:-1]), strict=True
        ):
            array = codec.decode(array, rep_shape, rep_dtype)
        return array

    def stores_plain_elements(self, dtype: np.dtype) -> bool:
        """Whether a stored chunk is exactly its C-order elements as `dtype` (decoding is a copy)."""
        if self.array_codecs or self.bytes_codecs or not isinstance(self.array_bytes, BytesCodec) \
                or dtype.hasobject:
            return False
        return self.array_bytes.stores_plain_elements(dtype)

    def decodes_into(self, dtype: np.dtype) -> bool:
        return not self.array_codecs and bool(self.bytes_codecs) and isinstance(self.array_bytes, BytesCodec) \
            and not dtype.hasobject and self.array_bytes.stores_plain_elements(dtype) \
            and self.bytes_codecs[0].decodes_into()

    def describe(self) -> list[dict[str, Any]]:
        return (
            [c.describe() for c in self.array_codecs]
            + [self.array_bytes.describe()]
            + [c.describe() for c in self.bytes_codecs]
        )


def parse_codecs(docs: list[Any], chunk_shape: tuple[int, ...], fill: np.ndarray, where: str) -> V3ChunkCodec:
    """A v3 `codecs` list for chunks of `chunk_shape` and `fill`'s dtype, its stages in order.

    Each array->array codec hands the next one its encoded representation,
    fill value included (a shard after scale_offset/cast_value fills empty
    inner chunks with the encoded fill).
    """
    if not isinstance(docs, list):
        raise MetadataError(f"{where}: codecs must be a list, got {type(docs).__name__}")
    array_codecs: list[ArrayToArray] = []
    array_bytes: ArrayToBytes | None = None
    bytes_codecs: list[BytesToBytes] = []
    spec = ChunkSpec(chunk_shape, fill.dtype, fill)
    for item in docs:
        name, config = named(item, f"{where}: codecs")
        codec = lookup(name, where).from_config(name, config, spec, where)
        if codec.kind == "bytes_bytes":
            if array_bytes is None:
                raise MetadataError(f"{where}: bytes->bytes codec {name!r} before the array->bytes codec")
            bytes_codecs.append(codec)
        elif codec.kind == "array_bytes":
            if array_bytes is not None:
                raise MetadataError(f"{where}: more than one array->bytes codec")
            array_bytes = codec
        else:
            if array_bytes is not None:
                raise MetadataError(f"{where}: array->array codec {name!r} after the array->bytes codec")
            shape, dtype = codec.encoded_representation(spec.shape, spec.dtype)
            spec = ChunkSpec(shape, dtype, None if spec.fill is None else _encoded_fill(codec, name, spec.fill, where))
            array_codecs.append(codec)
    if array_bytes is None:
        raise MetadataError(f"{where}: codecs need exactly one array->bytes codec (e.g. 'bytes')")
    return V3ChunkCodec(tuple(array_codecs), array_bytes, tuple(bytes_codecs))


def _encoded_fill(codec: ArrayToArray, name: str, fill: np.ndarray, where: str) -> np.ndarray | None:
    """The fill value as `codec` encodes it. The spec makes a fill value the codec cannot encode
    (scale_offset out of range, cast_value with no rule for it) an error of the array's metadata."""
    try:
        return codec.encode_fill(fill)
    except ChunkError as exc:
        raise MetadataError(f"{where}: bad configuration: the fill value does not pass codec {name!r}: {exc}") from exc
