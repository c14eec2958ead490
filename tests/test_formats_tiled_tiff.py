"""`N.tiled.tif`: tiles are the array's chunks, overviews the coarser OME-Zarr levels.

In-process (the virtual tree, no FUSE): every byte of the file against the
array as tifffile reads it back, for edge tiles, chunks that are not a
multiple of 16, big-endian and F-order chunks, sharded arrays (tile = inner
chunk), missing chunks (fill value), stacks of planes; partial reads at
odd offsets against the whole file. Mounted: GDAL sees the tiles, the
overviews and their pixels, and the georeference of a GDAL-written store.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from ome_zarr.format import FormatV04
from ome_zarr.writer import write_image

from clients import gdal_read, gdalinfo_json
from mountutil import mounted
from test_meaning_clients import GDAL_CASES, _epsg, write_gdal_store
from zarrfs.engine.engine import Engine
from zarrfs.view import FileEntry, VirtualTree


def _file_bytes(store: Path, name: str) -> tuple[FileEntry, bytes]:
    engine = Engine.open(str(store))
    try:
        entry = VirtualTree(engine).lookup(name)
        assert isinstance(entry, FileEntry)
        out = np.empty(entry.layout.size, np.uint8)
        assert entry.layout.read_into(0, out, None) == entry.layout.size
        rng = np.random.default_rng(0)
        for _ in range(20):  # partial reads, starting and ending anywhere, equal the whole file
            start = int(rng.integers(0, len(out)))
            part = np.empty(int(rng.integers(1, 70000)), np.uint8)
            n = entry.layout.read_into(start, part, None)
            assert part[:n].tobytes() == out[start:start + n].tobytes()
        return entry, out.tobytes()
    finally:
        engine.close()


def _write(path: Path, data: np.ndarray, chunks: tuple[int, ...], **kwargs) -> None:
    array = zarr.create_array(str(path), shape=data.shape, chunks=chunks, dtype=data.dtype,
                              fill_value=kwargs.pop("fill_value", 0), **kwargs)
    array[...] = data


CASES = {
    # name: (shape, chunks, dtype, extra create_array arguments)
    "edge-tiles": ((100, 130), (32, 48), "<f4", {}),
    "not-multiple-of-16": ((70, 90), (20, 25), "<u2", {}),
    "big-endian-v2": ((50, 60), (16, 32), ">i4", {"zarr_format": 2}),
    "f-order-v2": ((50, 60), (24, 40), "<f8", {"zarr_format": 2, "order": "F"}),
    "sharded": ((96, 100), (48, 64), "<u1", {"shards": (96, 128)}),
    "stack": ((3, 2, 40, 33), (2, 1, 16, 16), "<i2", {}),
    "bool": ((20, 21), (16, 16), "|b1", {}),
    "gaps-after-1MiB-tiles": ((600, 1100), (512, 512), "<f4", {}),
    "tiles-split-from-1024-chunks": ((1100, 1300), (1024, 1024), "<u2", {}),
    "tiles-split-from-sharded-1536": ((1600, 40), (1536, 32), "<u1", {"shards": (3072, 64)}),
    # uncompressed local chunks are copied from their files (engine/direct.py), not decoded
    "chunk-larger-than-array": ((10, 12), (1000, 1000), "<u2", {}),
    "uncompressed-stack": ((3, 40, 50), (2, 16, 32), "<u2", {"compressors": None}),
}

# Chunks over 512 on a side are served as tiles of a part of them (model/tiling.py: tile_size).
SPLIT_TILES = {"tiles-split-from-1024-chunks": (512, 512), "tiles-split-from-sharded-1536": (512, 32)}


@pytest.mark.parametrize("case", CASES)
def test_every_byte_is_the_array_in_tiles(case: str, tmp_path: Path) -> None:
    shape, chunks, dtype, extra = CASES[case]
    rng = np.random.default_rng(1)
    data = (rng.random(shape) * 100).astype(dtype)
    _write(tmp_path / "a.zarr", data, chunks, **extra)
    entry, content = _file_bytes(tmp_path / "a.zarr", "array.tiled.tif")
    # the tile is the (inner) chunk rounded up to 16, or a part of it for chunks over 512
    tile = SPLIT_TILES.get(case) or tuple(-(-min(c, n) // 16) * 16 for c, n in zip(chunks[-2:], shape[-2:]))
    with tifffile.TiffFile(io.BytesIO(content)) as tif:
        assert all(page.is_tiled for page in tif.pages)
        assert len(tif.pages) == int(np.prod(shape[:-2]))
        page = tif.pages[0]
        assert (page.tilelength, page.tilewidth) == tile
        assert tif.byteorder == (">" if dtype.startswith(">") else "<")
        served = np.stack([p.asarray() for p in tif.pages]).reshape(shape)
    np.testing.assert_array_equal(served, data.astype(served.dtype))


def test_missing_chunks_are_the_fill_value(tmp_path: Path) -> None:
    array = zarr.create_array(str(tmp_path / "a.zarr"), shape=(40, 50), chunks=(16, 16), dtype="<f4",
                              fill_value=-5.0)
    array[0:16, 16:32] = 7.0  # one chunk written, the others absent
    expected = np.full((40, 50), -5.0, np.float32)
    expected[0:16, 16:32] = 7.0
    _, content = _file_bytes(tmp_path / "a.zarr", "array.tiled.tif")
    np.testing.assert_array_equal(tifffile.imread(io.BytesIO(content)), expected)


def _pyramid(path: Path) -> list[np.ndarray]:
    """A 3-level OME-Zarr 0.4 image (y, x) written by ome-zarr-py; returns the levels as stored."""
    data = (np.arange(200 * 300, dtype=np.uint16).reshape(200, 300) * 7 % 50000)
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(data, group, axes="yx", fmt=FormatV04(), scale_factors=(2, 4),
                    storage_options={"chunks": (64, 64)})
    paths = [d["path"] for d in group.attrs["multiscales"][0]["datasets"]]
    assert len(paths) == 3
    return [group[level][...] for level in paths]


def test_levels_of_an_ome_image_are_reduced_pages(tmp_path: Path) -> None:
    levels = _pyramid(tmp_path / "image.zarr")
    _, content = _file_bytes(tmp_path / "image.zarr", "s0.tiled.tif")
    with tifffile.TiffFile(io.BytesIO(content)) as tif:
        assert [int(page.subfiletype) for page in tif.pages] == [0, 1, 1]
        assert len(tif.series[0].levels) == 3
        for level, expected in zip(tif.series[0].levels, levels, strict=True):
            np.testing.assert_array_equal(level.asarray(), expected)
    _, coarser = _file_bytes(tmp_path / "image.zarr", "s1.tiled.tif")  # level 1 has level 2 as its overview
    with tifffile.TiffFile(io.BytesIO(coarser)) as tif:
        assert [page.shape for page in tif.pages] == [levels[1].shape, levels[2].shape]


def test_gdal_sees_tiles_and_overviews_of_the_pyramid(tmp_path: Path) -> None:
    levels = _pyramid(tmp_path / "image.zarr")
    with mounted(tmp_path / "image.zarr", tmp_path / "mnt", tmp_path / "log") as mount:
        path = str(mount.root / "s0.tiled.tif")
        info = gdalinfo_json(path)
        assert info["size"] == [300, 200]
        band = info["bands"][0]
        assert band["block"] == [64, 64]
        assert [o["size"] for o in band["overviews"]] == [[150, 100], [75, 50]]
        np.testing.assert_array_equal(gdal_read(path), levels[0])
        for index, expected in enumerate(levels[1:]):
            out = tmp_path / f"ovr{index}.tif"
            subprocess.run(["gdal_translate", "-q", "-ovr", str(index), path, str(out)], check=True, timeout=120)
            np.testing.assert_array_equal(tifffile.imread(out), expected)


@pytest.mark.parametrize("case", ["utm-nodata", "lonlat"])
def test_gdal_reads_the_georeference_like_its_own_zarr_driver(case: str, tmp_path: Path) -> None:
    srs = GDAL_CASES[case][0]
    store, data = write_gdal_store(case, tmp_path, (40, 50), creation=("BLOCKSIZE=16,32",))
    reference = gdalinfo_json(str(store))
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = str(mount.root / "geo.tiled.tif")
        served = gdalinfo_json(path)
        assert served["driverShortName"] == "GTiff"
        assert served["bands"][0]["block"] == [32, 16]
        assert served["geoTransform"] == pytest.approx(reference["geoTransform"], abs=1e-9)
        assert _epsg(path) == _epsg(str(store)) == srs
        assert served["bands"][0].get("noDataValue") == reference["bands"][0].get("noDataValue")
        np.testing.assert_array_equal(gdal_read(path), data)


@pytest.mark.skipif(shutil.which("tiffinfo") is None, reason="libtiff-tools: scripts/install_clients.sh")
def test_libtiff_reads_the_tiles_and_reduced_pages(tmp_path: Path) -> None:
    levels = _pyramid(tmp_path / "image.zarr")
    with mounted(tmp_path / "image.zarr", tmp_path / "mnt", tmp_path / "log") as mount:
        path = str(mount.root / "s0.tiled.tif")
        info = subprocess.run(["tiffinfo", path], check=True, capture_output=True, text=True, timeout=120)
        assert info.stderr == ""
        assert info.stdout.count("Tile Width: 64 Tile Length: 64") == 3
        assert info.stdout.count("reduced-resolution image") == 2
        copy = tmp_path / "copy.tif"  # tiffcp decodes every tile of every page with libtiff
        subprocess.run(["tiffcp", "-c", "none", "-s", path, str(copy)], check=True, capture_output=True,
                       timeout=120)
    with tifffile.TiffFile(copy) as tif:
        for page, expected in zip(tif.pages, levels, strict=True):
            np.testing.assert_array_equal(page.asarray(), expected)


def test_past_4_gib_the_file_is_a_bigtiff(tmp_path: Path) -> None:
    """From metadata alone (no chunk is written): a 6.4 GB array gives a BigTIFF whose IFD tifffile reads."""
    zarr.create_array(str(tmp_path / "big.zarr"), shape=(40000, 40000), chunks=(1000, 1000), dtype="<f4")
    engine = Engine.open(str(tmp_path / "big.zarr"))
    try:
        entry = VirtualTree(engine).lookup("array.tiled.tif")
        assert isinstance(entry, FileEntry)
        head = np.empty(1 << 16, np.uint8)
        entry.layout.read_into(0, head, None)
        assert head[:4].tobytes() == b"II+\0" and entry.layout.size > 40000 * 40000 * 4
        with tifffile.TiffFile(io.BytesIO(head.tobytes())) as tif:
            page = tif.pages[0]
            assert tif.is_bigtiff and page.shape == (40000, 40000)
            assert (page.tilelength, page.tilewidth) == (1008, 1008)  # 1000 rounded up to 16
    finally:
        engine.close()
