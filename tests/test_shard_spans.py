"""Shards read whole over HTTP (engine/shard_spans.py): a load wanting a quarter or more of a shard
fetches the whole shard (index and inner chunks) in one request, or its stored span when its index
is already read, and decodes the rest of the shard from it later; a load wanting less (random
access) reads the index and its own ranges. Real zarr-python stores, a real HTTP server."""

from __future__ import annotations

import shutil
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from remoteutil import RangeHandler, http_server
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

from zarrfs.engine.cache import ChunkCache
from zarrfs.engine.engine import Engine
from zarrfs.engine.readahead import ReadStream
from zarrfs.engine.shard_spans import AHEAD_SHARE, SPAN_SHARE, Share, ShardSpans
from zarrfs.errors import ZarrfsError
from zarrfs.options import EngineOptions

SHAPE, SHARDS, CHUNKS = (512, 512), (256, 256), (64, 64)  # 4 shards of 4 x 4 inner chunks

# A stream's next shard row fetched ahead of its decodes (ShardSpans.fetch_ahead): 4 shard rows of
# 2 shards, each 1 MiB decoded and 41 kB stored; with a 6 MiB cache readahead decodes in batches of
# two bands (1 MiB of the array) and a span may be 384 KiB.
ROWS_SHAPE, ROWS_SHARDS, ROWS_CHUNKS, ROWS_CACHE = (2048, 1024), (512, 512), (128, 128), 6 << 20
ROW_BYTES = 512 * 1024 * 4  # one shard row of the array


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


def shard_requests(ranges: list[tuple[str, str]]) -> dict[str, list[str]]:
    """The Range headers asked of each shard's path."""
    asked: dict[str, list[str]] = {}
    for path, spec in ranges:
        asked.setdefault(path, []).append(spec)
    return asked


def stream_read(reader, start: int, stop: int, stream: ReadStream, size: int = 128 << 10) -> bytes:
    """[start, stop) read as `dd` through FUSE reads it: in order, `size` bytes at a time, one stream."""
    out = np.empty(size, np.uint8)
    pieces = []
    for offset in range(start, stop, size):
        got = reader.read_into(offset, min(stop, offset + size), out, stream)
        pieces.append(out[:got].tobytes())
    return b"".join(pieces)


def zarr_read(root: Path, name: str) -> np.ndarray:
    return zarr.open_array(str(root / name), mode="r")[...]


def test_a_whole_read_asks_one_request_per_shard(engine: tuple[Engine, list], stored) -> None:
    opened, ranges = engine
    reader = opened.reader("")
    got = np.frombuffer(reader.read(0, reader.nbytes), "<f4").reshape(SHAPE)
    assert np.array_equal(got, zarr_read(stored[0], "a.zarr"))
    limit = (64 << 20) // 16  # the span's limit at this cache size, asked for plus one byte
    assert shard_requests(ranges) == {f"/a.zarr/c/{shard}": [f"bytes=0-{limit}"]
                                      for shard in ("0/0", "0/1", "1/0", "1/1")}  # 1/1: absent, fill
    shards = sum((stored[0] / "a.zarr" / "c" / shard).stat().st_size for shard in ("0/0", "0/1", "1/0"))
    metadata = (stored[0] / "a.zarr" / "zarr.json").stat().st_size
    assert opened.store.bytes_fetched == shards + metadata  # every stored byte once


def test_a_band_of_a_shard_fetches_it_whole_and_the_next_band_asks_nothing(engine: tuple[Engine, list],
                                                                           stored) -> None:
    opened, ranges = engine
    reader = opened.reader("")
    band = 64 * SHAPE[1] * 4  # the first row of inner chunks: a quarter of shards (0, 0) and (0, 1)
    assert reader.read(0, band) == stored[1][:64].tobytes()
    assert sorted(shard_requests(ranges)) == ["/a.zarr/c/0/0", "/a.zarr/c/0/1"]
    assert len(ranges) == 2  # no index asked alone
    assert reader.read(band, 4 * band) == stored[1][64:256].tobytes()  # the rest of those shards
    assert len(ranges) == 2


def test_a_band_after_random_access_fetches_the_span_after_the_index(engine: tuple[Engine, list],
                                                                      stored) -> None:
    opened, ranges = engine
    reader = opened.reader("")
    assert reader.read(0, 8) == stored[1][0, :2].tobytes()  # the index of shard (0, 0) and one range
    assert [spec.startswith("bytes=-") for spec in shard_requests(ranges)["/a.zarr/c/0/0"]] == [True, False]
    band = 64 * SHAPE[1] * 4
    assert reader.read(0, 4 * band) == stored[1][:256].tobytes()
    asked = shard_requests(ranges)
    assert len(asked["/a.zarr/c/0/0"]) == 3  # index, the first chunk, the span (the index is known)
    assert len(asked["/a.zarr/c/0/1"]) == 1  # whole


@pytest.fixture(scope="module")
def index_at_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("start")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(
            str(root / "s.zarr"), shape=SHAPE, chunks=SHARDS, dtype="<f4", compressors=None,
            serializer=ShardingCodec(chunk_shape=CHUNKS, codecs=[BytesCodec(), ZstdCodec(level=1)],
                                     index_location="start"))
        array[...] = np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    return root


def test_an_index_at_the_shard_start_comes_with_the_whole_shard(index_at_start: Path) -> None:
    RecordingHandler.ranges = []
    with http_server(index_at_start, RecordingHandler) as server:
        opened = Engine.open(f"{server.url}/s.zarr", options=EngineOptions(cache_bytes=64 << 20))
        try:
            reader = opened.reader("")
            got = np.frombuffer(reader.read(0, reader.nbytes), "<f4").reshape(SHAPE)
            assert np.array_equal(got, zarr_read(index_at_start, "s.zarr"))
            assert {path: len(specs) for path, specs in shard_requests(RecordingHandler.ranges).items()} == {
                f"/s.zarr/c/{shard}": 1 for shard in ("0/0", "0/1", "1/0", "1/1")}
        finally:
            opened.close()


def written(root: Path, name: str, truth: np.ndarray, shards: tuple[int, ...] = SHARDS,
            chunks: tuple[int, ...] = CHUNKS) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(str(root / name), shape=truth.shape, shards=shards, chunks=chunks,
                                  dtype="<f4", compressors=[ZstdCodec(level=1)])
        array[...] = truth


def stored_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def test_shards_decoded_larger_than_a_span_may_be_come_whole_when_the_first_one_read_fits(tmp_path: Path) -> None:
    shape = (512, 1024)  # 8 shards: 256 KiB decoded, 165 kB stored; the limit (3.5 MiB / 16) 224 KiB
    written(tmp_path, "f.zarr", np.arange(np.prod(shape), dtype="<f4").reshape(shape))
    RecordingHandler.ranges = []
    with http_server(tmp_path, RecordingHandler) as server:
        opened = Engine.open(f"{server.url}/f.zarr", options=EngineOptions(cache_bytes=7 << 19))
        try:
            reader = opened.reader("")
            got = np.frombuffer(reader.read(0, reader.nbytes), "<f4").reshape(shape)
            assert np.array_equal(got, zarr_read(tmp_path, "f.zarr"))
            specs = [spec for _, spec in RecordingHandler.ranges]
            assert sum(spec.startswith("bytes=-") for spec in specs) == 1, specs  # the first index read
            assert len(specs) == 9, specs  # that index and its shard's span; 7 shards whole
            assert opened.store.bytes_fetched == stored_bytes(tmp_path)  # every stored byte once
        finally:
            opened.close()


@pytest.mark.parametrize("streamed", [False, True], ids=["read-whole", "streamed"])
def test_shards_larger_than_a_span_may_be_are_never_asked_whole(tmp_path: Path, streamed: bool) -> None:
    # 8 shards of 256 KiB of noise, 234 kB stored: larger than the limit (3 MiB / 16); streamed (a
    # stream readahead decodes in batches of two bands, ROWS_*), 8 of 1 MiB, 1 MiB stored (over 384 KiB)
    shape, cache = (ROWS_SHAPE, ROWS_CACHE) if streamed else ((512, 1024), 3 << 20)
    written(tmp_path, "n.zarr", np.random.default_rng(5).random(shape, dtype=np.float32),
            *((ROWS_SHARDS, ROWS_CHUNKS) if streamed else (SHARDS, CHUNKS)))
    RecordingHandler.ranges = []
    with http_server(tmp_path, RecordingHandler) as server:
        opened = Engine.open(f"{server.url}/n.zarr", options=EngineOptions(cache_bytes=cache))
        try:
            reader = opened.reader("")
            got = stream_read(reader, 0, reader.nbytes, ReadStream()) if streamed else reader.read(0, reader.nbytes)
            assert np.array_equal(np.frombuffer(got, "<f4").reshape(shape), zarr_read(tmp_path, "n.zarr"))
            specs = [spec for _, spec in RecordingHandler.ranges]
            assert f"bytes=0-{cache // 16}" not in specs  # neither fetched whole nor ahead
            assert sum(spec.startswith("bytes=-") for spec in specs) == 8  # each index read alone
            assert opened.store.bytes_fetched == stored_bytes(tmp_path)  # every stored byte once
        finally:
            opened.close()


def test_random_access_reads_only_its_inner_chunk(engine: tuple[Engine, list], stored) -> None:
    opened, ranges = engine
    reader = opened.reader("")
    offset = (300 * SHAPE[1] + 10) * 4  # in shard (1, 0), inner chunk (4, 0)
    assert reader.read(offset, offset + 8) == stored[1][300, 10:12].tobytes()
    assert len(ranges) == 2  # the shard's index, then the chunk's range
    (request,) = data_requests(ranges)
    first, last = (int(v) for v in request[1].removeprefix("bytes=").split("-"))
    shard = (stored[0] / "a.zarr" / "c" / "1" / "0").stat().st_size
    assert last - first + 1 < shard // 8  # one inner chunk of 16, not the span


def is_span_key(key: object) -> bool:
    """A shard span's (or whole shard's) cache key: (("shard-span", token), ...)."""
    return isinstance(key, tuple) and isinstance(key[0], tuple) and key[0][:1] == ("shard-span",)


def test_a_whole_read_over_http_holds_spans(engine: tuple[Engine, list]) -> None:
    opened, _ = engine
    reader = opened.reader("")
    reader.read(0, 64 * SHAPE[1] * 4)  # a band: the spans are held until the rest is read
    assert any(is_span_key(key) for key in opened.cache.cached_keys())


def test_a_local_store_reads_no_spans(stored) -> None:
    opened = Engine.open(str(stored[0] / "a.zarr"), options=EngineOptions(cache_bytes=64 << 20))
    try:
        reader = opened.reader("")
        assert np.array_equal(np.frombuffer(reader.read(0, reader.nbytes), "<f4").reshape(SHAPE), stored[1])
        assert not any(is_span_key(key) for key in opened.cache.cached_keys())
    finally:
        opened.close()


class VanishingAfterIndexHandler(RangeHandler):
    """Answers a shard's index and its first range asked; after that the shard is 404, as if
    deleted meanwhile."""

    asked: set[str] = set()

    def send_head(self):  # type: ignore[no-untyped-def]
        spec = self.headers.get("Range", "")
        if "/c/" in self.path and not spec.startswith("bytes=-"):
            if self.path in self.asked:
                self.send_error(404)
                return None
            self.asked.add(self.path)
        return super().send_head()


def test_a_span_that_vanished_fails_the_read_naming_the_chunk(stored) -> None:
    VanishingAfterIndexHandler.asked = set()
    with http_server(stored[0], VanishingAfterIndexHandler) as server:
        opened = Engine.open(f"{server.url}/a.zarr", options=EngineOptions(cache_bytes=64 << 20))
        try:
            reader = opened.reader("")
            assert reader.read(0, 8) == stored[1][0, :2].tobytes()  # shard (0, 0): its index, one range
            with pytest.raises(ZarrfsError, match=r"c/0/0 inner \[0, 1\].*vanished"):
                reader.read(0, reader.nbytes)
        finally:
            opened.close()


def test_a_span_the_cache_evicted_leaves_the_rest_of_its_shard_to_ranges(tmp_path: Path) -> None:
    shape = (8192, 512)  # 64 shards of 165 kB stored, 16 MiB decoded: twice the cache
    truth = np.arange(np.prod(shape), dtype="<f4").reshape(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(str(tmp_path / "b.zarr"), shape=shape, shards=SHARDS, chunks=CHUNKS, dtype="<f4",
                                  compressors=[ZstdCodec(level=1)])
        array[...] = truth
    RecordingHandler.ranges = []
    with http_server(tmp_path, RecordingHandler) as server:
        opened = Engine.open(f"{server.url}/b.zarr", options=EngineOptions(cache_bytes=8 << 20))
        try:
            reader = opened.reader("")
            band = 64 * shape[1] * 4
            assert reader.read(0, band) == truth[:64].tobytes()
            whole = f"bytes=0-{(8 << 20) // 16}"
            spans = [path for path, spec in RecordingHandler.ranges if spec == whole]
            assert sorted(spans) == ["/b.zarr/c/0/0", "/b.zarr/c/0/1"]
            assert reader.read(4 * band, reader.nbytes) == truth[256:].tobytes()  # evicts them
            before = len(data_requests(RecordingHandler.ranges))
            assert reader.read(band, 2 * band) == truth[64:128].tobytes()
            again = [spec for path, spec in data_requests(RecordingHandler.ranges)[before:]]
            assert again and whole not in again, again
        finally:
            opened.close()


def test_a_truncated_shard_fetched_whole_fails_the_read_naming_its_index(stored, tmp_path: Path) -> None:
    shutil.copytree(stored[0] / "a.zarr", tmp_path / "t.zarr")
    shard = tmp_path / "t.zarr" / "c" / "0" / "0"
    shard.write_bytes(shard.read_bytes()[:-100])  # the index's bytes are no longer the last ones
    with http_server(tmp_path, RangeHandler) as server:
        opened = Engine.open(f"{server.url}/t.zarr", options=EngineOptions(cache_bytes=64 << 20))
        try:
            reader = opened.reader("")
            with pytest.raises(ZarrfsError, match=r"c/0/0 \(shard index\)"):
                reader.read(0, 64 * SHAPE[1] * 4)
        finally:
            opened.close()


class RowHandler(RecordingHandler):
    """Also tells, by `row_asked`, when both shards of the second shard row were asked for whole."""

    row_asked = threading.Event()

    def send_head(self):  # type: ignore[no-untyped-def]
        answer = super().send_head()
        with self.lock:
            if sum("/c/1/" in path and spec == f"bytes=0-{ROWS_CACHE // 16}" for path, spec in self.ranges) == 2:
                RowHandler.row_asked.set()
        return answer


def test_a_stream_fetches_the_next_shard_row_whole_before_reading_it(tmp_path: Path) -> None:
    truth = (np.arange(np.prod(ROWS_SHAPE)) % 997).astype("<f4").reshape(ROWS_SHAPE)
    written(tmp_path, "r.zarr", truth, ROWS_SHARDS, ROWS_CHUNKS)
    RecordingHandler.ranges = []
    RowHandler.row_asked = threading.Event()
    with http_server(tmp_path, RowHandler) as server:
        opened = Engine.open(f"{server.url}/r.zarr", options=EngineOptions(cache_bytes=ROWS_CACHE))
        try:
            reader = opened.reader("")
            stream = ReadStream()
            # Half the first shard row: readahead decodes its second half, and the row after it is
            # fetched meanwhile (decoded readahead alone asks for it only past 1.25 MiB).
            assert stream_read(reader, 0, ROW_BYTES // 2, stream) == truth[:256].tobytes()
            assert RowHandler.row_asked.wait(30), RecordingHandler.ranges
            rest = stream_read(reader, ROW_BYTES // 2, reader.nbytes, stream)
            assert np.frombuffer(rest, "<f4").tolist() == truth[256:].ravel().tolist()
            assert np.array_equal(zarr_read(tmp_path, "r.zarr"), truth)  # the oracle agrees
            asked = shard_requests(RecordingHandler.ranges)
            # One request per shard (the first one: its index alone, then its span); no range again.
            assert {path: len(specs) for path, specs in asked.items()} == {
                f"/r.zarr/c/{row}/{column}": 2 if (row, column) == (0, 0) else 1
                for row in range(4) for column in range(2)}
            assert opened.store.bytes_fetched == stored_bytes(tmp_path)  # every stored byte once
        finally:
            opened.close()


class HeldFetches:
    """What ShardSpans asks of RangeFetches to fetch ahead: here the fetches wait until a test runs them."""

    def __init__(self) -> None:
        self.started: list = []

    def ahead(self, fetch) -> bool:  # type: ignore[no-untyped-def]
        self.started.append(fetch)
        return True


def test_fetches_ahead_start_only_while_they_fit_their_share_of_the_budget() -> None:
    cache = ChunkCache(64 << 20, 2)
    fetches = HeldFetches()
    spans = ShardSpans(cache, fetches, enabled=True)  # type: ignore[arg-type]
    limit = (64 << 20) // SPAN_SHARE
    whole = Share(wanted=16, per_shard=16, decoded_nbytes=1 << 20, index_nbytes=260)  # surely within the limit
    ran: list[int] = []
    for n in range(12):
        spans.fetch_ahead((n, 0), whole, lambda n=n: ran.append(n))
    spans.fetch_ahead((0, 0), whole, lambda: ran.append(-1))  # queued or started already: not again
    spans.fetch_ahead((20, 0), Share(3, 16, 1 << 20, 260), lambda: ran.append(20))  # under a quarter: never
    room = (64 << 20) // AHEAD_SHARE // limit
    assert len(fetches.started) == room < 12
    fetches.started.pop(0)()  # one ends: the next queued starts in its room
    assert ran == [0] and len(fetches.started) == room
    while fetches.started:
        fetches.started.pop(0)()
    assert ran == list(range(12))
    cache.close()
