"""`N.tiled.tif` in the virtual tree: the tiled layout with its overviews, bound to the arrays serving them."""

from __future__ import annotations

from collections.abc import Callable

from ..conventions.pyramid import coarser_levels
from ..conventions.semantics import Semantics
from ..engine.engine import Engine
from ..engine.tiles import TiledFile
from ..formats.tiled_tiff import TiledLayout, tiled_layout
from ..model.meta import ArrayMeta


def tiled_file(engine: Engine, meta: ArrayMeta, semantics: Semantics,
               single: Callable[[], TiledLayout]) -> TiledFile:
    """The tiled file of `meta`, with the coarser levels of its multiscale image or GeoZarr layout as
    overviews when it has some (else `single`, the array's alone)."""
    levels = (meta, *coarser_levels(engine.hierarchy, meta, semantics))
    layout = (tiled_layout(levels, semantics) if len(levels) > 1 else None) or single()
    return TiledFile(layout, engine, tuple(level.path for level in levels[:len(layout.grids)]))
