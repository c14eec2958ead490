"""The benchmark stores: one 1 GiB float32 array (16384 x 16384, 1024 x 1024 chunks)
written by zarr-python 3 four ways. Shared by the engine, mount and remote benchmarks.

    python bench/bench_data.py [--root DIR]     # writes what is missing, prints the paths
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

DEFAULT_ROOT = Path(os.environ.get("ZARRFS_BENCH_DIR", "/tmp/zarrfs-bench"))
SHAPE = (16384, 16384)
CHUNKS = (1024, 1024)
SHARDS = (4096, 4096)
STORES = ("blosc-lz4", "zstd-3", "uncompressed", "sharded-zstd")


def _codec_args(name: str) -> dict:
    import zarr.codecs as zc

    if name == "blosc-lz4":
        return {"compressors": [zc.BloscCodec(cname="lz4", clevel=5, shuffle=zc.BloscShuffle.shuffle)]}
    if name == "zstd-3":
        return {"compressors": [zc.ZstdCodec(level=3)]}
    if name == "uncompressed":
        return {"compressors": None}
    if name == "sharded-zstd":
        return {"compressors": [zc.ZstdCodec(level=3)], "shards": SHARDS}
    raise ValueError(name)


def band(row: int, rows: int) -> np.ndarray:
    """Deterministic data with realistic compressibility (smooth field + quantised noise)."""
    rng = np.random.default_rng(row)
    y = np.arange(row, row + rows, dtype=np.float32)[:, None]
    x = np.arange(SHAPE[1], dtype=np.float32)[None, :]
    field = np.sin(x / 900.0) * np.cos(y / 700.0) * 1000.0
    noise = rng.integers(0, 64, size=(rows, SHAPE[1])).astype(np.float32) / 8.0
    return (np.round(field) + noise).astype(np.float32)


def ensure_store(name: str, root: Path = DEFAULT_ROOT) -> Path:
    import zarr

    path = root / f"{name}.zarr"
    if (path / ".complete").exists():
        return path
    root.mkdir(parents=True, exist_ok=True)
    array = zarr.create_array(str(path), shape=SHAPE, chunks=CHUNKS, dtype="float32", overwrite=True,
                              fill_value=0.0, **_codec_args(name))
    step = SHARDS[0]
    for row in range(0, SHAPE[0], step):
        array[row:row + step] = band(row, step)
    (path / ".complete").write_text("ok\n")
    return path


def stored_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def warm_page_cache(path: Path) -> None:
    """Read every file once (`path` or the files under it) so every peer starts from the same
    (page-cached) store."""
    for f in [path] if path.is_file() else path.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass


# Memory a timed process finds recently used (see `recent_memory`): more than any peer's 1 GiB result
# plus its decode buffers.
RECENT_MEMORY_BYTES = 5 << 29  # 2.5 GiB

_HOLD_MEMORY = """
import sys, numpy
held = numpy.ones(int(sys.argv[1]), dtype=numpy.uint8)  # allocated and touched, page by page
print("held", flush=True)
sys.stdin.read()  # until the benchmark closes our stdin; exiting frees it all
"""


def recent_memory(nbytes: int = RECENT_MEMORY_BYTES) -> None:
    """Touch `nbytes` in a helper process and free them, right before a timed run.

    On this VM a process's first touch of fresh memory costs up to ~3 s per
    GiB (freed memory goes back to the host), and how much varies from run to
    run; on an ordinary machine it is ~0.1-0.3 s. A peer that allocates its
    1 GiB result (zarr-python's `z[:]`) pays it, a FUSE daemon with a bounded,
    reused cache mostly does not. Memory freed just before a timed run is
    what the next allocation gets back cheaply, so calling this before EVERY
    timed run (peers and mounts alike) treats both sides as an ordinary
    machine would.
    """
    import subprocess
    import sys

    helper = subprocess.Popen([sys.executable, "-c", _HOLD_MEMORY, str(nbytes)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        if helper.stdout is None or helper.stdout.readline().strip() != "held":
            raise RuntimeError("the memory helper did not start")
    finally:
        if helper.stdin is not None:
            helper.stdin.close()
        helper.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    args = parser.parse_args()
    for name in STORES:
        path = ensure_store(name, args.root)
        print(f"{name}: {path} ({stored_bytes(path) / 2**20:.0f} MiB stored)")


if __name__ == "__main__":
    main()
