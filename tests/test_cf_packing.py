"""CF packing and units (issue 31 §4): what GDAL's own Zarr driver shows of a band, GDAL shows of the mount.

Writer: xarray + dask `to_zarr` of an int16 `t2m` packed with `scale_factor`
0.01, `add_offset` 273.15, `_FillValue` -32768, `units` K and a `long_name`,
as Zarr v2 (`_FillValue` is the array's fill value) and v3 (`_FillValue` an
attribute, the fill value 0); once plain (time, y, x) and once georeferenced
by rioxarray (y, x). Readers: `gdalinfo` on `N.tif`, `N.tiled.tif` and
`N.raw` (through `N.raw.hdr`) against `gdalinfo` of GDAL's Zarr driver on the
v2 store (GDAL 3.6's driver does not read final Zarr v3, so the v3 mount is
held to the same reference: the same data written as v2), `gdal_translate
-unscale` against xarray's decoded values, `zarrfs tree`, the `.json` file and
numpy on `N.npy` (which keeps the stored integers).
"""

from __future__ import annotations

import json
import logging
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from clients import gdal_read, gdalinfo_json
from mountutil import mounted, run_zarrfs
from zarrfs.conventions.semantics import Quantity, Semantics
from zarrfs.engine.engine import Engine
from zarrfs.formats.tifftags import MAX_METADATA_BANDS, gdal_metadata
from zarrfs.files.tree import VirtualTree

LONG_NAME = "2 metre temperature"
PACKING = {"dtype": "int16", "scale_factor": 0.01, "add_offset": 273.15, "_FillValue": -32768}
SHAPES = {"plain": (3, 40, 60), "geo": (40, 60)}


def write_cf(path: Path, zarr_format: int, case: str) -> None:
    """`t2m` as xarray + dask write it, CF-packed; `geo` adds x/y coordinates and a CRS by rioxarray."""
    import dask.array as da
    import rioxarray  # noqa: F401  (registers the .rio accessor)
    import xarray as xr

    shape = SHAPES[case]
    values = np.random.default_rng(7).normal(285.0, 10.0, shape)
    values.flat[::97] = np.nan  # missing cells: stored as the _FillValue
    dims = ("time", "y", "x")[-len(shape):]
    coords = {}
    if case == "geo":
        coords = {"y": 3751320 - 30 - 60 * np.arange(shape[0]), "x": 440720 + 30 + 60 * np.arange(shape[1])}
    array = xr.DataArray(da.from_array(values, chunks=(1,) * (len(shape) - 2) + (20, 30)), dims=dims,
                         coords=coords, name="t2m", attrs={"units": "K", "long_name": LONG_NAME})
    if case == "geo":
        array = array.rio.write_crs("EPSG:32633")
    array.encoding.update(PACKING)  # beside rioxarray's grid_mapping encoding
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python's v3 consolidation warning
        array.to_dataset().to_zarr(path, mode="w", zarr_format=zarr_format, consolidated=False)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    root = tmp_path_factory.mktemp("cf")
    found = {}
    for case in SHAPES:
        for zarr_format in (2, 3):
            found[case, zarr_format] = root / f"{case}-v{zarr_format}.zarr"
            write_cf(found[case, zarr_format], zarr_format, case)
    return found


def _reference(stores: dict[tuple[str, int], Path], case: str) -> dict[str, Any]:
    """What GDAL's Zarr driver shows of t2m in the v2 store (time index 0 for the plain case)."""
    index = ":0" if case == "plain" else ""
    return gdalinfo_json(f'ZARR:"{stores[case, 2]}":/t2m{index}')


def _band_meaning(band: dict[str, Any]) -> tuple[Any, ...]:
    return band.get("offset"), band.get("scale"), band.get("unit"), band.get("noDataValue")


def _unscaled(source: Path, tmp_path: Path) -> np.ndarray:
    """GDAL's unpacked values of the first band of `source` (stored * scale + offset), as float64."""
    out = tmp_path / "unscaled.raw"
    subprocess.run(["gdal_translate", "-q", "-b", "1", "-unscale", "-ot", "Float64", "-of", "ENVI", str(source),
                    str(out)], check=True, capture_output=True, timeout=120)
    return np.fromfile(out, "<f8")


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("case", SHAPES)
def test_gdal_shows_the_band_as_its_zarr_driver_does(stores: dict, case: str, zarr_format: int,
                                                       tmp_path: Path) -> None:
    import xarray as xr

    reference = _reference(stores, case)
    expected = _band_meaning(reference["bands"][0])
    assert expected == (273.15, 0.01, "K", -32768.0)  # the reference really shows the packing
    assert reference["metadata"][""]["long_name"] == LONG_NAME
    store = stores[case, zarr_format]
    decoded = xr.open_zarr(store, zarr_format=zarr_format, consolidated=False)["t2m"].values
    first = decoded[0] if case == "plain" else decoded
    stored = zarr.open_array(str(store / "t2m"), mode="r")[...]
    bands = SHAPES[case][0] if case == "plain" else 1
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        # A georeferenced raster's N.tif is the tiled file, its strip file N.strips.tif (formats.is_map).
        tiffs = ("t2m.tif", "t2m.tiled.tif") if case == "plain" else ("t2m.tif", "t2m.strips.tif")
        assert sorted(p.name for p in mount.root.glob("t2m*.tif")) == sorted(tiffs)
        for name in (*tiffs, "t2m.raw"):
            served = gdalinfo_json(str(mount / name))
            assert len(served["bands"]) == (bands if name != "t2m.tif" else 1), name
            for band in served["bands"]:
                offset, scale, unit, nodata = _band_meaning(band)
                # ENVI has no key GDAL reads as the unit of the values.
                assert (offset, scale, nodata) == (expected[0], expected[1], expected[3]), name
                assert unit == (None if name == "t2m.raw" else expected[2]), name
                assert band.get("description") == LONG_NAME, name
            if name != "t2m.raw":
                assert served["metadata"][""]["long_name"] == LONG_NAME, name
            if "geoTransform" in reference:
                assert served["geoTransform"] == pytest.approx(reference["geoTransform"], abs=1e-9), name
            else:
                assert "geoTransform" not in served, name
            unscaled = _unscaled(mount / name, tmp_path).reshape(first.shape)
            valid = ~np.isnan(first)
            np.testing.assert_allclose(unscaled[valid], first[valid], rtol=0, atol=1e-9)
        # The element files keep the stored integers, the fill value included.
        np.testing.assert_array_equal(np.load(mount / "t2m.npy"), stored)
        np.testing.assert_array_equal(gdal_read(str(mount / "t2m.tif")), stored[0] if case == "plain" else stored)
        assert (stored == -32768).any()
        semantics = json.loads((mount / "t2m.json").read_text())["semantics"]
        assert semantics["quantity"] == {"scale_factor": 0.01, "add_offset": 273.15, "units": "K",
                                         "long_name": LONG_NAME}
        assert semantics["nodata"] == -32768
    tree = run_zarrfs("tree", store).stdout
    assert f'values stored*0.01 + 273.15 K "{LONG_NAME}"' in tree
    assert "nodata -32768" in tree


def test_geo_case_keeps_rioxarrays_crs(stores: dict, tmp_path: Path) -> None:
    """The packing comes on top of the georeference: GDAL reads the CRS rioxarray wrote (its Zarr driver
    3.6 reads none from CF grid_mapping)."""
    import rioxarray  # noqa: F401
    import xarray as xr

    store = stores["geo", 3]
    crs = xr.open_zarr(store, decode_coords="all", consolidated=False)["t2m"].rio.crs
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for name in ("t2m.tif", "t2m.strips.tif"):
            done = subprocess.run(["gdalsrsinfo", "-e", str(mount / name)], check=True, capture_output=True,
                                  text=True, timeout=120)
            assert f"EPSG:{crs.to_epsg()}" in done.stdout.split(), name


# ------------------------------------------------------------ broken values


def _semantics(open_engine: Callable[..., Engine], store: Path, path: str) -> Semantics:
    engine = open_engine(store)
    return VirtualTree(engine).semantics(engine.hierarchy.node(path))


def test_a_broken_attribute_costs_only_itself(tmp_path: Path, open_engine: Callable[..., Engine],
                                              caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "b.zarr"
    array = zarr.create_array(str(store), shape=(4, 5), dtype="<i2", zarr_format=3)
    array.attrs.put({"scale_factor": "0.01", "add_offset": 1.5, "units": ["K"], "long_name": "level"})
    with caplog.at_level(logging.WARNING):
        semantics = _semantics(open_engine, store, "")
    assert semantics.quantity == Quantity(add_offset=1.5, long_name="level")
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(problems) == 1
    assert "CF scale_factor '0.01' is not a finite number" in problems[0]
    assert "CF units ['K'] is not one line of text" in problems[0]


@pytest.mark.parametrize("value", [float("nan"), 10**400, True, {"a": 1}])
def test_scale_that_is_no_finite_number_is_ignored(value: Any, tmp_path: Path,
                                                   open_engine: Callable[..., Engine]) -> None:
    store = tmp_path / "b.zarr"
    array = zarr.create_array(str(store), shape=(4, 5), dtype="<f4", zarr_format=2)
    (store / ".zattrs").write_text(json.dumps({"scale_factor": value, "units": "m"}, allow_nan=True))
    del array
    assert _semantics(open_engine, store, "").quantity == Quantity(units="m")


def test_gdal_reads_what_is_left_of_broken_packing(tmp_path: Path) -> None:
    store = tmp_path / "b.zarr"
    zarr.create_array(str(store), shape=(4, 5), dtype="<i2", zarr_format=3)[...] = 7
    zarr.open_array(str(store), mode="r+").attrs.put({"scale_factor": "x", "add_offset": 1.5, "units": "m"})
    with mounted(store, tmp_path / "mnt", tmp_path / "log",
                 expected_log=[r"ignored CF scale_factor 'x' is not a finite number"]) as mount:
        for name in ("b.tif", "b.tiled.tif", "b.raw"):
            band = gdalinfo_json(str(mount / name))["bands"][0]
            assert (band.get("offset"), band.get("scale")) == (1.5, 1.0), name


# ------------------------------------------------------------ the tag alone


def test_no_quantity_no_cf_items() -> None:
    assert gdal_metadata(Semantics(), None, 1) == ()
    assert gdal_metadata(None, None, 1) == ()


def test_many_bands_keep_only_the_dataset_item() -> None:
    semantics = Semantics(quantity=Quantity(scale_factor=2.0, units="m", long_name="depth & height"))
    ((_code, _type, _count, few, _once),) = gdal_metadata(semantics, None, 2)
    assert few.count(b'role="scale"') == 2 and b'<Item name="OFFSET" sample="1" role="offset">0.0</Item>' in few
    # escaped twice: GDAL unescapes an item's text twice
    assert b"depth &amp;amp; height" in few
    ((_code, _type, _count, many, _once),) = gdal_metadata(semantics, None, MAX_METADATA_BANDS + 1)
    assert many == b'<GDALMetadata><Item name="long_name">depth &amp;amp; height</Item></GDALMetadata>'
