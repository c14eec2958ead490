"""A share under pressure: one small cache budget across stores whose files stay open, and an unmount
while files are open in several stores.

The stores are zarr-python 3's (zstd chunks, so every read is a decode through the shared cache); the
bytes every read returns are compared with what the writer wrote.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from mountutil import daemon_pids, is_mounted, mount_points, mounted, pid_alive, run_zarrfs, wait_until

pytestmark = pytest.mark.mount

STORES = 4
SHAPE = (256, 256)  # float32: 256 KiB per store, chunks of 64 x 64 (16 KiB): 16 chunks each
CACHE = "64K"  # four chunks: far less than one store's worth, so reads across stores evict each other


@pytest.fixture(scope="module")
def share(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("pressure") / "share"
    written = {}
    for index in range(STORES):
        values = np.random.default_rng(index).standard_normal(SHAPE).astype("<f4")
        name = f"run{index}"
        zarr.create_array(str(root / "runs" / f"{name}.zarr"), shape=SHAPE, chunks=(64, 64), dtype="<f4")[...] = values
        written[f"runs/{name}.zarr/{name}.raw"] = values
    (root / "runs" / "README.txt").write_text("four runs\n")
    return root, written


def test_one_small_budget_across_stores_with_files_held_open(share: tuple[Path, dict[str, np.ndarray]],
                                                             tmp_path: Path) -> None:
    root, written = share
    with mounted(root, tmp_path / "mnt", tmp_path / "log", "--cache-size", CACHE) as mount:
        handles = {path: os.open(mount / path, os.O_RDONLY | os.O_DIRECT) for path in written}
        try:
            rng = np.random.default_rng(7)
            block = 4096  # O_DIRECT: aligned reads that the kernel's page cache cannot answer
            for _ in range(400):  # interleaved reads across the four open files, each landing anywhere
                path = list(written)[int(rng.integers(STORES))]
                offset = int(rng.integers(SHAPE[0] * SHAPE[1] * 4 // block)) * block
                expected = written[path].tobytes()[offset:offset + block]
                assert os.pread(handles[path], block, offset) == expected, (path, offset)
            stats = json.loads((mount / ".zarrfs-stats.json").read_text())
            cache = stats["cache"]
            assert cache["evictions"] > 0  # the budget was too small to keep what was read
            assert cache["budget_bytes"] == 64 << 10
            for path, values in written.items():  # every file, read whole again through the evictions
                assert os.pread(handles[path], values.nbytes, 0) == values.tobytes(), path
        finally:
            for handle in handles.values():
                os.close(handle)


def test_unmount_with_files_open_in_several_stores(share: tuple[Path, dict[str, np.ndarray]],
                                                    tmp_path: Path) -> None:
    root, written = share
    mountpoint = tmp_path / "mnt"
    with mounted(root, mountpoint, tmp_path / "log") as mount:
        daemon = mount.pid
        assert daemon is not None
        held = {path: open(mount / path, "rb") for path in written}  # noqa: SIM115 - closed below
        try:
            firsts = {path: handle.read(1000) for path, handle in held.items()}
            busy = run_zarrfs("unmount", mount.root)
            assert busy.returncode == 1
            assert f"{mount.root} is busy" in busy.stderr and "--lazy" in busy.stderr
            assert is_mounted(mount.root)  # a refused unmount leaves the mount whole

            detached = run_zarrfs("unmount", "--lazy", mount.root)
            assert detached.returncode == 0, detached.stderr
            assert wait_until(lambda: not is_mounted(mount.root), 30)
            # Detached, the open files still read, whole and right, in every store.
            for path, handle in held.items():
                assert firsts[path] + handle.read() == written[path].tobytes(), path
            assert pid_alive(daemon)  # it serves the open files until they close
        finally:
            for handle in held.values():
                handle.close()
        assert wait_until(lambda: not pid_alive(daemon), 30)  # the last close ends it
        assert not daemon_pids(mountpoint)
    assert str(mount.root) not in mount_points()
