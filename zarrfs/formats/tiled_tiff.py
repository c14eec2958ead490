"""`N.tiled.tif`: an uncompressed tiled (Big)TIFF whose tiles are the array's chunks (or parts of them).

Served as `N.tiled.tif`, and as `N.tif` of a map (`formats.is_map`: a
georeferenced raster, whose readers are GDAL and QGIS). Why beside the strip
file: a strip TIFF makes a GDAL window read whole image rows,
so the daemon decodes a band of chunks for a small window; here tile k is
one chunk's elements (the inner chunk of a shard), padded to TIFF's multiple
of 16 with the fill value, or an equal part of a chunk over 512 on a side
(`model.tiling`): either way one chunk lookup. Stock ImageJ refuses tiled TIFFs,
so the strip file stays (`N.tif` of images, `N.strips.tif` of maps).

Pages and bands: GDAL attaches every reduced-resolution page of a file to
its first page, so only a file whose full-resolution image is one page can
carry overviews. Hence:
- a 2-D array is one page;
- a 3-D array (n, y, x), 2 <= n <= `MAX_BANDS`, is one page of n samples
  stored separately (PlanarConfiguration 2, MINISBLACK plus n - 1
  unspecified ExtraSamples): GDAL and QGIS show n bands, what a GIS user
  expects of a (c, y, x) raster, each band with the overviews. Its tiles
  are stored sample after sample, so sample s is plane s and the bytes are
  those of n pages in a row (`model.tiling`): tile k of sample s is still
  one read unit of plane s. When the leading axis is OME's channel axis,
  the channel labels are the band descriptions (GDAL_METADATA);
- any other array is one page per plane of the leading dimensions, in C
  order (page i is array plane i), and gets no overviews (they would
  belong to the first plane only).
Full-resolution pages are NewSubfileType 0, with the GeoTIFF/GDAL_NODATA
tags and the pixel size: in pixels per centimetre (ResolutionUnit 3), the
standard TIFF way that libvips, OpenSlide and the pathology tools on them
read (mpp), when x and y are space axes with a step in a length unit;
otherwise ImageJ's pixels per unit with ResolutionUnit none, as in `.tif`
(`tifftags.py`; ImageJ reads `.tif`, it refuses tiled TIFFs). When the array is
level 0 of a multiscale image and is a single page, the coarser levels
(same leading dimensions, `conventions.pyramid`) follow as reduced-resolution
pages (NewSubfileType 1) of the same samples, each tiled by its own chunks,
so GDAL lists them as overviews and serves them from those levels' chunks,
never computed. Each page states its own sample type (BitsPerSample,
SampleFormat): a GeoZarr level of another data type (eopf-geozarr's float64
means of a uint16 band, `conventions.geo_pyramid`) is a page of its own type,
which GDAL takes as an overview (it asks an overview for its band count
alone) and converts on a read at the map's type. The file has one byte
order: a level whose multi-byte type has the other one ends the overviews.

tifffile writes the structure into a sparse sink (tiles are reserved, not
held); the tile offsets it wrote are read back and checked against the
arithmetic of `model.tiling`, and the file is rearranged with every IFD at
its head, before the tiles (`tiff_head`), so that a reader opening it reads
no tile. No chunk is read to build a layout.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy
import tifffile

from zarrfs.conventions.semantics import Axis, Semantics
from zarrfs.formats.base import LazyLayout
from zarrfs.formats.tiff import MAX_PAGES, _sample_dtype, _SparseFile, _tags_nbytes
from zarrfs.formats.tiff_head import Part, metadata_first
from zarrfs.formats.tifftags import (
    gdal_metadata,
    geotiff_tags,
    hyperstack,
    imagej_hints,
    imagej_letter,
    semantic_axes,
)
from zarrfs.model.meta import ArrayMeta
from zarrfs.model.tiling import TILE_GAP, TileGrid, read_unit_shape, tile_size

# Tile offset and byte-count tables are held in memory (16 bytes per tile in
# BigTIFF): past this many tiles the file is no container for the array.
MAX_TILES = 1 << 20
# Most planes shown as the bands of one page: SamplesPerPixel is a TIFF SHORT, and GDAL opens up to
# 65536 bands by default (GDAL_MAX_BAND_COUNT). More planes are pages (at most `MAX_PAGES`).
MAX_BANDS = 2**16 - 1
_CLASSIC_LIMIT = 2**32
# What one page adds besides its tile tables, per-sample tags and extra tags (IFD entries,
# resolutions), bounded; and the bytes per sample of BitsPerSample, SampleFormat and ExtraSamples.
_IFD_BOUND = 1024
_SAMPLE_TAGS = 6
# Metres per OME (UDUNITS-2) length unit, and per the abbreviations writers also use.
_METRES = {
    "angstrom": 1e-10, "picometer": 1e-12, "nanometer": 1e-9, "micrometer": 1e-6, "millimeter": 1e-3,
    "centimeter": 1e-2, "decimeter": 1e-1, "meter": 1.0, "kilometer": 1e3,
    "inch": 0.0254, "foot": 0.3048, "yard": 0.9144, "mile": 1609.344,
    "pm": 1e-12, "nm": 1e-9, "um": 1e-6, "\u00b5m": 1e-6, "\u03bcm": 1e-6, "micron": 1e-6, "mm": 1e-3,
    "cm": 1e-2, "m": 1.0, "km": 1e3,
}
_RESOLUTIONUNIT_NONE, _RESOLUTIONUNIT_CENTIMETER = 1, 3
_RATIONAL_MAX = 2**32 - 1  # X/YResolution are RATIONALs of two 32-bit numbers

ReadTiles = Callable[[int, int, int, numpy.ndarray], Any]  # (level, start, stop, uint8 target)


@dataclass(frozen=True)
class TiledLayout:
    """The file as `parts`: the head of IFDs tifffile wrote, zero bytes, and the pages' tiles (`tiff_head`)."""

    parts: tuple[Part, ...]
    grids: tuple[TileGrid, ...]  # one per level, level 0 first
    # Each level's element type (its array's, in the file's byte order; bool as uint8).
    samples: tuple[numpy.dtype, ...]
    _starts: tuple[int, ...] = field(init=False, repr=False)
    size: int = field(init=False)

    def __post_init__(self) -> None:
        starts = [0]
        for part in self.parts:
            starts.append(starts[-1] + self._nbytes(part))
        object.__setattr__(self, "_starts", tuple(starts[:-1]))
        object.__setattr__(self, "size", starts[-1])

    @property
    def head(self) -> bytes:
        """The file's first bytes, which hold every IFD (`tiff_head.metadata_first` puts them first)."""
        head = self.parts[0]
        assert isinstance(head, bytes)
        return head

    def _nbytes(self, part: Part) -> int:
        if isinstance(part, int):
            return part
        return len(part) if isinstance(part, bytes) else self.grids[part[0]].page_nbytes

    def read_into(self, offset: int, out: numpy.ndarray, read_tiles: ReadTiles) -> int:
        """Write bytes [offset, offset + len(out)) into `out`; return how many there were.

        `read_tiles(level, start, stop, target)` writes bytes [start, stop) of
        that level's tile region (its pages' tiles back to back).
        """
        end = min(offset + len(out), self.size)
        index = max(0, bisect.bisect_right(self._starts, offset) - 1)
        while index < len(self.parts) and self._starts[index] < end:
            part, part_start = self.parts[index], self._starts[index]
            lo, hi = max(offset, part_start), min(end, part_start + self._nbytes(part))
            if lo < hi:
                target = out[lo - offset:hi - offset]
                if isinstance(part, bytes):
                    target[:] = numpy.frombuffer(part, numpy.uint8, hi - lo, lo - part_start)
                elif isinstance(part, int):
                    target[:] = 0
                else:
                    base = part[1] * self.grids[part[0]].page_nbytes - part_start
                    read_tiles(part[0], base + lo, base + hi, target)
            index += 1
        return max(0, end - offset)


class LazyTiledLayout(LazyLayout):
    """The tiled TIFF of one array, still to be built: the view builds it bound to the array's levels
    (files/tiled.py), so it keeps the plan of the array alone, for when there are no coarser levels."""

    def __init__(self, plan: Callable[[], TiledLayout]) -> None:
        super().__init__(plan)  # type: ignore[arg-type]  # a TiledLayout stands where a Layout stands
        self.plan = plan


def tiled_layout(levels: Sequence[ArrayMeta], semantics: Semantics | None = None) -> TiledLayout | None:
    """The tiled TIFF of `levels[0]`, with `levels[1:]` (coarser, same leading dimensions) as overviews.

    None when TIFF cannot hold the array (fewer than 2 dimensions, an empty
    dimension, a dtype TIFF has no sample type for, too many pages or tiles).
    """
    plan = tiled_plan(levels, semantics)
    return None if plan is None else plan()


def tiled_plan(levels: Sequence[ArrayMeta], semantics: Semantics | None = None) -> Callable[[], TiledLayout] | None:
    """`tiled_layout` decided from metadata alone (cheap): the build of its layout, or None where it gives
    None. Listing a directory decides; building the IFDs waits until the file is read or sized."""
    meta = levels[0]
    sample = _sample_dtype(meta.dtype)
    if sample is None or meta.ndim < 2 or 0 in meta.shape or max(meta.shape[-2:]) >= 2**32:
        return None
    bands = meta.ndim == 3 and 2 <= meta.shape[0] <= MAX_BANDS
    samples = one_byte_order([_sample_dtype(level.dtype) for level in levels])
    found = [_grid(level, s, bands) if s is not None else None for level, s in zip(levels, samples, strict=True)]
    grids = found[:found.index(None)] if None in found else found  # levels with chunks of one shape
    if not grids:
        return None
    if grids[0].pages > 1:  # reduced pages would all be overviews of the first plane
        grids = grids[:1]
    if grids[0].pages > MAX_PAGES or sum(g.planes * g.tiles_per_plane for g in grids) > MAX_TILES:
        return None
    axes = semantic_axes(semantics, meta.ndim)
    extratags = geotiff_tags(semantics, axes, meta.ndim) + gdal_metadata(semantics, axes,
                                                                         meta.shape[0] if bands else 1)
    resolution = None
    if axes is not None:
        per_centimetre = centimetre_resolution(axes)
        stack = hyperstack(meta.shape[:-2], tuple(imagej_letter(axis) for axis in axes[:-2]))
        per_unit = imagej_hints(axes, stack, (), sample).resolution
        if per_centimetre is not None:
            resolution = (per_centimetre, _RESOLUTIONUNIT_CENTIMETER)
        elif per_unit is not None:
            resolution = (per_unit, _RESOLUTIONUNIT_NONE)
    overhead = sum(g.pages * (_IFD_BOUND + _SAMPLE_TAGS * g.samples + _tags_nbytes(extratags))
                   + 16 * g.planes * g.tiles_per_plane for g in grids)
    bigtiff = sum(g.nbytes for g in grids) + overhead > _CLASSIC_LIMIT
    return functools.partial(_build, grids, tuple(samples[:len(grids)]), bigtiff, extratags,  # type: ignore[arg-type]
                             resolution)


def one_byte_order(samples: Sequence[numpy.dtype | None]) -> list[numpy.dtype | None]:
    """`samples` as one file holds them: the byte order of the first multi-byte type is the file's; a
    multi-byte type in the other order becomes None (a tile is its chunk's bytes, never swapped)."""
    order = next((s.str[0] for s in samples if s is not None and s.itemsize > 1), "<")  # '<' or '>'
    return [s if s is None or s.itemsize == 1 or s.str[0] == order else None for s in samples]


def file_byteorder(samples: Sequence[numpy.dtype]) -> str:
    """tifffile's byte order for a file of `samples` (`one_byte_order`): big-endian when they are."""
    return ">" if any(s.itemsize > 1 and s.str[0] == ">" for s in samples) else "<"


def _grid(meta: ArrayMeta, sample: numpy.dtype, bands: bool) -> TileGrid | None:
    """Tiles of the read unit's last two dimensions; a unit larger than the image (Zarr allows it)
    is clipped to the image first, so a 10 x 10 array in 1000 x 1000 chunks is one 16 x 16 tile.
    None for chunks of varying shape (a rectilinear grid)."""
    unit = read_unit_shape(meta)
    if unit is None:
        return None
    height, width = meta.shape[-2:]
    return TileGrid(meta.shape, (tile_size(min(unit[-2], height)), tile_size(min(unit[-1], width))),
                    sample.itemsize, bands=bands)


def centimetre_resolution(axes: Sequence[Axis]) -> tuple[float, float] | None:
    """(x, y) pixels per centimetre when the last two axes are space axes with a step in a length unit."""
    resolution = []
    for axis in (axes[-1], axes[-2]):
        metres = _METRES.get((axis.unit or "").lower())
        if axis.kind != "space" or metres is None or axis.scale is None or not 0 < axis.scale < math.inf:
            return None
        per_centimetre = 0.01 / (axis.scale * metres)
        if not 1 / _RATIONAL_MAX <= per_centimetre <= _RATIONAL_MAX:
            return None
        resolution.append(per_centimetre)
    return resolution[0], resolution[1]


def _build(grids: list[TileGrid], samples: tuple[numpy.dtype, ...], bigtiff: bool, extratags: tuple,
           resolution: tuple[tuple[float, float], int] | None) -> TiledLayout:
    sink = _ZeroSkippingSink()
    byteorder = file_byteorder(samples)
    with tifffile.TiffWriter(sink, bigtiff=bigtiff, byteorder=byteorder, shaped=False, ome=False) as writer:
        for level, (grid, sample) in enumerate(zip(grids, samples, strict=True)):
            extra: dict[str, Any] = {}
            if level == 0:
                extra["extratags"] = extratags
                if resolution is not None:
                    extra.update(resolution=resolution[0], resolutionunit=resolution[1])
            # Placeholder tiles as (bytes, bytecount): tifffile then places tile k
            # `stride` bytes after tile k-1 (the gap, `model.tiling`) and writes
            # TileByteCounts of `tile_nbytes`; the one zero object is skipped by the sink.
            placeholder = (bytes(grid.stride), grid.tile_nbytes)
            if grid.bands:
                # tifffile writes MINISBLACK with n - 1 ExtraSamples "unspecified", as GDAL does for bands.
                extra["planarconfig"] = "separate"
            writer.write(
                itertools.repeat(placeholder, grid.planes * grid.tiles_per_plane),
                shape=(grid.planes, grid.height, grid.width) if grid.planes > 1 else (grid.height, grid.width),
                dtype=sample,
                tile=grid.tile,
                photometric="minisblack",  # never guess RGB from a width of 3 or 4
                subfiletype=0 if level == 0 else 1,  # 1: reduced resolution, an overview to GDAL
                align=TILE_GAP if grid.gap else None,  # tiles start a whole gap after their IFD
                metadata=None,
                software=False,
                **extra,
            )
    return TiledLayout(metadata_first(sink, grids, _page_regions(sink, grids), bigtiff, byteorder), tuple(grids),
                       samples)


def _page_regions(sink: _SparseFile, grids: list[TileGrid]) -> list[tuple[int, int, int]]:
    """(start, level, page) of each page's tiles, read back from the IFDs tifffile wrote (main chain)."""
    sink.seek(0)
    with tifffile.TiffFile(sink) as tif:
        pages = iter(tif.pages)
        return checked_page_regions([[next(pages) for _ in range(grid.pages)] for grid in grids], grids)


def checked_page_regions(pages_by_level: Sequence[Sequence[Any]],
                         grids: Sequence[TileGrid]) -> list[tuple[int, int, int]]:
    """(start, level, page) of each page's tiles, from the IFDs tifffile wrote for each level.

    tifffile writes a page's tiles right after its IFD, in row-major order
    (sample after sample for a band page); the tile offsets it wrote must be
    exactly that arithmetic, or the file would not be what
    `engine.tiles.read_tile_bytes` serves.
    """
    regions: list[tuple[int, int, int]] = []
    for level, (grid, pages) in enumerate(zip(grids, pages_by_level, strict=True)):
        for page, ifd in enumerate(pages):
            offsets, counts = ifd.dataoffsets, ifd.databytecounts
            start = offsets[0]
            expected = range(start, start + grid.page_nbytes, grid.stride)
            if (len(offsets) != len(expected) or any(a != b for a, b in zip(offsets, expected))
                    or any(c != grid.tile_nbytes for c in counts)):
                raise RuntimeError(f"tifffile did not write the tiles of page {page} of level {level} in order")
            regions.append((start, level, page))
    return regions


class _ZeroSkippingSink(_SparseFile):
    """A `_SparseFile` that keeps only the extent of all-zero writes.

    tifffile writes the reserved tiles of a tiled page as real bytes: the
    same zero `bytes` object, tile after tile. Never-written bytes read as 0
    anyway, so skipping them keeps a file of any size a few small writes;
    the identity check makes each such object cost one scan.
    """

    def __init__(self) -> None:
        super().__init__()
        self._zeros: object = None

    def write(self, data: bytes | bytearray | memoryview | tuple[bytes, int]) -> int:
        if isinstance(data, tuple):
            # A page that is exactly one tile: tifffile writes its data "contiguously", passing
            # our (placeholder, bytecount) item through as it is. The placeholder is the tile's stride.
            data = data[0]
        n = len(data)
        if data is self._zeros or (isinstance(data, bytes) and data.count(0) == n):
            self._zeros = data
            self._pos += n
            self.size = max(self.size, self._pos)
            return n
        return super().write(data)
