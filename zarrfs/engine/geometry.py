"""Pure geometry of a read: C-order element ranges → boxes → blocks of chunks (no I/O).

A byte range of an array's C-order element stream is widened to whole
elements, cut into at most 2·ndim hyperrectangles (each a contiguous run of
the output), and each box into the blocks of the chunks it crosses on the
array's `ChunkGrid`: (chunk coords, slices in the chunk as stored, slices in
the box). The reader only copies.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..model.grids import Box, ChunkGrid

Coords = tuple[int, ...]
# One chunk's part of a box: (chunk coords, block in the chunk, block in the box). The block in
# the chunk may index a leading axis with an int (it then has fewer axes than the chunk).
Block = tuple[Coords, tuple[int | slice, ...], tuple[slice, ...]]


@dataclass(frozen=True)
class BoxPlan:
    """One box of a read: where it starts in the output (elements), its shape, its blocks."""

    position: int
    shape: tuple[int, ...]
    blocks: list[Block]


def element_range(start: int, stop: int, itemsize: int) -> tuple[int, int, int]:
    """(first element, end element, bytes to skip in the first) covering bytes [start, stop)."""
    first, skip = divmod(start, itemsize)
    return first, -(-stop // itemsize), skip


def linear_boxes(first: int, last: int, shape: tuple[int, ...]) -> list[Box]:
    """Hyperrectangles covering C-order elements [first, last), in order."""
    if first >= last:
        return []
    if not shape:
        return [((), ())]
    row = math.prod(shape[1:])
    sub = shape[1:]
    r0, r1 = divmod(first, row)
    r_last, end_in_row = divmod(last, row)
    if r0 == r_last or (r0 + 1 == r_last and end_in_row == 0 and r1 != 0):
        # Everything in one row of the leading axis.
        stop = end_in_row if r0 == r_last else row
        return [((r0, *lo), (r0 + 1, *hi)) for lo, hi in linear_boxes(r1, stop, sub)]
    boxes: list[Box] = []
    if r1:
        boxes += [((r0, *lo), (r0 + 1, *hi)) for lo, hi in linear_boxes(r1, row, sub)]
        r0 += 1
    if r_last > r0:
        boxes.append(((r0, *(0 for _ in sub)), (r_last, *sub)))
    if end_in_row:
        boxes += [((r_last, *lo), (r_last + 1, *hi)) for lo, hi in linear_boxes(0, end_in_row, sub)]
    return boxes


def box_blocks(grid: ChunkGrid, box: Box) -> list[Block]:
    """The blocks of the chunks a non-empty box crosses, in C order of the chunks."""
    lo, hi = box
    per_axis: list[list[tuple[int, slice, slice]]] = []  # (chunk, in chunk, in box) per axis
    for axis, a, b, touched in zip(grid.axes, lo, hi, grid.touched(box), strict=True):
        parts = []
        for c in touched:
            base = axis.start(c)
            begin = max(a, base)
            end = min(b, base + axis.edge(c))
            parts.append((c, slice(begin - base, end - base), slice(begin - a, end - a)))
        per_axis.append(parts)
    return [(tuple(p[0] for p in combo), tuple(p[1] for p in combo), tuple(p[2] for p in combo))
            for combo in itertools.product(*per_axis)]


def plan_elements(grid: ChunkGrid, first: int, last: int) -> list[BoxPlan]:
    """Boxes of C-order elements [first, last) and the blocks that fill each.

    The reads that come most (a random pread: part of one row; a stream's
    1 MiB read of a wide array: whole rows inside one band of chunks) are one
    box of column slices of a few chunks, planned without the general box
    decomposition (`_row_box`).
    """
    row = _row_box(grid, first, last) if last > first else None
    if row is not None:
        return [row]
    plans = []
    position = 0
    for box in linear_boxes(first, last, grid.shape):
        shape = tuple(b - a for a, b in zip(*box, strict=True))
        plans.append(BoxPlan(position, shape, box_blocks(grid, box)))
        position += math.prod(shape)
    return plans


def _row_box(grid: ChunkGrid, first: int, last: int) -> BoxPlan | None:
    """The one box of a non-empty read that is part of one row of the last axis, or whole rows that
    stay inside one chunk along every other axis; None for any other read."""
    if not grid.shape:
        return None
    width = grid.shape[-1]
    row, column = divmod(first, width)
    rows = 1
    if last - row * width > width:  # crosses into the next row
        if column or last % width or len(grid.shape) < 2:
            return None
        rows = (last - first) // width
    lead: list[int] = []
    within: list[int] = []
    for axis in reversed(grid.axes[:-1]):
        row, i = divmod(row, axis.extent)
        chunk, offset = axis.locate(i)
        lead.append(chunk)
        within.append(offset)
    lead.reverse()
    within.reverse()
    if rows > 1 and (within[-1] + rows > grid.axes[-2].edge(lead[-1])
                     or grid.axes[-2].start(lead[-1]) + within[-1] + rows > grid.axes[-2].extent):
        return None  # the rows leave the chunk, or the array's extent along the axis before the last
    columns_read = (last - first) // rows
    # In the chunk: a row (an index per leading axis), or rows; in the box: all its rows.
    rows_in_chunk: tuple[int | slice, ...] = tuple(within) if rows == 1 else \
        (*within[:-1], slice(within[-1], within[-1] + rows))
    rows_in_box: tuple[slice, ...] = () if rows == 1 else (slice(None),)
    columns = grid.axes[-1]
    blocks: list[Block] = []
    c, lo = columns.locate(column)
    base = column - lo
    while base < column + columns_read:
        stop = base + columns.edge(c)
        hi = min(column + columns_read, stop) - base
        at = base + lo - column
        blocks.append(((*lead, c), (*rows_in_chunk, slice(lo, hi)), (*rows_in_box, slice(at, at + hi - lo))))
        c, lo, base = c + 1, 0, stop
    return BoxPlan(0, (columns_read,) if rows == 1 else (rows, columns_read), blocks)


def chunks_of_elements(grid: ChunkGrid, first: int, last: int) -> list[Coords]:
    """Every chunk that holds one of C-order elements [first, last), each once, in read order."""
    return list(dict.fromkeys(c for box in linear_boxes(first, last, grid.shape) for c in grid.chunks_in(box)))
