"""OME-Zarr 0.6 coordinate transformations (RFC-5): the ones an axis-aligned calibration can say, and the rest named.

A file can say, per axis, a step and the coordinate of index 0: the
transformation x = scale * i + translation. `identity`, `scale`,
`translation`, a `sequence` of them (applied in list order) and an `affine`
whose matrix is diagonal compose to exactly that, and are applied. Every
other kind (`affine` with rotation or shear, `rotation`, `mapAxis`,
`byDimension`, `bijection`, `inverseOf`, `displacements`, `coordinates`) and
parameters stored in an array (`path`) cannot be said by one step and origin
per axis: `NotAxisAligned` names what and why, for the caller to report
(`zarrfs tree`, `N.json`).

`input` and `output` are strings in the spec's text and `{"name": ...}` /
`{"path": ...}` objects in its examples and in ngff-zarr's output: both are
read (`endpoint_name`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConventionError

# What composes to a step and origin per axis (an affine only when diagonal).
AXIS_ALIGNED = ("identity", "scale", "translation", "sequence", "affine")
# Sequences within sequences deeper than this are refused (hostile metadata must not exhaust the stack).
MAX_NESTING = 8
# Kinds the spec defines that are not axis-aligned in general: named when met, never applied.
KNOWN_OTHERS = ("rotation", "mapAxis", "projectAxis", "byDimension", "bijection", "inverseOf", "displacements",
                "coordinates")


class NotAxisAligned(Exception):
    """A transformation zarrfs cannot apply as a step and origin per axis; the message says which and why."""


@dataclass(frozen=True)
class AxisAligned:
    """x = scale * i + translation, per dimension."""

    scale: tuple[float, ...]
    translation: tuple[float, ...]

    def then(self, other: AxisAligned) -> AxisAligned:
        """This transformation followed by `other`."""
        return AxisAligned(tuple(b * a for a, b in zip(self.scale, other.scale, strict=True)),
                           tuple(s * t + u for t, s, u in zip(self.translation, other.scale, other.translation,
                                                             strict=True)))


def identity(ndim: int) -> AxisAligned:
    return AxisAligned((1.0,) * ndim, (0.0,) * ndim)


def endpoint_name(value: Any) -> str | None:
    """The coordinate system an `input`/`output` names: a string, or the `name` of an object; None if absent."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return value["name"]
    return None


def endpoint_path(value: Any) -> str | None:
    """The Zarr path an `input`/`output` object names (`{"path": "tile_0"}`), or a plain string; None if absent."""
    if isinstance(value, dict) and isinstance(value.get("path"), str):
        return value["path"]
    return value if isinstance(value, str) else None


def describe(transform: Any) -> str:
    """'affine intrinsic -> physical': a transformation's kind and the systems it joins, for a report."""
    if not isinstance(transform, dict):
        return repr(transform)
    kind = transform.get("type", "?")
    source = endpoint_name(transform.get("input")) or endpoint_path(transform.get("input"))
    target = endpoint_name(transform.get("output")) or endpoint_path(transform.get("output"))
    joined = f" {source or '?'} -> {target or '?'}" if source or target else ""
    name = transform.get("name")
    return f"{kind}{joined}" + (f" ({name!r})" if isinstance(name, str) and name else "")


def axis_aligned(transform: Any, ndim: int, depth: int = 0) -> AxisAligned:
    """The step and origin per axis a transformation (or a list of them, applied in order) makes.

    Raises NotAxisAligned for what cannot be said that way, ConventionError
    for a transformation that is broken (wrong length, not numbers, nested
    past MAX_NESTING).
    """
    if depth > MAX_NESTING:
        raise ConventionError(f"coordinate transformations nested more than {MAX_NESTING} deep")
    if isinstance(transform, list):
        out = identity(ndim)
        for item in transform:
            out = out.then(axis_aligned(item, ndim, depth + 1))
        return out
    if not isinstance(transform, dict):
        raise ConventionError(f"a coordinate transformation must be an object, got {transform!r}")
    kind = transform.get("type")
    if kind not in AXIS_ALIGNED:
        why = "is not axis-aligned" if kind in KNOWN_OTHERS else "is not an OME-Zarr 0.6 transformation"
        raise NotAxisAligned(f"{describe(transform)}: {kind!r} {why}")
    if "path" in transform and kind != "sequence":
        raise NotAxisAligned(f"{describe(transform)}: parameters stored in the array {transform['path']!r} "
                             "are not read")
    if kind == "identity":
        return identity(ndim)
    if kind == "sequence":
        steps = transform.get("transformations")
        if not isinstance(steps, list):
            raise ConventionError(f"{describe(transform)}: 'transformations' must be a list")
        return axis_aligned(steps, ndim, depth + 1)
    if kind == "scale":
        scale = numbers(transform.get("scale"), ndim, "scale")
        return AxisAligned(tuple(scale), (0.0,) * ndim)
    if kind == "translation":
        return AxisAligned((1.0,) * ndim, tuple(numbers(transform.get("translation"), ndim, "translation")))
    return _diagonal_affine(transform, ndim)


def _diagonal_affine(transform: dict[str, Any], ndim: int) -> AxisAligned:
    """An affine matrix (ndim rows, or ndim + 1 with the last [0 ... 0 1]; ndim + 1 columns) with no rotation
    or shear: its diagonal is the scale, its last column the translation."""
    matrix = transform.get("affine")
    if not isinstance(matrix, list) or len(matrix) not in (ndim, ndim + 1):
        raise ConventionError(f"{describe(transform)}: 'affine' must be {ndim} or {ndim + 1} rows")
    rows = [numbers(row, ndim + 1, "affine row") for row in matrix]
    if len(rows) == ndim + 1 and rows[ndim] != [0.0] * ndim + [1.0]:
        raise NotAxisAligned(f"{describe(transform)}: its last row {rows[ndim]} is not [0 ... 0 1]")
    if any(rows[i][j] != 0.0 for i in range(ndim) for j in range(ndim) if i != j):
        raise NotAxisAligned(f"{describe(transform)}: it rotates or shears (a non-zero entry off the diagonal)")
    return AxisAligned(tuple(rows[i][i] for i in range(ndim)), tuple(rows[i][ndim] for i in range(ndim)))


def numbers(value: Any, count: int, where: str) -> list[float]:
    """`value` as `count` finite floats; ConventionError otherwise."""
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                              for v in value):
        raise ConventionError(f"{where} must be a list of numbers (a 'path' to a file is not supported), "
                              f"got {value!r}")
    if len(value) != count:
        raise ConventionError(f"{where} has {len(value)} values for a {count}-D array")
    if not all(math.isfinite(v) for v in value):
        raise ConventionError(f"{where} {value} is not finite")
    return [float(v) for v in value]
