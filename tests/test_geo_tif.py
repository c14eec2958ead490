"""The file a GDAL/QGIS user opens first (issue 31 §1): `N.tif` of a georeferenced raster is the tiled GeoTIFF.

A map (georeferenced, no OME channels, no axis with a physical step:
`formats.is_map`) gets `N.tif` = the tiled GeoTIFF (tiles = chunks) and
`N.strips.tif` = ImageJ's strip file; no `N.tiled.tif` (it would be the same
file). Images keep `N.tif` (strips, ImageJ) and `N.tiled.tif`.

Writer: zarr-python laying a raster out as GDAL's Zarr driver does (`_CRS`,
`_ARRAY_DIMENSIONS`, 1-D `X`/`Y` cell centres). Readers: GDAL (`gdalinfo`
compared with GDAL's own Zarr driver on the store, `gdal_translate -srcwin`
counted in chunk loads through the mount's stats file), stock ImageJ on the
strip file, tifffile on the layouts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from clients import gdal_read, gdalinfo_json, imagej_describe
from mountutil import mounted

SHAPE = (2048, 2048)
CHUNKS = (512, 512)
ORIGIN = (440720.0, 3751320.0)
PIXEL = 30.0


def write_map(path: Path) -> np.ndarray:
    data = np.arange(np.prod(SHAPE), dtype="float32").reshape(SHAPE) * 0.25
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    raster = group.create_array("raster", shape=SHAPE, chunks=CHUNKS, dtype="float32", fill_value=None)
    raster[...] = data
    raster.attrs.put({"_ARRAY_DIMENSIONS": ["Y", "X"], "_CRS": {"url": "http://www.opengis.net/def/crs/EPSG/0/32633"}})
    centres = {"X": ORIGIN[0] + PIXEL * (np.arange(SHAPE[1]) + 0.5),
               "Y": ORIGIN[1] - PIXEL * (np.arange(SHAPE[0]) + 0.5)}
    for name, values in centres.items():
        coordinate = group.create_array(name, shape=values.shape, dtype="float64", fill_value=None)
        coordinate[...] = values
        coordinate.attrs.put({"_ARRAY_DIMENSIONS": [name]})
    return data


def _loads(mount: Path) -> int:
    return json.loads((mount / ".zarrfs-stats.json").read_text())["cache"]["loads"]


def _window_loads(mount: Path, name: str, x: int, y: int, tmp_path: Path) -> int:
    """Chunks the daemon loaded for the 256 x 256 window at (x, y) GDAL reads from `name`."""
    before = _loads(mount)
    subprocess.run(["gdal_translate", "-q", "-of", "ENVI", "-srcwin", str(x), str(y), "256", "256", str(mount / name),
                    str(tmp_path / f"{name}.raw")], check=True, capture_output=True, timeout=120)
    return _loads(mount) - before


def test_a_maps_tif_is_the_tiled_geotiff(tmp_path: Path) -> None:
    store = tmp_path / "map.zarr"
    data = write_map(store)
    reference = gdalinfo_json(f'ZARR:"{store}":/raster')
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        assert sorted(p.name for p in mount.root.glob("raster*.tif")) == ["raster.strips.tif", "raster.tif"]
        served = gdalinfo_json(str(mount / "raster.tif"))
        assert served["bands"][0]["block"] == [CHUNKS[1], CHUNKS[0]]  # tiles are the chunks
        assert served["geoTransform"] == pytest.approx(reference["geoTransform"], abs=1e-9)
        assert served["geoTransform"] == pytest.approx([*ORIGIN[:1], PIXEL, 0, ORIGIN[1], 0, -PIXEL], abs=1e-9)
        assert 'ID["EPSG",32633]' in served["coordinateSystem"]["wkt"]
        # Before anything else is read. Through the tiles a window covering two chunks of chunk row 1
        # loads those two; through the strips one covering two chunks of chunk row 2 loads at least
        # that whole chunk row (GDAL reads image rows).
        assert _window_loads(mount, "raster.tif", 400, 700, tmp_path) == 2
        assert _window_loads(mount, "raster.strips.tif", 400, 1100, tmp_path) >= SHAPE[1] // CHUNKS[1]
        np.testing.assert_array_equal(gdal_read(str(mount / "raster.tif")), data)
        np.testing.assert_array_equal(gdal_read(str(mount / "raster.strips.tif")), data)
        with tifffile.TiffFile(mount / "raster.tif") as tif:
            assert tif.pages[0].is_tiled and not tif.is_imagej
        with tifffile.TiffFile(mount / "raster.strips.tif") as tif:
            assert not tif.pages[0].is_tiled
            np.testing.assert_array_equal(tif.asarray(), data)


def test_the_strip_file_opens_in_stock_imagej(tmp_path: Path) -> None:
    store = tmp_path / "map.zarr"
    data = write_map(store)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        seen = imagej_describe(str(mount / "raster.strips.tif"), [(7, 5, 1), (SHAPE[1] - 1, SHAPE[0] - 1, 1)])
    assert (seen["width"], seen["height"], seen["bitDepth"]) == (SHAPE[1], SHAPE[0], 32)
    assert seen["values"] == [float(data[5, 7]), float(data[-1, -1])]


def test_images_keep_the_imagej_tif_and_the_tiled_tif(tmp_path: Path) -> None:
    """Without a georeference (coordinates alone are not a map) nothing changes."""
    store = tmp_path / "map.zarr"
    write_map(store)
    attrs = zarr.open_array(str(store / "raster"), mode="r+").attrs
    attrs.put({"_ARRAY_DIMENSIONS": ["Y", "X"]})
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        assert sorted(p.name for p in mount.root.glob("raster*.tif")) == ["raster.tif", "raster.tiled.tif"]
        with tifffile.TiffFile(mount / "raster.tif") as tif:
            assert not tif.pages[0].is_tiled
        with tifffile.TiffFile(mount / "raster.tiled.tif") as tif:
            assert tif.pages[0].is_tiled


def _nodata_lines(path: str) -> list[str]:
    report = subprocess.run(["gdalinfo", path], capture_output=True, text=True, check=True, timeout=60).stdout
    return [line.strip() for line in report.splitlines() if "NoData Value=" in line]


def test_a_nan_fill_is_nodata_as_gdals_zarr_driver_says_and_a_fill_of_zero_is_not(tmp_path: Path) -> None:
    """zarr-python v2 maps (GeoZarr `proj:code`, `spatial:transform`; no `_FillValue`, `_CRS` or
    `_ARRAY_DIMENSIONS`): GDAL's Zarr driver reports every fill value as nodata, NaN of the float32 map and 0
    of the uint8 classes. The served GeoTIFFs agree on NaN, and state none for the classes, whose zeros are
    a class (stated, GDAL and QGIS would hide them)."""
    store = tmp_path / "maps.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    attrs = {"proj:code": "EPSG:32633", "spatial:transform": [PIXEL, 0.0, ORIGIN[0], 0.0, -PIXEL, ORIGIN[1]]}
    elevation = np.arange(64 * 96, dtype="float32").reshape(64, 96)
    elevation[:4, :4] = np.nan
    classes = (np.arange(64 * 96) % 4).astype("uint8").reshape(64, 96)
    for name, values, fill in (("elevation", elevation, np.nan), ("classes", classes, 0)):
        array = group.create_array(name, shape=values.shape, chunks=(32, 32), dtype=values.dtype, fill_value=fill)
        array[...] = values
        array.attrs.put(attrs)
    assert _nodata_lines(f'ZARR:"{store}":/elevation') == ["NoData Value=nan"]
    assert _nodata_lines(f'ZARR:"{store}":/classes') == ["NoData Value=0"]
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        assert _nodata_lines(str(mount / "elevation.tif")) == ["NoData Value=nan"]
        np.testing.assert_array_equal(gdal_read(str(mount / "elevation.tif")), elevation)
        assert _nodata_lines(str(mount / "classes.tif")) == []
        np.testing.assert_array_equal(gdal_read(str(mount / "classes.tif")), classes)
