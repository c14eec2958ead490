"""What the mount options change, seen through a real mount."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from mountutil import is_mounted, mounted, run_zarrfs


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("options") / "s.zarr"
    group = zarr.open_group(str(path), mode="w")
    group.create_array("a", data=np.arange(64 * 64, dtype="<f4").reshape(64, 64), chunks=(16, 16))
    return path


def test_formats_limits_the_files(store: Path, tmp_path: Path) -> None:
    with mounted(store, tmp_path / "mnt", tmp_path / "log", "--formats", "npy,json") as mount:
        assert sorted(os.listdir(mount.root)) == [".group.json", ".zarrfs-stats.json", "a.json", "a.npy"]


def test_cache_size_and_workers_reach_the_engine(store: Path, tmp_path: Path) -> None:
    with mounted(store, tmp_path / "mnt", tmp_path / "log", "--cache-size", "3MiB", "--workers", "2") as mount:
        assert (mount / "a.raw").read_bytes() == np.arange(64 * 64, dtype="<f4").tobytes()
        stats = json.loads((mount / ".zarrfs-stats.json").read_text())
        assert stats["cache"]["budget_bytes"] == 3 << 20
        assert stats["cache"]["loads"] == 16  # 4 x 4 chunks, each decoded once
        assert stats["cache"]["held_bytes"] == 0  # no stream holds a read window now


def test_the_stats_file_reports_the_daemons_memory_and_read_times(store: Path, tmp_path: Path) -> None:
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for _ in range(3):
            (mount / "a.npy").read_bytes()
        stats = json.loads((mount / ".zarrfs-stats.json").read_text())
        status = (Path("/proc") / str(mount.pid) / "status").read_text()
    memory, reads = stats["memory"], stats["reads"]
    assert reads["count"] >= 1 and 0 < reads["p50_ms_at_most"] <= reads["p99_ms_at_most"] <= reads["max_ms_at_most"]
    resident = int(status.split("VmRSS:")[1].split()[0]) << 10
    assert abs(memory["rss_bytes"] - resident) < 16 << 20, (memory, resident)  # the daemon's own figure
    assert 0 < memory["heap_in_use_bytes"] < memory["rss_bytes"] and memory["python_blocks"] > 10_000, memory


@pytest.mark.parametrize(("args", "message"), [
    (["--formats", "npy,png"], "unknown format(s) ['png']"),
    (["--cache-size", "lots"], "invalid size 'lots'"),
])
def test_bad_option_values_are_one_clear_line(store: Path, tmp_path: Path, args: list[str], message: str) -> None:
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    result = run_zarrfs("mount", store, mountpoint, *args)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not is_mounted(mountpoint)
