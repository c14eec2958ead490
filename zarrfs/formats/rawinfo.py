"""What every header-only sidecar of `N.raw` says the same way: sizes, byte order, spacing, origin.

The `.raw` file is the array's elements in C order, in the array's own byte
order, from byte 0. Sidecar formats list sizes fastest-varying first, so
they get the shape reversed; spacing and origin come from the space axes of
`Semantics` (1 and 0 for any other axis, which is what the readers assume
when the fields are absent).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TypeVar

import numpy as np

from ..conventions.semantics import Axis, Semantics
from ..model.meta import ArrayMeta

T = TypeVar("T")  # how a sidecar format names an element type (a word, or ENVI's number)

# MetaIO and teem parse sizes as C ints.
MAX_C_INT = 2**31 - 1


def describable(meta: ArrayMeta) -> bool:
    """A sidecar needs at least one axis, no empty one, and sizes a C int holds."""
    return meta.ndim >= 1 and all(0 < size <= MAX_C_INT for size in meta.shape)


def type_name(meta: ArrayMeta, names: Mapping[tuple[str, int], T], raw_name: str = "") -> T | None:
    """The sidecar's name for the array's element type (by numpy kind and size), or None when the
    format has none, the array cannot be described, or the data file's name would break the header."""
    dtype: np.dtype = meta.dtype
    name = names.get((dtype.kind, dtype.itemsize))
    if name is None or dtype.fields is not None or not describable(meta) or "\n" in raw_name:
        return None
    return name


def big_endian(dtype: np.dtype) -> bool:
    order = dtype.byteorder
    return order == ">" or (order == "=" and sys.byteorder == "big")


def space_calibration(semantics: Semantics, ndim: int) -> tuple[list[float], list[float]] | None:
    """(spacing, origin) per dimension in C order, or None when no space axis is calibrated."""
    axes = semantics.axes
    if axes is None or len(axes) != ndim:
        return None
    if not any(a.kind == "space" and (a.scale is not None or a.origin is not None) for a in axes):
        return None
    spacing = [a.scale if a.kind == "space" and a.scale is not None else 1.0 for a in axes]
    origin = [a.origin if a.kind == "space" and a.origin is not None else 0.0 for a in axes]
    return spacing, origin


# RFC-4's "<from>-to-<to>": the LPS world axis (ITK's and NRRD's left-posterior-superior) the values run along,
# and +1 when they increase towards L, P or S.
_TOWARDS_LPS = {"left": (0, 1), "right": (0, -1), "posterior": (1, 1), "anterior": (1, -1),
                "superior": (2, 1), "inferior": (2, -1)}


def anatomical_frame(axes: Sequence[Axis]) -> list[tuple[int, int]] | None:
    """Per axis in C order, (LPS world axis, +1 or -1), when `axes` are 3 calibrated space axes whose RFC-4
    orientations name left/right, anterior/posterior and inferior/superior once each; else None."""
    if len(axes) != 3 or not all(a.kind == "space" and a.scale is not None for a in axes):
        return None
    frame = [_TOWARDS_LPS.get((a.orientation or "").rpartition("-to-")[2]) for a in axes]
    if any(f is None for f in frame) or len({f[0] for f in frame if f is not None}) != 3:
        return None
    return frame  # type: ignore[return-value]


def number(value: float) -> str:
    """Shortest text that reads back as the same float ('0.5', '1e-06')."""
    return repr(float(value))
