"""RangeFetches: the ranges of one shard that a load needs, side by side on a network store."""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import numpy as np
import zarr
from remoteutil import RangeHandler, http_server
from zarr.codecs import ZstdCodec

from zarrfs.byte_ranges import ByteRequest
from zarrfs.engine.engine import Engine
from zarrfs.engine.fetches import AHEAD, RangeFetches
from zarrfs.engine.readahead import Readahead
from zarrfs.errors import StoreError
from zarrfs.options import EngineOptions, StoreOptions
from zarrfs.stores.store import Store


class SlowHandler(RangeHandler):
    """Answers after `delay` seconds and records how many requests were waiting at once.

    A request counts while it waits, not while its answer is written: the client may send its
    next request as soon as it has read an answer, before this thread has run again, and that
    request must not count beside the one it replaced."""

    delay = 0.15
    lock = threading.Lock()
    in_flight = 0
    most = 0

    def send_head(self):  # type: ignore[no-untyped-def]
        cls = type(self)
        with cls.lock:
            SlowHandler.in_flight += 1
            SlowHandler.most = max(SlowHandler.most, SlowHandler.in_flight)
        try:
            time.sleep(self.delay)
        finally:
            with cls.lock:
                SlowHandler.in_flight -= 1
        return super().send_head()


def test_ranges_of_a_network_store_are_in_flight_together_and_come_back_in_order(tmp_path: Path) -> None:
    payload = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    (tmp_path / "blob").write_bytes(payload)
    spans = [(i * 50_000, i * 50_000 + 30_000) for i in range(10)]
    SlowHandler.most = 0
    with http_server(tmp_path, SlowHandler) as server:
        fetches = RangeFetches(Store.open(server.url))
        try:
            got = list(fetches.ranges("blob", spans))
        finally:
            fetches.close()
    assert got == [payload[start:stop] for start, stop in spans]
    # Up to AHEAD at once (the test server's own threads answer them all): never one at a time.
    assert 2 <= SlowHandler.most <= AHEAD


def test_a_failed_or_missing_range_is_delivered_in_its_place(tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(bytes(range(256)) * 64)
    with http_server(tmp_path) as server:
        store = Store.open(server.url, options=StoreOptions(retries=0))
        fetches = RangeFetches(store)
        try:
            present = list(fetches.ranges("blob", [(0, 10), (100, 110)]))
            absent = list(fetches.ranges("gone", [(0, 10), (10, 20)]))
            # A range past the end: the server answers 416, which the store reports as an error.
            mixed = list(fetches.ranges("blob", [(0, 4), (1 << 20, (1 << 20) + 4), (4, 8)]))
        finally:
            fetches.close()
    assert present == [bytes(range(10)), bytes(range(100, 110))]
    assert absent == [None, None]
    assert mixed[0] == bytes(range(4)) and mixed[2] == bytes(range(4, 8))
    assert isinstance(mixed[1], StoreError)


def test_a_local_store_reads_ranges_in_the_calling_thread(tmp_path: Path) -> None:
    (tmp_path / "blob").write_bytes(b"0123456789")
    fetches = RangeFetches(Store.open(str(tmp_path)))
    seen: list[str] = []
    store_get_range = fetches.store.get_range

    def recorded(key: str, byte_range: ByteRequest) -> bytes | bytearray | None:
        seen.append(threading.current_thread().name)
        return store_get_range(key, byte_range)

    fetches.store.get_range = recorded  # type: ignore[method-assign]
    assert list(fetches.ranges("blob", [(0, 2), (5, 7)])) == [b"01", b"56"]
    assert seen == [threading.current_thread().name] * 2


def test_sharded_inner_chunks_of_a_mebibyte_or_more_are_read_ahead_chunk_by_chunk(tmp_path: Path) -> None:
    """Big inner chunks of a local store are worth a read each: readahead does not wait for groups
    of bands. From a remote store, where each is a request, they come in groups of bands too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        big = zarr.create_array(str(tmp_path / "big.zarr"), shape=(1024, 1024), shards=(1024, 1024),
                                chunks=(512, 512), dtype="<f4", compressors=[ZstdCodec(level=1)])
        small = zarr.create_array(str(tmp_path / "small.zarr"), shape=(1024, 1024), shards=(512, 512),
                                  chunks=(256, 256), dtype="<f4", compressors=[ZstdCodec(level=1)])
        big[...] = small[...] = np.arange(1024 * 1024, dtype="<f4").reshape(1024, 1024)
    for name, step in (("big.zarr", 0), ("small.zarr", 512 * 1024 * 4)):  # 1 MiB against 256 KiB inner chunks
        engine = Engine.open(str(tmp_path / name), options=EngineOptions(cache_bytes=64 << 20))
        try:
            reader = engine.reader("")
            assert reader.readahead.step == step, name
            remote = Readahead(name, reader.grid, reader.meta.grid, reader.itemsize, reader.nbytes, engine.cache,
                               enabled=True, remote=True)
            assert remote.step == 2 * reader.grid.axes[0].uniform_edge() * 1024 * 4, name  # two bands: a shard row
        finally:
            engine.close()
