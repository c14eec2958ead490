"""Opening a plate's OME-TIFF with Bio-Formats: through a mount (over HTTP without listings, and on
local disk) against a copy of the same file on local disk.

For each store of discovery_stores.py named (default the 96-well plate), medians of --repeat
runs, sides taking turns: Bio-Formats 7.3.1's `showinf -nopix` (every series and resolution,
no pixels) of the plate's `.ome.tif`
  cold  on a fresh mount, the file sized first (`stat`: its IFDs are built then, timed apart)
  warm  the same mount's second `showinf`
  copy  the file copied to local disk once, `showinf` of the copy (the page cache warm)
Every `showinf`, of the mount or the copy, starts right after a helper touched and freed 2.5 GiB
(bench_data.recent_memory), so neither side's JVM pays this VM's first touch of fresh memory.
For the mount it also reports the chunks its daemon loaded, the store's requests and the reads C answered
(`.zarrfs-stats.json`). The server is bench/metadata_server.py (--latency-ms per request,
directory URLs 404). Needs java and `.clients/bioformats_package.jar` (README, "Clients").

    python bench/bench_ome_tiff_open.py [--repeat 3] [--stores plate-96] [--latency-ms 20] [--writer PYTHON]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_data import recent_memory
from bench_discovery import HERE, ZARRFS, serving, server_stats

JAR = HERE.parent / ".clients" / "bioformats_package.jar"
SHOWINF = ["java", "-Dbioformats_can_do_upgrade_check=false", "-Xmx1g", "-cp", str(JAR),
           "loci.formats.tools.ImageInfo", "-nopix", "-noflat"]


def showinf_seconds(path: Path) -> tuple[float, int]:
    """(seconds, series) of one `showinf -nopix` of `path`, on recently used memory (bench_data.py),
    as every timed run of either side is."""
    recent_memory()
    start = time.perf_counter()
    done = subprocess.run([*SHOWINF, str(path)], capture_output=True, text=True, timeout=1200)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"showinf failed: {(done.stdout + done.stderr)[-2000:]}")
    return seconds, done.stdout.count("Series #")


def mounted_run(source: str, scratch: Path, copy: Path | None) -> dict[str, float | int]:
    """Mount, size the `.ome.tif`, `showinf` it cold and warm (and copy it to `copy` once); unmount always."""
    mountpoint = scratch / "mnt"
    mountpoint.mkdir(exist_ok=True)
    mounted = subprocess.run([*ZARRFS, "mount", source, str(mountpoint), "--log-file", str(scratch / "log")],
                             capture_output=True, text=True, timeout=600)
    if mounted.returncode != 0:
        raise RuntimeError(f"zarrfs mount failed: {mounted.stderr.strip()}")
    try:
        path = next(mountpoint.glob("*.ome.tif"))
        start = time.perf_counter()
        path.stat()
        stat_s = time.perf_counter() - start
        cold_s, series = showinf_seconds(path)
        stats = json.loads((mountpoint / ".zarrfs-stats.json").read_text())
        warm_s, _ = showinf_seconds(path)
        if copy is not None and not copy.exists():
            shutil.copyfile(path, copy)
        return {"stat_s": stat_s, "cold_s": cold_s, "warm_s": warm_s, "series": series,
                "chunk_loads": stats["cache"]["loads"], "reads": stats["reads"]["count"],
                "reads_in_c": stats["reads"]["answered_in_c"]}
    finally:
        subprocess.run([*ZARRFS, "unmount", str(mountpoint)], capture_output=True, check=False, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="plate-96")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--data", type=Path, default=Path("/tmp/zarrfs-bench-discovery"))
    parser.add_argument("--writer", default=sys.executable)
    args = parser.parse_args()
    names = args.stores.split(",")
    subprocess.run([args.writer, str(HERE / "discovery_stores.py"), str(args.data), *names], check=True)
    report = {}
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-ome-open-") as scratch_name:
        scratch = Path(scratch_name)
        for name in names:
            store = args.data / f"{name}.zarr"
            copy = scratch / f"{name}.ome.tif"
            runs: dict[str, list[dict]] = {"http": [], "local": [], "copy": []}
            with serving(args.data, args.latency_ms) as base:
                for _ in range(args.repeat):
                    before = server_stats(base)["requests"]
                    run = mounted_run(f"{base}/{store.name}", scratch, None)
                    runs["http"].append({**run, "store_requests": server_stats(base)["requests"] - before})
                    runs["local"].append(mounted_run(str(store), scratch, copy))
                    seconds, series = showinf_seconds(copy)
                    runs["copy"].append({"warm_s": seconds, "series": series})
            report[name] = {side: {key: statistics.median(run[key] for run in side_runs) for key in side_runs[0]}
                            for side, side_runs in runs.items()}
            copy_s = report[name]["copy"]["warm_s"]
            for side in ("http", "local"):
                report[name][side]["warm_over_copy"] = report[name][side]["warm_s"] / copy_s
                report[name][side]["cold_over_copy"] = report[name][side]["cold_s"] / copy_s
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
