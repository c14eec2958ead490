"""`cast_value` (zarr-extensions, array->array): store values as another numeric type.

Decoding casts each stored value back to the array's type by the spec's
ordered rules: an entry of `scalar_map.decode` first; else the exact value
when the array's type holds it; else `rounding`, then `out_of_range`
(`clamp` or `wrap`). A value none of these covers (out of range with no
rule, NaN or infinity into an integer type with no map entry) makes the chunk
an error (EIO), never a made-up number. NaN and signed zero survive
float-to-float casts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..elements.dtypes import parse_v3_data_type
from ..errors import ChunkError, MetadataError, UnsupportedError
from .registry import check_keys, register
from .spec import ChunkSpec, json_scalar

ROUNDINGS = ("nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away")
OUT_OF_RANGE = ("clamp", "wrap")
_NUMERIC = "iuf"  # the spec defines the codec for integers and floats only

ScalarMap = tuple[tuple[Any, Any], ...]  # (input, output) pairs, first occurrence of an input only


@register("cast_value")
@dataclass(frozen=True)
class CastValueCodec:
    kind: ClassVar[str] = "array_array"
    data_type: np.dtype  # the stored type, native byte order
    rounding: str
    out_of_range: str | None
    encode_map: ScalarMap  # array value -> stored value
    decode_map: ScalarMap  # stored value -> array value
    config: dict[str, Any]  # as written, for describe()

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], spec: ChunkSpec, where: str) -> CastValueCodec:
        check_keys(name, config, {"data_type", "rounding", "out_of_range", "scalar_map"}, where)
        if "data_type" not in config:
            raise MetadataError(f"{where}: bad configuration of codec 'cast_value': data_type is required")
        stored = parse_v3_data_type(config["data_type"], f"{where}: cast_value data_type").newbyteorder("=")
        source = spec.dtype.newbyteorder("=")
        for role, dtype in (("array", source), ("stored", stored)):
            if dtype.kind == "V":  # a registered type numpy has no type for (int4, bfloat16, ...)
                raise UnsupportedError(f"{where}: cast_value with the {role} type {dtype} is not supported "
                                       f"(numpy has no type to compute it in)")
            if dtype.kind not in _NUMERIC:
                raise MetadataError(f"{where}: bad configuration of codec 'cast_value': the {role} type {dtype} "
                                    f"is neither an integer nor a float type")
        rounding = config.get("rounding", "nearest-even")
        if rounding not in ROUNDINGS:
            raise MetadataError(f"{where}: bad configuration of codec 'cast_value': rounding {rounding!r} is not "
                                f"one of {list(ROUNDINGS)}")
        out_of_range = config.get("out_of_range")
        if out_of_range not in (None, *OUT_OF_RANGE):
            raise MetadataError(f"{where}: bad configuration of codec 'cast_value': out_of_range {out_of_range!r} "
                                f"is not one of {list(OUT_OF_RANGE)}")
        if out_of_range == "wrap" and stored.kind not in "iu":
            raise MetadataError(f"{where}: bad configuration of codec 'cast_value': out_of_range 'wrap' needs an "
                                f"integer data_type, not {stored}")
        encode_map, decode_map = _scalar_maps(config.get("scalar_map"), source, stored, where)
        return cls(stored, rounding, out_of_range, encode_map, decode_map, dict(config))

    def encoded_representation(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype]:
        return shape, self.data_type

    def encode_fill(self, fill: np.ndarray) -> np.ndarray:
        """The fill value cast to the stored type by the encode rules; ChunkError if none applies."""
        return self._cast(fill.astype(fill.dtype.newbyteorder("=")), self.data_type, self.encode_map)

    def decode(self, array: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self._cast(array.astype(self.data_type, copy=False), dtype.newbyteorder("="), self.decode_map)

    def describe(self) -> dict[str, Any]:
        return {"name": "cast_value", "configuration": self.config}

    def _cast(self, values: np.ndarray, out: np.dtype, mapping: ScalarMap) -> np.ndarray:
        if not mapping:
            return convert(values, out, self.rounding, self.out_of_range)
        result = np.empty(values.shape, out)
        todo = np.ones(values.shape, bool)
        for key, value in mapping:
            hit = todo & (np.isnan(values) if isinstance(key, float) and math.isnan(key) else values == key)
            result[hit] = value
            todo &= ~hit
        if todo.any():
            result[todo] = convert(values[todo], out, self.rounding, self.out_of_range)
        return result


def _scalar_maps(value: Any, source: np.dtype, stored: np.dtype, where: str) -> tuple[ScalarMap, ScalarMap]:
    """(encode, decode) maps; each keeps the first entry of a repeated input, as the spec says."""
    if value is None:
        return (), ()
    if not isinstance(value, dict):
        raise MetadataError(f"{where}: bad configuration of codec 'cast_value': scalar_map must be an object")
    check_keys("cast_value", value, {"encode", "decode"}, f"{where}: scalar_map")
    maps = []
    for direction, (key_type, value_type) in (("encode", (source, stored)), ("decode", (stored, source))):
        entries = value.get(direction, [])
        if not isinstance(entries, list) or not all(isinstance(e, list) and len(e) == 2 for e in entries):
            raise MetadataError(f"{where}: bad configuration of codec 'cast_value': scalar_map.{direction} must be "
                                f"a list of [input, output] pairs")
        pairs: list[tuple[Any, Any]] = []
        for key, mapped in entries:
            key = json_scalar(key, key_type, f"cast_value scalar_map.{direction} input", where)
            mapped = json_scalar(mapped, value_type, f"cast_value scalar_map.{direction} output", where)
            if not any(_same(key, seen) for seen, _ in pairs):
                pairs.append((key, mapped))
        maps.append(tuple(pairs))
    return maps[0], maps[1]


def _same(a: Any, b: Any) -> bool:
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return nan or a == b


# ------------------------------------------------------------------ casting


def convert(values: np.ndarray, out: np.dtype, rounding: str, out_of_range: str | None) -> np.ndarray:
    """`values` (native) as `out` (native) by the spec's rules 2 and 3; ChunkError where none applies."""
    if values.dtype.kind in "iu" and out.kind in "iu":
        return _int_to_int(values, out, out_of_range)
    if out.kind in "iu":
        return _float_to_int(values, out, rounding, out_of_range)
    return _to_float(values, out, rounding, out_of_range)


def _out_of_range(out: np.dtype) -> ChunkError:
    return ChunkError(f"cast_value: a stored value is outside the range of {out} and the codec gives no "
                      f"out_of_range rule")


def _int_to_int(values: np.ndarray, out: np.dtype, out_of_range: str | None) -> np.ndarray:
    info, source = np.iinfo(out), np.iinfo(values.dtype)
    if not values.size or (int(values.min()) >= info.min and int(values.max()) <= info.max):
        return values.astype(out)
    if out_of_range == "wrap":  # numpy's integer cast keeps the low bits: two's complement modulo 2**N
        return values.astype(out)
    if out_of_range == "clamp":
        return np.clip(values, max(info.min, source.min), min(info.max, source.max)).astype(out)
    raise _out_of_range(out)


def _round(values: np.ndarray, rounding: str) -> np.ndarray:
    """Floats rounded to integral values by the named rule (still floats)."""
    if rounding == "nearest-even":
        return np.rint(values)
    if rounding == "towards-zero":
        return np.trunc(values)
    if rounding == "towards-positive":
        return np.ceil(values)
    if rounding == "towards-negative":
        return np.floor(values)
    whole = np.trunc(values)  # nearest-away: ties go away from zero; x - trunc(x) is exact
    return whole + np.sign(values) * (np.abs(values - whole) >= 0.5)


def _float_to_int(values: np.ndarray, out: np.dtype, rounding: str, out_of_range: str | None) -> np.ndarray:
    if not np.isfinite(values).all():
        raise ChunkError(f"cast_value: a stored NaN or infinity has no {out} value and no scalar_map entry")
    rounded = _round(values, rounding).astype(np.float64)  # exact: every float type fits in float64
    info = np.iinfo(out)
    bits = out.itemsize * 8
    # Powers of two are exact in float64; comparing against iinfo.max (2**63 - 1) would not be.
    low, high_excl = (-(2.0 ** (bits - 1)), 2.0 ** (bits - 1)) if out.kind == "i" else (0.0, 2.0**bits)
    below, above = rounded < low, rounded >= high_excl
    outside = below | above
    if not outside.any():
        return rounded.astype(out)
    if out_of_range is None:
        raise _out_of_range(out)
    result = np.where(outside, 0, rounded).astype(out)
    if out_of_range == "clamp":
        result[below], result[above] = info.min, info.max
    else:  # wrap, in Python integers: the values may exceed every numpy integer type
        modulus = 1 << bits
        wrapped = [int(v) % modulus for v in rounded[outside]]
        result[outside] = [w - modulus if out.kind == "i" and w > info.max else w for w in wrapped]
    return result


def _to_float(values: np.ndarray, out: np.dtype, rounding: str, out_of_range: str | None) -> np.ndarray:
    source = values.dtype
    with np.errstate(over="ignore", invalid="ignore"):
        result = values.astype(out)  # IEEE nearest-even; finite values too large become infinities
    if _always_exact(source, out):
        return result
    # The values compared exactly: ints as long doubles (64-bit mantissa on x86-64), floats as themselves.
    wide = np.longdouble if source.kind in "iu" else source
    exact_values = values.astype(wide)
    finite = np.isfinite(result)
    if rounding != "nearest-even":
        result = _directed(exact_values, result, out, rounding, wide, finite)
        finite = np.isfinite(result)
    overflow = ~finite & np.isfinite(exact_values)
    if overflow.any() and out_of_range != "clamp":  # (wrap is for integer types only)
        raise _out_of_range(out)
    return result  # clamp: a float type clamps to ±infinity, which the overflow already is


def _always_exact(source: np.dtype, out: np.dtype) -> bool:
    """Whether every value of `source` is a value of `out` (a widening cast)."""
    if source.kind == "f":
        return source.itemsize <= out.itemsize
    mantissa = {2: 11, 4: 24, 8: 53}[out.itemsize]
    return source.itemsize * 8 - (source.kind == "i") <= mantissa


def _directed(exact: np.ndarray, result: np.ndarray, out: np.dtype, rounding: str, wide: npt.DTypeLike,
              finite: np.ndarray) -> np.ndarray:
    """Correct nearest-even results to another rounding rule, one step of `out` at most."""
    result = result.copy()
    back: np.ndarray = result.astype(wide)
    top = np.finfo(out).max
    if rounding == "nearest-away":
        toward = np.where(exact > back, np.inf, -np.inf).astype(out)
        other = np.nextafter(result, toward)
        tie = finite & (np.abs(exact - back) == np.abs(other.astype(wide) - exact)) & (back != exact)
        away = tie & (np.abs(other.astype(wide)) > np.abs(back))
        result[away] = other[away]
        return result
    # Overflowed to infinity under nearest-even, but below the next power of two: a directed
    # rule toward zero lands on the largest finite value instead.
    limit = np.ldexp(np.longdouble(1), np.finfo(out).maxexp).astype(wide)
    big = ~finite & np.isfinite(exact) & (np.abs(exact) < limit)
    down = {"towards-zero": np.ones_like(big), "towards-negative": exact > 0, "towards-positive": exact < 0}[rounding]
    result[big & down] = np.copysign(top, exact[big & down]).astype(out)
    if rounding == "towards-zero":
        fix = finite & (np.abs(back) > np.abs(exact))
        target = np.zeros((), out)
    elif rounding == "towards-positive":
        fix = finite & (back < exact)
        target = np.array(np.inf, out)
    else:
        fix = finite & (back > exact)
        target = np.array(-np.inf, out)
    result[fix] = np.nextafter(result[fix], target)
    return result
