"""Lifecycle under stress: signals during heavy or stuck reads, stale and contested mount points,
busy unmounts, logs on stderr, and a store whose files vanish while mounted.

Extends test_mount_behaviour.py (which covers the quiet cases: a signal on an
idle mount, kill -9 then `zarrfs unmount`, busy then --lazy).
"""

from __future__ import annotations

import errno
import functools
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ShardingCodec

from mountutil import (
    Mount,
    daemon_pids,
    is_mounted,
    mount_points,
    mounted,
    mounted_many,
    pid_alive,
    run_zarrfs,
    wait_until,
    zarrfs_command,
)
from remoteutil import BackloggedHTTPServer
from zarrfs.fuse import mount as mount_module
from zarrfs.fuse.stopper import GRACE_SECONDS

# What a reader of a mount that goes away may see; anything else (or a hang) fails.
GONE = {errno.EIO, errno.ENOTCONN, errno.ECONNABORTED, errno.ENODEV}
SIDE = 2048


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """4 MiB of zstd chunks: reads keep the daemon's workers busy decoding."""
    store = tmp_path_factory.mktemp("big") / "big.zarr"
    data = np.random.default_rng(1).integers(0, 256, (SIDE, SIDE), dtype=np.uint8)
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    group.create_array("img", shape=data.shape, chunks=(128, 128), dtype="u1")[...] = data
    return store, data


class Readers:
    """Threads doing O_DIRECT preads until told to stop or until their first error."""

    def __init__(self, path: Path, data: np.ndarray, count: int) -> None:
        self.path, self.flat = path, data.reshape(-1)
        self.errors: list[int] = []
        self.wrong = 0
        self.reads = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(seed,), daemon=True) for seed in range(count)]

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
        except OSError as exc:
            self.errors.append(exc.errno or 0)
            return
        try:
            while not self._stop.is_set():
                offset = rng.randrange(0, self.flat.size - (256 << 10))
                data = os.pread(fd, 256 << 10, offset)
                self.reads += 1
                self.wrong += data != self.flat[offset:offset + len(data)].tobytes()
        except OSError as exc:
            self.errors.append(exc.errno or 0)
        finally:
            try:
                os.close(fd)
            except OSError:
                pass  # ENOTCONN: the kernel could not send FLUSH to the gone daemon

    def __enter__(self) -> Readers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self.join(30)

    def join(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_during_heavy_reads(signum: int, big: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    store, data = big
    with mounted(store, tmp_path / "mnt", tmp_path / "log", foreground=True) as mount:
        assert mount.process is not None
        with Readers(mount / "img.raw", data, 12) as readers:
            assert wait_until(lambda: readers.reads > 50, 20)
            mount.process.send_signal(signum)
            assert mount.process.wait(timeout=GRACE_SECONDS + 60) == 0  # (a hang guard)
            assert readers.join(10), "a reader hung after the daemon stopped"
        print(f"{signal.Signals(signum).name} with 12 readers: {readers.reads} reads; "
              f"reader errors {sorted(set(readers.errors))}")
        # No read was left to the grace period: the daemon ended its reads itself (the forced stop logs
        # "reads still waiting", a line this mount does not allow).
        assert not [line for line in mount.log_lines() if "reads still waiting" in line]
        assert readers.wrong == 0
        assert set(readers.errors) <= GONE and len(readers.errors) == 12
        assert wait_until(lambda: not is_mounted(mount.root), 5)


class StallingHandler(SimpleHTTPRequestHandler):
    """Static files; chunk keys (names starting with a digit) wait until `release` is set (60 s at most)."""

    release = threading.Event()
    asked = threading.Event()  # a chunk has been asked for and is being held

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        if os.path.basename(self.path)[:1].isdigit():
            self.asked.set()
            self.release.wait(60)
        try:
            super().do_GET()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon that asked is gone

    def log_message(self, *_: object) -> None:
        pass


def url_mount(url: str, tmp: Path, *, foreground: bool = False, expected_log: tuple[str, ...] = ()) -> Mount:
    return Mount(url, tmp / "mnt", tmp / "log", (), expected_log, foreground)  # type: ignore[arg-type]


@pytest.fixture
def stalling_server(tmp_path: Path) -> Iterator[str]:
    store = tmp_path / "slow.zarr"
    zarr.create_array(str(store), shape=(64, 64), chunks=(32, 32), dtype="u1", zarr_format=2)[...] = 3
    server = BackloggedHTTPServer(("127.0.0.1", 0), functools.partial(StallingHandler, directory=str(store)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    StallingHandler.release.clear()
    StallingHandler.asked.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        StallingHandler.release.set()
        server.shutdown()
        server.server_close()


class SlowArraysHandler(SimpleHTTPRequestHandler):
    """Static files; chunks of arrays named slow* wait until `release` is set (60 s at most)."""

    release = threading.Event()
    held: set[str] = set()  # arrays whose chunks have been asked for and held back

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        parts = self.path.strip("/").split("/")
        if parts[0].startswith("slow") and parts[-1][:1].isdigit():
            self.held.add(parts[0])
            self.release.wait(60)
        try:
            super().do_GET()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *_: object) -> None:
        pass


STUCK_READERS = 10  # more than the 8 FUSE threads zarrfs had, which all 10 would have held


def test_readers_stuck_on_a_slow_array_leave_the_rest_of_the_mount_answering(tmp_path: Path) -> None:
    """Reads waiting on a stalled store hold FUSE threads and readahead slots; there are enough of
    both left for lookups, listings and reads of arrays the store still serves."""
    store = tmp_path / "s.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    for i in range(STUCK_READERS):
        group.create_array(f"slow{i}", shape=(2048, 2048), chunks=(256, 2048), dtype="u1")[...] = i
    fast = np.arange(2048 * 2048, dtype=np.uint32).reshape(2048, 2048) % 251
    group.create_array("fast", shape=fast.shape, chunks=(256, 2048), dtype="u1")[...] = fast
    zarr.consolidate_metadata(str(store))
    SlowArraysHandler.release.clear()
    SlowArraysHandler.held.clear()
    server = BackloggedHTTPServer(("127.0.0.1", 0), functools.partial(SlowArraysHandler, directory=str(store)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    outcomes: dict[int, object] = {}
    try:
        mount = Mount(f"http://127.0.0.1:{server.server_address[1]}", tmp_path / "mnt",  # type: ignore[arg-type]
                      tmp_path / "log", ("--timeout", "30"))
        with mounted_many([mount]):
            def read(i: int) -> None:
                try:
                    outcomes[i] = (mount / f"slow{i}.raw").read_bytes() == bytes([i]) * 2048 * 2048
                except OSError as exc:
                    outcomes[i] = exc

            readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(STUCK_READERS)]
            for reader in readers:
                reader.start()
            # The daemon asks for an array's chunks only once a read of it has reached a FUSE thread.
            assert wait_until(lambda: len(SlowArraysHandler.held) == STUCK_READERS, 10), \
                f"reads of only {len(SlowArraysHandler.held)} of {STUCK_READERS} arrays reached the daemon"
            # The stuck readers stay held until `release` is set: each of these ending at all shows it did
            # not queue behind them (60 s: a hang guard, not a measure).
            for what, call in [("stat", lambda: os.stat(mount / "fast.json")),
                               ("listdir", lambda: os.listdir(mount.root)),
                               ("read", lambda: (mount / "fast.raw").read_bytes() == fast.astype("u1").tobytes())]:
                answers: list[object] = []
                other = threading.Thread(target=lambda call=call: answers.append(call()), daemon=True)
                other.start()
                other.join(60)
                assert answers and answers[0], f"{what} waited behind the readers stuck on the store"
            assert not outcomes, "the stuck readers should still be waiting"
            SlowArraysHandler.release.set()
            for reader in readers:
                reader.join(30)
            assert outcomes == {i: True for i in range(STUCK_READERS)}
    finally:
        SlowArraysHandler.release.set()
        server.shutdown()
        server.server_close()


def test_sigterm_with_reads_stuck_on_a_slow_store(stalling_server: str, tmp_path: Path) -> None:
    """Reads wait on a store that does not answer: the daemon still leaves within the grace period."""
    mount = url_mount(stalling_server, tmp_path, foreground=True,
                      expected_log=(r"WARNING zarrfs\.fuse\.stopper: stopping: reads still waiting",))
    with mounted_many([mount]):
        assert mount.process is not None
        name = next(n for n in os.listdir(mount.root) if n.endswith(".raw"))
        outcome: list[object] = []

        def read() -> None:
            try:
                outcome.append(len((mount / name).read_bytes()))
            except OSError as exc:
                outcome.append(exc.errno)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert StallingHandler.asked.wait(10), "the read did not reach the store"
        assert not outcome, "the read should be waiting on the stalled store"
        mount.process.send_signal(signal.SIGTERM)
        assert mount.process.wait(timeout=GRACE_SECONDS + 60) == 0  # (a hang guard; the store holds 60 s)
        reader.join(5)
        print(f"SIGTERM with a read stuck on the store: reader got {outcome}")
        # It waited out the grace period for the read, then stopped all the same: the stopper says so.
        assert [line for line in mount.log_lines() if f"reads still waiting {GRACE_SECONDS:.0f} s" in line]
        assert outcome and outcome[0] in GONE
        assert not is_mounted(mount.root)


# ----------------------------------------------------------- mount points


def test_stale_mount_of_another_file_system_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def not_connected(path: str) -> None:
        raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN), path)

    monkeypatch.setattr(mount_module.os, "statvfs", not_connected)
    monkeypatch.setattr(mount_module, "fstype", lambda path: "fuse.sshfs")
    with pytest.raises(mount_module.MountError) as raised:
        mount_module.check_mountpoint(str(tmp_path))
    assert str(raised.value) == (f"{tmp_path} is a stale fuse.sshfs mount (its daemon died): unmount it first "
                                 f"(`fusermount3 -u {tmp_path}`)")


@pytest.mark.parametrize("attempt", range(3))
def test_two_mounts_at_once_on_one_point(attempt: int, big: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    store, _ = big
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    commands = [zarrfs_command("mount", store, mountpoint, "--log-file", tmp_path / f"log{i}") for i in range(2)]
    processes = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL) for c in commands]
    try:
        results = [(p.wait(timeout=60), p.stderr.read() if p.stderr else "") for p in processes]
        assert sorted(code for code, _ in results) == [0, 1], results
        refusal = next(err for code, err in results if code == 1)
        assert refusal.count("\n") == 1 and ("being mounted by another zarrfs process" in refusal
                                            or "already a mount point" in refusal), refusal
        assert sum(1 for p in mount_points() if p == str(mountpoint)) == 1
    finally:
        for process in processes:
            for stream in (process.stdout, process.stderr):
                if stream:
                    stream.close()
        subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, check=False)
        assert wait_until(lambda: not daemon_pids(mountpoint), 10)


def test_busy_unmount_names_the_processes(big: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    store, _ = big
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        mapped = np.load(mount / "img.npy", mmap_mode="r")  # no open descriptor: only the mapping holds it
        try:
            busy = run_zarrfs("unmount", mount.root)
            assert busy.returncode == 1
            assert busy.stderr.strip() == (
                f"zarrfs: error: {mount.root} is busy: in use by {Path('/proc/self/comm').read_text().strip()} "
                f"(pid {os.getpid()}). "
                f"Close them, or detach anyway with `zarrfs unmount --lazy {mount.root}`")
        finally:
            del mapped


# -------------------------------------------------------------------- logs


def test_foreground_logs_one_line_per_error_on_stderr(big: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    """Under systemd the daemon runs in the foreground and its stderr is the journal."""
    source, _ = big
    store = tmp_path / "copy.zarr"
    shutil.copytree(source, store)
    (store / "img" / "c" / "3" / "5").write_bytes(b"not zstd")
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    daemon = subprocess.Popen(zarrfs_command("mount", store, mountpoint, "--foreground"), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: is_mounted(mountpoint), 30)
        fd = os.open(mountpoint / "img.raw", os.O_RDONLY | os.O_DIRECT)
        try:
            for _ in range(3):
                with pytest.raises(OSError) as raised:
                    os.pread(fd, 16, (3 * 128 + 1) * SIDE + 5 * 128)
                assert raised.value.errno == errno.EIO
        finally:
            os.close(fd)
    finally:
        subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, check=False)
        out, err = daemon.communicate(timeout=15)
    lines = err.splitlines()
    assert out == "" and len(lines) == 1, err
    assert " ERROR " in lines[0] and str(store) in lines[0] and "array /img" in lines[0] and "img/c/3/5" in lines[0]


def test_credentials_stay_out_of_the_log(stalling_server: str, tmp_path: Path) -> None:
    StallingHandler.release.set()  # a normal server for this test
    url = stalling_server.replace("http://", "http://alice:s3cret-token@")
    mount = url_mount(url, tmp_path)
    with mounted_many([mount]):
        name = next(n for n in os.listdir(mount.root) if n.endswith(".raw"))
        assert (mount / name).read_bytes() == bytes([3]) * 64 * 64
        log = "\n".join(mount.log_lines())
        assert "mounted" in log and "s3cret-token" not in log and "alice" not in log


# ------------------------------------------------------- vanishing stores


def test_files_vanishing_while_mounted(tmp_path: Path) -> None:
    """Metadata is read once; chunks at each read. A deleted chunk reads as the fill value (Zarr:
    a missing chunk is fill) while its array's metadata document is there (tests/test_live_stores.py:
    ESTALE once it is gone); a shard deleted after its index was read is ESTALE (it changed under the
    open file: docs/live-stores.md); the daemon lives on."""
    store = tmp_path / "s.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    plain = np.arange(64 * 64, dtype="<u2").reshape(64, 64) + 1
    group.create_array("plain", shape=(64, 64), chunks=(16, 64), dtype="<u2", fill_value=0)[...] = plain
    group.create_array("sharded", shape=(64, 64), dtype="<u2", chunks=(16, 64), shards=(64, 64), fill_value=0,
                       serializer=ShardingCodec(chunk_shape=(16, 64), codecs=[BytesCodec()]),
                       compressors=None)[...] = plain
    row = 64 * 2
    with mounted(store, tmp_path / "mnt", tmp_path / "log",
                 expected_log=[r" ERROR .*array /sharded.*changed since"]) as mount:
        names = sorted(os.listdir(mount.root))
        fds = {name: os.open(mount / f"{name}.raw", os.O_RDONLY | os.O_DIRECT) for name in ("plain", "sharded")}
        try:
            for fd in fds.values():  # rows 0-15: the first chunk, and the shard's index, are read and cached
                assert os.pread(fd, row, 0) == plain[0].tobytes()
            shutil.rmtree(store / "plain" / "c")
            (store / "sharded" / "c" / "0" / "0").unlink()
            assert os.pread(fds["plain"], row, 40 * row) == bytes(row)  # gone: the fill value
            (store / "plain" / "zarr.json").unlink()
            assert sorted(os.listdir(mount.root)) == names  # listings are metadata, read once
            assert os.pread(fds["plain"], row, 0) == plain[0].tobytes()  # cached
            with pytest.raises(OSError) as raised:
                os.pread(fds["sharded"], row, 40 * row)
            assert raised.value.errno == errno.ESTALE
        finally:
            for fd in fds.values():
                os.close(fd)
        shutil.rmtree(store)  # the whole store
        assert sorted(os.listdir(mount.root)) == names
        assert (mount / "plain.raw").stat().st_size == plain.nbytes
        assert mount.pid is not None and pid_alive(mount.pid)
        lines = [line for line in mount.log_lines() if "changed since" in line]
        assert len(lines) == 1 and "sharded/c/0/0" in lines[0]
