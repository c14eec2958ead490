"""Band names of multi-band rasters reach GDAL through real mounts.

Writers: xarray (a `band` coordinate of strings, v2 and v3) and rioxarray
reading a GeoTIFF whose bands have descriptions (it writes them as a
`long_name` list). Reader: GDAL's `gdalinfo -json` on the map's tiled
`N.tif` (band descriptions from GDAL_METADATA) and on `N.raw` through its
ENVI header (`band names`).

GDAL 3.6's own Zarr driver shows no band names for either store (it
refuses the 3-D array without an index, and shows one unnamed band with
one), nor for the one-2-D-array-per-band stores GDAL writes itself (it
drops the descriptions when writing), so there is nothing of its own to
compare with: the names are the writers'.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

from clients import gdal_available, gdalinfo_json
from mountutil import mounted

pytestmark = [pytest.mark.mount, pytest.mark.clients,
              pytest.mark.skipif(not gdal_available(), reason="GDAL not installed (scripts/install_clients.sh)")]

NAMES = ["red", "green", "near infrared"]
SHAPE = (3, 30, 40)


def raster() -> xr.DataArray:
    import rioxarray  # noqa: F401  (the .rio accessor; imported here, not at collection: the fast subset skips it)

    data = np.arange(np.prod(SHAPE), dtype=np.uint16).reshape(SHAPE)
    y, x = 4000000 - 5 - 10 * np.arange(SHAPE[1]), 500005 + 10 * np.arange(SHAPE[2])
    return xr.DataArray(data, dims=("band", "y", "x"), coords={"y": y, "x": x}, name="refl").rio.write_crs(
        "EPSG:32633")


def write_xarray(store: Path, zarr_format: int) -> np.ndarray:
    """xarray's own way: a `band` coordinate of strings."""
    data = raster().assign_coords(band=NAMES)
    data.to_dataset().to_zarr(store, mode="w", zarr_format=zarr_format, consolidated=False)
    return data.values


def write_rioxarray(store: Path, tmp: Path) -> np.ndarray:
    """rioxarray's way: a GeoTIFF with band descriptions, opened and written to Zarr (`long_name` list)."""
    import rioxarray

    source = raster().assign_coords(band=[1, 2, 3])
    source.attrs["long_name"] = tuple(NAMES)
    source.rio.to_raster(tmp / "bands.tif")
    opened = rioxarray.open_rasterio(tmp / "bands.tif").rename("refl")
    assert list(opened.attrs["long_name"]) == NAMES  # what rioxarray read from the GeoTIFF's descriptions
    opened.to_dataset().to_zarr(store, mode="w", zarr_format=2, consolidated=False)
    return opened.values


CASES = ["xarray-v2", "xarray-v3", "rioxarray"]


@pytest.mark.parametrize("case", CASES)
def test_band_names_are_gdal_band_descriptions(case: str, tmp_path: Path) -> None:
    store = tmp_path / "bands.zarr"
    data = write_rioxarray(store, tmp_path) if case == "rioxarray" else write_xarray(store, int(case[-1]))
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        np.testing.assert_array_equal(np.load(mount / "refl.npy"), data)
        tiled = gdalinfo_json(str(mount / "refl.tif"))
        envi = gdalinfo_json(str(mount / "refl.raw"))
        semantics = json.loads((mount / "refl.json").read_text())["semantics"]
    assert tiled["driverShortName"] == "GTiff" and tiled["coordinateSystem"]["wkt"]  # the map's tiled GeoTIFF
    assert [band.get("description") for band in tiled["bands"]] == NAMES
    assert [band.get("description") for band in envi["bands"]] == NAMES
    assert semantics["band_names"] == NAMES


def test_names_that_do_not_fit_the_bands_are_said_once(tmp_path: Path) -> None:
    store = tmp_path / "bands.zarr"
    write_xarray(store, 2)
    zarr.open_array(str(store / "refl"), mode="r+").attrs["long_name"] = ["red", "green"]
    said = [r"ignored band names \(long_name has 2 names for 3 bands\)"]
    with mounted(store, tmp_path / "mnt", tmp_path / "log", expected_log=said) as mount:
        tiled = gdalinfo_json(str(mount / "refl.tif"))
        semantics = json.loads((mount / "refl.json").read_text())["semantics"]
    assert [band.get("description") for band in tiled["bands"]] == [None, None, None]
    assert semantics["band_names"] == [] and semantics["geo"] is not None  # the rest of its meaning stays
