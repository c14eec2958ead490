"""An array's 2-D planes cut into TIFF tiles: pure geometry, from metadata alone.

A tiled TIFF page of height H and width W is a grid of `tiles_down` x
`tiles_across` tiles of `tile` = (TH, TW) elements, each stored as TH*TW
elements in C order; edge tiles are stored whole (padding past the image).
TIFF requires TH and TW to be multiples of 16, so the tile is the read
unit's last two dimensions (the chunk, or the inner chunk of a shard)
rounded up to 16: then a tile is exactly one unit when the unit is a
multiple of 16, and crosses at most 2 x 2 units otherwise. A unit side over
MAX_TILE_SIDE is cut into equal parts instead, when a part of at most that
size is a multiple of 16 (1024 -> 512, 4000 -> 400): each tile then lies in
one unit, so serving it is still one chunk lookup, while a reader that reads
whole tiles (GDAL does) moves a quarter of the bytes for a small window
(a 512 x 512 window of 1024 x 1024 float32 chunks: 4 MiB instead of 16).

The planes of a level are its TIFF pages, one per plane, or (`bands`) the
samples of a single page stored separately (PlanarConfiguration 2). TIFF
stores such a page's tiles sample after sample, so the tile region is the
same bytes either way: the planes one after the other, each plane its tiles
in row-major order, each tile followed by `gap` zero bytes; tile k of plane
p starts at `(p * tiles_per_plane + k) * stride`. The gap is there
because readers read past what they asked for (GDAL reads a tile and then
the next 4-8 KiB, its buffer): without it that over-read lands on the next
tile, and serving a few bytes of a tile costs decoding its whole chunk.
Tiles under `16 * TILE_GAP` bytes have no gap: their chunks are cheap, and
the gap would weigh on the file's size. Neither has a plane that is exactly
one tile: TIFF writers store such pages as one contiguous block (tifffile
does, whatever placeholder it is handed), so there is no room for a gap.
The IFDs are not between the tiles: the file holds them all at its head,
before the first tile (formats/tiff_head.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..codecs.sharding import sharding_alone
from .grids import RegularGrid
from .meta import ArrayMeta

TIFF_TILE_MULTIPLE = 16
TILE_GAP = 64 << 10
MAX_TILE_SIDE = 512


def read_unit_shape(meta: ArrayMeta) -> tuple[int, ...] | None:
    """The shape the engine decodes at once: the inner chunk of a shard, else the chunk; None
    when chunks differ in shape (a rectilinear grid), which tiles of one size cannot follow.

    The same rule as `engine.chunks.make_source`: a sharding codec that is the
    whole pipeline is read inner chunk by inner chunk.
    """
    sharding = sharding_alone(meta.codec)
    if sharding is not None:
        return tuple(sharding.chunk_shape)
    return tuple(meta.grid.chunk_shape) if isinstance(meta.grid, RegularGrid) else None


def tile_size(unit: int) -> int:
    """The tile side for a read unit's side: the unit itself, or for a unit over MAX_TILE_SIDE the
    largest part of at most that size which divides it and is a multiple of 16; else the unit
    rounded up to TIFF's multiple of 16."""
    if unit > MAX_TILE_SIDE:
        for parts in range(-(-unit // MAX_TILE_SIDE), unit // TIFF_TILE_MULTIPLE + 1):
            if unit % parts == 0 and (unit // parts) % TIFF_TILE_MULTIPLE == 0:
                return unit // parts
    return -(-unit // TIFF_TILE_MULTIPLE) * TIFF_TILE_MULTIPLE


@dataclass(frozen=True)
class TileGrid:
    """The planes of an array of `shape` (ndim >= 2) as tiles of `tile` elements, in pages or as bands."""

    shape: tuple[int, ...]
    tile: tuple[int, int]
    itemsize: int
    # file plane i holds array plane `plane_order[i]` (a plane: C-order index over the leading dimensions)
    plane_order: tuple[int, ...] | None = None
    # True: the planes are the samples (bands) of one page, PlanarConfiguration 2; False: a page per plane
    bands: bool = False

    @property
    def height(self) -> int:
        return self.shape[-2]

    @property
    def width(self) -> int:
        return self.shape[-1]

    @property
    def planes(self) -> int:
        return math.prod(self.shape[:-2])

    @property
    def pages(self) -> int:
        return 1 if self.bands else self.planes

    @property
    def samples(self) -> int:
        """Samples per pixel of each page: the planes of a band page, else 1."""
        return self.planes if self.bands else 1

    @property
    def tiles_down(self) -> int:
        return -(-self.height // self.tile[0])

    @property
    def tiles_across(self) -> int:
        return -(-self.width // self.tile[1])

    @property
    def tiles_per_plane(self) -> int:
        return self.tiles_down * self.tiles_across

    @property
    def tile_nbytes(self) -> int:
        return self.tile[0] * self.tile[1] * self.itemsize

    @property
    def gap(self) -> int:
        return self.stride - self.tile_nbytes

    @property
    def stride(self) -> int:
        """Bytes from one tile's start to the next one's."""
        if self.tile_nbytes < 16 * TILE_GAP or self.tile == (self.height, self.width):
            return self.tile_nbytes
        return -(-(self.tile_nbytes + TILE_GAP) // TILE_GAP) * TILE_GAP

    @property
    def page_nbytes(self) -> int:
        return self.samples * self.tiles_per_plane * self.stride

    @property
    def nbytes(self) -> int:
        return self.pages * self.page_nbytes

    def array_plane(self, plane: int) -> tuple[int, ...]:
        """Index over the leading dimensions of the array plane shown as file plane `plane`."""
        if self.plane_order is not None:
            plane = self.plane_order[plane]
        return tuple(int(i) for i in _unravel(plane, self.shape[:-2]))


def _unravel(index: int, shape: tuple[int, ...]) -> list[int]:
    out: list[int] = []
    for size in reversed(shape):
        index, i = divmod(index, size)
        out.append(i)
    return out[::-1]
