"""`scale_offset` (zarr-extensions, array->array): encode `(x - offset) * scale`, decode `x / scale + offset`.

The arithmetic is the array's own data type's, as the spec requires and
zarr-python 3.2+ does: floats compute in their dtype (float32 stays float32,
so the result is bit-identical to zarr-python's), integers must divide
exactly and stay in range, else the chunk is an error (EIO), never a silently
truncated or wrapped value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import ChunkError, MetadataError, UnsupportedError
from .registry import check_keys, register
from .spec import ChunkSpec, json_scalar


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=")


@register("scale_offset")
@dataclass(frozen=True)
class ScaleOffsetCodec:
    kind: ClassVar[str] = "array_array"
    offset: int | float
    scale: int | float
    config: dict[str, Any]  # as written, for describe()

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], spec: ChunkSpec, where: str) -> ScaleOffsetCodec:
        check_keys(name, config, {"offset", "scale"}, where)
        if spec.dtype.kind == "V":  # a registered type numpy has no type for (int4, bfloat16, ...)
            raise UnsupportedError(f"{where}: scale_offset on {spec.dtype} elements is not supported (numpy has "
                                   f"no type to compute it in)")
        if spec.dtype.kind not in "iuf":
            raise MetadataError(f"{where}: bad configuration: scale_offset needs an integer or float data type, "
                                f"not {spec.dtype}")
        offset = json_scalar(config.get("offset", 0), spec.dtype, "scale_offset offset", where)
        scale = json_scalar(config.get("scale", 1), spec.dtype, "scale_offset scale", where)
        if scale == 0:
            raise MetadataError(f"{where}: bad configuration: scale_offset scale must not be zero")
        return cls(offset, scale, dict(config))

    def encoded_representation(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype]:
        return shape, dtype

    def encode_fill(self, fill: np.ndarray) -> np.ndarray:
        """`(fill - offset) * scale` in the fill's dtype; ChunkError when that is not representable."""
        dtype = _native(fill.dtype)
        if dtype.kind == "f":
            with np.errstate(all="ignore"):
                out = (fill.astype(dtype) - dtype.type(self.offset)) * dtype.type(self.scale)
            return np.asarray(out, dtype).astype(fill.dtype)
        value = (int(fill) - self.offset) * self.scale
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ChunkError(f"scale_offset encodes the fill value {int(fill)} as {value}, outside the range of "
                             f"{dtype}")
        return np.array(value, fill.dtype)

    def decode(self, array: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        native = array.astype(_native(dtype), copy=False)
        if native.dtype.kind == "f":
            kind = native.dtype.type
            with np.errstate(all="ignore"):  # inf and nan are values of the float type
                return native / kind(self.scale) + kind(self.offset)
        # An integer dtype's offset and scale are ints (json_scalar in that dtype).
        return _decode_integers(native, int(self.offset), int(self.scale))

    def describe(self) -> dict[str, Any]:
        return {"name": "scale_offset", "configuration": self.config}


def _decode_integers(array: np.ndarray, offset: int, scale: int) -> np.ndarray:
    """`array / scale + offset`, exact and in range, else ChunkError."""
    dtype = array.dtype
    wide: np.ndarray = array.astype(_wide_type(dtype, offset, scale))
    if np.any(wide % scale):
        raise ChunkError(f"scale_offset: a stored value is not a multiple of scale {scale} "
                         f"(the result is not a {dtype})")
    result = wide // scale + offset
    info = np.iinfo(dtype)
    if result.size and (result.min() < info.min or result.max() > info.max):
        raise ChunkError(f"scale_offset: a decoded value is outside the range of {dtype}")
    return result.astype(dtype)


def _wide_type(dtype: np.dtype, offset: int, scale: int) -> type:
    """int64 when it holds every `x // scale + offset` of `dtype`, else Python integers (object)."""
    info = np.iinfo(dtype)
    ends = (int(info.min) // scale + offset, int(info.max) // scale + offset)
    fits = all(-(2**63) <= end < 2**63 for end in ends) and dtype != np.uint64
    return np.int64 if fits else object
