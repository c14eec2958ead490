"""Axes named by `dimension_names` (v3) or `_ARRAY_DIMENSIONS` (xarray, v2), kinds guessed from the names.

Only names are known here, so axes get a kind and no scale: the TIFF and
sidecar builders then read every array's axes from `Semantics` alone.
"""

from __future__ import annotations

from .semantics import Axis

# Lower-cased dimension name -> kind. Names outside this table are "other":
# a wrong "space" would give an array a calibration it does not have.
_KIND_BY_NAME = {
    "t": "time", "time": "time",
    "c": "channel", "ch": "channel", "channel": "channel", "channels": "channel",
    "z": "space", "y": "space", "x": "space",
    "lat": "space", "lon": "space", "latitude": "space", "longitude": "space",
}


def guess_kind(name: str) -> str:
    return _KIND_BY_NAME.get(name.strip().lower(), "other")


def named_axes(names: tuple[str | None, ...] | None) -> tuple[Axis, ...] | None:
    """One `Axis` per dimension name; None when the array has no names (or only nulls)."""
    if not names or all(name is None for name in names):
        return None
    return tuple(Axis(name or "", guess_kind(name or "")) for name in names)
