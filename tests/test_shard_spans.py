"""Shards read whole over HTTP (engine/shard_spans.py): a load wanting a quarter or more of a shard
fetches its stored span in one request and decodes the rest of the shard from it later; a load
wanting less (random access) reads its own ranges. Real zarr-python stores, a real HTTP server."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from remoteutil import RangeHandler, http_server
from zarr.codecs import ZstdCodec

from zarrfs.engine.engine import Engine
from zarrfs.errors import ZarrfsError
from zarrfs.options import EngineOptions

SHAPE, SHARDS, CHUNKS = (512, 512), (256, 256), (64, 64)  # 4 shards of 4 x 4 inner chunks


class RecordingHandler(RangeHandler):
    """Records the Range header of every request for a shard (paths under /a.zarr/c/)."""

    lock = threading.Lock()
    ranges: list[tuple[str, str]] = []

    def send_head(self):  # type: ignore[no-untyped-def]
        if "/c/" in self.path:
            with self.lock:
                RecordingHandler.ranges.append((self.path, self.headers.get("Range", "")))
        return super().send_head()


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """The array, its shard (1, 1) never written (fill) and inner chunk (3, 0) of shard (1, 0) fill too."""
    root = tmp_path_factory.mktemp("spans")
    truth = np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    truth[256:, 256:] = 0
    truth[448:512, 0:64] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(str(root / "a.zarr"), shape=SHAPE, shards=SHARDS, chunks=CHUNKS, dtype="<f4",
                                  compressors=[ZstdCodec(level=1)], fill_value=0)
        array[:256, :] = truth[:256, :]
        array[256:, :256] = truth[256:, :256]
    return root, truth


@pytest.fixture()
def engine(stored: tuple[Path, np.ndarray]) -> Iterator[tuple[Engine, list[tuple[str, str]]]]:
    RecordingHandler.ranges = []
    with http_server(stored[0], RecordingHandler) as server:
        opened = Engine.open(f"{server.url}/a.zarr", options=EngineOptions(cache_bytes=64 << 20))
        try:
            yield opened, RecordingHandler.ranges
        finally:
            opened.close()


def data_requests(ranges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Requests for inner chunks' bytes (not the 260-byte index suffixes)."""
    return [(path, spec) for path, spec in ranges if not spec.startswith("bytes=-")]


def test_a_whole_read_asks_one_request_per_stored_shard(engine: tuple[Engine, list], stored) -> None:
    opened, ranges = engine
    reader = opened.reader("")
    got = np.frombuffer(reader.read(0, reader.nbytes), "<f4").reshape(SHAPE)
    assert np.array_equal(got, stored[1])
    data = data_requests(ranges)
    assert sorted(path for path, _ in data) == ["/a.zarr/c/0/0", "/a.zarr/c/0/1", "/a.zarr/c/1/0"]
    assert all(spec.startswith("bytes=0-") for _, spec in data)  # the span: from the first stored byte


def test_a_band_of_a_shard_fetches_its_span_and_the_next_band_asks_nothing(engine: tuple[Engine, list],
                                                                           stored) -> None:
    opened, ranges = engine
    reader = opened.reader("")
    band = 64 * SHAPE[1] * 4  # the first row of inner chunks: a quarter of shards (0, 0) and (0, 1)
    assert reader.read(0, band) == stored[1][:64].tobytes()
    assert len(data_requests(ranges)) == 2
    assert reader.read(band, 4 * band) == stored[1][64:256].tobytes()  # the rest of those shards
    assert len(data_requests(ranges)) == 2


def test_random_access_reads_only_its_inner_chunk(engine: tuple[Engine, list], stored) -> None:
    opened, ranges = engine
    reader = opened.reader("")
    offset = (300 * SHAPE[1] + 10) * 4  # in shard (1, 0), inner chunk (4, 0)
    assert reader.read(offset, offset + 8) == stored[1][300, 10:12].tobytes()
    (request,) = data_requests(ranges)
    first, last = (int(v) for v in request[1].removeprefix("bytes=").split("-"))
    shard = (stored[0] / "a.zarr" / "c" / "1" / "0").stat().st_size
    assert last - first + 1 < shard // 8  # one inner chunk of 16, not the span


def test_a_local_store_reads_no_spans(stored) -> None:
    opened = Engine.open(str(stored[0] / "a.zarr"), options=EngineOptions(cache_bytes=64 << 20))
    try:
        reader = opened.reader("")
        assert np.array_equal(np.frombuffer(reader.read(0, reader.nbytes), "<f4").reshape(SHAPE), stored[1])
        assert not any(key[0] == "shard-span" for key in opened.cache.cached_keys() if isinstance(key, tuple))
    finally:
        opened.close()


class VanishingHandler(RangeHandler):
    """Answers shard indexes; any other range of a shard is 404, as if it was deleted meanwhile."""

    def send_head(self):  # type: ignore[no-untyped-def]
        spec = self.headers.get("Range", "")
        if "/c/" in self.path and not spec.startswith("bytes=-"):
            self.send_error(404)
            return None
        return super().send_head()


def test_a_span_that_vanished_fails_the_read_naming_the_chunk(stored) -> None:
    with http_server(stored[0], VanishingHandler) as server:
        opened = Engine.open(f"{server.url}/a.zarr", options=EngineOptions(cache_bytes=64 << 20))
        try:
            reader = opened.reader("")
            with pytest.raises(ZarrfsError, match=r"c/0/0 inner \[0, 0\].*vanished"):
                reader.read(0, reader.nbytes)
        finally:
            opened.close()


def test_a_span_the_cache_evicted_leaves_the_rest_of_its_shard_to_ranges(tmp_path: Path) -> None:
    shape = (2048, 512)  # 16 shards, 4 MiB decoded: twice the cache
    truth = np.arange(np.prod(shape), dtype="<f4").reshape(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(str(tmp_path / "b.zarr"), shape=shape, shards=SHARDS, chunks=CHUNKS, dtype="<f4",
                                  compressors=[ZstdCodec(level=1)])
        array[...] = truth
    RecordingHandler.ranges = []
    with http_server(tmp_path, RecordingHandler) as server:
        opened = Engine.open(f"{server.url}/b.zarr", options=EngineOptions(cache_bytes=2 << 20))
        try:
            reader = opened.reader("")
            band = 64 * shape[1] * 4
            assert reader.read(0, band) == truth[:64].tobytes()
            spans = [path for path, spec in data_requests(RecordingHandler.ranges) if spec.startswith("bytes=0-")]
            assert sorted(spans) == ["/b.zarr/c/0/0", "/b.zarr/c/0/1"]
            assert reader.read(4 * band, reader.nbytes) == truth[256:].tobytes()  # evicts them
            before = len(data_requests(RecordingHandler.ranges))
            assert reader.read(band, 2 * band) == truth[64:128].tobytes()
            again = [spec for path, spec in data_requests(RecordingHandler.ranges)[before:]]
            assert again and not any(spec.startswith("bytes=0-") for spec in again), again
        finally:
            opened.close()
