"""Real programs read mounted `.tif` files: GDAL's tools and stock ImageJ.

Missing clients fail (not skip) these tests: a skip would let a broken TIFF
pass unnoticed. `scripts/install_clients.sh` installs them; CI runs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec

from clients import gdal_available, gdal_read, gdalinfo_json, imagej_available, imagej_describe
from mountutil import Mount, mounted
from oracles import zarr_read

# Values chosen so that a wrong byte order, bit depth, sign or transposition shows.
IMAGE_2D = (np.arange(30 * 40, dtype=np.uint16).reshape(30, 40) * 53 + 300).astype(np.uint16)
ARRAYS: dict[str, np.ndarray] = {
    "u2": IMAGE_2D,
    "u2_bigendian": IMAGE_2D,  # stored big-endian: served as a big-endian ('MM') TIFF
    "i2": (IMAGE_2D.astype(np.int32) - 20000).astype(np.int16),
    "u1": (IMAGE_2D % 251).astype(np.uint8),
    "f4": IMAGE_2D.astype(np.float32) / 7 - 100,
    "tzyx": (np.arange(2 * 3 * 5 * 6) * 7 % 251).astype(np.uint8).reshape(2, 3, 5, 6),
}
GDAL_TYPES = {"u2": "UInt16", "u2_bigendian": "UInt16", "i2": "Int16", "u1": "Byte", "f4": "Float32"}


def require(available: bool, what: str) -> None:
    if not available:
        pytest.fail(f"{what} is not installed: run scripts/install_clients.sh (CI installs it)", pytrace=False)


def write_store(root: Path) -> Path:
    store = root / "images.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    for name, data in ARRAYS.items():
        extra: dict[str, Any] = {"dimension_names": ["t", "z", "y", "x"], "chunks": (1, 2, 5, 6)} if data.ndim == 4 \
            else {"chunks": (16, 16)}
        if name.endswith("bigendian"):
            extra["serializer"] = BytesCodec(endian="big")
        group.create_array(name, shape=data.shape, dtype=data.dtype, **extra)[...] = data
    return store


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mount, dict[str, np.ndarray]]]:
    tmp = tmp_path_factory.mktemp("clients")
    store = write_store(tmp)
    oracle = {name: zarr_read(store, name) for name in ARRAYS}
    with mounted(store, tmp / "mnt", tmp / "log") as mount:
        yield mount, oracle


def tif(mount: Mount, name: str) -> str:
    return str(mount / f"{name}.tif")


# ------------------------------------------------------------ GDAL


@pytest.mark.parametrize("name", sorted(GDAL_TYPES))
def test_gdalinfo(name: str, images: tuple[Mount, dict[str, np.ndarray]]) -> None:
    require(gdal_available(), "GDAL (gdal-bin)")
    mount, oracle = images
    info = gdalinfo_json(tif(mount, name))
    height, width = oracle[name].shape
    assert info["size"] == [width, height]
    assert [band["type"] for band in info["bands"]] == [GDAL_TYPES[name]]


@pytest.mark.parametrize("name", sorted(GDAL_TYPES))
def test_gdal_translate(name: str, images: tuple[Mount, dict[str, np.ndarray]]) -> None:
    require(gdal_available(), "GDAL (gdal-bin)")
    mount, oracle = images
    pixels = gdal_read(tif(mount, name))
    assert pixels.dtype == oracle[name].dtype.newbyteorder("=")
    np.testing.assert_array_equal(pixels, oracle[name])


def test_the_big_endian_case_is_a_big_endian_tiff(images: tuple[Mount, dict[str, np.ndarray]]) -> None:
    mount, _ = images
    assert Path(tif(mount, "u2_bigendian")).read_bytes()[:4] == b"MM\x00\x2a"
    assert Path(tif(mount, "u2")).read_bytes()[:4] == b"II\x2a\x00"


def test_gdal_reads_every_page_of_the_stack(images: tuple[Mount, dict[str, np.ndarray]]) -> None:
    require(gdal_available(), "GDAL (gdal-bin)")
    mount, oracle = images
    planes = oracle["tzyx"].reshape(-1, 5, 6)
    for page, plane in enumerate(planes, start=1):
        np.testing.assert_array_equal(gdal_read(tif(mount, "tzyx"), page=page), plane)


# ------------------------------------------------------------ ImageJ


def test_imagej_2d_uint16(images: tuple[Mount, dict[str, np.ndarray]]) -> None:
    require(imagej_available(), "ImageJ (imagej, xvfb)")
    mount, oracle = images
    data = oracle["u2"]
    pixels = [(0, 0, 1), (39, 0, 1), (0, 29, 1), (39, 29, 1), (17, 11, 1)]
    seen = imagej_describe(tif(mount, "u2"), pixels)
    assert {k: v for k, v in seen.items() if k != "values"} == {
        "width": 40, "height": 30, "channels": 1, "slices": 1, "frames": 1, "bitDepth": 16}
    assert seen["values"] == [int(data[y, x]) for x, y, _ in pixels]


def test_imagej_4d_hyperstack(images: tuple[Mount, dict[str, np.ndarray]]) -> None:
    require(imagej_available(), "ImageJ (imagej, xvfb)")
    mount, oracle = images
    data = oracle["tzyx"]
    frames, slices, height, width = data.shape
    # One pixel per plane, moving with the plane; ImageJ's stack index runs
    # over slices within each frame (1-based).
    planes = [(t, z) for t in range(frames) for z in range(slices)]
    pixels = [(i % width, (i * 2) % height, t * slices + z + 1) for i, (t, z) in enumerate(planes)]
    seen = imagej_describe(tif(mount, "tzyx"), pixels)
    assert {k: v for k, v in seen.items() if k != "values"} == {
        "width": width, "height": height, "channels": 1, "slices": slices, "frames": frames, "bitDepth": 8}
    assert seen["values"] == [int(data[t, z, y, x]) for (t, z), (x, y, _) in zip(planes, pixels, strict=True)]
