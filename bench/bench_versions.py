"""Two installs of zarrfs against each other: a change measured against the commit before it.

For each anchor store (bench_data.STORES: 1 GiB arrays, blosc-lz4, zstd-3,
uncompressed, sharded zstd), in alternating turns A B A B ...: a cold
`dd bs=1M` of the mounted `.raw` (fresh daemon, recently used memory given
before each run, bench_data.recent_memory) and the daemon's peak RSS (VmHWM)
over that read with --cache-size 256M. Reports medians and the median of
the per-pair ratios (A seconds / B seconds: below 1, A is faster).

    python bench/bench_versions.py --a /path/venv-a/bin/python --b /path/venv-b/bin/python [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import STORES, ensure_store, recent_memory, warm_page_cache  # noqa: E402
from bench_mount import dd_seconds, mounted, peak_rss  # noqa: E402


def cold_read(python: str, store: Path, name: str, work: Path, cache_size: str) -> tuple[float, int]:
    """Seconds of a cold `dd` of the mounted `.raw`, and the daemon's peak RSS in bytes."""
    mountpoint = work / "m"
    warm_page_cache(store)
    command = [python, "-P", "-m", "zarrfs", "mount", "--foreground", "--cache-size", cache_size, str(store), str(mountpoint)]
    with mounted(command, mountpoint) as pid:
        recent_memory()
        seconds = dd_seconds(mountpoint / f"{name}.raw")
        return seconds, peak_rss(pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", required=True, help="python of the install measured (A)")
    parser.add_argument("--b", required=True, help="python of the install it is compared with (B)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--cache-size", default="256M")
    args = parser.parse_args()
    report: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-versions-") as tmp:
        work = Path(tmp)
        for name in args.stores.split(","):
            store = ensure_store(name)
            runs: dict[str, list[tuple[float, int]]] = {"a": [], "b": []}
            for _ in range(args.repeat):
                for side in ("a", "b"):
                    runs[side].append(cold_read(getattr(args, side), store, name, work, args.cache_size))
            ratios = [a[0] / b[0] for a, b in zip(runs["a"], runs["b"], strict=True)]
            report[name] = {
                "seconds": {side: statistics.median(r[0] for r in runs[side]) for side in runs},
                "peak_rss_mib": {side: statistics.median(r[1] for r in runs[side]) / 2**20 for side in runs},
                "ratio_median_of_pairs": statistics.median(ratios),
                "ratios": ratios,
            }
            print(json.dumps({name: report[name]}), flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
