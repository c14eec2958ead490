"""The pieces behind remote reading, without a mount: coalescing, batched loads, readahead
over HTTP, request accounting, options, and hiding credentials."""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

from remoteutil import HttpServer, http_server
from zarrfs.byte_ranges import ByteRequest, RangeRequest
from zarrfs.engine.cache import ChunkCache
from zarrfs.engine.loads import Batch
from zarrfs.engine.chunks import coalesce
from zarrfs.engine.engine import Engine
from zarrfs.errors import ChunkError, OptionsError
from zarrfs.options import EngineOptions, StoreOptions, parse_duration
from zarrfs.engine.readahead import ReadStream
from zarrfs.stores.redact import RedactingFormatter, daemon_argv, secret_values

SHAPE = (256, 256)
BIG = (4096, 4096)  # 64 MiB: room for random reads far apart


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, HttpServer]]:
    """A sharded array (zarr-python's morton order inside shards) and a plain chunked one."""
    root = tmp_path_factory.mktemp("units")
    data = np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.create_array(str(root / "sharded.zarr"), shape=SHAPE, shards=(128, 128), chunks=(32, 32),
                          dtype="<f4", compressors=[ZstdCodec(level=1)])[...] = data
        zarr.create_array(str(root / "plain.zarr"), shape=BIG, chunks=(256, 256), dtype="<f4",
                          compressors=[ZstdCodec(level=1)])[...] = 1.5
    with http_server(root) as server:
        yield root, server


def stored_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name != "zarr.json")


def open_engine(server: HttpServer, name: str, **options: object) -> Engine:
    return Engine.open(f"{server.url}/{name}", options=EngineOptions(**options))  # type: ignore[arg-type]


# ------------------------------------------------------------- coalescing


def test_coalesce_joins_neighbours_only() -> None:
    wanted = [((0,), 0, 100), ((1,), 100, 50), ((3,), 400, 10), ((2,), 150 + 100, 20)]
    runs = coalesce(wanted, gap=100, limit=1 << 20)
    assert [(r.start, r.stop) for r in runs] == [(0, 270), (400, 410)]
    assert [[m[0] for m in r.members] for r in runs] == [[(0,), (1,), (2,)], [(3,)]]
    assert [(r.start, r.stop) for r in coalesce(wanted, gap=0, limit=1 << 20)] == [(0, 150), (250, 270), (400, 410)]
    assert len(coalesce(wanted, gap=100, limit=120)) == 4  # a run never grows past the limit


def test_sharded_full_read_fetches_each_byte_once_with_fewer_requests(served: tuple[Path, HttpServer]) -> None:
    root, server = served
    engine = open_engine(server, "sharded.zarr")
    try:
        reader = engine.reader("")
        want = np.arange(np.prod(SHAPE), dtype="<f4").tobytes()
        stream = ReadStream()
        got = b"".join(reader.read(o, o + (64 << 10), stream) for o in range(0, reader.nbytes, 64 << 10))
        assert got == want
        store = engine.store.stats.as_dict()
        inner_chunks = (SHAPE[0] // 32) * (SHAPE[1] // 32)
        assert store["bytes_fetched"] / stored_bytes(root / "sharded.zarr") <= 1.05
        # the metadata, then each shard whole in one request, its index taken from it (shard_spans.py)
        assert store["requests"] == 1 + 4
        stats = engine.cache.stats()
        # each inner chunk decoded once; each shard's index and whole bytes loaded once (side data)
        assert (stats.loads, stats.side_loads) == (inner_chunks, 4 + 4)
    finally:
        engine.close()


def test_batched_misses_load_once_however_many_threads_want_them() -> None:
    calls: list[list[int]] = []
    release = threading.Event()

    def load_group(keys: list) -> Iterator[tuple[int, object]]:
        calls.append(sorted(keys))
        release.wait(5)
        for key in keys:
            yield key, (ChunkError("bad") if key == 3 else np.full(4, key))

    cache = ChunkCache(1 << 20, 4)
    batch = Batch(group=lambda key: key // 4, load=load_group)
    results: list[dict] = []

    def reader() -> None:
        values, pending = cache.get_many(range(8), lambda key: pytest.fail("no single loads"), batch=batch)
        results.append({k: (f.exception() or f.result()) for k, f in pending.items()} | values)

    threads = [threading.Thread(target=reader) for _ in range(6)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    release.set()
    for thread in threads:
        thread.join(10)
    cache.close()
    assert sorted(calls) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # two groups, each loaded once
    for outcome in results:
        assert isinstance(outcome[3], ChunkError)  # one bad key fails alone
        assert all(np.array_equal(outcome[k], np.full(4, k)) for k in (0, 1, 2, 4, 5, 6, 7))


# -------------------------------------------------------------- readahead


def test_sequential_reads_keep_requests_in_flight_and_random_reads_start_no_readahead(
        served: tuple[Path, HttpServer]) -> None:
    _, server = served
    engine = open_engine(server, "plain.zarr", cache_bytes=64 << 20)
    try:
        reader = engine.reader("")
        rng = np.random.default_rng(3)
        random_stream = ReadStream()
        previous = 0
        touched: set[tuple[int, int]] = set()
        for _ in range(40):
            start = previous
            while abs(start - previous) < 4 << 20:  # a jump, not a step forward
                start = int(rng.integers(0, reader.nbytes - 4096)) // 4 * 4
            assert reader.read(start, start + 4096, random_stream) == np.full(1024, 1.5, "<f4").tobytes()
            previous = start
            touched |= {(e // BIG[1] // 256, e % BIG[1] // 256) for e in range(start // 4, start // 4 + 1024)}
        assert engine.cache.stats().prefetches == 0
        # zarr.json, then exactly the chunks the reads touch: nothing loaded ahead
        assert engine.store.stats.as_dict()["requests"] == 1 + len(touched)
    finally:
        engine.close()
    engine = open_engine(server, "plain.zarr", cache_bytes=64 << 20)
    try:
        reader = engine.reader("")
        stream = ReadStream()
        for offset in range(0, reader.nbytes, 32 << 10):
            reader.read(offset, offset + (32 << 10), stream)
        assert engine.cache.stats().prefetches > 0
        assert engine.store.stats.as_dict()["max_in_flight"] > 4
    finally:
        engine.close()


# ---------------------------------------------------------------- options


def test_store_and_ttl_options() -> None:
    assert parse_duration("forever") is None and parse_duration("90") == 90.0 and parse_duration("5m") == 300.0
    for bad in ("-1", "0", "soon"):
        with pytest.raises(OptionsError):
            parse_duration(bad)
    with pytest.raises(OptionsError):
        StoreOptions(timeout=0)
    options = StoreOptions(timeout=2, retries=2, retry_backoff=0.5)
    assert options.worst_case_seconds() == pytest.approx(3 * 2 + 0.5 + 1.0)


# ------------------------------------------------------------ credentials


@pytest.mark.parametrize("spelling", [
    ["-S", "secret=hunter22"], ["-Ssecret=hunter22"], ["--storage-option", "secret=hunter22"],
    ["--storage-option=secret=hunter22"], ["--storage", "secret=hunter22"],
])
def test_daemon_argv_moves_literal_credentials_to_the_environment(spelling: list[str]) -> None:
    argv = ["mount", "s3://b/x.zarr", "/mnt", *spelling, "-S", "anon=false", "-S", "token=@env:TOKEN"]
    out, env = daemon_argv(argv)
    assert "hunter22" not in " ".join(out)
    assert env == {"ZARRFS_STORAGE_OPTION_0": "hunter22"}
    assert out == ["mount", "s3://b/x.zarr", "/mnt", "-S", "secret=@env:ZARRFS_STORAGE_OPTION_0",
                   "-S", "anon=false", "-S", "token=@env:TOKEN"]


def test_nested_credentials_are_found_and_redacted_from_log_lines() -> None:
    out, env = daemon_argv(["-S", 'client_kwargs={"aws_secret_access_key": "abcd1234"}', "-S", "endpoint_url=x"])
    assert "abcd1234" not in " ".join(out) and list(env.values()) == ['{"aws_secret_access_key": "abcd1234"}']
    secrets = secret_values({"client_kwargs": {"aws_secret_access_key": "abcd1234"}, "endpoint_url": "http://e"})
    assert secrets == ["abcd1234"]
    formatter = RedactingFormatter("%(message)s", secrets)
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed with abcd1234 at https://u:pw@host/p",
                               None, None)
    assert formatter.format(record) == "failed with *** at https://***@host/p"


@pytest.mark.parametrize(("url", "shown"), [
    ("http://h:9/b/k?AWSAccessKeyId=AKID&Signature=a%2Bb%3D&Expires=17",  # S3, signature version 2
     "http://h:9/b/k?AWSAccessKeyId=***&Signature=***&Expires=17"),
    ("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F2026&"
     "X-Amz-Security-Token=tok&X-Amz-SignedHeaders=host&X-Amz-Signature=beef",  # version 4, with a session
     "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***&"
     "X-Amz-Security-Token=***&X-Amz-SignedHeaders=host&X-Amz-Signature=***"),
    ("https://acct.blob.core.windows.net/c/k?sv=2024&sig=abc%3D x", "https://acct.blob.core.windows.net/c/k?sv=2024&sig=*** x"),
    ("https://h/p?design=1&signature_x=2", "https://h/p?design=1&signature_x=2"),  # names that only look alike
])
def test_presigned_urls_are_logged_without_their_signatures(url: str, shown: str) -> None:
    formatter = RedactingFormatter("%(message)s", [])
    assert formatter.format(logging.LogRecord("x", logging.ERROR, __file__, 1, url, None, None)) == shown


def test_readahead_of_a_sharded_array_asks_for_whole_shard_rows(tmp_path: Path) -> None:
    """zarr-python stores inner chunks in Morton order, so one band of inner chunks is never
    contiguous in a shard; readahead batches of whole shard rows make each shard one ranged GET."""
    data = np.arange(1024 * 1024, dtype="<f4").reshape(1024, 1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.create_array(str(tmp_path / "s.zarr"), shape=data.shape, shards=(256, 256), chunks=(64, 64),
                          dtype="<f4", compressors=[ZstdCodec(level=1)])[...] = data
    engine = Engine.open(str(tmp_path / "s.zarr"), options=EngineOptions(cache_bytes=8 << 20))
    try:
        reader = engine.reader("")
        assert reader.readahead.step == 256 * 1024 * 4  # four bands: one shard row
        ranges: list[tuple[str, ByteRequest]] = []
        get_range, get_run = engine.store.get_range, engine.store.get_run

        def recorded(key: str, byte_range: ByteRequest) -> bytes | bytearray | None:
            ranges.append((key, byte_range))
            return get_range(key, byte_range)

        def recorded_run(key: str, span: RangeRequest, pieces: list[tuple[int, int]]) -> bytes | bytearray | None:
            ranges.append((key, span))
            return get_run(key, span, pieces)

        engine.store.get_range = recorded  # type: ignore[method-assign]
        engine.store.get_run = recorded_run  # type: ignore[method-assign]
        stream = ReadStream()
        got = b"".join(reader.read(o, o + (128 << 10), stream) for o in range(0, reader.nbytes, 128 << 10))
        assert got == data.tobytes()
        data_reads = [(key, span.start) for key, span in ranges if isinstance(span, RangeRequest)]  # (not the indexes)
        for row in (2, 3):  # once readahead is in stride: one GET per shard of the row
            assert sorted(key for key, _ in data_reads if key.startswith(f"c/{row}/")) == \
                [f"c/{row}/{column}" for column in range(4)]
        assert engine.cache.stats().loads == 16 * 16  # every inner chunk decoded once
    finally:
        engine.close()
