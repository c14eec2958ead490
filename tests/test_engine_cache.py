"""The decoded-chunk cache under concurrent and sequential reads.

Each chunk loads once however many threads want it at the same time; a
sequential read decodes each chunk once when one band of chunks fits the
budget; a budget below one band is warned about; and the memory the cache
holds stays within its budget whatever the read pattern.
"""

from __future__ import annotations

import functools
import gc
import logging
import math
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from oracles import Oracle, write_zarr
from zarrfs.engine.engine import Engine
from zarrfs.engine.readahead import ReadStream
from zarrfs.engine.buffers import owned_memory
from zarrfs.engine.cache import ChunkCache

PIECE = 128 << 10  # what the kernel asks a FUSE file system for at a time
THREADS = 8


@pytest.fixture(scope="module")
def big_array(tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    """8 MiB of float32, 128x128 chunks (64 KiB), some of them missing: a band is 8 chunks = 512 KiB.

    Compressed (zarr-python's default zstd), so that reads go through decoding
    and the cache: uncompressed local chunks are read straight from their files.
    """
    data = np.arange(2048 * 1024, dtype="<f4").reshape(2048, 1024)
    data[:128, 256:512] = 0  # two all-fill chunks, never written
    return write_zarr(tmp_path_factory.mktemp("big"), data, zarr_format=3, chunks=(128, 128))


def count_fetches(engine: Engine, delay: float = 0.0) -> Counter[str]:
    """Count (and optionally slow down) every whole-key fetch the engine's store makes (chunks come
    with their versions, `get_versioned`; documents plainly, `get`)."""
    fetched: Counter[str] = Counter()
    lock = threading.Lock()

    def counted(plain: Callable[[str], Any]) -> Callable[[str], Any]:
        def get(key: str) -> Any:
            with lock:
                fetched[key] += 1
            time.sleep(delay)
            return plain(key)
        return get

    engine.store.get = counted(engine.store.get)  # type: ignore[method-assign]
    engine.store.get_versioned = counted(engine.store.get_versioned)  # type: ignore[method-assign]
    return fetched


def n_chunks(shape: tuple[int, ...], chunks: tuple[int, ...]) -> int:
    return math.prod(-(-s // c) for s, c in zip(shape, chunks, strict=True))


def read_sequentially(read: Callable[[int, int], bytes], nbytes: int, piece: int = PIECE) -> bytes:
    return b"".join(read(start, start + piece) for start in range(0, nbytes, piece))


# ------------------------------------------------------------- concurrency


@pytest.mark.parametrize("ranges", ["whole", "interleaved"])
def test_threads_reading_at_once_load_each_chunk_once(ranges: str, big_array: Oracle,
                                                      open_engine: Callable[..., Engine]) -> None:
    engine = open_engine(big_array.store, cache_bytes=64 << 20, workers=THREADS)
    reader = engine.reader(big_array.node)
    fetched = count_fetches(engine, delay=0.002)  # slow fetches: threads really overlap
    want = big_array.expected.tobytes()
    barrier = threading.Barrier(THREADS)
    results: list[bytes] = [b""] * THREADS

    def work(i: int) -> None:
        barrier.wait()
        if ranges == "whole":
            results[i] = reader.read(0, len(want))
        else:  # every thread reads all pieces, starting at a different one
            pieces = list(range(0, len(want), PIECE))
            order = pieces[i::THREADS] + [p for p in pieces if (p // PIECE) % THREADS != i]
            parts = {start: reader.read(start, start + PIECE) for start in order}
            results[i] = b"".join(parts[start] for start in pieces)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(result == want for result in results)
    total = n_chunks(reader.meta.shape, reader.meta.chunk_shape)
    assert engine.cache.stats().loads == total
    chunk_fetches = {key: n for key, n in fetched.items() if "/c/" in key}
    assert len(chunk_fetches) == total and set(chunk_fetches.values()) == {1}


@pytest.mark.parametrize("layout", ["dotted", "legacy-nested"])
def test_concurrent_loads_of_v2_chunks_with_missing_first_chunk(layout: str, tmp_path: Path,
                                                                 open_engine: Callable[..., Engine]) -> None:
    """Regression: probing for the pre-2.8 nested key layout ('i/j' keys, no dimension_separator)
    after a missing chunk must not misroute loads running at the same time."""
    data = np.arange(64 * 64, dtype="<i4").reshape(64, 64)
    data[:8, :8] = 0  # chunk (0, 0) is all fill: never written
    separator = "/" if layout == "legacy-nested" else "."
    oracle = write_zarr(tmp_path, data, zarr_format=2, chunks=(8, 8), compressors=None,
                        chunk_key_encoding={"name": "v2", "separator": separator})
    if layout == "legacy-nested":
        zarray = oracle.store / "arr" / ".zarray"
        zarray.write_text(zarray.read_text().replace('"dimension_separator": "/",', ""))
        assert "dimension_separator" not in zarray.read_text()
    for _ in range(10):
        engine = open_engine(oracle.store, cache_bytes=64 << 20, workers=THREADS)
        count_fetches(engine, delay=0.001)
        reader = engine.reader(oracle.node)
        assert reader.read(0, data.nbytes) == oracle.expected.tobytes()


# --------------------------------------------------------------- sequential


@pytest.mark.parametrize(("shape", "chunks", "dtype"), [
    ((2048, 1024), (128, 128), "<f4"),  # 64 KiB chunks, 512 KiB bands, reads aligned to rows
    ((1000, 1000), (100, 128), "<f4"),  # edge chunks, 128 KiB reads cut rows
    ((40, 70, 900), (7, 16, 128), "<f8"),  # 3-D: a band spans two axes
])
def test_sequential_read_loads_each_chunk_once(shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str,
                                               tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    data = np.arange(math.prod(shape), dtype=dtype).reshape(shape)
    oracle = write_zarr(tmp_path, data, zarr_format=3, chunks=chunks)  # compressed: decoded via the cache
    probe = open_engine(oracle.store, cache_bytes=1 << 30).reader(oracle.node)
    budget = probe.readahead.band_bytes + 64 * 1024  # one band and a little, far below the array
    assert probe.readahead.band_bytes >= PIECE and budget < data.nbytes / 2
    engine = open_engine(oracle.store, cache_bytes=budget)
    reader = engine.reader(oracle.node)
    assert read_sequentially(reader.read, data.nbytes) == data.tobytes()
    assert engine.cache.stats().loads == n_chunks(shape, chunks)


@pytest.mark.parametrize("budget", [1 << 20, 6 << 20])  # one band and a half; room for readahead
def test_sequential_stream_loads_each_chunk_once(budget: int, big_array: Oracle,
                                                 open_engine: Callable[..., Engine]) -> None:
    """Reads as FUSE makes them (one stream per open file, readahead on), budget below the array."""
    engine = open_engine(big_array.store, cache_bytes=budget)
    reader = engine.reader(big_array.node)
    assert budget < reader.meta.nbytes
    stream = ReadStream()
    got = read_sequentially(lambda start, stop: reader.read(start, stop, stream), reader.meta.nbytes)
    assert got == big_array.expected.tobytes()
    assert engine.cache.stats().loads == n_chunks(reader.meta.shape, reader.meta.chunk_shape)


def test_small_budget_is_warned_about(big_array: Oracle, open_engine: Callable[..., Engine],
                                      caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="zarrfs"):
        open_engine(big_array.store, cache_bytes=1 << 20).reader(big_array.node)  # a band is 512 KiB: fits
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="zarrfs"):
        reader = open_engine(big_array.store, cache_bytes=256 << 10).reader(big_array.node)
        assert reader.readahead.band_bytes > 256 << 10
        reader.read(0, 4096)  # a read alone (tiles, random reads) needs no band: nothing said yet
        assert not caplog.records
        # Still correct, only slower; said once, when a stream turns sequential.
        stream = ReadStream()
        assert read_sequentially(functools.partial(reader.read, stream=stream), reader.meta.nbytes) == \
            big_array.expected.tobytes()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "/arr" in warnings[0].getMessage() and "band" in warnings[0].getMessage()


# ----------------------------------------------------------- bounded memory


@pytest.mark.parametrize("pattern", ["streams", "random"])
def test_cache_memory_stays_within_budget(pattern: str, big_array: Oracle,
                                          open_engine: Callable[..., Engine]) -> None:
    """Many sequential streams, or random reads: what the cache keeps alive stays near its budget.

    The budget (10 MiB) holds the whole 8 MiB array, so nothing forces evictions.
    """
    budget = 10 << 20
    engine = open_engine(big_array.store, cache_bytes=budget)
    reader = engine.reader(big_array.node)
    want = big_array.expected.tobytes()
    gc.collect()
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        if pattern == "streams":
            for i in range(16):  # two reads each: every stream turns sequential
                stream = ReadStream()
                start = i * len(want) // 16
                for offset in (start, start + PIECE):
                    assert reader.read(offset, offset + PIECE, stream) == want[offset:offset + PIECE]
        else:
            for start in np.random.default_rng(0).integers(0, len(want), 200):
                assert reader.read(int(start), int(start) + 5000) == want[start:start + 5000]
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - baseline
    finally:
        tracemalloc.stop()
    assert engine.cache.stats().cached_bytes <= budget
    assert held <= budget + (1 << 20), f"the cache keeps {held >> 20} MiB alive with a {budget >> 20} MiB budget"


# ------------------------------------------------------------ spare memory


def test_only_plain_memory_of_a_chunks_own_can_be_reused() -> None:
    """buffers.owned_memory: the whole writable buffer a chunk views, nothing else."""
    owner = np.empty(4096, np.uint8)
    chunk = owner.view("<f4").reshape(32, 32)
    memory = owned_memory(chunk)
    assert memory is owner
    whole = np.zeros((8, 8), "<f8")  # owns its memory itself
    assert owned_memory(whole) is whole
    assert owned_memory(np.frombuffer(b"\0" * 64, "<f8")) is None  # memory of a bytes object: read-only
    assert owned_memory(np.empty(4096, np.uint8)[:1024]) is None  # part of a larger buffer
    assert owned_memory(np.empty(4, object)) is None
    assert owned_memory(b"side data") is None


def test_a_leased_chunk_is_never_reused_and_a_released_one_is() -> None:
    """The lease rule (buffers.py): a chunk evicted while a read leases it keeps its bytes; the
    memory of one evicted with no lease open goes to the next load's decode."""
    size = 1 << 16
    # Room for 8 chunks and a half: the pool (an eighth of the budget) holds one chunk.
    cache = ChunkCache(budget_bytes=8 * size + size // 2 + 8 * 256, max_workers=2)
    try:
        def load(key: tuple) -> np.ndarray:
            buffer = cache.take_buffer(size)
            chunk = (np.empty(size, np.uint8) if buffer is None else buffer)
            chunk[:] = key[1]
            return chunk

        def read(key: tuple) -> tuple[dict, np.ndarray]:
            values, pending = cache.get_many([key], load, size_hint=size)
            values.update((k, f.result()) for k, f in pending.items())
            return values, values[key]

        leased, first = read(("c", 0))
        for index in range(1, 8):
            cache.release(read(("c", index))[0])
        assert cache.stats().evictions == 0
        cache.release(read(("c", 8))[0])  # evicts chunk 0, leased: dropped, not reused
        assert cache.stats().evictions == 1 and cache.stats().spares_reused == 0
        _, ninth = read(("c", 9))  # evicts chunk 1, released: its memory takes the decode
        assert (first == 0).all()  # still leased: never written over
        assert cache.stats().spares_reused == 1
        assert (ninth == 9).all() and not np.shares_memory(first, ninth)
        cache.release(leased)  # a lease on a chunk gone from the cache ends quietly
    finally:
        cache.close()


def test_stream_decodes_into_evicted_chunks_and_never_into_held_ones(big_array: Oracle,
                                                                      open_engine: Callable[..., Engine]) -> None:
    """A stream over an array twice the budget reuses evicted chunks' memory for its decodes;
    a chunk a reader still holds keeps its bytes although the cache evicted it."""
    budget = 4 << 20
    engine = open_engine(big_array.store, cache_bytes=budget)
    reader = engine.reader(big_array.node)
    want = big_array.expected.tobytes()
    stream = ReadStream()
    half = len(want) // 2
    assert read_sequentially(lambda a, b: reader.read(a, b, stream), half) == want[:half]
    cached = engine.cache.cached_keys()
    values, pending = engine.cache.get_many(cached, reader._load)  # a reader's leases on the chunks cached now
    assert not pending
    leased = [values[key] for key in cached]
    assert leased
    kept_alive = [value for value in leased if isinstance(value, np.ndarray)]
    held = [value.copy() for value in kept_alive]
    assert kept_alive
    rest = b"".join(reader.read(start, start + PIECE, stream) for start in range(half, len(want), PIECE))
    assert rest == want[half:]
    assert all(np.array_equal(alive, copy) for alive, copy in zip(kept_alive, held, strict=True))
    engine.cache.release(dict(zip(cached, leased, strict=True)))
    stats = engine.cache.stats()
    assert stats.loads == n_chunks(reader.meta.shape, reader.meta.chunk_shape)
    # Every eviction of a chunk nobody holds frees memory a later decode of the stream can take.
    assert stats.spares_reused >= (stats.evictions - len(kept_alive)) // 2 > 0, stats
    assert stats.spare_bytes <= budget


@pytest.mark.parametrize("budget", [15 << 19, 12 << 20])  # 7.5 MiB: below the 8 MiB array; 12 MiB: above it
def test_stream_recycles_passed_bands_only_when_the_array_outgrows_the_budget(
        budget: int, big_array: Oracle, open_engine: Callable[..., Engine]) -> None:
    """Over an array larger than the budget, a stream's decodes take the memory of the bands it
    passed while the cache still has room; over a smaller one, every chunk stays for the next reader.

    Readahead is off: its loads start as the cache's room allows, which on a busy machine made
    how many passed bands they took vary; each read's own loads take them in a fixed order."""
    engine = open_engine(big_array.store, cache_bytes=budget)
    reader = engine.reader(big_array.node)
    reader.readahead.readahead_max = 0
    want = big_array.expected.tobytes()
    half = len(want) // 2  # 4 MiB fits either budget: nothing must be evicted for room
    stream = ReadStream()
    assert read_sequentially(lambda a, b: reader.read(a, b, stream), half) == want[:half]
    stats = engine.cache.stats()
    if budget < len(want):
        assert stats.spares_reused > 0 and stats.evictions > 0, stats
        # The passed bands left: what stays are the bands the stream's 1 MiB window reaches and
        # those it is not yet past by the slack, 4 of the 9 loaded (all 9, 4.5 MiB, without recycling).
        assert stats.cached_bytes < half, stats
    else:
        assert stats.spares_reused == stats.evictions == 0, stats
        assert read_sequentially(reader.read, half) == want[:half]  # a second reader: all cached
        assert engine.cache.stats().misses == stats.misses
