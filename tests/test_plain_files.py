"""Ordinary files of a remote share read through the block cache (engine/plain_files.py): the bytes
are the file's, and a sequential stream loads ahead even when the kernel's readahead delivers its
reads out of order (several are in flight at once, answered by different libfuse threads)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from remoteutil import http_server

from zarrfs.engine import plain_files
from zarrfs.engine.cache import ChunkCache
from zarrfs.engine.plain_files import PlainFileReader
from zarrfs.stores.store import Store

BLOCK = 64 << 10  # small blocks, so that a short file has many
READ = 16 << 10


@pytest.fixture
def blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_files, "BLOCK_BYTES", BLOCK)


def read(reader: PlainFileReader, offset: int, size: int = READ) -> bytes:
    out = np.empty(size, np.uint8)
    count = reader.read_into(offset, out)
    return out[:count].tobytes()


@contextmanager
def remote_file(tmp_path: Path, blocks: int, seed: int, requests: Counter | None = None,
                ) -> Iterator[tuple[bytes, PlainFileReader, ChunkCache]]:
    """A file of `blocks` blocks served over HTTP, open through the block cache: (its bytes, the reader, the
    cache); `requests` gets the server's count of requests per path when the server stops."""
    data = np.random.default_rng(seed).bytes(blocks * BLOCK)
    (tmp_path / "blob.bin").write_bytes(data)
    cache = ChunkCache(64 << 20, 4)
    with http_server(tmp_path) as server:
        reader = PlainFileReader(Store.open(server.url), "blob.bin", len(data), None, cache, timeout=30)
        try:
            yield data, reader, cache
        finally:
            reader.close()
            if requests is not None:
                requests.update(server.counter)


def test_reads_out_of_order_in_a_stream_still_load_ahead(tmp_path: Path, blocks: None) -> None:
    with remote_file(tmp_path, 32, 3) as (data, reader, cache):
        # The kernel's order: each pair of neighbouring reads swapped, as two threads answer them.
        offsets = [offset for pair in range(0, 8 * BLOCK, 2 * READ) for offset in (pair + READ, pair)]
        got = {offset: read(reader, offset) for offset in [0, *offsets[2:]]}
        prefetches = cache.stats().prefetches
    assert all(got[offset] == data[offset:offset + READ] for offset in got)
    # The read at 0 loads blocks 1-4 ahead; the stream's later reads keep loading ahead past them.
    assert prefetches > plain_files.FIRST_AHEAD_BLOCKS, prefetches


def test_a_read_far_from_the_last_loads_nothing_ahead(tmp_path: Path, blocks: None) -> None:
    with remote_file(tmp_path, 64, 4) as (data, reader, cache):
        far = 40 * BLOCK  # past the stream's reach (served.py) from a read at 0 of 16 KiB
        assert read(reader, 10 * BLOCK) == data[10 * BLOCK:10 * BLOCK + READ]
        assert read(reader, 10 * BLOCK + far) == data[10 * BLOCK + far:10 * BLOCK + far + READ]
        prefetches = cache.stats().prefetches
    assert prefetches == 0, prefetches


def test_a_long_stream_asks_for_its_blocks_in_growing_ranges(tmp_path: Path, blocks: None) -> None:
    """A sequential read of 512 blocks gets each byte right with a few dozen ranged GETs, not one per
    block: each top-up of its reach is fetched as REQUESTS_PER_TOP_UP ranges, and the reach doubles."""
    requests: Counter = Counter()
    with remote_file(tmp_path, 512, 5, requests) as (data, reader, cache):
        got = b"".join(read(reader, offset, 4 * READ) for offset in range(0, len(data), 4 * READ))
        stats = cache.stats()
    assert got == data
    gets = requests["/blob.bin"]
    assert stats.loads == 512, stats  # each block loaded once (those of a span by its one GET)
    assert gets <= 512 // 8, requests  # 27 here; 512, one GET per block, before the reach grew


def test_a_stream_that_starts_again_behind_loads_ahead_again(tmp_path: Path, blocks: None) -> None:
    """A stream that jumped back and reads on from there loads ahead of its new place at once (not only
    once it passes where the old stream's loads ahead reached)."""
    with remote_file(tmp_path, 64, 6) as (data, reader, cache):
        for offset in range(32 * BLOCK, 40 * BLOCK, 4 * READ):  # a stream in the second half
            assert read(reader, offset, 4 * READ) == data[offset:offset + 4 * READ]
        before = cache.stats().prefetches
        for offset in (2 * BLOCK, 2 * BLOCK + 4 * READ):  # back near the start, then on from there
            assert read(reader, offset, 4 * READ) == data[offset:offset + 4 * READ]
        loaded = cache.stats().prefetches - before
    assert loaded >= plain_files.FIRST_AHEAD_BLOCKS, loaded
