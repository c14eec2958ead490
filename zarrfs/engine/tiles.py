"""Bytes of a tile region (`model.tiling.TileGrid`), filled from the array's read units.

A tile is a 2-D box of one plane; serving it asks the reader for the one
unit it is (or the at most 2 x 2 units it crosses when the unit is not a
multiple of 16) through the chunk cache, never a band. Rows and columns
past the image edge are the fill value. A read holds at most one tile of
scratch memory, and only when it starts or ends inside a tile row.
"""

from __future__ import annotations

import numpy as np

from ..model.tiling import TileGrid, read_unit_shape
from .reader import ArrayReader, Target


def read_tile_bytes(reader: ArrayReader, grid: TileGrid, sample: np.dtype, start: int, stop: int,
                    out: np.ndarray) -> None:
    """Write bytes [start, stop) of `grid`'s tile region into the uint8 array `out` (exactly that long).

    `sample` is the level's element type in the file: its array's, in its
    byte order (bool as uint8, the same bytes).
    """
    tile_nbytes, stride = grid.tile_nbytes, grid.stride
    row_nbytes = grid.tile[1] * grid.itemsize
    blocks: list[Target] = []
    pads: list[tuple[np.ndarray, int, int]] = []  # (tile part, valid rows, valid columns)
    partials: list[tuple[np.ndarray, np.ndarray, int]] = []  # (scratch rows, out piece, skip)
    position = start
    while position < stop:
        index, within = divmod(position, stride)
        if within >= tile_nbytes:  # the gap after a tile: zeros
            end = min(stop, (index + 1) * stride) - index * stride
            out[position - start:position - start + end - within] = 0
            position += end - within
            continue
        end = min(stop, index * stride + tile_nbytes) - index * stride
        first_row, last_row = within // row_nbytes, -(-end // row_nbytes)
        piece = out[position - start:position - start + end - within]
        if within == first_row * row_nbytes and end == last_row * row_nbytes:
            rows = piece.view(sample).reshape(last_row - first_row, grid.tile[1])
        else:  # starts or ends inside a tile row: whole rows into scratch, then the bytes asked for
            rows = np.empty((last_row - first_row, grid.tile[1]), sample)
            partials.append((rows, piece, within - first_row * row_nbytes))
        valid = _tile_blocks(reader, grid, index, first_row, last_row, rows, blocks)
        pads.append((rows, *valid))
        position += end - within
    for rows, valid_rows, valid_columns in pads:
        # Padding past the image edge: TIFF stores edge tiles whole.
        rows[valid_rows:] = reader.meta.fill_value
        rows[:valid_rows, valid_columns:] = reader.meta.fill_value
    reader.fill_targets(blocks)
    for rows, piece, skip in partials:
        piece[:] = rows.reshape(-1).view(np.uint8)[skip:skip + len(piece)]


def _tile_blocks(reader: ArrayReader, grid: TileGrid, index: int, first_row: int, last_row: int,
                 rows: np.ndarray, blocks: list[Target]) -> tuple[int, int]:
    """Add the blocks filling tile rows [first_row, last_row) of tile `index` into `rows`.

    Returns how many of those rows and how many columns lie inside the image.
    """
    plane, k = divmod(index, grid.tiles_per_plane)
    tile_row, tile_column = divmod(k, grid.tiles_across)
    th, tw = grid.tile
    y0 = tile_row * th + first_row
    y1 = min(grid.height, tile_row * th + last_row)
    x0 = tile_column * tw
    x1 = min(grid.width, x0 + tw)
    if y1 <= y0:
        return 0, x1 - x0
    unit = read_unit_shape(reader.meta)
    assert unit is not None  # tiled layouts exist only for chunks of one shape
    lead_coords: list[int] = []
    lead_src: list[slice] = []
    for i, u in zip(grid.array_plane(plane), unit[:-2], strict=True):
        lead_coords.append(i // u)
        lead_src.append(slice(i % u, i % u + 1))
    uh, uw = unit[-2:]
    lead_axes = (np.newaxis,) * len(lead_coords)
    for unit_row in range(y0 // uh, (y1 - 1) // uh + 1):
        ya, yb = max(y0, unit_row * uh), min(y1, (unit_row + 1) * uh)
        for unit_column in range(x0 // uw, (x1 - 1) // uw + 1):
            xa, xb = max(x0, unit_column * uw), min(x1, (unit_column + 1) * uw)
            src = (*lead_src, slice(ya - unit_row * uh, yb - unit_row * uh),
                   slice(xa - unit_column * uw, xb - unit_column * uw))
            destination = rows[(*lead_axes, slice(ya - y0, yb - y0), slice(xa - x0, xb - x0))]
            blocks.append(((*lead_coords, unit_row, unit_column), src, destination))
    return y1 - y0, x1 - x0
