"""The client harness itself: ImageJ and GDAL must report what tifffile wrote."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tifffile

import clients
from clients import ClientError, gdal_available, gdal_read, gdalinfo_json, imagej_available, imagej_describe


def _require(available: bool, what: str) -> None:
    """Skip when a client is missing, except in CI, which installs them (scripts/install_clients.sh):
    there a skip would hide a broken install."""
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is not installed; CI runs scripts/install_clients.sh")
    pytest.skip(f"{what} is not installed (scripts/install_clients.sh)")


@pytest.fixture
def needs_imagej() -> None:
    _require(imagej_available(), "ImageJ (imagej, xvfb)")


@pytest.fixture
def needs_gdal() -> None:
    _require(gdal_available(), "GDAL (gdal-bin)")


@pytest.fixture
def image_2d(tmp_path: Path) -> tuple[str, np.ndarray]:
    # Values above 255 and distinct per pixel, so a wrong byte order, bit depth
    # or transposition shows.
    data = (np.arange(30 * 40, dtype=np.uint16).reshape(30, 40) * 53 + 300).astype(np.uint16)
    path = tmp_path / "plain.tif"
    tifffile.imwrite(path, data)
    return str(path), data


@pytest.fixture
def hyperstack(tmp_path: Path) -> tuple[str, np.ndarray]:
    data = (np.arange(2 * 3 * 5 * 6) * 7 % 251).astype(np.uint8).reshape(2, 3, 5, 6)  # t, z, y, x
    path = tmp_path / "hyperstack.tif"
    tifffile.imwrite(path, data, imagej=True, metadata={"axes": "TZYX"})
    return str(path), data


def _child_pids() -> set[int]:
    """PIDs of this process's children, zombies included (an unreaped child shows too)."""
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
    return {int(pid) for pid in children}


def test_imagej_2d_uint16(needs_imagej: None, image_2d: tuple[str, np.ndarray]) -> None:
    path, data = image_2d
    pixels = [(0, 0, 1), (39, 0, 1), (0, 29, 1), (39, 29, 1), (4, 3, 1)]

    seen = imagej_describe(path, pixels)

    assert {k: seen[k] for k in ("width", "height", "channels", "slices", "frames", "bitDepth")} == {
        "width": 40, "height": 30, "channels": 1, "slices": 1, "frames": 1, "bitDepth": 16,
    }
    assert seen["values"] == [int(data[y, x]) for x, y, _ in pixels]


def test_imagej_hyperstack(needs_imagej: None, hyperstack: tuple[str, np.ndarray]) -> None:
    path, data = hyperstack
    frames, slices, height, width = data.shape
    # Every plane, at a pixel that moves with the plane; ImageJ's stack index
    # runs over slices within each frame.
    pixels = [(i % width, i % height, i + 1) for i in range(frames * slices)]

    seen = imagej_describe(path, pixels)

    assert (seen["width"], seen["height"], seen["channels"], seen["slices"], seen["frames"]) == (6, 5, 1, 3, 2)
    assert seen["bitDepth"] == 8
    planes = data.reshape(frames * slices, height, width)
    assert seen["values"] == [int(planes[index - 1, y, x]) for x, y, index in pixels]


def test_imagej_float32_values_are_exact(needs_imagej: None, tmp_path: Path) -> None:
    data = np.array([[1.5e-20, 3.25], [123456.789, -2.0]], dtype=np.float32)
    path = tmp_path / "float.tif"
    tifffile.imwrite(path, data)
    pixels = [(0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)]

    seen = imagej_describe(str(path), pixels)

    assert seen["bitDepth"] == 32
    assert [np.float32(v) for v in seen["values"]] == [data[y, x] for x, y, _ in pixels]


def test_imagej_unreadable_file_raises(needs_imagej: None, image_2d: tuple[str, np.ndarray], tmp_path: Path) -> None:
    # A TIFF header whose first IFD lies past the end: ImageJ opens nothing and
    # shows no dialog; the harness must say so rather than return defaults.
    path = tmp_path / "header_only.tif"
    path.write_bytes(Path(image_2d[0]).read_bytes()[:8])

    with pytest.raises(ClientError, match="ImageJ opened no image"):
        imagej_describe(str(path), [(0, 0, 1)])


def test_imagej_pixel_outside_stack_raises_instead_of_hanging(
    needs_imagej: None, hyperstack: tuple[str, np.ndarray]
) -> None:
    path, _ = hyperstack

    with pytest.raises(ClientError, match=r"pixel \(0, 0, 7\) is outside the image"):
        imagej_describe(path, [(0, 0, 7)])


def test_imagej_leaves_no_process_behind(needs_imagej: None, image_2d: tuple[str, np.ndarray]) -> None:
    path, _ = image_2d
    before = _child_pids()

    imagej_describe(path, [(0, 0, 1)])
    with pytest.raises(ClientError):
        imagej_describe(path, [(0, 0, 2)])

    assert _child_pids() == before


def test_imagej_timeout_raises_and_cleans_up(
    needs_imagej: None, image_2d: tuple[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = image_2d
    monkeypatch.setattr(clients, "IMAGEJ_TIMEOUT_S", 0.05)  # far less than a JVM needs to start
    before = _child_pids()

    with pytest.raises(ClientError, match="ImageJ did not finish within 0.05 s"):
        imagej_describe(path, [(0, 0, 1)])

    assert _child_pids() == before


def test_gdal_2d_uint16(needs_gdal: None, image_2d: tuple[str, np.ndarray]) -> None:
    path, data = image_2d

    info = gdalinfo_json(path)
    pixels = gdal_read(path)

    assert info["size"] == [40, 30]
    assert [band["type"] for band in info["bands"]] == ["UInt16"]
    assert pixels.dtype == np.uint16
    np.testing.assert_array_equal(pixels, data)


def test_gdal_hyperstack_pages(needs_gdal: None, hyperstack: tuple[str, np.ndarray]) -> None:
    path, data = hyperstack
    planes = data.reshape(-1, *data.shape[2:])

    info = gdalinfo_json(path)

    assert info["size"] == [6, 5]
    # GDAL exposes each TIFF page beyond the first as a subdataset.
    assert len([k for k in info["metadata"]["SUBDATASETS"] if k.endswith("_NAME")]) == len(planes)
    np.testing.assert_array_equal(gdal_read(path), planes[0])
    for page, plane in enumerate(planes, start=1):
        np.testing.assert_array_equal(gdal_read(path, page=page), plane)


def test_gdal_rgb_comes_back_band_first(needs_gdal: None, tmp_path: Path) -> None:
    data = (np.arange(4 * 5 * 3) * 11 % 256).astype(np.uint8).reshape(4, 5, 3)  # y, x, sample
    path = tmp_path / "rgb.tif"
    tifffile.imwrite(path, data, photometric="rgb")

    pixels = gdal_read(str(path))

    np.testing.assert_array_equal(pixels, np.moveaxis(data, -1, 0))


def test_gdal_failure_raises(needs_gdal: None, tmp_path: Path) -> None:
    with pytest.raises(ClientError, match="gdalinfo"):
        gdalinfo_json(str(tmp_path / "missing.tif"))
