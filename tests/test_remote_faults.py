"""A misbehaving network between zarrfs and an HTTP store, through a fault-injecting proxy.

Transient faults (latency, 503s, resets, truncated bodies, a stalled answer)
cost a retry and nothing else. Faults that persist make that read fail with
EIO within a bounded time while other arrays keep working; a body that was
cut or corrupted on the way is detected and never returned as data; a store
that goes away and comes back is read again without remounting.
"""

from __future__ import annotations

import errno
import os
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from mountutil import mounted_many
from remoteutil import FaultProxy, HttpServer, fault_proxy, http_server, remote_mount
from zarrfs.engine.engine import Engine
from zarrfs.errors import ChunkError, StoreError, ZarrfsError
from zarrfs.options import EngineOptions, StoreOptions

SHAPE = (64, 64)
TIMEOUT = 0.5  # a local request takes milliseconds; a stall waits this long per try
RETRIES = 2
FAST = StoreOptions(timeout=TIMEOUT, retries=RETRIES, retry_backoff=0.05)
# How long the proxy holds a stalled answer: far beyond every try's timeout plus backoff
# (FAST.worst_case_seconds(), under 2 s), so a read that ends first was ended by its timeouts.
STALL_S = 30.0
ARRAYS = ("crc", "sharded", "other")
CHUNKS = {"crc": "/crc/c/", "sharded": "/sharded/c/", "other": "/other/c/"}


@dataclass(frozen=True)
class Upstream:
    root: Path
    expected: dict[str, np.ndarray]
    server: HttpServer


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    """One v3 store: `crc` (zstd + crc32c chunks), `sharded` (inner chunks with crc32c), `other` (zstd)."""
    root = tmp_path_factory.mktemp("upstream")
    expected = {name: (np.arange(np.prod(SHAPE), dtype="<f4").reshape(SHAPE) * (i + 1) - 7)
                for i, name in enumerate(ARRAYS)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        top = zarr.open_group(str(root / "faults.zarr"), mode="w", zarr_format=3)
        top.create_array("crc", shape=SHAPE, chunks=(16, 16), dtype="<f4",
                         compressors=[ZstdCodec(level=1), Crc32cCodec()])[...] = expected["crc"]
        top.create_array("sharded", shape=SHAPE, shards=(32, 32), chunks=(16, 16), dtype="<f4",
                         compressors=[ZstdCodec(level=1), Crc32cCodec()])[...] = expected["sharded"]
        top.create_array("other", shape=SHAPE, chunks=(32, 32), dtype="<f4",
                         compressors=[ZstdCodec(level=1)])[...] = expected["other"]
    with http_server(root) as server:
        yield Upstream(root, expected, server)


@pytest.fixture
def proxy(upstream: Upstream) -> Iterator[FaultProxy]:
    with fault_proxy(upstream.server.url) as running:
        yield running


@pytest.fixture
def engine(proxy: FaultProxy) -> Iterator[Engine]:
    opened = Engine.open(f"{proxy.url}/faults.zarr", options=EngineOptions(store=FAST))
    opened.hierarchy.children("")  # metadata read before any fault is injected
    yield opened
    opened.close()


def read_all(engine: Engine, name: str) -> np.ndarray:
    reader = engine.reader(name)
    return np.frombuffer(reader.read(0, reader.nbytes), "<f4").reshape(SHAPE)


# ------------------------------------------------------------ transient


@pytest.mark.parametrize("fault,times,seconds", [
    ("latency", None, 0.2),
    ("503", 2, 0),
    ("reset", 2, 0),
    ("truncate", 2, 0),  # full Content-Length, half the body, connection closed
    ("stall", 1, STALL_S),  # headers, then silence: ended by the per-request timeout
])
@pytest.mark.parametrize("name", ["crc", "sharded"])
def test_transient_fault_costs_a_retry(name: str, fault: str, times: int | None, seconds: float,
                                       proxy: FaultProxy, engine: Engine, upstream: Upstream) -> None:
    proxy.inject(fault, CHUNKS[name], times=times, seconds=seconds)
    read: list[np.ndarray] = []
    reader = threading.Thread(target=lambda: read.append(read_all(engine, name)), daemon=True)
    reader.start()
    # The stall's 30 s are the event to beat: the read ends by its own timeout and a retry long before
    # the proxy would end the stall (15 s: half of it, a hang guard for the other faults).
    reader.join(STALL_S / 2)
    assert read, "the read was not ended by its timeout and retries before the stall would have ended"
    np.testing.assert_array_equal(read[0], upstream.expected[name])
    stats = engine.store.stats.as_dict()
    assert proxy.faults_applied[fault] >= 1
    assert stats["failures"] == 0
    if fault not in ("latency", "reset"):  # aiohttp itself retries once when a kept-alive connection is reset
        assert stats["retries"] >= 1


# ------------------------------------------------------- never wrong data


@pytest.mark.parametrize("fault", ["short", "corrupt"])
@pytest.mark.parametrize("name", ["crc", "sharded"])
def test_cut_or_corrupt_body_is_never_data(name: str, fault: str, proxy: FaultProxy, engine: Engine) -> None:
    """A body shortened with a matching Content-Length, or with bytes flipped, reaches zarrfs as if valid."""
    proxy.inject(fault, CHUNKS[name])
    with pytest.raises(ChunkError) as raised:
        read_all(engine, name)
    assert raised.value.errno == errno.EIO
    assert f"/{name}" in str(raised.value) and proxy.url in str(raised.value)


# ----------------------------------------------------------- persistent


@pytest.mark.parametrize("fault", ["503", "reset", "stall"])
def test_persistent_fault_is_eio_in_bounded_time_and_other_arrays_work(
        fault: str, proxy: FaultProxy, engine: Engine, upstream: Upstream) -> None:
    proxy.inject(fault, CHUNKS["crc"], seconds=STALL_S)
    failure: list[BaseException] = []

    def doomed() -> None:
        try:
            read_all(engine, "crc")
        except ZarrfsError as exc:
            failure.append(exc)

    thread = threading.Thread(target=doomed)
    thread.start()
    np.testing.assert_array_equal(read_all(engine, "other"), upstream.expected["other"])
    # Not stuck behind the failing array: a stalled array's tries (a TIMEOUT each, three of them) are still
    # going on when the other array has been read whole.
    assert fault != "stall" or thread.is_alive()
    thread.join(STALL_S / 2)  # ended by its tries' timeouts long before the proxy's stall would end it
    assert not thread.is_alive(), "a read hung past every timeout"
    assert len(failure) == 1 and isinstance(failure[0], StoreError) and failure[0].errno == errno.EIO
    assert f"failed after {RETRIES + 1} tries" in str(failure[0]) and "crc/c/" in str(failure[0])


def test_store_that_disappears_and_comes_back(proxy: FaultProxy, engine: Engine, upstream: Upstream) -> None:
    proxy.down()  # connections refused from now on
    with pytest.raises(StoreError) as raised:
        read_all(engine, "sharded")
    assert raised.value.errno == errno.EIO
    proxy.up()  # same port
    np.testing.assert_array_equal(read_all(engine, "sharded"), upstream.expected["sharded"])


# ------------------------------------------------------- through a mount


def test_mount_eio_then_recovery_without_remount(proxy: FaultProxy, upstream: Upstream, tmp_path: Path) -> None:
    mount = remote_mount(tmp_path, f"{proxy.url}/faults.zarr", "--timeout", str(TIMEOUT), "--retries", "1",
                         expected_log=(r" ERROR zarrfs\.fuse\.ops: read /crc\.raw: .*faults\.zarr.*crc/c/",
                                       r" ERROR zarrfs\.fuse\.ops: read /sharded\.raw: .*faults\.zarr.*sharded/c/"))
    with mounted_many([mount]):
        proxy.inject("503", CHUNKS["crc"])
        fd = os.open(mount / "crc.raw", os.O_RDONLY)
        try:
            with pytest.raises(OSError) as raised:
                os.pread(fd, 4096, 0)
            assert raised.value.errno == errno.EIO
            assert (mount / "other.raw").read_bytes() == upstream.expected["other"].tobytes()
            proxy.clear()
            assert os.pread(fd, 1 << 20, 0) == upstream.expected["crc"].tobytes()  # same open file, no remount
        finally:
            os.close(fd)
        proxy.down()
        with pytest.raises(OSError) as raised:
            (mount / "sharded.raw").read_bytes()
        assert raised.value.errno == errno.EIO
        proxy.up()
        assert (mount / "sharded.raw").read_bytes() == upstream.expected["sharded"].tobytes()
    errors = [line for line in mount.log_lines() if " ERROR " in line]
    assert len(errors) == 2, errors  # one line per failing read, however often the kernel retried
