"""A read the C path misses crosses into Python once (fuse/_fast_read.c -> `load_for_c` -> the
`files.array_region.ArrayRegion.load_for_c`), which tracks it and loads its chunks, and C then copies it
(`serve_loaded`): every byte right, against numpy, whether the chunks stay, leave meanwhile or
were never written."""

from __future__ import annotations

import errno
import json
import os
import random
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from mountutil import mounted

from zarrfs.engine.engine import Engine
from zarrfs.options import EngineOptions
from zarrfs.files.layout_files import OpenLayoutFile
from zarrfs.files.tree import VirtualTree

SHAPE = (768, 2048)  # float32, 6 MiB: four times the cache of the tests that evict
CHUNKS = (64, 256)
FH = 7


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A v2 blosc-lz4 array (zarr-python) whose last band of chunks was never written (fill 2.5)."""
    path = tmp_path_factory.mktemp("loads") / "a.zarr"
    truth = (np.arange(np.prod(SHAPE), dtype="<f4") % 1013.5).reshape(SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.open_array(str(path), mode="w", shape=SHAPE, chunks=CHUNKS, dtype="<f4", zarr_format=2,
                                compressor=numcodecs.Blosc("lz4"), fill_value=2.5)
        array[:-CHUNKS[0]] = truth[:-CHUNKS[0]]
    truth[-CHUNKS[0]:] = 2.5
    return path, truth


@contextmanager
def _attached(path: Path, cache_mib: int) -> Iterator[tuple[Engine, OpenLayoutFile]]:
    """An engine over the store and its `.raw` opened and attached to C as file FH."""
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=cache_mib << 20))
    try:
        handle = VirtualTree(engine, root_name="a").open("/a.raw")
        assert handle.attach(FH)
        yield engine, handle
    finally:
        engine.close()


def _front_read(engine: Engine, handle: OpenLayoutFile, offset: int, size: int, calls: list[int]) -> bytes:
    """One read of the `.raw` as fuse/_fast_read.c does it: C, then on a miss the loader once and C
    again, then the loader writing the bytes if a chunk is still missing."""
    table = engine.cache.served.table
    out = np.zeros(size, np.uint8)
    got = table.serve_into(FH, out, offset)
    if got == -2:
        calls.append(offset)
        until = handle.load_for_c(offset, out, False)
        if until is not None:
            got = table.serve_into(FH, out, offset, loaded_until=until)
            if got < 0:
                assert handle.load_for_c(offset, out, True) is None
        got = size
    assert got == size, (offset, size, got)
    return out.tobytes()


@pytest.mark.parametrize("cache_mib", [64, 2])
def test_cold_reads_cross_once_and_every_byte_is_right(stored: tuple[Path, np.ndarray], cache_mib: int) -> None:
    """Random reads, then a stream of 128 KiB reads, from a cold cache (and one that evicts): a miss
    calls the loader once, C copies what it loaded, the bytes equal numpy's."""
    path, truth = stored
    expected = truth.tobytes()
    with _attached(path, cache_mib) as (engine, handle):
        rng = random.Random(3)
        calls: list[int] = []
        for _ in range(200):
            size = rng.choice([1, 7, 4096, 100_003])
            offset = rng.randrange(0, len(expected) - size)
            assert _front_read(engine, handle, offset, size, calls) == expected[offset:offset + size]
        assert 0 < len(calls) <= 200
        calls.clear()
        size = 128 << 10
        for offset in range(0, len(expected), size):
            assert _front_read(engine, handle, offset, size, calls) == expected[offset:offset + size]
        assert engine.cache.served.table.counters()["reads_after_loading"] > 0
        if cache_mib == 64:  # readahead loaded ahead of the stream: most of its reads needed no loader
            assert len(calls) < len(expected) // size // 2, len(calls)


def test_a_chunk_that_leaves_before_the_copy_is_written_by_python(stored: tuple[Path, np.ndarray]) -> None:
    """Loaded, then gone from C's table before C copies (evicted by another read's load): C's copy
    misses, and the loader's second call writes the bytes itself."""
    path, truth = stored
    expected = truth.tobytes()
    with _attached(path, 64) as (engine, handle):
        table = engine.cache.served.table
        out = np.zeros(5000, np.uint8)
        offset = 3 * CHUNKS[0] * SHAPE[1] * 4 + 123
        assert table.serve_into(FH, out, offset) == -2
        until = handle.load_for_c(offset, out, False)
        assert until is not None
        table.clear_chunks()
        assert table.serve_into(FH, out, offset, loaded_until=until) == -1
        assert handle.load_for_c(offset, out, True) is None
        assert out.tobytes() == expected[offset:offset + len(out)]


def test_a_read_of_chunks_never_written_is_written_by_python(stored: tuple[Path, np.ndarray]) -> None:
    """A chunk that was never written has no array for C to hold: the loader writes its fill value
    at the first call and says so (None)."""
    path, truth = stored
    expected = truth.tobytes()
    with _attached(path, 64) as (engine, handle):
        out = np.zeros(8192, np.uint8)
        offset = len(expected) - 3 * len(out)
        assert engine.cache.served.table.serve_into(FH, out, offset) == -2
        assert handle.load_for_c(offset, out, False) is None
        assert out.tobytes() == expected[offset:offset + len(out)]


def test_a_mount_answers_cold_reads_in_c_after_one_load(stored: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    """Through libfuse: a cold `.raw` read whole and at random places is right, the reads that
    missed were answered in C after loading, and a corrupt chunk is EIO, logged once with the
    file's name, however often it is read."""
    truth = stored[1]
    path, broken = tmp_path / "a.zarr", tmp_path / "broken.zarr"
    for store in (path, broken):  # every chunk written: C holds them all once loaded
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.open_array(str(store), mode="w", shape=SHAPE, chunks=CHUNKS, dtype="<f4", zarr_format=2,
                            compressor=numcodecs.Blosc("lz4"))[:] = truth
    (broken / "2.3").write_bytes(b"not blosc at all")
    expected = truth.tobytes()
    with mounted(path, tmp_path / "mnt", tmp_path / "log") as mount:
        assert (mount / "a.raw").read_bytes() == expected
        fd = os.open(mount / "a.npy", os.O_RDONLY)
        try:
            header = len(np.lib.format.magic(1, 0)) + 2 + int.from_bytes(os.pread(fd, 2, 8), "little")
            rng = random.Random(5)
            for _ in range(100):
                offset = rng.randrange(header, header + len(expected) - 4096)
                assert os.pread(fd, 4096, offset) == expected[offset - header:offset - header + 4096]
        finally:
            os.close(fd)
        reads = json.loads((mount / ".zarrfs-stats.json").read_text())["reads"]
        assert reads["answered_in_c_after_loading"] > 0
        assert reads["count"] - reads["answered_in_c"] <= 1, reads  # Python wrote the .npy header's read alone
    with mounted(broken, tmp_path / "mnt2", tmp_path / "log2", expected_log=[r"ERROR .*read /broken\.raw: .*2\.3"]) \
            as mount:
        fd = os.open(mount / "broken.raw", os.O_RDONLY)
        try:
            offset = (2 * CHUNKS[0] * SHAPE[1] + 3 * CHUNKS[1]) * 4
            for _ in range(3):
                with pytest.raises(OSError) as raised:
                    os.pread(fd, 4096, offset)
                assert raised.value.errno == errno.EIO
            assert os.pread(fd, 4096, 0) == expected[:4096]
        finally:
            os.close(fd)
    errors = [line for line in (tmp_path / "log2").read_text().splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors
