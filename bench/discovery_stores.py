"""The hierarchies of bench_discovery.py, written once into a folder and reused.

Run with a Python that has ome-zarr-py (>= 0.21 writes OME-Zarr 0.5, Zarr v3)
and zarr-python 3: each field image is written once by ome-zarr-py
(`write_image`, its default 5-level pyramid) and copied for the others (the
copies are the same bytes ome-zarr-py would write), the plate and well groups
by `write_plate_metadata` / `write_well_metadata`. Names:

  plate-96      8 x 12 wells x 4 fields x 5 levels (2,409 nodes), as issue 41's plate
  plate-384     16 x 24 wells x 2 fields x 5 levels (4,241 nodes)
  collection    bioformats2raw.layout 3: 1,000 series x 3 levels, `OME/` with its `series` list
  flat          one group of 10,000 small arrays, consolidated (a store that cannot list shows
                unconsolidated arrays that no metadata names to no reader)

    python bench/discovery_stores.py FOLDER [NAME ...]
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import zarr

STORES = ("plate-96", "plate-384", "collection", "flat")


def _field_image(where: Path, levels: int) -> None:
    from ome_zarr.scale import Scaler
    from ome_zarr.writer import write_image

    group = zarr.open_group(str(where), mode="w")
    data = np.random.default_rng(0).integers(0, 4000, size=(2, 256, 256), dtype=np.uint16)
    write_image(image=data, group=group, axes="cyx", scaler=Scaler(max_layer=levels - 1),
                storage_options={"chunks": (1, 64, 64)})


def plate(folder: Path, rows: int, columns: int, fields: int) -> None:
    from ome_zarr.writer import write_plate_metadata, write_well_metadata

    template = folder.with_name(folder.name + ".field")
    _field_image(template, 5)
    root = zarr.open_group(str(folder), mode="w")
    row_names = [chr(ord("A") + r) for r in range(rows)]
    column_names = [str(c + 1) for c in range(columns)]
    write_plate_metadata(root, row_names, column_names, [f"{r}/{c}" for r in row_names for c in column_names],
                         name=folder.stem)
    for row in row_names:
        for column in column_names:
            well = root.require_group(f"{row}/{column}")
            write_well_metadata(well, [str(f) for f in range(fields)])
            for f in range(fields):
                shutil.copytree(template, folder / row / column / str(f))
    shutil.rmtree(template)


def collection(folder: Path, series: int) -> None:
    template = folder.with_name(folder.name + ".series")
    _field_image(template, 3)
    root = zarr.open_group(str(folder), mode="w")
    root.attrs["ome"] = {"version": "0.5", "bioformats2raw.layout": 3}
    names = [str(s) for s in range(series)]
    ome = root.require_group("OME")
    ome.attrs["ome"] = {"version": "0.5", "series": names}
    for name in names:
        shutil.copytree(template, folder / name)
    shutil.rmtree(template)


def flat(folder: Path, arrays: int) -> None:
    root = zarr.open_group(str(folder), mode="w")
    for number in range(arrays):
        array = root.create_array(f"a{number:05d}", shape=(64, 64), chunks=(64, 64), dtype="uint8")
        array[...] = number % 256
    zarr.consolidate_metadata(str(folder))


def main() -> None:
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or STORES:
        target = folder / f"{name}.zarr"
        if (target / "zarr.json").exists():
            continue
        shutil.rmtree(target, ignore_errors=True)
        {"plate-96": lambda: plate(target, 8, 12, 4), "plate-384": lambda: plate(target, 16, 24, 2),
         "collection": lambda: collection(target, 1000), "flat": lambda: flat(target, 10_000)}[name]()
        print(json.dumps({"written": str(target)}), flush=True)


if __name__ == "__main__":
    main()
