""".tif with the meaning: ImageJ plane order, calibration, channel display and GeoTIFF tags from Semantics.

Files are assembled from the layout exactly as a mount serves them (header,
then the region through `Layout.read_into`, then trailer) and opened in
tifffile, stock ImageJ and GDAL.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import tifffile
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from clients import gdal_available, gdal_read, gdalinfo_json, imagej_available, imagej_describe
from test_formats_tiff import write_sparse
from zarrfs.conventions.semantics import Axis, Channel, GeoReference, Semantics
from zarrfs.formats.base import Layout, PlanePermutedLayout
from zarrfs.formats.tiff import bigtiff_layout, tiff_layout
from zarrfs.formats.tifftags import crs_kind, gdal_nodata_text

pytestmark = pytest.mark.filterwarnings("error")

GiB = 2**30
KIND = {"t": "time", "c": "channel", "z": "space", "o": "other"}


def axes_for(names: str, shape: tuple[int, ...], scales: dict[str, float] | None = None) -> tuple[Axis, ...]:
    """Axes named by letters ("tczyx"); y and x are space, the rest by KIND."""
    scales = scales or {}
    return tuple(Axis(n, "space" if n in "yx" else KIND[n], scale=scales.get(n)) for n in names)


def values(shape: tuple[int, ...], dtype: str = "u2") -> np.ndarray:
    """Distinct, plane-recognisable values (both bytes of 16-bit samples vary)."""
    return ((np.arange(math.prod(shape), dtype=np.int64) * 7919 + 13) % 65521).astype(dtype).reshape(shape)


def file_region(layout: Layout, a: np.ndarray) -> np.ndarray:
    """The region as a mount serves it: `read_into` over the array's C-order bytes."""
    flat = np.frombuffer(a.tobytes(), np.uint8)

    def read_region(start: int, stop: int, target: np.ndarray) -> None:
        assert 0 <= start <= stop <= flat.size and len(target) == stop - start
        target[:] = flat[start:stop]

    out = np.empty(layout.size, np.uint8)
    assert layout.read_into(0, out, read_region) == layout.size
    return out


def write(tmp_path: Path, layout: Layout, a: np.ndarray, name: str = "a.tif") -> Path:
    path = tmp_path / name
    path.write_bytes(file_region(layout, a).tobytes())
    return path


def imagej_order(a: np.ndarray, names: str) -> np.ndarray:
    """The array with its leading axes as ImageJ's frames, slices, channels (numpy's answer)."""
    lead = names[:-2]
    groups = [[i for i, n in enumerate(lead) if KIND[n] == kind] for kind in ("time", "space", "channel")]
    others = [i for i, n in enumerate(lead) if KIND[n] == "other"]
    groups[1] = sorted(groups[1] + others)  # unclassified axes are slices, in array order
    order = [i for g in groups for i in g]
    moved = a.transpose(order + [a.ndim - 2, a.ndim - 1])
    sizes = [math.prod(a.shape[i] for i in g) for g in groups]
    return moved.reshape(sizes + list(a.shape[-2:]))


# ------------------------------------------------------------- plane order

ORDERS = ["tczyx", "czyx", "zcyx", "tzyx", "ctyx", "zctyx", "ctzyx", "tcyx", "oczyx", "zoyx", "tzcyx"]


@pytest.mark.parametrize("names", ORDERS)
def test_planes_in_imagej_order(tmp_path: Path, names: str) -> None:
    shape = (2, 3, 4)[: len(names) - 2] + (5, 6)
    a = values(shape)
    layout = tiff_layout(shape, a.dtype, None, Semantics(axes=axes_for(names, shape)))
    assert layout is not None and layout.size == write(tmp_path, layout, a).stat().st_size
    expected = imagej_order(a, names)
    frames, slices, channels = expected.shape[:3]
    # Leading axes already in T, Z, C order need no permutation: the hot path stays a plain Layout.
    assert isinstance(layout, PlanePermutedLayout) == (not np.array_equal(expected.ravel(), a.ravel()))
    with tifffile.TiffFile(tmp_path / "a.tif") as tif:
        meta = tif.imagej_metadata
        assert (meta.get("frames", 1), meta.get("slices", 1), meta.get("channels", 1)) == (frames, slices, channels)
        assert meta["images"] == frames * slices * channels
        data = tif.asarray()
    np.testing.assert_array_equal(data.reshape(expected.shape), expected)


def test_identity_order_is_a_plain_layout() -> None:
    shape = (2, 3, 4, 5, 6)
    layout = tiff_layout(shape, np.dtype("u2"), None, Semantics(axes=axes_for("tzcyx", shape)))
    assert type(layout) is Layout
    layout = tiff_layout(shape, np.dtype("u2"), None, Semantics(axes=axes_for("tczyx", shape)))
    assert type(layout) is PlanePermutedLayout


@settings(max_examples=examples(150), deadline=None)
@given(
    names=st.sampled_from(["tczyx", "czyx", "zcyx", "ctyx", "ctzyx", "zctyx"]),
    lead=st.lists(st.integers(1, 4), min_size=3, max_size=3),
    plane=st.tuples(st.integers(1, 5), st.integers(1, 7)),
    dtype=st.sampled_from(["u1", "<u2", ">i2", "<f8"]),
    data=st.data(),
)
def test_permuted_reads_match_numpy(
    names: str, lead: list[int], plane: tuple[int, int], dtype: str, data: st.DataObject
) -> None:
    """Any read of the file (header, region, trailer, across plane edges) equals numpy's permuted bytes."""
    shape = tuple(lead[: len(names) - 2]) + plane
    a = values(shape, dtype)
    layout = tiff_layout(shape, a.dtype, None, Semantics(axes=axes_for(names, shape)))
    assert layout is not None
    expected = np.frombuffer(layout.header + imagej_order(a, names).tobytes() + layout.trailer, np.uint8)
    flat = np.frombuffer(a.tobytes(), np.uint8)
    calls: list[tuple[int, int]] = []

    def read_region(start: int, stop: int, target: np.ndarray) -> None:
        calls.append((start, stop))
        target[:] = flat[start:stop]

    for _ in range(5):
        offset = data.draw(st.integers(0, layout.size + 3))
        size = data.draw(st.integers(0, layout.size + 3))
        out = np.full(size, 0xAA, np.uint8)
        n = layout.read_into(offset, out, read_region)
        assert n == max(0, min(size, layout.size - offset))
        np.testing.assert_array_equal(out[:n], expected[offset:offset + n])
    assert all(0 <= start < stop <= a.nbytes for start, stop in calls)  # no empty or stray region reads


def test_permuted_layout_merges_adjacent_planes() -> None:
    # File planes 0,1 are array planes 2,3; file plane 2 is array plane 0; 3 is 1.
    layout = PlanePermutedLayout(b"H", 40, b"T", plane_nbytes=10, plane_order=(2, 3, 0, 1))
    region = np.arange(40, dtype=np.uint8)
    calls: list[tuple[int, int]] = []

    def read_region(start: int, stop: int, target: np.ndarray) -> None:
        calls.append((start, stop))
        target[:] = region[start:stop]

    out = np.empty(42, np.uint8)
    assert layout.read_into(0, out, read_region) == 42
    assert calls == [(20, 40), (0, 20)]  # two runs, not four planes
    np.testing.assert_array_equal(out[1:41], np.concatenate([region[20:], region[:20]]))
    assert bytes(out[[0, 41]]) == b"HT"


@pytest.mark.parametrize(
    ("nbytes", "planes", "order"), [(40, 10, (0, 1, 2)), (30, 10, (0, 0, 1)), (30, 10, (0, 1, 3))]
)
def test_permuted_layout_rejects_what_is_not_a_permutation(nbytes: int, planes: int, order: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        PlanePermutedLayout(b"", nbytes, plane_nbytes=planes, plane_order=order)


# --------------------------------------------------- unchanged without axes


@pytest.mark.parametrize(
    ("shape", "names"), [((2, 3, 4, 5), ("c", "z", "y", "x")), ((2, 3, 4, 5), ("t", "z", "y", "x")), ((4, 5), None)]
)
def test_no_axes_is_todays_file(shape: tuple[int, ...], names: tuple[str, ...] | None) -> None:
    before = tiff_layout(shape, np.dtype("u2"), names)
    assert tiff_layout(shape, np.dtype("u2"), names, Semantics()) == before
    assert tiff_layout(shape, np.dtype("u2"), names, None) == before
    # Axes of another length describe another array: ignored, not an error.
    wrong = Semantics(axes=axes_for("yx", (4, 5))) if len(shape) != 2 else Semantics(axes=axes_for("zyx", (1, 4, 5)))
    assert tiff_layout(shape, np.dtype("u2"), names, wrong) == before


# ------------------------------------------------------------ calibration

OME_SHAPE = (2, 3, 4, 5, 6)  # t, c, z, y, x


def ome_semantics(**overrides: object) -> Semantics:
    axes = (
        Axis("t", "time", "second", 2.5),
        Axis("c", "channel"),
        Axis("z", "space", "micrometer", 0.5, 1.0),
        Axis("y", "space", "micrometer", 0.25, 2.0),
        Axis("x", "space", "micrometer", 0.25, -3.0),
    )
    channels = (
        Channel("DAPI", "0000FF", (0.0, 1000.0)),
        Channel("GFP", "00FF00", (10.0, 2000.0)),
        Channel("mCherry", "FF00FF", (20.0, 3000.0)),
    )
    fields: dict[str, object] = {"axes": axes, "channels": channels, **overrides}
    return Semantics(**fields)  # type: ignore[arg-type]


def test_tifffile_reads_calibration(tmp_path: Path) -> None:
    a = values(OME_SHAPE)
    layout = tiff_layout(OME_SHAPE, a.dtype, None, ome_semantics())
    assert layout is not None
    with tifffile.TiffFile(write(tmp_path, layout, a)) as tif:
        meta = tif.imagej_metadata
        page = tif.pages[0]
        series = tif.series[0]
        assert series.axes == "TZCYX" and series.shape == (2, 4, 3, 5, 6)
        assert page.tags["ResolutionUnit"].value == 1
        assert page.get_resolution() == (4.0, 4.0)  # pixels per micron
        np.testing.assert_array_equal(series.asarray(), a.transpose(0, 2, 1, 3, 4))
    assert meta["unit"] == "micron" and meta["spacing"] == 0.5
    assert meta["finterval"] == 2.5 and meta["tunit"] == "sec"
    assert (meta["xorigin"], meta["yorigin"], meta["zorigin"]) == (12.0, -8.0, -2.0)  # -origin/scale
    assert meta["mode"] == "composite"
    assert meta["Labels"] == ["DAPI", "GFP", "mCherry"] * 8  # one per plane, channel fastest
    assert meta["Ranges"] == (0.0, 1000.0, 10.0, 2000.0, 20.0, 3000.0)
    assert [tuple(lut[:, 255]) for lut in meta["LUTs"]] == [(0, 0, 255), (0, 255, 0), (255, 0, 255)]
    assert [tuple(lut[:, 0]) for lut in meta["LUTs"]] == [(0, 0, 0)] * 3


@pytest.mark.parametrize(
    ("ome", "imagej"),
    [("micrometer", "micron"), ("nanometer", "nm"), ("millimeter", "mm"), ("meter", "m"), ("angstrom", "angstrom")],
)
def test_length_units(tmp_path: Path, ome: str, imagej: str) -> None:
    shape = (3, 4, 5)
    axes = tuple(Axis(n, "space", ome, 2.0) for n in "zyx")
    a = values(shape)
    layout = tiff_layout(shape, a.dtype, None, Semantics(axes=axes))
    assert layout is not None
    with tifffile.TiffFile(write(tmp_path, layout, a)) as tif:
        assert tif.imagej_metadata["unit"] == imagej
        assert tif.pages[0].get_resolution() == (0.5, 0.5)


def test_2d_with_pixel_size_gets_a_description(tmp_path: Path) -> None:
    axes = (Axis("y", "space", "micrometer", 0.5), Axis("x", "space", "nanometer", 100.0))
    a = values((4, 5))
    layout = tiff_layout(a.shape, a.dtype, None, Semantics(axes=axes))
    assert layout is not None
    with tifffile.TiffFile(write(tmp_path, layout, a)) as tif:
        meta = tif.imagej_metadata
        assert tif.pages[0].get_resolution() == (0.01, 2.0)
    assert (meta["unit"], meta["yunit"]) == ("nm", "micron")


def test_unusable_calibration_is_left_out(tmp_path: Path) -> None:
    axes = (
        Axis("t", "time", "second\nmode=color", 0.0),
        Axis("z", "space", "micrometer", float("nan"), 3.0),
        Axis("y", "space", "bad\\unit", -0.5, 1.0),
        Axis("x", "space", "\u00c5ngstr\u00f6m", 2.0, float("inf")),
    )
    a = values((2, 3, 4, 5))
    layout = tiff_layout(a.shape, a.dtype, None, Semantics(axes=axes))
    assert layout is not None
    with tifffile.TiffFile(write(tmp_path, layout, a)) as tif:
        meta = tif.imagej_metadata
        assert tif.pages[0].get_resolution() == (0.5, 1.0)
    assert (meta["frames"], meta["slices"], meta["mode"]) == (2, 3, "grayscale")
    # z keeps its own unit; x's unit cannot be written and is not borrowed from z.
    calibration = {"unit", "yunit", "zunit", "spacing", "finterval", "tunit", "xorigin", "yorigin", "zorigin"}
    assert {k: meta[k] for k in calibration & meta.keys()} == {"zunit": "micron"}


@pytest.mark.parametrize("dtype", ["<u4", ">f8", "<c8"])
def test_dtypes_imagej_cannot_show_keep_the_description(tmp_path: Path, dtype: str) -> None:
    a = values(OME_SHAPE, dtype)
    layout = tiff_layout(OME_SHAPE, a.dtype, None, ome_semantics())
    assert layout is not None
    with tifffile.TiffFile(write(tmp_path, layout, a)) as tif:
        assert tif.imagej_metadata["spacing"] == 0.5 and tif.imagej_metadata["Labels"][:3] == ["DAPI", "GFP", "mCherry"]
        np.testing.assert_array_equal(tif.series[0].asarray(), a.transpose(0, 2, 1, 3, 4))


def test_partial_channel_hints(tmp_path: Path) -> None:
    # One channel without colour or window: no LUTs, no Ranges (ImageJ pairs them by position).
    channels = (Channel("a", "FF0000", (0.0, 1.0)), Channel(None, None, None), Channel("c", "0000FF", (0.0, 1.0)))
    a = values(OME_SHAPE)
    layout = tiff_layout(OME_SHAPE, a.dtype, None, ome_semantics(channels=channels))
    assert layout is not None
    with tifffile.TiffFile(write(tmp_path, layout, a)) as tif:
        meta = tif.imagej_metadata
    assert meta["mode"] == "composite" and "LUTs" not in meta and "Ranges" not in meta
    assert meta["Labels"][:3] == ["a", "", "c"]


# ------------------------------------------------------------- past 4 GiB

BIG = (2, 3, 50, 4096, 4096)  # t, c, z, y, x uint8: 4.7 GiB
PLANE = 4096 * 4096


def big_semantics() -> Semantics:
    axes = (Axis("t", "time", "second", 2.0), Axis("c", "channel"), Axis("z", "space", "micrometer", 1.5),
            Axis("y", "space", "micrometer", 0.5), Axis("x", "space", "micrometer", 0.5))
    geo = GeoReference((100.0, 0.5, 0.0, 200.0, 0.0, -0.5), epsg=32633)
    channels = (Channel("a", "FF0000"), Channel("b", "00FF00"), Channel("c", "0000FF"))
    return Semantics(axes=axes, channels=channels, geo=geo)


def mark_array_plane(path: Path, layout: Layout, array_plane: int) -> np.ndarray:
    """Write a row where the layout serves array plane `array_plane`; return the row."""
    assert isinstance(layout, PlanePermutedLayout)
    file_plane = layout.plane_order.index(array_plane)
    marker = (np.arange(4096) % 251 + 1).astype(np.uint8)
    with open(path, "r+b") as f:
        f.seek(len(layout.header) + file_plane * PLANE + 17 * 4096)
        f.write(marker.tobytes())
    return marker


def test_big_imagej_form_has_calibration_and_imagej_order(tmp_path: Path) -> None:
    layout = tiff_layout(BIG, np.dtype("u1"), None, big_semantics())
    assert isinstance(layout, PlanePermutedLayout) and layout.trailer == b""
    assert layout.size > 4 * GiB and len(layout.header) < 8192  # with 3 LUTs (768 bytes each) and 300 labels
    path = tmp_path / "big.tif"
    write_sparse(path, layout)
    # Array plane (t=1, c=2, z=7) must appear at ImageJ's (t=1, z=7, c=2).
    marker = mark_array_plane(path, layout, np.ravel_multi_index((1, 2, 7), BIG[:3]))
    with tifffile.TiffFile(path) as tif:
        assert not tif.is_bigtiff and len(tif.pages) == 1
        meta = tif.imagej_metadata
        assert (meta["frames"], meta["slices"], meta["channels"]) == (2, 50, 3)
        assert meta["spacing"] == 1.5 and meta["unit"] == "micron" and meta["finterval"] == 2.0
        assert meta["Labels"][:4] == ["a", "b", "c", "a"]
        assert meta["mode"] == "composite" and [tuple(lut[:, 255]) for lut in meta["LUTs"]] == [
            (255, 0, 0), (0, 255, 0), (0, 0, 255)]
        assert tif.pages[0].get_resolution() == (2.0, 2.0)
        assert tif.pages[0].tags["ModelPixelScaleTag"].value == (0.5, 0.5, 0.0)
    np.testing.assert_array_equal(tifffile.memmap(path)[1, 7, 2, 17], marker)


def test_big_bigtiff_form_has_calibration_and_geotiff_on_every_page(tmp_path: Path) -> None:
    layout = bigtiff_layout(BIG, np.dtype("<u2"), None, big_semantics())  # 9.4 GiB
    assert isinstance(layout, PlanePermutedLayout)
    path = tmp_path / "big.btf"
    write_sparse(path, layout)
    with tifffile.TiffFile(path) as tif:
        assert tif.is_bigtiff and len(tif.pages) == 300
        assert tif.imagej_metadata["spacing"] == 1.5
        for index in (0, 1, 299):
            page = tif.pages[index]
            assert page.dataoffsets == (len(layout.header) + index * PLANE * 2,)
            assert page.tags["GeoKeyDirectoryTag"].value[-4:] == (3072, 0, 1, 32633)
            assert page.get_resolution() == (2.0, 2.0)


def test_classic_limit_counts_the_extra_tags() -> None:
    # 256 planes filling 4 GiB up to exactly the 512 bytes per page the plain file may use.
    shape = (256, 32767, 512)
    geo = Semantics(geo=GeoReference((0.0, 1.0, 0.0, 0.0, 0.0, -1.0), epsg=4326), nodata=0.0)
    plain = tiff_layout(shape, np.dtype("u1"))
    assert plain is not None and plain.size < 2**32 and len(plain.trailer) > 0  # one IFD per plane
    assert bigtiff_layout(shape, np.dtype("u1")) is None
    # GeoTIFF tags on every page no longer fit: ImageJ's single-IFD form and a BigTIFF instead.
    truncated = tiff_layout(shape, np.dtype("u1"), None, geo)
    assert truncated is not None and truncated.trailer == b""
    assert bigtiff_layout(shape, np.dtype("u1"), None, geo) is not None


# ----------------------------------------------------------------- GeoTIFF

GEO_CASES = {
    "4326": (GeoReference((10.0, 0.5, 0.0, 50.0, 0.0, -0.25), epsg=4326), 4326),
    "32633": (GeoReference((500000.0, 10.0, 0.0, 5000000.0, 0.0, -10.0), epsg=32633), 32633),
    "rotated": (GeoReference((500000.0, 8.0, 6.0, 5000000.0, 6.0, -8.0), epsg=32633), 32633),  # 10 m, 36.87°
    "south-up": (GeoReference((10.0, 0.5, 0.0, 40.0, 0.0, 0.25), epsg=4326), 4326),
    "wkt, no code": (GeoReference((1.0, 2.0, 0.0, 3.0, 0.0, -2.0), crs_wkt='PROJCS["local"]'), None),
}


@pytest.mark.parametrize("case", GEO_CASES)
def test_tifffile_reads_geotiff_tags(tmp_path: Path, case: str) -> None:
    geo, epsg = GEO_CASES[case]
    a = values((3, 30, 40), "<f4")
    layout = tiff_layout(a.shape, a.dtype, None, Semantics(geo=geo, nodata=-9999.0))
    assert layout is not None
    with tifffile.TiffFile(write(tmp_path, layout, a)) as tif:
        for page in tif.pages:  # GDAL reads the georeference of the page it opens
            tags = page.tags
            assert tags["GDAL_NODATA"].value == "-9999"
            assert ("GeoKeyDirectoryTag" in tags) == (epsg is not None)
            assert ("ModelTransformationTag" in tags) == (case in ("rotated", "south-up"))


@pytest.fixture
def needs_gdal() -> None:
    if not gdal_available():
        pytest.skip("GDAL (gdal-bin) is not installed (scripts/install_clients.sh)")


@pytest.mark.parametrize("case", GEO_CASES)
@pytest.mark.parametrize(("dtype", "nodata", "gdal_nodata"), [("<f4", float("nan"), "NaN"), (">i2", -9999.0, -9999.0)])
def test_gdal_reads_georeference(
    tmp_path: Path, needs_gdal: None, case: str, dtype: str, nodata: float, gdal_nodata: object
) -> None:
    geo, epsg = GEO_CASES[case]
    a = values((2, 30, 40), dtype)
    layout = tiff_layout(a.shape, a.dtype, None, Semantics(geo=geo, nodata=nodata))
    assert layout is not None
    path = str(write(tmp_path, layout, a))
    for page, source in ((1, path), (2, f"GTIFF_DIR:2:{path}")):
        info = gdalinfo_json(source)
        assert info["geoTransform"] == list(geo.geotransform)
        assert info["bands"][0]["noDataValue"] == gdal_nodata
        if epsg is None:
            assert "coordinateSystem" not in info  # the transform alone, no invented CRS
        else:
            assert info["stac"]["proj:epsg"] == epsg
            assert f'ID["EPSG",{epsg}]' in info["coordinateSystem"]["wkt"]
        np.testing.assert_array_equal(gdal_read(path, page=page), a[page - 1])


def test_geo_needs_spatial_last_axes(tmp_path: Path) -> None:
    geo = GeoReference((0.0, 1.0, 0.0, 0.0, 0.0, -1.0), epsg=4326)
    spatial = tiff_layout((3, 4, 5), np.dtype("u1"), None, Semantics(axes=axes_for("zyx", (3, 4, 5)), geo=geo))
    odd = (Axis("band", "other"), Axis("y", "space"), Axis("t", "time"))
    other = tiff_layout((3, 4, 5), np.dtype("u1"), None, Semantics(axes=odd, geo=geo))
    one_d = tiff_layout((5,), np.dtype("u1"), None, Semantics(geo=geo))
    assert spatial is not None and other is not None and one_d is not None
    a = values((3, 4, 5), "u1")
    for name, layout in (("s.tif", spatial), ("o.tif", other)):
        with tifffile.TiffFile(write(tmp_path, layout, a, name)) as tif:
            assert ("ModelPixelScaleTag" in tif.pages[0].tags) == (name == "s.tif")
    assert one_d == tiff_layout((5,), np.dtype("u1"))


@pytest.mark.parametrize(
    ("geo", "kind"),
    [
        (GeoReference((0,) * 6, epsg=4326), "geographic"),
        (GeoReference((0,) * 6, epsg=32633), "projected"),
        (GeoReference((0,) * 6, epsg=999999), None),
        (GeoReference((0,) * 6, crs_wkt='GEOGCRS["x", CS[ellipsoidal, 2]]', epsg=7844), "geographic"),
        (GeoReference((0,) * 6, crs_wkt='GEODCRS["x", CS[ellipsoidal, 2]]'), "geographic"),
        (GeoReference((0,) * 6, crs_wkt='GEODCRS["x", CS[Cartesian, 3]]', epsg=4978), None),
        (GeoReference((0,) * 6, crs_wkt='PROJCRS["x"]', epsg=6933), "projected"),
        (GeoReference((0,) * 6, crs_wkt='COMPOUNDCRS["x"]', epsg=4326), None),
    ],
)
def test_crs_kind(geo: GeoReference, kind: str | None) -> None:
    assert crs_kind(geo) == kind


@pytest.mark.parametrize(
    ("value", "text"),
    [(float("nan"), "nan"), (-9999.0, "-9999"), (0.5, "0.5"), (float("-inf"), "-inf"), (1e20, "100000000000000000000")],
)
def test_gdal_nodata_text(value: float, text: str) -> None:
    assert gdal_nodata_text(value) == text


# ------------------------------------------------------------ stock ImageJ


@pytest.fixture
def needs_imagej() -> None:
    if not imagej_available():
        pytest.skip("ImageJ (imagej, xvfb) is not installed (scripts/install_clients.sh)")


def test_imagej_ome_hyperstack(tmp_path: Path, needs_imagej: None) -> None:
    """OME's t, c, z order opens as 3 channels x 4 slices x 2 frames, calibrated, composite."""
    a = values(OME_SHAPE)
    layout = tiff_layout(OME_SHAPE, a.dtype, None, ome_semantics())
    assert layout is not None
    frames, channels, slices, height, width = OME_SHAPE
    # Every plane once, at a pixel that moves with it; ImageJ's index is (t*Z + z)*C + c + 1.
    points = [(t, c, z) for t in range(frames) for c in range(channels) for z in range(slices)]
    pixels = [(i % width, (3 * i) % height, (t * slices + z) * channels + c + 1) for i, (t, c, z) in enumerate(points)]
    seen = imagej_describe(str(write(tmp_path, layout, a)), pixels, calibration=True)
    assert (seen["channels"], seen["slices"], seen["frames"], seen["bitDepth"]) == (3, 4, 2, 16)
    assert seen["values"] == [int(a[t, c, z, y, x]) for (t, c, z), (x, y, _) in zip(points, pixels, strict=True)]
    assert seen["voxelSize"] == (0.25, 0.25, 0.5)
    assert seen["units"] == {"x": "micron", "y": "micron", "z": "micron", "time": "sec"}
    assert seen["frameInterval"] == 2.5
    assert seen["origin"] == (-3.0, 2.0, 1.0)  # the OME translation of each space axis
    assert seen["composite"] is True
    assert seen["channelDisplay"] == [
        {"color": (0, 0, 255), "range": (0.0, 1000.0), "label": "DAPI"},
        {"color": (0, 255, 0), "range": (10.0, 2000.0), "label": "GFP"},
        {"color": (255, 0, 255), "range": (20.0, 3000.0), "label": "mCherry"},
    ]


@pytest.mark.parametrize("names", ["czyx", "zcyx", "ctyx", "zctyx"])
def test_imagej_other_orders(tmp_path: Path, needs_imagej: None, names: str) -> None:
    shape = (2, 3, 4)[: len(names) - 2] + (5, 6)
    a = values(shape)
    layout = tiff_layout(shape, a.dtype, None, Semantics(axes=axes_for(names, shape)))
    assert layout is not None
    expected = imagej_order(a, names)  # frames, slices, channels, y, x
    frames, slices, channels = expected.shape[:3]
    planes = [(t, z, c) for t in range(frames) for z in range(slices) for c in range(channels)]
    pixels = [(i % 6, (2 * i) % 5, i + 1) for i in range(len(planes))]
    seen = imagej_describe(str(write(tmp_path, layout, a)), pixels, calibration=True)
    assert (seen["frames"], seen["slices"], seen["channels"]) == (frames, slices, channels)
    assert seen["values"] == [int(expected[t, z, c, y, x]) for (t, z, c), (x, y, _) in zip(planes, pixels, strict=True)]
    assert seen["composite"] is (channels > 1)


@pytest.mark.parametrize("channels", [1, 2])
def test_imagej_int16_display_range(tmp_path: Path, needs_imagej: None, channels: int) -> None:
    """ImageJ holds int16 as raw uint16 + 32768; the OME window must still show as the data's values."""
    shape = (channels, 3, 4, 5)
    a = (values(shape).astype(np.int64) - 30000).astype("<i2")
    windows = [(-100.0, 1000.0), (0.0, 50.0)][:channels]
    hints = tuple(Channel(f"ch{i}", "FF0000", w) for i, w in enumerate(windows))
    semantics = Semantics(axes=axes_for("czyx", shape), channels=hints)
    layout = tiff_layout(shape, a.dtype, None, semantics)
    assert layout is not None
    seen = imagej_describe(str(write(tmp_path, layout, a)), [(2, 1, 1)], calibration=True)
    assert seen["values"] == [int(a[0, 0, 1, 2]) + 32768]  # ImageJ's raw value; it shows value - 32768
    assert [c["range"] for c in seen["channelDisplay"]] == windows


def test_gdal_reads_georeference_of_big_forms(tmp_path: Path, needs_gdal: None) -> None:
    """Past 4 GiB: GDAL finds the georeference on the BigTIFF's pages and in ImageJ's single IFD."""
    semantics = big_semantics()
    for name, layout in (("big.btf", bigtiff_layout(BIG, np.dtype("u1"), None, semantics)),
                         ("big.tif", tiff_layout(BIG, np.dtype("u1"), None, semantics))):
        assert layout is not None
        path = tmp_path / name
        write_sparse(path, layout)
        for source in (str(path), f"GTIFF_DIR:300:{path}") if name == "big.btf" else (str(path),):
            info = gdalinfo_json(source)  # structure only: the sparse region is never read
            assert info["geoTransform"] == list(semantics.geo.geotransform)
            assert info["stac"]["proj:epsg"] == 32633


def test_2d_map_with_pixel_size_in_imagej_and_gdal(tmp_path: Path, needs_imagej: None, needs_gdal: None) -> None:
    """A georeferenced 2-D raster with metre axes: ImageJ sees the calibration, GDAL the georeference."""
    a = (np.arange(20 * 30) * 3).astype("<f4").reshape(20, 30)
    axes = (Axis("y", "space", "meter", 10.0, 5.0), Axis("x", "space", "meter", 10.0, 100.0))
    geo = GeoReference((95.0, 10.0, 0.0, 0.0, 0.0, -10.0), epsg=32633)
    layout = tiff_layout(a.shape, a.dtype, None, Semantics(axes=axes, geo=geo, nodata=-1.0))
    assert layout is not None
    path = str(write(tmp_path, layout, a))
    seen = imagej_describe(path, [(3, 2, 1)], calibration=True)
    assert (seen["voxelSize"][:2], seen["units"]["x"], seen["origin"][:2]) == ((10.0, 10.0), "m", (100.0, 5.0))
    assert seen["values"] == [float(a[2, 3])]
    info = gdalinfo_json(path)
    assert (info["geoTransform"], info["stac"]["proj:epsg"], info["bands"][0]["noDataValue"]) == (
        list(geo.geotransform), 32633, -1.0)
    np.testing.assert_array_equal(gdal_read(path), a)
