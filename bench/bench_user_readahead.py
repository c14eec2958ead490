"""What a non-root mount gets without raising the kernel's readahead: cold `dd bs=1M` as root and as a user.

A mount raises its bdi's `read_ahead_kb` (4 MiB for local stores) so that
page-cache reads reach the daemon as 1 MiB requests, several in flight. Only
root may write that knob; another user's mount keeps the kernel's 128 KiB.
This mounts the same store as root and as USER in turns (a fresh daemon, so a
cold chunk cache, each time; the store files re-read first so both find them in
the page cache), reads the `.raw` with `dd bs=1M`, and prints medians and the
ratio user / root.

Run as root: python bench/bench_user_readahead.py --user zarrfs-ci --python /path/venv/bin/python
(PYTHON must be runnable by USER, e.g. a venv made from /usr/bin/python3 with zarrfs installed.)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numcodecs
import numpy as np
import zarr

from zarrfs.fuse.mountpoints import device

SIDE = 8192  # float32 8192 x 16384: 512 MiB


def write_store(path: Path) -> None:
    data = np.random.default_rng(0).standard_normal((SIDE, 2 * SIDE), dtype=np.float32).round(2)
    array = zarr.open_array(str(path), mode="w", zarr_format=2, shape=data.shape, chunks=(1024, 1024),
                            dtype=data.dtype, compressor=numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE))
    array[...] = data


def warm(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            file.read_bytes()


def as_user(user: str | None, command: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *command] if user else command


def timed_read(python: str, store: Path, mountpoint: Path, user: str | None) -> tuple[float, str]:
    """Seconds for a cold dd of the mounted .raw, and the readahead the mount got."""
    subprocess.run(as_user(user, [python, "-P", "-m", "zarrfs", "mount", str(store), str(mountpoint)]), check=True)
    try:
        # From the mount table: root may not stat another user's FUSE mount.
        knob = Path(f"/sys/class/bdi/{device(str(mountpoint))}/read_ahead_kb").read_text().strip()
        started = time.perf_counter()
        subprocess.run(as_user(user, ["dd", f"if={mountpoint}/data.raw", "of=/dev/null", "bs=1M"]),
                       check=True, capture_output=True)
        return time.perf_counter() - started, knob
    finally:
        subprocess.run(as_user(user, [python, "-P", "-m", "zarrfs", "unmount", str(mountpoint)]), check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--user", required=True, help="the unprivileged user to mount as")
    parser.add_argument("--python", required=True, help="an interpreter with zarrfs installed that USER can run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="zarrfs-ra-"))
    work.chmod(0o755)
    try:
        store = work / "data.zarr"
        write_store(store)
        subprocess.run(["chmod", "-R", "a+rX", str(work)], check=True)
        nbytes = SIDE * 2 * SIDE * 4
        seconds: dict[str, list[float]] = {"root": [], "user": []}
        knobs: dict[str, str] = {}
        for _ in range(args.repeat):
            for side, user in (("root", None), ("user", args.user)):
                mountpoint = work / f"mnt-{side}"
                mountpoint.mkdir(exist_ok=True)
                mountpoint.chmod(0o777)
                warm(store)
                elapsed, knobs[side] = timed_read(args.python, store, mountpoint, user)
                seconds[side].append(elapsed)
        for side in ("root", "user"):
            median = statistics.median(seconds[side])
            print(f"{side:5s}: read_ahead_kb {knobs[side]:>5s}  cold dd {nbytes / median / 1e9:.2f} GB/s "
                  f"(median of {args.repeat}: {', '.join(f'{s:.2f}' for s in seconds[side])} s)")
        print(f"user / root: {statistics.median(seconds['root']) / statistics.median(seconds['user']):.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
