"""The systemd unit: it verifies, and the daemon speaks its Type=notify protocol."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import zarr

UNIT = Path(__file__).resolve().parent.parent / "systemd" / "zarrfs@.service"
ZARRFS = str(Path(sys.executable).with_name("zarrfs"))


def _verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`systemd-analyze verify` on an instance of the unit, run from this venv's zarrfs."""
    unit = tmp_path / "zarrfs@demo.service"
    unit.write_text(unit_text.replace("/usr/local/bin/zarrfs", ZARRFS))
    return subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def systemd_analyze() -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: install Debian's `systemd` package (scripts/install_clients.sh does)")


def test_unit_verifies(systemd_analyze: None, tmp_path: Path) -> None:
    result = _verify(UNIT.read_text(), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == ""


def test_verify_catches_a_broken_unit(systemd_analyze: None, tmp_path: Path) -> None:
    result = _verify(UNIT.read_text().replace("Type=notify", "Type=bogus"), tmp_path)
    assert "Failed to parse service type" in result.stderr


def test_unit_runs_foreground_mount_with_notify_and_restart() -> None:
    text = UNIT.read_text()
    assert "Type=notify" in text
    assert "Restart=on-failure" in text
    assert "EnvironmentFile=/etc/zarrfs/%i.env" in text
    assert "mount --foreground" in text


def test_daemon_notifies_ready_then_stopping(tmp_path: Path) -> None:
    """What systemd sees: READY=1 once mounted, STOPPING=1 after SIGTERM, then exit 0."""
    store = tmp_path / "s.zarr"
    zarr.create_array(str(store), data=np.arange(12, dtype="u1").reshape(3, 4))
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    with _notifying_daemon([ZARRFS, "mount", "--foreground", str(store), str(mountpoint)], mountpoint,
                           tmp_path) as (daemon, listener):
        assert listener.recv(256) == b"READY=1"
        assert os.path.ismount(mountpoint)
        assert (mountpoint / "s.raw").read_bytes() == bytes(range(12))
        daemon.send_signal(signal.SIGTERM)
        assert listener.recv(256) == b"STOPPING=1"
        assert daemon.wait(timeout=30) == 0
        assert not os.path.ismount(mountpoint)


@contextmanager
def _notifying_daemon(command: list[str], mountpoint: Path,
                      tmp_path: Path) -> Iterator[tuple[subprocess.Popen, socket.socket]]:
    """The daemon started as systemd starts a Type=notify service (NOTIFY_SOCKET), and the socket it
    tells; on the way out the daemon is ended and the mount point left unmounted, whatever happened."""
    address = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(60)
    daemon = subprocess.Popen(command, env={**os.environ, "NOTIFY_SOCKET": address},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield daemon, listener
    finally:
        listener.close()
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        if os.path.ismount(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)


def _exec_start(unit_text: str, environment: dict[str, str]) -> list[str]:
    """The unit's ExecStart as systemd expands it (systemd.service(5), "Command lines"): `$NAME` as a word
    of its own is the value split at whitespace (zero or more words), `${NAME}` is exactly one word."""
    line = next(text for text in unit_text.splitlines() if text.startswith("ExecStart="))
    words: list[str] = []
    for word in line.removeprefix("ExecStart=").split():
        if word.startswith("${") and word.endswith("}"):
            words.append(environment.get(word[2:-1], ""))
        elif word.startswith("$"):
            words.extend(environment.get(word[1:], "").split())
        else:
            words.append(word)
    return [ZARRFS if word == "/usr/local/bin/zarrfs" else word for word in words]


def _environment_file(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("kind", ["share", "catalog"])
def test_cluster_recipe_mounts_a_share_or_a_catalog(kind: str, tmp_path: Path) -> None:
    """docs/collections.md's per-node recipe: the unit's own ExecStart, expanded from the env file the
    doc gives (a share's folder; a catalog with ZARRFS_SOURCE empty), mounts both stores and notifies."""
    share = tmp_path / "share"
    for name, value in (("a", 1), ("b", 2)):
        zarr.create_array(str(share / "project" / f"{name}.zarr"), data=np.full((2, 3), value, dtype="u1"))
    (share / "project" / "notes.txt").write_text("beside the stores\n")
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    if kind == "share":
        env_text = f"ZARRFS_SOURCE={share}\nZARRFS_MOUNTPOINT={mountpoint}\n"
        a_raw, b_raw = mountpoint / "project" / "a.zarr" / "a.raw", mountpoint / "project" / "b.zarr" / "b.raw"
    else:
        catalog = tmp_path / "catalog.toml"
        catalog.write_text(f'[a]\nsource = "{share}/project/a.zarr"\n\n[b]\nsource = "{share}/project/b.zarr"\n')
        env_text = f"ZARRFS_SOURCE=\nZARRFS_MOUNTPOINT={mountpoint}\nZARRFS_OPTIONS=--catalog {catalog}\n"
        a_raw, b_raw = mountpoint / "a" / "a.raw", mountpoint / "b" / "b.raw"
    command = _exec_start(UNIT.read_text(), _environment_file(env_text))
    with _notifying_daemon(command, mountpoint, tmp_path) as (daemon, listener):
        assert listener.recv(256) == b"READY=1"
        assert a_raw.read_bytes() == b"\x01" * 6
        assert b_raw.read_bytes() == b"\x02" * 6
        if kind == "share":
            assert (mountpoint / "project" / "notes.txt").read_text() == "beside the stores\n"
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
        assert not os.path.ismount(mountpoint)
