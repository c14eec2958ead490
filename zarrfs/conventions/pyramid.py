"""The coarser levels of the OME-Zarr multiscale image, or the GeoZarr multiscales layout, an array is a level of.

A level's overviews are the datasets listed after it in the same
`multiscales` entry, in order, resolved relative to the image group (`conventions.image`);
a map's in a GeoZarr layout are the coarser levels `conventions.geo_pyramid` found
(`Semantics.overviews`), largest first. Only
levels that can be overviews of it in a TIFF are kept: arrays of the same
dtype (an OME-TIFF's SubIFDs are read at their image's pixel type; a map's
levels of another type `geo_pyramid` has vetted are pages of their own
type) and leading dimensions (so a 3-D level's reduced page has the same
bands) whose planes shrink strictly, level after level (GDAL takes a
reduced-resolution page as an overview only when it is smaller). Listing
stops at the first level that fails: the ones after it would be overviews
of a gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..model.meta import ArrayMeta
from .geo_pyramid import node_at
from .image import image_of_array, level_arrays
from .semantics import Semantics

if TYPE_CHECKING:
    from ..hierarchy import Hierarchy


def coarser_levels(hierarchy: Hierarchy, meta: ArrayMeta, semantics: Semantics) -> tuple[ArrayMeta, ...]:
    """The arrays of the levels after `meta` in its multiscale image or GeoZarr layout (empty when in none)."""
    found = image_of_array(hierarchy, meta.path)
    if found is not None:
        image, level = found
        return overview_levels(meta, level_arrays(hierarchy, image)[level + 1:])
    return overview_levels(meta, [level if isinstance(level := node_at(hierarchy, path), ArrayMeta) else None
                                  for path in semantics.overviews], same_dtype=False)


def overview_levels(meta: ArrayMeta, coarser: Sequence[ArrayMeta | None],
                    same_dtype: bool = True) -> tuple[ArrayMeta, ...]:
    """The leading run of `coarser` that can stand as reduced-resolution pages of `meta` (see above); of its
    dtype unless not `same_dtype` (a map's GeoZarr levels, whose types `geo_pyramid` checked)."""
    levels: list[ArrayMeta] = []
    previous = meta
    for level in coarser:
        if not (isinstance(level, ArrayMeta) and (level.dtype == meta.dtype or not same_dtype)
                and level.ndim == meta.ndim
                and level.shape[:-2] == meta.shape[:-2] and 0 not in level.shape
                and all(a <= b for a, b in zip(level.shape[-2:], previous.shape[-2:]))
                and level.shape[-2:] != previous.shape[-2:]):
            break
        levels.append(level)
        previous = level
    return tuple(levels)
