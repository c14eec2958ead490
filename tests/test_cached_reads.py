"""Small reads answered in C from cached chunks (engine/_cached_reads.c, engine/served.py, and
fuse/_fast_read.c through a real mount), against numpy."""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from mountutil import mounted
from zarr.codecs import BytesCodec, ZstdCodec

from zarrfs.engine.engine import Engine
from zarrfs.engine.served import continues_stream
from zarrfs.options import EngineOptions
from zarrfs.files.layout_files import OpenLayoutFile
from zarrfs.files.tree import VirtualTree

SHAPE = (6, 300, 1000)  # 7.2 MB: random reads are mostly over SEQUENTIAL_REACH apart
CHUNKS = (2, 64, 96)  # partial edge chunks on the last two axes
ABSENT_ROWS = 64  # rows 0-63 of axis 1 are never written: their chunks are absent (fill value)
ITEM = 4
ROW = SHAPE[-1] * ITEM
FH = 11


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A big-endian int32 array whose first rows along axis 1 were never written (fill value 7)."""
    path = tmp_path_factory.mktemp("served") / "a.zarr"
    truth = np.arange(np.prod(SHAPE), dtype=">i4").reshape(SHAPE)
    truth[:, :ABSENT_ROWS, :] = 7
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype=">i4", fill_value=7,
                                  serializer=BytesCodec(endian="big"), compressors=[ZstdCodec(level=1)])
        array[:, ABSENT_ROWS:, :] = truth[:, ABSENT_ROWS:, :]
    return path, truth


def open_npy(engine: Engine) -> tuple[OpenLayoutFile, bytes]:
    """The array's .npy, registered with the C path as the FUSE front does, read whole by Python
    (which caches every chunk); and its bytes."""
    tree = VirtualTree(engine, root_name="a")
    handle = tree.open("/a.npy")
    assert handle.attach(FH)
    whole = np.empty(handle.size, np.uint8)
    assert handle.read_into(0, whole) == handle.size
    return handle, whole.tobytes()


def serve(engine: Engine, offset: int, size: int) -> bytes | None:
    out = np.zeros(size, np.uint8)
    got = engine.cache.served.table.serve_into(FH, out, offset)
    return None if got < 0 else out[:got].tobytes()


def test_random_reads_of_cached_chunks_are_answered_in_c_and_match_numpy(stored: tuple[Path, np.ndarray]) -> None:
    """C answers exactly the reads it should: inside the element region, every byte in a cached
    chunk, not continuing the file's last read (by the rule readahead uses); at any alignment,
    across rows; and what it answers is right."""
    path, truth = stored
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        handle, npy = open_npy(engine)
        header = len(handle.layout.header)
        assert npy[header:] == truth.tobytes()
        rng = random.Random(3)
        answered = 0
        last_end = -1
        for _ in range(4000):
            offset = rng.randrange(len(npy))
            size = rng.choice([rng.randint(1, 16), rng.randint(1, ROW), rng.randint(1, 3 * ROW)])
            continues = continues_stream(last_end, offset, offset + size)  # the rule readahead goes by
            last_end = max(last_end, offset + size) if continues else offset + size
            got = serve(engine, offset, size)
            rows = range((offset - header) // ROW, (offset + size - 1 - header) // ROW + 1)
            if continues or offset < header or offset + size > len(npy) \
                    or any(row % SHAPE[1] < ABSENT_ROWS for row in rows):  # absent: Python writes the fill
                assert got is None, (offset, size)
            else:
                assert got == npy[offset:offset + size], (offset, size)
                answered += 1
        assert answered > 1000
        hits = engine.cache.stats().hits
        assert serve(engine, header + (SHAPE[1] - 1) * ROW, 8) is not None  # one chunk, far from the last read
        assert engine.cache.stats().hits == hits + 1  # counted as any cache hit
        assert engine.cache.served.table.counters()["reads"] == answered + 1
    finally:
        engine.close()


def test_what_c_leaves_to_python(stored: tuple[Path, np.ndarray]) -> None:
    path, _ = stored
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        handle, npy = open_npy(engine)
        header = len(handle.layout.header)

        def at(z: int, y: int, x: int) -> int:  # planes are 1.2 MB: reads on other planes are far apart
            return header + (z * SHAPE[1] + y) * ROW + x * ITEM

        assert serve(engine, at(0, 100, 0), 16) == npy[at(0, 100, 0):at(0, 100, 4)]
        assert serve(engine, at(0, 100, 4), 16) is None  # continues the last read: a stream, readahead's
        assert serve(engine, at(2, 100, 0) - 7, 19) == npy[at(2, 100, 0) - 7:at(2, 100, 3)]  # across rows, unaligned
        assert serve(engine, 0, 16) is None  # the .npy header
        assert serve(engine, header - 4, 16) is None  # the header's end and the region's start
        assert serve(engine, len(npy) - 4, 8) is None  # past the end
        assert serve(engine, at(3, 20, 0), 16) is None  # an absent chunk: Python writes the fill value
        assert serve(engine, at(1, 64, 0) - 8, 16) is None  # its last bytes in an absent chunk
        pieces = 1025 * ITEM * CHUNKS[-1]  # a run of 1025 chunks along rows: more pieces than C copies
        assert serve(engine, at(4, 64, 0), pieces) is None
        assert serve(engine, at(0, 200, 0), 16) is not None
        engine.cache.served.table.close_file(FH)
        assert serve(engine, at(3, 100, 0), 16) is None  # closed
    finally:
        engine.close()


def test_chunks_leave_c_before_their_memory_is_reused(stored: tuple[Path, np.ndarray]) -> None:
    """A cache with room for a few chunks, C answering first and Python the rest: every eviction
    takes the chunk out of C (which lets go of it: test_c_releases_the_chunk_it_held), and every
    read is right."""
    path, truth = stored
    chunk_bytes = int(np.prod(CHUNKS)) * ITEM
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=6 * chunk_bytes))
    try:
        handle, npy = open_npy(engine)
        table = engine.cache.served.table
        assert 0 < table.counters()["chunks"] <= 6
        rng = random.Random(9)
        header = len(handle.layout.header)
        for _ in range(2000):
            offset = header + rng.randrange(truth.size) * ITEM
            size = min(ITEM * rng.randint(1, 16), len(npy) - offset)
            out = np.zeros(size, np.uint8)
            if table.serve_into(FH, out, offset) < 0:  # as the FUSE front: C first, then Python
                assert handle.read_into(offset, out) == size
            assert out.tobytes() == npy[offset:offset + size], (offset, size)
        assert table.counters()["reads"] > 0
        assert engine.cache.stats().evictions > 0
    finally:
        engine.close()
    assert engine.cache.served.table.counters()["chunks"] == 0


def test_c_releases_the_chunk_it_held() -> None:
    from zarrfs.engine._cached_reads import CachedReads

    table = CachedReads(1 << 20)
    table.register_array(1)
    chunk = np.arange(12, dtype="<u4").reshape(3, 4)
    baseline = sys.getrefcount(chunk)
    table.add_chunk(1, 0, chunk)
    assert sys.getrefcount(chunk) > baseline
    assert table.remove_chunk(1, 0) is True
    assert sys.getrefcount(chunk) == baseline
    assert table.remove_chunk(1, 0) is False
    table.add_chunk(1, 0, chunk)
    table.clear_chunks()
    assert sys.getrefcount(chunk) == baseline


def _start_copying(table, fh: int, truth: bytes, stop: threading.Event, served: list[int],
                   wrong: list[int]) -> list[threading.Thread]:
    """Three threads asking C for 1 MiB of file `fh` at random offsets until `stop`: the offsets it
    answered go to `served`, those whose bytes were not `truth`'s to `wrong`."""

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        out = np.empty(1 << 20, np.uint8)
        while not stop.is_set():
            offset = rng.randrange(len(truth) - out.size)
            if table.serve_into(fh, out, offset) == out.size:
                served.append(offset)
                if out.tobytes() != truth[offset:offset + out.size]:
                    wrong.append(offset)

    readers = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for thread in readers:
        thread.start()
    return readers


def test_a_chunk_removed_while_c_copies_from_it_waits_for_the_copy() -> None:
    """C copies with its lock let go; the cache then rewrites an evicted chunk's memory for the
    next decode (engine/spare.py). Readers copy 1 MiB pieces of a 4 MiB chunk while another thread
    removes the chunk, scribbles over its memory and adds it back: every answer C gives is the
    chunk's, never the scribble (a removal waits for the copies in flight)."""
    from zarrfs.engine._cached_reads import CachedReads

    rows, width, token, fh = 64, 1 << 16, 5, 3
    truth = np.arange(rows * width, dtype=np.uint32).astype(np.uint8).reshape(rows, width)
    chunk = truth.copy()
    table = CachedReads(1)
    table.register_array(token)
    table.open_file(fh, token, 0, truth.size, 1, truth.shape, truth.shape)
    table.allow_stream(fh, truth.size)
    table.add_chunk(token, 0, chunk)
    stop = threading.Event()
    served: list[int] = []
    wrong: list[int] = []
    readers = _start_copying(table, fh, truth.tobytes(), stop, served, wrong)
    deadline = time.monotonic() + 240  # scripts/test_sanitizers.sh runs it several times slower
    try:
        removals = 0
        while (removals < 600 or len(served) < 300) and time.monotonic() < deadline:
            assert table.remove_chunk(token, 0) is True
            chunk.fill(0xEE)  # the memory reused, as a new decode would
            chunk[...] = truth
            table.add_chunk(token, 0, chunk)
            removals += 1
            # The readers' turn: copies start, and the next removal meets them in flight. Without it this
            # thread keeps the GIL and the readers get in only now and then (thousands of removals for 300 answers).
            time.sleep(0)
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    assert len(served) >= 300  # C answered while the chunk came and went
    assert wrong == []
    table.clear_chunks()


def test_bytes_closed_while_c_copies_from_them_are_let_go_after_the_copy() -> None:
    """A file's held bytes (`open_bytes`) are released when it closes, but only once the copies
    in flight are done: readers copy 1 MiB pieces while another thread opens the file over a
    buffer, closes it and scribbles over the buffer, as if its memory were reused. Every answer
    is the bytes', never the scribble (under scripts/test_sanitizers.sh, no read after free)."""
    from zarrfs.engine._cached_reads import CachedReads

    truth = bytes(np.arange(4 << 20, dtype=np.uint32).astype(np.uint8))
    fh = 9
    table = CachedReads(1)
    stop = threading.Event()
    served: list[int] = []
    wrong: list[int] = []
    readers = _start_copying(table, fh, truth, stop, served, wrong)
    deadline = time.monotonic() + 240
    try:
        cycles = 0
        while (cycles < 1000 or len(served) < 300) and time.monotonic() < deadline:
            held = bytearray(truth)
            table.open_bytes(fh, 0, held)
            time.sleep(0)  # the readers' turn: copies start, and the close meets them in flight
            table.close_file(fh)
            np.frombuffer(held, np.uint8).fill(0xEE)
            cycles += 1
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    assert len(served) >= 300
    assert wrong == []


def test_a_chunk_c_read_from_gets_a_second_chance(stored: tuple[Path, np.ndarray]) -> None:
    path, _ = stored
    chunk_bytes = int(np.prod(CHUNKS)) * ITEM
    # Room for four chunks (and half of one: a load reserves its chunk's size while it runs).
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=4 * chunk_bytes + chunk_bytes // 2))
    try:
        handle = VirtualTree(engine, root_name="a").open("/a.npy")
        assert handle.attach(FH)
        reader = handle.region.reader
        header = len(handle.layout.header)

        def element(z: int, y: int, x: int) -> int:
            return ((z * SHAPE[1] + y) * SHAPE[2] + x) * ITEM

        # Four chunks, the cache's room, loaded in this order (no stream: no readahead).
        a, b, c, d = (0, 64, 0), (0, 64, 96), (0, 128, 0), (0, 128, 96)
        for corner in (a, b, c, d):
            reader.read(element(*corner), element(*corner) + ITEM)
        assert serve(engine, header + element(*a), ITEM) is not None  # C reads A, the least recently used
        reader.read(element(2, 192, 192), element(2, 192, 192) + ITEM)  # a fifth chunk: one must go
        cached = engine.cache.cached_keys()
        assert (reader._key_prefix, (0, 1, 0)) in cached  # A stayed: C read it
        assert (reader._key_prefix, (0, 1, 1)) not in cached  # B, untouched, went
    finally:
        engine.close()


def test_files_c_cannot_answer_are_not_registered(stored: tuple[Path, np.ndarray]) -> None:
    path, _ = stored
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        tree = VirtualTree(engine, root_name="a")
        assert not tree.open("/a.json").attach(FH)  # metadata alone
        assert tree.open("/a.raw").attach(FH)
    finally:
        engine.close()


def test_c_answers_reads_of_a_tiled_tiffs_head_and_leaves_its_tiles_to_python(stored: tuple[Path, np.ndarray]) -> None:
    """A tiled TIFF's tiles are not the array's C-order bytes, but its head (every IFD) is held in
    memory: C copies reads within it, and a read of or into its tiles takes the Python path."""
    path, _ = stored
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        handle = VirtualTree(engine, root_name="a").open("/a.tiled.tif")
        table = engine.cache.served.table
        head = handle.layout.head
        whole = np.empty(handle.size, np.uint8)
        assert handle.read_into(0, whole) == handle.size
        assert 0 < len(head) and whole[:len(head)].tobytes() == head
        assert handle.attach(FH)
        before = table.counters()["reads"]
        for offset, size in ((0, 8), (len(head) // 2, 16), (len(head) - 16, 16), (0, len(head))):
            out = np.empty(size, np.uint8)
            assert table.serve_into(FH, out, offset) == size
            assert out.tobytes() == head[offset:offset + size]
        assert table.counters()["reads"] == before + 4
        out = np.empty(32, np.uint8)
        assert table.serve_into(FH, out, len(head) - 16) == -1  # into the zeros after it: Python's, no miss
        assert table.serve_into(FH, out, handle.size - 32) == -1  # a tile, or the zeros after them
        handle.close()
        assert table.serve_into(FH, np.empty(8, np.uint8), 0) == -1  # closed: nothing of it is left in C
    finally:
        engine.close()


def test_random_preads_through_a_mount_are_answered_in_c_while_the_cache_evicts(tmp_path: Path) -> None:
    """Four threads of O_DIRECT preads of up to three rows at any alignment, on a mounted array
    larger than its cache, mostly around a few rows each (whose chunks fit the cache): many are
    answered in C (the stats file says so), chunks are evicted meanwhile, every byte is right."""
    store = tmp_path / "m.zarr"
    truth = np.random.default_rng(4).integers(0, 1 << 30, (64, 256, 200), dtype="<i4")  # 13 MB
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.create_array(str(store), shape=truth.shape, chunks=(4, 32, 64), dtype="<i4",
                          compressors=[ZstdCodec(level=1)])[...] = truth
    raw = truth.tobytes()
    row_bytes = truth.shape[-1] * 4
    errors: list[str] = []
    with mounted(store, tmp_path / "mnt", tmp_path / "log", "--cache-size", "8MiB") as mount:
        path = mount / "m.raw"

        def preads(seed: int) -> None:
            rng = random.Random(seed)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            try:
                hot = [rng.randrange(len(raw) // row_bytes) for _ in range(10)]  # rows read again and again
                for _ in range(1500):
                    row = rng.choice(hot) if rng.random() < 0.8 else rng.randrange(len(raw) // row_bytes)
                    offset = row * row_bytes + rng.randrange(row_bytes)  # any alignment, across rows
                    size = rng.randint(1, 3 * row_bytes)
                    got = os.pread(fd, size, offset)
                    if got != raw[offset:offset + size]:
                        errors.append(f"{offset} {size}")
            except OSError as exc:
                errors.append(repr(exc))
            finally:
                os.close(fd)

        threads = [threading.Thread(target=preads, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = json.loads((mount / ".zarrfs-stats.json").read_text())
    assert errors == []
    assert stats["reads"]["answered_in_c"] > 1000
    assert stats["cache"]["evictions"] > 0


def test_a_reader_that_goes_takes_its_chunks_out_of_c(stored: tuple[Path, np.ndarray]) -> None:
    """With --metadata-ttl a refreshed array gets a new reader; when the old one is gone, C must
    not keep its chunks (the cache would count them gone while C still held their memory)."""
    path, truth = stored
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        from zarrfs.engine.reader import ArrayReader

        old = engine.reader("")
        other = ArrayReader(old.source, engine.cache)  # as after a refresh: a new token, the same chunks
        for reader in (old, other):
            assert reader.read(0, truth.nbytes) == truth.tobytes()
        stored_chunks = 3 * 4 * 11  # of the 3 x 5 x 11, a row of 3 x 1 x 11 was never written
        table = engine.cache.served.table
        assert table.counters()["chunks"] == 2 * stored_chunks
        # What the garbage collector does once nothing refers to the reader (a loader thread may
        # still hold its last task for a while, so the test does not wait for that):
        assert other.leave_c.alive
        other.leave_c()
        assert table.counters()["chunks"] == stored_chunks
        probe = np.zeros(16, np.uint8)
        for fh, array in ((21, old), (22, other)):  # a .raw of each reader's array
            token, itemsize, shape, edges = array.served_layout()
            table.open_file(fh, token, 0, truth.nbytes, itemsize, shape, edges)
        assert table.serve_into(21, probe, 100 * ROW) == 16  # the old reader's chunks: still C's
        assert probe.tobytes() == truth.tobytes()[100 * ROW:100 * ROW + 16]
        assert table.serve_into(22, probe, 100 * ROW) == -2  # the gone one's: a miss now
        engine.cache.close()
        assert table.counters()["chunks"] == 0
    finally:
        engine.close()


def test_the_fast_read_callback_is_installed_once_at_a_time() -> None:
    import ctypes

    from zarrfs.engine._cached_reads import CachedReads
    from zarrfs.fuse._fast_read import install, uninstall

    python_read = ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 0)  # any callable address will do: nothing calls it
    address = ctypes.cast(python_read, ctypes.c_void_p).value
    table = CachedReads(1 << 20)

    def load_for_c(*_: object) -> tuple[int, int]:  # nothing calls it either
        return 1, 0

    baseline, loader_baseline = sys.getrefcount(table), sys.getrefcount(load_for_c)
    assert install(table.serve_capsule(), address, 16, load_for_c) > 0
    assert sys.getrefcount(table) == baseline + 1  # the installed capsule keeps the table alive
    assert sys.getrefcount(load_for_c) == loader_baseline + 1  # and the loader
    with pytest.raises(RuntimeError, match="installed already"):
        install(table.serve_capsule(), address, 16, load_for_c)
    with pytest.raises(ValueError, match="a loader"):
        install(table.serve_capsule(), address, 16, None)
    uninstall()
    assert sys.getrefcount(table) == baseline and sys.getrefcount(load_for_c) == loader_baseline
    assert install(table.serve_capsule(), address, 16, load_for_c) > 0  # a later mount of the same process
    uninstall()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_uncompressed_local_chunks_are_read_from_their_files_in_c(tmp_path: Path, zarr_format: int) -> None:
    """Chunk files Python has read raw are read by C afterwards, at any alignment and across rows;
    an absent chunk (fill value) and a file cut short since stay Python's; C keeps a bounded
    number of them open and lets go of an array's files with its reader."""
    truth = np.random.default_rng(5).integers(0, 1 << 30, (800, 3000), dtype="<i4")  # 9.6 MB
    truth[:, 1000:1500] = 3  # chunk column 2: never written, fill value 3
    store = tmp_path / "plain.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(str(store), shape=truth.shape, chunks=(40, 500), dtype="<i4", compressors=None,
                                  fill_value=3, zarr_format=zarr_format)
        for column in (0, 1, 3, 4, 5):
            array[:, column * 500:(column + 1) * 500] = truth[:, column * 500:(column + 1) * 500]
    raw = truth.tobytes()
    row = truth.shape[1] * 4
    engine = Engine.open(str(store), options=EngineOptions(cache_bytes=64 << 20))
    try:
        engine.cache.served.max_raw_files = 64  # fewer than the 100 files present (of 120)
        handle = VirtualTree(engine, root_name="p").open("/p.raw")
        assert handle.attach(FH)  # a plain local array is served in C too
        table = engine.cache.served.table
        whole = np.empty(len(raw), np.uint8)
        assert handle.read_into(0, whole) == len(raw) and whole.tobytes() == raw  # Python, raw reads
        assert table.counters()["chunks"] == 64
        rng = random.Random(zarr_format)
        answered = 0
        for _ in range(2000):
            offset = rng.randrange(len(raw) - 1)
            size = rng.randint(1, min(3 * row, len(raw) - offset))
            got = serve(engine, offset, size)
            if got is not None:
                assert got == raw[offset:offset + size], (offset, size)
                answered += 1
        assert answered > 50  # reads whose chunks are all among the 64 files C keeps, not continuing the last
        assert serve(engine, 1000 * 4 + 8 * row, 16) is None  # chunk column 2: absent, fill value
        last = (19, 5)  # chunk (rows 760-799, columns 2500-2999): read last, so open in C
        start = (last[0] * 40 * truth.shape[1] + last[1] * 500) * 4
        assert serve(engine, start, 40) == raw[start:start + 40]
        chunk_file = store / ("c/19/5" if zarr_format == 3 else "19.5")
        os.truncate(chunk_file, 100)  # cut short under the mount: C's read comes short, Python decides
        assert serve(engine, start, 40) is None
        engine.cache.served.forget_array(handle.region.reader._key_prefix, handle.region.reader._token)
        assert table.counters()["chunks"] == 0
    finally:
        engine.close()


def test_random_reads_over_every_chunk_file_are_answered_in_c(tmp_path: Path) -> None:
    """With the default limit C keeps every chunk file of a 300-file array open once Python has read
    them: a random read anywhere in it is answered in C (not Python's, which reopens a file and
    hands it to C, closing another), and right."""
    truth = np.random.default_rng(9).integers(0, 1 << 30, (600, 2000), dtype="<i4")
    store = tmp_path / "many.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.create_array(str(store), shape=truth.shape, chunks=(20, 200), dtype="<i4", compressors=None)[:] = truth
    raw = truth.tobytes()
    engine = Engine.open(str(store), options=EngineOptions(cache_bytes=64 << 20))
    try:
        assert engine.cache.served.max_raw_files >= 300  # this test's process has descriptors enough
        handle = VirtualTree(engine, root_name="m").open("/m.raw")
        assert handle.attach(FH)
        whole = np.empty(len(raw), np.uint8)
        assert handle.read_into(0, whole) == len(raw) and whole.tobytes() == raw
        assert engine.cache.served.table.counters()["chunks"] == 300
        rng = random.Random(3)
        answered = 0
        last_end = len(raw)  # where the whole read ended
        for _ in range(1000):
            offset = rng.randrange(0, len(raw) - 4096, 4096)
            continues = continues_stream(last_end, offset, offset + 4096)  # those are Python's (readahead)
            last_end = max(last_end, offset + 4096) if continues else offset + 4096
            got = serve(engine, offset, 4096)
            if not continues:
                assert got == raw[offset:offset + 4096], offset
                answered += 1
        assert answered > 400  # the rest continued the last read by the rule
    finally:
        engine.close()


def test_dd_of_an_uncompressed_array_is_answered_in_c(tmp_path: Path) -> None:
    """A chunk file is read by Python once (which gives it to C), then by C: chunks of 1024 rows
    take four 1 MiB reads each, and a stream's reads past its first two are C's.

    The reads go one at a time with the kernel's readahead off (POSIX_FADV_RANDOM), as `dd` of
    one block after another: with readahead on, the kernel may send several reads at once, and on
    a loaded machine all of a chunk row's reads can reach the daemon before Python has given that
    row's files to C (they are then Python's, correct but not C's: a matter of speed, for bench/)."""
    store = tmp_path / "u.zarr"
    truth = np.random.default_rng(6).integers(0, 255, (4096, 4096), dtype="u1")  # 16 MiB
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.create_array(str(store), shape=truth.shape, chunks=(1024, 1024), dtype="u1", compressors=None)[...] = truth
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        fd = os.open(mount / "u.raw", os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            copied = b"".join(os.pread(fd, 1 << 20, offset) for offset in range(0, truth.nbytes, 1 << 20))
        finally:
            os.close(fd)
        stats = json.loads((mount / ".zarrfs-stats.json").read_text())
    assert copied == truth.tobytes()
    reads = stats["reads"]
    assert reads["answered_in_c_in_streams"] >= reads["count"] // 2, reads
