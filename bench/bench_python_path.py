#!/usr/bin/env python3
"""What the compiled extensions buy: reads through a mount with them and without (ZARRFS_NO_EXTENSIONS=1).

    .venv/bin/python bench/bench_python_path.py DIR [--rounds 3]

Writes two 64 MiB arrays under DIR (uint16, zstd-1 chunks, and the same
uncompressed: chunk files read raw), mounts the hierarchy twice, one daemon
with the extensions and one without, and times on each, alternating the two
sides round by round with the cache warm (every chunk decoded once before):

- `seq`: the array's `.raw` read front to back in 1 MiB O_DIRECT reads (every
  read reaches the daemon), MB/s;
- `rand`: 4,000 O_DIRECT preads of 4 KiB at random offsets, reads per second.

Prints each round and the medians with the ratio (with / without). The
figures depend on the machine; on a shared one, say so.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

SHAPE = (32, 1024, 1024)
CHUNKS = (4, 256, 256)
MIB = 1 << 20
RANDOM_READS = 4000


def write(root: Path) -> None:
    data = (np.arange(np.prod(SHAPE), dtype=np.uint32) % 65521).astype(np.uint16).reshape(SHAPE)
    group = zarr.open_group(str(root), mode="w", zarr_format=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group.create_array("zstd", data=data, chunks=CHUNKS, compressors=[ZstdCodec(level=1)])
        group.create_array("plain", data=data, chunks=CHUNKS, compressors=None)


def zarrfs(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "zarrfs", *args], check=True, env=env)


def aligned(size: int) -> mmap.mmap:
    return mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants


def sequential(path: Path) -> float:
    buffer = aligned(MIB)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        start, total = time.perf_counter(), 0
        while True:
            got = os.preadv(fd, [buffer], total)
            total += got
            if got < MIB:
                break
        return total / (time.perf_counter() - start) / 1e6
    finally:
        os.close(fd)


def random_reads(path: Path, seed: int) -> float:
    buffer = aligned(4096)
    rng = random.Random(seed)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        pages = os.fstat(fd).st_size // 4096
        offsets = [rng.randrange(pages) * 4096 for _ in range(RANDOM_READS)]
        start = time.perf_counter()
        for offset in offsets:
            os.preadv(fd, [buffer], offset)
        return RANDOM_READS / (time.perf_counter() - start)
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    store = args.dir / "bench.zarr"
    if not store.exists():
        write(store)
    sides = {"with": "0", "without": "1"}
    mounts = {side: args.dir / f"mnt-{side}" for side in sides}
    results: dict[tuple[str, str, str], list[float]] = {}
    try:
        for side, value in sides.items():
            mounts[side].mkdir(exist_ok=True)
            zarrfs("mount", str(store), str(mounts[side]), "--cache-size", "512MiB",
                   env={**os.environ, "ZARRFS_NO_EXTENSIONS": value})
            for name in ("zstd", "plain"):
                sequential(mounts[side] / f"{name}.raw")  # every chunk decoded, or its file read, once
        for round_number in range(args.rounds):
            for side in (sides if round_number % 2 == 0 else reversed(list(sides))):
                for name in ("zstd", "plain"):
                    path = mounts[side] / f"{name}.raw"
                    seq, rand = sequential(path), random_reads(path, round_number)
                    results.setdefault((name, "seq MB/s", side), []).append(seq)
                    results.setdefault((name, "rand reads/s", side), []).append(rand)
                    print(f"round {round_number} {side:7} {name:5}  seq {seq:7.0f} MB/s  rand {rand:7.0f} reads/s",
                          flush=True)
    finally:
        for mount in mounts.values():
            subprocess.run([sys.executable, "-m", "zarrfs", "unmount", str(mount)], check=False,
                           capture_output=True)
    print("\nmedians (with / without the extensions)")
    for name in ("zstd", "plain"):
        for measure in ("seq MB/s", "rand reads/s"):
            with_c = statistics.median(results[(name, measure, "with")])
            without = statistics.median(results[(name, measure, "without")])
            print(f"{name:5} {measure:13} with {with_c:8.0f}  without {without:8.0f}  ratio {with_c / without:5.2f}x")


if __name__ == "__main__":
    main()
