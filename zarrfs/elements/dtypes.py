"""Data types and fill values from every metadata dialect, to numpy.

The dtype that comes out always has an explicit byte order: it is the byte
order of the elements that the virtual files expose.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
import sys
from typing import Any, Literal

import numpy as np

from ..errors import MetadataError, UnsupportedError

# v3 core / registered names -> numpy type strings (without byte order).
_V3_SIMPLE = {
    "bool": "b1",
    "int8": "i1",
    "int16": "i2",
    "int32": "i4",
    "int64": "i8",
    "uint8": "u1",
    "uint16": "u2",
    "uint32": "u4",
    "uint64": "u8",
    "float16": "f2",
    "float32": "f4",
    "float64": "f8",
    "complex64": "c8",
    "complex128": "c16",
    "complex_float32": "c8",
    "complex_float64": "c16",
}
# Registered numeric types numpy has no type for (and tensorstore's float8_e4m3fn) -> bytes
# per element as stored (the sub-byte ones hold one element per byte). zarrfs serves such an
# array as those bytes (`.raw`, described in `.json`), never as numbers it would convert.
_FLOAT8 = ("float8_e3m4", "float8_e4m3", "float8_e4m3fn", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2",
           "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
OPAQUE_ITEMSIZE = {
    "bfloat16": 2, "int2": 1, "int4": 1, "uint2": 1, "uint4": 1,
    **{name: 1 for name in _FLOAT8},
    "complex_bfloat16": 4, "complex_float16": 4,
    **{f"complex_{name}": 2 for name in _FLOAT8},
}
# Variable-length v3 types -> the kind of element ("str" or "bytes"); their dtype is numpy's
# object dtype, served at a fixed width found by reading the array (see engine/vlen_widths.py).
VLEN_V3_TYPES = {"string": "str", "bytes": "bytes", "variable_length_bytes": "bytes"}


def with_byte_order(dtype: np.dtype, order: Literal["<", ">"]) -> np.dtype:
    """`dtype` with '<' or '>' applied to every multi-byte field (structured too)."""
    if dtype.fields is not None:
        fields = [(name, with_byte_order(dtype.fields[name][0], order)) for name in dtype.names or ()]
        return np.dtype(fields)
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return np.dtype((with_byte_order(base, order), shape))
    if dtype.itemsize == 1 or dtype.kind in "SV":
        return dtype.newbyteorder("|") if dtype.kind not in "SV" else dtype
    return dtype.newbyteorder(order)


def explicit_byte_order(dtype: np.dtype) -> np.dtype:
    """Replace native '=' by the machine's order so `dtype.str` always says which."""
    if dtype.fields is not None:
        return np.dtype([(name, explicit_byte_order(dtype.fields[name][0])) for name in dtype.names or ()])
    if dtype.byteorder == "=":
        return dtype.newbyteorder("<" if sys.byteorder == "little" else ">")
    return dtype


def parse_typestr(value: Any, where: str, *, allow_object: bool = False) -> np.dtype:
    """A v1/v2 (and zp2-draft) dtype: typestr or structured list.

    `|O` is refused unless `allow_object` (v2, whose object codec says what the elements are).
    """
    try:
        if isinstance(value, str):
            dtype = np.dtype(value)
        elif isinstance(value, list):
            dtype = np.dtype([_structured_field(f, where) for f in value])
        else:
            raise MetadataError(f"{where}: dtype must be a string or a list, got {value!r}")
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"{where}: invalid dtype {value!r}: {exc}") from exc
    if not (allow_object and dtype == np.dtype(object)):
        check_fixed_size(dtype, where)
    return dtype


def _structured_field(field: Any, where: str) -> tuple:
    if not isinstance(field, list) or len(field) not in (2, 3) or not isinstance(field[0], str):
        raise MetadataError(f"{where}: invalid structured dtype field {field!r}")
    name, sub = field[0], field[1]
    sub_dtype = np.dtype([_structured_field(f, where) for f in sub]) if isinstance(sub, list) else np.dtype(sub)
    return (name, sub_dtype, tuple(field[2])) if len(field) == 3 else (name, sub_dtype)


def check_fixed_size(dtype: np.dtype, where: str) -> None:
    if dtype.hasobject:
        raise UnsupportedError(f"{where}: variable-length (object) elements have no fixed byte layout")
    if dtype.itemsize == 0:
        raise UnsupportedError(f"{where}: zero-size elements ({dtype}) cannot be served")


def parse_v3_data_type(value: Any, where: str) -> np.dtype:
    """A final-v3 `data_type` (core names, r<N>, and the registered extensions).

    The result has no byte order yet for multi-byte types; the `bytes` codec sets it.
    """
    name, config = _extension(value, where)
    if name in _V3_SIMPLE:
        return np.dtype(_V3_SIMPLE[name])
    if name in OPAQUE_ITEMSIZE:
        return np.dtype(f"V{OPAQUE_ITEMSIZE[name]}")
    if name in VLEN_V3_TYPES:
        return np.dtype(object)
    if name.startswith("r") and name[1:].isdigit():
        bits = int(name[1:])
        if bits <= 0 or bits % 8:
            raise MetadataError(f"{where}: raw data type {name!r} needs a positive multiple of 8 bits")
        return np.dtype(f"V{bits // 8}")
    if name == "fixed_length_utf32":
        return np.dtype(f"U{_length_bytes(config, where) // 4}")
    if name == "null_terminated_bytes":
        return np.dtype(f"S{_length_bytes(config, where)}")
    if name == "raw_bytes":
        return np.dtype(f"V{_length_bytes(config, where)}")
    if name in ("numpy.datetime64", "numpy.timedelta64"):
        unit = config.get("unit")
        scale = config.get("scale_factor", 1)
        if not isinstance(unit, str) or not isinstance(scale, int) or scale < 1:
            raise MetadataError(f"{where}: {name} needs a string unit and a positive integer scale_factor")
        kind = "M8" if name == "numpy.datetime64" else "m8"
        return _checked_dtype(f"{kind}[{scale if scale != 1 else ''}{unit}]", where)
    if name in ("structured", "struct"):
        return _v3_struct(config.get("fields"), where)
    raise UnsupportedError(f"{where}: unknown data type {name!r}")


def _v3_struct(fields: Any, where: str) -> np.dtype:
    if not isinstance(fields, list) or not fields:
        raise MetadataError(f"{where}: struct data type needs a non-empty list of fields")
    parts = []
    for field in fields:
        if isinstance(field, dict):  # registered `struct`: {"name": ..., "data_type": ...}
            name, sub = field.get("name"), field.get("data_type")
        elif isinstance(field, list) and len(field) == 2:  # zp 3.1 `structured`: [name, dtype]
            name, sub = field
        else:
            raise MetadataError(f"{where}: invalid struct field {field!r}")
        if not isinstance(name, str):
            raise MetadataError(f"{where}: struct field names must be strings, got {name!r}")
        if isinstance(sub, str) and sub not in _V3_SIMPLE and sub[:1] in "<>|=":
            sub_dtype = _checked_dtype(sub, where)  # zp 3.1 writes numpy typestrs here
        else:
            sub_dtype = parse_v3_data_type(sub, where)
        parts.append((name, sub_dtype))
    return np.dtype(parts)


def opaque_type_name(value: Any) -> str | None:
    """The name of a `data_type` that numpy has no type for (see OPAQUE_ITEMSIZE), else None."""
    name = value if isinstance(value, str) else value.get("name") if isinstance(value, dict) else None
    return name if name in OPAQUE_ITEMSIZE else None


def opaque_fill(name: str, value: Any, big_endian: bool, where: str) -> np.ndarray:
    """The fill value of an OPAQUE_ITEMSIZE type as its stored bytes (a 0-d void array).

    Numbers need ml_dtypes (installed with tensorstore) to be encoded; without
    it only 0 and the "0x..." bit patterns are understood.
    """
    size = OPAQUE_ITEMSIZE[name]
    try:
        if name.startswith("complex_"):
            if not isinstance(value, list) or len(value) != 2:
                raise ValueError("a complex fill value is a [real, imaginary] pair")
            component = name.removeprefix("complex_")
            raw = b"".join(_opaque_bytes(component, part, size // 2, big_endian) for part in value)
        else:
            raw = _opaque_bytes(name, value, size, big_endian)
    except (TypeError, ValueError, OverflowError) as exc:
        raise MetadataError(f"{where}: fill_value {value!r} does not fit data type {name}: {exc}") from exc
    return np.frombuffer(raw, f"V{size}").reshape(())


def _opaque_bytes(name: str, value: Any, size: int, big_endian: bool) -> bytes:
    if name in _V3_SIMPLE:  # complex_float16's parts
        raw = np.array(_float(value), _V3_SIMPLE[name]).astype("<" + _V3_SIMPLE[name]).tobytes()
    elif isinstance(value, str) and value.startswith("0x"):
        raw = int(value, 16).to_bytes(size, "little")
    else:
        try:
            import ml_dtypes
        except ImportError:
            if value == 0 and name != "float8_e8m0fnu":  # all-zero bits are zero, except in e8m0 (no zero)
                return bytes(size)
            raise ValueError("encoding it needs the ml_dtypes package") from None
        number = int(value) if name.startswith(("int", "uint")) else _float(value)
        raw = np.array(number, getattr(ml_dtypes, name)).tobytes()
    return raw[::-1] if big_endian else raw


def _checked_dtype(spec: str, where: str) -> np.dtype:
    try:
        return np.dtype(spec)
    except TypeError as exc:
        raise MetadataError(f"{where}: invalid data type {spec!r}: {exc}") from exc


def _length_bytes(config: dict, where: str) -> int:
    length = config.get("length_bytes")
    if not isinstance(length, int) or isinstance(length, bool) or length <= 0:
        raise MetadataError(f"{where}: length_bytes must be a positive integer, got {length!r}")
    return length


def _extension(value: Any, where: str) -> tuple[str, dict]:
    """`name` or `{"name": ..., "configuration": {...}}` -> (name, configuration)."""
    if isinstance(value, str):
        return value, {}
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        config = value.get("configuration", {})
        if not isinstance(config, dict):
            raise MetadataError(f"{where}: configuration of {value['name']!r} must be an object")
        return value["name"], config
    raise MetadataError(f"{where}: expected a name or {{name, configuration}}, got {value!r}")


# ---------------------------------------------------------------- fill values


def fill_array(dtype: np.dtype, value: Any, where: str, *, v3: bool = False) -> np.ndarray:
    """The fill value as a 0-d array of `dtype` (`null` means the dtype's zero)."""
    try:
        if value is None:
            return np.zeros((), dtype)
        return _fill(dtype, value, v3)
    except (TypeError, ValueError, OverflowError, struct.error, binascii.Error) as exc:
        raise MetadataError(f"{where}: fill_value {value!r} does not fit dtype {dtype}: {exc}") from exc


def _fill(dtype: np.dtype, value: Any, v3: bool) -> np.ndarray:
    kind = dtype.kind
    if isinstance(value, str) and value.startswith(("0x", "0b")) and kind in "fciuV":
        return _fill_from_bits(dtype, value)
    if dtype.fields is not None:
        if isinstance(value, dict):  # registered v3 `struct`: {field: fill}
            out = np.zeros((), dtype)
            for name in dtype.names or ():
                out[name] = _fill(dtype.fields[name][0], value[name], v3)
            return out
        return _fill_from_bytes(dtype, _decode_bytes(value))
    if kind == "b":
        return np.array(bool(value), dtype)
    if kind in "iu":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("integer expected")
        return np.array(int(value), dtype)
    if kind == "f":
        return np.array(_float(value), dtype)
    if kind == "c":
        if isinstance(value, list) and len(value) == 2:
            return np.array(complex(_float(value[0]), _float(value[1])), dtype)
        return np.array(complex(_float(value)), dtype)
    if kind in "Mm":
        count = np.iinfo(np.int64).min if value == "NaT" else int(value)
        # view in native order first: `dtype` may be big-endian
        return np.array(count, np.int64).view(dtype.newbyteorder("=")).astype(dtype)
    if kind == "S":
        if isinstance(value, str):
            try:
                return np.array(base64.standard_b64decode(value.encode("ascii")), dtype)
            except (ValueError, binascii.Error):
                return np.array(value.encode("utf-8"), dtype)  # zp2 tolerated plain strings
        if isinstance(value, list):
            return np.array(bytes(value), dtype)
        return np.zeros((), dtype)  # zp2 wrote e.g. 0 for "no fill"
    if kind == "U":
        return np.array(str(value) if value != 0 else "", dtype)
    if kind == "V":
        return _fill_from_bytes(dtype, _decode_bytes(value))
    raise TypeError(f"unsupported dtype kind {kind!r}")


def vlen_fill(kind: str, value: Any, where: str) -> np.ndarray:
    """The fill value of a variable-length array ("str" or "bytes" elements) as a 0-d object array.

    `null` (and v2's `0`) mean the empty element, as in zarr-python. Strings are plain JSON
    strings (zarr-python 3 also reads numbers as their text); bytes are base64 (v3, and what
    zarr-python 3 writes in v2) or a list of byte values, and a v2 string that is not base64 is
    taken as its UTF-8 bytes (zp2 tolerated such values for `S`). zarr-python 2 wrote object
    fill values through the object codec, base64-encoded: zarr-python 3 reads those as plain
    strings, and so does zarrfs.
    """
    out = np.empty((), object)
    try:
        if value is None or value == 0 and not isinstance(value, bool):
            out[()] = "" if kind == "str" else b""
        elif kind == "str":
            if isinstance(value, (dict, list, bool)):
                raise ValueError("a string is expected")
            out[()] = str(value)
        elif isinstance(value, str):
            try:
                out[()] = base64.b64decode(value.encode("ascii"), validate=True)
            except (ValueError, binascii.Error):
                out[()] = value.encode("utf-8")
        else:
            out[()] = _decode_bytes(value)
    except (TypeError, ValueError) as exc:
        raise MetadataError(f"{where}: fill_value {value!r} does not fit variable-length {kind}: {exc}") from exc
    return out


def _float(value: Any) -> float:
    if isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf, "-Infinity": -math.inf}
        if value in special:
            return special[value]
        raise ValueError(f"not a float: {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _decode_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return base64.standard_b64decode(value.encode("ascii"))
    if isinstance(value, list) and all(isinstance(v, int) and 0 <= v < 256 for v in value):
        return bytes(value)
    if value == 0:
        return b""
    raise ValueError("expected base64 or a list of byte values")


def _fill_from_bytes(dtype: np.dtype, raw: bytes) -> np.ndarray:
    if not raw:
        return np.zeros((), dtype)
    if len(raw) != dtype.itemsize:
        raise ValueError(f"{len(raw)} bytes given, element has {dtype.itemsize}")
    return np.frombuffer(raw, dtype).reshape(())


def _fill_from_bits(dtype: np.dtype, value: str) -> np.ndarray:
    """'0x7fc00000' / '0b...': the element's bits as a big-endian integer."""
    bits = int(value, 16 if value.startswith("0x") else 2)
    raw = bits.to_bytes(dtype.itemsize, "big")
    return np.frombuffer(raw, dtype.newbyteorder(">") if dtype.itemsize > 1 else dtype).astype(dtype).reshape(())
