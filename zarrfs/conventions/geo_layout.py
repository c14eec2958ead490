"""A zarr-conventions `multiscales` layout (GeoZarr's resolution levels), read from a group's attributes alone.

The layout group's attributes hold `"multiscales": {"layout": [...]}`, an
object (OME-Zarr's `multiscales` is a list: `is_layout_object` tells them
apart), declared in `zarr_conventions`. Each layout entry names an `asset`
(a path relative to the group; `"."` is the group itself), optionally the
asset it was `derived_from` with a relative `transform` (`scale`,
`translation`), and, with the spatial convention, its `spatial:shape`
([height, width]) and `spatial:transform` (rasterio's order, read as GDAL's
corner geotransform; a node-registered layout's transforms give cell
centres). An asset that is a group holds the level's arrays by the names of
the full-resolution ones; an asset that is an array is the level itself
(GDAL's reading). What cannot be read of an entry is in `problems`; the
entry is left out.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from .geo import GeoTransform, corner_transform, registration
from ..errors import ConventionError
from .zarr_conventions import MULTISCALES, declared


@dataclass(frozen=True)
class LayoutLevel:
    asset: str  # relative to the layout group, normalised; "" for the group itself
    shape: tuple[int, int] | None  # `spatial:shape`
    transform: GeoTransform | None  # `spatial:transform` as GDAL's geotransform of the outer corner
    # The relative `transform.translation` from the level it was derived from moves it (a cropped level).
    translated: bool = False


@dataclass(frozen=True)
class GeoLayout:
    group_path: str
    levels: tuple[LayoutLevel, ...]
    problems: tuple[str, ...] = ()
    node: bool = False  # `spatial:registration: node`: the stated transforms gave the cells' centres

    def asset_path(self, level: LayoutLevel) -> str:
        """The hierarchy path of a level's asset."""
        return posixpath.join(self.group_path, level.asset).strip("/") if level.asset else self.group_path


def is_layout_object(value: Any) -> TypeGuard[dict[str, Any]]:
    """A `multiscales` value that is the zarr-conventions object, never OME-Zarr's list of images."""
    return isinstance(value, dict)


def geo_layout(attributes: Mapping[str, Any], group_path: str) -> GeoLayout | None:
    """The group's layout; None when its `multiscales` is no layout object (absent, or OME's list)."""
    value = attributes.get("multiscales")
    if not is_layout_object(value):
        return None
    if MULTISCALES not in declared(attributes):
        return GeoLayout(group_path, (), ("the 'multiscales' object is not declared in zarr_conventions (by the "
                                          "multiscales convention's uuid or name): its layout is not read",))
    entries = value.get("layout")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return GeoLayout(group_path, (), ("multiscales.layout is not a list of objects",))
    try:
        node = registration(attributes, "layout group") == "node"
    except ConventionError as exc:
        return GeoLayout(group_path, (), (str(exc),))
    problems: list[str] = []
    levels: list[LayoutLevel] = []
    for index, entry in enumerate(entries):
        try:
            level = _level(entry, node)
        except ConventionError as exc:
            problems.append(f"multiscales.layout[{index}] ({exc}) is left out")
            continue
        if any(level.asset == other.asset for other in levels):
            problems.append(f"multiscales.layout[{index}] repeats the asset {entry.get('asset')!r}")
            continue
        levels.append(level)
    return GeoLayout(group_path, tuple(levels), tuple(problems), node)


def _level(entry: dict[str, Any], node: bool) -> LayoutLevel:
    asset = entry.get("asset")
    path = posixpath.normpath(asset) if isinstance(asset, str) and asset and not asset.startswith("/") else None
    if path is None or path == ".." or path.startswith("../"):
        raise ConventionError(f"asset {asset!r} is not a path below the layout group")
    shape = entry.get("spatial:shape")
    if shape is not None and not (isinstance(shape, list) and len(shape) == 2 and all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape)):
        raise ConventionError(f"spatial:shape {shape!r} is not [height, width]")
    transform = entry.get("spatial:transform")
    relative = entry.get("transform")
    translation = relative.get("translation") if isinstance(relative, dict) else None
    translated = isinstance(translation, list) and any(v != 0 for v in translation)
    return LayoutLevel("" if path == "." else path, None if shape is None else (shape[0], shape[1]),
                       None if transform is None else corner_transform(transform, node, "spatial:transform"),
                       translated)
