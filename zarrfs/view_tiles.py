"""`N.tiled.tif` in the virtual tree: the tiled layout with its overviews, bound to the arrays serving them."""

from __future__ import annotations

from .conventions.pyramid import coarser_levels
from .conventions.semantics import Semantics
from .engine.engine import Engine
from .engine.tiles import TiledFile
from .formats.tiled_tiff import TiledLayout, tiled_layout
from .model.meta import ArrayMeta


def tiled_file(engine: Engine, meta: ArrayMeta, semantics: Semantics, layout: TiledLayout) -> TiledFile:
    """`layout` (the array alone), rebuilt with the coarser levels of its multiscale image or GeoZarr layout
    when it has some."""
    levels = (meta, *coarser_levels(engine.hierarchy, meta, semantics))
    if len(levels) > 1:
        layout = tiled_layout(levels, semantics) or layout
    return TiledFile(layout, engine, tuple(level.path for level in levels[:len(layout.grids)]))
