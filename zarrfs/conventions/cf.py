"""CF packing and units: what an array's stored numbers stand for.

CF (§8.1 packed data): value = stored * `scale_factor` + `add_offset`;
`units` and `long_name` describe the unpacked values. xarray writes these
attributes as they are, in v2 and v3 stores alike; GDAL's Zarr driver reads
them as a band's scale, offset and unit type (and shows `long_name` as
metadata). Only numeric arrays have such a meaning.

Each attribute stands alone: a broken one (a scale that is no finite number,
units that are no single line of text) is left out and reported, the others
are kept.
"""

from __future__ import annotations

import math
from typing import Any

from ..model.meta import ArrayMeta
from .semantics import Quantity

_NUMBERS = ("scale_factor", "add_offset")
_TEXTS = ("units", "long_name")


def quantity(meta: ArrayMeta) -> tuple[Quantity | None, list[str]]:
    """The array's CF quantity (None when it states none), and what was ignored as broken."""
    if meta.dtype.kind not in "iuf":
        return None, []
    attrs = meta.attributes
    found: dict[str, Any] = {}
    ignored: list[str] = []
    for key in _NUMBERS:
        if key in attrs:
            value = _number(attrs[key])
            if value is None:
                ignored.append(f"{key} {attrs[key]!r:.60} is not a finite number")
            else:
                found[key] = value
    for key in _TEXTS:
        if key in attrs:
            text = attrs[key]
            if key == "long_name" and isinstance(text, list):
                continue  # one name per band (rioxarray): `conventions.bands`
            if isinstance(text, str) and text.strip() and text.isprintable():
                found[key] = text.strip()
            else:
                ignored.append(f"{key} {text!r:.60} is not one line of text")
    return (Quantity(**found) if found else None), ignored


def _number(value: Any) -> float | None:
    if isinstance(value, list) and len(value) == 1:  # netCDF-style one-element attribute
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # a JSON integer past float's range
        return None
    return number if math.isfinite(number) else None
