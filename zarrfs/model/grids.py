"""Chunk grids as data: where each chunk of an array lies, and what shape it is stored at.

Two grids, one set of questions (the reader never asks which grid it has):

* `RegularGrid`: every chunk has `chunk_shape`; edge chunks overhang the array
  and are stored full size (Zarr v2 and v3 core).
* `RectilinearGrid` (zarr-extensions `chunk-grids/rectilinear`): per axis a
  sequence of edge lengths, kept as runs of equal lengths so that a run-length
  pair like `[1, 10**9]` costs one entry, not a billion. The sum of an axis's
  edges may exceed the array's extent; chunks past the end hold no element and
  a chunk across the end is stored at its full edge length (what zarr-python
  3.4.2 writes), like a regular edge chunk.

An axis answers in chunk indices along it; a grid combines its axes.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import MetadataError, UnsupportedError

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (start, stop) per dimension
# Bounds on hostile metadata: more chunk runs than a metadata document can sensibly hold, or
# edges whose sum or count do not fit int64, are refused rather than computed with.
MAX_RUNS_PER_AXIS = 1 << 20
_MAX_INT64 = 2**63 - 1


class Axis(Protocol):
    @property
    def extent(self) -> int: ...  # the array's length along the axis

    @property
    def count(self) -> int: ...  # chunks that hold at least one element

    def start(self, i: int) -> int: ...  # first element of chunk i

    def edge(self, i: int) -> int: ...  # stored length of chunk i (may overhang `extent`)

    def locate(self, x: int) -> tuple[int, int]: ...  # (chunk, offset in it) of element x

    def max_edge(self) -> int: ...

    def uniform_edge(self) -> int | None: ...  # the one length of all its chunks, None if they differ

    def stored_extent(self) -> int: ...  # sum of the stored lengths of the `count` chunks


@dataclass(frozen=True)
class RegularAxis:
    extent: int
    step: int

    @property
    def count(self) -> int:
        return -(-self.extent // self.step)

    def start(self, i: int) -> int:
        return i * self.step

    def edge(self, i: int) -> int:
        return self.step

    def locate(self, x: int) -> tuple[int, int]:
        return divmod(x, self.step)

    def max_edge(self) -> int:
        return self.step

    def uniform_edge(self) -> int | None:
        return self.step

    def stored_extent(self) -> int:
        return self.count * self.step


@dataclass(frozen=True)
class RunAxis:
    """Edges as runs: run k has `counts[k]` chunks of length `lengths[k]`, its first chunk
    being chunk `first_chunk[k]` at element `first_element[k]` (both cumulative, for bisection).
    Only the runs that reach into [0, extent) are kept."""

    extent: int
    lengths: tuple[int, ...]
    counts: tuple[int, ...]
    first_chunk: tuple[int, ...]
    first_element: tuple[int, ...]

    @property
    def count(self) -> int:
        return self.first_chunk[-1] + self.counts[-1] if self.extent else 0

    def _run_of_chunk(self, i: int) -> int:
        return bisect.bisect_right(self.first_chunk, i) - 1

    def start(self, i: int) -> int:
        k = self._run_of_chunk(i)
        return self.first_element[k] + (i - self.first_chunk[k]) * self.lengths[k]

    def edge(self, i: int) -> int:
        return self.lengths[self._run_of_chunk(i)]

    def locate(self, x: int) -> tuple[int, int]:
        k = bisect.bisect_right(self.first_element, x) - 1
        within_run, offset = divmod(x - self.first_element[k], self.lengths[k])
        return self.first_chunk[k] + within_run, offset

    def max_edge(self) -> int:
        return max(self.lengths)

    def uniform_edge(self) -> int | None:
        return self.lengths[0] if len(self.lengths) == 1 else None

    def stored_extent(self) -> int:
        return sum(n * c for n, c in zip(self.lengths, self.counts, strict=True))


class _Grid:
    """What both grids answer, from their axes."""

    shape: tuple[int, ...]
    axes: tuple[Axis, ...]

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(axis.count for axis in self.axes)

    def stored_shape(self, coords: tuple[int, ...]) -> tuple[int, ...]:
        """The shape chunk `coords` is stored (and decodes) at."""
        return tuple(axis.edge(c) for axis, c in zip(self.axes, coords, strict=True))

    def max_stored_shape(self) -> tuple[int, ...]:
        return tuple(axis.max_edge() for axis in self.axes)

    def chunk_box(self, coords: tuple[int, ...]) -> Box:
        """Elements of the array chunk `coords` holds, (start, stop) per axis (clipped to the array)."""
        starts = tuple(axis.start(c) for axis, c in zip(self.axes, coords, strict=True))
        stops = tuple(min(a + axis.edge(c), axis.extent) for axis, c, a in zip(self.axes, coords, starts, strict=True))
        return starts, stops

    def touched(self, box: Box) -> list[range]:
        """Per axis, the chunk indices a non-empty box touches."""
        return [range(axis.locate(a)[0], axis.locate(b - 1)[0] + 1)
                for axis, a, b in zip(self.axes, box[0], box[1], strict=True)]

    def chunks_in(self, box: Box) -> Iterator[tuple[int, ...]]:
        return itertools.product(*self.touched(box))

    def band_nbytes(self, itemsize: int) -> int:
        """Bytes of the largest band: the chunks sharing one index along the first axis,
        which a C-order read of the array crosses together (the readahead unit)."""
        if not self.axes:
            return itemsize
        rest = math.prod(axis.stored_extent() for axis in self.axes[1:])
        return self.axes[0].max_edge() * rest * itemsize


@dataclass(frozen=True)
class RegularGrid(_Grid):
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    axes: tuple[Axis, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes", tuple(RegularAxis(s, c) for s, c in zip(self.shape, self.chunk_shape,
                                                                                   strict=True)))

    def describe(self) -> dict[str, Any]:
        return {"name": "regular", "chunk_shape": list(self.chunk_shape)}


@dataclass(frozen=True)
class RectilinearGrid(_Grid):
    shape: tuple[int, ...]
    axes: tuple[RunAxis, ...]

    def describe(self) -> dict[str, Any]:
        """The edges as the spec writes them: a run of one chunk as its bare length."""
        return {"name": "rectilinear",
                "chunk_shapes": [[n if c == 1 else [n, c] for n, c in zip(a.lengths, a.counts, strict=True)]
                                 for a in self.axes]}


ChunkGrid = RegularGrid | RectilinearGrid


def parse_rectilinear(config: dict[str, Any], shape: tuple[int, ...], where: str) -> RectilinearGrid:
    """The `rectilinear` chunk grid's configuration, checked against the array's shape."""
    unknown = set(config) - {"kind", "chunk_shapes"}
    if unknown:
        raise MetadataError(f"{where}: rectilinear chunk grid: unknown configuration {sorted(unknown)}")
    if config.get("kind") != "inline":  # the spec leaves room for other kinds: unknown ones are unsupported
        raise UnsupportedError(f"{where}: rectilinear chunk grid of kind {config.get('kind')!r} is not supported "
                               f"(only 'inline')")
    chunk_shapes = config.get("chunk_shapes")
    if not isinstance(chunk_shapes, list) or len(chunk_shapes) != len(shape):
        raise MetadataError(f"{where}: rectilinear chunk_shapes must be a list of {len(shape)} axes, "
                            f"got {chunk_shapes!r:.200}")
    return RectilinearGrid(shape, tuple(_parse_axis(spec, extent, f"{where}: rectilinear axis {n}")
                                        for n, (spec, extent) in enumerate(zip(chunk_shapes, shape, strict=True))))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_axis(spec: Any, extent: int, where: str) -> RunAxis:
    runs: list[tuple[int, int]] = []  # (length, count), adjacent equal lengths merged
    if _is_int(spec):  # a regular step: as many chunks as cover the extent (one for an empty axis)
        items: list[Any] = [[spec, max(1, -(-extent // spec))]] if spec > 0 else [spec]
    elif isinstance(spec, list) and spec:
        items = spec
    else:
        raise MetadataError(f"{where}: edges must be an integer or a non-empty list, got {spec!r:.200}")
    if len(items) > MAX_RUNS_PER_AXIS:
        raise MetadataError(f"{where}: more than {MAX_RUNS_PER_AXIS} edge entries")
    for item in items:
        if _is_int(item):
            length, count = item, 1
        elif isinstance(item, list) and len(item) == 2 and all(_is_int(v) for v in item):
            length, count = item
        else:
            raise MetadataError(f"{where}: an edge must be a length or a [length, count] pair, got {item!r:.100}")
        if length <= 0 or count <= 0:
            raise MetadataError(f"{where}: edge lengths and run counts must be positive, got {item!r}")
        if length > _MAX_INT64 or count > _MAX_INT64 or length * count > _MAX_INT64:
            raise MetadataError(f"{where}: edge run {item!r} overflows int64")
        if runs and runs[-1][0] == length:
            runs[-1] = (length, runs[-1][1] + count)
        else:
            runs.append((length, count))
    return _covering_runs(runs, extent, where)


def _covering_runs(runs: list[tuple[int, int]], extent: int, where: str) -> RunAxis:
    """Keep the runs up to the chunk holding the last element; refuse edges that stop short."""
    lengths: list[int] = []
    counts: list[int] = []
    first_chunk: list[int] = []
    first_element: list[int] = []
    chunk = element = 0
    for length, count in runs:
        if element >= extent and lengths:
            break  # the rest lies wholly past the array's end: no element lives there
        needed = max(1, -(-(extent - element) // length))
        count = min(count, needed)
        lengths.append(length)
        counts.append(count)
        first_chunk.append(chunk)
        first_element.append(element)
        chunk += count
        element += count * length
        if element > _MAX_INT64:
            raise MetadataError(f"{where}: edges sum past int64")
    if element < extent:
        raise MetadataError(f"{where}: edges sum to {element}, less than the array's extent {extent}")
    return RunAxis(extent, tuple(lengths), tuple(counts), tuple(first_chunk), tuple(first_element))


def refine(grid: ChunkGrid, inner: tuple[int, ...], where: str) -> ChunkGrid:
    """The grid of the inner chunks of sharding `inner` over the shards of `grid`.

    Sharding needs one regular inner chunk shape, dividing every shard edge.
    Over a regular grid the inner grid is regular; over a rectilinear one each
    run of shards becomes a run of inner chunks.
    """
    if isinstance(grid, RegularGrid):
        return RegularGrid(grid.shape, inner)
    axes = []
    for n, (axis, step) in enumerate(zip(grid.axes, inner, strict=True)):
        if any(length % step for length in axis.lengths):
            raise MetadataError(f"{where}: inner chunk length {step} does not divide the shard edges "
                                f"{sorted(set(axis.lengths))} of axis {n}")
        # Every run becomes inner chunks of one length: one run.
        chunks = sum(count * (length // step) for length, count in zip(axis.lengths, axis.counts, strict=True))
        axes.append(_covering_runs([(step, chunks)], axis.extent, where))
    return RectilinearGrid(grid.shape, tuple(axes))
