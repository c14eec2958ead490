"""GeoZarr writers (geozarr-toolkit, rioxarray, eopf-geozarr), run out of process in `.venv-geozarr`.

    .venv-geozarr/bin/python -I tests/geozarr_writers.py '{"writer": "toolkit", "store": "/tmp/x.zarr"}'

Each writes a UTM map of `HEIGHT` x `WIDTH` pixels of `PIXEL` metres from
(`WEST`, `NORTH`), level 0 holding `sample(shape)` (test_geozarr.py computes
the same values), and its coarser levels as a zarr-conventions `multiscales`
layout:
- toolkit: arrays `r10m/b02`, `r20m/b02`, `r60m/b02` below the layout group, with the conventions
  registered by uuid through geozarr-toolkit's models (`"registration": "node"` writes node-registered
  grids, whose transforms give the cells' centres);
- rioxarray: one group per level (`0`, `1`, `2`) holding `band_data`, each level's `proj:`/`spatial:`
  written by rioxarray's Zarr convention (registered by name), the layout added by hand as its docs
  show (rioxarray writes no layout);
- eopf: `create_geozarr_dataset` on a Sentinel-2-like tree: native bands at the group itself
  (asset "."), overviews `r2`, `r4` below it;
- eopf-s2: `convert_s2_optimized` (the `convert-s2-optimized` command's defaults) on a Sentinel-2
  L2A-like product written as EOPF stores it (uint16 bands packed by scale_factor/add_offset,
  `_FillValue` 0, in `measurements/reflectance/r10m`, `r20m`, `r60m`) and opened raw as the command
  opens it: a layout at `measurements/reflectance` of `r10m` ... `r720m`, each holding the bands by name;
- dem: a float32 elevation `dem` (`dem_values`) with geozarr-toolkit's proj/spatial attributes, its
  `fill_value` NaN and a NaN corner, and no other nodata attribute; beside it `mask`, a uint8 array
  of fill 0 whose zeros are real values.
Prints one JSON line: {"ok": true} or {"ok": false, "error": ...}.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import numpy as np

HEIGHT, WIDTH = 240, 360
PIXEL = 10.0
WEST, NORTH = 500000.0, 5000000.0
EPSG = 32633


def sample(shape: tuple[int, ...]) -> np.ndarray:
    return ((np.arange(int(np.prod(shape)), dtype=np.uint32) * 7) % 60000).astype(np.uint16).reshape(shape)


def _coarsened(data: np.ndarray, factor: int) -> np.ndarray:
    """Every `factor`-th pixel: the writer's values of coarser levels do not matter to a reader's placement."""
    return np.ascontiguousarray(data[::factor, ::factor])


def toolkit(job: dict[str, Any]) -> None:
    import zarr
    from geozarr_toolkit import (
        create_multiscales_layout,
        create_proj_attrs,
        create_spatial_attrs,
        create_zarr_conventions,
    )
    from geozarr_toolkit.conventions import (
        MultiscalesConventionMetadata,
        ProjConventionMetadata,
        SpatialConventionMetadata,
    )

    registration = job.get("registration", "pixel")
    conventions = create_zarr_conventions(MultiscalesConventionMetadata(), SpatialConventionMetadata(),
                                          ProjConventionMetadata())
    root = zarr.open_group(job["store"], mode="w", zarr_format=3)
    levels = [("r10m", 1), ("r20m", 2), ("r60m", 6)]
    entries = []
    base = sample((HEIGHT, WIDTH))
    for name, factor in levels:
        data = _coarsened(base, factor)
        transform = [PIXEL * factor, 0.0, WEST, 0.0, -PIXEL * factor, NORTH]
        group = root.create_group(name)
        array = group.create_array("b02", shape=data.shape, dtype=data.dtype, chunks=(64, 64),
                                   dimension_names=("y", "x"))
        array[:] = data
        array.attrs.update({"zarr_conventions": conventions, **create_proj_attrs(code=f"EPSG:{EPSG}"),
                            **create_spatial_attrs(dimensions=["y", "x"], transform=transform,
                                                   shape=list(data.shape), registration=registration)})
        entry: dict[str, Any] = {"asset": name}
        if factor > 1:
            entry.update(derived_from="r10m", transform={"scale": [float(factor)] * 2, "translation": [0.0, 0.0]})
        entries.append((entry, transform, list(data.shape)))
    multiscales = create_multiscales_layout([entry for entry, _, _ in entries], resampling_method="nearest")
    for layout_entry, (_, transform, shape) in zip(multiscales["multiscales"]["layout"], entries, strict=True):
        layout_entry.update({"spatial:transform": transform, "spatial:shape": shape})
    root.attrs.update({"zarr_conventions": conventions, **multiscales, **create_proj_attrs(code=f"EPSG:{EPSG}"),
                       **create_spatial_attrs(dimensions=["y", "x"], registration=registration)})


def rioxarray_levels(job: dict[str, Any]) -> None:
    import xarray as xr
    import zarr
    from affine import Affine
    from rioxarray.enum import Convention

    import rioxarray  # noqa: F401  (the .rio accessor)

    base = sample((HEIGHT, WIDTH))
    layout = []
    for level, factor in enumerate((1, 2, 4)):
        data = _coarsened(base, factor)
        transform = Affine(PIXEL * factor, 0.0, WEST, 0.0, -PIXEL * factor, NORTH)
        array = xr.DataArray(data, dims=("y", "x"), name="band_data")
        array = array.rio.write_crs(f"EPSG:{EPSG}", convention=Convention.ZARR)
        array = array.rio.write_transform(transform, convention=Convention.ZARR)
        array.to_dataset().to_zarr(job["store"], group=str(level), mode="a" if level else "w", zarr_format=3,
                                   consolidated=False)
        entry: dict[str, Any] = {"asset": str(level), "spatial:shape": list(data.shape),
                                 "spatial:transform": list(transform)[:6]}
        if level:
            entry.update(derived_from="0", transform={"scale": [float(factor)] * 2})
        layout.append(entry)
    root = zarr.open_group(job["store"], mode="r+")
    root.attrs.update({
        "zarr_conventions": [{"name": "multiscales", "description": "Multiscale layout of zarr datasets"},
                             {"name": "spatial:"}],
        "multiscales": {"layout": layout},
        "spatial:dimensions": ["y", "x"],
    })


def eopf(job: dict[str, Any]) -> None:
    import logging

    import xarray as xr
    from eopf_geozarr import create_geozarr_dataset

    import rioxarray  # noqa: F401

    logging.disable(logging.CRITICAL)
    xs = WEST + PIXEL / 2 + PIXEL * np.arange(WIDTH)
    ys = NORTH - PIXEL / 2 - PIXEL * np.arange(HEIGHT)
    bands = {name: xr.DataArray(sample((HEIGHT, WIDTH)) + i, dims=("y", "x"), coords={"y": ys, "x": xs},
                                attrs={"proj:epsg": EPSG})
             for i, name in enumerate(("b02", "b03"))}
    dataset = xr.Dataset(bands).rio.write_crs(f"EPSG:{EPSG}")
    tree = xr.DataTree.from_dict({"/measurements/reflectance/r10m": dataset})
    create_geozarr_dataset(tree, ["/measurements/reflectance/r10m"], job["store"], spatial_chunk=128,
                           min_dimension=60)


S2_BANDS = {"r10m": ["b02", "b03", "b04", "b08"], "r20m": ["b02", "b03", "b04", "b05", "b11"],
            "r60m": ["b01", "b02", "b04", "b09"]}


def eopf_s2(job: dict[str, Any]) -> None:
    import logging

    import xarray as xr
    from eopf_geozarr.conversion.open_source import open_source_datatree
    from eopf_geozarr.s2_optimization.s2_converter import convert_s2_optimized

    logging.disable(logging.CRITICAL)
    groups = {}
    for name, bands in S2_BANDS.items():
        step = float(name[1:-1])
        factor = int(step // PIXEL)
        xs = WEST + step / 2 + step * np.arange(WIDTH // factor)
        ys = NORTH - step / 2 - step * np.arange(HEIGHT // factor)
        variables = {}
        for i, band in enumerate(bands):
            stored = sample((HEIGHT // factor, WIDTH // factor)) // 4 + 1 + 100 * i  # 0 is the fill value
            variable = xr.DataArray(stored * 0.0001 - 0.1, dims=("y", "x"), coords={"y": ys, "x": xs},
                                    attrs={"proj:epsg": EPSG})
            variable.encoding = {"dtype": "uint16", "scale_factor": 0.0001, "add_offset": -0.1, "_FillValue": 0}
            variables[band] = variable
        groups[f"/measurements/reflectance/{name}"] = xr.Dataset(variables)
    groups["/quality"] = xr.Dataset()
    groups["/conditions"] = xr.Dataset()
    tree = xr.DataTree.from_dict(groups)
    tree.attrs.update({"other_metadata": {"horizontal_CRS_code": f"EPSG:{EPSG}"},
                       "stac_discovery": {"properties": {"product:type": "S2MSI2A"}}})
    source = job["store"] + ".source"
    tree.to_zarr(source, mode="w", zarr_format=3, consolidated=True)
    convert_s2_optimized(open_source_datatree(source, mask_and_scale=False), output_path=job["store"],
                         enable_sharding=False, spatial_chunk=256, compression_level=3, validate_output=False,
                         keep_scale_offset=False)


def dem_values() -> np.ndarray:
    """Elevations in metres, the top-left 8 x 8 corner NaN (no data)."""
    values = (100.0 + np.arange(HEIGHT * WIDTH, dtype=np.float32).reshape(HEIGHT, WIDTH) * 0.5).astype(np.float32)
    values[:8, :8] = np.nan
    return values


def dem(job: dict[str, Any]) -> None:
    import zarr
    from geozarr_toolkit import create_proj_attrs, create_spatial_attrs, create_zarr_conventions
    from geozarr_toolkit.conventions import ProjConventionMetadata, SpatialConventionMetadata

    root = zarr.open_group(job["store"], mode="w", zarr_format=3)
    attrs = {"zarr_conventions": create_zarr_conventions(SpatialConventionMetadata(), ProjConventionMetadata()),
             **create_proj_attrs(code=f"EPSG:{EPSG}"),
             **create_spatial_attrs(dimensions=["y", "x"], transform=[PIXEL, 0.0, WEST, 0.0, -PIXEL, NORTH],
                                    shape=[HEIGHT, WIDTH])}
    elevation = root.create_array("dem", shape=(HEIGHT, WIDTH), dtype="float32", chunks=(120, 120),
                                  fill_value=np.nan, dimension_names=("y", "x"))
    elevation[:] = dem_values()
    elevation.attrs.update(attrs)
    mask = root.create_array("mask", shape=(HEIGHT, WIDTH), dtype="uint8", chunks=(120, 120), fill_value=0,
                             dimension_names=("y", "x"))
    mask[:] = (np.arange(HEIGHT * WIDTH).reshape(HEIGHT, WIDTH) % 3).astype(np.uint8)
    mask.attrs.update(attrs)


def main() -> None:
    job = json.loads(sys.argv[1])
    try:
        writers = {"toolkit": toolkit, "rioxarray": rioxarray_levels, "eopf": eopf, "eopf-s2": eopf_s2, "dem": dem}
        writers[job["writer"]](job)
    except Exception as exc:  # noqa: BLE001  (the test reports it)
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"}))
        return
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main()
