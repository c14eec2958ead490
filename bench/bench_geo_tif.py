"""The file a GDAL/QGIS user opens first: `N.tif` of a georeferenced raster against GDAL's own Zarr driver.

The store: the benchmark array of bench_data (16384 x 16384 float32, the
same values) as GDAL's Zarr driver writes a georeferenced raster: Zarr v2,
blosc-lz4, chunks 1024 x 1024, `_CRS` (EPSG:32633), `_ARRAY_DIMENSIONS`
naming 1-D `Y`/`X` coordinate arrays. zarrfs serves it as a map (tiled
`raster.tif`, ImageJ's strip file `raster.strips.tif`).

N random 512 x 512 windows, one fresh `gdal_translate -srcwin` process per
window, through `raster.tif` (or --file) of a fresh mount (cold daemon) and
through `ZARR:"store":/raster`, side by side per window (the order turning
each window), so that whatever else the machine does falls on both sides
alike. Both sides alike, too: the store's files are in the page cache, and a
helper touches and frees 256 MiB right before every timed window
(bench_data.recent_memory). With --trees, the mounts of several source trees
(a change and main) run side by side with GDAL's driver in the same way.
With --ceiling, a further side: the same file's bytes (copied once from a
mount) served from memory by bench/memfs_ceiling.py with direct I/O, as
zarrfs opens tiled files: what a FUSE daemon that had nothing to fetch or
decode would reach here. With --plain 512,256, further sides: plain
uncompressed GeoTIFFs of the raster with those tile sizes (written once by
gdal_translate), read from the page cache with no FUSE at all, and each
served from memory by memfs_ceiling.py as above: what GDAL reaches on
decoded tiles of each size, with and without a FUSE daemon between.
Reported: per-run totals, medians, and per-run ratios (GDAL's Zarr driver
seconds / the mounted file's seconds: above 1 the mount is faster).

    python -P bench/bench_geo_tif.py [--windows 16] [--repeat 5] [--file raster.tif]
                                     [--trees change=/path/to/tree,main=/path/to/main]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import DEFAULT_ROOT, SHAPE, band, recent_memory, warm_page_cache  # noqa: E402
from bench_mount import mounted, zarrfs_mount  # noqa: E402
from bench_tiled import CHUNKS, window_runs, windows  # noqa: E402

ORIGIN = (440720.0, 3751320.0)  # upper-left corner, metres (UTM 33N)
PIXEL = 10.0
# Recent memory for every timed window: more than a window's decodes and copies take.
WINDOW_MEMORY = 256 << 20


def ensure_geo_store(root: Path = DEFAULT_ROOT) -> Path:
    """The georeferenced v2 blosc-lz4 raster, laid out as GDAL's Zarr driver writes one (written once)."""
    import numcodecs
    import numpy as np
    import zarr

    path = root / "geo-raster-v2.zarr"
    if (path / ".complete").exists():
        return path
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    compressor = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
    raster = group.create_array("raster", shape=SHAPE, chunks=CHUNKS, dtype="float32", fill_value=None,
                                compressors=compressor)
    step = 4096
    for row in range(0, SHAPE[0], step):
        raster[row:row + step] = band(row, step)
    raster.attrs.put({"_ARRAY_DIMENSIONS": ["Y", "X"],
                      "_CRS": {"url": "http://www.opengis.net/def/crs/EPSG/0/32633"}})
    centres = {"X": ORIGIN[0] + PIXEL * (np.arange(SHAPE[1]) + 0.5),
               "Y": ORIGIN[1] - PIXEL * (np.arange(SHAPE[0]) + 0.5)}
    for name, values in centres.items():
        coordinate = group.create_array(name, shape=values.shape, dtype="float64", chunks=values.shape)
        coordinate[...] = values
        coordinate.attrs.put({"_ARRAY_DIMENSIONS": [name]})
    (path / ".complete").write_text("ok\n")
    return path


def materialized(store: Path, work: Path, name: str) -> Path:
    """A plain copy of the mounted file `name` (read once through a mount)."""
    copy = work / "ceiling.tif"
    with mounted(zarrfs_mount(store, work / "m-copy", "1G"), work / "m-copy"):
        shutil.copyfile(work / "m-copy" / name, copy)
    return copy


def ceiling_mount(content: Path, mountpoint: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve().parent / "memfs_ceiling.py"), str(mountpoint),
            "--content", str(content), "--direct-io", "--foreground"]


def plain_geotiff(store: Path, work: Path, tile: int) -> Path:
    """The raster as an uncompressed tiled GeoTIFF with `tile`-sized tiles, as GDAL writes one."""
    path = work / f"plain-{tile}.tif"
    subprocess.run(["gdal_translate", "-q", "-co", "TILED=YES", "-co", f"BLOCKXSIZE={tile}", "-co",
                    f"BLOCKYSIZE={tile}", "-co", "BIGTIFF=YES", f'ZARR:"{store}":/raster', str(path)],
                   check=True, capture_output=True, timeout=600)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cache-size", default="1G")
    parser.add_argument("--file", default="raster.tif", help="the mounted file to time")
    parser.add_argument("--trees", default="",
                        help="NAME=DIR,...: time the mount of each source tree (the daemon's PYTHONPATH) "
                             "against the others and GDAL's driver; default: the installed zarrfs")
    parser.add_argument("--ceiling", action="store_true",
                        help="also time the file's bytes served from memory (memfs_ceiling.py --direct-io)")
    parser.add_argument("--plain", default="", help="TILE,...: also time plain GeoTIFFs with these tile sizes, "
                                                        "from the page cache and served from memory")
    args = parser.parse_args()
    store = ensure_geo_store()
    trees = dict(item.split("=", 1) for item in args.trees.split(",") if item) or {"zarrfs": ""}
    tiles = [int(tile) for tile in args.plain.split(",") if tile]
    served = {"memfs_ceiling": None} if args.ceiling else {}  # memfs sides: the file they serve
    sides = [*trees, "gdal_zarr", *served, *(f"plain_{t}" for t in tiles), *(f"memfs_plain_{t}" for t in tiles)]
    results: dict[str, list[float]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-geo-") as tmp:
        work = Path(tmp)
        out = work / "out.raw"
        if args.ceiling:
            served["memfs_ceiling"] = materialized(store, work, args.file)
        plain = {f"plain_{tile}": plain_geotiff(store, work, tile) for tile in tiles}
        served.update((f"memfs_{name}", path) for name, path in plain.items())
        for run in range(args.repeat):
            spots = windows(args.windows, seed=run)
            with ExitStack() as mounts:
                sources = {"gdal_zarr": f'ZARR:"{store}":/raster'}
                for name, tree in trees.items():  # fresh mounts: cold daemons
                    mountpoint = work / f"m-{name}"
                    env = {"PYTHONPATH": tree} if tree else None
                    mounts.enter_context(mounted(zarrfs_mount(store, mountpoint, args.cache_size), mountpoint, env))
                    sources[name] = str(mountpoint / args.file)
                for name, content in served.items():
                    mountpoint = work / f"m-{name}"
                    mounts.enter_context(mounted(ceiling_mount(content, mountpoint), mountpoint))
                    sources[name] = str(mountpoint / "file")
                sources.update((name, str(path)) for name, path in plain.items())
                for path in (store, *plain.values()):
                    warm_page_cache(path)
                totals = dict.fromkeys(sides, 0.0)
                for i, spot in enumerate(spots):
                    # Side by side per window, the order turning each window, each after recent memory.
                    for name in sides[i % len(sides):] + sides[:i % len(sides)]:
                        recent_memory(WINDOW_MEMORY)
                        start = time.perf_counter()
                        window_runs(sources[name], [spot], out)
                        totals[name] += time.perf_counter() - start
            for name in sides:
                results[name].append(totals[name])
            print(json.dumps({name: round(1000 * totals[name] / args.windows, 1) for name in sides}), file=sys.stderr)
    medians = {name: statistics.median(values) for name, values in results.items()}
    report = {
        "store": str(store),
        "file": args.file,
        "windows_per_run": args.windows,
        "runs_s": results,
        "median_ms_per_window": {name: 1000 * m / args.windows for name, m in medians.items()},
        # GDAL's Zarr driver / the mounted file, per run: above 1 the mount is faster.
        "ratio_per_run": {name: [z / t for z, t in zip(results["gdal_zarr"], results[name], strict=True)]
                          for name in sides if name != "gdal_zarr"},
    }
    report["ratio_median_of_runs"] = {name: statistics.median(r) for name, r in report["ratio_per_run"].items()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
