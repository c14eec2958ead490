"""`CachedReads.serve_into` (engine/_cached_reads.c) and the Python reader driven by the same random
plans: grids, dtypes, offsets and sizes at any alignment (header bytes too), chunks evicted from C
between reads. Wherever C answers, its bytes are the Python reader's and numpy's; it refuses a
read only when a chunk the read needs is not in C (or the read is not all in the element region).
Also a file of two regions over one array, the second byte-swapped (a NetCDF file's variables)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, ZstdCodec

from budget import examples
from zarrfs.engine.engine import Engine
from zarrfs.options import EngineOptions
from zarrfs.files.tree import VirtualTree

FH = 9


@st.composite
def grids(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 12)) for _ in range(ndim))
    edges = tuple(draw(st.integers(1, extent + 2)) for extent in shape)  # edges past the array too
    dtype = draw(st.sampled_from(["|u1", "<u2", ">i4", "<f8", ">u8"]))
    return shape, edges, dtype


plans = st.lists(st.one_of(st.tuples(st.just("read"), st.integers(0, 1 << 12), st.integers(1, 1 << 11)),
                           st.tuples(st.just("evict"), st.integers(0, 1 << 12), st.just(0))), min_size=1, max_size=30)


def chunks_of(offset: int, size: int, header: int, shape: tuple[int, ...], edges: tuple[int, ...],
              itemsize: int) -> set[int]:
    """Flat indices of the chunks holding file bytes [offset, offset + size) of the element region."""
    first, last = (offset - header) // itemsize, (offset + size - 1 - header) // itemsize
    coords = np.unravel_index(np.arange(first, last + 1), shape)
    counts = [-(-extent // edge) for extent, edge in zip(shape, edges, strict=True)]
    return set(np.ravel_multi_index([c // edge for c, edge in zip(coords, edges, strict=True)], counts).tolist())


def _written(path: Path, grid: tuple[tuple[int, ...], tuple[int, ...], str], seed: int) -> tuple[np.ndarray, Path]:
    """Random values of the grid's shape and dtype, and the zstd Zarr v3 array zarr-python wrote of them."""
    shape, edges, dtype = grid
    itemsize = np.dtype(dtype).itemsize
    truth = np.random.default_rng(seed).integers(0, 255, size=int(np.prod(shape)) * itemsize, dtype=np.uint8)
    truth = truth.view(dtype).reshape(shape)
    endian = "big" if np.dtype(dtype).byteorder == ">" else "little"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.create_array(str(path), shape=shape, chunks=edges, dtype=dtype, compressors=[ZstdCodec(level=1)],
                          serializer=BytesCodec(endian=endian) if itemsize > 1 else BytesCodec(),
                          fill_value=0)[...] = truth
    return truth, path


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(grid=grids(), plan=plans, seed=st.integers(0, 2**32 - 1))
def test_c_and_python_serve_the_same_bytes(tmp_path_factory, grid, plan, seed) -> None:  # noqa: ANN001
    shape, edges, _ = grid
    truth, path = _written(tmp_path_factory.mktemp("plan") / "a.zarr", grid, seed)
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        handle = VirtualTree(engine, root_name="a").open("/a.npy")
        served = handle.region.c_layout
        assert served is not None
        token, header, region, itemsize, c_shape, c_edges, swap = served
        assert (c_shape, c_edges, region, swap) == (shape, edges, truth.nbytes, 0)
        table = engine.cache.served.table
        table.open_file(FH, token, header, region, itemsize, c_shape, c_edges)
        table.allow_stream(FH, region)  # a stream's reads are allowed too: every read may be answered
        whole = np.empty(handle.size, np.uint8)
        assert handle.read_into(0, whole) == handle.size  # Python reads (and caches) every chunk
        assert whole[header:].tobytes() == truth.tobytes()
        counts = [-(-extent // edge) for extent, edge in zip(shape, edges, strict=True)]
        in_c = set(range(int(np.prod(counts))))
        for action, where, size in plan:
            if action == "evict":
                index = where % int(np.prod(counts))
                table.remove_chunk(token, index)
                in_c.discard(index)
                continue
            offset = where % handle.size
            out = np.full(size, 0xA5, np.uint8)
            python = np.empty(size, np.uint8)
            got = table.serve_into(FH, out, offset)
            expected = whole[offset:offset + size]
            python_got = handle.read_into(offset, python)
            assert python[:python_got].tobytes() == expected.tobytes()
            if got >= 0:
                assert got == size
                assert out.tobytes() == expected.tobytes() == python[:got].tobytes()
            else:
                inside = offset >= header and offset + size <= header + region
                assert not inside or not chunks_of(offset, size, header, shape, edges, itemsize) <= in_c
    finally:
        engine.close()


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(grid=grids(), reads=st.lists(st.tuples(st.integers(0, 1 << 12), st.integers(1, 1 << 10)), min_size=1,
                                    max_size=30),
       gap=st.integers(0, 9), seed=st.integers(0, 2**32 - 1))
def test_c_serves_each_region_of_a_file_the_second_byte_swapped(tmp_path_factory, grid, reads, gap,  # noqa: ANN001
                                                                  seed) -> None:
    """Regions [0, n) as stored and [n + gap, 2n + gap) with each element's bytes reversed: C answers a
    read of whole elements within one region with the file's bytes, and nothing else."""
    itemsize = np.dtype(grid[2]).itemsize
    truth, path = _written(tmp_path_factory.mktemp("regions") / "a.zarr", grid, seed)
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        handle = VirtualTree(engine, root_name="a").open("/a.npy")
        assert handle.region is not None and handle.region.c_layout is not None
        token, header, n, _, c_shape, c_edges, _ = handle.region.c_layout
        whole = np.empty(handle.size, np.uint8)
        handle.read_into(0, whole)  # every chunk cached
        swap = itemsize if itemsize > 1 else 0
        second = n + gap
        table = engine.cache.served.table
        table.open_file(FH, token, 0, n, itemsize, c_shape, c_edges)
        table.open_file(FH, token, second, n, itemsize, c_shape, c_edges, swap)
        table.allow_stream(FH, n)  # every region's stream
        swapped = truth.byteswap().view(np.uint8).ravel()
        reference = np.concatenate([truth.view(np.uint8).ravel(), np.zeros(gap, np.uint8), swapped])
        for where, size in reads:
            offset = where % (second + n)
            out = np.full(size, 0xA5, np.uint8)
            got = table.serve_into(FH, out, offset)
            in_first = offset + size <= n
            in_second = offset >= second and offset + size <= second + n and \
                (swap == 0 or ((offset - second) % swap == 0 and size % swap == 0))
            assert (got == size) == (in_first or in_second), (offset, size, got)
            if got >= 0:
                assert out.tobytes() == reference[offset:offset + size].tobytes()
        if n > 1:  # (a region at the same begin replaces the one there)
            with pytest.raises(ValueError, match="overlaps"):
                table.open_file(FH, token, 1, n - 1, itemsize, c_shape, c_edges)
        table.close_file(FH)  # every region
        assert table.serve_into(FH, np.empty(1, np.uint8), 0) < 0
        assert table.serve_into(FH, np.empty(1, np.uint8), second) < 0
    finally:
        engine.close()
