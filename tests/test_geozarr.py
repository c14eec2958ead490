"""GeoZarr multiscales layouts as GeoTIFF overviews, `spatial:registration`, and what is not used, said.

In process: layouts written with zarr-python and the attributes under test
(the registry by uuid and by name, asset ".", levels that cannot be
overviews and why, node registration as PixelIsPoint). Mounted: stores of
the real writers (geozarr-toolkit 0.1.2, rioxarray 0.23 and eopf-geozarr
0.12, out of process in `.venv-geozarr`, `tests/geozarr_writers.py`) read by
GDAL: overview count and sizes, the geotransform GDAL gives each overview,
its pixels; `zarrfs tree` and `N.json` say what of a layout was not used.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tifffile
import zarr

from clients import gdal_available, gdal_read, gdalinfo_json, qgis_available, qgis_layer
from geozarr_writers import EPSG, HEIGHT, NORTH, PIXEL, WEST, WIDTH, sample
from mountutil import mounted, run_zarrfs
from zarrfs.conventions.semantics import Semantics
from zarrfs.conventions.zarr_conventions import MULTISCALES, PROJ, SPATIAL, declared
from zarrfs.engine.engine import Engine
from zarrfs.files.tree import VirtualTree

GEOZARR_PYTHON = Path(__file__).resolve().parents[1] / ".venv-geozarr" / "bin" / "python"
WRITERS = Path(__file__).with_name("geozarr_writers.py")
needs_gdal = pytest.mark.skipif(not gdal_available(), reason="GDAL: scripts/install_clients.sh")
needs_qgis = pytest.mark.skipif(not qgis_available(), reason="python3-qgis: scripts/install_clients.sh")

UUIDS = {MULTISCALES: "d35379db-88df-4056-af3a-620245f8e347", SPATIAL: "689b58e2-cf7b-45e0-9fff-9cfc0883d6b4",
         PROJ: "f17cb550-5864-4468-aeb7-f3180cfb622f"}
REGISTRY = [{"uuid": uuid, "name": name} for name, uuid in UUIDS.items()]


def write_out_of_process(job: dict[str, Any]) -> None:
    """Run a writer of tests/geozarr_writers.py in .venv-geozarr (zarr-python 3.4 and the GeoZarr writers)."""
    assert GEOZARR_PYTHON.exists(), f"{GEOZARR_PYTHON} is missing: run bash scripts/setup.sh"
    done = subprocess.run([str(GEOZARR_PYTHON), "-I", str(WRITERS), json.dumps(job)], capture_output=True, text=True,
                          timeout=600, check=False)
    lines = [line for line in done.stdout.strip().splitlines() if line.startswith("{")]  # eopf logs to stdout
    answer = json.loads(lines[-1]) if lines else {"ok": False, "error": done.stderr[-4000:]}
    assert answer["ok"], answer["error"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`written(writer, **options)`: the store that writer makes, written once for the module (read-only use)."""
    stores: dict[str, Path] = {}

    def store(writer: str, **options: Any) -> Path:
        key = json.dumps({"writer": writer, **options}, sort_keys=True)
        if key not in stores:
            path = tmp_path_factory.mktemp("geozarr") / f"{writer}.zarr"
            write_out_of_process({"writer": writer, "store": str(path), **options})
            stores[key] = path
        return stores[key]
    return store


def spatial(factor: float, *, west: float = WEST) -> list[float]:
    return [PIXEL * factor, 0.0, west, 0.0, -PIXEL * factor, NORTH]


def write_layout(path: Path, levels: list[tuple[str, int, str, list[float] | None]], *,
                 registry: list[dict] | None = None, group_attrs: dict | None = None) -> np.ndarray:
    """A layout group whose levels are groups `asset` holding `b02`: (asset, factor, dtype, stated transform)."""
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    base = sample((HEIGHT, WIDTH))
    layout = []
    for asset, factor, dtype, stated in levels:
        data = base[::factor, ::factor].astype(dtype)
        group = root.require_group(asset) if asset != "." else root
        array = group.create_array("b02", shape=data.shape, dtype=dtype, chunks=(64, 64), dimension_names=("y", "x"))
        array[...] = data
        array.attrs.update({"proj:code": f"EPSG:{EPSG}", "spatial:transform": spatial(factor)})
        entry: dict[str, Any] = {"asset": asset, "spatial:shape": list(data.shape)}
        if stated is not None:
            entry["spatial:transform"] = stated
        layout.append(entry)
    root.attrs.update({"zarr_conventions": REGISTRY if registry is None else registry,
                       "multiscales": {"layout": layout}, **(group_attrs or {})})
    return base


@pytest.fixture
def tree_of(open_engine: Callable[..., Engine]) -> Callable[[Path], VirtualTree]:
    def of(store: Path) -> VirtualTree:
        return VirtualTree(open_engine(store))
    return of


def semantics(tree: VirtualTree, path: str) -> Semantics:
    return tree.semantics(tree.engine.hierarchy.node(path))


# ---------------------------------------------------------------- in process


def test_the_registry_names_conventions_by_uuid_else_by_name() -> None:
    assert declared({"zarr_conventions": REGISTRY}) == {MULTISCALES, SPATIAL, PROJ}
    assert declared({"zarr_conventions": [{"name": "spatial:"}, {"name": "proj"}, {"name": "multiscales"}]}) \
        == {MULTISCALES, SPATIAL, PROJ}
    # A uuid of another convention is that convention, whatever its name says; names are not unique.
    assert declared({"zarr_conventions": [{"uuid": "2dc8d146-3932-4e08-8542-06aa0e826508", "name": "proj:"}]}) \
        == frozenset()
    assert declared({"zarr_conventions": "multiscales"}) == frozenset()


def test_layout_entries_that_cannot_be_read_are_left_out_and_said() -> None:
    from zarrfs.conventions.geo_layout import geo_layout

    layout = geo_layout({"zarr_conventions": REGISTRY, "multiscales": {"layout": [
        {"asset": "r10m", "spatial:shape": [240, 360], "spatial:transform": spatial(1)},
        {"asset": "../outside"}, {"asset": 7}, {"asset": "r20m", "spatial:shape": [120]},
        {"asset": "r30m", "spatial:transform": [1, 0, 0, 0, 0, 0]}, {"asset": "r10m/"}]}}, "g")
    assert layout is not None and [level.asset for level in layout.levels] == ["r10m"]
    assert layout.levels[0].transform == (WEST, PIXEL, 0.0, NORTH, 0.0, -PIXEL)
    assert layout.problems == (
        "multiscales.layout[1] (asset '../outside' is not a path below the layout group) is left out",
        "multiscales.layout[2] (asset 7 is not a path below the layout group) is left out",
        "multiscales.layout[3] (spatial:shape [120] is not [height, width]) is left out",
        "multiscales.layout[4] (spatial:transform [0.0, 1.0, 0.0, 0.0, 0.0, 0.0] maps pixels onto a line (not "
        "invertible)) is left out",
        "multiscales.layout[5] repeats the asset 'r10m/'")
    assert geo_layout({"multiscales": [{"datasets": []}]}, "") is None  # OME's list is no layout
    broken = geo_layout({"zarr_conventions": REGISTRY, "multiscales": {"layout": "r10m"}}, "")
    assert broken is not None and broken.problems == ("multiscales.layout is not a list of objects",)


def test_layout_levels_become_overviews_and_the_rest_is_said(tmp_path: Path, tree_of: Callable) -> None:
    store = tmp_path / "layout.zarr"
    write_layout(store, [("r10m", 1, "u2", spatial(1)), ("r20m", 2, "u2", spatial(2)),
                         ("r30m", 3, "f4", spatial(3)),  # another type, the same numbers: a float32 page
                         ("r40m", 4, "u2", spatial(4, west=WEST + 5 * 4 * PIXEL)),  # stated 5 of its pixels east
                         ("r50m", 5, "f4", spatial(5)),  # CF-packed below: other stored numbers
                         ("r60m", 6, "u2", spatial(6)),
                         ("r80m", 8, "f4", spatial(8))])  # big-endian below: not in a little-endian file
    zarr.open_array(str(store / "r50m" / "b02"), mode="r+").attrs.update({"scale_factor": 0.5})
    big_endian = json.loads((store / "r80m" / "b02" / "zarr.json").read_text())
    big_endian["codecs"][0]["configuration"]["endian"] = "big"  # (its chunks are never read here)
    (store / "r80m" / "b02" / "zarr.json").write_text(json.dumps(big_endian))
    zarr.open_group(str(store), mode="r+").create_group("r90m")  # a level without the array
    root = zarr.open_group(str(store), mode="r+")
    root.attrs["multiscales"] = {"layout": [*root.attrs["multiscales"]["layout"], {"asset": "r90m"}]}
    tree = tree_of(store)
    found = semantics(tree, "r10m/b02")
    assert found.overviews == ("r20m/b02", "r30m/b02", "r60m/b02")
    said = "\n".join(found.unused)
    assert "level 'r40m' is no overview: its spatial:transform" in said and "puts it up to 5 of its pixels" in said
    assert ("level 'r50m' is no overview: its float32 values are packed with scale_factor 0.5, add_offset none, "
            "the map's uint16 with scale_factor none, add_offset none") in said
    assert "level 'r80m' is no overview: its >f4 values have another byte order than the map's uint16" in said
    assert "level 'r90m' has no array 'b02'" in said
    assert len(found.unused) == 4
    assert "GeoZarr multiscales / level 'r10m' (3 overviews)" in found.sources
    # The map's N.tif: the full resolution and the three overviews, each page of its level's type, none computed.
    with tifffile.TiffFile(_served_bytes(tree, "/r10m/b02.tif")) as tif:
        assert [page.shape for page in tif.pages] == [(HEIGHT, WIDTH), (HEIGHT // 2, WIDTH // 2),
                                                      (HEIGHT // 3, WIDTH // 3), (HEIGHT // 6, WIDTH // 6)]
        assert [page.subfiletype for page in tif.pages] == [0, 1, 1, 1]
        assert [page.dtype for page in tif.pages] == [np.dtype(t) for t in ("u2", "u2", "f4", "u2")]
        np.testing.assert_array_equal(tif.pages[2].asarray(), sample((HEIGHT, WIDTH))[::3, ::3].astype("f4"))
    document = json.loads(_served_bytes(tree, "/r10m/b02.json").getvalue())
    assert document["semantics"]["overviews"] == ["/r20m/b02", "/r30m/b02", "/r60m/b02"]
    assert document["semantics"]["unused"] == list(found.unused)
    # A coarser level's own map has the levels below it.
    assert semantics(tree, "r20m/b02").overviews == ("r30m/b02", "r60m/b02")


def test_a_level_moved_by_a_relative_translation_alone_is_no_overview(tmp_path: Path, tree_of: Callable) -> None:
    store = tmp_path / "cropped.zarr"
    write_layout(store, [("r10m", 1, "u2", None), ("r20m", 2, "u2", None), ("r40m", 4, "u2", None)])
    root = zarr.open_group(str(store), mode="r+")
    layout = root.attrs["multiscales"]["layout"]
    layout[1]["transform"] = {"scale": [2.0, 2.0], "translation": [0.0, 0.0]}
    layout[2]["transform"] = {"scale": [4.0, 4.0], "translation": [3.0, 0.0]}
    root.attrs["multiscales"] = {"layout": layout}
    for level in ("r20m", "r40m"):  # no spatial:transform of their own either
        del zarr.open_array(str(store / level / "b02"), mode="r+").attrs["spatial:transform"]
    found = semantics(tree_of(store), "r10m/b02")
    assert found.overviews == ("r20m/b02",)
    assert found.unused == ("GeoZarr multiscales /: level 'r40m' is no overview: its transform.translation moves "
                             "it, and no spatial:transform says where to (a GeoTIFF reader places an overview by "
                             "the size ratio alone)",)


def test_levels_placed_only_by_their_layout_entries_are_maps(tmp_path: Path, tree_of: Callable) -> None:
    """Arrays with no georeference of their own: the layout entry's spatial:transform and the layout group's
    proj:code place them (asset "." and a group asset alike)."""
    store = tmp_path / "entries.zarr"
    write_layout(store, [(".", 1, "u2", spatial(1)), ("r2", 2, "u2", spatial(2)), ("r4", 4, "u2", None)],
                 group_attrs={"proj:code": f"EPSG:{EPSG}"})
    for path in ("b02", "r2/b02", "r4/b02"):
        attrs = zarr.open_array(str(store / path), mode="r+").attrs
        del attrs["proj:code"], attrs["spatial:transform"]
    tree = tree_of(store)
    full, half, quarter = (semantics(tree, path) for path in ("b02", "r2/b02", "r4/b02"))
    assert full.geo is not None and full.geo.epsg == EPSG and full.geo.geotransform == tuple(
        spatial(1)[i] for i in (2, 0, 1, 5, 3, 4))
    assert "GeoZarr multiscales / level '.' spatial:transform" in full.sources
    assert half.geo is not None and half.geo.geotransform[1] == 2 * PIXEL
    assert quarter.geo is None  # its entry states no transform, and nothing else does
    assert full.overviews == ("r2/b02", "r4/b02") and full.unused == ()


def test_zarrfs_tree_shows_what_a_layout_gave_and_what_it_could_not(tmp_path: Path) -> None:
    store = tmp_path / "layout.zarr"
    write_layout(store, [("r10m", 1, "u2", spatial(1)), ("r20m", 2, "f8", spatial(2))])
    zarr.open_array(str(store / "r20m" / "b02"), mode="r+").attrs.update({"scale_factor": 0.01})
    done = run_zarrfs("tree", store)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "    GeoZarr multiscales layout: 2 levels (r10m, r20m)"
    assert any(line.strip().startswith("not used: GeoZarr multiscales /: level 'r20m' is no overview: its float64 "
                                       "values are packed with scale_factor 0.01") for line in lines), done.stdout
    document = json.loads(run_zarrfs("tree", "--json", store).stdout)
    b02 = document["children"][0]["children"][0]
    assert b02["semantics"]["unused"][0].startswith("GeoZarr multiscales /: level 'r20m' is no overview")


def test_asset_dot_is_the_group_itself_and_an_undeclared_layout_is_said(tmp_path: Path, tree_of: Callable) -> None:
    store = tmp_path / "dot.zarr"
    write_layout(store, [(".", 1, "u2", spatial(1)), ("r2", 2, "u2", spatial(2)), ("r4", 4, "u2", spatial(4))])
    assert semantics(tree_of(store), "b02").overviews == ("r2/b02", "r4/b02")
    undeclared = tmp_path / "undeclared.zarr"
    write_layout(undeclared, [(".", 1, "u2", spatial(1)), ("r2", 2, "u2", spatial(2))], registry=[])
    found = semantics(tree_of(undeclared), "b02")
    assert found.overviews == ()
    assert found.unused == ("GeoZarr multiscales /: the 'multiscales' object is not declared in zarr_conventions "
                             "(by the multiscales convention's uuid or name): its layout is not read",)


def test_a_multiscales_object_is_never_read_as_ome(tmp_path: Path, tree_of: Callable,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "eopf-like.zarr"
    write_layout(store, [(".", 1, "u2", spatial(1)), ("r2", 2, "u2", spatial(2))])
    tree = tree_of(store)
    with caplog.at_level("WARNING"):
        for path in ("b02", "r2/b02"):
            found = semantics(tree, path)
            assert found.unused == () and not any("OME" in source for source in found.sources)
    assert caplog.records == []
    assert "OME" not in run_zarrfs("tree", store).stdout


def test_node_registration_is_pixel_is_point(tmp_path: Path, tree_of: Callable) -> None:
    """A node grid's transform gives the first cell's centre: the corner is half a cell back; the GeoTIFF says
    PixelIsPoint with its tie point at that centre, which GDAL reads back as the same corner."""
    store = tmp_path / "node.zarr"
    write_layout(store, [("r10m", 1, "u2", spatial(1)), ("r20m", 2, "u2", spatial(2))],
                 group_attrs={"spatial:registration": "node"})
    for path in ("r10m/b02", "r20m/b02"):
        array = zarr.open_array(str(store / path), mode="r+")
        array.attrs["spatial:registration"] = "node"
    tree = tree_of(store)
    found = semantics(tree, "r10m/b02")
    assert found.geo is not None and found.geo.point
    assert found.geo.geotransform == (WEST - PIXEL / 2, PIXEL, 0.0, NORTH + PIXEL / 2, 0.0, -PIXEL)
    # The coarser node level's corner is a coarse half cell back, GDAL's size-ratio placement a fine half cell:
    # a quarter of a coarse pixel along each axis (the nodes coincide, the corners do not). An overview, and said.
    assert found.overviews == ("r20m/b02",)
    assert found.unused == ("GeoZarr multiscales /: level 'r20m' spatial:transform (499990, 20, 0, 5000010, 0, -20): "
                             "its overview is placed by the size ratio, (499995, 20, 0, 5000005, 0, -20), up to 0.354 "
                             "of its pixels from it",)
    with tifffile.TiffFile(_served_bytes(tree, "/r10m/b02.tif")) as tif:
        keys = tif.pages[0].tags["GeoKeyDirectoryTag"].value
        raster_type = dict(zip(keys[4::4], keys[7::4]))[1025]
        assert raster_type == 2  # RasterPixelIsPoint
        assert tif.pages[0].tags["ModelTiepointTag"].value[3:5] == (WEST, NORTH)


@pytest.mark.parametrize("attrs, said", [
    ({"spatial:dimensions": ["x", "y"]}, "array spatial:dimensions ['x', 'y'] are not the array's last two "
                                         "dimensions ['y', 'x']"),
    ({"spatial:dimensions": ["z", "y", "x"]}, "array spatial:dimensions ['z', 'y', 'x'] are not two names"),
    ({"spatial:transform_type": "rpc"}, "array spatial:transform_type 'rpc' is not 'affine'"),
    ({"spatial:registration": "corner"}, "array spatial:registration 'corner' is neither 'pixel' nor 'node'"),
])
def test_a_spatial_transform_zarrfs_cannot_apply_is_no_map_and_said(attrs: dict, said: str, tmp_path: Path,
                                                                   tree_of: Callable) -> None:
    store = tmp_path / "map.zarr"
    array = zarr.create_array(str(store), shape=(4, 6), dtype="u1", dimension_names=("y", "x"))
    array.attrs.update({"proj:code": f"EPSG:{EPSG}", "spatial:transform": spatial(1), **attrs})
    found = tree_of(store).semantics(zarr_meta := tree_of(store).engine.hierarchy.root())
    assert found.geo is None and zarr_meta.shape == (4, 6)
    assert len(found.unused) == 1 and found.unused[0].startswith("georeferencing (" + said)


def _served_bytes(tree: VirtualTree, path: str) -> Any:
    import io

    handle = tree.open(path)
    try:
        out = np.empty(handle.size, np.uint8)
        assert handle.read_into(0, out) == handle.size
        return io.BytesIO(out.tobytes())
    finally:
        handle.close()


# ---------------------------------------------------------------- real writers, mounted, GDAL


def _gdal_overviews(path: Path) -> list[tuple[list[int], list[float]]]:
    """(size, geotransform) GDAL gives each overview of `path` (its OVERVIEW_LEVEL open option)."""
    count = len(gdalinfo_json(str(path))["bands"][0].get("overviews", []))
    found = []
    for level in range(count):
        info = json.loads(subprocess.run(["gdalinfo", "-json", "-oo", f"OVERVIEW_LEVEL={level}", str(path)],
                                         capture_output=True, text=True, check=True, timeout=60).stdout)
        found.append((info["size"], info["geoTransform"]))
    return found


def _overview_pixels(path: Path, level: int, tmp_path: Path) -> np.ndarray:
    copy = tmp_path / f"overview{level}.tif"
    subprocess.run(["gdal_translate", "-q", "-oo", f"OVERVIEW_LEVEL={level}", str(path), str(copy)], check=True,
                   timeout=60)
    return gdal_read(str(copy))


WRITER_LEVELS = {
    # writer: (the full-resolution map, [(overview array, its factor)])
    "toolkit": ("r10m/b02", [("r20m/b02", 2), ("r60m/b02", 6)]),
    "rioxarray": ("0/band_data", [("1/band_data", 2), ("2/band_data", 4)]),
}


@pytest.mark.mount
@pytest.mark.clients
@needs_gdal
@pytest.mark.parametrize("writer", sorted(WRITER_LEVELS))
def test_gdal_sees_the_layout_levels_as_overviews(writer: str, tmp_path: Path, written: Callable) -> None:
    store = written(writer)
    full, overviews = WRITER_LEVELS[writer]
    base = sample((HEIGHT, WIDTH))
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        tif = mount.root / f"{full}.tif"
        info = gdalinfo_json(str(tif))
        assert info["geoTransform"] == [WEST, PIXEL, 0.0, NORTH, 0.0, -PIXEL]
        seen = _gdal_overviews(tif)
        # Each overview where its layout entry states it (the writers state GDAL's size-ratio placement).
        assert seen == [([WIDTH // f, HEIGHT // f], [WEST, PIXEL * f, 0.0, NORTH, 0.0, -PIXEL * f])
                        for _, f in overviews]
        for level, (_, factor) in enumerate(overviews):
            np.testing.assert_array_equal(_overview_pixels(tif, level, tmp_path), base[::factor, ::factor])
        document = json.loads((mount.root / f"{full}.json").read_text())
        assert document["semantics"]["overviews"] == ["/" + path for path, _ in overviews]
        assert document["semantics"]["unused"] == []


@pytest.mark.mount
@pytest.mark.clients
@needs_gdal
def test_eopf_geozarr_levels_of_another_type_are_the_bands_overviews(tmp_path: Path, written: Callable) -> None:
    """eopf-geozarr 0.12 keeps the native bands at the layout group (asset ".") and writes its overviews
    `r2`, `r4` as float64 means of the uint16 bands (fill NaN): each is a reduced-resolution page of its own
    type, which GDAL lists as an overview of the uint16 band, reads as the writer's float64 means, and uses,
    rounded to uint16, for a read at a coarser size; the layout is never called OME."""
    store = written("eopf")
    group = "measurements/reflectance/r10m"
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        tif = mount.root / group / "b02.tif"
        info = gdalinfo_json(str(tif))
        assert info["geoTransform"] == [WEST, PIXEL, 0.0, NORTH, 0.0, -PIXEL] and info["bands"][0]["type"] == "UInt16"
        assert _gdal_overviews(tif) == [([WIDTH // f, HEIGHT // f], [WEST, PIXEL * f, 0.0, NORTH, 0.0, -PIXEL * f])
                                        for f in (2, 4)]
        levels = [zarr.open_array(str(store / group / level / "b02"), mode="r")[:] for level in ("r2", "r4")]
        assert [level.dtype for level in levels] == [np.dtype("float64")] * 2
        for number, level in enumerate(levels):
            np.testing.assert_array_equal(_overview_pixels(tif, number, tmp_path), level)
        reduced = tmp_path / "reduced.tif"
        subprocess.run(["gdal_translate", "-q", "-outsize", str(WIDTH // 2), str(HEIGHT // 2), str(tif), str(reduced)],
                       check=True, timeout=60)
        np.testing.assert_array_equal(gdal_read(str(reduced)), np.rint(levels[0]).astype(np.uint16))
        with tifffile.TiffFile(tif) as parsed:
            assert [(page.dtype, page.subfiletype) for page in parsed.pages] == [
                (np.dtype("uint16"), 0), (np.dtype("float64"), 1), (np.dtype("float64"), 1)]
        document = json.loads((mount.root / group / "b02.json").read_text())
        assert document["semantics"]["overviews"] == [f"/{group}/r2/b02", f"/{group}/r4/b02"]
        assert document["semantics"]["unused"] == []
        assert not any("OME" in line for line in mount.log_lines())


@pytest.mark.mount
@pytest.mark.clients
@needs_gdal
def test_eopf_sentinel2_layout_gives_the_band_every_coarser_resolution(tmp_path: Path, written: Callable) -> None:
    """eopf-geozarr 0.12's Sentinel-2 converter (`convert-s2-optimized`'s defaults): the layout at
    `measurements/reflectance` lists `r10m` ... `r720m`, each holding the bands by name, all float32. GDAL
    sees `r10m/b04.tif` with the five coarser levels as overviews, their pixels the writer's; the levels
    whose stated transforms GDAL's size-ratio placement misses by under a pixel (r360m: 6 rows of 360 m
    for 2400 m) are used and said."""
    store = written("eopf-s2")
    group = store / "measurements" / "reflectance"
    with mounted(store, tmp_path / "mnt", tmp_path / "log",
                 # (and bands the converter keeps at some resolutions only: "level 'r60m' has no array 'b03'")
                 expected_log=[r"array /measurements/reflectance/r\d+m/b\w+: ignored GeoZarr multiscales "
                               r"/measurements/reflectance: level 'r\d+m' "]) as mount:
        tif = mount.root / "measurements" / "reflectance" / "r10m" / "b04.tif"
        assert gdalinfo_json(str(tif))["geoTransform"] == [WEST, PIXEL, 0.0, NORTH, 0.0, -PIXEL]
        levels = ["r20m", "r60m", "r120m", "r360m", "r720m"]
        arrays = [zarr.open_array(str(group / level / "b04"), mode="r")[:] for level in levels]
        assert [size for size, _ in _gdal_overviews(tif)] == [[a.shape[1], a.shape[0]] for a in arrays] == [
            [180, 120], [60, 40], [30, 20], [10, 6], [5, 3]]
        for number, array in enumerate(arrays):
            np.testing.assert_array_equal(_overview_pixels(tif, number, tmp_path), array)
        unused = json.loads((tif.parent / "b04.json").read_text())["semantics"]["unused"]
        assert [note.split(" spatial:transform")[0] for note in unused] == [
            "GeoZarr multiscales /measurements/reflectance: level 'r360m'",
            "GeoZarr multiscales /measurements/reflectance: level 'r720m'"]


@pytest.mark.mount
@pytest.mark.clients
@needs_gdal
def test_gdal_reads_a_node_registered_map_as_pixel_is_point(tmp_path: Path, written: Callable) -> None:
    """geozarr-toolkit's node-registered levels: GDAL shows AREA_OR_POINT=Point and the corner half a cell
    before the stated centre; the coarser levels stay overviews (within a pixel of GDAL's placement), said."""
    store = written("toolkit", registration="node")
    with mounted(store, tmp_path / "mnt", tmp_path / "log", expected_log=["array /r(10|20)m/b02: ignored GeoZarr "
                                                                          "multiscales /: level 'r(20|60)m'"]) as mount:
        info = gdalinfo_json(str(mount.root / "r10m" / "b02.tif"))
        assert info["metadata"][""]["AREA_OR_POINT"] == "Point"
        assert info["geoTransform"] == [WEST - PIXEL / 2, PIXEL, 0.0, NORTH + PIXEL / 2, 0.0, -PIXEL]
        assert [size for size, _ in _gdal_overviews(mount.root / "r10m" / "b02.tif")] == [[180, 120], [60, 40]]
        ignored = json.loads((mount.root / "r10m" / "b02.json").read_text())["semantics"]["unused"]
        assert [note.split(" spatial:transform")[0] for note in ignored] == [
            "GeoZarr multiscales /: level 'r20m'", "GeoZarr multiscales /: level 'r60m'"]


@pytest.mark.mount
@pytest.mark.clients
@needs_qgis
def test_qgis_finds_the_pyramid(tmp_path: Path, written: Callable) -> None:
    """QGIS (headless, python3-qgis) on the toolkit map: the layer in place, and the 2x level as an existing
    pyramid (QGIS lists power-of-two levels only: the 6x overview is GDAL's to use when QGIS renders)."""
    store = written("toolkit")
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        layer = qgis_layer(str(mount.root / "r10m" / "b02.tif"))
    assert layer["valid"] and layer["size"] == [WIDTH, HEIGHT] and layer["crs"] == f"EPSG:{EPSG}"
    assert layer["extent"] == [WEST, NORTH - HEIGHT * PIXEL, WEST + WIDTH * PIXEL, NORTH]
    assert layer["has_pyramids"]
    assert [WIDTH // 2, HEIGHT // 2, True] in layer["pyramids"]


def _gdal_nodata_line(path: Path) -> list[str]:
    """The `NoData Value=` lines of gdalinfo's text report (its JSON cannot hold a NaN from every driver)."""
    report = subprocess.run(["gdalinfo", str(path)], capture_output=True, text=True, check=True, timeout=60).stdout
    return [line.strip() for line in report.splitlines() if "NoData Value=" in line]


@pytest.mark.mount
@pytest.mark.clients
@needs_gdal
def test_a_nan_fill_value_is_the_nodata_of_every_file_that_states_one(tmp_path: Path, written: Callable) -> None:
    """geozarr-toolkit's DEM: float32 elevations of fill_value NaN, a NaN corner, no other nodata attribute.
    GDAL reads nodata NaN from the map's GeoTIFF, its strip TIFF, its ENVI header and the group's NetCDF, and
    the elevations with it; the uint8 mask of fill 0 beside it (its zeros are values) states no nodata."""
    from geozarr_writers import dem_values

    store = written("dem")
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        tif = mount.root / "dem.tif"
        info = gdalinfo_json(str(tif))
        assert info["bands"][0]["noDataValue"] == "NaN" and info["geoTransform"] == [WEST, PIXEL, 0.0, NORTH,
                                                                                     0.0, -PIXEL]
        with tifffile.TiffFile(tif) as parsed:
            assert parsed.pages[0].tags["GDAL_NODATA"].value == "nan"
        np.testing.assert_array_equal(gdal_read(str(tif)), dem_values())  # NaN where the writer wrote NaN
        for path in (mount.root / "dem.strips.tif", mount.root / "dem.raw", f"NETCDF:{mount.root / 'dem.nc'}:dem"):
            assert _gdal_nodata_line(path) == ["NoData Value=nan"], path
        assert "data ignore value = nan" in (mount.root / "dem.raw.hdr").read_text()
        for path in (mount.root / "mask.tif", mount.root / "mask.strips.tif", mount.root / "mask.raw"):
            assert _gdal_nodata_line(path) == [], path
        assert "noDataValue" not in gdalinfo_json(str(mount.root / "mask.tif"))["bands"][0]
        document = json.loads((mount.root / "dem.json").read_text())["semantics"]
        assert np.isnan(document["nodata"]) and "fill_value NaN as nodata" in document["sources"]
