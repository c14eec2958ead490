"""OME-Zarr label images: their `image-label` colours and the image they belong to, through real mounts.

Writer: ome-zarr-py's `write_labels` (with `colors`), 0.4 (Zarr v2) and 0.5
(Zarr v3). Readers: stock ImageJ's own TIFF opener (the LUT it shows, via
`getLut`, and its display range), tifffile (the ColorMap and ImageJ
description it reads), GDAL (the colour table of an 8-bit label image)
and Bio-Formats (which TIFF reader it picks and the sizes it sees).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.writer import write_image, write_labels

from clients import gdal_available, gdalinfo_json, imagej_available
from mountutil import mounted, run_zarrfs
from readers import BIOFORMATS_JAR, imagej_luts, showinf
from zarrfs.conventions.semantics import Axis, LabelColor
from zarrfs.formats.tifftags import hyperstack, imagej_hints

needs_imagej = pytest.mark.skipif(not imagej_available(), reason="stock ImageJ/Xvfb not installed "
                                                                  "(scripts/install_clients.sh)")

SHAPE = (4, 24, 32)  # z, y, x
# (label value, rgba): alpha is not shown by a LUT; 255 is the last entry ImageJ's LUT has.
COLORS = [(1, (255, 0, 0, 255)), (2, (0, 128, 255, 128)), (7, (10, 200, 30, 255)), (255, (250, 250, 0, 255))]
# Values in the data: listed ones, the background, and 5, which no colour lists.
VALUES = np.array([0, 1, 2, 5, 7, 255])
FORMATS = {"0.4": (FormatV04, 2), "0.5": (FormatV05, 3)}


def write_labelled_image(store: Path, version: str, dtype: str) -> np.ndarray:
    """An image (z, y, x) with a label image `cells` of `dtype` whose colours are COLORS."""
    fmt, zarr_format = FORMATS[version]
    root = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
    labels = VALUES[np.arange(np.prod(SHAPE)) % len(VALUES)].reshape(SHAPE).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(np.arange(np.prod(SHAPE), dtype=np.uint16).reshape(SHAPE), root, axes="zyx", fmt=fmt(),
                    scale_factors=())
        write_labels(labels, root, name="cells", axes="zyx", fmt=fmt(), scale_factors=(),
                     label_metadata={"colors": [{"label-value": v, "rgba": list(rgba)} for v, rgba in COLORS]})
    return labels


def expected_lut_entries() -> dict[int, tuple[int, int, int]]:
    return {0: (0, 0, 0), **{value: rgba[:3] for value, rgba in COLORS}}


CASES = [("0.4", "uint8"), ("0.5", "uint16"), ("0.5", "int32")]


@pytest.mark.mount
@pytest.mark.clients
@needs_imagej
@pytest.mark.parametrize(("version", "dtype"), CASES, ids=[f"{v}-{d}" for v, d in CASES])
def test_label_image_tif_opens_in_imagej_with_its_colours(version: str, dtype: str, tmp_path: Path) -> None:
    labels = write_labelled_image(tmp_path / "image.zarr", version, dtype)
    level = "s0"  # ome-zarr-py's level names, 0.4 and 0.5
    with mounted(tmp_path / "image.zarr", tmp_path / "mnt", tmp_path / "log") as mount:
        tif = mount / "labels" / "cells" / f"{level}.tif"
        with tifffile.TiffFile(tif) as opened:
            np.testing.assert_array_equal(opened.asarray(), labels)
            colormap = opened.pages[0].tags["ColorMap"].value
            ranges = (opened.imagej_metadata["min"], opened.imagej_metadata["max"])
        seen = imagej_luts(tif)
        gdal = gdalinfo_json(str(tif)) if dtype == "uint8" and gdal_available() else None
        bioformats = showinf(tif) if dtype != "int32" and BIOFORMATS_JAR.is_file() else None
        image_seen = imagej_luts(mount / f"{level}.tif")
    # tifffile: the ColorMap ImageJ reads (768 16-bit values, R then G then B), value v -> entry v.
    table = np.asarray(colormap, dtype=np.uint32).reshape(3, 256)
    for value, rgb in expected_lut_entries().items():
        assert tuple(table[:, value] // 257) == rgb, value
    assert ranges == (0, 255)
    # Stock ImageJ: one channel whose LUT shows each listed value in its colour, 0 black, and an unlisted
    # value (5) in a colour (not grey, not black); the display range maps value v to LUT entry v.
    assert len(seen) == 1
    assert seen[0].bit_depth == {"uint8": 8, "uint16": 16, "int32": 32}[dtype]
    assert seen[0].display_range == (0.0, 255.0)
    for value, rgb in expected_lut_entries().items():
        assert tuple(int(v) for v in seen[0].lut[:, value]) == rgb, value
    unlisted = tuple(int(v) for v in seen[0].lut[:, 5])
    assert len(set(unlisted)) > 1, unlisted
    # The image beside the labels keeps ImageJ's grey LUT.
    assert (image_seen[0].lut == np.arange(256, dtype=np.uint8)).all()
    if gdal is not None:  # the 8-bit ColorMap is standard TIFF: GDAL shows it as the band's colour table
        entries = gdal["bands"][0]["colorTable"]["entries"]
        for value, rgb in expected_lut_entries().items():
            assert tuple(entries[value][:3]) == rgb
    if bioformats is not None:  # Bio-Formats still opens it with its TIFF reader, sizes right
        assert bioformats.reader == "Tagged Image File Format"
        assert bioformats.series[0]["SizeZ"] == SHAPE[0] and bioformats.series[0]["SizeC"] == 1
        if dtype == "uint8":
            assert "8-bit LUT: 3 x 256" in bioformats.output


@pytest.mark.mount
def test_label_values_past_255_get_no_lut(tmp_path: Path) -> None:
    """A 256-entry LUT has no entry of its own for label 300: no colours rather than wrong ones."""
    store = tmp_path / "image.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(np.zeros(SHAPE, np.uint16), root, axes="zyx", fmt=FormatV05(), scale_factors=())
        write_labels(np.full(SHAPE, 300, np.uint16), root, name="cells", axes="zyx", fmt=FormatV05(),
                     scale_factors=(), label_metadata={"colors": [{"label-value": 300, "rgba": [1, 2, 3, 255]}]})
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        with tifffile.TiffFile(mount / "labels" / "cells" / "s0.tif") as opened:
            assert "ColorMap" not in opened.pages[0].tags
            assert "min" not in (opened.imagej_metadata or {})
        described = json.loads((mount / "labels" / "cells" / "s0.json").read_text())["semantics"]
    assert described["label_colors"] == [{"value": 300, "rgba": [1, 2, 3, 255]}]


def test_label_colours_of_several_imagej_channels_are_composite_luts() -> None:
    """A label image with a channel axis of 2 (ImageJ reads single-channel LUTs from the ColorMap only,
    a composite's from the IJMetadata LUTs and Ranges): every channel gets the label LUT over 0-255."""
    axes = (Axis("c", "channel"), Axis("y", "space"), Axis("x", "space"))
    stack = hyperstack((2,), ("C",))
    hints = imagej_hints(axes, stack, (), np.dtype("int16"), (LabelColor(3, (9, 8, 7, 255)),))
    assert hints.tags == ()
    assert hints.blobs["Ranges"] == (32768.0, 33023.0) * 2  # ImageJ's raw int16 values: + 32768
    assert [tuple(lut[:, 3]) for lut in hints.blobs["LUTs"]] == [(9, 8, 7)] * 2
    assert [tuple(lut[:, 0]) for lut in hints.blobs["LUTs"]] == [(0, 0, 0)] * 2


# ------------------------------------------------------------ the image labels belong to

def write_labels_with_source(store: Path, source: dict | None) -> np.ndarray:
    """A 0.5 image with a label image `cells` in a plate-like sub-group `A/1/0`, `image-label.source` = `source`."""
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    image = root.require_group("A/1/0")
    labels = (np.arange(np.prod(SHAPE)) % 3).reshape(SHAPE).astype(np.uint8)
    metadata = {"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]}
    if source is not None:
        metadata["source"] = source
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(np.zeros(SHAPE, np.uint16), image, axes="zyx", fmt=FormatV05(), scale_factors=())
        write_labels(labels, image, name="cells", axes="zyx", fmt=FormatV05(), scale_factors=(),
                     label_metadata=metadata)
    return labels


@pytest.mark.mount
@pytest.mark.parametrize("source", [{"image": "../../"}, None], ids=["source", "layout"])
def test_label_image_says_which_image_it_belongs_to(source: dict | None, tmp_path: Path) -> None:
    """`image-label.source.image` (or, without it, the image whose `labels/` holds it) is in N.json and
    `zarrfs tree`, for the label image's levels and its group."""
    store = tmp_path / "image.zarr"
    write_labels_with_source(store, source)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        label = json.loads((mount / "A/1/0/labels/cells/s0.json").read_text())["semantics"]
        image = json.loads((mount / "A/1/0/s0.json").read_text())["semantics"]
    assert label["label_of"] == "/A/1/0"
    assert image["label_of"] is None
    tree = run_zarrfs("tree", store)
    assert tree.returncode == 0, tree.stderr
    lines = [line.strip() for line in tree.stdout.splitlines()]
    assert "OME-Zarr 0.5 label image: 1 level (s0) of image /A/1/0" in lines or \
        any(line.startswith("OME-Zarr 0.5 label image") and line.endswith(" of image /A/1/0") for line in lines)
    assert "labels of image /A/1/0" in lines


BROKEN_SOURCES = {
    "leaves-the-store": ({"image": "../../../../../../"}, r"source\.image '(\.\./){6}' leaves the store"),
    "not-an-image": ({"image": "../"}, r"source\.image '\.\./' names no image group \(/A/1/0/labels\)"),
    "another-image": ({"image": "../../../../"}, r"names /A, but the label image is in the labels of /A/1/0"),
    "not-a-path": ({"image": 3}, r"image-label\.source \{'image': 3\} has no relative 'image' path"),
}


@pytest.mark.mount
@pytest.mark.parametrize("case", BROKEN_SOURCES)
def test_broken_label_source_is_served_as_without_it_with_one_log_line(case: str, tmp_path: Path) -> None:
    store = tmp_path / "image.zarr"
    source, message = BROKEN_SOURCES[case]
    labels = write_labels_with_source(store, source)
    if case == "another-image":  # /A is an image group too, so the source names an image, just not this one
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            write_image(np.zeros(SHAPE, np.uint16), zarr.open_group(str(store / "A"), mode="a"), axes="zyx",
                        fmt=FormatV05(), scale_factors=())
    with mounted(store, tmp_path / "mnt", tmp_path / "log", expected_log=[message]) as mount:
        np.testing.assert_array_equal(np.load(mount / "A/1/0/labels/cells/s0.npy"), labels)
        label = json.loads((mount / "A/1/0/labels/cells/s0.json").read_text())["semantics"]
        json.loads((mount / "A/1/0/labels/cells/s1.json").read_text())  # a second level: nothing more said
        warned = [line for line in mount.log_lines() if "WARNING" in line]
    assert label["label_of"] is None
    assert label["label_colors"] == [{"value": 1, "rgba": [255, 0, 0, 255]}]  # the rest of its meaning stays
    assert len(warned) == 1 and "OME-Zarr image /A/1/0/labels/cells" in warned[0], warned
