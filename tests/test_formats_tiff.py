"""TIFF layouts: assemble header + a.tobytes() + trailer, read it back with tifffile and GDAL."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tifffile
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrfs.formats.base import Layout
from budget import examples
from zarrfs.formats.tiff import MAX_PAGES, _SparseFile, bigtiff_layout, tiff_layout

# A tifffile warning (RGB guess, truncation, ...) would mean a file we did not intend.
pytestmark = pytest.mark.filterwarnings("error")

SHAPES: list[tuple[tuple[int, ...], tuple[str | None, ...] | None]] = [
    ((), None),
    ((7,), None),
    ((4, 5), None),
    ((1, 1), None),
    ((3, 4, 5), None),
    ((2, 4, 3), None),  # width 3: must stay grayscale, not become RGB
    ((3, 4, 5), ("c", "y", "x")),
    ((2, 3, 4, 5), ("t", "z", "y", "x")),
    ((2, 3, 4, 5), ("z", "c", "y", "x")),
    ((2, 3, 4, 5), ("c", "z", "y", "x")),
    ((2, 1, 3, 2, 3), ("t", "z", "c", "y", "x")),
    ((2, 2, 2, 2, 3, 4), None),
]

_MULTIBYTE = ["i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"]
DTYPES = ["?", "i1", "u1"] + [order + code for code in _MULTIBYTE for order in "<>"]

GiB = 2**30


def sample(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Deterministic values that differ per element and exercise both bytes of 16-bit types."""
    n = math.prod(shape)
    values = (np.arange(n, dtype=np.int64) * 7919) % 65000 - 300
    if dtype.kind == "b":
        values = values % 2
    elif dtype.kind == "c":
        values = values + 1j * (values % 97)
    return values.astype(dtype).reshape(shape)


def pages_of(a: np.ndarray) -> np.ndarray:
    """The array as TIFF pages: (planes, height, width); bool is read back as uint8."""
    plane = ((1, 1) + a.shape)[-2:]
    values = a.astype(np.uint8) if a.dtype.kind == "b" else a
    return values.reshape((-1,) + plane)


def assemble(tmp_path: Path, layout: Layout, a: np.ndarray, name: str = "a.tif") -> Path:
    path = tmp_path / name
    path.write_bytes(layout.header + a.tobytes() + layout.trailer)
    return path


def check_pages(tif: tifffile.TiffFile, layout: Layout, n_pages: int, plane_nbytes: int) -> None:
    """One strip per page, NewSubfileType 0, strips back to back in the region in page order."""
    assert len(tif.pages) == n_pages
    for index, page in enumerate(tif.pages):
        assert page.tags["NewSubfileType"].value == 0
        assert page.rowsperstrip == page.imagelength
        assert page.dataoffsets == (len(layout.header) + index * plane_nbytes,)
        assert page.databytecounts == (plane_nbytes,)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "names"), SHAPES)
def test_roundtrip(
    tmp_path: Path, shape: tuple[int, ...], names: tuple[str | None, ...] | None, dtype: str
) -> None:
    a = sample(shape, np.dtype(dtype))
    layout = tiff_layout(shape, a.dtype, names)
    assert layout is not None
    assert layout.data_nbytes == a.nbytes
    path = assemble(tmp_path, layout, a)
    assert layout.size == path.stat().st_size

    expected = pages_of(a)
    with tifffile.TiffFile(path) as tif:
        assert tif.byteorder == (">" if a.dtype.str[0] == ">" else "<")
        check_pages(tif, layout, len(expected), expected[0].nbytes)
        assert math.prod(tif.series[0].shape) == expected.size
        if a.ndim >= 3:
            assert tif.imagej_metadata["images"] == len(expected)
        else:
            assert tif.imagej_metadata is None
        data = tif.asarray()
    assert data.dtype == expected.dtype.newbyteorder("=")
    np.testing.assert_array_equal(data.reshape(expected.shape), expected)
    assert bigtiff_layout(shape, a.dtype, names) is None  # under 4 GiB one file serves all


@pytest.mark.parametrize(
    ("shape", "names", "counts", "axes"),
    [
        ((3, 4, 5), None, {"slices": 3}, "ZYX"),
        ((3, 4, 5), ("c", "y", "x"), {"channels": 3}, "CYX"),
        ((3, 4, 5), ("t", "y", "x"), {"frames": 3}, "TYX"),
        ((2, 3, 4, 5), ("t", "z", "y", "x"), {"frames": 2, "slices": 3}, "TZYX"),
        ((2, 3, 4, 5), ("T", "Channel", "y", "x"), {"frames": 2, "channels": 3}, "TCYX"),
        ((2, 3, 4, 5), ("z", "c", "y", "x"), {"slices": 2, "channels": 3}, "ZCYX"),
        (
            (2, 3, 2, 4, 5),
            ("time", "z", "c", "y", "x"),
            {"frames": 2, "slices": 3, "channels": 2},
            "TZCYX",
        ),
        # Not in ImageJ's T, Z, C order, unknown, missing or repeated: all slices.
        ((2, 3, 4, 5), ("c", "z", "y", "x"), {"slices": 6}, "ZYX"),
        ((2, 3, 4, 5), ("z", "t", "y", "x"), {"slices": 6}, "ZYX"),
        ((2, 3, 4, 5), ("z", None, "y", "x"), {"slices": 6}, "ZYX"),
        ((2, 3, 4, 5), ("t", "t", "y", "x"), {"slices": 6}, "ZYX"),
        ((2, 3, 4, 5), ("a", "b", "y", "x"), {"slices": 6}, "ZYX"),
        ((2, 2, 2, 2, 4, 5), None, {"slices": 16}, "ZYX"),
    ],
)
def test_imagej_hyperstack(
    tmp_path: Path,
    shape: tuple[int, ...],
    names: tuple[str | None, ...] | None,
    counts: dict[str, int],
    axes: str,
) -> None:
    a = sample(shape, np.dtype("u2"))
    layout = tiff_layout(shape, a.dtype, names)
    assert layout is not None
    with tifffile.TiffFile(assemble(tmp_path, layout, a)) as tif:
        meta = tif.imagej_metadata
        series = tif.series[0]
        data = series.asarray()
    assert meta["ImageJ"] and meta["hyperstack"] is True
    assert meta["images"] == math.prod(shape[:-2])
    assert {k: meta[k] for k in ("frames", "slices", "channels") if k in meta} == counts
    assert series.axes == axes
    # ImageJ's plane order (channel fastest) is C order of the array.
    np.testing.assert_array_equal(data.reshape(shape), a)


@pytest.mark.parametrize(
    "dtype",
    [
        np.dtype([("a", "u1"), ("b", "<f4")]),
        np.dtype(("u1", (2,))),
        np.dtype("U3"),
        np.dtype("S4"),
        np.dtype("V4"),
        np.dtype("M8[ns]"),
        np.dtype("m8[s]"),
        np.dtype(object),
        np.dtype(np.longdouble) if np.dtype(np.longdouble).itemsize > 8 else np.dtype("V16"),
        np.dtype(np.clongdouble) if np.dtype(np.clongdouble).itemsize > 16 else np.dtype("V32"),
    ],
    ids=str,
)
def test_unsupported_dtype(dtype: np.dtype) -> None:
    assert tiff_layout((3, 4, 5), dtype) is None
    assert bigtiff_layout((300, 4096, 4096), dtype) is None


@pytest.mark.parametrize(
    "shape", [(0,), (0, 5), (3, 0, 4), (2, 3, 0), (MAX_PAGES + 1, 1, 1), (2**32,)]
)
def test_unsupported_shape(shape: tuple[int, ...]) -> None:
    assert tiff_layout(shape, np.dtype("u1")) is None
    assert bigtiff_layout(shape, np.dtype("u1")) is None


def test_max_pages_still_served() -> None:
    layout = tiff_layout((MAX_PAGES, 1, 1), np.dtype("u1"))
    assert layout is not None and layout.data_nbytes == MAX_PAGES


def test_dimension_names_must_match_ndim() -> None:
    with pytest.raises(ValueError, match="dimension names"):
        tiff_layout((3, 4, 5), np.dtype("u1"), ("y", "x"))


# --- past 4 GiB: computed without any pixel data; read back through sparse files ---

BIG_SHAPE = (300, 4096, 4096)  # 4.7 GiB of uint8
PLANE = 4096 * 4096


def write_sparse(path: Path, layout: Layout) -> None:
    """A file of layout.size bytes holding only header and trailer (holes elsewhere)."""
    with open(path, "wb") as f:
        f.truncate(layout.size)
        f.write(layout.header)
        f.seek(layout.size - len(layout.trailer))
        f.write(layout.trailer)
    if os.stat(path).st_blocks * 512 > 64 * 2**20:
        pytest.skip("temporary directory does not keep files sparse")


def mark_plane(path: Path, layout: Layout, plane: int, row: int) -> np.ndarray:
    """Write one recognisable row into the (virtual) region and return it."""
    marker = (np.arange(4096) % 251 + 1).astype(np.uint8)
    with open(path, "r+b") as f:
        f.seek(len(layout.header) + plane * PLANE + row * 4096)
        f.write(marker.tobytes())
    return marker


def test_big_imagej_single_ifd(tmp_path: Path) -> None:
    layout = tiff_layout(BIG_SHAPE, np.dtype("u1"), ("z", "y", "x"))
    assert layout is not None
    assert layout.data_nbytes == 300 * PLANE and layout.size > 4 * GiB
    assert len(layout.header) < 1024 and layout.trailer == b""

    path = tmp_path / "big.tif"
    write_sparse(path, layout)
    marker = mark_plane(path, layout, 299, 17)
    with tifffile.TiffFile(path) as tif:
        assert not tif.is_bigtiff
        assert len(tif.pages) == 1  # ImageJ's convention: IFD0 only
        assert tif.imagej_metadata["images"] == 300
        assert tif.pages[0].dataoffsets == (len(layout.header),)
        assert tif.series[0].shape == BIG_SHAPE
    np.testing.assert_array_equal(tifffile.memmap(path)[299, 17], marker)


def test_big_bigtiff_one_ifd_per_plane(tmp_path: Path) -> None:
    layout = bigtiff_layout(BIG_SHAPE, np.dtype("u1"), ("z", "y", "x"))
    assert layout is not None
    assert len(layout.header) < 1024 and len(layout.trailer) < 300 * 512

    path = tmp_path / "big.btf"
    write_sparse(path, layout)
    marker = mark_plane(path, layout, 299, 17)
    with tifffile.TiffFile(path) as tif:
        assert tif.is_bigtiff
        check_pages(tif, layout, 300, PLANE)
        assert tif.series[0].shape == BIG_SHAPE
    np.testing.assert_array_equal(tifffile.memmap(path)[299, 17], marker)


def test_big_dtype_imagej_cannot_show_gets_bigtiff_only() -> None:
    dtype = np.dtype("<u8")  # 37.5 GiB; ImageJ's single-IFD file would help nobody
    assert tiff_layout(BIG_SHAPE, dtype) is None
    layout = bigtiff_layout(BIG_SHAPE, dtype)
    assert layout is not None and layout.data_nbytes == 300 * PLANE * 8


def test_single_plane_past_4gib_is_bigtiff_only() -> None:
    shape = (100_000, 50_000)  # 4.66 GiB in one plane: StripByteCounts needs 64 bits
    assert tiff_layout(shape, np.dtype("u1")) is None
    layout = bigtiff_layout(shape, np.dtype("u1"))
    assert layout is not None and layout.trailer == b"" and len(layout.header) < 1024


def test_100_gb_layout_is_small() -> None:
    """Metadata only, never the data: the IFDs of 1600 pages fit in a few hundred KiB. How long building
    them takes is bench/bench_layout.py's (milliseconds)."""
    shape = (1600, 8192, 8192)  # 100 GiB uint8
    classic = tiff_layout(shape, np.dtype("u1"))
    big = bigtiff_layout(shape, np.dtype("u1"))
    assert classic is not None and big is not None
    assert classic.data_nbytes == big.data_nbytes == 100 * GiB
    assert len(classic.header) + len(classic.trailer) < 1024
    assert len(big.trailer) < 1600 * 512


# --- GDAL reads what we assemble ---

GDALINFO = shutil.which("gdalinfo")
needs_gdal = pytest.mark.skipif(GDALINFO is None, reason="gdalinfo (gdal-bin) not installed")


def gdalinfo(path: Path, *options: str) -> dict:
    assert GDALINFO is not None
    args = [GDALINFO, "-json", *options, str(path)]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


@needs_gdal
@pytest.mark.parametrize(
    ("dtype", "gdal_type"),
    [("<f4", "Float32"), (">f4", "Float32"), ("<i2", "Int16"), (">i2", "Int16")],
)
def test_gdal_reads_2d(tmp_path: Path, dtype: str, gdal_type: str) -> None:
    a = sample((30, 50), np.dtype(dtype))
    layout = tiff_layout(a.shape, a.dtype)
    assert layout is not None
    info = gdalinfo(assemble(tmp_path, layout, a), "-mm")  # -mm: GDAL reads every pixel
    assert info["size"] == [50, 30]
    (band,) = info["bands"]
    assert band["type"] == gdal_type
    assert (band["computedMin"], band["computedMax"]) == (a.min(), a.max())


@needs_gdal
def test_gdal_sees_every_page_of_bigtiff(tmp_path: Path) -> None:
    layout = bigtiff_layout(BIG_SHAPE, np.dtype("u1"))
    assert layout is not None
    path = tmp_path / "big.btf"
    write_sparse(path, layout)
    info = gdalinfo(path)  # structure only: the sparse region is never read
    assert info["size"] == [4096, 4096]
    subdatasets = info["metadata"]["SUBDATASETS"]
    assert len([k for k in subdatasets if k.endswith("_NAME")]) == 300  # pages, not overviews


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.binary(max_size=40)), max_size=30),
       st.lists(st.tuples(st.integers(0, 260), st.integers(0, 260)), min_size=1, max_size=10))
def test_sparse_file_reads_back_what_was_written_last(writes: list[tuple[int, bytes]],
                                                     reads: list[tuple[int, int]]) -> None:
    """The sink tifffile writes into answers every range as a plain byte array written in the same order
    would: later writes win, never-written bytes are 0."""
    sink, model = _SparseFile(), bytearray()
    for position, data in writes:
        sink.seek(position)
        sink.write(data)
        model.extend(bytes(max(0, position + len(data) - len(model))))
        model[position:position + len(data)] = data
    assert sink.size == max([0, *(p + len(d) for p, d in writes)])
    for a, b in reads:
        start, stop = min(a, b), max(a, b)
        expected = bytes(model[start:stop]).ljust(stop - start, b"\0")
        assert sink.getrange(start, stop) == expected
        assert sink.only_zeros_within(start, stop) == (expected.count(0) == len(expected))
