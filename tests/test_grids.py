"""Chunk grids (regular, rectilinear) and the pure read geometry, against numpy slicing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from budget import examples
from zarrfs.engine.geometry import chunks_of_elements, element_range, plan_elements
from zarrfs.errors import MetadataError, UnsupportedError
from zarrfs.model.grids import ChunkGrid, RectilinearGrid, RegularGrid, parse_rectilinear, refine


def rectilinear(shape: tuple[int, ...], chunk_shapes: list) -> RectilinearGrid:
    return parse_rectilinear({"kind": "inline", "chunk_shapes": chunk_shapes}, shape, "test")


def edges_of(grid: ChunkGrid, axis: int) -> list[int]:
    return [grid.axes[axis].edge(i) for i in range(grid.grid_shape[axis])]


@pytest.mark.parametrize(("spec", "extent", "edges"), [
    (4, 6, [4, 4]),  # an integer: a regular step
    ([1, 2, 3], 6, [1, 2, 3]),
    ([[4, 2]], 6, [4, 4]),  # run-length
    ([[1, 3], 3], 6, [1, 1, 1, 3]),  # run-length mixed with plain lengths
    ([4, 4, 4], 6, [4, 4]),  # chunks past the end hold nothing: not in the grid
    ([[2, 3], 1, [5, 2]], 17, [2, 2, 2, 1, 5, 5]),  # as zarr-python 3.4.2 writes it
    ([[1, 10**15]], 5, [1] * 5),  # a huge run costs nothing
    ([3], 0, []),  # an empty axis
])
def test_edges(spec: object, extent: int, edges: list[int]) -> None:
    grid = rectilinear((extent,), [spec])
    assert edges_of(grid, 0) == edges
    starts = np.cumsum([0, *edges])
    for x in range(extent):
        chunk, offset = grid.axes[0].locate(x)
        assert starts[chunk] <= x < starts[chunk + 1] and offset == x - starts[chunk]


@pytest.mark.parametrize(("chunk_shapes", "shape", "words"), [
    ([[2, 2]], (5,), "less than the array's extent 5"),
    ([[2, 0, 3]], (5,), "positive"),
    ([[2, -1, 4]], (5,), "positive"),
    ([[[2, 0]]], (5,), "positive"),
    ([[[2, -3]]], (5,), "positive"),
    ([0], (5,), "positive"),
    ([[[2**62, 4]]], (5,), "overflows int64"),
    ([[[2**64, 1]]], (5,), "overflows int64"),
    ([[2**62, 2**62, 2**62]], (2**63 - 1,), "past int64"),
    ([[2, 3]], (5, 5), "2 axes"),
    ([[2, "3"]], (5,), "length or a [length, count] pair"),
    ([[[2, 3, 4]]], (5,), "length or a [length, count] pair"),
    ([[True]], (5,), "length or a [length, count] pair"),
    ([[]], (5,), "non-empty list"),
    (None, (5,), "list of 1 axes"),
])
def test_bad_edges(chunk_shapes: object, shape: tuple[int, ...], words: str) -> None:
    with pytest.raises(MetadataError, match=r"test.*") as raised:
        rectilinear(shape, chunk_shapes)  # type: ignore[arg-type]
    assert words in str(raised.value)


def test_unknown_kind_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="kind 'file'"):
        parse_rectilinear({"kind": "file", "chunk_shapes": [[5]]}, (5,), "test")


def test_sharding_refines_each_run_of_shards() -> None:
    grid = rectilinear((9, 6), [[4, 6], [4, 3]])
    with pytest.raises(MetadataError, match="does not divide"):
        refine(grid, (2, 2), "test")
    inner = refine(grid, (2, 1), "test")
    assert edges_of(inner, 0) == [2] * 5 and edges_of(inner, 1) == [1] * 6
    assert refine(RegularGrid((9, 6), (4, 3)), (2, 1), "test") == RegularGrid((9, 6), (2, 1))


def test_band_of_varying_height() -> None:
    grid = rectilinear((10, 7), [[3, 5, 2], [4, 4]])
    assert grid.band_nbytes(2) == 5 * 8 * 2  # the tallest band, stored chunks full size
    assert RegularGrid((10, 7), (3, 4)).band_nbytes(2) == 3 * 8 * 2


# ------------------------------------------------- geometry against numpy


@st.composite
def grids(draw: st.DrawFn) -> tuple[ChunkGrid, np.ndarray]:
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    if draw(st.booleans()):
        grid: ChunkGrid = RegularGrid(shape, tuple(draw(st.integers(1, 5)) for _ in shape))
    else:
        specs = []
        for extent in shape:
            edges = draw(st.lists(st.integers(1, 5), min_size=1, max_size=12))
            while sum(edges) < extent:
                edges.append(draw(st.integers(1, 5)))
            if draw(st.booleans()):
                edges += draw(st.lists(st.integers(1, 5), max_size=2))  # overhang past the end
            specs.append(_run_length(edges) if draw(st.booleans()) else edges)
        grid = rectilinear(shape, specs)
    dtype = np.dtype(draw(st.sampled_from(["u1", "<i2", ">f4", "<c16", "V3"])))
    array = np.frombuffer(np.random.default_rng(0).bytes(math.prod(shape) * dtype.itemsize), dtype).reshape(shape)
    return grid, array


def _run_length(edges: list[int]) -> list[object]:
    runs: list[object] = []
    for edge in edges:
        if runs and isinstance(runs[-1], list) and runs[-1][0] == edge:
            runs[-1][1] += 1
        else:
            runs.append([edge, 1])
    return runs


def chunk_of(grid: ChunkGrid, array: np.ndarray, coords: tuple[int, ...]) -> np.ndarray:
    """Chunk `coords` as stored: its full edge lengths, past the array's end padded."""
    lo, hi = grid.chunk_box(coords)
    stored = np.zeros(grid.stored_shape(coords), array.dtype)
    stored[tuple(slice(0, b - a) for a, b in zip(lo, hi, strict=True))] = array[tuple(map(slice, lo, hi))]
    return stored


@settings(max_examples=examples(300), deadline=None)
@given(grids(), st.data())
def test_row_plans_of_whole_rows_fill_as_numpy(case: tuple[ChunkGrid, np.ndarray], data: st.DataObject) -> None:
    """Reads of whole rows of the last axis (a stream's 1 MiB reads of a wide array) planned as
    column slices of the chunks of one band when the rows stay in one, else as general boxes."""
    grid, array = case
    assume(array.ndim >= 2 and array.size > 0)
    width = array.shape[-1]
    n_rows = array.size // width
    r0 = data.draw(st.integers(0, n_rows - 1))
    r1 = data.draw(st.integers(r0 + 1, n_rows))
    plans = plan_elements(grid, r0 * width, r1 * width)
    rows = array.reshape(n_rows, width)[r0:r1]
    leading = np.unravel_index(np.arange(r0, r1), array.shape[:-1])
    chunk_rows = {tuple(axis.locate(int(i))[0] for axis, i in zip(grid.axes[:-1], index, strict=True))
                  for index in zip(*leading, strict=True)}
    same_lead = all(len(set(map(int, idx))) == 1 for idx in leading[:-1])
    if len(chunk_rows) == 1 and same_lead:  # one band: one box of column slices, whatever the rows
        assert len(plans) == 1 and plans[0].shape == ((width,) if r1 - r0 == 1 else (r1 - r0, width))
        assert len(plans[0].blocks) == grid.axes[-1].count
    out = np.zeros(rows.size, array.dtype)
    for box in plans:
        view = out[box.position:box.position + math.prod(box.shape)].reshape(box.shape)
        for coords, src, dst in box.blocks:
            (view[dst] if dst else view)[...] = chunk_of(grid, array, coords)[src]
    assert out.tobytes() == rows.tobytes()


@settings(max_examples=examples(300), deadline=None)
@given(grids(), st.data())
def test_plans_fill_any_byte_range_as_numpy(case: tuple[ChunkGrid, np.ndarray], data: st.DataObject) -> None:
    grid, array = case
    flat = array.tobytes()
    start = data.draw(st.integers(0, len(flat)))
    stop = data.draw(st.integers(start, len(flat)))
    first, last, skip = element_range(start, stop, array.dtype.itemsize)
    out = np.zeros(last - first, array.dtype)
    for box in plan_elements(grid, first, last):
        view = out[box.position:box.position + math.prod(box.shape)].reshape(box.shape)
        for coords, src, dst in box.blocks:
            (view[dst] if dst else view)[...] = chunk_of(grid, array, coords)[src]
    assert out.tobytes()[skip:skip + stop - start] == flat[start:stop]
    touched = chunks_of_elements(grid, first, last)
    assert len(set(touched)) == len(touched)
    assert set(touched) == {c for box in plan_elements(grid, first, last) for c, _, _ in box.blocks}
