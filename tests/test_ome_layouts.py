"""OME-Zarr as its spec defines it, written by the writers people use, read through real mounts.

* ngff-zarr 0.50 (0.4, 0.5, 0.5 sharded; z,y,x and t,c,z,y,x) puts each
  level in a sub-group (`scale0/image`): the level arrays' `.tif` opens in
  stock ImageJ as the calibrated hyperstack, `.json` says the axes and
  scales ome-zarr-py's own reader finds, `.tiled.tif` has the coarser levels
  as GDAL overviews.
* HCS plates by ome-zarr-py and iohub (0.4, 0.5): every field's level gets
  its calibration, channels and place in the plate; iohub's upper-case axis
  names and time scale too. Label images carry their `image-label` colours.
* `.ozx` (RFC-9, a zipped OME-Zarr) mounts as it is, locally and over HTTP,
  and serves what the unzipped store serves.
* Broken metadata (a level naming nothing or a group, `..` paths, wells
  naming nothing): the bytes are served as without it, and the daemon says
  so in one log line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tifffile
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.io import parse_url
from ome_zarr.reader import Reader
from ome_zarr.writer import write_image, write_labels, write_plate_metadata, write_well_metadata

from clients import gdal_available, gdalinfo_json, imagej_available, imagej_describe
from engineutil import read_all
from mountutil import mounted, mounted_many, run_zarrfs
from ome_writers import PLATE_CHANNELS, PLATE_FIELDS, PLATE_SCALE, PLATE_SHAPE, SCALES, SHAPES, sample
from remoteutil import http_server, remote_mount

ZP34_PYTHON = Path(__file__).resolve().parents[1] / ".venv-zp34" / "bin" / "python"
WRITERS = Path(__file__).with_name("ome_writers.py")
needs_imagej = pytest.mark.skipif(not imagej_available(), reason="stock ImageJ: scripts/install_clients.sh")
needs_gdal = pytest.mark.skipif(not gdal_available(), reason="GDAL: scripts/install_clients.sh")
OME_FORMATS = {"0.4": (FormatV04, 2), "0.5": (FormatV05, 3)}


def write_out_of_process(job: dict[str, Any]) -> None:
    """Run a writer of tests/ome_writers.py in .venv-zp34 (ngff-zarr and iohub need zarr-python 3.2+)."""
    assert ZP34_PYTHON.exists(), f"{ZP34_PYTHON} is missing: run bash scripts/setup.sh"
    done = subprocess.run([str(ZP34_PYTHON), "-I", str(WRITERS), json.dumps(job)], capture_output=True, text=True,
                          timeout=300, check=False)
    lines = done.stdout.strip().splitlines()
    answer = json.loads(lines[-1]) if lines else {"ok": False, "error": done.stderr}
    assert answer["ok"], answer["error"]


def ome_zarr_py_levels(store: Path) -> tuple[list[tuple[int, ...]], list[list[float]], list[str]]:
    """ome-zarr-py's own reader: the level shapes, the scale of each level, the axis names."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        node = next(iter(Reader(parse_url(str(store)))()))
    scales = [next(t["scale"] for t in transforms if t["type"] == "scale")
              for transforms in node.metadata["coordinateTransformations"]]
    return [tuple(d.shape) for d in node.data], scales, [a["name"] for a in node.metadata["axes"]]


def mounted_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def hyperstack_picks(shape: tuple[int, ...]) -> tuple[list[tuple[int, int, int]], list[tuple[int, ...]]]:
    """A few pixels as ImageJ stack positions (x, y, 1-based index) and as array indexes of a
    (t, c,) z, y, x array: ImageJ's stack runs channel fastest, then slice, then frame."""
    t_count, c_count, z_count = (shape[0], shape[1], shape[2]) if len(shape) == 5 else (1, 1, shape[0])
    y_count, x_count = shape[-2:]
    stack, indexes = [], []
    for t, c, z, y, x in [(0, 0, 0, 0, 0), (t_count - 1, c_count - 1, z_count - 1, y_count - 1, x_count - 1),
                          (t_count - 1, 0, z_count // 2, 3, 5), (0, c_count - 1, 1, y_count // 2, x_count // 3)]:
        stack.append((x, y, (t * z_count + z) * c_count + c + 1))
        indexes.append((t, c, z, y, x) if len(shape) == 5 else (z, y, x))
    return stack, indexes


# ------------------------------------------------------- levels in sub-groups (ngff-zarr)

NGFF_CASES = [(version, sharded, dims) for version, sharded in (("0.4", False), ("0.5", False), ("0.5", True))
              for dims in ("zyx", "tczyx")]


@needs_imagej
@needs_gdal
@pytest.mark.parametrize(("version", "sharded", "dims"), NGFF_CASES,
                         ids=[f"{v}{'-sharded' if s else ''}-{d}" for v, s, d in NGFF_CASES])
def test_ngff_zarr_levels_in_sub_groups(version: str, sharded: bool, dims: str, tmp_path: Path) -> None:
    store = tmp_path / "image.zarr"
    # ngff-zarr's default pyramid halves z too (kept for one 5-D image); the others halve y and x only, so
    # that their levels can be the overviews of `.tiled.tif` (one page, z as bands) and the OME-TIFF's SubIFDs.
    pyramid = "zyx" if (dims, version, sharded) == ("tczyx", "0.5", False) else "xy"
    write_out_of_process({"writer": "ngff-zarr", "store": str(store), "version": version, "dims": dims,
                          "sharded": sharded, "pyramid": pyramid})
    shapes, scales, names = ome_zarr_py_levels(store)
    assert names == list(dims) and len(shapes) == 3
    levels = [zarr.open_array(str(store / f"scale{level}" / "image"), mode="r")[...] for level in range(3)]
    assert [level.shape for level in levels] == shapes
    np.testing.assert_array_equal(levels[0], sample(SHAPES[dims]))
    stack, indexes = hyperstack_picks(shapes[0])
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for level in range(3):
            described = mounted_json(mount / f"scale{level}" / "image.json")["semantics"]
            assert [a["name"] for a in described["axes"]] == list(dims)
            assert [a["scale"] for a in described["axes"]] == pytest.approx(scales[level])
            assert f"OME-Zarr {version} multiscales level {level}" in described["sources"]
            np.testing.assert_array_equal(np.load(mount / f"scale{level}" / "image.npy"), levels[level])
        seen = imagej_describe(str(mount / "scale0" / "image.tif"), stack, calibration=True)
        overviews = gdalinfo_json(str(mount / "scale0" / "image.tiled.tif"))["bands"][0].get("overviews", [])
        with tifffile.TiffFile(mount / "image.ome.tif") as ome_tiff:  # the image group's pyramid
            assert ome_tiff.is_ome
            # Levels with fewer planes cannot be SubIFDs of every plane (the OME-TIFF rule): kept out.
            assert [level.shape for level in ome_tiff.series[0].levels] == \
                [shape for shape in shapes if shape[:-2] == shapes[0][:-2]]
    t_count, c_count = (shapes[0][0], shapes[0][1]) if dims == "tczyx" else (1, 1)
    assert (seen["width"], seen["height"], seen["channels"], seen["slices"], seen["frames"]) == \
        (shapes[0][-1], shapes[0][-2], c_count, shapes[0][-3], t_count)
    assert seen["values"] == [int(levels[0][index]) for index in indexes]
    assert seen["voxelSize"] == pytest.approx([SCALES["x"], SCALES["y"], SCALES["z"]])
    assert seen["unit"] in ("micron", "microns", "µm")
    if dims == "tczyx":
        assert seen["frameInterval"] == pytest.approx(SCALES["t"])
    # A 5-D level is one page per plane in `.tiled.tif`, which GDAL gives no overviews (formats/tiled_tiff.py).
    expected_overviews = [(s[-1], s[-2]) for s in shapes[1:]] if dims == "zyx" else []
    assert [(o["size"][0], o["size"][1]) for o in overviews] == expected_overviews


# ------------------------------------------------------------------------- plates


def write_ome_zarr_py_plate(store: Path, version: str) -> dict[str, np.ndarray]:
    """An ome-zarr-py plate (two wells, three fields, t,c,z,y,x) with a label image on one field."""
    fmt, zarr_format = OME_FORMATS[version]
    root = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
    wells = sorted({f"{row}/{column}" for row, column, _ in PLATE_FIELDS})
    write_plate_metadata(root, ["A", "B"], ["1", "2", "3"], wells, fmt=fmt(), name="screen")
    written = {}
    window = {"start": 0, "end": 60000, "min": 0, "max": 65535}
    for well in wells:
        fields = [field for row, column, field in PLATE_FIELDS if f"{row}/{column}" == well]
        write_well_metadata(root.require_group(well), fields, fmt=fmt())
        for field in fields:
            data = sample(PLATE_SHAPE, len(written))
            group = root.require_group(f"{well}/{field}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                write_image(data, group, axes="tczyx", fmt=fmt(), scale_factors=(),
                            scale=dict(zip("tczyx", PLATE_SCALE, strict=True)),
                            axes_units={"t": "second", "z": "micrometer", "y": "micrometer", "x": "micrometer"},
                            omero={"channels": [{"label": name, "color": color, "window": window}
                                                for name, color in zip(PLATE_CHANNELS, ("0000FF", "00FF00"),
                                                                       strict=True)]})
            written[f"{well}/{field}"] = data
    labels = (sample(PLATE_SHAPE[2:]) % 3).astype(np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_labels(labels, root["A/1/0"], name="cells", axes="zyx", fmt=fmt(), scale_factors=(),
                     label_metadata={"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]},
                                                {"label-value": 2, "rgba": [0, 128, 255, 128]}]})
    written["A/1/0/labels/cells"] = labels
    return written


PLATE_CASES = [(writer, version) for writer in ("ome-zarr-py", "iohub") for version in ("0.4", "0.5")]


@needs_imagej
@pytest.mark.parametrize(("writer", "version"), PLATE_CASES, ids=[f"{w}-{v}" for w, v in PLATE_CASES])
def test_plate_fields_get_their_meaning(writer: str, version: str, tmp_path: Path) -> None:
    store = tmp_path / "plate.zarr"
    if writer == "iohub":
        write_out_of_process({"writer": "iohub", "store": str(store), "version": version})
        level = "0"
    else:
        write_ome_zarr_py_plate(store, version)
        level = "s0"
    names = ["T", "C", "Z", "Y", "X"] if writer == "iohub" else list("tczyx")
    stack, indexes = hyperstack_picks(PLATE_SHAPE)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for seed, (row, column, field) in enumerate(PLATE_FIELDS):
            base = mount / row / column / field / level
            np.testing.assert_array_equal(np.load(f"{base}.npy"), sample(PLATE_SHAPE, seed))
            described = mounted_json(Path(f"{base}.json"))["semantics"]
            assert [(a["name"], a["kind"], a["unit"]) for a in described["axes"]] == list(zip(
                names, ["time", "channel", "space", "space", "space"],
                ["second", None, "micrometer", "micrometer", "micrometer"], strict=True))
            assert [a["scale"] for a in described["axes"]] == pytest.approx(PLATE_SCALE)
            assert [c["label"] for c in described["channels"]] == PLATE_CHANNELS
            assert f"OME-Zarr plate / well {row}/{column} field {field}" in " ".join(described["sources"])
        seen = imagej_describe(str(mount / "B" / "3" / "0" / f"{level}.tif"), stack, calibration=True)
        if writer == "ome-zarr-py":
            label = mounted_json(mount / "A" / "1" / "0" / "labels" / "cells" / f"{level}.json")["semantics"]
            assert label["label_colors"] == [{"value": 1, "rgba": [255, 0, 0, 255]},
                                             {"value": 2, "rgba": [0, 128, 255, 128]}]
            assert [a["name"] for a in label["axes"]] == ["z", "y", "x"]
            assert any("(label image)" in source for source in label["sources"])
            assert "plate" not in " ".join(label["sources"])  # a label image is not a field of the plate
    expected = sample(PLATE_SHAPE, 2)
    assert (seen["channels"], seen["slices"], seen["frames"]) == (PLATE_SHAPE[1], PLATE_SHAPE[2], PLATE_SHAPE[0])
    assert seen["values"] == [int(expected[index]) for index in indexes]
    assert seen["voxelSize"] == pytest.approx([PLATE_SCALE[4], PLATE_SCALE[3], PLATE_SCALE[2]])
    assert seen["frameInterval"] == pytest.approx(PLATE_SCALE[0])
    assert [d["label"] for d in seen["channelDisplay"]] == PLATE_CHANNELS


def test_zarrfs_tree_shows_the_plate_layout(tmp_path: Path) -> None:
    write_ome_zarr_py_plate(tmp_path / "plate.zarr", "0.5")
    result = run_zarrfs("tree", tmp_path / "plate.zarr")
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert "OME-Zarr plate 'screen': 2 rows x 3 columns, 2 wells, 3 fields" in lines
    assert lines.count("OME-Zarr well: 2 fields") == 1 and lines.count("OME-Zarr well: 1 fields") == 1
    assert "OME-Zarr labels: cells" in lines
    assert "OME-Zarr 0.5 label image 'cells': 1 level (s0)" in lines or \
        any(line.startswith("OME-Zarr 0.5 label image") for line in lines)


# --------------------------------------------------------------------------- .ozx


def zip_as_ozx(source: Path, archive: Path) -> None:
    """RFC-9: entries stored, the root zarr.json first, the OME version in the ZIP comment."""
    names = sorted((str(p.relative_to(source)) for p in source.rglob("*") if p.is_file()),
                   key=lambda name: (name != "zarr.json", name))
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as out:
        out.comment = json.dumps({"ome": {"version": "0.5"}}).encode()
        for name in names:
            out.write(source / name, name)


def write_ome_zarr_py_image(store: Path, version: str) -> np.ndarray:
    fmt, zarr_format = OME_FORMATS[version]
    data = sample((2, 3, 4, 64, 48))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(data, zarr.open_group(str(store), mode="w", zarr_format=zarr_format), axes="tczyx", fmt=fmt(),
                    scale_factors=(2, 4), scale={"t": 2.5, "z": 0.5, "y": 0.25, "x": 0.25},
                    axes_units={"t": "second", "z": "micrometer", "y": "micrometer", "x": "micrometer"})
    return data


def test_ozx_mounts_as_the_unzipped_store(tmp_path: Path) -> None:
    write_ome_zarr_py_image(tmp_path / "image.zarr", "0.5")
    zip_as_ozx(tmp_path / "image.zarr", tmp_path / "image.ozx")
    with mounted(tmp_path / "image.zarr", tmp_path / "plain", tmp_path / "plain.log") as plain, \
            mounted(tmp_path / "image.ozx", tmp_path / "zipped", tmp_path / "zipped.log") as zipped:
        names = sorted(os.listdir(plain.root))
        assert sorted(os.listdir(zipped.root)) == names
        assert {"s0.tif", "s0.tiled.tif", "s0.json", "s2.npy"} <= set(names)
        for name in names:
            # The OME-TIFF's UUID is made from the store's name, which differs.
            if (plain.root / name).is_file() and not name.startswith(".") and not name.endswith(".ome.tif"):
                assert (zipped.root / name).read_bytes() == (plain.root / name).read_bytes(), name
        semantics = mounted_json(zipped.root / "s1.json")["semantics"]
    assert [a["scale"] for a in semantics["axes"]] == pytest.approx([2.5, 1.0, 0.5, 0.5, 0.5])


def test_ozx_over_http(tmp_path: Path, open_engine: Any) -> None:
    data = write_ome_zarr_py_image(tmp_path / "image.zarr", "0.5")
    served = tmp_path / "served"
    served.mkdir()
    zip_as_ozx(tmp_path / "image.zarr", served / "image.ozx")
    with http_server(served) as server:
        found = read_all(open_engine(f"{server.url}/image.ozx"))
    np.testing.assert_array_equal(found["s0"], data)
    assert set(found) == {"s0", "s1", "s2"}


def test_ozx_over_http_through_a_mount(tmp_path: Path) -> None:
    """`zarrfs mount http://127.0.0.1:PORT/image.ozx MP`: the zipped image served by a Range server reads
    through a real FUSE mount as the store it was zipped from, with its OME meaning."""
    data = write_ome_zarr_py_image(tmp_path / "image.zarr", "0.5")
    served = tmp_path / "served"
    served.mkdir()
    zip_as_ozx(tmp_path / "image.zarr", served / "image.ozx")
    oracle = zarr.open_group(str(tmp_path / "image.zarr"), mode="r")
    with http_server(served) as server, mounted_many([remote_mount(tmp_path, f"{server.url}/image.ozx")]) as (mount,):
        np.testing.assert_array_equal(np.load(mount / "s0.npy"), data)
        np.testing.assert_array_equal(np.load(mount / "s2.npy"), oracle["s2"][...])
        semantics = mounted_json(mount / "s1.json")["semantics"]
        assert any(name.endswith(".ome.tif") for name in os.listdir(mount.root))
        assert set(server.counter) == {"/image.ozx"} and server.requests > 0  # read over HTTP, by ranges
    assert [a["scale"] for a in semantics["axes"]] == pytest.approx([2.5, 1.0, 0.5, 0.5, 0.5])


# ----------------------------------------------------------------- broken metadata


def _patch_attributes(store: Path, path: str, change: Any) -> None:
    """Apply `change(ome_block)` to the OME attributes of group `path` of a v3 store."""
    document = store / path / "zarr.json" if path else store / "zarr.json"
    doc = json.loads(document.read_text())
    change(doc["attributes"]["ome"])
    document.write_text(json.dumps(doc))


BROKEN = {
    # name: (change to the image group's `ome`, what the one log line says)
    "level names nothing": (lambda ome: ome["multiscales"][0]["datasets"].append(
        {"path": "s9", "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 1, 8, 8]}]}),
        r"level 's9' names no array"),
    "level is a group": (lambda ome: ome["multiscales"][0]["datasets"].__setitem__(
        1, {"path": "labels", "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 1, 4, 4]}]}),
        r"level 'labels' names no array"),
    "dot-dot path": (lambda ome: ome["multiscales"][0]["datasets"][2].__setitem__("path", "../s2"),
                     r"path '\.\./s2' is not a path below the image group"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_broken_image_metadata_is_served_as_without_it_with_one_log_line(case: str, tmp_path: Path) -> None:
    store = tmp_path / "image.zarr"
    data = write_ome_zarr_py_image(store, "0.5")
    zarr.open_group(str(store), mode="a").require_group("labels")
    change, message = BROKEN[case]
    _patch_attributes(store, "", change)
    with mounted(store, tmp_path / "mnt", tmp_path / "log", expected_log=[message]) as mount:
        np.testing.assert_array_equal(np.load(mount / "s0.npy"), data)
        semantics = mounted_json(mount / "s0.json")["semantics"]
        (mount / "s1.tif").read_bytes()
        (mount / "s0.tiled.tif").read_bytes()
        lines = [line for line in mount.log_lines() if "WARNING" in line]
    assert [a["scale"] for a in semantics["axes"]] == pytest.approx([2.5, 1.0, 0.5, 0.25, 0.25])
    assert len(lines) == 1 and "OME-Zarr image /" in lines[0], lines


def test_plate_wells_naming_nothing_are_said_once(tmp_path: Path) -> None:
    store = tmp_path / "plate.zarr"
    write_ome_zarr_py_plate(store, "0.5")

    def add_wells(ome: dict[str, Any]) -> None:
        ome["plate"]["wells"] += [{"path": "B/2", "rowIndex": 1, "columnIndex": 1},
                                  {"path": "../A/1", "rowIndex": 0, "columnIndex": 0}]
    _patch_attributes(store, "", add_wells)
    said = [r"plate /: well B/2 is not a well group", r"plate /: well .*'\.\./A/1'.* has no usable path"]
    with mounted(store, tmp_path / "mnt", tmp_path / "log", expected_log=said) as mount:
        for row, column, field in PLATE_FIELDS:
            described = mounted_json(mount / row / column / field / "s0.json")["semantics"]
            assert [a["scale"] for a in described["axes"]] == pytest.approx(PLATE_SCALE)
            np.testing.assert_array_equal(np.load(mount / row / column / field / "s0.npy"),
                                          sample(PLATE_SHAPE, PLATE_FIELDS.index((row, column, field))))
        assert sorted(n for n in os.listdir(mount / "B") if not n.startswith(".")) == ["3"]
        # The plate's file is built, and its wells resolved, when it is first sized: then they are said.
        assert (mount / "screen.ome.tif").stat().st_size > 0
        assert (mount / "screen.ome.tif").stat().st_size > 0
        lines = [line for line in mount.log_lines() if "WARNING" in line]
    assert sorted(sum(bool(re.search(pattern, line)) for line in lines) for pattern in said) == [1, 1], lines
    assert len(lines) == 2, lines
    result = run_zarrfs("tree", store)
    assert "OME-Zarr plate 'screen': 2 rows x 3 columns, 2 wells, 3 fields" in result.stdout
    assert "well B/2 is not a well group" in result.stderr
