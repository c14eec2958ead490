"""The conventions layer on its own: OME-Zarr, georeferencing and dimension names read into `Semantics`.

Stores are written with zarr-python and given the attributes under test;
broken convention metadata must leave the array served (its bytes
unchanged) with exactly one warning naming what was ignored.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budget import examples
from zarrfs.conventions.crs import epsg_from_code, epsg_from_projjson, epsg_from_url, epsg_from_wkt, wkt1
from zarrfs.conventions.geo import MAX_COORDINATE_ELEMENTS
from zarrfs.conventions.resolve import semantics_of as resolve_semantics
from zarrfs.conventions.semantics import Semantics
from zarrfs.engine.engine import Engine
from zarrfs.formats import FORMATS
from zarrfs.files.tree import VirtualTree

WKT2_UTM = ('PROJCRS["WGS 84 / UTM zone 33N",BASEGEOGCRS["WGS 84",DATUM["World Geodetic System 1984",'
            'ELLIPSOID["WGS 84",6378137,298.257223563]],ID["EPSG",4326]],CONVERSION["UTM zone 33N",'
            'METHOD["Transverse Mercator",ID["EPSG",9807]]],CS[Cartesian,2],ID["EPSG",32633]]')
WKT1_LL = ('GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563,AUTHORITY["EPSG","7030"]],'
           'AUTHORITY["EPSG","6326"]],PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433],'
           'AUTHORITY["EPSG","4326"]]')


def _axes(names: str, units: dict[str, str]) -> list[dict[str, Any]]:
    kinds = {"t": "time", "c": "channel"}
    return [{"name": n, "type": kinds.get(n, "space"), **({"unit": units[n]} if n in units else {})} for n in names]


def write_ome(path: Path, *, axes: Any, scales: list[list[float]], translations: list[list[float] | None],
              shape: tuple[int, ...], outer: list[dict] | None = None, omero: Any = None,
              zarr_format: int = 2) -> list[np.ndarray]:
    """An OME-Zarr 0.4 (v2) or 0.5 (v3) image group with one array per level."""
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    datasets, levels = [], []
    for level, (scale, translation) in enumerate(zip(scales, translations, strict=True)):
        level_shape = tuple(max(1, s // 2 ** level) if i >= len(shape) - 2 else s for i, s in enumerate(shape))
        data = np.arange(np.prod(level_shape), dtype="<u2").reshape(level_shape)
        kwargs = {"dimension_names": [a["name"] if isinstance(a, dict) else a for a in axes]} \
            if zarr_format == 3 and isinstance(axes, list) else {}
        group.create_array(str(level), shape=level_shape, dtype="<u2", chunks=level_shape, **kwargs)[...] = data
        transforms: list[dict] = [{"type": "scale", "scale": scale}]
        if translation is not None:
            transforms.append({"type": "translation", "translation": translation})
        datasets.append({"path": str(level), "coordinateTransformations": transforms})
        levels.append(data)
    multiscale: dict[str, Any] = {"version": "0.4", "axes": axes, "datasets": datasets}
    if outer is not None:
        multiscale["coordinateTransformations"] = outer
    block: dict[str, Any] = {"multiscales": [multiscale]}
    if omero is not None:
        block["omero"] = omero
    if zarr_format == 3:
        del multiscale["version"]
        group.attrs.put({"ome": {"version": "0.5", **block}})
    else:
        group.attrs.put(block)
    return levels


@pytest.fixture
def semantics_of(open_engine: Callable[..., Engine]) -> Callable[[Path, str], Semantics]:
    def of(store: Path, path: str) -> Semantics:
        engine = open_engine(store)
        return VirtualTree(engine).semantics(engine.hierarchy.node(path))
    return of


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# ---------------------------------------------------------------- OME-Zarr


@pytest.mark.parametrize("zarr_format", [2, 3], ids=["0.4", "0.5"])
def test_ome_levels_compose_dataset_and_multiscale_transforms(tmp_path: Path, zarr_format: int,
                                                               semantics_of: Callable) -> None:
    scales = [[1.0, 0.8, 0.25, 0.25], [1.0, 0.8, 0.5, 0.5]]
    translations = [None, [0.0, 0.0, 0.125, 0.125]]
    outer = [{"type": "scale", "scale": [1.0, 2.0, 2.0, 2.0]}, {"type": "translation", "translation": [0, 5, 7, 9]}]
    units = {"z": "micrometer", "y": "micrometer", "x": "micrometer"}
    write_ome(tmp_path / "img.zarr", axes=_axes("czyx", units), scales=scales, translations=translations,
              shape=(2, 3, 16, 16), outer=outer, zarr_format=zarr_format)
    for level in (0, 1):
        semantics = semantics_of(tmp_path / "img.zarr", str(level))
        assert semantics.axes is not None
        assert [a.name for a in semantics.axes] == list("czyx")
        assert [a.kind for a in semantics.axes] == ["channel", "space", "space", "space"]
        assert [a.unit for a in semantics.axes] == [None, "micrometer", "micrometer", "micrometer"]
        own = translations[level] or [0.0] * 4
        outer_scale, outer_shift = outer[0]["scale"], outer[1]["translation"]
        assert [a.scale for a in semantics.axes] == [s * o for s, o in zip(scales[level], outer_scale)]
        assert [a.origin for a in semantics.axes] == [o * t + u for o, t, u in zip(outer_scale, own, outer_shift)]
        assert f"level {level}" in semantics.sources[0]


def test_omero_channels(tmp_path: Path, semantics_of: Callable) -> None:
    omero = {"channels": [{"label": "DAPI", "color": "0000ff", "window": {"start": 1, "end": 900, "min": 0, "max": 9}},
                          {"label": "GFP", "color": "00FF00"}]}
    write_ome(tmp_path / "img.zarr", axes=_axes("cyx", {}), scales=[[1, 0.5, 0.5]], translations=[None],
              shape=(2, 8, 8), omero=omero)
    semantics = semantics_of(tmp_path / "img.zarr", "0")
    assert [(c.label, c.color, c.window) for c in semantics.channels] == [("DAPI", "0000FF", (1.0, 900.0)),
                                                                          ("GFP", "00FF00", None)]


def test_ome_0_3_names_and_0_1_implicit_axes(tmp_path: Path, semantics_of: Callable) -> None:
    group = zarr.open_group(str(tmp_path / "old.zarr"), mode="w", zarr_format=2)
    group.create_array("0", shape=(2, 3, 4, 5), dtype="u1")
    group.attrs.put({"multiscales": [{"version": "0.3", "axes": ["c", "z", "y", "x"], "datasets": [{"path": "0"}]}]})
    semantics = semantics_of(tmp_path / "old.zarr", "0")
    assert [(a.name, a.kind, a.scale) for a in semantics.axes] == [("c", "channel", None), ("z", "space", None),
                                                                    ("y", "space", None), ("x", "space", None)]
    group = zarr.open_group(str(tmp_path / "older.zarr"), mode="w", zarr_format=2)
    group.create_array("0", shape=(1, 1, 2, 3, 4), dtype="u1")
    group.attrs.put({"multiscales": [{"version": "0.1", "datasets": [{"path": "0"}]}]})
    assert [a.kind for a in semantics_of(tmp_path / "older.zarr", "0").axes] == \
        ["time", "channel", "space", "space", "space"]


BROKEN_OME = {
    "axes not a list": ({"axes": "zyx"}, "'axes' must be a list"),
    "axes of the wrong length": ({"axes": _axes("yx", {})}, "2 axes for a 3-D array"),
    "scale of the wrong length": ({"scale": [1.0, 2.0]}, "dataset scale has 2 values for a 3-D array"),
    "scale with text": ({"scale": [1.0, "a", 1.0]}, "must be a list of numbers"),
    "translation before scale": ({"order": True}, "must be one scale, then at most one translation"),
    "time unit on a space axis": ({"axes": _axes("zyx", {"z": "second"})}, "has the unit 'second'"),
    "space unit on a time axis": ({"axes": _axes("tyx", {"t": "micrometer"})}, "has the unit 'micrometer'"),
    "unit not text": ({"axes": _axes("zyx", {"z": 5})}, "'unit' must be a string"),  # type: ignore[dict-item]
    "negative scale": ({"scale": [1.0, -1.0, 1.0]}, "not positive"),
}


@pytest.mark.parametrize("case", BROKEN_OME, ids=list(BROKEN_OME))
def test_broken_ome_is_ignored_with_one_warning(case: str, tmp_path: Path, semantics_of: Callable,
                                                caplog: pytest.LogCaptureFixture,
                                                open_engine: Callable[..., Engine]) -> None:
    change, reason = BROKEN_OME[case]
    group = zarr.open_group(str(tmp_path / "bad.zarr"), mode="w", zarr_format=2)
    data = np.arange(60, dtype="<i2").reshape(3, 4, 5)
    group.create_array("0", shape=data.shape, dtype=data.dtype)[...] = data
    transforms: list[dict] = [{"type": "scale", "scale": change.get("scale", [1.0, 0.5, 0.5])}]
    if change.get("order"):
        transforms.insert(0, {"type": "translation", "translation": [0, 0, 0]})
    group.attrs.put({"multiscales": [{"version": "0.4", "axes": change.get("axes", _axes("zyx", {})),
                                      "datasets": [{"path": "0", "coordinateTransformations": transforms}]}]})
    with caplog.at_level(logging.WARNING):
        semantics = semantics_of(tmp_path / "bad.zarr", "0")
    assert semantics.axes is None or all(a.scale is None for a in semantics.axes)
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "/0" in warnings[0] and "OME-Zarr multiscales" in warnings[0] and reason in warnings[0]
    # Still served, bytes unchanged.
    engine = open_engine(tmp_path / "bad.zarr")
    tree = VirtualTree(engine)
    files = tree.listdir(tree.lookup("/"))  # type: ignore[arg-type]
    assert {"0.npy", "0.raw", "0.raw.hdr", "0.mhd", "0.nrrd.nhdr", "0.json"} <= set(files)
    assert engine.reader("0").read(0, data.nbytes) == data.tobytes()


def test_omero_that_does_not_match_the_channel_axis_keeps_the_calibration(
        tmp_path: Path, semantics_of: Callable, caplog: pytest.LogCaptureFixture) -> None:
    write_ome(tmp_path / "img.zarr", axes=_axes("cyx", {"y": "micrometer"}), scales=[[1, 0.5, 0.5]],
              translations=[None], shape=(2, 8, 8), omero={"channels": [{"label": "only one"}]})
    with caplog.at_level(logging.WARNING):
        semantics = semantics_of(tmp_path / "img.zarr", "0")
    assert semantics.axes is not None and semantics.axes[1].scale == 0.5
    assert semantics.channels == ()
    assert len(_warnings(caplog)) == 1 and "omero lists 1 channels, the channel axis has 2" in _warnings(caplog)[0]


def test_ome_axes_contradicting_dimension_names(tmp_path: Path, semantics_of: Callable,
                                                caplog: pytest.LogCaptureFixture) -> None:
    group = zarr.open_group(str(tmp_path / "img.zarr"), mode="w", zarr_format=3)
    group.create_array("0", shape=(4, 5), dtype="u1", dimension_names=["x", "y"])
    group.attrs.put({"ome": {"version": "0.5", "multiscales": [{"axes": _axes("yx", {}), "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [2.0, 3.0]}]}]}]}})
    with caplog.at_level(logging.WARNING):
        semantics = semantics_of(tmp_path / "img.zarr", "0")
    # Served with the array's own names (no scale), the contradiction reported once.
    assert [(a.name, a.scale) for a in semantics.axes] == [("x", None), ("y", None)]
    assert len(_warnings(caplog)) == 1 and "contradict the array's dimension_names" in _warnings(caplog)[0]


def test_level_array_mounted_alone_has_no_ome_meaning(tmp_path: Path, semantics_of: Callable) -> None:
    write_ome(tmp_path / "img.zarr", axes=_axes("yx", {}), scales=[[0.5, 0.5]], translations=[None], shape=(8, 8))
    assert semantics_of(tmp_path / "img.zarr" / "0", "").empty


# ------------------------------------------------------------ dimension names


def test_dimension_names_give_axis_kinds_without_scale(tmp_path: Path, semantics_of: Callable) -> None:
    zarr.create_array(str(tmp_path / "a.zarr"), shape=(2, 3, 4, 5, 6), dtype="u1", zarr_format=3,
                      dimension_names=["time", "ch", "Z", "y", "wavelength"])
    semantics = semantics_of(tmp_path / "a.zarr", "")
    assert [(a.name, a.kind, a.scale) for a in semantics.axes] == [
        ("time", "time", None), ("ch", "channel", None), ("Z", "space", None), ("y", "space", None),
        ("wavelength", "other", None)]
    assert semantics.geo is None and semantics.nodata is None


# ------------------------------------------------------------------ geo


def write_geo(path: Path, attrs: dict[str, Any], *, x: np.ndarray, y: np.ndarray, zarr_format: int = 2,
              mapping: dict[str, Any] | None = None, fill_value: Any = None) -> np.ndarray:
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    data = np.arange(len(y) * len(x), dtype="<f4").reshape(len(y), len(x))
    extra = {"dimension_names": ["y", "x"]} if zarr_format == 3 else {}
    array = group.create_array("band", shape=data.shape, dtype=data.dtype, fill_value=fill_value, **extra)
    array[...] = data
    array.attrs.put({**({"_ARRAY_DIMENSIONS": ["y", "x"]} if zarr_format == 2 else {}), **attrs})
    for name, values in (("x", x), ("y", y)):
        coord = group.create_array(name, shape=values.shape, dtype=values.dtype,
                                   **({"dimension_names": [name]} if zarr_format == 3 else {}))
        coord[...] = values
        if zarr_format == 2:
            coord.attrs.put({"_ARRAY_DIMENSIONS": [name]})
    if mapping is not None:
        group.create_array("spatial_ref", shape=(), dtype="i8").attrs.put(mapping)
    return data


X = 500000.0 + 30.0 * np.arange(1, 20, 2)  # cell centres, 60 m cells
Y = 4100000.0 - 30.0 * np.arange(1, 16, 2)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_cf_grid_mapping_with_coordinates(tmp_path: Path, zarr_format: int, semantics_of: Callable) -> None:
    write_geo(tmp_path / "g.zarr", {"grid_mapping": "spatial_ref", "_FillValue": -9999.0}, x=X, y=Y,
              zarr_format=zarr_format, mapping={"crs_wkt": WKT2_UTM})
    semantics = semantics_of(tmp_path / "g.zarr", "band")
    assert semantics.geo is not None
    assert semantics.geo.geotransform == (X[0] - 30.0, 60.0, 0.0, Y[0] + 30.0, 0.0, -60.0)
    assert semantics.geo.epsg == 32633 and semantics.geo.crs_wkt == WKT2_UTM
    assert semantics.nodata == -9999.0


def test_cf_geotransform_text_wins_over_coordinates(tmp_path: Path, semantics_of: Callable) -> None:
    write_geo(tmp_path / "g.zarr", {"grid_mapping": "spatial_ref"}, x=X, y=Y,
              mapping={"spatial_ref": WKT1_LL, "GeoTransform": "10 0.5 0 50 0 -0.25"})
    semantics = semantics_of(tmp_path / "g.zarr", "band")
    assert semantics.geo.geotransform == (10.0, 0.5, 0.0, 50.0, 0.0, -0.25)
    assert semantics.geo.epsg == 4326


def test_geozarr_proj_and_spatial_transform(tmp_path: Path, semantics_of: Callable) -> None:
    write_geo(tmp_path / "g.zarr", {"proj:code": "EPSG:32633", "spatial:transform": [60, 0, 500000, 0, -60, 4100000]},
              x=X, y=Y, zarr_format=3)
    semantics = semantics_of(tmp_path / "g.zarr", "band")
    assert semantics.geo.geotransform == (500000.0, 60.0, 0.0, 4100000.0, 0.0, -60.0)
    assert semantics.geo.epsg == 32633 and semantics.geo.crs_wkt is None


def test_gdal_crs_url_and_fill_value_nodata(tmp_path: Path, semantics_of: Callable) -> None:
    write_geo(tmp_path / "g.zarr", {"_CRS": {"url": "http://www.opengis.net/def/crs/EPSG/0/32633"}}, x=X, y=Y,
              fill_value=-5.0)
    semantics = semantics_of(tmp_path / "g.zarr", "band")
    assert semantics.geo.epsg == 32633 and semantics.nodata == -5.0


def test_xarray_v3_base64_fill_value(tmp_path: Path, semantics_of: Callable) -> None:
    encoded = base64.standard_b64encode(struct.pack("<d", -32768.5)).decode()
    write_geo(tmp_path / "g.zarr", {"_FillValue": encoded}, x=X, y=Y, zarr_format=3)
    assert semantics_of(tmp_path / "g.zarr", "band").nodata == -32768.5


def test_coordinates_without_a_crs_are_not_a_map(tmp_path: Path, semantics_of: Callable) -> None:
    write_geo(tmp_path / "g.zarr", {}, x=X, y=Y)
    assert semantics_of(tmp_path / "g.zarr", "band").geo is None


BROKEN_GEO = {
    "irregular coordinates": ({"_CRS": {"wkt": WKT2_UTM}}, {"x": np.array([0.0, 1, 2, 4, 5, 6, 7, 8, 9, 10])},
                              "'x' is not regularly spaced"),
    "grid_mapping to nothing": ({"grid_mapping": "nowhere"}, {}, "grid_mapping names 'nowhere'"),
    "_CRS not an object": ({"_CRS": "EPSG:4326"}, {}, "_CRS must be an object"),
    "CRS conventions disagree": ({"_CRS": {"wkt": WKT2_UTM}, "proj:code": "EPSG:4326"}, {},
                                 "the CRS conventions disagree"),
    "spatial:transform too short": ({"proj:code": "EPSG:4326", "spatial:transform": [1, 0, 0, 0, -1]}, {},
                                    "spatial:transform must be six finite numbers"),
    "singular transform": ({"proj:code": "EPSG:4326", "spatial:transform": [1, 0, 0, 0, 0, 0]}, {},
                           "not invertible"),
}


@pytest.mark.parametrize("case", BROKEN_GEO, ids=list(BROKEN_GEO))
def test_broken_georeference_is_ignored_with_one_warning(case: str, tmp_path: Path, semantics_of: Callable,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    attrs, coords, reason = BROKEN_GEO[case]
    write_geo(tmp_path / "g.zarr", attrs, x=coords.get("x", X), y=Y)
    with caplog.at_level(logging.WARNING):
        semantics = semantics_of(tmp_path / "g.zarr", "band")
    assert semantics.geo is None
    assert semantics.axes is not None  # the dimension names still count
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "/band" in warnings[0] and "georeferencing" in warnings[0] \
        and reason in warnings[0], warnings


def test_nodata_of_the_wrong_type_costs_only_the_nodata(tmp_path: Path, semantics_of: Callable,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    write_geo(tmp_path / "g.zarr", {"_CRS": {"wkt": WKT2_UTM}, "_FillValue": {"a": 1}}, x=X, y=Y)
    with caplog.at_level(logging.WARNING):
        semantics = semantics_of(tmp_path / "g.zarr", "band")
    assert semantics.geo is not None and semantics.nodata is None
    assert len(_warnings(caplog)) == 1 and "nodata (_FillValue {'a': 1} is not a number)" in _warnings(caplog)[0]


def test_coordinate_arrays_are_read_only_when_small(tmp_path: Path, semantics_of: Callable,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    long_x = np.arange(MAX_COORDINATE_ELEMENTS + 1, dtype="f8")
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w", zarr_format=3)
    group.create_array("band", shape=(2, len(long_x)), dtype="u1", chunks=(2, 4096),
                       dimension_names=["y", "x"]).attrs.put({"proj:code": "EPSG:4326"})
    group.create_array("x", shape=long_x.shape, dtype="f8", chunks=(4096,))  # never written: no chunk to read
    group.create_array("y", shape=(2,), dtype="f8")[...] = [1.0, 2.0]
    with caplog.at_level(logging.WARNING):
        assert semantics_of(tmp_path / "g.zarr", "band").geo is None
    assert "2 to 1048576 are read" in _warnings(caplog)[0]


# ------------------------------------------------------------------ crs


def test_epsg_codes() -> None:
    assert epsg_from_wkt(WKT2_UTM) == 32633  # not the base CRS's 4326, nor the method's 9807
    assert epsg_from_wkt(WKT1_LL) == 4326  # not the spheroid's 7030
    assert epsg_from_wkt('PROJCRS["a, ID[\\"EPSG\\",1]",CS[Cartesian,2]]') is None
    assert epsg_from_projjson({"type": "ProjectedCRS", "id": {"authority": "EPSG", "code": 32633},
                               "base_crs": {"id": {"authority": "EPSG", "code": 4326}}}) == 32633
    assert epsg_from_url("http://www.opengis.net/def/crs/EPSG/0/3857") == 3857
    assert epsg_from_code("EPSG:2056") == 2056 and epsg_from_code("ESRI:54009") is None


def test_wkt1_for_envi() -> None:
    import pyproj

    assert wkt1(WKT1_LL) == WKT1_LL
    converted = wkt1(pyproj.CRS.from_epsg(32633).to_wkt("WKT2_2019"))
    assert converted is not None and converted.startswith("PROJCS[") and epsg_from_wkt(converted) == 32633


def test_every_builder_takes_meta_semantics_and_stem(tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    zarr.create_array(str(tmp_path / "a.zarr"), shape=(3, 4), dtype="<f4", zarr_format=3)
    meta = open_engine(tmp_path / "a.zarr").hierarchy.root()
    for suffix, build in FORMATS.items():
        layout = build(meta, Semantics(), "stem")
        assert layout is None or layout.size >= 0, suffix


# ------------------------------------------------------------------ fuzzing

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=20)

VALID_GROUP = {"multiscales": [{"version": "0.4", "axes": _axes("yx", {"y": "micrometer", "x": "micrometer"}),
                                "datasets": [{"path": "band", "coordinateTransformations": [
                                    {"type": "scale", "scale": [0.5, 0.5]},
                                    {"type": "translation", "translation": [1.0, 2.0]}]}],
                                "coordinateTransformations": [{"type": "scale", "scale": [2.0, 2.0]}]}],
               "omero": {"channels": [{"label": "a", "color": "FF0000", "window": {"start": 0, "end": 1}}]},
               "proj:code": "EPSG:32633", "spatial:transform": [60, 0, 5e5, 0, -60, 4.1e6]}
VALID_ARRAY = {"_CRS": {"wkt": WKT2_UTM, "url": "http://www.opengis.net/def/crs/EPSG/0/32633"},
               "grid_mapping": "spatial_ref", "_FillValue": -9999.0, "missing_value": [-1]}


def _mutate(doc: Any, data: st.DataObject, depth: int = 0) -> Any:
    """`doc` with one randomly chosen value (anywhere inside it) replaced by arbitrary JSON."""
    if depth > 6 or not isinstance(doc, (dict, list)) or not doc or data.draw(st.booleans()):
        return data.draw(json_values)
    key = data.draw(st.sampled_from(sorted(doc) if isinstance(doc, dict) else range(len(doc))))
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[key] = _mutate(doc[key], data, depth + 1)
    return copy


@pytest.fixture(scope="module")
def plain_array(tmp_path_factory: pytest.TempPathFactory) -> Any:
    store = tmp_path_factory.mktemp("fuzz") / "a.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    group.create_array("band", shape=(8, 10), dtype="<f4", dimension_names=["y", "x"])
    group.create_array("spatial_ref", shape=(), dtype="i8")
    group.create_array("x", shape=(10,), dtype="f8", dimension_names=["x"])
    group.create_array("y", shape=(8,), dtype="f8", dimension_names=["y"])
    engine = Engine.open(str(store))
    try:
        yield {name: engine.hierarchy.node(name) for name in ("band", "spatial_ref", "x", "y")}
    finally:
        engine.close()


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_any_convention_metadata_gives_semantics_or_one_warning(plain_array: dict, data: st.DataObject) -> None:
    group_attrs = _mutate(VALID_GROUP, data)
    array_attrs = _mutate(VALID_ARRAY, data)
    mapping_attrs = _mutate({"crs_wkt": WKT2_UTM, "GeoTransform": "0 1 0 0 0 -1"}, data)
    coordinates = {"x": data.draw(st.lists(st.floats(), min_size=10, max_size=10)),
                   "y": [float(v) for v in range(8)]}
    meta = dataclasses.replace(plain_array["band"], attributes=array_attrs if isinstance(array_attrs, dict) else {})
    siblings = {**plain_array, "band": meta,
                "spatial_ref": dataclasses.replace(plain_array["spatial_ref"], attributes=mapping_attrs
                                                   if isinstance(mapping_attrs, dict) else {})}

    def read_array(coordinate: Any) -> np.ndarray:
        return np.array(coordinates[coordinate.path], dtype=coordinate.dtype)

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("zarrfs.conventions")
    logger.addHandler(handler)
    try:
        semantics = resolve_semantics(meta, "band", group_attrs if isinstance(group_attrs, dict) else {}, siblings,
                                 read_array)
    finally:
        logger.removeHandler(handler)
    assert isinstance(semantics, Semantics)
    assert len([r for r in records if r.levelno >= logging.WARNING]) <= 1
    assert semantics.axes is None or len(semantics.axes) == meta.ndim
    json.dumps(semantics.describe(), allow_nan=True)  # the .json file and `tree --json` can always be built
    for suffix, build in FORMATS.items():
        build(meta, semantics, "band")
