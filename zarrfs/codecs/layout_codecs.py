"""How elements are laid out: `bytes` (array->bytes) and `transpose` (array->array)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..elements.dtypes import with_byte_order
from ..errors import MetadataError, UnsupportedError
from .registry import check_keys, register
from .spec import ChunkSpec, view_as_chunk


def with_endian(dtype: np.dtype, endian: str | None) -> np.dtype:
    """`dtype` in the byte order a `bytes` codec names (None: as it is)."""
    return dtype if endian is None else with_byte_order(dtype, "<" if endian == "little" else ">")


@register("bytes", "endian")  # "endian" is the name zarr-python's early v3 releases wrote
@dataclass(frozen=True)
class BytesCodec:
    """v3 `bytes`: C-order elements with the given endianness."""

    kind: ClassVar[str] = "array_bytes"
    endian: str | None  # "little", "big", or None for single-byte types

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], spec: ChunkSpec, where: str) -> BytesCodec:
        check_keys(name, config, {"endian"}, where)
        if spec.dtype.hasobject:
            raise UnsupportedError(f"{where}: codec {name!r} cannot encode variable-length elements "
                                   f"(vlen-utf8 or vlen-bytes can)")
        endian = config.get("endian")
        if endian not in (None, "little", "big"):
            raise MetadataError(f"{where}: bytes codec endian must be 'little' or 'big', got {endian!r}")
        return cls(endian)

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return view_as_chunk(data, shape, with_endian(dtype, self.endian))

    def stores_plain_elements(self, dtype: np.dtype) -> bool:
        """Whether the stored bytes are exactly `dtype`'s elements (decoding is a copy)."""
        return with_endian(dtype, self.endian) == dtype

    def describe(self) -> dict[str, Any]:
        config = {"endian": self.endian} if self.endian else {}
        return {"name": "bytes", "configuration": config}


@register("transpose")
@dataclass(frozen=True)
class TransposeCodec:
    kind: ClassVar[str] = "array_array"
    order: tuple[int, ...]

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], spec: ChunkSpec, where: str) -> TransposeCodec:
        check_keys(name, config, {"order"}, where)
        order = config.get("order")
        ndim = len(spec.shape)
        if order == "C":  # tensorstore accepts the letters
            return cls(tuple(range(ndim)))
        if order == "F":
            return cls(tuple(reversed(range(ndim))))
        if not (isinstance(order, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in order)
                and sorted(order) == list(range(ndim))):
            raise MetadataError(f"{where}: transpose order must be a permutation of 0..{ndim - 1}, got {order!r}")
        return cls(tuple(order))

    def encode_fill(self, fill: np.ndarray) -> np.ndarray:
        return fill

    def encoded_representation(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype]:
        return tuple(shape[i] for i in self.order), dtype

    def decode(self, array: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.transpose(array, np.argsort(self.order))

    def describe(self) -> dict[str, Any]:
        return {"name": "transpose", "configuration": {"order": list(self.order)}}
