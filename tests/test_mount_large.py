"""Files past 4 GiB: the ImageJ-convention .tif and the BigTIFF beside it, through a real mount.

The array is all fill value (no chunk is ever written), so a 4.7 GiB file
costs nothing to store or to read: every plane is fill, decoded from nothing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tifffile
import zarr

from mountutil import mounted

SHAPE = (300, 4096, 4096)  # uint8: 4.7 GiB, past classic TIFF's 4 GiB
FILL = 7


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("large")
    store = tmp / "big.zarr"
    array = zarr.create_array(str(store), shape=SHAPE, chunks=(1, 1024, 1024), dtype="uint8", fill_value=FILL,
                              dimension_names=["z", "y", "x"])
    array[SHAPE[0] - 1, :2, :3] = [[1, 2, 3], [4, 5, 6]]  # one real chunk, in the last plane
    with mounted(store, tmp / "mnt", tmp / "log") as mount:
        yield mount


def test_both_tiffs_are_listed_with_exact_sizes(big) -> None:
    nbytes = int(np.prod(SHAPE))
    assert big.root.joinpath("big.raw").stat().st_size == nbytes
    for name in ("big.tif", "big.bigtiff.tif"):
        size = big.root.joinpath(name).stat().st_size
        assert nbytes < size < nbytes + (1 << 20), name


def test_imagej_convention_tif_reads_last_plane(big) -> None:
    with tifffile.TiffFile(big.root / "big.tif") as tif:
        assert not tif.is_bigtiff and len(tif.pages) == 1  # ImageJ's single-IFD form
        assert tif.imagej_metadata["images"] == SHAPE[0]
        series = tif.series[0]
        assert series.shape == SHAPE
        last = series.asarray(out="memmap")[-1]  # reads only that plane through the mount
        assert last[:2, :3].tolist() == [[1, 2, 3], [4, 5, 6]]
        assert int(last[100, 100]) == FILL


def test_bigtiff_has_one_page_per_plane(big) -> None:
    with tifffile.TiffFile(big.root / "big.bigtiff.tif") as tif:
        assert tif.is_bigtiff
        assert len(tif.pages) == SHAPE[0]
        last = tif.pages[-1].asarray()
        assert last.shape == SHAPE[1:]
        assert last[:2, :3].tolist() == [[1, 2, 3], [4, 5, 6]]
        assert int(last[4095, 4095]) == FILL


def test_json_describes_the_array(big) -> None:
    doc = json.loads(big.root.joinpath("big.json").read_text())
    assert doc["shape"] == list(SHAPE) and doc["dimension_names"] == ["z", "y", "x"]
    assert doc["fill_value"] == FILL and doc["nbytes"] == int(np.prod(SHAPE))
