"""`N.tiled.tif`: tiles are the array's chunks, overviews the coarser OME-Zarr levels.

In-process (the virtual tree, no FUSE): every byte of the file against the
array as tifffile reads it back, for edge tiles, chunks that are not a
multiple of 16, big-endian and F-order chunks, sharded arrays (tile = inner
chunk), missing chunks (fill value), stacks of planes (pages) and 3-D arrays
(one page of bands, also with chunks that do not divide the band count);
partial reads at odd offsets against the whole file. Mounted: GDAL sees the
tiles, the overviews and their pixels, the bands of a 3-D pyramid with their
overviews and channel names, and the georeference of a GDAL-written store
and of a rioxarray-written 3-D one.
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
from zarrfs.engine.reader import ArrayReader
from zarrfs.formats import tiled_tiff
from zarrfs.formats.tiff_head import HEAD_GAP
from zarrfs.files.tree import FileEntry, VirtualTree


def _file_bytes(store: Path, name: str) -> tuple[FileEntry, bytes]:
    engine = Engine.open(str(store))
    try:
        entry = VirtualTree(engine).lookup(name)
        assert isinstance(entry, FileEntry)
        out = np.empty(entry.file.size, np.uint8)
        assert entry.file.open().read_into(0, out) == entry.file.size
        rng = np.random.default_rng(0)
        for _ in range(20):  # partial reads, starting and ending anywhere, equal the whole file
            start = int(rng.integers(0, len(out)))
            part = np.empty(int(rng.integers(1, 70000)), np.uint8)
            n = entry.file.open().read_into(start, part)
            assert part[:n].tobytes() == out[start:start + n].tobytes()
        return entry, out.tobytes()
    finally:
        engine.close()


class _RecordingFile(io.BytesIO):
    """A file's bytes that remember the furthest byte read."""

    def __init__(self, content: bytes) -> None:
        super().__init__(content)
        self.furthest = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.furthest = max(self.furthest, self.tell())
        return data

    def readinto(self, buffer) -> int:  # type: ignore[override]
        n = super().readinto(buffer)
        self.furthest = max(self.furthest, self.tell())
        return n


def opening_reads(content: bytes) -> tuple[int, int]:
    """(the furthest byte tifffile reads to list every page, SubIFD and series level with its tags,
    the first tile's offset): the IFDs lie at the head, a gap before the tiles (formats/tiff_head.py)."""
    recording = _RecordingFile(content)
    with tifffile.TiffFile(recording) as tif:
        pages = list(tif.pages)
        for series in tif.series:
            for level in series.levels:
                pages += list(level.pages)
        first_tile = min(min(page.dataoffsets) for page in pages)
    return recording.furthest, first_tile


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
    "stack-of-pages": ((3, 2, 40, 33), (2, 1, 16, 16), "<i2", {}),
    "one-plane-3d": ((1, 40, 33), (1, 16, 16), "<u1", {}),
    "bands": ((3, 40, 50), (1, 16, 16), "<u2", {}),
    "bands-chunk-not-dividing-n": ((3, 40, 50), (2, 16, 16), "<i2", {}),
    "bands-big-endian-v2": ((4, 30, 45), (3, 20, 16), ">f4", {"zarr_format": 2}),
    "bands-sharded": ((3, 64, 80), (1, 32, 32), "<u2", {"shards": (2, 64, 64)}),
    "bands-gaps-after-1MiB-tiles": ((2, 600, 700), (2, 512, 512), "<f4", {}),
    "bool": ((20, 21), (16, 16), "|b1", {}),
    "gaps-after-1MiB-tiles": ((600, 1100), (512, 512), "<f4", {}),
    "tiles-split-from-1024-chunks": ((1100, 1300), (1024, 1024), "<u2", {}),
    "tiles-split-from-sharded-1536": ((1600, 40), (1536, 32), "<u1", {"shards": (3072, 64)}),
    # uncompressed local chunks are copied from their files (engine/direct.py), not decoded
    "chunk-larger-than-array": ((10, 12), (1000, 1000), "<u2", {}),
    "uncompressed-bands": ((3, 40, 50), (2, 16, 32), "<u2", {"compressors": None}),
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
    bands = len(shape) == 3 and shape[0] > 1
    with tifffile.TiffFile(io.BytesIO(content)) as tif:
        assert all(page.is_tiled for page in tif.pages)
        assert len(tif.pages) == (1 if bands else int(np.prod(shape[:-2])))
        page = tif.pages[0]
        assert (page.tilelength, page.tilewidth) == tile
        assert tif.byteorder == (">" if dtype.startswith(">") else "<")
        if bands:  # one page, the planes its samples stored one after the other
            assert (page.planarconfig, page.samplesperpixel, page.photometric) == (2, shape[0], 1)
            assert page.extrasamples == (0,) * (shape[0] - 1)
            served = page.asarray()
        else:
            served = np.stack([p.asarray() for p in tif.pages]).reshape(shape)
    np.testing.assert_array_equal(served, data.astype(served.dtype))
    furthest, first_tile = opening_reads(content)
    assert furthest + HEAD_GAP <= first_tile, (furthest, first_tile)


def test_each_tile_of_a_band_is_one_chunk_of_its_plane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tile k of sample s, where the file's TileOffsets say it is, is served from one chunk lookup of plane s
    (chunks of 2 planes on 3 bands)."""
    data = (np.arange(3 * 64 * 80, dtype="<u2").reshape(3, 64, 80) * 3)
    _write(tmp_path / "a.zarr", data, (2, 32, 16))
    _, content = _file_bytes(tmp_path / "a.zarr", "array.tiled.tif")
    with tifffile.TiffFile(io.BytesIO(content)) as tif:
        tiles = list(zip(tif.pages[0].dataoffsets, tif.pages[0].databytecounts, strict=True))
    assert len(tiles) == 3 * 2 * 5
    lookups: list[list[tuple[int, ...]]] = []
    fill_targets = ArrayReader.fill_targets

    def counted(reader: ArrayReader, targets: list) -> None:
        lookups.append([coords for coords, _, _ in targets])
        fill_targets(reader, targets)

    monkeypatch.setattr(ArrayReader, "fill_targets", counted)
    engine = Engine.open(str(tmp_path / "a.zarr"))
    try:
        entry = VirtualTree(engine).lookup("array.tiled.tif")
        assert isinstance(entry, FileEntry)
        for index, (offset, count) in enumerate(tiles):
            plane, k = divmod(index, 10)
            row, column = divmod(k, 5)
            lookups.clear()
            out = np.empty(count, np.uint8)
            assert entry.file.open().read_into(offset, out) == count
            assert lookups == [[(plane // 2, row, column)]]
            np.testing.assert_array_equal(out.view("<u2").reshape(32, 16),
                                          data[plane, row * 32:(row + 1) * 32, column * 16:(column + 1) * 16])
    finally:
        engine.close()


@pytest.mark.parametrize("bands", [(), (3,)])
def test_missing_chunks_are_the_fill_value(bands: tuple[int, ...], tmp_path: Path) -> None:
    array = zarr.create_array(str(tmp_path / "a.zarr"), shape=(*bands, 40, 50), chunks=(*(2 for _ in bands), 16, 16),
                              dtype="<f4", fill_value=-5.0)
    written = (*(slice(2, 3) for _ in bands), slice(0, 16), slice(16, 32))
    array[written] = 7.0  # one chunk written (in part), the others absent
    expected = np.full(array.shape, -5.0, np.float32)
    expected[written] = 7.0
    _, content = _file_bytes(tmp_path / "a.zarr", "array.tiled.tif")
    np.testing.assert_array_equal(tifffile.imread(io.BytesIO(content)), expected)


def test_bands_up_to_the_tiff_limit_then_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SamplesPerPixel is a TIFF SHORT: 65535 planes are still bands (from metadata alone, no chunk written);
    past `MAX_BANDS` the planes are pages (shown with a small cap: 65536 pages take long to write)."""
    zarr.create_array(str(tmp_path / "many.zarr"), shape=(65535, 2, 20), chunks=(1000, 2, 20), dtype="|u1")
    engine = Engine.open(str(tmp_path / "many.zarr"))
    try:
        entry = VirtualTree(engine).lookup("array.tiled.tif")
        assert isinstance(entry, FileEntry)
        head = np.empty(entry.file.size - 65535 * 16 * 32, np.uint8)  # header and IFD: the tiles come last
        entry.file.open().read_into(0, head)
        with tifffile.TiffFile(io.BytesIO(head.tobytes())) as tif:
            assert len(tif.pages) == 1 and tif.pages[0].samplesperpixel == 65535
    finally:
        engine.close()
    monkeypatch.setattr(tiled_tiff, "MAX_BANDS", 3)
    for planes, pages in ((3, 1), (4, 4)):
        data = np.arange(planes * 20 * 20, dtype="<u2").reshape(planes, 20, 20)
        _write(tmp_path / f"{planes}.zarr", data, (1, 16, 16))
        _, content = _file_bytes(tmp_path / f"{planes}.zarr", "array.tiled.tif")
        with tifffile.TiffFile(io.BytesIO(content)) as tif:
            assert len(tif.pages) == pages
            np.testing.assert_array_equal(np.concatenate([p.asarray().reshape(-1, 20, 20) for p in tif.pages]), data)


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


# Channel labels as GDAL must read them back: XML's special characters, non-ASCII (GDAL writes UTF-8).
LABELS = ["DAPI", "Cy5 & <dim>", "GFP \u00b5m"]


def _band_pyramid(path: Path) -> list[np.ndarray]:
    """A 3-level OME-Zarr 0.4 image (c, y, x) of 3 named channels written by ome-zarr-py, chunks of one
    channel; returns the levels as stored."""
    data = (np.arange(3 * 200 * 300, dtype=np.uint16).reshape(3, 200, 300) * 7 % 50000)
    window = {"start": 0, "end": 900, "min": 0, "max": 4095}
    channels = [{"label": label, "color": "FFFFFF", "window": window} for label in LABELS]
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(data, group, axes="cyx", fmt=FormatV04(), scale_factors=(2, 4),
                    storage_options={"chunks": (1, 64, 64)}, omero={"channels": channels})
    paths = [d["path"] for d in group.attrs["multiscales"][0]["datasets"]]
    levels = [group[level][...] for level in paths]
    assert [level.shape for level in levels] == [(3, 200, 300), (3, 100, 150), (3, 50, 75)]
    return levels


def test_levels_of_an_ome_image_are_reduced_pages(tmp_path: Path) -> None:
    levels = _pyramid(tmp_path / "image.zarr")
    _, content = _file_bytes(tmp_path / "image.zarr", "s0.tiled.tif")
    with tifffile.TiffFile(io.BytesIO(content)) as tif:
        assert [int(page.subfiletype) for page in tif.pages] == [0, 1, 1]
        assert len(tif.series[0].levels) == 3
        for level, expected in zip(tif.series[0].levels, levels, strict=True):
            np.testing.assert_array_equal(level.asarray(), expected)
    furthest, first_tile = opening_reads(content)  # the overviews' IFDs too
    assert furthest + HEAD_GAP <= first_tile, (furthest, first_tile)
    _, coarser = _file_bytes(tmp_path / "image.zarr", "s1.tiled.tif")  # level 1 has level 2 as its overview
    with tifffile.TiffFile(io.BytesIO(coarser)) as tif:
        assert [page.shape for page in tif.pages] == [levels[1].shape, levels[2].shape]


def test_levels_of_a_band_image_are_reduced_pages_of_bands(tmp_path: Path) -> None:
    levels = _band_pyramid(tmp_path / "image.zarr")
    _, content = _file_bytes(tmp_path / "image.zarr", "s0.tiled.tif")
    with tifffile.TiffFile(io.BytesIO(content)) as tif:
        assert [int(page.subfiletype) for page in tif.pages] == [0, 1, 1]
        for page, expected in zip(tif.pages, levels, strict=True):
            assert (page.planarconfig, page.samplesperpixel, page.tilelength, page.tilewidth) == (2, 3, 64, 64)
            np.testing.assert_array_equal(page.asarray(), expected)


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


def test_gdal_sees_bands_each_with_the_overviews(tmp_path: Path) -> None:
    levels = _band_pyramid(tmp_path / "image.zarr")
    with mounted(tmp_path / "image.zarr", tmp_path / "mnt", tmp_path / "log") as mount:
        path = str(mount.root / "s0.tiled.tif")
        info = gdalinfo_json(path)
        assert info["size"] == [300, 200]
        assert [band.get("description") for band in info["bands"]] == LABELS
        for band in info["bands"]:
            assert band["block"] == [64, 64]
            assert [o["size"] for o in band["overviews"]] == [[150, 100], [75, 50]]
        np.testing.assert_array_equal(gdal_read(path), levels[0])
        for options, expected in ((["-b", "2"], levels[0][1]), (["-ovr", "0", "-b", "3"], levels[1][2]),
                                  (["-ovr", "1", "-b", "1"], levels[2][0])):
            out = tmp_path / "band.tif"
            subprocess.run(["gdal_translate", "-q", *options, path, str(out)], check=True, timeout=120)
            np.testing.assert_array_equal(tifffile.imread(out), expected, err_msg=" ".join(options))


def test_gdal_reads_the_georeference_of_bands_written_by_rioxarray(tmp_path: Path) -> None:
    """A (band, y, x) raster with a CRS, nodata and coordinates written by rioxarray: GDAL reads the tiled
    TIFF's bands with the transform, CRS and nodata rioxarray reads back from the store."""
    import rioxarray  # noqa: F401  (registers the .rio accessor)
    import xarray as xr

    data = (np.arange(3 * 40 * 50, dtype="float32").reshape(3, 40, 50) * 0.5)
    data[:, 0, 0] = -9999
    x = 440720 + 30 + 60 * np.arange(50)
    y = 3751320 - 30 - 60 * np.arange(40)
    array = xr.DataArray(data, dims=("band", "y", "x"), coords={"band": [1, 2, 3], "y": y, "x": x}, name="elev")
    array = array.rio.write_crs("EPSG:32633").rio.write_nodata(-9999.0, encoded=True)
    array.encoding["chunks"] = (2, 16, 32)  # beside the nodata and grid mapping rioxarray put there
    store = tmp_path / "rx.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python on v3 string/consolidation warnings
        array.to_dataset().to_zarr(store, mode="w", consolidated=True)
        reread = xr.open_zarr(store, mask_and_scale=False, decode_coords="all")["elev"]
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = str(mount.root / "elev.tif")  # a map: its N.tif is the tiled file (formats.is_map)
        served = gdalinfo_json(path)
        assert len(served["bands"]) == 3
        assert served["geoTransform"] == pytest.approx(list(reread.rio.transform().to_gdal()), abs=1e-9)
        assert _epsg(path) == f"EPSG:{reread.rio.crs.to_epsg()}"
        assert [band["noDataValue"] for band in served["bands"]] == [reread.rio.nodata] * 3
        assert [band["block"] for band in served["bands"]] == [[32, 16]] * 3
        np.testing.assert_array_equal(gdal_read(path), data)


@pytest.mark.parametrize("case", ["utm-nodata", "lonlat"])
def test_gdal_reads_the_georeference_like_its_own_zarr_driver(case: str, tmp_path: Path) -> None:
    srs = GDAL_CASES[case][0]
    store, data = write_gdal_store(case, tmp_path, (40, 50), creation=("BLOCKSIZE=16,32",))
    reference = gdalinfo_json(str(store))
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = str(mount.root / "geo.tif")  # a map: its N.tif is the tiled file (formats.is_map)
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


@pytest.mark.skipif(shutil.which("tiffinfo") is None, reason="libtiff-tools: scripts/install_clients.sh")
def test_libtiff_lists_the_bands_and_their_reduced_pages(tmp_path: Path) -> None:
    """The structure only: libtiff 4.5's tiffcp miscopies separate-planar tiled files (GDAL's own too), so the
    pixels are GDAL's (through libtiff) in `test_gdal_sees_bands_each_with_the_overviews`."""
    _band_pyramid(tmp_path / "image.zarr")
    with mounted(tmp_path / "image.zarr", tmp_path / "mnt", tmp_path / "log") as mount:
        info = subprocess.run(["tiffinfo", str(mount.root / "s0.tiled.tif")], check=True, capture_output=True,
                              text=True, timeout=120)
    # libtiff does not know GDAL's own tags (GDAL registers them) and warns of GDAL_METADATA, as in GDAL's files.
    assert info.stderr.splitlines() == ["TIFFReadDirectory: Warning, Unknown field with tag 42112 (0xa480) "
                                        "encountered."]
    assert info.stdout.count("Tile Width: 64 Tile Length: 64") == 3
    assert info.stdout.count("reduced-resolution image") == 2
    assert info.stdout.count("Samples/Pixel: 3") == 3
    assert info.stdout.count("Planar Configuration: separate image planes") == 3
    assert info.stdout.count("Extra Samples: 2<unspecified, unspecified>") == 3


@pytest.mark.parametrize(("shape", "chunks"), [((40000, 40000), (1000, 1000)),
                                               ((3, 40000, 40000), (1, 1000, 1000))])
def test_past_4_gib_the_file_is_a_bigtiff(shape: tuple[int, ...], chunks: tuple[int, ...], tmp_path: Path) -> None:
    """From metadata alone (no chunk is written): a 6.4 GB array (or 3 bands of it, 19 GB) gives a BigTIFF
    whose IFD tifffile reads."""
    zarr.create_array(str(tmp_path / "big.zarr"), shape=shape, chunks=chunks, dtype="<f4")
    engine = Engine.open(str(tmp_path / "big.zarr"))
    try:
        entry = VirtualTree(engine).lookup("array.tiled.tif")
        assert isinstance(entry, FileEntry)
        head = np.empty(1 << 16, np.uint8)
        entry.file.open().read_into(0, head)
        assert head[:4].tobytes() == b"II+\0" and entry.file.size > np.prod(shape) * 4
        with tifffile.TiffFile(io.BytesIO(head.tobytes())) as tif:
            page = tif.pages[0]
            assert tif.is_bigtiff and page.shape == shape and page.samplesperpixel == np.prod(shape[:-2])
            assert (page.tilelength, page.tilewidth) == (1008, 1008)  # 1000 rounded up to 16
    finally:
        engine.close()
