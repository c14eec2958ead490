"""OME-Zarr writers that need zarr-python 3.2+ (ngff-zarr, iohub), run out of process in `.venv-zp34`.

    .venv-zp34/bin/python -I tests/ome_writers.py '{"writer": "ngff-zarr", "store": "/tmp/x.zarr",
                                                   "version": "0.5", "dims": "tczyx", "sharded": true,
                                                   "pyramid": "xy"}'

Writers: "ngff-zarr" (one image; "channels": true adds DAPI/GFP/mCherry, "orientation" RFC-4
orientations), "ngff-zarr-scene" (0.6: two images in a scene), "ngff-zarr-plate" (an HCS plate),
"iohub" (an HCS plate).

Level 0 holds `sample(shape)` (below; `test_ome_layouts.py` computes the
same values); the writer chooses the coarser levels' values. ngff-zarr
writes each level inside a sub-group (`scale0/image`); iohub writes an HCS
plate of wells and fields with upper-case axis names (`T`, `C`, `Z`, `Y`,
`X`). Prints one JSON line: {"ok": true} or {"ok": false, "error": ...}.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import numpy as np

SCALES = {"t": 2.5, "c": 1.0, "z": 0.5, "y": 0.25, "x": 0.25}
UNITS = {"t": "second", "z": "micrometer", "y": "micrometer", "x": "micrometer"}
SHAPES = {"zyx": (8, 32, 40), "tczyx": (2, 3, 8, 32, 40)}
PLATE_FIELDS = (("A", "1", "0"), ("A", "1", "1"), ("B", "3", "0"))
PLATE_SHAPE = (3, 2, 4, 16, 20)  # T, C, Z, Y, X
PLATE_SCALE = [1.5, 1.0, 0.5, 0.25, 0.25]
PLATE_CHANNELS = ["DAPI", "GFP"]
# The channels of a t,c,z,y,x image written with `"channels": true`, and their colours.
CHANNELS = {"DAPI": "0000FF", "GFP": "00FF00", "mCherry": "FF0000"}
# Where the tiles of the scene writer sit in its `world` system (z, y, x in micrometers).
SCENE_OFFSETS = {"tile_0": [0.0, 0.0, 0.0], "tile_1": [0.0, 0.0, 10.0]}


def sample(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return ((np.arange(int(np.prod(shape)), dtype=np.uint32) * 7 + seed * 1000) % 60000).astype(np.uint16) \
        .reshape(shape)


def ngff_multiscales(job: dict[str, Any], seed: int = 0, translation: dict[str, float] | None = None) -> Any:
    """ngff-zarr's image of `sample(SHAPES[dims])`; with "channels", the omero channels of CHANNELS; with
    "orientation" (`{"x": "right-to-left", ...}`), RFC-4 anatomical orientations."""
    import ngff_zarr as nz
    from ngff_zarr.rfc4 import AnatomicalOrientation, AnatomicalOrientationValues

    dims = list(job["dims"])
    image = nz.to_ngff_image(sample(SHAPES[job["dims"]], seed), dims=dims, scale={d: SCALES[d] for d in dims},
                             translation=translation, axes_units={d: UNITS[d] for d in dims if d in UNITS},
                             name="image")
    if job.get("orientation"):
        image.axes_orientations = {d: AnatomicalOrientation(value=AnatomicalOrientationValues(v))
                                   for d, v in job["orientation"].items()}
    # ngff-zarr halves every spatial axis by default; "xy" halves only y and x (z kept, as microscopes' pyramids do).
    factors = [2, 4] if job.get("pyramid", "zyx") == "zyx" else [{"z": 1, "y": f, "x": f} for f in (2, 4)]
    multiscales = nz.to_multiscales(image, scale_factors=factors)
    if job.get("channels"):
        multiscales.metadata.omero = nz.Omero(channels=[
            nz.OmeroChannel(color=color, label=label, window=nz.OmeroWindow(min=0, max=60000, start=0, end=60000))
            for label, color in CHANNELS.items()])
    return multiscales


def ngff_zarr(job: dict[str, Any]) -> None:
    import ngff_zarr as nz

    nz.to_ngff_zarr(job["store"], ngff_multiscales(job), version=job["version"],
                    **({"chunks_per_shard": 2} if job.get("sharded") else {}))


def ngff_zarr_scene(job: dict[str, Any]) -> None:
    """Two ngff-zarr images, `tile_0` and `tile_1`, placed side by side in a scene's `world` system."""
    import ngff_zarr as nz
    from ngff_zarr.v06.zarr_metadata import Axis, CoordinateSystem, CoordinateSystemIdentifier, Translation

    images = {name: ngff_multiscales(job, seed) for seed, name in enumerate(SCENE_OFFSETS)}
    dims = list(job["dims"])
    transforms = [Translation(translation=offset, name=f"{name} to world",
                              input=CoordinateSystemIdentifier(path=name, name="intrinsic"),
                              output=CoordinateSystemIdentifier(name="world"))
                  for name, offset in SCENE_OFFSETS.items()]
    world = CoordinateSystem(name="world", axes=[Axis(name=d, type="space", unit="micrometer") for d in dims])
    nz.to_ome_zarr(job["store"], nz.NgffScene(images=images, coordinateTransformations=transforms,
                                              coordinateSystems=[world]), version=job["version"])


def ngff_zarr_plate(job: dict[str, Any]) -> None:
    """An ngff-zarr HCS plate: PLATE_FIELDS, each field the t,c,z,y,x sample with CHANNELS."""
    import ngff_zarr as nz

    rows = sorted({row for row, _, _ in PLATE_FIELDS})
    columns = sorted({column for _, column, _ in PLATE_FIELDS})
    wells = sorted({(row, column) for row, column, _ in PLATE_FIELDS})
    plate = nz.Plate(columns=[nz.PlateColumn(name=c) for c in columns], rows=[nz.PlateRow(name=r) for r in rows],
                     wells=[nz.PlateWell(path=f"{r}/{c}", rowIndex=rows.index(r), columnIndex=columns.index(c))
                            for r, c in wells], version=job["version"], name="plate", field_count=2)
    nz.to_hcs_zarr(nz.HCSPlate(job["store"], plate), job["store"])
    for seed, (row, column, field) in enumerate(PLATE_FIELDS):
        nz.write_hcs_well_image(job["store"], ngff_multiscales(job, seed), plate, row, column, int(field),
                                version=job["version"])


def iohub(job: dict[str, Any]) -> None:
    from iohub.ngff import open_ome_zarr

    with open_ome_zarr(job["store"], layout="hcs", mode="w-", channel_names=PLATE_CHANNELS,
                       version=job["version"]) as plate:
        for seed, (row, column, field) in enumerate(PLATE_FIELDS):
            position = plate.create_position(row, column, field)
            position.create_image("0", sample(PLATE_SHAPE, seed),
                                  transform=[{"type": "scale", "scale": PLATE_SCALE}])


def main() -> None:
    job = json.loads(sys.argv[1])
    try:
        {"ngff-zarr": ngff_zarr, "ngff-zarr-scene": ngff_zarr_scene, "ngff-zarr-plate": ngff_zarr_plate,
         "iohub": iohub}[job["writer"]](job)
    except Exception as exc:  # noqa: BLE001  (the test reports it)
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}))
        return
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main()
