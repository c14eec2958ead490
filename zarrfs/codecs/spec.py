"""What a codec decodes to: the shape, data type and fill value of a chunk."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numcodecs.compat import ensure_ndarray_like

from ..elements.dtypes import fill_array
from ..errors import ChunkError, MetadataError


@dataclass(frozen=True, eq=False)
class ChunkSpec:
    """One representation of a chunk in a codec chain.

    The fill value travels with it because array->array codecs transform it
    (scale_offset, cast_value): an empty inner chunk of a shard that follows
    them is filled with the *encoded* fill value, which those codecs then
    decode like any other element.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    # 0-d, of `dtype`; None when a codec before cannot say how it encodes the
    # fill value (only a shard after it needs one, and refuses to go without).
    fill: np.ndarray | None


def view_as_chunk(buf: Any, shape: tuple[int, ...], dtype: np.dtype, order: str = "C") -> np.ndarray:
    """Interpret decoded bytes as exactly one chunk; a size mismatch is an error."""
    flat = ensure_ndarray_like(buf).reshape(-1, order="A").view(np.uint8)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if flat.nbytes != expected:
        raise ChunkError(f"decoded to {flat.nbytes} bytes, expected {expected} for a {shape} {dtype} chunk")
    return flat.view(dtype).reshape(shape, order=order)


def as_objects(decoded: Any, shape: tuple[int, ...], order: str = "C") -> np.ndarray:
    """An object codec's output (vlen, json2, msgpack2) as an object chunk of `shape`.

    json2 may give a `<U` array: the elements are converted to Python objects either way.
    """
    array = np.asarray(decoded)
    count = int(np.prod(shape, dtype=np.int64))
    if array.size != count:
        raise ChunkError(f"decoded to {array.size} elements, expected {count} for a {shape} chunk")
    return array.astype(object, copy=False).reshape(shape, order="F" if order == "F" else "C")


def json_scalar(value: Any, dtype: np.dtype, what: str, where: str) -> Any:
    """A scalar in the fill-value JSON encoding of `dtype` (int or float), as a Python number."""
    if dtype.kind in "iu":
        integral = isinstance(value, int) and not isinstance(value, bool) or \
            isinstance(value, float) and value.is_integer()
        if not integral:
            raise MetadataError(f"{where}: bad configuration: {what} {value!r} is not an integer of {dtype}")
        number = int(value)
        info = np.iinfo(dtype)
        if not info.min <= number <= info.max:
            raise MetadataError(f"{where}: bad configuration: {what} {value!r} is outside the range of {dtype}")
        return number
    try:
        return fill_array(dtype.newbyteorder("="), value, where, v3=True).item()
    except MetadataError as exc:
        raise MetadataError(f"{where}: bad configuration: {what} {value!r} is not a {dtype} value") from exc
