"""The systemd unit: it verifies, and the daemon speaks its Type=notify protocol."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
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
    address = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(60)
    daemon = subprocess.Popen([ZARRFS, "mount", "--foreground", str(store), str(mountpoint)],
                              env={**os.environ, "NOTIFY_SOCKET": address},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert listener.recv(256) == b"READY=1"
        assert os.path.ismount(mountpoint)
        assert (mountpoint / "s.raw").read_bytes() == bytes(range(12))
        daemon.send_signal(signal.SIGTERM)
        assert listener.recv(256) == b"STOPPING=1"
        assert daemon.wait(timeout=30) == 0
        assert not os.path.ismount(mountpoint)
    finally:
        listener.close()
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        if os.path.ismount(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
