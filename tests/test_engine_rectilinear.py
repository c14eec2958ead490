"""Rectilinear chunk grids as zarr-python 3.4.2 writes them, read by zarrfs.

zarr-python writes them behind `array.rectilinear_chunks`: per axis a list of
edge lengths (run-length pairs where lengths repeat), summing to the extent;
sharded arrays get rectilinear *shards* with one regular inner chunk shape.
Shrinking an array keeps its edges, so the grid then overhangs the end: here
that is done by patching the written document's shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mountutil import mounted
from test_engine_zp34 import NAN_AS_ZERO, ZSTD_CHECKSUM, assert_same, cast_value, read_all, scale_offset
from zp3x import Writer, zp3x  # noqa: F401  (zp3x is the fixture)
from zarrfs.engine.engine import Engine
from zarrfs.engine.readahead import ReadStream
from zarrfs.errors import MetadataError

RECTILINEAR = {"array.rectilinear_chunks": True}
RNG = np.random.default_rng(14)
BLOSC = {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "bitshuffle", "typesize": 4}}
BIG_ENDIAN = {"name": "bytes", "configuration": {"endian": "big"}}


def values(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return (RNG.integers(0, 100, math.prod(shape)) + 0.25 * (np.dtype(dtype).kind == "f")).astype(dtype).reshape(shape)


# id -> (create_array arguments, region written or None for all, patched metadata or None)
CASES: dict[str, tuple[dict[str, Any], list[tuple[int, int]] | None, dict[str, Any] | None]] = {
    "uncompressed": ({"shape": [10, 7], "chunks": [[3, 5, 2], [4, 3]], "dtype": "<i2", "compressors": None},
                     None, None),
    "zstd-run-lengths": ({"shape": [17, 9], "chunks": [[2, 2, 2, 1, 5, 5], [3, 3, 3]], "dtype": "<f4"}, None, None),
    "blosc-missing-chunks-fill": ({"shape": [12, 11], "chunks": [[1, 6, 5], [2, 9]], "dtype": "<f4",
                                   "fill_value": -7.5, "compressors": [BLOSC]}, [(0, 6), (0, 2)], None),
    "nan-fill-scale-offset-cast": ({"shape": [20], "chunks": [[4, 9, 7]], "dtype": "float64", "fill_value": "NaN",
                                    "filters": [scale_offset(-10, 10), cast_value("uint16", scalar_map=NAN_AS_ZERO)],
                                    "compressors": [ZSTD_CHECKSUM]}, [(2, 15)], None),
    "big-endian-3d": ({"shape": [5, 6, 7], "chunks": [[2, 3], [1, 5], [4, 3]], "dtype": ">i4",
                       "serializer": BIG_ENDIAN, "compressors": None}, None, None),
    "uint8-one-chunk-per-row": ({"shape": [6, 33], "chunks": [[1, 1, 1, 1, 1, 1], [33]], "dtype": "u1"}, None, None),
    "overhang-uncompressed": ({"shape": [10, 7], "chunks": [[3, 5, 2], [4, 3]], "dtype": "<i2",
                               "compressors": None}, None, {"shape": [8, 5]}),
    "overhang-zstd": ({"shape": [10, 7], "chunks": [[3, 5, 2], [4, 3]], "dtype": "<u8"}, None, {"shape": [7, 6]}),
    "sharded": ({"shape": [10, 9], "chunks": [2, 3], "shards": [[4, 6], [6, 3]], "dtype": "<f8"}, None, None),
    "sharded-missing-inner": ({"shape": [10, 9], "chunks": [2, 3], "shards": [[4, 6], [6, 3]], "dtype": "<i4",
                               "fill_value": 3}, [(0, 3), (1, 5)], None),
    "sharded-uncompressed": ({"shape": [12, 8], "chunks": [3, 2], "shards": [[3, 9], [4, 4]], "dtype": "<u2",
                              "compressors": None}, None, None),
    "sharded-overhang": ({"shape": [10, 9], "chunks": [2, 3], "shards": [[4, 6], [6, 3]], "dtype": "<f4"},
                         None, {"shape": [9, 7]}),
}


def write_case(zp3x: Writer, store: Path, name: str, create: dict[str, Any], region: Any,
               metadata: dict[str, Any] | None) -> Any:
    shape = tuple(create["shape"]) if region is None else tuple(b - a for a, b in region)
    written = zp3x.write(store, name, create, data=values(shape, create["dtype"]), region=region,
                         metadata=metadata, config=RECTILINEAR)
    assert written.ok, written.error
    return written


@pytest.mark.parametrize("case", CASES)
def test_reads_what_zarr_python_writes(case: str, zp3x: Writer, tmp_path: Path,
                                       open_engine: Callable[..., Engine]) -> None:
    create, region, metadata = CASES[case]
    store = tmp_path / "s.zarr"
    written = write_case(zp3x, store, "a", create, region, metadata)
    doc = json.loads((store / "a" / "zarr.json").read_text())
    assert doc["chunk_grid"]["name"] == "rectilinear"
    engine = open_engine(store)
    got = read_all(engine, "a")
    assert_same(got, written.expected)
    # Sequentially in odd pieces, through the readahead and the window.
    reader = engine.reader("a")
    stream = ReadStream()
    pieces = b"".join(reader.read(o, o + 13, stream) for o in range(0, reader.nbytes, 13))
    assert pieces == got.tobytes()


def test_overhanging_chunks_are_stored_full_size(zp3x: Writer, tmp_path: Path,
                                                 open_engine: Callable[..., Engine]) -> None:
    """What zarrfs assumes of an overhanging chunk, checked on zarr-python's own files."""
    store = tmp_path / "s.zarr"
    written = write_case(zp3x, store, "a", *CASES["overhang-uncompressed"])
    assert (store / "a" / "c" / "0" / "1").stat().st_size == 3 * 3 * 2  # 3 rows of the 3-wide edge chunk
    engine = open_engine(store)
    assert engine.reader("a").source.plain_local_files  # and read raw from the files
    assert_same(read_all(engine, "a"), written.expected)
    assert engine.files.stats()["reads"] > 0


@st.composite
def arrays(draw: st.DrawFn) -> tuple[dict[str, Any], list[int] | None]:
    ndim = draw(st.integers(1, 3))
    shape, edges = [], []
    for _ in range(ndim):
        axis = draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
        edges.append(axis)
        shape.append(sum(axis))
    dtype = draw(st.sampled_from(["u1", "<i2", "<f4", ">f8", "<c8"]))
    compressors = draw(st.sampled_from([None, "auto"]))
    create: dict[str, Any] = {"shape": shape, "chunks": edges, "dtype": dtype, "compressors": compressors}
    if dtype.startswith(">"):
        create["serializer"] = BIG_ENDIAN
    shrunk = None
    if draw(st.booleans()):  # an overhanging grid: the array shrunk after writing
        shrunk = [draw(st.integers(0, s)) for s in shape]
    return create, shrunk


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=arrays(), data=st.data())
def test_any_byte_range_of_random_rectilinear_arrays(case: tuple[dict[str, Any], list[int] | None],
                                                     data: st.DataObject, zp3x: Writer,
                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    create, shrunk = case
    store = tmp_path_factory.mktemp("rect") / "s.zarr"
    written = zp3x.write(store, "a", create, data=values(tuple(create["shape"]), create["dtype"]),
                         metadata={"shape": shrunk} if shrunk is not None else None, config=RECTILINEAR)
    assert written.ok, written.error
    expected = written.expected.astype(np.dtype(create["dtype"])).tobytes()
    engine = Engine.open(str(store))
    try:
        reader = engine.reader("a")
        assert reader.nbytes == len(expected)
        for _ in range(5):
            start = data.draw(st.integers(0, len(expected)))
            stop = data.draw(st.integers(start, len(expected) + 3))
            assert reader.read(start, stop) == expected[start:stop]
    finally:
        engine.close()


# ------------------------------------------------- one pass, each chunk once


# Bands of varying height, each at least as tall as one 128 KiB read (57 rows): a read then crosses
# at most two bands, and a band-sized budget holds what the next read still needs.
ROWS = [60, 90, 70, 130, 65, 85]
COLUMNS = [[96, 5], 100]  # 580 columns


@pytest.fixture(scope="module")
def tall_bands(zp3x: Writer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    store = tmp_path_factory.mktemp("bands") / "s.zarr"
    shape = (sum(ROWS), 96 * 5 + 100)
    data = np.arange(math.prod(shape), dtype="<f4").reshape(shape)
    columns = [96] * 5 + [100]
    written = zp3x.write(store, "a", {"shape": list(shape), "chunks": [ROWS, columns], "dtype": "<f4",
                                      "fill_value": 0}, data=data, config=RECTILINEAR)
    assert written.ok, written.error
    assert json.loads((store / "a" / "zarr.json").read_text())["chunk_grid"]["configuration"]["chunk_shapes"][1] \
        == COLUMNS
    return store, data


@pytest.mark.parametrize("extra", [64 << 10, 4 << 20])  # one band and a little; room for readahead too
def test_sequential_read_decodes_each_chunk_once_with_a_band_sized_budget(
        extra: int, tall_bands: tuple[Path, np.ndarray], open_engine: Callable[..., Engine]) -> None:
    store, data = tall_bands
    band = open_engine(store, cache_bytes=1 << 30).reader("a").readahead.band_bytes
    assert band == max(ROWS) * 580 * 4
    engine = open_engine(store, cache_bytes=band + extra)
    reader = engine.reader("a")
    stream = ReadStream()
    got = b"".join(reader.read(o, o + (128 << 10), stream) for o in range(0, reader.nbytes, 128 << 10))
    assert got == data.tobytes()
    stats = engine.cache.stats()
    assert stats.loads / (len(ROWS) * 6) == 1.00
    assert (stats.prefetches > 0) == (extra > 1 << 20)


def test_small_budget_names_the_budget_that_would_do(tall_bands: tuple[Path, np.ndarray],
                                                     open_engine: Callable[..., Engine],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    store, data = tall_bands
    with caplog.at_level("WARNING", logger="zarrfs"):
        reader = open_engine(store, cache_bytes=128 << 10).reader("a")
        # Said when a stream turns sequential (readahead.Readahead); slower, still right.
        stream = ReadStream()
        half = reader.nbytes // 2
        assert reader.read(0, half, stream) + reader.read(half, reader.nbytes, stream) == data.tobytes()
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "/a" in message and f"--cache-size {-(-2 * max(ROWS) * 580 * 4 // (1 << 20))}M" in message


# ------------------------------------------------- bad grids


BAD_GRIDS: dict[str, tuple[Any, str]] = {
    "short": ([[3, 5], [4, 3]], "less than the array's extent 10"),
    "zero": ([[3, 0, 7], [4, 3]], "positive"),
    "negative": ([[3, -5, 12], [4, 3]], "positive"),
    "count-overflow": ([[[3, 2**62]], [4, 3]], "overflows int64"),
    "absurd": ([[[2**40, 2**30]], [4, 3]], "overflows int64"),
    "rank": ([[10]], "list of 2 axes"),
    "sharding-not-dividing": (None, "does not divide"),
}


@pytest.mark.parametrize("case", BAD_GRIDS)
def test_bad_grids_hide_the_node_and_say_why(case: str, zp3x: Writer, tmp_path: Path,
                                             open_engine: Callable[..., Engine]) -> None:
    chunk_shapes, words = BAD_GRIDS[case]
    store = tmp_path / "s.zarr"
    good = write_case(zp3x, store, "good", *CASES["uncompressed"])
    create = CASES["sharded"][0] if chunk_shapes is None else CASES["uncompressed"][0]
    write_case(zp3x, store, "bad", create, None, None)
    doc = json.loads((store / "bad" / "zarr.json").read_text())
    if chunk_shapes is None:
        doc["chunk_grid"]["configuration"]["chunk_shapes"] = [[4, 6], [5, 4]]  # inner chunks are 3 wide
    else:
        doc["chunk_grid"]["configuration"]["chunk_shapes"] = chunk_shapes
    (store / "bad" / "zarr.json").write_text(json.dumps(doc))
    engine = open_engine(store)
    children = {child.name: child for child in engine.hierarchy.children("")}
    assert children["bad"].node is None and isinstance(children["bad"].error, MetadataError)
    assert "/bad" in str(children["bad"].error) and words in str(children["bad"].error)
    with pytest.raises(MetadataError):
        engine.reader("bad")
    assert_same(read_all(engine, "good"), good.expected)


# ------------------------------------------------- a real mount


def test_numpy_memory_maps_a_rectilinear_array_from_the_mount(zp3x: Writer, tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    written = write_case(zp3x, store, "a", *CASES["zstd-run-lengths"])
    sharded = write_case(zp3x, store, "s", *CASES["sharded-overhang"])
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        mapped = np.load(mount / "a.npy", mmap_mode="r")
        assert_same(np.array(mapped), written.expected)
        del mapped
        assert_same(np.load(mount / "s.npy"), sharded.expected)
        assert (mount / "a.raw").read_bytes() == written.expected.astype("<f4").tobytes()
