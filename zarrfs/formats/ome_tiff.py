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
- several images (a plate's fields, a collection's series) may each have
  their own pixel type: OME-XML states one `Pixels Type` per Image and each
  IFD its own BitsPerSample and SampleFormat, which is how Bio-Formats and
  tifffile read each series. The file has one byte order: an image whose
  multi-byte type has the other one cannot join it (`joins`);
- tiles are the levels' chunks (or equal parts of them), uncompressed, so
  one tile is one chunk lookup, as in `N.tiled.tif` (`tiled_tiff`);
- the OME-XML in the first IFD's ImageDescription; the physical pixel size
  also as X/YResolution in pixels per centimetre (ResolutionUnit 3), which
  is where libvips and OpenSlide look.
Sizes come from metadata alone; no chunk is read to build the layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tifffile

from ..conventions.semantics import Semantics
from ..model.meta import ArrayMeta
from ..model.tiling import TILE_GAP, TileGrid
from .ome_xml import OmePixels, OmePlate, ome_xml, pixels_of
from .tiff import _sample_dtype
from .tiff_head import metadata_first
from .tiled_tiff import (
    MAX_TILES,
    TiledLayout,
    _grid,
    _ZeroSkippingSink,
    centimetre_resolution,
    checked_page_regions,
    file_byteorder,
    one_byte_order,
)

_CLASSIC_LIMIT = 2**32
# Bytes one IFD adds besides its tile tables (entries, resolutions, the SubIFDs list), bounded.
_IFD_BOUND = 1024
# Most main-chain IFDs (planes) one file holds: past this, readers that list every IFD at open crawl.
MAX_PLANES = 2**16


@dataclass(frozen=True)
class ImageLevels:
    """One image to store: its level arrays (level 0 first, each a valid overview of the one before),
    level 0's meaning, and its name."""

    levels: tuple[ArrayMeta, ...]
    semantics: Semantics
    name: str | None


@dataclass(frozen=True)
class _Stored:
    pixels: OmePixels
    grids: tuple[TileGrid, ...]
    levels: tuple[ArrayMeta, ...]
    name: str | None
    resolution: tuple[float, float] | None  # level 0's (x, y) pixels per centimetre


def ome_tiff_layout(images: Sequence[ImageLevels], uuid: str, file_name: str, plate: OmePlate | None = None,
                    rewrite: Callable[[bytes], bytes] | None = None
                    ) -> tuple[TiledLayout, tuple[ArrayMeta, ...]] | None:
    """The OME-TIFF of `images`, one after the other, and the array serving each of its tile grids.

    None when OME-TIFF cannot hold one of the images, or they need both
    byte orders (`joins`); with a `plate`, its wells refer to images by
    their index in `images`, so every image must fit. `rewrite` turns the
    OME-XML built for the images into the one the file carries (a
    collection's original metadata, `ome_metadata`).
    """
    stored = [_stored(image) for image in images]
    if any(s is None for s in stored):
        return None
    kept: list[_Stored] = stored  # type: ignore[assignment]
    if None in one_byte_order([s.pixels.dtype for s in kept]):
        return None
    grids = [grid for s in kept for grid in s.grids]
    if sum(s.grids[0].planes for s in kept) > MAX_PLANES or sum(g.planes * g.tiles_per_plane
                                                                 for g in grids) > MAX_TILES:
        return None
    description = ome_xml([(s.pixels, s.name) for s in kept], uuid, file_name, plate)
    if rewrite is not None:
        description = rewrite(description)
    overhead = len(description) + sum(g.pages * _IFD_BOUND + 16 * g.planes * g.tiles_per_plane for g in grids)
    bigtiff = sum(g.nbytes for g in grids) + overhead > _CLASSIC_LIMIT
    layout = _build(kept, bigtiff, description)
    return layout, tuple(level for s in kept for level in s.levels)


def storable(image: ImageLevels) -> bool:
    """Whether an OME-TIFF can hold `image` (its sample type, axes and sizes)."""
    return _stored(image) is not None


def joins(image: ImageLevels, joined: Sequence[ImageLevels]) -> bool:
    """Whether `image` can be stored in one file with the images that `joined` it before: a multi-byte type
    in the other byte order than theirs cannot (a tile is its chunk's bytes, never swapped)."""
    samples = [_sample_dtype(other.levels[0].dtype) for other in (*joined, image)]
    return None not in one_byte_order(samples)


def _stored(image: ImageLevels) -> _Stored | None:
    """How one image is stored: its pixels and the tile grid of each level it keeps."""
    meta = image.levels[0]
    sample = _sample_dtype(meta.dtype)
    if sample is None or image.semantics.axes is None or 0 in meta.shape or max(meta.shape[-2:]) >= 2**31:
        return None
    placement = image.semantics.placement
    pixels = pixels_of(image.semantics.axes, meta.shape, sample, image.semantics.channels,
                       placement.axes if placement is not None else None)
    if pixels is None:
        return None
    found = [_grid(level, sample, False) for level in image.levels]
    grids = tuple(found[:found.index(None)] if None in found else found)
    if not grids:
        return None
    return _Stored(pixels, grids, image.levels[:len(grids)], image.name,  # type: ignore[arg-type]
                   centimetre_resolution(image.semantics.axes))


def _build(images: list[_Stored], bigtiff: bool, description: bytes) -> TiledLayout:
    sink = _ZeroSkippingSink()
    byteorder = file_byteorder([image.pixels.dtype for image in images])
    with tifffile.TiffWriter(sink, bigtiff=bigtiff, byteorder=byteorder, ome=False, shaped=False) as writer:
        for number, image in enumerate(images):
            resolution = image.resolution
            for level, grid in enumerate(image.grids):
                extra: dict[str, Any] = {}
                if number == 0 and level == 0:
                    extra["description"] = description
                if level == 0 and len(image.grids) > 1:
                    extra["subifds"] = len(image.grids) - 1
                if resolution is not None:
                    scale = (image.grids[0].width / grid.width, image.grids[0].height / grid.height)
                    extra.update(resolution=(resolution[0] / scale[0], resolution[1] / scale[1]), resolutionunit=3)
                # Placeholder tiles, as in `tiled_tiff._build`: reserved, never held.
                placeholder = (bytes(grid.stride), grid.tile_nbytes)
                writer.write(
                    itertools.repeat(placeholder, grid.planes * grid.tiles_per_plane),
                    shape=(grid.planes, grid.height, grid.width),
                    dtype=image.pixels.dtype,
                    tile=grid.tile,
                    photometric="minisblack",
                    subfiletype=0 if level == 0 else 1,
                    align=TILE_GAP if grid.gap else None,
                    metadata=None,
                    software=False,
                    **extra,
                )
    grids = [grid for image in images for grid in image.grids]
    samples = tuple(image.pixels.dtype for image in images for _ in image.grids)
    sink.seek(0)
    with tifffile.TiffFile(sink) as tif:
        main = iter(tif.pages)
        pages_by_level: list[list[Any]] = []
        for image in images:
            planes = [next(main) for _ in range(image.grids[0].pages)]
            pages_by_level.append(planes)
            pages_by_level += [[_sub_page(tif, page, k) for page in planes] for k in range(len(image.grids) - 1)]
        regions = checked_page_regions(pages_by_level, grids)
    return TiledLayout(metadata_first(sink, grids, regions, bigtiff, byteorder), tuple(grids), samples)


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

