"""`--disk-cache DIR`: a remote store's answers kept on local disk across remounts.

Real mounts over the threaded Range server on 127.0.0.1 (remoteutil), arrays
written by zarr-python as oracles:
- a remount on a filled DIR reads every array right with no request for data;
- entries corrupted, cut short or replaced on disk are dropped, fetched again
  and never served; so is what a daemon killed with SIGKILL mid-read left;
- with --metadata-ttl, old entries are revalidated (a 304 costs no body) and a
  rewritten object is served as rewritten, never from the old copy;
- two daemons sharing one small DIR serve the right bytes and keep it under its cap.
And `DiskCache` alone: stores kept apart by identity, a full disk, the cap
under two writers.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from mountutil import mounted_many, wait_until
from remoteutil import fault_proxy, http_server, remote_mount
from zarrfs.byte_ranges import OffsetRequest, RangeRequest, SuffixRequest
from zarrfs.options import DiskCacheOptions
from zarrfs.stores import disk_cache
from zarrfs.stores.disk_cache import DiskCache, Fetched, entry_is_whole, read_entry

METADATA = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")
CHECK_FAILED = r"WARNING zarrfs\.stores\.disk_cache: .* failed its check; dropped, fetching again"


def write_store(root: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """A consolidated v3 group: a blosc array with never-written (fill) chunks and a sharded one."""
    rng = np.random.default_rng(seed)
    group = zarr.open_group(str(root), mode="w", zarr_format=3)
    blosc = rng.integers(0, 1000, size=(256, 256)).astype("f4")
    blosc[128:, :128] = 0  # chunks of fill only: zarr-python does not write them
    array = group.create_array("blosc", shape=blosc.shape, chunks=(64, 64), dtype="f4", fill_value=0,
                               compressors=[zarr.codecs.BloscCodec(cname="lz4")])
    array[:] = blosc
    sharded = rng.integers(0, 60000, size=(256, 192)).astype("u2")
    array = group.create_array("sharded", shape=sharded.shape, chunks=(32, 32), shards=(128, 96), dtype="u2")
    array[:] = sharded
    zarr.consolidate_metadata(str(root))
    return {"blosc": blosc, "sharded": sharded}


def data_requests(counter: dict[str, int]) -> int:
    return sum(n for path, n in counter.items() if not path.rstrip("/").endswith(METADATA))


def read_all(mount, expected: dict[str, np.ndarray]) -> None:
    for name, want in expected.items():
        np.testing.assert_array_equal(np.load(mount / f"{name}.npy"), want)


def disk_stats(mount) -> dict[str, int]:
    return json.loads((mount / ".zarrfs-stats.json").read_text())["store"]["disk_cache"]


def entries(directory: Path) -> list[Path]:
    return [p for p in (directory / "v1").glob("??/*") if p.is_file()]


def entry_key(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        whole = read_entry(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert whole is not None
    return whole[0]["key"]


def dir_bytes(directory: Path) -> int:
    """Bytes the files under `directory` take on disk; a file evicted while it is counted counts
    nothing, and one renamed into place while the walk passes (from tmp/ to its folder) counts once:
    by inode, which a rename keeps."""
    blocks: dict[int, int] = {}
    for folder, _, files in os.walk(directory):
        for name in files:
            try:
                status = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            blocks[status.st_ino] = status.st_blocks * 512
    return sum(blocks.values())


@pytest.fixture
def served(tmp_path: Path):
    root = tmp_path / "served"
    root.mkdir()
    expected = write_store(root / "s.zarr")
    with http_server(root) as server:
        yield server, f"{server.url}/s.zarr", expected


def test_warm_remount_reads_from_disk_with_no_data_request(tmp_path: Path, served) -> None:
    server, url, expected = served
    cache = tmp_path / "dc"
    with mounted_many([remote_mount(tmp_path, url, "--disk-cache", str(cache), name="cold")]) as (mount,):
        read_all(mount, expected)
        cold = disk_stats(mount)
    assert data_requests(server.counter) > 0 and cold["misses"] > 0 and cold["hits"] == 0
    server.counter.clear()
    with mounted_many([remote_mount(tmp_path, url, "--disk-cache", str(cache), name="warm")]) as (mount,):
        read_all(mount, expected)
        warm = disk_stats(mount)
    assert data_requests(server.counter) == 0, server.counter
    # Every chunk and shard range came from disk, the never-written chunks' 404s too.
    assert warm["misses"] == 0 and warm["hits"] >= cold["misses"] - warm["refetched"]
    assert warm["bytes_served"] > 0 and 0 < warm["disk_bytes"] <= warm["max_bytes"]


def read_backwards(path: Path, block: int = 4096) -> bytes:
    """The file read `block` by `block` from its end: loads batched unlike a front-to-back read's."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        blocks = [os.pread(f.fileno(), block, offset) for offset in reversed(range(0, size, block))]
    return b"".join(reversed(blocks))


def test_a_remount_reads_shards_from_disk_whatever_the_read_pattern(tmp_path: Path, served) -> None:
    """Inner chunks fetched together (one range of a shard) are kept one by one: a remount that
    reads them in other groups still finds every one on disk."""
    server, url, expected = served
    cache = tmp_path / "dc"
    with mounted_many([remote_mount(tmp_path, url, "--disk-cache", str(cache), name="cold")]) as (mount,):
        read_all(mount, expected)
    server.counter.clear()
    with mounted_many([remote_mount(tmp_path, url, "--disk-cache", str(cache), name="warm")]) as (mount,):
        assert read_backwards(mount / "sharded.raw") == expected["sharded"].tobytes()
        warm = disk_stats(mount)
    assert data_requests(server.counter) == 0, server.counter
    assert warm["misses"] == 0 and warm["hits"] > 0


def test_corrupt_truncated_and_foreign_entries_are_dropped_and_fetched_again(tmp_path: Path, served) -> None:
    server, url, expected = served
    cache = tmp_path / "dc"
    with mounted_many([remote_mount(tmp_path, url, "--disk-cache", str(cache), name="cold")]) as (mount,):
        read_all(mount, expected)
    # Whole chunks: each is one request (damaged inner chunks of one shard range would share theirs).
    chunks = sorted((p for p in entries(cache) if entry_key(p).startswith("blosc/c") and p.stat().st_size > 200),
                    key=lambda p: p.name)
    flipped, cut, foreign = chunks[:3]
    damaged = {entry_key(p) for p in (flipped, cut, foreign)}
    with open(flipped, "r+b") as f:  # one bit of the payload's last byte
        f.seek(-1, os.SEEK_END)
        last = f.read(1)[0]
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last ^ 1]))
    os.truncate(cut, cut.stat().st_size - 7)
    foreign.write_bytes(b"\x00" * 4096)
    server.counter.clear()
    with mounted_many([remote_mount(tmp_path, url, "--disk-cache", str(cache), name="warm",
                                    expected_log=(CHECK_FAILED,))]) as (mount,):
        read_all(mount, expected)
        warm = disk_stats(mount)
    assert warm["dropped_corrupt"] == 3 and warm["misses"] == 3
    assert data_requests(server.counter) == 3
    assert damaged <= {path.split("/s.zarr/", 1)[1] for path in server.counter}
    assert all(entry_is_whole(p) for p in entries(cache))  # refetched, written again whole


def test_kill_9_mid_read_leaves_nothing_that_is_served_wrong(tmp_path: Path, served) -> None:
    server, url, expected = served
    cache = tmp_path / "dc"
    with fault_proxy(url.rsplit("/", 1)[0]) as proxy:
        proxy.inject("latency", match=r"/(blosc|sharded)/c", seconds=0.15)
        slow = f"{proxy.url}/s.zarr"
        killed = remote_mount(tmp_path, slow, "--disk-cache", str(cache), "--max-concurrency", "2", name="killed")
        killed.foreground = True
        with mounted_many([killed]) as (mount,):
            failure: list[BaseException] = []

            def read() -> None:
                try:
                    read_all(mount, expected)
                except OSError as exc:  # the daemon is gone: ENOTCONN
                    failure.append(exc)

            reader = threading.Thread(target=read)
            reader.start()
            assert wait_until(lambda: len(entries(cache)) >= 3, 30)
            os.kill(mount.pid, signal.SIGKILL)
            reader.join(30)
            assert failure, "the read finished before the kill: nothing was tested"
        left = entries(cache)
        assert len(left) >= 3 and all(entry_is_whole(p) for p in left)
        proxy.clear()
        server.counter.clear()
        with mounted_many([remote_mount(tmp_path, slow, "--disk-cache", str(cache), name="again")]) as (mount,):
            read_all(mount, expected)
            again = disk_stats(mount)
    assert again["dropped_corrupt"] == 0 and again["hits"] >= len(left) - 1  # (zarr.json is revalidated)


def test_ttl_revalidates_and_a_rewritten_object_is_never_served_from_the_old_copy(tmp_path: Path) -> None:
    root = tmp_path / "served"
    root.mkdir()
    store = root / "s.zarr"
    zarr.create_array(str(store), shape=(64, 64), chunks=(32, 32), dtype="i4", fill_value=0)[:] = 1
    cache = tmp_path / "dc"
    with http_server(root) as server:
        url = f"{server.url}/s.zarr"
        args = ("--disk-cache", str(cache), "--metadata-ttl", "1")
        with mounted_many([remote_mount(tmp_path, url, *args, name="first")]) as (mount,):
            assert (np.load(mount / "s.npy") == 1).all()
        time.sleep(1.5)
        with mounted_many([remote_mount(tmp_path, url, *args, name="second")]) as (mount,):
            assert (np.load(mount / "s.npy") == 1).all()
            second = disk_stats(mount)
        # Four chunks, each asked "changed since?" and answered 304: served from disk, no body sent.
        assert second["revalidated"] >= 4 and second["refetched"] <= 1 and second["misses"] == 0
        time.sleep(1.1)  # a Last-Modified one second later
        zarr.open_array(str(store), mode="r+")[:] = 2
        time.sleep(1.5)
        with mounted_many([remote_mount(tmp_path, url, *args, name="third")]) as (mount,):
            assert (np.load(mount / "s.npy") == 2).all()
            third = disk_stats(mount)
        assert third["refetched"] >= 4


MAX_PASSES = 8  # per daemon, over twice the cap each


def test_two_daemons_share_one_small_dir_under_its_cap(tmp_path: Path) -> None:
    root = tmp_path / "served"
    root.mkdir()
    # 32 MiB that do not compress, twice the cap: the directory fills past what it may keep whatever
    # the scans' timing, so they must evict (at the cap's size, refused writes alone could keep it under).
    noise = np.random.default_rng(1).random((2048, 4096), dtype="f4")
    zarr.create_array(str(root / "n.zarr"), shape=noise.shape, chunks=(256, 256), dtype="f4")[:] = noise
    cache = tmp_path / "dc"
    cap = 16 << 20
    sizes: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            sizes.append(dir_bytes(cache) if cache.exists() else 0)
            time.sleep(0.005)

    with http_server(root) as server:
        url = f"{server.url}/n.zarr"
        args = ("--disk-cache", str(cache), "--disk-cache-size", "16M")
        with mounted_many([remote_mount(tmp_path, url, *args, name="a"),
                           remote_mount(tmp_path, url, *args, name="b")]) as mounts:
            sampler = threading.Thread(target=sample)
            sampler.start()
            wrong: list[int] = []

            def load(mount) -> None:
                # Passes until the two daemons stored twice the cap: a daemon whose scan lags refuses
                # writes meanwhile, so on a busy machine three passes may store less than the cap.
                for _ in range(MAX_PASSES):
                    wrong.append(int((np.load(mount / "n.npy") != noise).sum()))
                    if sum(disk_stats(m)["bytes_stored"] for m in mounts) > 2 * cap:
                        break

            readers = [threading.Thread(target=load, args=(m,)) for m in mounts]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join()
            done.set()
            sampler.join()
            counters = [disk_stats(m) for m in mounts]
    assert wrong and not any(wrong)
    assert len(sizes) >= 3 and max(sizes) <= cap, (len(sizes), max(sizes))  # sampled during the run
    # (Hits are not asked for: three sequential passes over twice the cap is LRU's worst case.)
    assert sum(c["evictions"] for c in counters) > 0 and sum(c["bytes_stored"] for c in counters) > cap


# ------------------------------------------------------------- DiskCache alone


def fetcher(answers: list[Fetched], calls: list) -> disk_cache.Fetch:
    def fetch(validators):
        calls.append(validators)
        return answers.pop(0)
    return fetch


def test_two_stores_never_share_an_entry(tmp_path: Path) -> None:
    options = DiskCacheOptions(str(tmp_path / "dc"), 64 << 20)
    first, second = DiskCache(options, "http://a/x.zarr"), DiskCache(options, "http://b/x.zarr")
    calls: list = []
    assert first.get("c/0", None, fetcher([Fetched(b"from a")], calls)) == b"from a"
    assert second.get("c/0", None, fetcher([Fetched(b"from b")], calls)) == b"from b"
    assert first.get("c/0", None, fetcher([], calls)) == b"from a"
    assert second.get("c/0", None, fetcher([], calls)) == b"from b"
    assert first.get("c/0", RangeRequest(0, 2), fetcher([Fetched(b"fr")], calls)) == b"fr"  # a range is its own entry
    assert len(calls) == 3 and first.get("gone", None, fetcher([Fetched(None)], calls)) is None
    assert first.get("gone", None, fetcher([], calls)) is None  # "no such key" is kept too


def test_entries_keep_the_names_earlier_layouts_gave_them(tmp_path: Path) -> None:
    """A typed range is named on disk as the sign-coded range was (a suffix (-n, 0), an offset (n, None)):
    a daemon of this version finds what an earlier one kept."""
    cache = DiskCache(DiskCacheOptions(str(tmp_path / "dc"), 64 << 20), "http://a/x.zarr")
    for byte_range, recorded in ((SuffixRequest(8), (-8, 0)), (OffsetRequest(3), (3, None)),
                                 (RangeRequest(2, 5), (2, 5)), (None, (None, None))):
        cache.get("c/0", byte_range, lambda _: Fetched(b"kept"))
        path = cache._path(cache._name("c/0", *recorded))
        assert entry_is_whole(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            header, _ = read_entry(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        assert header["range"] == list(recorded)


def test_metadata_is_revalidated_once_per_mount_without_ttl(tmp_path: Path) -> None:
    options = DiskCacheOptions(str(tmp_path / "dc"), 64 << 20)
    calls: list = []
    earlier = DiskCache(options, "s")
    earlier.get("zarr.json", RangeRequest(0, 100), fetcher([Fetched(b"{}", {"ETag": '"1"'})], calls))
    earlier.get("c/0", None, fetcher([Fetched(b"chunk")], calls))
    time.sleep(0.01)
    now = DiskCache(options, "s")
    unchanged = fetcher([Fetched(None, {"ETag": '"1"'}, unchanged=True)], calls)
    assert now.get("zarr.json", RangeRequest(0, 100), unchanged) == b"{}"
    assert now.get("zarr.json", RangeRequest(0, 100), fetcher([], calls)) == b"{}"
    assert now.get("c/0", None, fetcher([], calls)) == b"chunk"
    assert calls == [None, None, {"ETag": '"1"'}]
    assert now.stats.as_dict()["revalidated"] == 1


def test_a_full_disk_stops_caching_and_never_fails_a_read(tmp_path: Path, monkeypatch, caplog) -> None:
    cache = DiskCache(DiskCacheOptions(str(tmp_path / "dc"), 64 << 20), "s")

    def no_space(*args) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk_cache.os, "replace", no_space)
    calls: list = []
    assert cache.get("c/0", None, fetcher([Fetched(b"one"), Fetched(b"one")], calls)) == b"one"
    assert cache.get("c/0", None, fetcher([Fetched(b"one")], calls)) == b"one"
    figures = cache.stats.as_dict()
    assert figures["write_errors"] == 1 and figures["not_stored"] == 1 and figures["misses"] == 2
    assert not list((tmp_path / "dc" / "v1" / "tmp").iterdir())  # the temporary file went too
    assert "no space left" in caplog.text


def test_the_cap_holds_with_two_writers(tmp_path: Path) -> None:
    options = DiskCacheOptions(str(tmp_path / "dc"), 16 << 20)
    caches = [DiskCache(options, "one"), DiskCache(options, "two")]
    payload = os.urandom(200 << 10)
    sizes: list[int] = []

    def write(cache: DiskCache, name: str) -> None:
        for i in range(150):
            cache.get(f"{name}/{i}", None, lambda _: Fetched(payload))
            sizes.append(dir_bytes(tmp_path / "dc"))

    writers = [threading.Thread(target=write, args=(c, n)) for c, n in zip(caches, ("a", "b"))]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert max(sizes) <= 16 << 20
    assert sum(c.stats.as_dict()["evictions"] for c in caches) > 0
    caches[0].wait_for_scan()
    assert dir_bytes(tmp_path / "dc") <= (16 << 20) - caches[0].slack + (1 << 20)


def test_writes_while_a_scan_waits_for_the_lock_count_against_the_old_budget(tmp_path: Path) -> None:
    """A daemon whose scan waits while another daemon's walk holds the lock writes no more than its
    budget (slack / 2) since its own last walk: that other walk may have missed those writes."""
    options = DiskCacheOptions(str(tmp_path / "dc"), 64 << 20)
    cache = DiskCache(options, "s")
    assert cache.wait_for_scan()
    payload = os.urandom(256 << 10)
    with open(tmp_path / "dc" / "v1" / "evict.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another daemon's walk, under way
        for i in range(2 * cache.slack // len(payload)):  # twice the budget, while no scan can run
            cache.get(f"c/{i}", None, lambda _: Fetched(payload))
        stored = cache.stats.as_dict()["bytes_stored"]
    assert 0 < stored <= cache.slack // 2, (stored, cache.slack)
    assert cache.wait_for_scan()  # the lock let go, its scan runs and the budget begins again
    cache.get("after", None, lambda _: Fetched(payload))
    assert cache.stats.as_dict()["bytes_stored"] == stored + len(payload)


# ------------------------------------------------------------- first bytes


def test_a_missing_chunk_of_a_v2_array_that_declares_its_separator_costs_one_request(tmp_path: Path) -> None:
    root = tmp_path / "served"
    root.mkdir()
    values = np.zeros((64, 64), dtype="f4")
    values[:32, :32] = 7  # one chunk written; the other three are fill and never stored
    array = zarr.create_array(str(root / "v2.zarr"), shape=values.shape, chunks=(32, 32), dtype="f4",
                              fill_value=0, zarr_format=2)
    array[:] = values
    assert json.loads((root / "v2.zarr" / ".zarray").read_text())["dimension_separator"] == "."
    with http_server(root) as server:
        with mounted_many([remote_mount(tmp_path, f"{server.url}/v2.zarr")]) as (mount,):
            np.testing.assert_array_equal(np.load(mount / "v2.npy"), values)
    chunk_requests = {path.rsplit("/", 1)[1]: n for path, n in server.counter.items()
                      if not path.endswith(METADATA) and path != "/v2.zarr/zarr.json"}
    assert chunk_requests == {"0.0": 1, "0.1": 1, "1.0": 1, "1.1": 1}, server.counter  # no nested '1/0' tries


def test_a_run_is_kept_piece_by_piece(tmp_path: Path) -> None:
    """A run fetched in one request is found again by any run made of its pieces; a piece the run's
    answer holds only in part (a short answer) is not kept."""
    cache = DiskCache(DiskCacheOptions(str(tmp_path / "dc"), 64 << 20), "s")
    calls: list = []
    blob = bytes(range(100))
    assert cache.get_run("c/0", RangeRequest(10, 40), [(10, 20), (20, 40)], fetcher([Fetched(blob[10:40])], calls)) == blob[10:40]
    assert cache.get_run("c/0", RangeRequest(20, 40), [(20, 40)], fetcher([], calls)) == blob[20:40]
    assert cache.get_run("c/0", RangeRequest(10, 20), [(10, 20)], fetcher([], calls)) == blob[10:20]
    assert cache.get_run("c/0", RangeRequest(10, 40), [(10, 20), (20, 40)], fetcher([], calls)) == blob[10:40]
    # Pieces with a gap between them: the bytes of the gap, which no reader uses, come back as zeros.
    assert cache.get_run("c/0", RangeRequest(50, 90), [(50, 60), (80, 90)], fetcher([Fetched(blob[50:90])], calls)) == blob[50:90]
    assert cache.get_run("c/0", RangeRequest(50, 90), [(50, 60), (80, 90)], fetcher([], calls)) == \
        blob[50:60] + bytes(20) + blob[80:90]
    # A run with one piece not kept is fetched whole, one request.
    assert cache.get_run("c/0", RangeRequest(60, 80), [(60, 70), (70, 80)], fetcher([Fetched(blob[60:75])], calls)) == blob[60:75]
    assert cache.get_run("c/0", RangeRequest(60, 70), [(60, 70)], fetcher([], calls)) == blob[60:70]
    assert cache.get_run("c/0", RangeRequest(70, 80), [(70, 80)], fetcher([Fetched(blob[70:80])], calls)) == blob[70:80]
    assert len(calls) == 4


def slow_replace(monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> threading.Event:
    """Entries are renamed into place only once `release` is set; the returned event is set when a
    write has reached its rename."""
    reached = threading.Event()
    real = os.replace

    def replace(source, target) -> None:  # noqa: ANN001 - os.replace's own
        reached.set()
        release.wait(10)
        real(source, target)

    monkeypatch.setattr(disk_cache.os, "replace", replace)
    return reached


@pytest.mark.parametrize("finishes", [True, False], ids=["finished", "discarded"])
def test_entries_under_way_when_the_mount_ends_are_finished_or_discarded_in_time(
        finishes: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    cache = DiskCache(DiskCacheOptions(str(tmp_path / "dc"), 64 << 20), "s")
    release = threading.Event()
    reached = slow_replace(monkeypatch, release)
    writer = threading.Thread(target=cache.get, args=("c/0", None, fetcher([Fetched(b"chunk")], [])))
    writer.start()
    assert reached.wait(10)  # the entry is under way: written, its rename held
    if finishes:
        # close waits for the rename (released only once close is waiting): what it leaves, seen the moment
        # it returns, is the whole entry. Its timeout is far above the wait, which it must not reach.
        at_return: list[list[Path]] = []

        def close() -> None:
            cache.close(timeout=60)
            at_return.append(entries(tmp_path / "dc"))

        closer = threading.Thread(target=close)
        closer.start()
        assert wait_until(lambda: cache.budget.closed, 10)  # close has begun waiting for the writes under way
        assert closer.is_alive() and not at_return  # and does not return while the rename is held
        release.set()
        closer.join(10)
        assert not closer.is_alive() and len(at_return[0]) == 1 and entry_is_whole(at_return[0][0])
    else:
        # The rename stays held past close's timeout: close returns without it, and the entry is discarded.
        cache.close(timeout=0.5)
        assert entries(tmp_path / "dc") == []
        release.set()
    writer.join(10)
    left = entries(tmp_path / "dc")
    assert not list((tmp_path / "dc" / "v1" / "tmp").iterdir())  # no temporary file left either way
    assert len(left) == (1 if finishes else 0)
    if not finishes:
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    # Closed: nothing more is written.
    assert cache.get("c/1", None, fetcher([Fetched(b"later")], [])) == b"later"
    assert len(entries(tmp_path / "dc")) == len(left) and cache.stats.as_dict()["not_stored"] == 1
