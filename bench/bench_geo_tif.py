"""The file a GDAL/QGIS user opens first: `N.tif` of a georeferenced raster against GDAL's own Zarr driver.

The store: the benchmark array of bench_data (16384 x 16384 float32, the
same values) as GDAL's Zarr driver writes a georeferenced raster: Zarr v2,
blosc-lz4, chunks 1024 x 1024, `_CRS` (EPSG:32633), `_ARRAY_DIMENSIONS`
naming 1-D `Y`/`X` coordinate arrays. zarrfs serves it as a map (tiled
`raster.tif`, ImageJ's strip file `raster.strips.tif`).

N random 512 x 512 windows, one fresh `gdal_translate -srcwin` process per
window, through each listed file of a fresh mount (cold daemon) against
`ZARR:"store":/raster`. Both sides alike (bench_tiled.timed): the store's
files are in the page cache and a helper touches and frees memory right
before every timed run; runs alternate, medians and per-run ratios are
reported (ratio = GDAL's Zarr driver seconds / the mounted file's seconds:
above 1 the mount is faster).

    python bench/bench_geo_tif.py [--windows 16] [--repeat 5] [--files raster.tif,raster.strips.tif]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import DEFAULT_ROOT, SHAPE, band  # noqa: E402
from bench_mount import mounted, zarrfs_mount  # noqa: E402
from bench_tiled import CHUNKS, timed, window_runs, windows  # noqa: E402

ORIGIN = (440720.0, 3751320.0)  # upper-left corner, metres (UTM 33N)
PIXEL = 10.0


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cache-size", default="1G")
    parser.add_argument("--files", default="raster.tif,raster.strips.tif",
                        help="mounted files to time, comma-separated")
    args = parser.parse_args()
    store = ensure_geo_store()
    zarr_source = f'ZARR:"{store}":/raster'
    files = args.files.split(",")
    results: dict[str, list[float]] = {name: [] for name in (*files, "gdal_zarr")}
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-geo-") as tmp:
        work = Path(tmp)
        out = work / "out.raw"
        for run in range(args.repeat):
            spots = windows(args.windows, seed=run)
            for name in files:
                with mounted(zarrfs_mount(store, work / "m", args.cache_size), work / "m"):
                    served = str(work / "m" / name)
                    results[name].append(timed(store, lambda: window_runs(served, spots, out)))
            results["gdal_zarr"].append(timed(store, lambda: window_runs(zarr_source, spots, out)))
    medians = {name: statistics.median(values) for name, values in results.items()}
    report = {
        "store": str(store),
        "windows_per_run": args.windows,
        "runs_s": results,
        "median_s": medians,
        "median_ms_per_window": {name: 1000 * m / args.windows for name, m in medians.items()},
        # GDAL's Zarr driver / the mounted file, per run (pairs ran back to back) and of the medians.
        "ratio_per_run": {name: [z / t for z, t in zip(results["gdal_zarr"], results[name], strict=True)]
                          for name in files},
        "ratio_of_medians": {name: medians["gdal_zarr"] / medians[name] for name in files},
    }
    report["ratio_median_of_runs"] = {name: statistics.median(r) for name, r in report["ratio_per_run"].items()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
