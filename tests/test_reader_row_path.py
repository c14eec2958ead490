"""ArrayReader's path for reads inside one row of cached chunks (`_read_in_one_row`), against numpy."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ZstdCodec

from zarrfs.engine.engine import Engine
from zarrfs.options import EngineOptions

SHAPE = (5, 37, 50)
CHUNKS = (2, 8, 16)  # partial edge chunks on every axis


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A big-endian int32 array whose first rows along axis 1 were never written (fill value 7)."""
    path = tmp_path_factory.mktemp("rows") / "a.zarr"
    truth = np.arange(np.prod(SHAPE), dtype=">i4").reshape(SHAPE)
    truth[:, :16, :] = 7
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype=">i4", fill_value=7,
                                  serializer=BytesCodec(endian="big"), compressors=[ZstdCodec(level=1)])
        array[:, 16:, :] = truth[:, 16:, :]  # chunks of rows 0-15 stay absent: fill value
    return path, truth


def counted_general_path(engine: Engine) -> tuple[object, list[int]]:
    reader = engine.reader("")
    calls: list[int] = []
    general = reader._fill_bytes

    def counting(start: int, stop: int, out: np.ndarray) -> None:
        calls.append(start)
        general(start, stop, out)

    reader._fill_bytes = counting  # type: ignore[method-assign]
    return reader, calls


def test_reads_in_one_row_of_cached_chunks_match_numpy_without_the_general_path(
        stored: tuple[Path, np.ndarray]) -> None:
    path, truth = stored
    flat = truth.tobytes()
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        reader, general = counted_general_path(engine)
        assert reader.read(0, len(flat)) == flat  # every chunk cached from here on
        general.clear()
        rng = random.Random(5)
        row_bytes = SHAPE[-1] * 4
        for _ in range(2000):
            row = rng.randrange(np.prod(SHAPE[:-1]))
            first = rng.randrange(SHAPE[-1])
            last = rng.randrange(first + 1, SHAPE[-1] + 1)
            start, stop = row * row_bytes + first * 4, row * row_bytes + last * 4
            assert reader.read(start, stop) == flat[start:stop], (start, stop)
        assert general == []
        hits = engine.cache.stats().hits
        reader.read(0, 4)
        assert engine.cache.stats().hits == hits + 1  # counted as any cache hit
    finally:
        engine.close()


def test_other_reads_take_the_general_path_and_stay_right(stored: tuple[Path, np.ndarray]) -> None:
    path, truth = stored
    flat = truth.tobytes()
    row_bytes = SHAPE[-1] * 4
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        reader, general = counted_general_path(engine)
        cold = (3 * row_bytes + 8, 3 * row_bytes + 40)
        assert reader.read(*cold) == flat[slice(*cold)]  # chunk not cached yet: loaded by the general path
        assert general == [cold[0]]
        reader.read(0, len(flat))
        general.clear()
        for start, stop in ((row_bytes - 8, row_bytes + 8),  # crosses into the next row
                            (4 * row_bytes + 2, 4 * row_bytes + 10),  # starts inside an element
                            (7 * row_bytes + 4, 7 * row_bytes + 11)):  # ends inside one
            assert reader.read(start, stop) == flat[start:stop], (start, stop)
        assert len(general) == 3
    finally:
        engine.close()
