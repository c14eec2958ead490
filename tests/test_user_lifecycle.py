"""The mount lifecycle as any user lives it: mount, read with numpy and tifffile, unmount, lazy unmount,
a stale mount point, `--allow-other`, and a FUSE device the user cannot open.

The suite runs as root in CI; `scripts/test_installed.sh` runs this module a
second time as an unprivileged user (from a non-editable install, in a copy
of the checkout), which is how most people mount. Where root and other users
differ (only root may use `allow_other` without `user_allow_other` in
/etc/fuse.conf), each side asserts its own outcome.
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from mountutil import is_mounted, mount_points, mounted, pid_alive, run_zarrfs, wait_until, watchdog_of
from zarrfs.fuse import mount as mount_module

ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("store") / "scan.zarr"
    data = np.arange(3 * 40 * 50, dtype="<u2").reshape(3, 40, 50)
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    group.create_array("img", shape=data.shape, chunks=(1, 16, 16), dtype=data.dtype)[...] = data
    return path, data


def test_mount_read_with_numpy_and_tifffile_unmount(store: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    source, data = store
    with mounted(source, tmp_path / "mnt", tmp_path / "log") as mount:
        np.testing.assert_array_equal(np.load(mount / "img.npy", mmap_mode="r"), data)
        np.testing.assert_array_equal(tifffile.imread(mount / "img.tif"), data)
        assert (mount / "img.raw").read_bytes() == data.tobytes()
        result = run_zarrfs("unmount", mount.root)
        assert result.returncode == 0, result.stderr
        assert not is_mounted(mount.root)


def test_busy_unmount_then_lazy(store: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    source, data = store
    # The last file closing after a lazy unmount races the kernel's teardown; libfuse may say so.
    with mounted(source, tmp_path / "mnt", tmp_path / "log",
                 expected_log=[r"fuse: reading device: Software caused connection abort"]) as mount:
        with open(mount / "img.raw", "rb") as held:
            busy = run_zarrfs("unmount", mount.root)
            assert busy.returncode == 1 and "busy" in busy.stderr and "--lazy" in busy.stderr, busy.stderr
            lazy = run_zarrfs("unmount", "--lazy", mount.root)
            assert lazy.returncode == 0, lazy.stderr
            assert not is_mounted(mount.root)
            assert held.read(100) == data.tobytes()[:100]  # an open file keeps working until closed
        assert mount.pid is not None
        assert wait_until(lambda: not pid_alive(mount.pid), 10), "the daemon outlived its last open file"


def test_a_stale_mount_point_is_recovered(store: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    source, data = store
    mountpoint = tmp_path / "mnt"
    with mounted(source, mountpoint, tmp_path / "log1") as first:
        assert first.pid is not None
        # Its watchdog too, which would unmount it: a daemon killed with the mount left stale.
        os.kill(watchdog_of(first.pid), signal.SIGKILL)
        os.kill(first.pid, signal.SIGKILL)
        assert wait_until(lambda: not pid_alive(first.pid), 5)
        with pytest.raises(OSError):
            os.listdir(mountpoint)
        with mounted(source, mountpoint, tmp_path / "log2") as second:  # no `zarrfs unmount` first
            assert (second / "img.raw").read_bytes() == data.tobytes()
            assert sum(1 for p in mount_points() if p == str(mountpoint)) == 1  # replaced, not stacked


def test_allow_other(store: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    """Root may always share a mount; another user needs `user_allow_other` in /etc/fuse.conf."""
    source, _ = store
    fuse_conf = Path("/etc/fuse.conf")
    permitted = ROOT or (fuse_conf.exists() and any(
        line.strip() == "user_allow_other" for line in fuse_conf.read_text().splitlines()))
    if permitted:
        with mounted(source, tmp_path / "mnt", tmp_path / "log", "--allow-other") as mount:
            assert "img.npy" in os.listdir(mount.root)
        return
    (tmp_path / "mnt").mkdir()
    # The refusal is reported as the daemon's failure, not waited out: --ready-timeout far above run_zarrfs's
    # own bound would make a mount that waited for readiness time the command out instead.
    result = run_zarrfs("mount", source, tmp_path / "mnt", "--allow-other", "--log-file", tmp_path / "log",
                        "--ready-timeout", "3600")
    assert result.returncode == 1
    assert "user_allow_other" in result.stderr or "user_allow_other" in (tmp_path / "log").read_text()
    assert "did not become ready" not in result.stderr
    assert not is_mounted(tmp_path / "mnt")


def test_a_fuse_device_this_user_cannot_open_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    device = tmp_path / "fuse"
    device.touch(mode=0o600)
    device.chmod(0o000)
    if ROOT:  # root opens anything: ask as if a user without the permission bits
        monkeypatch.setattr(mount_module.os, "access", lambda path, mode: False)
    with pytest.raises(mount_module.MountError) as raised:
        mount_module.check_fuse_device(str(device))
    message = str(raised.value)
    assert f"cannot open {device} (mode 0000" in message
    assert "chmod 0666" in message and "usermod -aG" in message and "--device /dev/fuse" in message
    assert stat.S_IMODE(device.stat().st_mode) == 0  # only looked at, never changed
