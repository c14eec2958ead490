"""The coarser levels of the OME-Zarr multiscale image an array is a level of.

A level's overviews are the datasets listed after it in the same
`multiscales` entry, in order, resolved relative to the image group. Only
levels that can be overviews of it in a TIFF are kept: arrays of the same
dtype and leading dimensions (so a 3-D level's reduced page has the same
bands) whose planes shrink strictly, level after level (GDAL takes a
reduced-resolution page as an overview only when it is smaller). Listing
stops at the first level that fails: the ones after it would be overviews
of a gap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ZarrfsError
from ..model.meta import ArrayMeta, GroupMeta
from .ome import ome_block

if TYPE_CHECKING:
    from ..model.hierarchy import Hierarchy


def coarser_levels(hierarchy: Hierarchy, meta: ArrayMeta) -> tuple[ArrayMeta, ...]:
    """The arrays of the levels after `meta` in its multiscale image (empty when it is in none)."""
    if not meta.path:
        return ()
    parent_path, _, name = meta.path.rpartition("/")
    try:
        group = hierarchy.node(parent_path)
    except ZarrfsError:
        return ()
    if not isinstance(group, GroupMeta):
        return ()
    block = ome_block(group.attributes)
    if block is None or not isinstance(block[1].get("multiscales"), list):
        return ()
    for multiscale in block[1]["multiscales"]:
        datasets = multiscale.get("datasets") if isinstance(multiscale, dict) else None
        if not isinstance(datasets, list):
            continue
        paths = [d.get("path") if isinstance(d, dict) else None for d in datasets]
        if name in paths:
            return _overviews(hierarchy, meta, parent_path, paths[paths.index(name) + 1:])
    return ()


def _overviews(hierarchy: Hierarchy, meta: ArrayMeta, parent_path: str, paths: list) -> tuple[ArrayMeta, ...]:
    levels: list[ArrayMeta] = []
    previous = meta
    for path in paths:
        if not isinstance(path, str) or not path:
            break
        try:
            level = hierarchy.node(f"{parent_path}/{path}".strip("/"))
        except ZarrfsError:
            break
        if not (isinstance(level, ArrayMeta) and level.dtype == meta.dtype and level.ndim == meta.ndim
                and level.shape[:-2] == meta.shape[:-2] and 0 not in level.shape
                and all(a <= b for a, b in zip(level.shape[-2:], previous.shape[-2:]))
                and level.shape[-2:] != previous.shape[-2:]):
            break
        levels.append(level)
        previous = level
    return tuple(levels)
