"""The mounted `.tif` carries the meaning end to end: stores written by real writers, read by real clients.

* ome-zarr-py (0.4 and 0.5) writes a t,c,z,y,x image with scale, units and
  `omero` channels; stock ImageJ opens the mounted `.tif` as a calibrated
  c/z/t composite hyperstack whose pixels are the array's.

(GDAL reading the mounted `.tif` of a GDAL-written store is in
test_meaning_clients.py, beside the same check of `.raw` through its ENVI header.)
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.writer import write_image

from clients import imagej_available, imagej_describe
from mountutil import mounted

FORMATS = {"0.4": (FormatV04, 2), "0.5": (FormatV05, 3)}
T, C, Z, Y, X = 2, 3, 4, 10, 12
CHANNELS = [{"label": "DAPI", "color": "0000FF", "window": {"start": 0, "end": 1000, "min": 0, "max": 65535}},
            {"label": "GFP", "color": "00FF00", "window": {"start": 10, "end": 2000, "min": 0, "max": 65535}},
            {"label": "mCherry", "color": "FF00FF", "window": {"start": 20, "end": 3000, "min": 0, "max": 65535}}]


def write_tczyx(path: Path, version: str) -> np.ndarray:
    fmt, zarr_format = FORMATS[version]
    data = (np.arange(T * C * Z * Y * X, dtype=np.uint16) * 7 % 60000).reshape(T, C, Z, Y, X)
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ome-zarr-py warns that the channel axis gets scale 1
        write_image(data, group, axes="tczyx", fmt=fmt(), scale_factors=(),
                    scale={"t": 2.5, "z": 0.5, "y": 0.25, "x": 0.25},
                    axes_units={"t": "second", "z": "micrometer", "y": "micrometer", "x": "micrometer"},
                    omero={"channels": CHANNELS})
    return data


def stack_index(t: int, c: int, z: int) -> int:
    """ImageJ's 1-based stack index: channel fastest, then slice, then frame."""
    return (t * Z + z) * C + c + 1


@pytest.mark.skipif(not imagej_available(), reason="stock ImageJ, Java and Xvfb: scripts/install_clients.sh")
@pytest.mark.parametrize("version", FORMATS)
def test_imagej_opens_an_ome_zarr_image_as_a_calibrated_hyperstack(version: str, tmp_path: Path) -> None:
    data = write_tczyx(tmp_path / "image.zarr", version)
    picks = [(1, 2, 0, 0, 0), (0, 3, 1, 2, 3), (11, 9, 0, 2, 1), (5, 5, 1, 1, 2), (7, 0, 1, 0, 3)]  # x, y, t, c, z
    with mounted(tmp_path / "image.zarr", tmp_path / "mnt", tmp_path / "log") as mount:
        seen = imagej_describe(str(mount / "s0.tif"), [(x, y, stack_index(t, c, z)) for x, y, t, c, z in picks],
                               calibration=True)
        # tifffile sees the same hyperstack: pages in ImageJ's t, z, c order.
        np.testing.assert_array_equal(tifffile.imread(mount / "s0.tif"), data.transpose(0, 2, 1, 3, 4))
    assert (seen["width"], seen["height"], seen["channels"], seen["slices"], seen["frames"]) == (X, Y, C, Z, T)
    assert seen["values"] == [int(data[t, c, z, y, x]) for x, y, t, c, z in picks]
    assert seen["voxelSize"] == pytest.approx([0.25, 0.25, 0.5])
    assert seen["unit"] in ("micron", "microns", "µm")
    assert seen["frameInterval"] == pytest.approx(2.5)
    assert seen["composite"]
    assert [d["label"] for d in seen["channelDisplay"]] == ["DAPI", "GFP", "mCherry"]
    assert [tuple(d["range"]) for d in seen["channelDisplay"]] == [(0, 1000), (10, 2000), (20, 3000)]
