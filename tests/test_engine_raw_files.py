"""Uncompressed chunks of local arrays are read straight from their files (zarrfs/direct.py).

The oracle is zarr-python; every layout that stores plain C-order elements must
be read raw (counted by `Engine.files`), everything else must still be decoded,
and a chunk file that is not what the metadata says must fail the read, never
return its bytes.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numcodecs
import numpy as np
import pytest
from budget import examples
from oracles import Oracle, sample, write_zarr

from zarrfs.engine.direct import ChunkFiles, _contiguous_start
from zarrfs.engine.engine import Engine
from zarrfs.engine.readahead import ReadStream
from zarrfs.errors import ChunkError, StaleChunkError
from zarrfs.stores.store import Store


def check_reads(engine: Engine, oracle: Oracle, seed: int = 0) -> None:
    """Whole, streamed (128 KiB pieces) and 300 random unaligned reads equal the oracle's bytes."""
    reader = engine.reader(oracle.node)
    want = oracle.expected.astype(reader.meta.dtype).tobytes()
    assert reader.read(0, len(want)) == want
    stream = ReadStream()
    assert b"".join(reader.read(start, start + (128 << 10), stream)
                    for start in range(0, len(want), 128 << 10)) == want
    rng = random.Random(seed)
    for _ in range(300):
        start = rng.randrange(len(want))
        stop = min(len(want), start + rng.choice([1, 3, 4096, 5000, 70_000]))
        assert reader.read(start, stop) == want[start:stop], (start, stop)


RAW_LAYOUTS = {
    "v3 little-endian": dict(zarr_format=3, data=sample((300, 500), "<f4"), chunks=(64, 128), compressors=None),
    "v3 uint8 3-D": dict(zarr_format=3, data=sample((9, 70, 90), "u1"), chunks=(4, 32, 32), compressors=None),
    "v2 dotted": dict(zarr_format=2, data=sample((300, 500), "<i8"), chunks=(64, 128), compressors=None),
    "v2 slash": dict(zarr_format=2, data=sample((300, 500), "<u2"), chunks=(64, 128), compressors=None,
                     chunk_key_encoding={"name": "v2", "separator": "/"}),
    "v2 big-endian": dict(zarr_format=2, data=sample((130, 170), ">i4"), chunks=(64, 64), compressors=None),
    "v2 1-D": dict(zarr_format=2, data=sample((100_000,), "<f8"), chunks=(30_000,), compressors=None),
}


@pytest.mark.parametrize("name", list(RAW_LAYOUTS))
def test_plain_local_chunks_are_read_raw(name: str, tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    spec = dict(RAW_LAYOUTS[name])
    oracle = write_zarr(tmp_path, spec.pop("data"), chunks=spec.pop("chunks"), **spec)
    engine = open_engine(oracle.store)
    check_reads(engine, oracle)
    assert engine.files.stats()["reads"] > 0
    assert engine.cache.stats().loads == 0  # nothing decoded


def test_missing_chunks_read_as_fill_value(tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    oracle = write_zarr(tmp_path, sample((256, 256), "<f4"), zarr_format=3, chunks=(64, 64), compressors=None,
                        fill_value=7.5, drop=0b1001_0110)
    engine = open_engine(oracle.store)
    check_reads(engine, oracle)
    assert (oracle.expected == 7.5).sum() == 4 * 64 * 64  # chunks 1, 2, 4 and 7 were deleted
    assert engine.files.stats()["reads"] > 0
    assert 0 < engine.cache.stats().loads <= 4  # only the absent chunks go the decode way (to fill value)


@pytest.mark.parametrize("spec", [
    dict(zarr_format=3, compressors="auto"),  # zstd
    dict(zarr_format=2, compressors=None, order="F"),  # stored Fortran order: not C-order elements
    dict(zarr_format=2, compressors=None, filters=[numcodecs.Delta(dtype="<i4")]),
])
def test_encoded_chunks_are_decoded(spec: dict, tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    oracle = write_zarr(tmp_path, sample((200, 300), "<i4"), chunks=(64, 64), **spec)
    engine = open_engine(oracle.store)
    check_reads(engine, oracle)
    assert engine.files.stats()["reads"] == 0
    assert engine.cache.stats().loads > 0


def test_remote_stores_have_no_local_paths() -> None:
    assert Store.open("http://127.0.0.1:9/store.zarr").local_path("c/0/0") is None
    assert Store.open("memory://store.zarr").local_path("c/0/0") is None


def test_chunk_file_of_wrong_size_fails_the_read(tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    oracle = write_zarr(tmp_path, sample((128, 128), "<f4"), zarr_format=3, chunks=(64, 64), compressors=None)
    victim = oracle.store / oracle.node / "c" / "0" / "1"
    victim.write_bytes(victim.read_bytes() + b"\0" * 16)  # longer than one chunk
    reader = open_engine(oracle.store).reader(oracle.node)
    with pytest.raises(ChunkError, match="c/0/1"):
        reader.read(0, 128 * 4)  # row 0 crosses chunks (0, 0) and (0, 1)
    assert reader.read(64 * 512, 64 * 512 + 256) == oracle.expected[64, :64].tobytes()  # chunk (1, 0): fine


def test_chunk_file_truncated_after_opening_fails_the_read(tmp_path: Path,
                                                          open_engine: Callable[..., Engine]) -> None:
    oracle = write_zarr(tmp_path, sample((128, 128), "<f4"), zarr_format=3, chunks=(64, 64), compressors=None)
    reader = open_engine(oracle.store).reader(oracle.node)
    assert reader.read(0, 256) == oracle.expected[0, :64].tobytes()  # the file is open and cached now
    victim = oracle.store / oracle.node / "c" / "0" / "0"
    os.truncate(victim, 1000)
    # Either check may see it first: the short read (ChunkError) or, where the truncation's mtime is
    # past the reader's beginning, the version check (StaleChunkError); never the bytes.
    with pytest.raises((ChunkError, StaleChunkError), match="c/0/0"):
        reader.read(60 * 512, 60 * 512 + 256)  # past the new end of the file


def test_open_files_stay_bounded_and_close(tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    oracle = write_zarr(tmp_path, sample((256, 256), "<u2"), zarr_format=3, chunks=(32, 32), compressors=None)
    fds_before = len(os.listdir("/proc/self/fd"))
    engine = open_engine(oracle.store)
    engine.files.max_open = 5
    check_reads(engine, oracle)
    assert engine.files.stats()["open_files"] == 5
    # Python's five, and those the C path keeps of the files Python read (engine/served.py).
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 5 + engine.cache.served.max_raw_files
    engine.files.close()
    engine.cache.served.clear()
    assert len(os.listdir("/proc/self/fd")) == fds_before


def test_threads_reading_while_files_are_evicted(tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    """Two open files for 64 chunks and 8 threads: descriptors are closed under readers' feet
    unless eviction waits for the last user."""
    oracle = write_zarr(tmp_path, sample((512, 512), "<f4"), zarr_format=3, chunks=(64, 64), compressors=None)
    engine = open_engine(oracle.store)
    engine.files.max_open = 2
    reader = engine.reader(oracle.node)
    want = oracle.expected.tobytes()
    errors: list[str] = []

    def hammer(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(examples(300)):
            start = rng.randrange(len(want))
            stop = min(len(want), start + rng.choice([4096, 70_000, 300_000]))
            if reader.read(start, stop) != want[start:stop]:
                errors.append(f"{start}:{stop}")

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert engine.files.stats()["open_files"] <= 2


@pytest.mark.parametrize(("block", "start"), [
    ((slice(3, 4), slice(0, 10)), 30),  # part of one row
    ((slice(3, 7), slice(0, 10)), 30),  # whole rows
    ((slice(3, 7), slice(2, 10)), None),  # rows cut short: not one run
    ((slice(1, 2), slice(4, 5), slice(0, 8)), 1 * 80 + 4 * 8),  # one row of a 3-D chunk
    ((slice(1, 2), slice(4, 6), slice(0, 7)), None),
    ((slice(0, 2), slice(0, 10), slice(0, 8)), 0),
])
def test_contiguous_start(block: tuple[slice, ...], start: int | None) -> None:
    shape = (10, 10) if len(block) == 2 else (5, 10, 8)
    assert _contiguous_start(shape, block) == start


def test_read_block_into_a_strided_destination(tmp_path: Path) -> None:
    chunk = np.arange(64 * 32, dtype="<i4").reshape(64, 32)
    path = tmp_path / "chunk"
    path.write_bytes(chunk.tobytes())
    target = np.zeros((10, 100), "<i4")
    files = ChunkFiles()
    assert files.read_block(0, str(path), (64, 32), (slice(5, 15), slice(0, 32)), target[:, 40:72])
    assert (target[:, 40:72] == chunk[5:15]).all() and not target[:, :40].any() and not target[:, 72:].any()
    # Rows cut short are read one by one.
    assert files.read_block(0, str(path), (64, 32), (slice(20, 23), slice(1, 31)), target[:3, 0:30])
    assert (target[:3, 0:30] == chunk[20:23, 1:31]).all()
    row = (slice(0, 1), slice(0, 32))
    assert not files.read_block(0, str(tmp_path / "absent"), (64, 32), row, target[0, :32])
    assert not files.read_block(0, str(path), (64, 33), row, target[0, :32])  # wrong size
    files.close()


def pages_in_memory(fd: int, size: int) -> int:
    """How many of the file's pages the page cache holds (mincore over a private mapping, which
    reads nothing)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = mmap.PAGESIZE
    mapped = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
    start = ctypes.c_char.from_buffer(mapped)
    try:
        vector = (ctypes.c_ubyte * -(-size // page))()
        if libc.mincore(ctypes.addressof(start), size, vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(byte & 1 for byte in vector)
    finally:
        del start
        mapped.close()


def drop_from_page_cache(path: Path) -> None:
    """Evict the file's pages, and check that they went: the kernel takes POSIX_FADV_DONTNEED as
    advice, and on a busy machine may keep pages for a while."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        size = os.fstat(fd).st_size
        for _ in range(100):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if not pages_in_memory(fd, size):
                return
            time.sleep(0.02)
        raise AssertionError(f"{path}: still in the page cache after 100 evictions")
    finally:
        os.close(fd)


@pytest.fixture
def disk_dir() -> Iterator[Path]:
    """A directory on the checkout's file system: /tmp may be a tmpfs, whose pages never leave memory."""
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent, prefix=".disk-") as name:
        yield Path(name)


def test_cached_only_reads_leave_disk_reads_to_the_caller(disk_dir: Path) -> None:
    """In the first pass only page-cache reads run: a block on disk answers None, then reads normally."""
    chunk = np.arange(64 * 32, dtype="<i4").reshape(64, 32)
    path = disk_dir / "chunk"
    path.write_bytes(chunk.tobytes())
    target = np.zeros((64, 32), "<i4")
    files = ChunkFiles()
    block = (slice(0, 64), slice(0, 32))
    # Evicted and checked (mincore), a page can still come back before the read on a busy machine (the
    # clean-clone run of this stop saw it once): evicted again, up to five times, the read must say None.
    for _ in range(5):
        drop_from_page_cache(path)
        answer = files.read_block(0, str(path), (64, 32), block, target, cached_only=True)
        if answer is None:
            break
    assert answer is None
    assert files.read_block(0, str(path), (64, 32), block, target) is True
    assert (target == chunk).all()
    target[:] = 0
    assert files.read_block(0, str(path), (64, 32), block, target, cached_only=True) is True  # cached now
    assert (target == chunk).all()
    files.close()


def test_array_whose_chunks_are_on_disk_only(disk_dir: Path, open_engine: Callable[..., Engine]) -> None:
    oracle = write_zarr(disk_dir, sample((256, 256), "<f8"), zarr_format=3, chunks=(64, 64), compressors=None)
    for path in (oracle.store / oracle.node / "c").rglob("*"):
        if path.is_file():
            drop_from_page_cache(path)
    engine = open_engine(oracle.store)
    check_reads(engine, oracle)
    assert engine.files.stats()["reads"] > 0
    assert engine.cache.stats().loads == 0


def test_replaced_chunk_file_is_read_anew_after_a_metadata_refresh(tmp_path: Path,
                                                                   open_engine: Callable[..., Engine]) -> None:
    """With --metadata-ttl a refreshed array gets a new reader; its raw reads must not keep using
    descriptors of files that were replaced since (a rewrite by rename leaves the old inode open)."""
    oracle = write_zarr(tmp_path, sample((64, 64), "<i4"), zarr_format=3, chunks=(32, 32), compressors=None)
    engine = open_engine(oracle.store, metadata_ttl=0.2)
    assert engine.reader(oracle.node).read(0, 128) == oracle.expected[0, :32].tobytes()
    chunk = oracle.store / oracle.node / "c" / "0" / "0"
    replacement = chunk.with_name("0.new")
    replacement.write_bytes(np.full((32, 32), 9, "<i4").tobytes())
    os.replace(replacement, chunk)
    time.sleep(0.3)
    assert engine.reader(oracle.node).read(0, 128) == np.full(32, 9, "<i4").tobytes()


def test_chunk_path_that_is_not_a_regular_file_is_not_read_raw(tmp_path: Path) -> None:
    """A FIFO would block open() forever; a directory is no chunk either."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    files = ChunkFiles()
    target = np.zeros(4, "<u1")
    for name in ("fifo", "dir"):
        assert files.read_block(0, str(tmp_path / name), (4,), (slice(0, 4),), target) is False
    assert files.stats()["open_files"] == 0
    files.close()
