"""`NAME.ome.tif`: one OME-Zarr multiscale image as a pyramidal OME-TIFF (formats.md §11).

The layout Bio-Formats (Fiji's importer, QuPath, OMERO), tifffile and libvips
read as one image with a resolution pyramid:
- the full-resolution planes in the main IFD chain, one IFD per plane, in
  C order over the level array's leading axes (the DimensionOrder the
  OME-XML states, `ome_xml.pixels_of`);
- each reduced level as a SubIFD of every plane (tag 330, NewSubfileType 1),
  largest first: level k of plane p is plane p of the k-th coarser level
  array, so only levels with the same leading shape and dtype qualify
  (`conventions.pyramid.overview_levels`);
- tiles are the levels' chunks (or equal parts of them), uncompressed, so
  one tile is one chunk lookup, as in `N.tiled.tif` (`tiled_tiff`);
- the OME-XML in the first IFD's ImageDescription; the physical pixel size
  also as X/YResolution in pixels per centimetre (ResolutionUnit 3), which
  is where libvips and OpenSlide look.
Sizes come from metadata alone; no chunk is read to build the layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy
import tifffile

from ..conventions.semantics import Semantics
from ..model.meta import ArrayMeta
from ..model.tiling import TILE_GAP, TileGrid
from .ome_xml import OmePixels, ome_xml, pixels_of
from .tiff import _sample_dtype
from .tiled_tiff import MAX_TILES, TiledLayout, _cut, _grid, _ZeroSkippingSink, checked_page_regions

# Centimetres per unit, for X/YResolution (ResolutionUnit 3); units not here get no resolution tags.
_CENTIMETRES = {"Å": 1e-8, "pm": 1e-10, "nm": 1e-7, "µm": 1e-4, "mm": 0.1, "cm": 1.0, "m": 100.0, "km": 1e5,
                "in": 2.54}
_CLASSIC_LIMIT = 2**32
# Bytes one IFD adds besides its tile tables (entries, resolutions, the SubIFDs list), bounded.
_IFD_BOUND = 1024
# Most main-chain IFDs (planes) one file holds: past this, readers that list every IFD at open crawl.
MAX_PLANES = 2**16


def ome_tiff_layout(levels: Sequence[ArrayMeta], semantics: Semantics, name: str | None, uuid: str,
                    file_name: str) -> TiledLayout | None:
    """The OME-TIFF of an image whose level arrays are `levels` (level 0 first, each a valid overview
    of the one before), described by level 0's `semantics`; None when OME-TIFF cannot hold it."""
    meta = levels[0]
    sample = _sample_dtype(meta.dtype)
    if sample is None or semantics.axes is None or 0 in meta.shape or max(meta.shape[-2:]) >= 2**31:
        return None
    pixels = pixels_of(semantics.axes, meta.shape, meta.dtype, semantics.channels)
    if pixels is None:
        return None
    found = [_grid(level, sample, False) for level in levels]
    grids = found[:found.index(None)] if None in found else found
    if not grids or grids[0].planes > MAX_PLANES or sum(g.planes * g.tiles_per_plane for g in grids) > MAX_TILES:
        return None
    description = ome_xml(pixels, name, uuid, file_name)
    overhead = len(description) + sum(g.pages * _IFD_BOUND + 16 * g.planes * g.tiles_per_plane for g in grids)
    bigtiff = sum(g.nbytes for g in grids) + overhead > _CLASSIC_LIMIT
    return _build(grids, sample, bigtiff, description, _resolution(pixels))  # type: ignore[arg-type]


def _resolution(pixels: OmePixels) -> tuple[float, float] | None:
    """(X, Y) pixels per centimetre from the physical pixel size, when both are lengths in known units."""
    try:
        (x, x_unit), (y, y_unit) = pixels.physical["X"], pixels.physical["Y"]
        return 1.0 / (x * _CENTIMETRES[x_unit]), 1.0 / (y * _CENTIMETRES[y_unit])
    except KeyError:
        return None


def _build(grids: list[TileGrid], sample: numpy.dtype, bigtiff: bool, description: bytes,
           resolution: tuple[float, float] | None) -> TiledLayout:
    sink = _ZeroSkippingSink()
    byteorder = ">" if sample.str[0] == ">" else "<"
    with tifffile.TiffWriter(sink, bigtiff=bigtiff, byteorder=byteorder, ome=False, shaped=False) as writer:
        for level, grid in enumerate(grids):
            extra: dict[str, Any] = {}
            if level == 0:
                extra["description"] = description
                if len(grids) > 1:
                    extra["subifds"] = len(grids) - 1
            if resolution is not None:
                scale = (grids[0].width / grid.width, grids[0].height / grid.height)
                extra.update(resolution=(resolution[0] / scale[0], resolution[1] / scale[1]), resolutionunit=3)
            # Placeholder tiles, as in `tiled_tiff._build`: reserved, never held.
            placeholder = (bytes(grid.stride), grid.tile_nbytes)
            writer.write(
                itertools.repeat(placeholder, grid.planes * grid.tiles_per_plane),
                shape=(grid.planes, grid.height, grid.width),
                dtype=sample,
                tile=grid.tile,
                photometric="minisblack",
                subfiletype=0 if level == 0 else 1,
                align=TILE_GAP if grid.gap else None,
                metadata=None,
                software=False,
                **extra,
            )
    sink.seek(0)
    with tifffile.TiffFile(sink) as tif:
        main = list(tif.pages)
        pages_by_level = [main] + [[_sub_page(tif, page, k) for page in main] for k in range(len(grids) - 1)]
        regions = checked_page_regions(pages_by_level, grids)
    return TiledLayout(_cut(sink, grids, regions), tuple(grids), sample)


def _sub_page(tif: tifffile.TiffFile, page: Any, k: int) -> tifffile.TiffPage:
    """The k-th SubIFD of a main-chain page."""
    tif.filehandle.seek(page.subifds[k])
    return tifffile.TiffPage(tif, index=(page.index, k))


def safe_file_stem(name: str | None) -> str | None:
    """`name` when it can stand as a file name as it is (no `/`, no leading `.`, printable, short)."""
    if not name or len(name) > 120 or "/" in name or name.startswith(".") or not name.isprintable() \
            or "\\" in name:
        return None
    return name

