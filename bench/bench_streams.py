"""Concurrent streams: four processes each read a quarter of one mounted 1 GiB array at once.

The shape of a parallel conversion or of several users on one mount: four
`dd bs=1M` with `skip`/`count` over the quarters of the mounted `.raw`, cold
daemon (fresh mount), against four zarr-python 3 processes that each read the
same quarter (`z[rows]`) at once. Every timed round starts right after a helper
touched and freed 2.5 GiB (bench_data.recent_memory), peers and mounts alike.
Medians of --repeat rounds; decodes per chunk from the mount's
`.zarrfs-stats.json` (1.00: each chunk decoded once).

    python bench/bench_streams.py [--repeat 3] [--stores zstd-3,blosc-lz4] [--cache-size 512M]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import CHUNKS, SHAPE, ensure_store, recent_memory, warm_page_cache  # noqa: E402
from bench_mount import NBYTES, mounted, stats, zarrfs_mount  # noqa: E402

STREAMS = 4
MIB = 1 << 20

ZARR_QUARTER = """
import sys, zarr
z = zarr.open_array(sys.argv[1], mode="r")
rows = z.shape[0] // int(sys.argv[3])
i = int(sys.argv[2])
z[i * rows:(i + 1) * rows]
"""


def parallel_seconds(commands: list[list[str]]) -> float:
    """Wall seconds until every command, all started at once, has finished (each must succeed)."""
    start = time.perf_counter()
    processes = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in commands]
    failed = [(p.args, p.communicate()[1]) for p in processes if p.wait() != 0]
    if failed:
        raise RuntimeError(f"failed: {failed}")
    return time.perf_counter() - start


def quarter_dds(raw: Path) -> list[list[str]]:
    count = NBYTES // MIB // STREAMS
    return [["dd", f"if={raw}", "of=/dev/null", "bs=1M", f"skip={i * count}", f"count={count}"]
            for i in range(STREAMS)]


def quarter_readers(store: Path) -> list[list[str]]:
    return [[sys.executable, "-c", ZARR_QUARTER, str(store), str(i), str(STREAMS)] for i in range(STREAMS)]


def run_store(store: str, work: Path, repeat: int, cache_size: str) -> dict:
    path = ensure_store(store)
    chunks = math.prod(-(-s // c) for s, c in zip(SHAPE, CHUNKS))
    ours: list[float] = []
    theirs: list[float] = []
    decodes: list[float] = []
    for _ in range(repeat):
        warm_page_cache(path)
        recent_memory()
        theirs.append(parallel_seconds(quarter_readers(path)))
        warm_page_cache(path)
        with mounted(zarrfs_mount(path, work, cache_size), work):
            recent_memory()
            ours.append(parallel_seconds(quarter_dds(work / f"{store}.raw")))
            decodes.append(stats(work)["cache"]["loads"] / chunks)
    return {"zarrfs": NBYTES / 1e9 / statistics.median(ours), "zp3": NBYTES / 1e9 / statistics.median(theirs),
            "decodes_per_chunk": statistics.median(decodes), "runs": {"zarrfs": ours, "zp3": theirs}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="zstd-3,blosc-lz4")
    parser.add_argument("--cache-size", default="512M")
    args = parser.parse_args()
    print(f"{STREAMS} concurrent readers of one quarter each, --cache-size {args.cache_size}, "
          f"medians of {args.repeat}")
    print("| store | zarrfs GB/s | zarr-python 3 GB/s | zarrfs/zp3 | decodes per chunk |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="zarrfs-streams-") as tmp:
        for store in args.stores.split(","):
            r = run_store(store, Path(tmp) / "m", args.repeat, args.cache_size)
            print(f"| {store} | {r['zarrfs']:.2f} | {r['zp3']:.2f} | {r['zarrfs'] / r['zp3']:.2f}x | "
                  f"{r['decodes_per_chunk']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
