"""The daemon's memory controls (zarrfs/memory.py, fuse/mount.py): heap trimming, glibc's
per-thread caches cut to one block a size in every daemon, and readahead slots by budget. (The
memory figures of `.zarrfs-stats.json`: test_mount_options.py.)

The trimmer test runs in a child process so that what it allocates and frees is that process's
heap alone, with the allocator settings the daemon uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr

from mountutil import Mount, mounted_many
from zarrfs.fuse.mount import MAX_BACKGROUND, MIN_BACKGROUND, fuse_concurrency
from zarrfs.memory import ALLOCATOR_SETTING, allocator_environment

HEAP_HOLES = textwrap.dedent("""
    import ctypes, json, time
    from zarrfs.memory import HeapTrimmer, memory_figures, tune_malloc

    assert tune_malloc()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    big, pins = [], []
    for _ in range(64):  # 1 MiB blocks from the heap (below the mmap threshold), each pinned by the next
        block = libc.malloc(1 << 20)
        ctypes.memset(block, 1, 1 << 20)
        big.append(block)
        pins.append(libc.malloc(512 << 10))  # larger than any free piece: cut from the heap's top
    for block in big:  # holes between live blocks: free, but resident
        libc.free(block)
    before = memory_figures()
    trimmer = HeapTrimmer(slack=16 << 20, interval=0.05)
    started = trimmer.start()
    time.sleep(0.5)
    trimmer.stop()
    print(json.dumps({"started": started, "trims": trimmer.trims, "before": before, "after": memory_figures()}))
""")


def test_the_trimmer_returns_free_heap_holes_to_the_system() -> None:
    result = subprocess.run([sys.executable, "-c", HEAP_HOLES], capture_output=True, text=True, timeout=60,
                            check=True)
    figures = json.loads(result.stdout)
    before, after = figures["before"], figures["after"]
    assert figures["started"] and figures["trims"] >= 1, figures
    assert before["heap_free_bytes"] >= 60 << 20, before  # the holes are there, and resident
    assert before["rss_bytes"] - after["rss_bytes"] >= 48 << 20, figures  # and given back
    assert after["heap_free_bytes"] >= 60 << 20, after  # still the heap's to reuse: only the pages went


def test_readahead_slots_follow_the_cache_budget() -> None:
    assert fuse_concurrency(512 << 20) == (MAX_BACKGROUND, MAX_BACKGROUND + 8)
    assert fuse_concurrency(32 << 20) == (8, 16)
    assert fuse_concurrency(1 << 20) == (MIN_BACKGROUND, MIN_BACKGROUND + 8)


def test_the_allocator_environment_adds_its_setting_once_and_keeps_the_users() -> None:
    assert allocator_environment({"PATH": "/bin"}) == {"PATH": "/bin", "GLIBC_TUNABLES": ALLOCATOR_SETTING}
    assert allocator_environment({"GLIBC_TUNABLES": "glibc.malloc.mxfast=0"}) == \
        {"GLIBC_TUNABLES": f"glibc.malloc.mxfast=0:{ALLOCATOR_SETTING}"}
    assert allocator_environment({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=3"}) == \
        {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=3:glibc.malloc.hugetlb=1"}  # the user's count stands
    for already in (ALLOCATOR_SETTING, "glibc.malloc.hugetlb=0:glibc.malloc.tcache_count=3",
                    f"glibc.malloc.mxfast=0:{ALLOCATOR_SETTING}"):
        assert allocator_environment({"GLIBC_TUNABLES": already}) is None


def _environment(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().partition("=")[::2] for entry in entries if entry)


@pytest.mark.parametrize("foreground", [False, True], ids=["background", "foreground"])
def test_every_daemon_runs_with_glibcs_thread_caches_cut(foreground: bool, tmp_path: Path) -> None:
    """A background mount starts its daemon with the setting; a foreground one (systemd's) restarts
    itself with it, keeping its PID, and serves as before."""
    assert "GLIBC_TUNABLES" not in os.environ  # the test's own processes start without it
    store = tmp_path / "data.zarr"
    data = np.arange(24, dtype="<f4").reshape(4, 6)
    zarr.open_array(str(store), mode="w", shape=data.shape, chunks=(2, 3), dtype=data.dtype)[...] = data
    mount = Mount(store, tmp_path / "mnt", tmp_path / "log", foreground=foreground)
    with mounted_many([mount]):
        assert mount.pid is not None
        # glibc parses the variable in place as the process starts, which leaves /proc with the first
        # tunable only (the process keeps a copy of the whole: `os.environ` shows every one).
        assert _environment(mount.pid)["GLIBC_TUNABLES"] == ALLOCATOR_SETTING.partition(":")[0]
        if foreground:
            assert mount.process is not None and mount.pid == mount.process.pid
        assert (mount / "data.raw").read_bytes() == data.tobytes()
