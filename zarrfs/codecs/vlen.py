"""Variable-length elements: strings and bytes, decoded to object arrays and served at a fixed width.

A vlen chunk decodes to a numpy object array of `str` (kind "str") or `bytes`
(kind "bytes"):

* v3: the array->bytes codecs `vlen-utf8` / `vlen-bytes` (`VlenCodec`);
* v2: the object codec, `filters[0]` (vlen-utf8, vlen-bytes, json2, msgpack2),
  run by `V2ChunkCodec` like any filter; `object_codec_kind` says which kind
  of element it gives. `pickle` is refused by the registry (it would run code
  from the store); `vlen-array` (elements that are arrays) is not served.

`to_fixed_width` turns an object chunk into numpy's `astype("<U{n}")` /
`astype("S{n}")` of it (engine/vlen_widths.py does so for every chunk it serves, so
the cache holds fixed-width chunks). An element of the wrong type, or longer
than `n` (the store changed since the width was found), is a ChunkError:
never a truncated value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numcodecs.abc import Codec
from numcodecs.vlen import VLenBytes, VLenUTF8

from ..errors import ChunkError, UnsupportedError
from .registry import check_keys, register
from .spec import ChunkSpec, as_objects

# What each v2 object codec id decodes to. json2 and msgpack2 can hold any JSON
# value; zarrfs serves them as strings and calls any other element a bad chunk.
_OBJECT_CODEC_KIND = {"vlen-utf8": "str", "vlen-bytes": "bytes", "json2": "str", "msgpack2": "str"}
_PYTHON_TYPE = {"str": str, "bytes": bytes}


def object_codec_kind(filters: tuple[Codec, ...], where: str) -> str:
    """The element kind ("str" or "bytes") a v2 object array's first filter decodes to."""
    codec_id = filters[0].codec_id if filters else None
    kind = _OBJECT_CODEC_KIND.get(codec_id or "")
    if kind is None:
        what = f"object codec {codec_id!r}" if codec_id else "no object codec (filters[0])"
        raise UnsupportedError(f"{where}: object (|O) array with {what}; only vlen-utf8, vlen-bytes, json2 "
                               f"and msgpack2 are served")
    return kind


@register("vlen-utf8", "vlen-bytes")
@dataclass(frozen=True)
class VlenCodec:
    """v3 `vlen-utf8` / `vlen-bytes`: u32le count, then (u32le length, bytes) per element."""

    kind: ClassVar[str] = "array_bytes"
    name: str

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], spec: ChunkSpec, where: str) -> VlenCodec:
        check_keys(name, config, set(), where)
        if spec.dtype != np.dtype(object):
            raise UnsupportedError(f"{where}: codec {name!r} needs a variable-length data type, not {spec.dtype}")
        return cls(name)

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        codec = VLenUTF8() if self.name == "vlen-utf8" else VLenBytes()
        try:
            decoded = codec.decode(data)
        except Exception as exc:  # numcodecs raises ValueError, RuntimeError, UnicodeDecodeError...
            raise ChunkError(f"{self.name} cannot decode: {type(exc).__name__}: {exc}") from exc
        return as_objects(decoded, shape)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "configuration": {}}


def fixed_width_dtype(kind: str, width: int) -> np.dtype:
    """`<U{width}` for strings (UCS-4, little-endian as numpy writes it), `|S{width}` for bytes."""
    return np.dtype(f"<U{width}") if kind == "str" else np.dtype(f"S{width}")


def longest(objects: np.ndarray, kind: str) -> int:
    """The length of the longest element (code points for str, bytes for bytes); checks the types."""
    expected = _PYTHON_TYPE[kind]
    most = 0
    for value in objects.reshape(-1):
        if type(value) is not expected:
            raise ChunkError(f"element {value!r:.60} is {type(value).__name__}, not {expected.__name__}")
        most = max(most, len(value))
    return most


def to_fixed_width(objects: np.ndarray, kind: str, dtype: np.dtype) -> np.ndarray:
    """numpy's `objects.astype(dtype)`, after checking every element is of `kind` and fits."""
    width = dtype.itemsize // 4 if kind == "str" else dtype.itemsize
    most = longest(objects, kind)
    if most > width:
        raise ChunkError(f"element of length {most} is longer than the width {width} found when the array was "
                         f"first read (was the store changed while mounted?)")
    return objects.astype(dtype)
