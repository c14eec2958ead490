"""Property tests: random arrays written by zarr-python, some chunks deleted, random byte ranges.

For every drawn case the engine must return exactly the bytes of what
zarr-python reads back from the same (partly deleted) store.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec, GzipCodec, ShardingCodec, TransposeCodec, ZstdCodec

from budget import examples
from oracles import sample, write_zarr
from zarrfs.engine.engine import Engine

DTYPES = ["bool", "i1", "<i2", ">i4", "<u8", "<f2", "<f4", ">f8", "<c8", "S3", "<U2", "<M8[s]",
          [("a", "<i2"), ("b", "<f4")]]

SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype
    seed: int
    zarr_format: int
    fill_value: Any
    options: dict[str, Any]  # extra zarr.create_array arguments
    drop_mask: int  # bit i % 64 set: delete the i-th stored chunk (C order over the grid)


@st.composite
def shapes_and_chunks(draw: st.DrawFn, max_ndim: int = 4) -> tuple[tuple[int, ...], tuple[int, ...]]:
    ndim = draw(st.integers(0, max_ndim))
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.integers(1, 5)) for _ in shape)
    return shape, chunks


@st.composite
def fill_values(draw: st.DrawFn, dtype: np.dtype) -> Any:
    if draw(st.booleans()):
        return None  # v2: null fill (zeros); v3: zarr-python's default for the type
    return sample((1,), dtype, draw(st.integers(0, 1000)))[0]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    zarr_format = draw(st.sampled_from([2, 3]))
    shape, chunks = draw(shapes_and_chunks())
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    options: dict[str, Any] = {}
    if zarr_format == 2:
        options["order"] = draw(st.sampled_from("CF"))
        options["chunk_key_encoding"] = {"name": "v2", "separator": draw(st.sampled_from("./"))}
    else:
        permutation = draw(st.permutations(range(len(shape))))
        if permutation != list(range(len(shape))):
            options["filters"] = [TransposeCodec(order=permutation)]
        endian = draw(st.sampled_from(["little", "big"]))
        options["serializer"] = BytesCodec(endian=endian if dtype.itemsize > 1 and dtype.kind != "S" else None)
    options["compressors"] = draw(st.sampled_from([None, ZstdCodec() if zarr_format == 3 else "auto"]))
    return Case(shape, chunks, dtype, draw(st.integers(0, 2**16)), zarr_format,
                draw(fill_values(dtype)), options, draw(st.integers(0, 2**64 - 1)))


@st.composite
def sharded_cases(draw: st.DrawFn) -> Case:
    """v3 shards of 1-3 inner chunks per dimension, inner chunks plain or gzip, index at either end."""
    shape, inner = draw(shapes_and_chunks(max_ndim=3))
    per_shard = tuple(draw(st.integers(1, 3)) for _ in shape)
    dtype = np.dtype(draw(st.sampled_from(["<u2", ">f8", "<i8", "bool"])))
    codecs = [BytesCodec(endian="big" if dtype.itemsize > 1 else None)] + draw(st.sampled_from([[], [GzipCodec()]]))
    serializer = ShardingCodec(chunk_shape=inner, codecs=codecs,
                               index_location=draw(st.sampled_from(["start", "end"])))
    shard_shape = tuple(c * n for c, n in zip(inner, per_shard, strict=True))
    return Case(shape, shard_shape, dtype, draw(st.integers(0, 2**16)), 3,
                draw(fill_values(dtype)), {"serializer": serializer}, draw(st.integers(0, 2**64 - 1)))


def write_case(root: Path, case: Case) -> tuple[Path, str, np.ndarray]:
    """Write the case with zarr-python, delete the masked chunks, read back with zarr-python."""
    data = sample(case.shape, case.dtype, case.seed)
    if case.fill_value is not None and data.size:
        data.reshape(-1)[:: 3] = case.fill_value  # some chunks end up all fill and are never written
    oracle = write_zarr(root, data, zarr_format=case.zarr_format, chunks=case.chunks,
                        fill_value=case.fill_value, drop=case.drop_mask, **case.options)
    return oracle.store, oracle.node, oracle.expected


def check_ranges(case: Case, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store, node, expected = write_case(Path(tmp), case)
        engine = Engine.open(str(store))
        try:
            reader = engine.reader(node)
            assert reader.meta.shape == expected.shape
            want = expected.astype(reader.meta.dtype).tobytes()
            assert reader.read(0, len(want)) == want
            for _ in range(data.draw(st.integers(1, 20), label="range count")):
                start = data.draw(st.integers(0, len(want)), label="start")
                stop = data.draw(st.integers(start, len(want) + 3), label="stop")
                assert reader.read(start, stop) == want[start:stop]
        finally:
            engine.close()


@SETTINGS
@given(case=cases(), data=st.data())
def test_random_arrays_read_like_zarr_python(case: Case, data: st.DataObject) -> None:
    check_ranges(case, data)


@SETTINGS
@given(case=sharded_cases(), data=st.data())
def test_random_sharded_arrays_read_like_zarr_python(case: Case, data: st.DataObject) -> None:
    check_ranges(case, data)
