"""Time the first `ls -l` of a bioformats2raw collection's root: the listing, then the first stat of
`NAME.ome.tif`, which builds its layout (every series' IFDs and SubIFDs) from metadata alone.

The store is made once in a temporary directory: SERIES series of 2 x 3 planes (c, z) of 512 x 512
uint16 with 3 levels, metadata only (no chunk is written: the listing reads none). Each repeat opens a
fresh tree (nothing remembered), lists the root and sizes the file; the medians are printed with the file's
size and its IFD count. Run it on an idle machine: the numbers are wall time.

Usage: .venv/bin/python bench/bench_collection.py [--series 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import zarr

from zarrfs.formats import FORMATS, OME_TIFF_SUFFIX
from zarrfs.options import EngineOptions
from zarrfs.files.tree import VirtualTree

LEVELS = 3
SHAPE = (2, 3, 512, 512)  # c, z, y, x


def make_collection(store: Path, series: int) -> None:
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    root.attrs["ome"] = {"version": "0.5", "bioformats2raw.layout": 3}
    root.require_group("OME").attrs["ome"] = {"version": "0.5", "series": [str(i) for i in range(series)]}
    axes = [{"name": "c", "type": "channel"}, {"name": "z", "type": "space"}, {"name": "y", "type": "space"},
            {"name": "x", "type": "space"}]
    for index in range(series):
        image = root.require_group(str(index))
        for level in range(LEVELS):
            shape = (*SHAPE[:2], SHAPE[2] >> level, SHAPE[3] >> level)
            image.create_array(str(level), shape=shape, chunks=(1, 1, 256, 256), dtype="uint16")
        image.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": [
            {"path": str(level), "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 2**level, 2**level]}]}
            for level in range(LEVELS)]}]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        store = Path(scratch) / "collection.zarr"
        make_collection(store, args.series)
        listing, stat = [], []
        size = 0
        for _ in range(args.repeat):
            start = time.perf_counter()
            tree = VirtualTree.of_source(str(store), None, EngineOptions(), (*FORMATS, OME_TIFF_SUFFIX))
            try:
                tree.listdir(tree.lookup("/"))
                listed = time.perf_counter()
                size = tree.open("/collection.ome.tif").size
                listing.append(listed - start)
                stat.append(time.perf_counter() - listed)
            finally:
                tree.close()
    planes = args.series * SHAPE[0] * SHAPE[1]
    print(f"{args.series} series, {planes} planes x {LEVELS} levels ({planes * LEVELS} IFDs), file {size / 2**30:.2f} "
          f"GiB: first root listing median {statistics.median(listing):.2f} s, then the file's first stat "
          f"{statistics.median(stat):.2f} s (runs: {', '.join(f'{s:.2f}' for s in stat)})")


if __name__ == "__main__":
    main()
