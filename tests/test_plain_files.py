"""Ordinary files of a remote share read through the block cache (engine/plain_files.py): the bytes
are the file's, and a sequential stream loads ahead even when the kernel's readahead delivers its
reads out of order (several are in flight at once, answered by different libfuse threads)."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import BinaryIO, ClassVar

import numpy as np
import pytest
from remoteutil import EtagHandler, FaultProxy, RangeHandler, fault_proxy, http_server, s3_server

from zarrfs.engine import plain_files
from zarrfs.engine.cache import ChunkCache
from zarrfs.engine.plain_files import PlainFileReader
from zarrfs.errors import StaleChunkError
from zarrfs.options import DiskCacheOptions, StoreOptions
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


class RangesLogged(RangeHandler):
    """Static files with ranges, each request's Range header kept in `ranges`."""

    ranges: ClassVar[list[str | None]] = []

    def send_head(self) -> BinaryIO | None:
        self.ranges.append(self.headers.get("Range"))
        return super().send_head()


class RangesIgnored(RangeHandler):
    """Static files whole whatever the Range header says (as `python -m http.server`)."""

    def send_head(self) -> BinaryIO | None:
        self.counter[self.path] += 1
        return SimpleHTTPRequestHandler.send_head(self)


@contextmanager
def remote_file(tmp_path: Path, blocks: int, seed: int, requests: Counter | None = None,
                handler: type[RangeHandler] = RangeHandler) -> Iterator[tuple[bytes, PlainFileReader, ChunkCache]]:
    """A file of `blocks` blocks served over HTTP, open through the block cache: (its bytes, the reader, the
    cache); `requests` gets the server's count of requests per path when the server stops."""
    data = np.random.default_rng(seed).bytes(blocks * BLOCK)
    (tmp_path / "blob.bin").write_bytes(data)
    cache = ChunkCache(64 << 20, 4)
    with http_server(tmp_path, handler) as server:
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


def test_a_long_stream_reads_its_blocks_from_one_get(tmp_path: Path, blocks: None) -> None:
    """A sequential read of 512 blocks gets each byte right with one GET, not one per block: each top-up
    of its reach reads on where the one before left the GET."""
    requests: Counter = Counter()
    with remote_file(tmp_path, 512, 5, requests) as (data, reader, cache):
        got = b"".join(read(reader, offset, 4 * READ) for offset in range(0, len(data), 4 * READ))
        stats = cache.stats()
    assert got == data
    gets = requests["/blob.bin"]
    assert stats.loads == 512, stats  # each block loaded once (those of a span by its one GET)
    # 1 (2 when a top-up's load ran before the one ahead of it); 27 with 4 GETs per top-up, 512 per block
    assert gets <= 2, requests


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


def read_all(reader: PlainFileReader, start: int = 0, size: int = 4 * READ) -> bytes:
    return b"".join(read(reader, offset, size) for offset in range(start, reader.size, size))


def written_blob(tmp_path: Path, blocks: int, seed: int) -> bytes:
    """`blocks` blocks of random bytes written to tmp_path/blob.bin, to be served."""
    data = np.random.default_rng(seed).bytes(blocks * BLOCK)
    (tmp_path / "blob.bin").write_bytes(data)
    return data


def read_through(store: Store, size: int) -> bytes:
    """blob.bin of `store` (`size` bytes) opened through a block cache of its own and read in order."""
    reader = PlainFileReader(store, "blob.bin", size, None, ChunkCache(64 << 20, 4), timeout=30)
    try:
        return read_all(reader)
    finally:
        reader.close()


def test_a_streams_first_block_is_served_while_its_get_still_arrives(tmp_path: Path, blocks: None) -> None:
    """A stream's first read is answered once its own block is in, while the rest of the GET's body is
    still to come (here held back by the server until the read has been answered)."""
    data = written_blob(tmp_path, 16, 7)
    with http_server(tmp_path) as server, fault_proxy(server.url) as proxy, ThreadPoolExecutor(1) as pool:
        proxy.inject("pause", match="blob", times=1, nbytes=BLOCK + BLOCK // 2)
        reader = PlainFileReader(Store.open(proxy.url), "blob.bin", len(data), None, ChunkCache(64 << 20, 4),
                                 timeout=30)
        try:
            first = pool.submit(read, reader, 0).result(timeout=20)  # raises if the read waits for the pause
            assert proxy.paused.wait(20)  # (the server says so just after sending the bytes before it)
            proxy.resume()
            rest = read_all(reader, READ, READ)
        finally:
            proxy.resume()
            reader.close()
    assert first + rest == data


def test_a_stream_cut_part_way_goes_on_from_the_block_it_got_to(tmp_path: Path, blocks: None) -> None:
    """A GET whose body stops half-way (the connection closed) is asked again for the blocks it did not
    deliver, not for those it did; every byte comes out right."""
    RangesLogged.ranges = []
    data = written_blob(tmp_path, 16, 8)
    with http_server(tmp_path, RangesLogged) as server, fault_proxy(server.url) as proxy:
        proxy.inject("truncate", match="blob", times=1)
        assert read_through(Store.open(proxy.url), len(data)) == data
    # The stream's one GET, to the file's end, cut after half its body; then the other half.
    assert RangesLogged.ranges == [f"bytes=0-{len(data) - 1}", f"bytes={len(data) // 2}-{len(data) - 1}"], \
        RangesLogged.ranges


class RewrittenWhileSent(EtagHandler):
    """Static files with ETags; the first GET of blob.bin sends half its body, then the file is rewritten
    (same size, other bytes: another ETag) and the connection closed, as a writer replacing it would."""

    first: ClassVar[bool] = True

    def send_head(self) -> BinaryIO | None:
        if self.path != "/blob.bin" or not RewrittenWhileSent.first:
            return super().send_head()
        RewrittenWhileSent.first = False
        self.counter[self.path] += 1
        path = Path(self.translate_path(self.path))
        data = path.read_bytes()
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Range", f"bytes 0-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[:len(data) // 2])
        self.wfile.flush()
        rewritten = path.with_suffix(".new")
        rewritten.write_bytes(bytes(255 - b for b in data))
        rewritten.replace(path)
        self.close_connection = True
        return None


def test_a_file_rewritten_between_two_gets_of_its_stream_is_an_error_never_mixed_bytes(
        tmp_path: Path, blocks: None) -> None:
    """A stream cut part-way goes on with another GET; if that GET's answer is of another version (the
    file was rewritten, same size), the read fails (ESTALE) rather than joining the two versions' bytes."""
    data = written_blob(tmp_path, 16, 17)
    RewrittenWhileSent.first = True
    with http_server(tmp_path, RewrittenWhileSent) as server:
        reader = PlainFileReader(Store.open(server.url), "blob.bin", len(data), None, ChunkCache(64 << 20, 4),
                                 timeout=30)
        try:
            got = read(reader, 0)  # from the first answer, before it was cut
            with pytest.raises(StaleChunkError, match="changed while it was read"):  # ESTALE
                read_all(reader, READ)
        finally:
            reader.close()
    assert got == data[:READ]
    assert server.counter["/blob.bin"] == 2  # the cut GET and the one it went on with, not retried


@pytest.mark.parametrize("disk_cache", [False, True], ids=["streams", "disk-cache"])
def test_a_file_rewritten_between_two_lone_block_reads_is_an_error_never_mixed_bytes(
        tmp_path: Path, blocks: None, disk_cache: bool) -> None:
    """Reads far apart (no stream: each a GET of its own block) of one open file must be of one version:
    once the file is rewritten (same size, another ETag), the next block's read fails (ESTALE), whether
    the store streams or keeps answers in a disk cache."""
    served = tmp_path / "served"
    served.mkdir()
    data = written_blob(served, 64, 18)
    options = StoreOptions(disk_cache=DiskCacheOptions(str(tmp_path / "disk-cache"))) if disk_cache else None
    with http_server(served, EtagHandler) as server:
        store = Store.open(server.url, options=options)
        assert store.streams is not disk_cache
        reader = PlainFileReader(store, "blob.bin", len(data), None, ChunkCache(64 << 20, 4), timeout=30)
        try:
            got = read(reader, 40 * BLOCK)  # one block, alone
            rewritten = served / "blob.new"
            rewritten.write_bytes(bytes(255 - b for b in data))
            rewritten.replace(served / "blob.bin")
            with pytest.raises(StaleChunkError, match="changed while it was read"):
                read(reader, 2 * BLOCK)  # far behind: another lone block, of the new version
        finally:
            reader.close()
    assert got == data[40 * BLOCK:40 * BLOCK + READ]


def test_a_stream_that_stalls_part_way_goes_on_from_a_new_get(tmp_path: Path, blocks: None) -> None:
    """A GET whose body stops arriving (the server holds it) fails its piece after the timeout and goes on
    from the block it got to with another GET; the reader gets every byte right."""
    data = written_blob(tmp_path, 16, 12)
    with http_server(tmp_path, RangesLogged) as server, fault_proxy(server.url) as proxy:
        RangesLogged.ranges = []
        proxy.inject("pause", match="blob", times=1, nbytes=BLOCK + BLOCK // 2)  # never resumed
        store = Store.open(proxy.url, options=StoreOptions(timeout=1.0))
        assert read_through(store, len(data)) == data
    assert RangesLogged.ranges == [f"bytes=0-{len(data) - 1}", f"bytes={BLOCK}-{len(data) - 1}"], RangesLogged.ranges
    assert store.stats.retries == 1


def test_a_stream_from_a_server_that_ignores_ranges_gets_the_right_bytes(tmp_path: Path, blocks: None) -> None:
    with remote_file(tmp_path, 16, 9, handler=RangesIgnored) as (data, reader, _):
        assert read(reader, 5 * BLOCK) == data[5 * BLOCK:5 * BLOCK + READ]  # one block, cut from the whole
        assert read_all(reader, 5 * BLOCK + READ) == data[5 * BLOCK + READ:]  # streams, each from the start


def test_a_store_that_cannot_stream_asks_for_each_top_up_alone(tmp_path: Path, blocks: None) -> None:
    """With a disk cache (which keeps whole answers) the stream's top-ups are each one ranged GET of their
    own blocks, never the rest of the file at once; every byte comes out right."""
    RangesLogged.ranges = []
    data = written_blob(tmp_path, 64, 11)
    options = StoreOptions(disk_cache=DiskCacheOptions(str(tmp_path / "disk-cache")))
    with http_server(tmp_path, RangesLogged) as server:
        store = Store.open(server.url, options=options)
        assert not store.streams
        assert read_through(store, len(data)) == data
    sizes = [int(last) + 1 - int(first) for first, last in (str(spec).removeprefix("bytes=").split("-")
                                                             for spec in RangesLogged.ranges)]
    assert max(sizes) < len(data) // 2 and sum(sizes) == len(data), RangesLogged.ranges


# A presigned GET's target, in S3's signature version 2 or 4.
PRESIGNED = r"[?&](X-Amz-)?Signature="


@contextmanager
def s3_blob(data: bytes, public: bool = False, **options: object) -> Iterator[tuple[Store, list[str], FaultProxy]]:
    """`data` as s3://share/blob.bin in moto (readable by anyone if `public`), reached through a fault
    proxy: (a store of the bucket, the proxy's request targets in order, the proxy)."""
    acl = {"ACL": "public-read"} if public else {}
    with s3_server() as server, fault_proxy(server.endpoint) as proxy:
        client = server.client()
        client.create_bucket(Bucket="share", **acl)
        client.put_object(Bucket="share", Key="blob.bin", Body=data, **acl)
        credentials = {"anon": True} if public else {"key": "testing", "secret": "testing"}
        yield Store.open("s3://share", {**credentials, "endpoint_url": proxy.url, **options}), proxy.targets, proxy


def blob_gets(targets: list[str]) -> list[str]:
    return [target for target in targets if target.startswith("/share/blob.bin")]


def test_an_s3_stream_is_one_presigned_get(tmp_path: Path, blocks: None, caplog: pytest.LogCaptureFixture) -> None:
    """An S3 object read in order (64 blocks, their top-ups each read on where the one before left it)
    goes out as one GET, of a URL the store's client presigned (read by zarrfs's own HTTP client), where
    each block asked for alone would be 64; every byte is the object's."""
    data = np.random.default_rng(12).bytes(64 * BLOCK)
    with caplog.at_level(logging.DEBUG, logger="zarrfs"), s3_blob(data) as (store, targets, _):
        assert read_through(store, len(data)) == data
    gets = blob_gets(targets)
    assert len(gets) == 1 and "X-Amz-Signature=" in gets[0], gets  # signature version 4, as S3 now requires
    assert store.streams and store.requests == 1, store.requests
    assert "streamed by a presigned GET of http://" in caplog.text  # what the log says of it: its URL,
    assert "Signature" not in caplog.text  # without the query that signs it


def test_an_s3_stream_refused_by_signature_goes_through_s3fs_from_then_on(
        tmp_path: Path, blocks: None, caplog: pytest.LogCaptureFixture) -> None:
    """A presigned GET answered 403 (as a URL signed for another region would be) is not an error: the
    store streams through s3fs's client from then on, the bytes right, the URL's signature in no log line."""
    data = np.random.default_rng(13).bytes(24 * BLOCK)
    with caplog.at_level(logging.DEBUG, logger="zarrfs"), s3_blob(data) as (store, targets, proxy):
        proxy.inject("403", match=PRESIGNED)
        assert read_through(store, len(data)) == data
        assert read_through(store, len(data)) == data  # a second stream: no presigned GET tried again
    gets = blob_gets(targets)
    assert [bool(re.search(PRESIGNED, get)) for get in gets] == [True, False, False], gets
    assert "through s3fs's client from now on" in caplog.text
    assert not re.search(r"Signature=(?!\*)", caplog.text), caplog.text


def test_an_s3_stream_answered_503_tries_a_presigned_get_again(tmp_path: Path, blocks: None,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A 5xx answer to a presigned GET is the server's trouble: it is tried again, presigned again; the
    retry's log line names the answer and the object, not the URL's signature."""
    data = np.random.default_rng(14).bytes(24 * BLOCK)
    with caplog.at_level(logging.DEBUG, logger="zarrfs"), s3_blob(data) as (store, targets, proxy):
        proxy.inject("503", match=PRESIGNED, times=1)
        assert read_through(store, len(data)) == data
    gets = blob_gets(targets)
    assert len(gets) == 2 and all(re.search(PRESIGNED, get) for get in gets), gets
    assert store.stats.retries == 1
    assert "HTTP 503" in caplog.text and "/share/blob.bin" in caplog.text and "Signature" not in caplog.text


def test_a_requester_pays_s3_stream_goes_through_s3fs(tmp_path: Path, blocks: None) -> None:
    """A store whose requests carry what a presigned URL cannot (requester pays) streams through s3fs's
    client, every byte right."""
    data = np.random.default_rng(15).bytes(24 * BLOCK)
    with s3_blob(data, requester_pays=True) as (store, targets, _):
        assert read_through(store, len(data)) == data
    gets = blob_gets(targets)
    assert len(gets) == 1 and not re.search(PRESIGNED, gets[0]), gets


def test_an_anonymous_s3_stream_is_one_unsigned_get(tmp_path: Path, blocks: None,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A public bucket read anonymously streams through zarrfs's HTTP client too, its URL unsigned."""
    data = np.random.default_rng(16).bytes(24 * BLOCK)
    with caplog.at_level(logging.DEBUG, logger="zarrfs"), s3_blob(data, public=True) as (store, targets, _):
        assert read_through(store, len(data)) == data
    assert blob_gets(targets) == ["/share/blob.bin"]
    assert "streamed by a presigned GET" in caplog.text
