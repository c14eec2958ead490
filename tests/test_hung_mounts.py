"""Never a hung or dead mount: whatever fails, nothing is left behind.

Each case starts a real daemon over an HTTP server on 127.0.0.1 that holds
back chosen requests (tests/remoteutil.py `stalling_server`), makes it fail
(readiness runs out, kill -9 during discovery, a daemon that stops
answering) and then asserts that nothing is left: no entry in /proc/mounts,
no FUSE connection in fusectl (/sys/fs/fuse/connections/N) of any mount
seen on the mount point, and a `stat` of the mount point, run in a child
process, returning within seconds (so the test itself cannot hang). Also:
a node whose metadata or chunks stall costs the reads that need it an error
after --timeout while the rest of the tree serves.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import zarr

from mountutil import Mount, daemon_pids, is_mounted, mounted_many, run_zarrfs, wait_until
from remoteutil import STALL_LIMIT_S, remote_mount, stalling_server
from zarrfs.fuse.connections import FUSECTL, connection_number, device, fusectl_available
from zarrfs.fuse.mountpoints import device

CHILDREN = 12
STAT_SECONDS = 5.0  # a stat of a mount point that is gone or cleared answers at once
# The daemon gets 2 x 5 s of grace to stop (stopper.py), then kill -9: what a failed mount may take.
CLEANUP_SECONDS = 15.0
STOPPED_LOG = (r"WARNING zarrfs\.fuse\.stopper: (stopping: reads still waiting|exit held)",)


@pytest.fixture(scope="module")
def hierarchy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A v2 group of small arrays a00.. (values = their number) and a nested group deep/{ok,slow}."""
    root = tmp_path_factory.mktemp("stall") / "h.zarr"
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    for i in range(CHILDREN):
        group.create_array(f"a{i:02d}", shape=(64, 64), chunks=(32, 32), dtype="u1")[...] = i
    deep = group.create_group("deep")
    for i, name in enumerate(["ok", "slow"]):
        deep.create_array(name, shape=(64, 64), chunks=(32, 32), dtype="u1")[...] = 100 + i
    return root


class Devices:
    """The device ('major:minor') of every mount seen on `mountpoint` while the block runs, sampled
    every 5 ms: the FUSE connections a failed mount may leave behind."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = str(mountpoint)
        self.seen: set[str] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.is_set():
            found = device(self.mountpoint)
            if found is not None:
                self.seen.add(found)
            time.sleep(0.005)

    def __enter__(self) -> Devices:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


def stat_returns(path: Path, seconds: float = STAT_SECONDS) -> bool:
    """Whether `stat PATH` in a child process ends (answer or error) within `seconds`.

    A child stuck on a dead connection cannot even be killed until it is
    aborted: it is left behind, not waited for.
    """
    child = subprocess.Popen(["stat", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL)
    try:
        child.wait(seconds)
        return True
    except subprocess.TimeoutExpired:
        child.kill()
        return False


def mount_devices() -> set[str]:
    """The device ('major:minor') of every mount in this mount namespace."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        return {line.split()[2] for line in table}


def leftovers(mountpoint: Path, devices: set[str]) -> list[str]:
    """What a failed mount left: its mount entry, its FUSE connections, a mount point that blocks."""
    found = []
    if is_mounted(mountpoint):
        found.append(f"{mountpoint} is still in /proc/mounts")
    mounted_devices = mount_devices()
    for majmin in devices:
        connection = FUSECTL / str(connection_number(majmin))
        # (A number the kernel gave again, to a mount made since: other tests on the machine mount too.)
        if connection.exists() and majmin not in mounted_devices:
            waiting = (connection / "waiting").read_text().strip()
            found.append(f"FUSE connection {connection} is still there ({waiting} requests waiting)")
    if not stat_returns(mountpoint):
        found.append(f"stat {mountpoint} did not return within {STAT_SECONDS:g} s")
    return found


def assert_nothing_left(mountpoint: Path, devices: set[str]) -> None:
    # The kernel tears a connection down once its last user has let go: give it a moment.
    wait_until(lambda: not leftovers(mountpoint, devices), 5, interval=0.2)
    problems = leftovers(mountpoint, devices)
    assert not problems, problems


# Every test here may mount fusectl (`mount -t fusectl`, through zarrfs.fuse.connections), a program the
# automatic marking cannot see from the tests' own code.
pytestmark = pytest.mark.clients


@pytest.fixture(autouse=True, scope="module")
def fusectl() -> Iterator[None]:
    # The connections are checked where the kernel shows them; zarrfs mounts fusectl too when root. What
    # these tests mounted, they unmount.
    mounted_before = device(str(FUSECTL)) is not None
    assert fusectl_available(), f"fusectl is not mounted on {FUSECTL} and this user cannot mount it"
    yield
    if not mounted_before:
        subprocess.run(["umount", str(FUSECTL)], capture_output=True, check=False)


@contextmanager
def blocked_lister(mountpoint: Path) -> Iterator[subprocess.Popen]:
    """`ls MOUNTPOINT` in a child process, as a user's shell would run it while the mount hangs."""
    lister = subprocess.Popen(["ls", str(mountpoint)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL)
    try:
        yield lister
    finally:
        if lister.poll() is None:
            lister.kill()


def ended_within(process: subprocess.Popen, seconds: float) -> bool:
    try:
        process.wait(seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


# ------------------------------------------------------------------ cases


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill -9", "SIGTERM"])
def test_a_daemon_stopped_while_its_root_listing_stalls_leaves_nothing(stop: signal.Signals, hierarchy: Path,
                                                                       tmp_path: Path) -> None:
    """The root's children stall: the mount is ready anyway (their metadata is discovered behind) and
    a user's `ls` waits on the listing. kill -9 of the daemon fails the `ls` at once; SIGTERM (what
    `systemctl stop` sends) within the daemon's grace. Nothing is left."""
    expected = () if stop == signal.SIGKILL else STOPPED_LOG
    with stalling_server(hierarchy, r"/a\d\d/\.zarray$") as server:
        mount = remote_mount(tmp_path, server.url, "--timeout", "120", expected_log=expected)
        mount.root.mkdir()
        with Devices(mount.root) as devices:
            try:
                mount.launch()
                assert mount.process is not None
                assert ended_within(mount.process, 60), "zarrfs mount waited for the stalled children"
                assert mount.process.returncode == 0, mount.process.communicate()
                assert wait_until(lambda: server.stalled, 30), "the root's listing did not start"
                with blocked_lister(mount.root) as lister:
                    time.sleep(0.5)
                    assert lister.poll() is None, "ls should wait for the root's listing"
                    pids = daemon_pids(mount.root)
                    assert len(pids) == 1, pids
                    started = time.monotonic()
                    os.kill(pids[0], stop)
                    limit = 5 if stop == signal.SIGKILL else CLEANUP_SECONDS
                    assert ended_within(lister, limit), f"ls still waits after {stop.name}"
                    assert lister.returncode != 0
                    took = time.monotonic() - started
                print(f"{stop.name} while the root's listing stalls: ls ended {took:.2f} s after it")
                assert_nothing_left(mount.root, set(devices.seen))
                assert devices.seen, "the mount was never seen"
            finally:
                problems = mount.stop()
        assert not problems, problems


def test_a_mount_whose_root_does_not_answer_is_stopped_and_cleared(hierarchy: Path, tmp_path: Path) -> None:
    """--ready-timeout runs out while the root's own metadata stalls: `zarrfs mount` gives up, says so,
    and leaves no mount."""
    with stalling_server(hierarchy, r"^/\.z(group|attrs|metadata)$|^/zarr\.json$") as server:
        mount = remote_mount(tmp_path, server.url, "--timeout", "120", "--ready-timeout", "4",
                             expected_log=STOPPED_LOG)
        mount.root.mkdir()
        with Devices(mount.root) as devices:
            try:
                started = time.monotonic()
                mount.launch()
                assert mount.process is not None
                assert ended_within(mount.process, 60 + CLEANUP_SECONDS), "zarrfs mount did not give up"
                took = time.monotonic() - started
                _, err = mount.process.communicate()
                assert mount.process.returncode == 1
                assert "the daemon did not become ready within 4 s; stopped it" in err, err
                assert server.stalled
                print(f"readiness ran out (root stalled): zarrfs mount returned after {took:.1f} s")
                assert_nothing_left(mount.root, set(devices.seen))
                assert not devices.seen, devices.seen
            finally:
                problems = mount.stop()
        assert not problems, problems


def test_unmount_aborts_a_mount_whose_daemon_does_not_answer(hierarchy: Path, tmp_path: Path) -> None:
    """A daemon that stops answering (SIGSTOP) with a `stat` waiting on it: `zarrfs mount` on the same
    point says so within seconds instead of hanging, and `zarrfs unmount` aborts the connection."""
    mount = Mount(hierarchy, tmp_path / "mnt", tmp_path / "log")
    with Devices(mount.root) as devices, mounted_many([mount]):
        assert mount.pid is not None
        os.kill(mount.pid, signal.SIGSTOP)
        try:
            with blocked_lister(mount.root) as lister:
                time.sleep(0.5)
                assert lister.poll() is None, "ls should wait for the stopped daemon"
                started = time.monotonic()
                again = run_zarrfs("mount", hierarchy, mount.root, timeout=30)
                assert again.returncode == 1
                assert "is a zarrfs mount that does not answer" in again.stderr, again.stderr
                refused = time.monotonic() - started
                started = time.monotonic()
                result = run_zarrfs("unmount", mount.root, timeout=30)
                cleared = time.monotonic() - started
                assert result.returncode == 0, result.stderr
                assert "aborted its FUSE connection" in result.stderr, result.stderr
                assert ended_within(lister, 5), "ls still waits after the unmount"
                print(f"stopped daemon: a second mount refused in {refused:.1f} s, unmount cleared it in "
                      f"{cleared:.1f} s")
            assert_nothing_left(mount.root, set(devices.seen))
        finally:
            os.kill(mount.pid, signal.SIGCONT)


def test_a_stalled_node_fails_after_the_timeout_while_the_rest_serves(hierarchy: Path, tmp_path: Path) -> None:
    """deep/slow's metadata and a03's chunks never come: listing deep takes --timeout and leaves slow
    out, reading a03 fails with EIO after it; the arrays beside them read right meanwhile, at once."""
    with stalling_server(hierarchy, r"/deep/slow/\.zarray$|/a03/\d") as server:
        mount = remote_mount(tmp_path, server.url, "--timeout", "2", "--retries", "0", expected_log=(
            r"WARNING zarrfs\.hierarchy\.nodes: .*deep/slow/\.zarray.* no complete answer within 2 s",
            r"ERROR zarrfs\.fuse\.ops: read /a03\.raw: .* no complete answer within 2 s",
            r"ERROR zarrfs\.fuse\.ops: \w+ /deep/slow(\.raw)?: .*deep/slow/\.zarray.* no complete answer within 2 s"))
        with mounted_many([mount]):
            outcome: dict[str, object] = {}

            def attempt(name: str, call) -> None:  # noqa: ANN001 - a lambda
                try:
                    outcome[name] = call()
                except OSError as exc:
                    outcome[name] = exc.errno

            stuck = [threading.Thread(target=attempt, args=("deep", lambda: sorted(os.listdir(mount / "deep")))),
                     threading.Thread(target=attempt, args=("a03", lambda: (mount / "a03.raw").read_bytes()))]
            for thread in stuck:
                thread.start()
            assert wait_until(lambda: len(server.stalled) >= 2, 10), server.stalled
            for i in (0, 1, 2, 4, 11):
                assert (mount / f"a{i:02d}.raw").read_bytes() == bytes([i]) * 64 * 64
            # Meanwhile: the other arrays were read while the stalled ones still wait for their timeout.
            assert all(thread.is_alive() for thread in stuck) and not outcome, outcome
            for thread in stuck:  # ended by --timeout (2 s), long before the server's stall would end
                thread.join(STALL_LIMIT_S / 2)
            assert not any(thread.is_alive() for thread in stuck), "a stalled node outlived its timeout"
            # (A sibling of the stalled node is found only once its group's listing gave up on it.)
            assert (mount / "deep" / "ok.raw").read_bytes() == bytes([100]) * 64 * 64
            print(f"stalled node: {outcome}")
            assert outcome["a03"] == 5  # EIO
            assert "ok.raw" in outcome["deep"] and not any(n.startswith("slow") for n in outcome["deep"])  # type: ignore[union-attr]
            # Both ended by the timeout, which says so (not by the server, which holds them 30 s).
            lines = mount.log_lines()
            assert [line for line in lines if "read /a03.raw" in line and "within 2 s" in line], lines
            assert [line for line in lines if "deep/slow/.zarray" in line and "within 2 s" in line], lines
            assert np.frombuffer((mount / "a05.raw").read_bytes(), "u1").tolist() == [5] * 64 * 64
            # The node left out is EIO for whoever asks for it by name, not a silent ENOENT.
            for name in ("slow", "slow.raw"):
                with pytest.raises(OSError) as failed:
                    os.stat(mount / "deep" / name)
                assert failed.value.errno == errno.EIO, name
