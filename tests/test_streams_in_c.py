"""Reads of sequential streams answered in C (engine/_cached_reads.c `allow_stream`,
`Readahead.c_stretch`): only as far as readahead has nothing to do, with every byte right, each
chunk decoded once and readahead's share of the budget given back as if Python had read them."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zarr
from mountutil import mounted
from zarr.codecs import ZstdCodec

from zarrfs.engine.engine import Engine
from zarrfs.engine.readahead import Readahead, ReadStream
from zarrfs.options import EngineOptions
from zarrfs.files.layout_files import OpenLayoutFile
from zarrfs.files.tree import VirtualTree

FH = 5
SHAPE = (1024, 16384)  # float32: 64 MiB, twice the cache below


def _write(path: Path, chunks: tuple[int, int], shards: tuple[int, int] | None) -> np.ndarray:
    truth = (np.arange(np.prod(SHAPE), dtype=np.float32) % 1000.25).reshape(SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(str(path), shape=SHAPE, chunks=chunks, shards=shards, dtype="<f4",
                                  compressors=[ZstdCodec(level=1)])
        array[...] = truth
    return truth


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Callable[[tuple[int, int], tuple[int, int] | None],
                                                                  tuple[Path, np.ndarray]]:
    """`written(chunks, shards)`: the store `a.zarr` of that layout and its truth, written once per module
    (the tests only read it, each through an engine of its own)."""
    stores: dict[tuple, tuple[Path, np.ndarray]] = {}

    def get(chunks: tuple[int, int], shards: tuple[int, int] | None) -> tuple[Path, np.ndarray]:
        if (chunks, shards) not in stores:
            path = tmp_path_factory.mktemp("layout") / "a.zarr"
            stores[chunks, shards] = path, _write(path, chunks, shards)
        return stores[chunks, shards]

    return get


def _front_read(engine: Engine, handle: OpenLayoutFile, offset: int, out: np.ndarray) -> bool:
    """One read as the FUSE front does it: C first, Python for what C leaves; True if C answered."""
    got = engine.cache.served.table.serve_into(FH, out, offset)
    if got >= 0:
        return True
    assert handle.read_into(offset, out) == len(out)
    return False


def _nothing_to_do_until(readahead: Readahead, stream: ReadStream, size: int) -> None:
    """Reads of `size` continuing the stream up to its stretch would have had no readahead work."""
    probe = copy.copy(stream)
    at = stream.next_offset
    while at + size <= stream.c_until:
        assert readahead.track(probe, at, at + size) == [], (at, stream.c_until)
        assert readahead.passed(probe, at) == [], (at, stream.c_until)
        at += size


@pytest.mark.parametrize(("chunks", "shards", "size"), [
    ((128, 1024), None, 1 << 20),  # bands of 8 MiB, readahead in quarter windows
    ((128, 1024), None, 128 << 10),
    ((128, 1024), None, 300_001),  # reads smaller than a window, at odd offsets
    ((64, 1024), (256, 4096), 1 << 20),  # small inner chunks: readahead in batches ending on shard rows
    ((64, 1024), (256, 4096), 128 << 10),
])
def test_a_stream_is_answered_in_c_between_readahead_steps(written: Callable, chunks: tuple[int, int],
                                                          shards: tuple[int, int] | None, size: int) -> None:
    store, truth = written(chunks, shards)
    expected = truth.tobytes()
    engine = Engine.open(str(store), options=EngineOptions(cache_bytes=32 << 20))
    try:
        handle = VirtualTree(engine, root_name="a").open("/a.raw")
        assert handle.attach(FH)
        table = engine.cache.served.table
        readahead = handle.region.reader.readahead
        if shards:
            assert readahead.step > 0
        got = bytearray()
        in_c = 0
        for offset in range(0, len(expected), size):
            out = np.empty(min(size, len(expected) - offset), np.uint8)
            if _front_read(engine, handle, offset, out):
                in_c += 1
            else:
                _nothing_to_do_until(readahead, handle.region.stream, size)
            got += out.tobytes()
        assert bytes(got) == expected
        reads = -(-len(expected) // size)
        assert in_c >= reads // 3, (in_c, reads)
        assert table.counters()["reads_in_streams"] == in_c
        stats = engine.cache.stats()
        chunk_count = np.prod([-(-n // c) for n, c in zip(SHAPE, chunks, strict=True)])
        assert stats.loads == chunk_count  # each chunk decoded once, with the cache half the array
        assert stats.prefetches > chunk_count // 2  # readahead kept loading ahead of the stream
        assert stats.prefetches_unread == 0  # chunks read in C were not taken for unread readahead
    finally:
        engine.close()


def test_c_answers_a_stream_only_within_its_stretch(written: Callable) -> None:
    """With every chunk cached, a read continuing the stream is answered in C only while it ends
    within the stretch Python allowed; a read elsewhere is a random read, answered in C as ever."""
    store, truth = written((128, 1024), None)
    expected = truth.tobytes()
    engine = Engine.open(str(store), options=EngineOptions(cache_bytes=128 << 20))
    try:
        tree = VirtualTree(engine, root_name="a")
        assert tree.open("/a.raw").read_into(0, np.empty(len(expected), np.uint8)) == len(expected)  # all cached
        handle = tree.open("/a.raw")
        table = engine.cache.served.table
        assert handle.attach(FH)
        size = 1 << 20
        out = np.empty(size, np.uint8)
        offset = 0
        _front_read(engine, handle, offset, out)
        while handle.region.stream.c_until < offset + 3 * size:  # until readahead settled and allowed C a stretch
            offset += size
            _front_read(engine, handle, offset, out)
        stretch_end = handle.region.stream.c_until
        assert offset + size <= stretch_end < len(expected) - size
        while offset + 2 * size <= stretch_end:
            offset += size
            assert _front_read(engine, handle, offset, out)
        cut = np.empty(stretch_end - offset - size, np.uint8)
        if len(cut):
            assert _front_read(engine, handle, offset + size, cut)  # ends exactly at the stretch's end
        after = np.empty(size, np.uint8)
        assert table.serve_into(FH, after, stretch_end) == -2  # continues the stream past the stretch: a miss
        assert table.serve_into(FH, after, len(expected) // 2 + 12345) == size  # random, far away
        assert after.tobytes() == expected[len(expected) // 2 + 12345:][:size]
    finally:
        engine.close()


def test_dd_through_a_mount_is_answered_in_c(tmp_path: Path) -> None:
    """`dd` of an array twice the cache, through the kernel (several reads in flight, out of
    order): the bytes right. Then `dd` with O_DIRECT (one read at a time, in order; the array is
    cold again): reads answered in C in the stream."""
    store = tmp_path / "m.zarr"
    truth = _write(store, (128, 1024), None)
    with mounted(store, tmp_path / "mnt", tmp_path / "log", "--cache-size", "32MiB") as mount:
        copied = tmp_path / "copy.raw"
        subprocess.run(["dd", f"if={mount / 'm.raw'}", f"of={copied}", "bs=1M", "status=none"], check=True)
        assert copied.read_bytes() == truth.tobytes()
        os.unlink(copied)
        before = json.loads((mount / ".zarrfs-stats.json").read_text())["reads"]
        subprocess.run(["dd", f"if={mount / 'm.raw'}", f"of={copied}", "bs=1M", "iflag=direct", "status=none"],
                       check=True)
        after = json.loads((mount / ".zarrfs-stats.json").read_text())["reads"]
    assert copied.read_bytes() == truth.tobytes()
    os.unlink(copied)
    # Bands of 8 MiB and a 32 MiB cache allow stretches of 2-3 MiB (`c_stretch`); a read in one is
    # answered in C when readahead has loaded its chunks: 24-27 of the 64 reads on an idle machine.
    reads = after["count"] - before["count"]
    in_streams = after["answered_in_c_in_streams"] - before["answered_in_c_in_streams"]
    assert in_streams >= reads // 6, (in_streams, reads)


def test_a_stream_over_small_uncompressed_chunk_files_is_answered_in_c(tmp_path: Path) -> None:
    """Bands of chunk files smaller than a read: the files are given to C ahead of the stream, so
    most reads are answered there, not only those inside a band Python has opened."""
    truth = np.random.default_rng(7).integers(0, 255, (1024, 8192), dtype="u1")  # bands of 512 KiB
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.create_array(str(tmp_path / "u.zarr"), shape=truth.shape, chunks=(64, 1024), dtype="u1",
                          compressors=None)[...] = truth
    expected = truth.tobytes()
    engine = Engine.open(str(tmp_path / "u.zarr"), options=EngineOptions(cache_bytes=32 << 20))
    try:
        handle = VirtualTree(engine, root_name="u").open("/u.raw")
        table = engine.cache.served.table
        assert handle.attach(FH)
        size = 1 << 20
        got = bytearray()
        in_c = 0
        for offset in range(0, len(expected), size):
            out = np.empty(size, np.uint8)
            in_c += _front_read(engine, handle, offset, out)
            got += out.tobytes()
        assert bytes(got) == expected
        assert in_c >= 4, in_c  # of 8 reads: the first two reach Python (the stream is not known yet)
        assert engine.cache.stats().loads == 0  # every byte from the files, none decoded
    finally:
        engine.close()
