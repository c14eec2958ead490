"""Meaning end to end: stores written by real writers, read through a real mount by real clients.

Writers: ome-zarr-py (OME-Zarr 0.4 and 0.5 images and labels), GDAL's Zarr
driver (`gdal_translate -of Zarr` from GeoTIFFs), xarray + rioxarray
(`rio.write_crs`, `to_zarr`, v2 and v3). Clients: SimpleITK reading `N.mhd`
and `N.nrrd.nhdr`, GDAL reading `N.raw` through `N.raw.hdr` (compared with GDAL's
own Zarr driver on the same store) and the band names of `N.tiled.tif`,
`zarrfs tree`, the `.json` file.
Expected values come from what was handed to the writer or from what the
writer's own reader reports, never from zarrfs.
"""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from pathlib import Path
from typing import Any

import nrrd
import numpy as np
import pytest
import SimpleITK as sitk
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.writer import write_image, write_labels

from clients import gdal_read, gdalinfo_json
from mountutil import mounted, run_zarrfs

UNITS = {"t": "second", "z": "micrometer", "y": "micrometer", "x": "micrometer"}
SCALE = {"t": 2.0, "z": 0.8, "y": 0.25, "x": 0.3}
CHANNELS = [{"label": "DAPI", "color": "0000FF", "window": {"start": 0, "end": 900, "min": 0, "max": 4095}},
            {"label": "GFP", "color": "00FF00", "window": {"start": 10, "end": 500, "min": 0, "max": 4095}}]
FORMATS = {"0.4": (FormatV04, 2), "0.5": (FormatV05, 3)}


def _write_ome(path: Path, version: str, axes: str, shape: tuple[int, ...], *, labels: bool = False) -> np.ndarray:
    fmt, zarr_format = FORMATS[version]
    data = (np.arange(np.prod(shape), dtype=np.uint16) % 4001).reshape(shape)
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    metadata: dict[str, Any] = {"omero": {"channels": CHANNELS}} if "c" in axes else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ome-zarr-py warns that the channel axis gets the default scale 1
        write_image(data, group, axes=axes, fmt=fmt(), scale_factors=(2,),
                    scale={a: SCALE[a] for a in axes if a in SCALE},
                    axes_units={a: UNITS[a] for a in axes if a in UNITS}, **metadata)
        if labels:
            write_labels((data % 5).astype(np.uint8), group, name="cells", axes=axes, fmt=fmt(), scale_factors=(2,),
                         scale={a: SCALE[a] for a in axes if a in SCALE},
                         axes_units={a: UNITS[a] for a in axes if a in UNITS})
    return data


def _levels(path: Path, version: str) -> dict[str, tuple[list[float], list[float]]]:
    """path -> (scale, translation) per level, as the writer recorded them (its own JSON)."""
    doc = json.loads((path / (".zattrs" if version == "0.4" else "zarr.json")).read_text())
    block = doc if version == "0.4" else doc["attributes"]["ome"]
    out = {}
    for dataset in block["multiscales"][0]["datasets"]:
        transforms = {t["type"]: t for t in dataset["coordinateTransformations"]}
        scale = transforms["scale"]["scale"]
        out[dataset["path"]] = (scale, transforms.get("translation", {}).get("translation", [0.0] * len(scale)))
    return out


# ------------------------------------------------------------------ OME-Zarr


@pytest.mark.parametrize("version", FORMATS)
def test_simpleitk_reads_calibrated_zyx_levels(version: str, tmp_path: Path) -> None:
    store = tmp_path / "zyx.zarr"
    data = _write_ome(store, version, "zyx", (6, 24, 20))
    levels = _levels(store, version)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for path, (scale, translation) in levels.items():
            expected = np.load(mount / f"{path}.npy")
            if path == "s0":
                np.testing.assert_array_equal(expected, data)
            for suffix in (".mhd", ".nrrd.nhdr"):
                image = sitk.ReadImage(str(mount / f"{path}{suffix}"))
                np.testing.assert_array_equal(sitk.GetArrayFromImage(image), expected)
                # ITK lists x first; OME lists z, y, x.
                assert image.GetSpacing() == pytest.approx(scale[::-1]), (path, suffix)
                assert image.GetOrigin() == pytest.approx(translation[::-1]), (path, suffix)
            values, header = nrrd.read(str(mount / f"{path}.nrrd.nhdr"), index_order="C")  # pynrrd: another reader
            np.testing.assert_array_equal(values, expected)
            assert np.diag(header["space directions"]) == pytest.approx(scale[::-1])
            assert header["space origin"] == pytest.approx(translation[::-1])
        assert any(t != 0 for _, ts in levels.values() for t in ts), "the test needs a level with a translation"


@pytest.mark.parametrize("version", FORMATS)
def test_tczyx_axes_units_channels_in_json_tree_and_mhd(version: str, tmp_path: Path) -> None:
    store = tmp_path / "tczyx.zarr"
    _write_ome(store, version, "tczyx", (2, 2, 3, 16, 12))
    levels = _levels(store, version)
    tree = run_zarrfs("tree", store)
    assert tree.returncode == 0, tree.stderr
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for path, (scale, translation) in levels.items():
            semantics = json.loads((mount / f"{path}.json").read_text())["semantics"]
            assert [a["name"] for a in semantics["axes"]] == list("tczyx")
            assert [a["kind"] for a in semantics["axes"]] == ["time", "channel", "space", "space", "space"]
            assert [a["unit"] for a in semantics["axes"]] == [UNITS.get(a) for a in "tczyx"]
            assert [a["scale"] for a in semantics["axes"]] == pytest.approx(scale)
            assert [a["origin"] for a in semantics["axes"]] == pytest.approx(translation)
            assert [(c["label"], c["color"], tuple(c["window"])) for c in semantics["channels"]] == \
                [(c["label"], c["color"], (c["window"]["start"], c["window"]["end"])) for c in CHANNELS]
            image = sitk.ReadImage(str(mount / f"{path}.nrrd.nhdr"))  # 5-D: x y z c t
            assert image.GetSpacing() == pytest.approx([*scale[:1:-1], 1.0, 1.0])
            volume = sitk.ReadImage(str(mount / f"{path}.t1.c0.mhd"))  # a 3-D volume of it: x y z
            assert volume.GetSpacing() == pytest.approx(scale[:1:-1])
            np.testing.assert_array_equal(sitk.GetArrayFromImage(volume), sitk.GetArrayFromImage(image)[1, 0])
        level0 = next(iter(levels))
        assert f"z:space {SCALE['z']:g} micrometer/px" in tree.stdout
        assert f"t:time {SCALE['t']:g} second/px" in tree.stdout
        assert "channels DAPI #0000FF, GFP #00FF00" in tree.stdout
        assert f"OME-Zarr {version} multiscales level 0" in tree.stdout, level0


@pytest.mark.parametrize("version", FORMATS)
def test_cyx_channel_labels_are_gdal_band_names(version: str, tmp_path: Path) -> None:
    """In `N.raw` (ENVI `band names`) and in `N.tiled.tif` (GDAL_METADATA of its one page of bands)."""
    store = tmp_path / "cyx.zarr"
    data = _write_ome(store, version, "cyx", (2, 16, 12))
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for name in ("s0.raw", "s0.tiled.tif"):
            info = gdalinfo_json(str(mount / name))
            assert [b.get("description") for b in info["bands"]] == [c["label"] for c in CHANNELS], name
            np.testing.assert_array_equal(gdal_read(str(mount / name)), data, err_msg=name)


@pytest.mark.parametrize("version", FORMATS)
def test_label_levels_line_up_with_their_image(version: str, tmp_path: Path) -> None:
    store = tmp_path / "img.zarr"
    _write_ome(store, version, "zyx", (4, 16, 12), labels=True)
    image_levels = _levels(store, version)
    label_levels = _levels(store / "labels" / "cells", version)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for path, (scale, translation) in label_levels.items():
            semantics = json.loads((mount / "labels" / "cells" / f"{path}.json").read_text())["semantics"]
            assert [a["scale"] for a in semantics["axes"]] == pytest.approx(scale)
            assert [a["origin"] for a in semantics["axes"]] == pytest.approx(translation)
            assert "label image" in semantics["sources"][0]
            if path in image_levels:  # same level of the same data: the overlay lines up
                image = sitk.ReadImage(str(mount / f"{path}.mhd"))
                label = sitk.ReadImage(str(mount / "labels" / "cells" / f"{path}.mhd"))
                assert label.GetSpacing() == pytest.approx(image.GetSpacing())
                assert label.GetOrigin() == pytest.approx(image.GetOrigin())
                assert label.GetSize() == image.GetSize()


# ---------------------------------------------------------------------- GDAL


def _gdal(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=120)


def _epsg(path: str) -> str:
    """What GDAL identifies the CRS of `path` as ('EPSG:32633')."""
    done = subprocess.run(["gdalsrsinfo", "-e", path], check=True, capture_output=True, text=True, timeout=120)
    return re.search(r"EPSG:-?\d+", done.stdout).group(0)


GDAL_CASES = {
    "utm-nodata": ("EPSG:32633", (440720.0, 3751320.0, 441920.0, 3750600.0), "-100"),
    "utm": ("EPSG:32633", (440720.0, 3751320.0, 441920.0, 3750600.0), None),
    "lonlat-nodata": ("EPSG:4326", (10.0, 50.0, 12.0, 48.8), "-100"),
    "lonlat": ("EPSG:4326", (10.0, 50.0, 12.0, 48.8), None),
}


def write_gdal_store(case: str, tmp_path: Path, shape: tuple[int, int] = (12, 20),
                     creation: tuple[str, ...] = ()) -> tuple[Path, np.ndarray]:
    """A georeferenced int16 raster written by GDAL's own Zarr driver (GTiff -> Zarr, `creation` its
    -co options); the array is `geo`."""
    srs, (ulx, uly, lrx, lry), nodata = GDAL_CASES[case]
    lines, samples = shape
    data = (np.arange(lines * samples, dtype="<i2").reshape(shape) * 3 - 100)
    raw = tmp_path / "src.bin"
    data.tofile(raw)
    raw.with_suffix(".hdr").write_text(f"ENVI\nsamples = {samples}\nlines = {lines}\nbands = 1\nheader offset = 0\n"
                                       "file type = ENVI Standard\ndata type = 2\ninterleave = bsq\nbyte order = 0\n")
    tif, store = tmp_path / "src.tif", tmp_path / "geo.zarr"  # GDAL names the array after the store: geo
    _gdal("gdal_translate", "-q", "-a_srs", srs, "-a_ullr", str(ulx), str(uly), str(lrx), str(lry),
          *(["-a_nodata", nodata] if nodata else []), str(raw), str(tif))
    _gdal("gdal_translate", "-q", "-of", "Zarr", *(arg for option in creation for arg in ("-co", option)), str(tif), str(store))
    return store, data


@pytest.mark.parametrize(("name", "driver"), [("geo.raw", "ENVI"), ("geo.tif", "GTiff")])
@pytest.mark.parametrize("case", GDAL_CASES)
def test_gdal_reads_the_mount_like_its_own_zarr_driver(case: str, name: str, driver: str, tmp_path: Path) -> None:
    """`N.raw` through its ENVI header and `N.tif` through its GeoTIFF tags: the georeference GDAL's Zarr driver
    reads from the store itself."""
    srs, _, nodata = GDAL_CASES[case]
    store, data = write_gdal_store(case, tmp_path)
    reference = gdalinfo_json(str(store))  # GDAL's Zarr driver opens the store's one 2-D array
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        served = gdalinfo_json(str(mount / name))
        assert served["driverShortName"] == driver
        assert served["geoTransform"] == pytest.approx(reference["geoTransform"], abs=1e-9)
        assert _epsg(str(mount / name)) == _epsg(str(store)) == srs
        assert served["bands"][0].get("noDataValue") == reference["bands"][0].get("noDataValue")
        assert (served["bands"][0].get("noDataValue") is not None) == (nodata is not None)
        np.testing.assert_array_equal(gdal_read(str(mount / name)), data)
        tree = run_zarrfs("tree", store).stdout
        assert f"geo {srs}" in tree
        assert "geotransform=(" + ", ".join(f"{v:.12g}" for v in reference["geoTransform"]) + ")" in tree


# ---------------------------------------------------------- xarray+rioxarray


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_rioxarray_store_through_envi(zarr_format: int, tmp_path: Path) -> None:
    import rioxarray  # noqa: F401  (registers the .rio accessor)
    import xarray as xr

    data = (np.arange(12 * 20, dtype="float32").reshape(12, 20) * 0.5)
    data[0, 0] = -9999
    x = 440720 + 30 + 60 * np.arange(20)
    y = 3751320 - 30 - 60 * np.arange(12)
    array = xr.DataArray(data, dims=("y", "x"), coords={"y": y, "x": x}, name="elev")
    array = array.rio.write_crs("EPSG:32633").rio.write_nodata(-9999.0, encoded=True)
    store = tmp_path / "rx.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python on v3 string/consolidation warnings
        array.to_dataset().to_zarr(store, zarr_format=zarr_format, mode="w", consolidated=True)
        reread = xr.open_zarr(store, zarr_format=zarr_format, mask_and_scale=False, decode_coords="all")["elev"]
    transform = reread.rio.transform().to_gdal()
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        served = gdalinfo_json(str(mount / "elev.raw"))
        assert served["geoTransform"] == pytest.approx(list(transform), abs=1e-9)
        assert _epsg(str(mount / "elev.raw")) == f"EPSG:{reread.rio.crs.to_epsg()}"
        assert served["bands"][0]["noDataValue"] == reread.rio.nodata
        np.testing.assert_array_equal(gdal_read(str(mount / "elev.raw")), data)
        semantics = json.loads((mount / "elev.json").read_text())["semantics"]
        assert semantics["geo"]["epsg"] == reread.rio.crs.to_epsg()
        assert semantics["nodata"] == reread.rio.nodata


# -------------------------------------------------------------------- options


def test_sidecars_need_raw(tmp_path: Path) -> None:
    store = tmp_path / "a.zarr"
    zarr.create_array(str(store), shape=(3, 4), dtype="<u2", zarr_format=3)
    (tmp_path / "mnt").mkdir()
    refused = run_zarrfs("mount", store, tmp_path / "mnt", "--formats", "npy,mhd")
    assert refused.returncode != 0 and "mhd describe the .raw file; add raw" in refused.stderr
    with mounted(store, tmp_path / "mnt", tmp_path / "log", "--formats", "raw,nhdr") as mount:
        assert sorted(p.name for p in mount.root.iterdir()) == [".zarrfs-stats.json", "a.nrrd.nhdr", "a.raw"]


# ------------------------------------------------------------ dtypes, byte order

# Which headers each dtype gets (formats.md §7): ENVI has no int8/float16 code, NRRD and MetaImage no
# float16 or complex.
DTYPE_HEADERS = {
    ">u2": {".raw.hdr", ".mhd", ".nrrd.nhdr"}, "<i4": {".raw.hdr", ".mhd", ".nrrd.nhdr"},
    ">f8": {".raw.hdr", ".mhd", ".nrrd.nhdr"}, "|i1": {".mhd", ".nrrd.nhdr"}, "<f2": set(), "<c8": {".raw.hdr"},
    "|b1": {".raw.hdr", ".mhd", ".nrrd.nhdr"},
}


def test_headers_follow_dtype_and_byte_order(tmp_path: Path) -> None:
    store = tmp_path / "types.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    arrays = {}
    for index, dtype in enumerate(DTYPE_HEADERS):
        values = (np.arange(3 * 5 * 7) % 100 - 50).reshape(3, 5, 7)
        data = (values > 0) if dtype == "|b1" else values.astype(dtype)
        name = f"a{index}"
        group.create_array(name, shape=data.shape, dtype=data.dtype, chunks=(2, 3, 4))[...] = data
        arrays[name] = (dtype, data)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        names = {p.name for p in mount.root.iterdir()}
        for name, (dtype, data) in arrays.items():
            assert {s for s in (".raw.hdr", ".mhd", ".nrrd.nhdr") if name + s in names} == DTYPE_HEADERS[dtype], dtype
            expected = data.astype(np.uint8) if dtype == "|b1" else data
            if name + ".mhd" in names:
                for suffix in (".mhd", ".nrrd.nhdr"):
                    image = sitk.GetArrayFromImage(sitk.ReadImage(str(mount / (name + suffix))))
                    np.testing.assert_array_equal(image, expected, err_msg=f"{dtype} {suffix}")
            if name + ".raw.hdr" in names and dtype == "<c8":  # gdal_read's ENVI reader has no complex codes
                info = gdalinfo_json(str(mount / (name + ".raw")))
                assert [b["type"] for b in info["bands"]] == ["CFloat32"] * 3
            elif name + ".raw.hdr" in names:
                np.testing.assert_array_equal(gdal_read(str(mount / (name + ".raw"))), expected, err_msg=dtype)
