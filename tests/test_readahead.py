"""A stream's read window: its own buffer, outside the cache, counted against the budget while it lives."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from oracles import write_zarr
from zarrfs.engine.engine import Engine
from zarrfs.engine.readahead import WINDOW_BYTES, ReadStream


def test_window_holds_budget_while_it_lives(tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    data = np.arange(1024 * 1024, dtype="<f4").reshape(1024, 1024)
    oracle = write_zarr(tmp_path, data, zarr_format=3, chunks=(64, 128))
    engine = open_engine(oracle.store, cache_bytes=16 << 20)
    reader = engine.reader(oracle.node)
    stream = ReadStream()
    got = b"".join(reader.read(o, o + 4096, stream) for o in range(0, 3 * 4096, 4096))
    assert got == data.tobytes()[:3 * 4096]
    assert stream.buffer is not None and len(stream.buffer[1]) == WINDOW_BYTES
    assert engine.cache.held_bytes == WINDOW_BYTES  # one window, however many reads it served
    del stream, got
    gc.collect()
    assert engine.cache.held_bytes == 0  # the file closed: its window's budget is back


def test_streams_past_half_the_budget_read_without_a_window(tmp_path: Path,
                                                            open_engine: Callable[..., Engine]) -> None:
    data = np.arange(1024 * 1024, dtype="<f4").reshape(1024, 1024)
    oracle = write_zarr(tmp_path, data, zarr_format=3, chunks=(64, 128))
    engine = open_engine(oracle.store, cache_bytes=6 << 20)
    reader = engine.reader(oracle.node)
    streams = [ReadStream() for _ in range(8)]
    for stream in streams:
        assert b"".join(reader.read(o, o + 4096, stream) for o in (0, 4096)) == data.tobytes()[:8192]
    assert engine.cache.held_bytes <= engine.cache.budget_bytes // 2
    assert any(stream.buffer is None for stream in streams)
