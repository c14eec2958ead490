"""The coarser levels of a GeoZarr multiscales layout that can be the overviews of a map array's GeoTIFF.

A map array (2-D or more, georeferenced) is a level of the layout of its
parent or grandparent group (GDAL looks in the same two places) when one of
the layout's assets resolves to it (`geo_layout`). Every other level whose
array of the same name is smaller can be an overview, with three checks:
- its array has the map's leading dimensions (a TIFF's overviews have its
  bands) and holds the same numbers: the map's dtype, or another real type
  (eopf-geozarr writes float64 means of a uint16 band) in the same byte
  order (one TIFF file has one) under the same CF packing (stored numbers
  of one meaning: a packed uint16 band's float levels of unpacked values
  would be read as stored numbers);
- its `spatial:shape`, when stated, is its array's;
- GDAL places an overview by the size ratio alone (the full resolution's
  geotransform, pixel size scaled by width and height ratios): where its
  layout entry states a `spatial:transform` (else its own), the overview's
  corners must lie within `MAX_MISPLACEMENT` of one of its pixels of where
  that rule puts them; a mismatch above `AGREEMENT` is still reported.
  A level with neither, whose relative `transform.translation` moves it, is
  no overview (where it lies is not stated in map coordinates).
Whatever fails is said in `notes` (shown by `zarrfs tree` and `N.json`);
nothing here reads a chunk.
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ZarrfsError
from ..model.meta import ArrayMeta, GroupMeta
from .cf import quantity
from .geo import GeoTransform, corner_transform, geozarr_crs, registration
from .geo_layout import GeoLayout, LayoutLevel, geo_layout
from .image import groups_above
from ..errors import ConventionError
from .semantics import GeoReference

if TYPE_CHECKING:
    from ..hierarchy import Hierarchy

# GDAL takes a layout from the array's parent or grandparent group.
MAX_LAYOUT_DEPTH = 2
# Overview corners further than this (in the overview's pixels) from where GDAL's size-ratio rule puts them:
# the level is no overview. Sizes that do not divide evenly (1001 -> 500) misplace the far edge by up to half
# a coarse pixel, as GDAL's own overviews of such rasters are.
MAX_MISPLACEMENT = 1.0
# Below this the stated placement is GDAL's (float rounding); above it the difference is reported.
AGREEMENT = 1e-3


@dataclass(frozen=True)
class GeoPyramid:
    layout_path: str  # the group holding the layout
    level: str  # the array's asset ("." for the group itself)
    overviews: tuple[str, ...]  # array paths, largest first
    notes: tuple[str, ...]  # what of the layout was not used, and why


def geo_pyramid(hierarchy: Hierarchy, meta: ArrayMeta, geo: GeoReference | None) -> GeoPyramid | None:
    """The layout levels that can be overviews of the map `meta` (georeferenced by `geo`); None when the
    array is no map or in no layout."""
    if geo is None or meta.ndim < 2:
        return None
    found = _layout_of(hierarchy, meta)
    if found is None:
        return None
    layout, own = found
    if own is None:
        return GeoPyramid(layout.group_path, "", (), _prefixed(layout, layout.problems))
    return _pyramid(hierarchy, layout, own, meta, geo)


def layout_georeference(hierarchy: Hierarchy, meta: ArrayMeta) -> tuple[GeoReference, tuple[str, ...]] | None:
    """Where a level array lies when only its layout entry says it: the entry's `spatial:transform`, with
    the GeoZarr CRS of the array, its group or the layout group (the first that has one). None otherwise."""
    found = _layout_of(hierarchy, meta) if meta.ndim >= 2 else None
    if found is None:
        return None
    layout, own = found
    if own is None or own.transform is None:
        return None
    parent = node_at(hierarchy, meta.path.rpartition("/")[0])
    group = node_at(hierarchy, layout.group_path)
    for where, node in (("array", meta), ("group", parent), ("layout group", group)):
        crs = geozarr_crs(node.attributes, where) if node is not None else None
        if crs is not None:
            return GeoReference(own.transform, crs.wkt, crs.epsg, layout.node), (
                crs.source, f"GeoZarr multiscales /{layout.group_path} level {_label(own)} spatial:transform")
    return None


def _layout_of(hierarchy: Hierarchy, meta: ArrayMeta) -> tuple[GeoLayout, LayoutLevel | None] | None:
    """The layout (in the parent or grandparent group) one of whose levels is `meta`, and that level; the
    level is None for a layout that could not be read at all (its problems say why)."""
    name = meta.path.rpartition("/")[2]
    for group, _ in groups_above(hierarchy, meta.path, MAX_LAYOUT_DEPTH):
        layout = geo_layout(group.attributes, group.path)
        if layout is None:
            continue
        if not layout.levels:
            return layout, None
        own = next((level for level in layout.levels
                    if (array := level_array(hierarchy, layout, level, name)) is not None and array.path == meta.path),
                   None)
        if own is not None:
            return layout, own
    return None


def level_array(hierarchy: Hierarchy, layout: GeoLayout, level: LayoutLevel, name: str) -> ArrayMeta | None:
    """The array of `level` that corresponds to an array called `name` in another level (GDAL's rule).

    A group asset holds it by that name; an array asset is the level itself
    when it is a direct child of the layout group (COG-style levels `0`,
    `1`...), or, deeper down, when it bears that name.
    """
    path = layout.asset_path(level)
    node = node_at(hierarchy, path)
    if isinstance(node, GroupMeta):
        found = node_at(hierarchy, posixpath.join(path, name) if path else name)
        return found if isinstance(found, ArrayMeta) else None
    if isinstance(node, ArrayMeta) and ("/" not in level.asset or path.rpartition("/")[2] == name):
        return node
    return None


def node_at(hierarchy: Hierarchy, path: str) -> ArrayMeta | GroupMeta | None:
    """The node at `path`; None when there is none (or its metadata cannot be read)."""
    try:
        return hierarchy.node(path)
    except ZarrfsError:
        return None


def _pyramid(hierarchy: Hierarchy, layout: GeoLayout, own: LayoutLevel, meta: ArrayMeta,
             geo: GeoReference) -> GeoPyramid:
    name = meta.path.rpartition("/")[2]
    notes = list(layout.problems)
    height, width = meta.shape[-2:]
    if own.shape is not None and own.shape != (height, width):
        notes.append(f"its own level {_label(own)} states spatial:shape {list(own.shape)}, the array is "
                     f"{[height, width]}")
    if own.transform is not None and _misplacement(own.transform, geo.geotransform, width, height) > AGREEMENT:
        notes.append(f"its own level {_label(own)} states spatial:transform {_text(own.transform)}, the array's "
                     f"georeference is {_text(geo.geotransform)} (the array's is used)")
    found: list[ArrayMeta] = []
    for level in layout.levels:
        if level is own:
            continue
        array = level_array(hierarchy, layout, level, name)
        if array is None:
            notes.append(f"level {_label(level)} has no array {name!r}")
            continue
        if array.ndim != meta.ndim or not all(a <= b for a, b in zip(array.shape[-2:], meta.shape[-2:], strict=True)) \
                or array.shape[-2:] == meta.shape[-2:]:
            continue  # not coarser (the full resolution itself, or a finer level): not an error
        usable, note = _check(hierarchy, level, array, meta, geo)
        if note is not None:
            notes.append(f"level {_label(level)} {note}")
        if usable:
            found.append(array)
    found.sort(key=lambda array: array.shape[-2] * array.shape[-1], reverse=True)
    return GeoPyramid(layout.group_path, _label(own), tuple(array.path for array in found), _prefixed(layout, notes))


def _check(hierarchy: Hierarchy, level: LayoutLevel, array: ArrayMeta, meta: ArrayMeta,
           geo: GeoReference) -> tuple[bool, str | None]:
    """Whether `array` can be a TIFF overview of `meta` placed as its layout says, and what to say about it."""
    unlike = _unlike_values(array, meta)
    if unlike is not None:
        return False, f"is no overview: {unlike}"
    if array.shape[:-2] != meta.shape[:-2]:
        return False, (f"is no overview: its leading dimensions {list(array.shape[:-2])} are not the map's "
                       f"{list(meta.shape[:-2])}")
    height, width = array.shape[-2:]
    if level.shape is not None and level.shape != (height, width):
        return False, f"is no overview: its spatial:shape {list(level.shape)} is not its array's {[height, width]}"
    stated = level.transform or _own_transform(hierarchy, array)
    if stated is None:
        if level.translated:  # moved from where the size ratio puts it, by an amount no spatial:transform states
            return False, ("is no overview: its transform.translation moves it, and no spatial:transform says "
                           "where to (a GeoTIFF reader places an overview by the size ratio alone)")
        return True, None  # nothing to check the size-ratio placement against
    base_height, base_width = meta.shape[-2:]
    placed = _rescaled(geo.geotransform, base_width / width, base_height / height)
    off = _misplacement(stated, placed, width, height)
    if not off < MAX_MISPLACEMENT:  # so that a NaN (transforms near the float limits) fails too
        return False, (f"is no overview: its spatial:transform {_text(stated)} puts it up to {off:.3g} of its "
                       f"pixels from where a GeoTIFF reader places an overview (the size ratio gives {_text(placed)})")
    if off > AGREEMENT:
        return True, (f"spatial:transform {_text(stated)}: its overview is placed by the size ratio, "
                      f"{_text(placed)}, up to {off:.3g} of its pixels from it")
    return True, None


def _unlike_values(array: ArrayMeta, meta: ArrayMeta) -> str | None:
    """Why a level's values cannot be an overview page of the map's (None when they can): an overview page
    of another type is read as the map's values converted, so both must be real numbers of one meaning."""
    if array.dtype == meta.dtype:
        return None
    if array.dtype.kind not in "iuf" or meta.dtype.kind not in "iuf":
        return f"its {array.dtype} values are not numbers of the map's kind ({meta.dtype})"
    if array.dtype.itemsize > 1 and meta.dtype.itemsize > 1 and array.dtype.str[0] != meta.dtype.str[0]:
        return f"its {array.dtype} values have another byte order than the map's {meta.dtype} (one TIFF has one)"
    packing, map_packing = _packing(array), _packing(meta)
    if packing != map_packing:
        return (f"its {array.dtype} values are packed with {packing}, the map's {meta.dtype} with {map_packing}: "
                "they are not the same stored numbers")
    return None


def _packing(meta: ArrayMeta) -> str:
    """The CF packing of an array's values, as text: 'scale_factor 0.5, add_offset none'."""
    found, _ = quantity(meta)
    scale, offset = (None, None) if found is None else (found.scale_factor, found.add_offset)
    return f"scale_factor {'none' if scale is None else f'{scale:g}'}, add_offset " \
           f"{'none' if offset is None else f'{offset:g}'}"


def _own_transform(hierarchy: Hierarchy, array: ArrayMeta) -> GeoTransform | None:
    """The explicit `spatial:transform` of a level's array (its own attributes, then its group's)."""
    parent = node_at(hierarchy, array.path.rpartition("/")[0])
    scopes: list[tuple[str, Any]] = [("array", array.attributes)]
    if isinstance(parent, GroupMeta):
        scopes.append(("group", parent.attributes))
    for where, scope in scopes:
        if "spatial:transform" in scope:
            try:
                return corner_transform(scope["spatial:transform"], registration(scope, where) == "node", where)
            except ConventionError:
                return None
    return None


def _rescaled(gt: GeoTransform, x_ratio: float, y_ratio: float) -> GeoTransform:
    """GDAL's overview geotransform: the same corner, pixel steps scaled by the size ratios."""
    return gt[0], gt[1] * x_ratio, gt[2] * y_ratio, gt[3], gt[4] * x_ratio, gt[5] * y_ratio


def _misplacement(stated: GeoTransform, placed: GeoTransform, width: int, height: int) -> float:
    """How far apart the two transforms put the raster's corners, in pixels of `stated`."""
    pixel = math.sqrt(abs(stated[1] * stated[5] - stated[2] * stated[4]))
    worst = 0.0
    for col, row in ((0, 0), (width, 0), (0, height), (width, height)):
        dx = (stated[0] + col * stated[1] + row * stated[2]) - (placed[0] + col * placed[1] + row * placed[2])
        dy = (stated[3] + col * stated[4] + row * stated[5]) - (placed[3] + col * placed[4] + row * placed[5])
        worst = max(worst, math.hypot(dx, dy) / pixel)
    return worst


def _label(level: LayoutLevel) -> str:
    return repr(level.asset or ".")


def _text(gt: GeoTransform) -> str:
    return "(" + ", ".join(f"{v:.12g}" for v in gt) + ")"


def _prefixed(layout: GeoLayout, notes: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"GeoZarr multiscales /{layout.group_path}: {note}" for note in notes)
