"""Tiled-TIFF benchmark: GDAL reading `N.tiled.tif` through a mount against GDAL's own Zarr driver.

The store: the benchmark array of bench_data (16384 x 16384 float32, the
same values), written by zarr-python as Zarr v2 with blosc-lz4 (GDAL 3.6's
Zarr driver does not read final Zarr v3) as an OME-Zarr 0.4 image of three
levels (16384², 8192², 4096², each a 2x stride subsample of the one above,
chunks 1024 x 1024).

  (a) windows: N random 512 x 512 windows of level 0, one fresh
      `gdal_translate -srcwin` process per window, through `0.tiled.tif` on a
      fresh mount (cold daemon) against `ZARR:"store":/0`;
  (b) overview: `gdal_translate -outsize 1024 1024` of `0.tiled.tif` (GDAL
      picks the 4096² overview, served from level 2's chunks) against the same
      through the Zarr driver on level 0 (GDAL has no overviews there and
      reads the full level).

Both sides alike: the store's files are read into the page cache and a
helper touches and frees memory (bench_data.recent_memory) before every
timed run; runs alternate and the median is reported.

    python bench/bench_tiled.py [--windows 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import DEFAULT_ROOT, SHAPE, band, recent_memory, warm_page_cache  # noqa: E402
from bench_mount import mounted, zarrfs_mount  # noqa: E402

LEVELS = 3
CHUNKS = (1024, 1024)
WINDOW = 512


def ensure_pyramid(root: Path = DEFAULT_ROOT) -> Path:
    """The v2 blosc-lz4 OME-Zarr pyramid (written once, reused)."""
    import numcodecs
    import zarr

    path = root / "tiled-pyramid-v2.zarr"
    if (path / ".complete").exists():
        return path
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    compressor = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    arrays = [group.create_array(str(level), shape=(SHAPE[0] >> level, SHAPE[1] >> level), chunks=CHUNKS,
                                 dtype="float32", fill_value=0.0, compressors=compressor)
              for level in range(LEVELS)]
    step = 4096
    for row in range(0, SHAPE[0], step):
        data = band(row, step)
        for level, array in enumerate(arrays):
            stride = 1 << level
            array[row // stride:(row + step) // stride] = data[::stride, ::stride]
    axes = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    datasets = [{"path": str(level), "coordinateTransformations": [{"type": "scale", "scale": [2.0**level] * 2}]}
                for level in range(LEVELS)]
    group.attrs["multiscales"] = [{"version": "0.4", "axes": axes, "datasets": datasets}]
    (path / ".complete").write_text("ok\n")
    return path


def windows(count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(0, SHAPE[1] - WINDOW), rng.randrange(0, SHAPE[0] - WINDOW)) for _ in range(count)]


def translate(source: str, out: Path, *args: str) -> None:
    subprocess.run(["gdal_translate", "-q", "-of", "ENVI", *args, source, str(out)], check=True,
                   capture_output=True, timeout=600)


def timed(store: Path, run) -> float:
    warm_page_cache(store)
    recent_memory()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def window_runs(source: str, spots: list[tuple[int, int]], out: Path) -> None:
    for x, y in spots:
        translate(source, out, "-srcwin", str(x), str(y), str(WINDOW), str(WINDOW))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache-size", default="1G")
    args = parser.parse_args()
    store = ensure_pyramid()
    zarr_source = f'ZARR:"{store}":/0'
    results: dict[str, list[float]] = {"tiled_windows": [], "zarr_windows": [], "tiled_overview": [],
                                       "zarr_full_level": [], "tiled_full_level": []}
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-tiled-") as tmp:
        work = Path(tmp)
        out = work / "out.raw"
        for run in range(args.repeat):
            spots = windows(args.windows, seed=run)
            with mounted(zarrfs_mount(store, work / "m", args.cache_size), work / "m"):
                tiled = str(work / "m" / "0.tiled.tif")
                results["tiled_windows"].append(timed(store, lambda: window_runs(tiled, spots, out)))
            results["zarr_windows"].append(timed(store, lambda: window_runs(zarr_source, spots, out)))
            with mounted(zarrfs_mount(store, work / "m", args.cache_size), work / "m"):
                tiled = str(work / "m" / "0.tiled.tif")
                results["tiled_overview"].append(
                    timed(store, lambda: translate(tiled, out, "-outsize", "1024", "1024")))
            with mounted(zarrfs_mount(store, work / "m", args.cache_size), work / "m"):
                tiled = str(work / "m" / "0.tiled.tif")
                results["tiled_full_level"].append(
                    timed(store, lambda: translate(tiled, out, "-oo", "OVERVIEW_LEVEL=NONE",
                                                   "-outsize", "1024", "1024")))
            results["zarr_full_level"].append(
                timed(store, lambda: translate(zarr_source, out, "-outsize", "1024", "1024")))
    medians = {name: statistics.median(values) for name, values in results.items()}
    # Each run's pair (mount, then GDAL's driver, same windows) ran back to back: on a shared
    # machine the median of the per-run ratios is steadier than the ratio of medians.
    window_ratios = [z / t for z, t in zip(results["zarr_windows"], results["tiled_windows"], strict=True)]
    report = {
        "store": str(store),
        "windows_per_run": args.windows,
        "runs": results,
        "median_s": medians,
        "best_s": {name: min(values) for name, values in results.items()},
        "windows_speedup_vs_gdal_zarr": medians["zarr_windows"] / medians["tiled_windows"],
        "windows_speedup_per_run": window_ratios,
        "windows_speedup_median_of_runs": statistics.median(window_ratios),
        "overview_speedup_vs_gdal_zarr_full_level": medians["zarr_full_level"] / medians["tiled_overview"],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
