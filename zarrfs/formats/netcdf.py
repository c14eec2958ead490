"""NetCDF classic files of a dataset group: CDF-2 (64-bit offset) and CDF-5 (64-bit data).

A group whose arrays carry dimension names (xarray's `_ARRAY_DIMENSIONS` in
v2, `dimension_names` in v3) is one NetCDF dataset: its arrays are the
variables over shared, fixed dimensions (no record dimension), its
attributes the global attributes. The header is built from metadata alone;
each variable is one contiguous C-order block of its array's elements,
big-endian (NetCDF has no other byte order), converted where the file type
is not the array's. Layout and limits: formats.md §14 in the reference
notes, netCDF-C's `file_format_specifications.md`.

Type mapping (the CDF-2 file is what every NetCDF reader takes; CDF-5
only netCDF-C's readers):

| array | CDF-2 | CDF-5 |
|---|---|---|
| int8, int16, int32, float32, float64 | the same type | the same type |
| uint8, uint16, uint32 | byte/short/int + `_Unsigned = "true"` | ubyte/ushort/uint |
| int64, uint64 | double, each value checked exact on read | int64/uint64 |
| bool | byte + `dtype = "bool"` (xarray's marker) | the same |
| float16 | float | float |
| fixed-width bytes `S<n>` | char, an extra last dimension `string<n>` | the same |
| fixed-width text `U<n>` | char (UTF-8, at most n bytes), `string<n>`, `_Encoding = "utf-8"` | the same |

An int64 value that a double cannot hold exactly makes the read of its
bytes fail (EIO, `InexactValueError`), never a rounded number: the CDF-5
file beside it holds it exactly. Arrays that cannot be variables (variable-
length strings, structured or complex elements, data types NumPy lacks, a
dimension name used with another length, an array without dimension
names) are left out and listed in `NetcdfPlan.left_out`.
"""

from __future__ import annotations

import base64
import bisect
import json
import math
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np

from ..errors import InexactValueError
from ..model.meta import ArrayMeta, GroupMeta
from ..suffixes import CDF5_SUFFIX

# nc_type codes (netcdf.h).
NC_BYTE, NC_CHAR, NC_SHORT, NC_INT, NC_FLOAT, NC_DOUBLE = 1, 2, 3, 4, 5, 6
NC_UBYTE, NC_USHORT, NC_UINT, NC_INT64, NC_UINT64 = 7, 8, 9, 10, 11
_NC_DTYPES = {NC_BYTE: ">i1", NC_CHAR: "S1", NC_SHORT: ">i2", NC_INT: ">i4", NC_FLOAT: ">f4", NC_DOUBLE: ">f8",
              NC_UBYTE: ">u1", NC_USHORT: ">u2", NC_UINT: ">u4", NC_INT64: ">i8", NC_UINT64: ">u8"}
_SIGNED = {1: NC_BYTE, 2: NC_SHORT, 4: NC_INT}
_UNSIGNED = {1: NC_UBYTE, 2: NC_USHORT, 4: NC_UINT}
_TAG_DIMENSION, _TAG_VARIABLE, _TAG_ATTRIBUTE = 0x0A, 0x0B, 0x0C

# CDF-2: every variable but the last must be smaller than this (its 4-byte vsize); the last may be larger.
CDF2_VSIZE_LIMIT = 2**32 - 4
# netCDF-Java reads dimension lengths as Java ints.
MAX_DIMENSION = 2**31 - 1
# Variables begin on 8-byte boundaries: a read at an aligned file offset starts on an element,
# so the byte swap runs in place in the reply.
ALIGN = 8
# Variables up to this size go first, after the header (`netcdf_plan`).
SMALL_VARIABLE = 1 << 20
# Zero bytes before each large variable: a reader's block read of the header (netCDF-C reads up to
# 4 MiB at open) or of the variable before, and the kernel's readahead past it (4 MiB on a local
# mount), then reach no chunk of the large variable, so a slab loads only its own chunks.
READAHEAD_GAP = 4 << 20
# An int64 variable served as double has pages of its own: a value no double holds fails the
# reads of its pages (EIO), and only of its pages, never the header's or another variable's.
PAGE = 4096
# Attributes a NetCDF file must not repeat: Zarr bookkeeping, and netCDF-C's reserved names.
_DROPPED_ATTRIBUTE_PREFIXES = ("_ARRAY_DIMENSIONS", "_NC")


@dataclass(frozen=True)
class Variable:
    """One variable of the file: where its bytes lie and how its array's elements become them."""

    name: str
    array_path: str
    begin: int  # file offset of its first byte
    nbytes: int  # its values' bytes (the block is padded to 4, then to the next begin, with zeros)
    shape: tuple[int, ...]  # the array's shape
    source: np.dtype  # the array's element type, its byte order explicit
    target: np.dtype  # the file's element type: big-endian, or `S<n>` for char
    conversion: str  # "copy" (same bytes), "swap" (byte order), "cast" (numpy), "exact" (int64 as double), "utf8"


@dataclass(frozen=True)
class NetcdfLayout:
    """A NetCDF classic file: header bytes, then each variable's block at its `begin`."""

    header: bytes
    variables: tuple[Variable, ...]
    size: int

    @cached_property
    def _blocks(self) -> tuple[list[int], list[int]]:
        """The begins of the variables that have bytes, in file order, and their indices."""
        indices = [i for i, variable in enumerate(self.variables) if variable.nbytes]
        return [self.variables[i].begin for i in indices], indices

    def read_into(self, offset: int, out: np.ndarray,
                  read_array: Callable[[int, int, int, np.ndarray], Any]) -> int:
        """Bytes [offset, offset + len(out)) of the file into the uint8 array `out`; how many there were.

        `read_array(i, start, stop, target)` writes bytes [start, stop) of
        variable i's array (C order, the array's own dtype) into the uint8 array `target`.
        """
        end = min(offset + len(out), self.size)
        begins, indices = self._blocks
        position = offset
        while position < end:
            piece = out[position - offset:]
            if position < len(self.header):
                stop = min(end, len(self.header))
                piece[:stop - position] = np.frombuffer(self.header, np.uint8, stop - position, position)
                position = stop
                continue
            found = bisect.bisect_right(begins, position) - 1
            variable = self.variables[indices[found]] if found >= 0 else None
            if variable is None or position >= variable.begin + variable.nbytes:  # padding before the next block
                stop = min(end, begins[found + 1] if found + 1 < len(begins) else self.size)
                piece[:stop - position] = 0
                position = stop
                continue
            index = indices[found]
            stop = min(end, variable.begin + variable.nbytes)
            read_variable(variable, position - variable.begin, stop - variable.begin, piece[:stop - position],
                          partial(read_array, index))
            position = stop
        return max(0, end - offset)


def read_variable(variable: Variable, start: int, stop: int, out: np.ndarray,
                  read_source: Callable[[int, int, np.ndarray], Any]) -> None:
    """Bytes [start, stop) of the variable's block into `out`, from `read_source` (bytes of its array)."""
    size = variable.target.itemsize
    if variable.conversion == "copy":
        read_source(start, stop, out)
        return
    if variable.conversion == "swap" and start % size == 0 and stop % size == 0:
        read_source(start, stop, out)  # the array's bytes straight into the reply, swapped where they lie
        out.view(variable.source).byteswap(inplace=True)
        return
    first, last = start // size, -(-stop // size)
    values = np.empty(last - first, variable.source)
    source_size = variable.source.itemsize
    read_source(first * source_size, last * source_size, values.view(np.uint8))
    converted = convert(values, variable)
    out[:] = converted.view(np.uint8)[start - first * size:stop - first * size]


def convert(values: np.ndarray, variable: Variable) -> np.ndarray:
    """Elements of the variable's array as the file holds them (`variable.target`)."""
    if variable.conversion == "utf8":
        encoded = np.char.encode(values, "utf-8")
        if encoded.dtype.itemsize > variable.target.itemsize:
            raise InexactValueError(f"variable {variable.name}: a string longer than {variable.target.itemsize} "
                                    "bytes in UTF-8 cannot be a value of its char dimension")
        return encoded.astype(variable.target)
    converted = values.astype(variable.target)
    if variable.conversion == "exact":
        with np.errstate(invalid="ignore"):
            back = converted.astype(values.dtype)
        limit = 2.0 ** (values.dtype.itemsize * 8 - (values.dtype.kind == "i"))
        inexact = (back != values) | (converted >= limit)  # -2^63 is exact; 2^63 is no int64
        if inexact.any():
            value = values[np.argmax(inexact)]
            raise InexactValueError(f"variable {variable.name}: {value} is not exact as a double; "
                                    f"the CDF-5 file (*{CDF5_SUFFIX}) holds it as it is")
    return converted


# ------------------------------------------------------------------ planning


@dataclass(frozen=True)
class NetcdfPlan:
    """The file of one version, and the arrays that could not be its variables: (array path, why)."""

    layout: NetcdfLayout
    left_out: tuple[tuple[str, str], ...]
    needs_cdf5: bool  # some array is exact only in CDF-5 (int64, uint64) or too large for CDF-2


def is_dataset_group(arrays: list[tuple[str, ArrayMeta]]) -> bool:
    """Whether the group is a NetCDF dataset: some array of it names its dimensions."""
    return any(meta.dimension_names and all(meta.dimension_names) for _, meta in arrays)


@dataclass
class _Spec:
    name: str
    meta: ArrayMeta
    nc_type: int
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    target: np.dtype
    conversion: str
    attributes: list[tuple[str, int, bytes, int]]  # (name, nc_type, encoded values, count)

    @property
    def nbytes(self) -> int:
        # A char variable's shape ends with its string dimension: one byte an element.
        return math.prod(self.shape) * (1 if self.nc_type == NC_CHAR else self.target.itemsize)


def netcdf_plan(group: GroupMeta, arrays: list[tuple[str, ArrayMeta]], version: int = 2) -> NetcdfPlan:
    """The NetCDF file (version 2: CDF-2, 5: CDF-5) of a dataset group whose arrays are `arrays`
    (name, metadata), in the order they become variables."""
    dims: dict[str, int] = {}
    owners: dict[str, str] = {}
    specs: list[_Spec] = []
    left_out: list[tuple[str, str]] = []
    needs_cdf5 = False
    for name, meta in arrays:
        reason = _unusable(meta)
        if reason is None:
            reason = _dimension_conflict(meta, dims, owners)
        typing = None if reason is not None else _file_type(meta.dtype, version)
        if reason is None and typing is None:
            reason = f"its data type {meta.dtype.str} has no NetCDF type"
        if reason is not None:
            left_out.append((meta.path, reason))
            continue
        assert typing is not None
        nc_type, target, conversion, extra = typing
        needs_cdf5 |= conversion == "exact"
        names = tuple(str(n) for n in meta.dimension_names or ())  # a scalar may name none
        shape = meta.shape
        if nc_type == NC_CHAR and meta.dtype.itemsize > 1 or conversion == "utf8":
            width = target.itemsize
            string_dim = _string_dimension(width, dims)
            names, shape = (*names, string_dim), (*shape, width)
        for dim, length in zip(names, shape, strict=True):
            dims.setdefault(dim, length)
            owners.setdefault(dim, meta.path)
        attributes = _variable_attributes(meta, nc_type, conversion, version) + extra
        specs.append(_Spec(name, meta, nc_type, names, shape, target, conversion, attributes))
    # Small variables (coordinates, mostly) first, beside the header: readers read both in the
    # same large blocks at open, and no block of them reaches into a large variable's chunks.
    specs.sort(key=lambda spec: spec.nbytes > SMALL_VARIABLE)
    if version == 2:
        specs, too_large = _place_for_cdf2(specs)
        left_out += [(spec.meta.path, "CDF-2 holds one variable over 4 GiB, the last; it is in the CDF-5 file")
                     for spec in too_large]
        needs_cdf5 |= bool(too_large)
    used = {dim for spec in specs for dim in spec.dims}
    dims = {dim: length for dim, length in dims.items() if dim in used}
    layout = _layout(version, dims, _global_attributes(group, version), specs)
    return NetcdfPlan(layout, tuple(left_out), needs_cdf5)


def _unusable(meta: ArrayMeta) -> str | None:
    if meta.vlen:
        return f"variable-length {meta.vlen} elements have no NetCDF classic type"
    if meta.opaque_type:
        return f"its data type {meta.opaque_type} has no NetCDF type"
    if meta.dtype.fields is not None:
        return "structured elements have no NetCDF classic type"
    if meta.ndim and (not meta.dimension_names or not all(meta.dimension_names)):
        return "it has no dimension names"
    if any(length > MAX_DIMENSION for length in meta.shape):
        return f"a dimension longer than {MAX_DIMENSION}"
    if 0 in meta.shape:  # a dimension of length 0 is the record dimension in NetCDF classic
        return "a dimension of length 0"
    return None


def _dimension_conflict(meta: ArrayMeta, dims: dict[str, int], owners: dict[str, str]) -> str | None:
    for dim, length in zip(meta.dimension_names or (), meta.shape, strict=True):
        if dims.get(str(dim), length) != length:
            return f"dimension {dim} has length {length} here and {dims[str(dim)]} in /{owners[str(dim)]}"
    return None


def _string_dimension(width: int, dims: dict[str, int]) -> str:
    """xarray's name for a char dimension, `string<n>`, made unique if an array uses it otherwise."""
    name = f"string{width}"
    while dims.get(name, width) != width:
        name += "_"
    return name


def _file_type(dtype: np.dtype, version: int) -> tuple[int, np.dtype, str, list] | None:
    """(nc_type, the file's element dtype, conversion, extra attributes) of an array dtype, or None."""
    kind, size = dtype.kind, dtype.itemsize
    swap = "swap" if size > 1 and dtype != dtype.newbyteorder(">") else "copy"  # "=" may be little-endian
    big = dtype.newbyteorder(">")
    if kind == "b":
        return NC_BYTE, np.dtype("i1"), "copy", [_text_attribute("dtype", "bool")]
    if kind == "i" and size in _SIGNED:
        return _SIGNED[size], big, swap, []
    if kind == "u" and size in _UNSIGNED:
        if version == 5:
            return _UNSIGNED[size], big, swap, []
        return _SIGNED[size], big, swap, [_text_attribute("_Unsigned", "true")]
    if kind in "iu" and size == 8:
        if version == 5:
            return (NC_INT64 if kind == "i" else NC_UINT64), big, swap, []
        return NC_DOUBLE, np.dtype(">f8"), "exact", []
    if kind == "f" and size == 2:
        return NC_FLOAT, np.dtype(">f4"), "cast", []
    if kind == "f" and size in (4, 8):
        return (NC_FLOAT if size == 4 else NC_DOUBLE), big, swap, []
    if kind == "S":
        return NC_CHAR, np.dtype(f"S{size}"), "copy", []
    if kind == "U":
        return NC_CHAR, np.dtype(f"S{size // 4}"), "utf8", [_text_attribute("_Encoding", "utf-8")]
    return None


def _place_for_cdf2(specs: list[_Spec]) -> tuple[list[_Spec], list[_Spec]]:
    """The variables in file order, and those over CDF-2's vsize limit that it cannot hold.

    The one over the limit (if any) goes last, as CDF-2 requires; int64 variables served as
    double go just before it, away from the header and the other variables: a value no double
    holds fails the reads of their pages, and readers read the header in large blocks.
    """
    large = [spec for spec in specs if _padded(spec.nbytes) > CDF2_VSIZE_LIMIT]
    small = [spec for spec in specs if _padded(spec.nbytes) <= CDF2_VSIZE_LIMIT]
    checked = [spec for spec in small if spec.conversion == "exact"]
    plain = [spec for spec in small if spec.conversion != "exact"]
    return plain + checked + large[:1], large[1:]


# ---------------------------------------------------------------- attributes


def _variable_attributes(meta: ArrayMeta, nc_type: int, conversion: str,
                         version: int) -> list[tuple[str, int, bytes, int]]:
    attributes = []
    values = dict(meta.attributes)
    fill = _fill_value(meta)
    if fill is not None:
        values["_FillValue"] = fill
    for name, value in values.items():
        if name.startswith(_DROPPED_ATTRIBUTE_PREFIXES):
            continue
        if name != "_FillValue":  # other attributes keep their JSON type, as xarray writes them
            attributes.append(_attribute(name, value, version))
            continue
        # netCDF-C refuses a `_FillValue` of another type than its variable's: one of another
        # type, or of a char variable, is left out.
        typed = None if nc_type == NC_CHAR else _typed_values(value, meta.dtype, nc_type, conversion)
        if typed is not None:
            attributes.append((name, nc_type, typed.tobytes(), len(typed)))
    return attributes


def _fill_value(meta: ArrayMeta) -> Any:
    """`_FillValue` where xarray keeps it: the attribute (v3; floats as base64), else a v2 `fill_value`;
    else a NaN `fill_value`, which marks missing cells as zarrfs's other files state them (`conventions.geo.
    nodata`): without it GDAL's netCDF driver would take netCDF's default fill (9.97e36) for the nodata."""
    value = meta.attributes.get("_FillValue")
    if isinstance(value, str) and meta.dtype.kind == "f":
        text = value.strip().lower()
        if text in ("nan", "infinity", "-infinity", "inf", "-inf"):
            return float(text.replace("infinity", "inf"))
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            return None
        return float(np.frombuffer(raw, "<f8")[0]) if len(raw) == 8 else None
    if value is not None:
        return value
    if meta.zarr_format == "2" and not meta.fill_value_null and meta.dtype.kind in "biuf":
        return meta.fill_value.item()
    if meta.dtype.kind == "f" and not meta.fill_value_null and math.isnan(meta.fill_value.item()):
        return math.nan
    return None


def _typed_values(value: Any, source: np.dtype, nc_type: int, conversion: str) -> np.ndarray | None:
    """`_FillValue` in the variable's file type (an unsigned value as its signed bit pattern), or None."""
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    numbers = np.array(values, dtype=np.float64 if any(isinstance(v, float) for v in values) else object)
    stored = source.newbyteorder("=") if source.kind != "b" else np.dtype("i1")
    try:
        with np.errstate(invalid="raise", over="raise"):
            as_source = numbers.astype(stored)
    except (OverflowError, FloatingPointError, ValueError):
        return None
    if not (as_source.astype(np.float64) == numbers.astype(np.float64)).all() and source.kind != "f":
        return None  # 1.5 as an integer fill
    file_type = np.dtype(_NC_DTYPES[nc_type])
    if conversion in ("exact", "cast"):
        return as_source.astype(file_type)
    return as_source.view(file_type.newbyteorder("=")).astype(file_type) if source.kind == "u" else \
        as_source.astype(file_type)


def _global_attributes(group: GroupMeta, version: int) -> list[tuple[str, int, bytes, int]]:
    return [_attribute(name, value, version) for name, value in group.attributes.items()
            if not name.startswith(_DROPPED_ATTRIBUTE_PREFIXES)]


def _attribute(name: str, value: Any, version: int) -> tuple[str, int, bytes, int]:
    """A JSON attribute value as NetCDF: numbers as int or double, text as char, anything else its JSON text."""
    values = value if isinstance(value, list) and value else [value]
    if all(isinstance(v, bool) for v in values):
        array = np.array(values, ">i1")
        return name, NC_BYTE, array.tobytes(), len(array)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        if all(-2**31 <= v < 2**31 for v in values):
            array = np.array(values, ">i4")
            return name, NC_INT, array.tobytes(), len(array)
        if version == 5 and all(-2**63 <= v < 2**63 for v in values):
            array = np.array(values, ">i8")
            return name, NC_INT64, array.tobytes(), len(array)
        if all(abs(v) <= 2**53 for v in values):
            array = np.array(values, ">f8")
            return name, NC_DOUBLE, array.tobytes(), len(array)
    elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        array = np.array(values, ">f8")
        return name, NC_DOUBLE, array.tobytes(), len(array)
    if isinstance(value, str):
        return _text_attribute(name, value)
    return _text_attribute(name, json.dumps(value, allow_nan=True))


def _text_attribute(name: str, text: str) -> tuple[str, int, bytes, int]:
    data = unicodedata.normalize("NFC", text).encode("utf-8")
    return name, NC_CHAR, data, len(data)


# -------------------------------------------------------------------- header


def _layout(version: int, dims: dict[str, int], global_attributes: list, specs: list[_Spec]) -> NetcdfLayout:
    # The header's length does not depend on the begins (fixed-width fields): encode once with
    # zeros to measure it, then with the begins.
    begins = [0] * len(specs)
    length = len(_header(version, dims, global_attributes, specs, begins))
    position = _aligned(length)
    for i, spec in enumerate(specs):
        if spec.nbytes > SMALL_VARIABLE:
            position = _aligned(position + READAHEAD_GAP, PAGE)
        elif spec.conversion == "exact":
            position = _aligned(position, PAGE)
        begins[i] = position
        position = _aligned(position + _padded(spec.nbytes), PAGE if spec.conversion == "exact" else ALIGN)
    size = begins[-1] + _padded(specs[-1].nbytes) if specs else length
    header = _header(version, dims, global_attributes, specs, begins)
    variables = tuple(Variable(spec.name, spec.meta.path, begin, spec.nbytes, spec.meta.shape, spec.meta.dtype,
                               spec.target,
                               spec.conversion) for spec, begin in zip(specs, begins, strict=True))
    return NetcdfLayout(header, variables, size)


def _header(version: int, dims: dict[str, int], global_attributes: list, specs: list[_Spec],
            begins: list[int]) -> bytes:
    count = ">q" if version == 5 else ">i"  # counts, lengths, dimids, vsize (CDF-5: 8 bytes)
    parts = [b"CDF" + bytes([version]), np.array(0, count).tobytes()]  # numrecs: no record dimension
    if dims:
        parts.append(_list_head(_TAG_DIMENSION, len(dims), count))
        for name, length in dims.items():
            parts += [_name(name, count), np.array(length, count).tobytes()]
    else:
        parts.append(b"\0" * (4 + np.dtype(count).itemsize))
    parts.append(_attributes(global_attributes, count))
    dim_ids = {name: i for i, name in enumerate(dims)}
    if specs:
        parts.append(_list_head(_TAG_VARIABLE, len(specs), count))
    else:
        parts.append(b"\0" * (4 + np.dtype(count).itemsize))
    for spec, begin in zip(specs, begins, strict=True):
        vsize = _padded(spec.nbytes)
        if version == 2 and vsize > CDF2_VSIZE_LIMIT:
            vsize = 2**32 - 1  # the last variable only: readers recompute it from the shape
        parts += [_name(spec.name, count), np.array(len(spec.dims), count).tobytes(),
                  np.array([dim_ids[d] for d in spec.dims], count).tobytes(),
                  _attributes(spec.attributes, count), np.array(spec.nc_type, ">i").tobytes(),
                  np.array(vsize, ">Q" if version == 5 else ">I").tobytes(),  # unsigned: CDF-2's 2^32 - 1
                  np.array(begin, ">q").tobytes()]
    return b"".join(parts)


def _list_head(tag: int, length: int, count: str) -> bytes:
    return np.array(tag, ">i").tobytes() + np.array(length, count).tobytes()


def _attributes(attributes: list[tuple[str, int, bytes, int]], count: str) -> bytes:
    if not attributes:
        return b"\0" * (4 + np.dtype(count).itemsize)
    parts = [_list_head(_TAG_ATTRIBUTE, len(attributes), count)]
    for name, nc_type, data, n in attributes:
        parts += [_name(name, count), np.array(nc_type, ">i").tobytes(), np.array(n, count).tobytes(),
                  data, b"\0" * (_padded(len(data)) - len(data))]
    return b"".join(parts)


def _name(name: str, count: str) -> bytes:
    data = unicodedata.normalize("NFC", name).encode("utf-8")
    return np.array(len(data), count).tobytes() + data + b"\0" * (_padded(len(data)) - len(data))


def _padded(n: int) -> int:
    return -(-n // 4) * 4


def _aligned(n: int, alignment: int = ALIGN) -> int:
    return -(-n // alignment) * alignment
