"""OME-Zarr writers that need zarr-python 3.2+ (ngff-zarr, iohub), run out of process in `.venv-zp34`.

    .venv-zp34/bin/python -I tests/ome_writers.py '{"writer": "ngff-zarr", "store": "/tmp/x.zarr",
                                                   "version": "0.5", "dims": "tczyx", "sharded": true,
                                                   "pyramid": "xy"}'

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


def sample(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return ((np.arange(int(np.prod(shape)), dtype=np.uint32) * 7 + seed * 1000) % 60000).astype(np.uint16) \
        .reshape(shape)


def ngff_zarr(job: dict[str, Any]) -> None:
    import ngff_zarr as nz

    dims = list(job["dims"])
    image = nz.to_ngff_image(sample(SHAPES[job["dims"]]), dims=dims, scale={d: SCALES[d] for d in dims},
                             axes_units={d: UNITS[d] for d in dims if d in UNITS}, name="image")
    # ngff-zarr halves every spatial axis by default; "xy" halves only y and x (z kept, as microscopes' pyramids do).
    factors = [2, 4] if job.get("pyramid", "zyx") == "zyx" else [{"z": 1, "y": f, "x": f} for f in (2, 4)]
    multiscales = nz.to_multiscales(image, scale_factors=factors)
    nz.to_ngff_zarr(job["store"], multiscales, version=job["version"],
                    **({"chunks_per_shard": 2} if job.get("sharded") else {}))


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
        {"ngff-zarr": ngff_zarr, "iohub": iohub}[job["writer"]](job)
    except Exception as exc:  # noqa: BLE001  (the test reports it)
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}))
        return
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main()
