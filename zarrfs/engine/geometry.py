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
# One chunk's part of a box: (chunk coords, block in the chunk, block in the box).
Block = tuple[Coords, tuple[slice, ...], tuple[slice, ...]]


@dataclass(frozen=True)
class BoxPlan:
    """One box of a read: where it starts in the output (elements), its shape, its blocks."""

    position: int
    shape: tuple[int, ...]
    blocks: list[Block]


@dataclass(frozen=True)
class RowPlan:
    """A read inside one row of the last axis: the leading index in each chunk it crosses, and per
    chunk (coords, columns lo:hi of it, where they go in the output)."""

    within: tuple[int, ...]
    pieces: list[tuple[Coords, int, int, int]]


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
    """Boxes of C-order elements [first, last) and the blocks that fill each."""
    plans = []
    position = 0
    for box in linear_boxes(first, last, grid.shape):
        shape = tuple(b - a for a, b in zip(*box, strict=True))
        plans.append(BoxPlan(position, shape, box_blocks(grid, box)))
        position += math.prod(shape)
    return plans


def plan_row(grid: ChunkGrid, first: int, last: int) -> RowPlan | None:
    """The plan of a non-empty read that stays inside one row of the last axis; None if it does not.

    Random small reads (a 4 KiB pread) nearly always do: then the elements
    are slices of at most a few chunk rows, with no box decomposition.
    """
    if not grid.shape:
        return None
    width = grid.shape[-1]
    row, column = divmod(first, width)
    if last - row * width > width:  # crosses into the next row
        return None
    lead: list[int] = []
    within: list[int] = []
    for axis in reversed(grid.axes[:-1]):
        row, i = divmod(row, axis.extent)
        chunk, offset = axis.locate(i)
        lead.append(chunk)
        within.append(offset)
    lead.reverse()
    within.reverse()
    column_stop = column + (last - first)
    columns = grid.axes[-1]
    pieces = []
    c, lo = columns.locate(column)
    base = column - lo
    while base < column_stop:
        stop = base + columns.edge(c)
        pieces.append(((*lead, c), lo, min(column_stop, stop) - base, base + lo - column))
        c, lo, base = c + 1, 0, stop
    return RowPlan(tuple(within), pieces)


def chunks_of_elements(grid: ChunkGrid, first: int, last: int) -> list[Coords]:
    """Every chunk that holds one of C-order elements [first, last), each once, in read order."""
    return list(dict.fromkeys(c for box in linear_boxes(first, last, grid.shape) for c in grid.chunks_in(box)))
