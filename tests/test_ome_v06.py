"""OME-Zarr 0.6 (RFC-5 coordinate systems, scenes) and RFC-4 anatomical orientation, as the spec defines them.

* Levels: axes from the coordinate system the levels' transformations
  output to; `scale`, `identity`, `sequence` (scale then translation), a
  diagonal `affine`; `input`/`output` as strings or `{"name"}`/`{"path"}`
  objects; versions `0.6`, `0.6rc0`, `0.6.dev4`.
* What cannot be applied (a rotating affine, parameters in an array, the
  image's other coordinate systems) is named in `zarrfs tree` and `N.json`.
* Scenes (the spec's stitching example): each image's place in `world`
  reaches `N.json`, `zarrfs tree` and the OME-TIFF's plane positions
  (tifffile, Bio-Formats).
* RFC-4 orientation reaches NRRD `space` and MetaImage's direction, read by
  SimpleITK.
* ngff-zarr 0.50 writing 0.6 (z,y,x; t,c,z,y,x with DAPI/GFP/mCherry): stock
  ImageJ shows the calibrated hyperstack with its frame interval and channel
  names, GDAL the coarser levels as overviews of `.tiled.tif`, tifffile and
  Bio-Formats the OME-TIFF's physical sizes, time increment, channel names
  and levels, exactly as for 0.4/0.5; the scene's plane positions, the plate
  as one OME-TIFF, RFC-4 orientation in SimpleITK.
"""

from __future__ import annotations

import json
import logging
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import SimpleITK as sitk
import tifffile
import zarr

from clients import gdal_available, gdalinfo_json, imagej_available, imagej_describe
from mountutil import mounted, run_zarrfs
from ome_writers import CHANNELS, SCALES, SCENE_OFFSETS as NGFF_SCENE_OFFSETS, SHAPES, sample
from readers import BIOFORMATS_JAR, OME, showinf
from test_conventions import _warnings as warnings_of, semantics_of  # noqa: F401  (semantics_of: a fixture)
from test_discovery import nodes_on_disk, remote_hierarchy, unlisted_server, walk
from test_ome_layouts import write_out_of_process

needs_imagej = pytest.mark.skipif(not imagej_available(), reason="stock ImageJ: scripts/install_clients.sh")
needs_gdal = pytest.mark.skipif(not gdal_available(), reason="GDAL: scripts/install_clients.sh")
needs_bioformats = pytest.mark.skipif(not BIOFORMATS_JAR.exists(), reason="Bio-Formats: scripts/install_clients.sh")

TCZYX = [{"name": "t", "type": "time", "unit": "millisecond"}, {"name": "c", "type": "channel"},
         {"name": "z", "type": "space", "unit": "micrometer"}, {"name": "y", "type": "space", "unit": "micrometer"},
         {"name": "x", "type": "space", "unit": "micrometer"}]


def endpoint(value: str, key: str, as_object: bool) -> Any:
    return {key: value} if as_object else value


def write_v06(store: Path, ome: dict[str, Any], arrays: dict[str, np.ndarray],
              dims: dict[str, list[str]] | None = None) -> None:
    """A Zarr v3 group whose `attributes.ome` is `ome`, with `arrays` (path -> values) below it."""
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    for path, values in arrays.items():
        names = (dims or {}).get(path)
        array = group.create_array(path, shape=values.shape, dtype=values.dtype, chunks=values.shape,
                                   **({"dimension_names": names} if names else {}))
        array[...] = values
    group.attrs.put({"ome": ome})


def strict_example(version: str, objects: bool) -> dict[str, Any]:
    """The spec's strict 5-D multiscales example: s0 by a scale, s1 and s2 by a sequence of scale, translation."""
    def level(path: str, scale: list[float], translation: list[float] | None) -> dict[str, Any]:
        ends = {"input": endpoint(path, "path", objects), "output": endpoint("intrinsic", "name", objects)}
        if translation is None:
            return {"path": path, "coordinateTransformations": [{"type": "scale", "scale": scale, **ends}]}
        return {"path": path, "coordinateTransformations": [{"type": "sequence", **ends, "transformations": [
            {"type": "scale", "scale": scale}, {"type": "translation", "translation": translation}]}]}
    return {"version": version, "multiscales": [{"name": "example", "coordinateSystems": [
        {"name": "intrinsic", "axes": TCZYX}], "datasets": [
        level("s0", [0.1, 1.0, 0.5, 0.5, 0.5], None),
        level("s1", [0.1, 1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.25, 0.25, 0.25]),
        level("s2", [0.1, 1.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.75, 0.75, 0.75])]}]}


# ------------------------------------------------------------------------- levels


@pytest.mark.parametrize("version", ["0.6", "0.6rc0", "0.6.dev4"])
@pytest.mark.parametrize("objects", [True, False], ids=["object-endpoints", "string-endpoints"])
def test_levels_take_the_axes_and_transformations_of_their_coordinate_system(
        version: str, objects: bool, tmp_path: Path, semantics_of: Callable, caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "img.zarr"
    shape = (2, 3, 8, 16, 20)
    write_v06(store, strict_example(version, objects), {
        "s0": np.zeros(shape, "u1"), "s1": np.zeros((2, 3, 4, 8, 10), "u1"), "s2": np.zeros((2, 3, 2, 4, 5), "u1")})
    expected = {"s0": ([0.1, 1.0, 0.5, 0.5, 0.5], [0.0] * 5),
                "s1": ([0.1, 1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.25, 0.25, 0.25]),
                "s2": ([0.1, 1.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.75, 0.75, 0.75])}
    with caplog.at_level(logging.WARNING):
        for level, (path, (scale, origin)) in enumerate(expected.items()):
            semantics = semantics_of(store, path)
            assert [(a.name, a.kind, a.unit) for a in semantics.axes] == [
                (a["name"], a["type"], a.get("unit")) for a in TCZYX]
            assert [a.scale for a in semantics.axes] == pytest.approx(scale)
            assert [a.origin for a in semantics.axes] == pytest.approx(origin)
            assert f"OME-Zarr {version} multiscales level {level} (system 'intrinsic')" in semantics.sources
            assert semantics.unused == ()
    assert warnings_of(caplog) == []


TRANSFORMS: dict[str, tuple[dict[str, Any], list[float] | None, list[float] | None, str | None]] = {
    "identity": ({"type": "identity"}, [1.0, 1.0], [0.0, 0.0], None),
    "diagonal affine": ({"type": "affine", "affine": [[2.0, 0, 5.0], [0, 3.0, -1.0]]}, [2.0, 3.0], [5.0, -1.0],
                        None),
    "rotating affine": ({"type": "affine", "affine": [[0, 1.0, 0], [-1.0, 0, 0]]}, None, None,
                        "affine 0 -> physical: it rotates or shears"),
    "rotation": ({"type": "rotation", "rotation": [[0, 1.0], [-1.0, 0]]}, None, None,
                 "'rotation' is not axis-aligned"),
    "scale in an array": ({"type": "scale", "path": "params/scale"}, None, None,
                          "parameters stored in the array 'params/scale' are not read"),
}


@pytest.mark.parametrize("case", TRANSFORMS, ids=list(TRANSFORMS))
def test_level_transformations_applied_or_named_in_tree_and_json(case: str, tmp_path: Path,
                                                                 semantics_of: Callable) -> None:
    transform, scale, origin, unused = TRANSFORMS[case]
    store = tmp_path / "img.zarr"
    yx = [{"name": "y", "type": "space", "unit": "micrometer"}, {"name": "x", "type": "space", "unit": "micrometer"}]
    write_v06(store, {"version": "0.6", "multiscales": [{"coordinateSystems": [{"name": "physical", "axes": yx}],
              "datasets": [{"path": "0", "coordinateTransformations": [
                  {**transform, "input": "0", "output": "physical"}]}]}]}, {"0": np.arange(12, dtype="u1").reshape(3, 4)})
    semantics = semantics_of(store, "0")
    assert [a.name for a in semantics.axes] == ["y", "x"]
    assert [a.scale for a in semantics.axes] == (scale or [None, None])
    assert [a.origin for a in semantics.axes] == (origin or [None, None])
    assert [u for u in semantics.unused if unused and unused in u] if unused else semantics.unused == ()
    tree = run_zarrfs("tree", store)
    assert tree.returncode == 0, tree.stderr
    named = [line for line in tree.stdout.splitlines() if "not used:" in line]
    assert (len(named) == 1 and unused in named[0]) if unused else named == [], tree.stdout
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        described = json.loads((mount / "0.json").read_text())["semantics"]
        assert [a["scale"] for a in described["axes"]] == (scale or [None, None])
        assert (len(described["unused"]) == 1 and unused in described["unused"][0]) if unused else \
            described["unused"] == []
        np.testing.assert_array_equal(np.load(mount / "0.npy"), np.arange(12, dtype="u1").reshape(3, 4))


def test_the_images_other_coordinate_systems_are_named_not_applied(tmp_path: Path, semantics_of: Callable) -> None:
    """The spec's multiscales_transformations example: the levels are in 'intrinsic', a scale leads to
    'physical'; the files keep 'intrinsic' and name 'physical'."""
    yx = [{"name": "y", "type": "space", "unit": "micrometer"}, {"name": "x", "type": "space", "unit": "micrometer"}]
    store = tmp_path / "img.zarr"
    write_v06(store, {"version": "0.6.dev4", "multiscales": [{
        "coordinateSystems": [{"name": "physical", "axes": yx}, {"name": "intrinsic", "axes": yx}],
        "datasets": [{"path": "s0", "coordinateTransformations": [
            {"scale": [1, 1], "type": "scale", "input": {"path": "s0"}, "output": {"name": "intrinsic"}}]}],
        "coordinateTransformations": [{"scale": [10, 10], "type": "scale", "input": {"name": "intrinsic"},
                                       "output": {"name": "physical"}}],
        "name": "image_with_coordinateTransformations"}]}, {"s0": np.zeros((4, 4), "u1")})
    semantics = semantics_of(store, "s0")
    assert [a.scale for a in semantics.axes] == [1.0, 1.0]
    assert len(semantics.unused) == 1
    assert "'physical'" in semantics.unused[0] and "scale intrinsic -> physical" in semantics.unused[0]


def test_broken_0_6_metadata_is_served_without_it_with_one_log_line(tmp_path: Path, semantics_of: Callable,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "img.zarr"
    ome = strict_example("0.6", True)
    ome["multiscales"][0]["datasets"][0]["coordinateTransformations"][0]["output"] = {"name": "nowhere"}
    write_v06(store, ome, {"s0": np.zeros((2, 3, 8, 16, 20), "u1"), "s1": np.zeros((2, 3, 4, 8, 10), "u1"),
                           "s2": np.zeros((2, 3, 2, 4, 5), "u1")})
    with caplog.at_level(logging.WARNING):
        semantics = semantics_of(store, "s0")
    assert semantics.axes is None
    assert len(warnings_of(caplog)) == 1 and "'nowhere', which is not one of the coordinateSystems" in \
        warnings_of(caplog)[0]
    # Not only logged: `zarrfs tree` and `N.json` say it too.
    assert len(semantics.unused) == 1 and "'nowhere'" in semantics.unused[0]


def test_a_0_6_label_image_is_calibrated_and_tied_to_its_image(tmp_path: Path, semantics_of: Callable) -> None:
    store = tmp_path / "img.zarr"
    yx = [{"name": "y", "type": "space", "unit": "micrometer"}, {"name": "x", "type": "space", "unit": "micrometer"}]

    def image(extra: dict[str, Any]) -> dict[str, Any]:
        return {"version": "0.6", **extra, "multiscales": [{"coordinateSystems": [{"name": "physical", "axes": yx}],
                "datasets": [{"path": "0", "coordinateTransformations": [
                    {"type": "scale", "scale": [0.5, 0.25], "input": "0", "output": "physical"}]}]}]}
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    group.create_array("0", shape=(4, 6), dtype="u2")
    group.attrs.put({"ome": image({})})
    labels = group.create_group("labels")
    labels.attrs.put({"ome": {"version": "0.6", "labels": ["cells"]}})
    cells = labels.create_group("cells")
    cells.create_array("0", shape=(4, 6), dtype="u1")
    cells.attrs.put({"ome": image({"image-label": {"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}],
                                                   "source": {"image": "../../"}}})})
    semantics = semantics_of(store, "labels/cells/0")
    assert [a.scale for a in semantics.axes] == [0.5, 0.25]
    assert semantics.label_of == "/" and semantics.label_colors[0].rgba == (255, 0, 0, 255)


def test_a_geozarr_multiscales_object_is_not_taken_for_ome(tmp_path: Path, semantics_of: Callable,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    group = zarr.open_group(str(tmp_path / "geo.zarr"), mode="w", zarr_format=3)
    group.create_array("r10m", shape=(4, 4), dtype="u1")
    group.attrs.put({"multiscales": {"layout": [{"asset": "r10m", "transform": {"scale": [1, 1]}}]}})
    with caplog.at_level(logging.WARNING):
        semantics_of(tmp_path / "geo.zarr", "r10m")
    assert not [w for w in warnings_of(caplog) if "OME" in w]


# ------------------------------------------------------------------------- scenes

TILE_SHAPE = (6, 8)  # y, x
TILE_SCALE = [0.5, 0.25]  # micrometer per pixel
SCENE_OFFSETS = {"tile_0": [0.0, 0.0], "tile_1": [0.0, 348.0], "tile_2": [276.0, 0.0], "tile_3": [276.0, 348.0]}


def write_scene(store: Path) -> dict[str, np.ndarray]:
    """The spec's stitching example (four tiles translated into 'world'), each tile a 0.6 image with a
    scale and a translation of its own; a fifth tile registered by a shearing affine."""
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    tiles = {}
    yx = [{"name": "y", "type": "space", "unit": "micrometer"}, {"name": "x", "type": "space", "unit": "micrometer"}]
    for number, name in enumerate([*SCENE_OFFSETS, "tile_4"]):
        tile = group.create_group(name)
        tiles[name] = sample(TILE_SHAPE, number)
        tile.create_array("s0", shape=TILE_SHAPE, dtype="u2", dimension_names=["y", "x"])[...] = tiles[name]
        tile.attrs.put({"ome": {"version": "0.6", "multiscales": [{"name": name, "coordinateSystems": [
            {"name": "physical", "axes": yx}], "datasets": [{"path": "s0", "coordinateTransformations": [
                {"type": "sequence", "input": {"path": "s0"}, "output": {"name": "physical"}, "transformations": [
                    {"type": "scale", "scale": TILE_SCALE}, {"type": "translation", "translation": [1.0, 2.0]}]}]}]}]}})
    group.attrs.put({"ome": {"version": "0.6", "scene": {
        "coordinateTransformations": [
            {"type": "translation", "output": {"name": "world"}, "input": {"path": name, "name": "physical"},
             "translation": offset, "name": f"{name}_mm to world"} for name, offset in SCENE_OFFSETS.items()]
        + [{"type": "affine", "output": {"name": "world"}, "input": {"path": "tile_4", "name": "physical"},
            "affine": [[0.9, 0.1, 0], [-0.1, 0.9, 0]], "name": "a registration"}],
        "coordinateSystems": [{"name": "world", "axes": [
            {"type": "space", "name": "y", "unit": "micrometer"}, {"type": "space", "name": "x", "unit": "micrometer"}]}]}}})
    return tiles


def test_scene_places_each_image_in_json_tree_and_ome_tiff(tmp_path: Path, semantics_of: Callable) -> None:
    store = tmp_path / "scene.zarr"
    tiles = write_scene(store)
    for name, offset in SCENE_OFFSETS.items():
        semantics = semantics_of(store, f"{name}/s0")
        assert [a.scale for a in semantics.axes] == TILE_SCALE and [a.origin for a in semantics.axes] == [1.0, 2.0]
        placed = semantics.placement
        assert placed is not None and placed.scene == "/" and placed.system == "world"
        assert [a.origin for a in placed.axes] == [1.0 + offset[0], 2.0 + offset[1]]
        assert [a.scale for a in placed.axes] == TILE_SCALE
    sheared = semantics_of(store, "tile_4/s0")
    assert sheared.placement is None and [a.scale for a in sheared.axes] == TILE_SCALE
    assert len(sheared.unused) == 1 and "'a registration'" in sheared.unused[0] and "rotates or shears" in \
        sheared.unused[0]
    tree = run_zarrfs("tree", store)
    assert tree.returncode == 0, tree.stderr
    assert "OME-Zarr 0.6 scene: systems 'world', 5 image transformations" in tree.stdout
    assert "in scene / system 'world': y:space 0.5 micrometer/px @277, x:space 0.25 micrometer/px @350" in tree.stdout
    assert "not used: OME-Zarr scene /: affine physical -> world ('a registration') is not applied" in tree.stdout
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        described = json.loads((mount / "tile_1" / "s0.json").read_text())["semantics"]
        assert described["placement"]["system"] == "world"
        assert [a["origin"] for a in described["placement"]["axes"]] == [1.0, 350.0]
        for name, offset in SCENE_OFFSETS.items():
            with tifffile.TiffFile(mount / name / f"{name}.ome.tif") as ome_tiff:
                np.testing.assert_array_equal(ome_tiff.series[0].asarray(), tiles[name])
                planes = ET.fromstring(ome_tiff.ome_metadata).findall(f".//{OME}Plane")
            assert [(float(p.get("PositionY")), float(p.get("PositionX")), p.get("PositionXUnit")) for p in planes] \
                == [(1.0 + offset[0], 2.0 + offset[1], "µm")]


@needs_bioformats
def test_bioformats_reads_the_scene_positions(tmp_path: Path) -> None:
    store = tmp_path / "scene.zarr"
    write_scene(store)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        info = showinf(mount / "tile_2" / "tile_2.ome.tif")
    plane = info.pixels().find(f"{OME}Plane")
    assert plane is not None, info.output[-2000:]
    assert (float(plane.get("PositionX")), float(plane.get("PositionY"))) == (2.0, 277.0)
    assert (float(info.pixels().get("PhysicalSizeX")), float(info.pixels().get("PhysicalSizeY"))) == (0.25, 0.5)


# ------------------------------------------------------------------------- RFC-4

ORIENTED = [("z", "inferior-to-superior", "I"), ("y", "anterior-to-posterior", "A"), ("x", "left-to-right", "L")]


def test_anatomical_orientation_reaches_nrrd_and_metaimage(tmp_path: Path) -> None:
    """z runs up (S), y backwards (P), x to the right (-L): in ITK's LPS world the x direction is -1."""
    store = tmp_path / "head.zarr"
    axes = [{"name": n, "type": "space", "unit": "millimeter", "orientation": {"type": "anatomical", "value": v}}
            for n, v, _ in ORIENTED]
    data = sample((4, 6, 5))
    write_v06(store, {"version": "0.6", "multiscales": [{"coordinateSystems": [{"name": "scanner", "axes": axes}],
              "datasets": [{"path": "0", "coordinateTransformations": [{"type": "sequence", "input": "0",
                  "output": "scanner", "transformations": [{"type": "scale", "scale": [2.0, 0.5, 0.75]},
                  {"type": "translation", "translation": [10.0, 20.0, 30.0]}]}]}]}]}, {"0": data})
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        header = (mount / "0.nrrd.nhdr").read_text()
        mhd = (mount / "0.mhd").read_text()
        images = {suffix: sitk.ReadImage(str(mount / f"0{suffix}")) for suffix in (".nrrd.nhdr", ".mhd")}
        for suffix, image in images.items():
            np.testing.assert_array_equal(sitk.GetArrayFromImage(image), data)
            assert image.GetSpacing() == pytest.approx((0.75, 0.5, 2.0)), suffix
            # Columns: x runs towards -L (right), y towards +P, z towards +S.
            assert image.GetDirection() == pytest.approx((-1, 0, 0, 0, 1, 0, 0, 0, 1)), suffix
            assert image.GetOrigin() == pytest.approx((-30.0, 20.0, 10.0)), suffix
    assert "space: left-posterior-superior" in header
    assert "AnatomicalOrientation = LAI" in mhd


# ------------------------------------------------------------------- names


def test_a_store_named_x_ome_zarr_gets_x_ome_tif(tmp_path: Path) -> None:
    store = tmp_path / "cells.ome.zarr"
    ome = strict_example("0.6", True)
    del ome["multiscales"][0]["name"]  # the file is named for the store
    write_v06(store, ome, {"s0": np.zeros((2, 3, 8, 16, 20), "u1"), "s1": np.zeros((2, 3, 4, 8, 10), "u1"),
                           "s2": np.zeros((2, 3, 2, 4, 5), "u1")})
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        names = sorted(p.name for p in mount.root.iterdir() if p.name.endswith(".ome.tif"))
    assert names == ["cells.ome.tif"]


# ------------------------------------------------------------ ngff-zarr 0.50 writing 0.6


def ome_channel_names(ome_xml: str) -> list[str | None]:
    return [c.get("Name") for c in ET.fromstring(ome_xml).findall(f".//{OME}Channel")]


@needs_imagej
@needs_gdal
@pytest.mark.parametrize("dims", ["zyx", "tczyx"])
def test_ngff_zarr_0_6_image_in_imagej_gdal_and_tifffile(dims: str, tmp_path: Path) -> None:
    store = tmp_path / "image.zarr"
    write_out_of_process({"writer": "ngff-zarr", "store": str(store), "version": "0.6", "dims": dims,
                          "pyramid": "xy", "channels": dims == "tczyx"})
    shape = SHAPES[dims]
    data = sample(shape)
    # ImageJ's stack runs channel fastest, then slice, then frame: a few pixels as (x, y, stack index).
    t_count, c_count = (shape[0], shape[1]) if dims == "tczyx" else (1, 1)
    picks = [(3, 5, 1), (39, 31, c_count * shape[-3] * t_count), (0, 7, 2)]
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        seen = imagej_describe(str(mount / "scale0" / "image.tif"), picks, calibration=True)
        with tifffile.TiffFile(mount / "image.ome.tif") as ome_tiff:
            series = ome_tiff.series[0]
            levels = [level.shape for level in series.levels]
            np.testing.assert_array_equal(series.asarray(), data)
            pixels = ET.fromstring(ome_tiff.ome_metadata).find(f".//{OME}Pixels")
            names = ome_channel_names(ome_tiff.ome_metadata)
        described = json.loads((mount / "scale1" / "image.json").read_text())["semantics"]
        overviews = gdalinfo_json(str(mount / "scale0" / "image.tiled.tif"))["bands"][0].get("overviews", [])
    # `.tiled.tif` has the coarser levels as GDAL overviews (a 5-D level is one page per plane: none).
    assert [tuple(o["size"]) for o in overviews] == \
        ([(shape[-1] // f, shape[-2] // f) for f in (2, 4)] if dims == "zyx" else [])
    flat = data.reshape(-1, *shape[-2:]) if dims == "zyx" else data.transpose(0, 2, 1, 3, 4).reshape(-1, *shape[-2:])
    assert seen["values"] == [int(flat[index - 1, y, x]) for x, y, index in picks]
    assert (seen["channels"], seen["slices"], seen["frames"]) == (c_count, shape[-3], t_count)
    assert seen["voxelSize"] == pytest.approx([SCALES["x"], SCALES["y"], SCALES["z"]])
    assert seen["unit"] in ("micron", "microns", "µm")
    assert [a["scale"] for a in described["axes"]][-2:] == [0.5, 0.5]
    assert [a["origin"] for a in described["axes"]][-2:] == [0.125, 0.125]  # ngff-zarr's half-pixel shift
    assert levels == [shape, (*shape[:-2], shape[-2] // 2, shape[-1] // 2), (*shape[:-2], shape[-2] // 4,
                                                                            shape[-1] // 4)]
    assert (float(pixels.get("PhysicalSizeX")), float(pixels.get("PhysicalSizeZ"))) == (SCALES["x"], SCALES["z"])
    assert pixels.get("PhysicalSizeXUnit") == "µm"
    if dims == "tczyx":
        assert seen["frameInterval"] == pytest.approx(SCALES["t"])
        assert [c["label"] for c in seen["channelDisplay"]] == list(CHANNELS)
        assert names == list(CHANNELS)
        assert (float(pixels.get("TimeIncrement")), pixels.get("TimeIncrementUnit")) == (SCALES["t"], "s")


@needs_bioformats
def test_ngff_zarr_0_6_image_in_bioformats(tmp_path: Path) -> None:
    store = tmp_path / "cells.ome.zarr"
    write_out_of_process({"writer": "ngff-zarr", "store": str(store), "version": "0.6", "dims": "tczyx",
                          "pyramid": "xy", "channels": True})
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        # ngff-zarr names the image "image": the file is named for it.
        info = showinf(mount / "image.ome.tif")
    assert info.reader == "OME-TIFF" and info.series[0]["Resolutions"] == 3
    assert info.channel_names() == list(CHANNELS)
    pixels = info.pixels()
    assert (float(pixels.get("PhysicalSizeX")), float(pixels.get("TimeIncrement"))) == (SCALES["x"], SCALES["t"])


def test_ngff_zarr_0_6_scene_and_plate(tmp_path: Path) -> None:
    scene, plate = tmp_path / "scene.zarr", tmp_path / "plate.zarr"
    write_out_of_process({"writer": "ngff-zarr-scene", "store": str(scene), "version": "0.6", "dims": "zyx",
                          "pyramid": "xy"})
    write_out_of_process({"writer": "ngff-zarr-plate", "store": str(plate), "version": "0.6", "dims": "tczyx",
                          "pyramid": "xy", "channels": True})
    with mounted(scene, tmp_path / "mnt", tmp_path / "log") as mount:
        for name, offset in NGFF_SCENE_OFFSETS.items():
            with tifffile.TiffFile(mount / name / "image.ome.tif") as ome_tiff:
                planes = ET.fromstring(ome_tiff.ome_metadata).findall(f".//{OME}Plane")
            # One plane per z, each at its own depth; x and y at the first pixel's centre in `world`.
            assert [(float(p.get("PositionZ")), float(p.get("PositionX"))) for p in planes] == \
                [(offset[0] + z * SCALES["z"], offset[2]) for z in range(SHAPES["zyx"][0])]
    with mounted(plate, tmp_path / "mnt", tmp_path / "log") as mount:
        with tifffile.TiffFile(mount / "plate.ome.tif") as ome_tiff:
            assert len(ome_tiff.series) == 3
            assert [s.shape for s in ome_tiff.series] == [SHAPES["tczyx"]] * 3
            root = ET.fromstring(ome_tiff.ome_metadata)
        assert [w.get("ID") for w in root.findall(f".//{OME}Well")] == ["Well:0", "Well:1"]
        pixels = root.findall(f".//{OME}Pixels")
        assert all(float(p.get("PhysicalSizeX")) == SCALES["x"] for p in pixels)
        assert ome_channel_names(ome_tiff.ome_metadata) == list(CHANNELS) * 3
        described = json.loads((mount / "B" / "3" / "0" / "scale0" / "image.json").read_text())["semantics"]
        assert "OME-Zarr plate / well B/3 field 0 acquisition 0" in described["sources"]


def test_ngff_zarr_rfc4_orientation_in_simpleitk(tmp_path: Path) -> None:
    """ngff-zarr's LPS orientation (x right-to-left, y anterior-to-posterior, z inferior-to-superior): ITK's
    identity direction, from both headers."""
    store = tmp_path / "head.zarr"
    write_out_of_process({"writer": "ngff-zarr", "store": str(store), "version": "0.6", "dims": "zyx",
                          "pyramid": "xy", "orientation": {"x": "right-to-left", "y": "anterior-to-posterior",
                                                           "z": "inferior-to-superior"}})
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for suffix in (".nrrd.nhdr", ".mhd"):
            image = sitk.ReadImage(str(mount / "scale1" / f"image{suffix}"))
            np.testing.assert_array_equal(sitk.GetArrayFromImage(image), np.load(mount / "scale1" / "image.npy"))
            assert image.GetDirection() == pytest.approx((1, 0, 0, 0, 1, 0, 0, 0, 1)), suffix
            assert image.GetSpacing() == pytest.approx((0.5, 0.5, 0.5)), suffix
            assert image.GetOrigin() == pytest.approx((0.125, 0.125, 0.0)), suffix
        assert "AnatomicalOrientation = RAI" in (mount / "scale1" / "image.mhd").read_text()
        assert "space: left-posterior-superior" in (mount / "scale1" / "image.nrrd.nhdr").read_text()


def nested_sequence(depth: int) -> dict[str, Any]:
    transform: dict[str, Any] = {"type": "scale", "scale": [1.0, 1.0]}
    for _ in range(depth):
        transform = {"type": "sequence", "transformations": [transform]}
    return transform


HOSTILE: dict[str, Any] = {
    "nested 40 deep": [nested_sequence(40)],
    "not objects": ["scale", 3],
    "text numbers": [{"type": "scale", "scale": ["1", "2"]}],
    "infinite": [{"type": "translation", "translation": [1e309, 0]}],
    "wrong length": [{"type": "scale", "scale": [1.0, 2.0, 3.0]}],
    "ragged affine": [{"type": "affine", "affine": [[1, 0], [0, 1, 0]]}],
    "sequence of text": [{"type": "sequence", "transformations": "scale"}],
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_hostile_transformations_leave_the_array_served_with_one_log_line(
        case: str, tmp_path: Path, semantics_of: Callable, open_engine: Callable,
        caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "img.zarr"
    yx = [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    data = np.arange(12, dtype="u1").reshape(3, 4)
    write_v06(store, {"version": "0.6", "multiscales": [{"coordinateSystems": [{"name": "s", "axes": yx}],
              "datasets": [{"path": "0", "coordinateTransformations": HOSTILE[case]}]}]}, {"0": data})
    with caplog.at_level(logging.WARNING):
        semantics = semantics_of(store, "0")
    assert semantics.axes is None or all(a.scale is None for a in semantics.axes)
    assert len(warnings_of(caplog)) == 1 and "/0" in warnings_of(caplog)[0]
    assert open_engine(store).reader("0").read(0, data.nbytes) == data.tobytes()


def test_an_ngff_zarr_scene_is_found_without_listings(tmp_path: Path) -> None:
    """Over HTTP without directory listings, the scene's transformations name its images (and they their
    levels): every node is found, and each tile is placed."""
    store = tmp_path / "scene.zarr"
    write_out_of_process({"writer": "ngff-zarr-scene", "store": str(store), "version": "0.6", "dims": "zyx",
                          "pyramid": "xy"})
    expected = nodes_on_disk(store)
    assert {"tile_0", "tile_1/scale2/image"} <= expected
    with unlisted_server(tmp_path) as (url, _):
        hierarchy = remote_hierarchy(f"{url}/scene.zarr")
        assert walk(hierarchy) == expected
