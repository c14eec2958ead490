"""`NAME.ome.tif`: every OME-Zarr image as a pyramidal OME-TIFF, as Bio-Formats, tifffile and libvips read it.

Writers: ome-zarr-py (0.4 on Zarr v2, 0.5 on Zarr v3) and zarr-python with a
sharded v3 image. Readers through real mounts: Bio-Formats 7.3.1 (showinf and
bfconvert, the reader of Fiji's importer, QuPath and OMERO), tifffile's OME
series with its levels, libvips' SubIFD loader. Every plane compared is
compared with zarr-python's read of the level array.
"""

from __future__ import annotations

import json
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.writer import write_image, write_labels, write_plate_metadata, write_well_metadata

from clients import ClientError, imagej_describe
from mountutil import mounted
from readers import OME, bfconvert_plane, showinf, vips_level
from test_formats_tiled_tiff import opening_reads
from zarrfs.conventions.semantics import Axis, Channel
from zarrfs.formats.ome_xml import ome_xml, pixels_of
from zarrfs.formats.tiff_head import HEAD_GAP

FORMATS = {"0.4": (FormatV04, 2), "0.5": (FormatV05, 3)}
AXES = [{"name": "t", "type": "time", "unit": "second"}, {"name": "c", "type": "channel"},
        {"name": "z", "type": "space", "unit": "micrometer"}, {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"}]
SCALE = {"t": 2.5, "z": 0.5, "y": 0.25, "x": 0.25}
CHANNELS = [{"label": name, "color": color, "window": {"start": 0, "end": 4000, "min": 0, "max": 4000}}
            for name, color in (("DAPI", "0000FF"), ("GFP", "00FF00"), ("RFP", "FF0000"))]
SHAPE = (2, 3, 4, 96, 128)


def _write_image(path: Path, version: str, chunks: tuple[int, ...] | None, *, labels: bool = False) -> None:
    fmt, zarr_format = FORMATS[version]
    data = (np.arange(np.prod(SHAPE)) % 4001).astype(np.uint16).reshape(SHAPE)
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    options = {"storage_options": {"chunks": chunks}} if chunks else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ome-zarr-py's deprecations and its default channel scale
        write_image(data, group, axes=AXES, fmt=fmt(), scale_factors=(2, 4), scale=SCALE,
                    axes_units={a: "second" if a == "t" else "micrometer" for a in "tzyx"}, name="cells",
                    omero={"channels": CHANNELS}, **options)
        if labels:
            write_labels((data[:, :1] % 5).astype(np.uint8), group, name="nuclei", axes=AXES, fmt=fmt(),
                         scale_factors=(2,), scale=SCALE)


def _levels(store: Path, version: str) -> list[np.ndarray]:
    group = zarr.open_group(str(store), mode="r")
    attributes = group.attrs.asdict()
    block = attributes["ome"] if version == "0.5" else attributes
    return [group[d["path"]][:] for d in block["multiscales"][0]["datasets"]]


def test_stock_imagej_refuses_the_ome_tiff_and_opens_the_level_beside_it(tmp_path: Path) -> None:
    """Stock ImageJ (no Bio-Formats) reads no tiled TIFF: it refuses NAME.ome.tif with its own message,
    showing nothing half-read, while the level's strip file beside it opens as the calibrated hyperstack."""
    store = tmp_path / "img.zarr"
    _write_image(store, "0.5", None)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        with pytest.raises(ClientError, match="Unsupported format"):
            imagej_describe(str(mount / "cells.ome.tif"), [(1, 1, 1)])
        seen = imagej_describe(str(mount / "s0.tif"), [(1, 1, 1)], calibration=True)
    assert (seen["channels"], seen["slices"], seen["frames"]) == (3, 4, 2)
    assert seen["voxelSize"] == pytest.approx((0.25, 0.25, 0.5))
    assert [channel["label"] for channel in seen["channelDisplay"]] == ["DAPI", "GFP", "RFP"]


@pytest.mark.parametrize("chunks", [None, (1, 1, 1, 32, 64)], ids=["plane-chunks", "tile-chunks"])
@pytest.mark.parametrize("version", FORMATS)
def test_bioformats_tifffile_and_vips_read_the_pyramid(version: str, chunks: tuple[int, ...] | None,
                                                       tmp_path: Path) -> None:
    store = tmp_path / "img.zarr"
    _write_image(store, version, chunks)
    levels = _levels(store, version)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = mount / "cells.ome.tif"
        assert path.exists(), sorted(p.name for p in mount.root.iterdir())

        with tifffile.TiffFile(path) as tif:
            assert tif.is_ome
            series = tif.series[0]
            assert len(tif.series) == 1 and series.axes == "TCZYX"
            assert [level.shape for level in series.levels] == [level.shape for level in levels]
            for served, expected in zip(series.levels, levels, strict=True):
                np.testing.assert_array_equal(served.asarray(), expected)
            assert tif.pages[0].subifds is not None and len(tif.pages[0].subifds) == 2
        furthest, first_tile = opening_reads(path.read_bytes())  # every IFD and SubIFD at the head
        assert furthest + HEAD_GAP <= first_tile, (furthest, first_tile)

        info = showinf(path)
        assert info.reader == "OME-TIFF", info.output[-2000:]
        assert len(info.series) == 1
        assert info.series[0]["Resolutions"] == 3
        assert info.resolution_widths[0] == [128, 64, 32]
        assert {k: info.series[0][k] for k in ("SizeX", "SizeY", "SizeZ", "SizeC", "SizeT")} == \
            {"SizeX": 128, "SizeY": 96, "SizeZ": 4, "SizeC": 3, "SizeT": 2}
        pixels = info.pixels()
        assert float(pixels.get("PhysicalSizeX")) == pytest.approx(0.25)
        assert float(pixels.get("PhysicalSizeZ")) == pytest.approx(0.5)
        assert pixels.get("PhysicalSizeXUnit") == "µm"
        assert float(pixels.get("TimeIncrement")) == pytest.approx(2.5)
        assert pixels.get("TimeIncrementUnit") == "s"
        assert info.channel_names() == ["DAPI", "GFP", "RFP"]
        assert "No validation errors found" in info.output

        np.testing.assert_array_equal(bfconvert_plane(path, tmp_path, series=0, c=2, z=1, t=1), levels[0][1, 2, 1])
        np.testing.assert_array_equal(bfconvert_plane(path, tmp_path, series=2, c=1, z=3, t=0), levels[2][0, 1, 3])

        for subifd, level in ((-1, 0), (0, 1), (1, 2)):
            plane, header = vips_level(path, subifd, tmp_path)
            np.testing.assert_array_equal(plane, levels[level][0, 0, 0])
            # px/mm: 0.25 µm pixels at level 0, twice as large at each level after
            assert float(header["xres"]) == pytest.approx(4000 / 2**level)


def test_label_images_and_formats_option(tmp_path: Path) -> None:
    store = tmp_path / "img.zarr"
    _write_image(store, "0.5", None, labels=True)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        label = mount / "labels" / "nuclei" / "nuclei.ome.tif"
        info = showinf(label)
        assert info.reader == "OME-TIFF"
        label_levels = _levels(store / "labels" / "nuclei", "0.5")
        assert info.series[0]["Resolutions"] == len(label_levels) > 1
        assert (info.series[0]["SizeC"], info.series[0]["SizeT"]) == (1, 2)
        expected = label_levels[0]
        with tifffile.TiffFile(label) as tif:
            np.testing.assert_array_equal(tif.series[0].levels[0].asarray().reshape(expected.shape), expected)
    with mounted(store, tmp_path / "mnt2", tmp_path / "log2", "--formats", "npy,json") as mount:
        assert not list(mount.root.glob("*.ome.tif"))


def test_sharded_v3_image_without_name_is_named_after_its_group(tmp_path: Path) -> None:
    """A hand-made OME 0.5 image with sharded levels (what ngff-zarr and zarr-python write for big data)."""
    store = tmp_path / "plate.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    image = root.create_group("scan")
    data = np.random.default_rng(1).integers(0, 60000, (3, 200, 300), dtype=np.uint16)
    datasets = []
    for level in range(3):
        step = 2**level
        array = image.create_array(f"{level}", shape=data[:, ::step, ::step].shape, dtype="uint16",
                                   chunks=(1, 32, 32), shards=(1, 64, 64), dimension_names=["c", "y", "x"])
        array[:] = data[:, ::step, ::step]
        datasets.append({"path": str(level), "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 0.5 * step, 0.5 * step]}]})
    image.attrs["ome"] = {"version": "0.5", "multiscales": [{
        "axes": [{"name": "c", "type": "channel"}, {"name": "y", "type": "space", "unit": "nanometer"},
                 {"name": "x", "type": "space", "unit": "nanometer"}], "datasets": datasets}]}
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = mount / "scan" / "scan.ome.tif"
        info = showinf(path)
        assert info.reader == "OME-TIFF"
        assert info.series[0]["Resolutions"] == 3
        pixels = info.pixels()
        assert (pixels.get("DimensionOrder"), pixels.get("SizeC"), pixels.get("SizeZ")) == ("XYCZT", "3", "1")
        assert pixels.get("PhysicalSizeXUnit") == "nm" and float(pixels.get("PhysicalSizeX")) == 0.5
        np.testing.assert_array_equal(bfconvert_plane(path, tmp_path, series=1, c=2), data[2, ::2, ::2])
        with tifffile.TiffFile(path) as tif:
            assert tif.pages[0].tilewidth == 32


def test_ome_xml_orders_and_what_it_refuses() -> None:
    def axes(*kinds: str) -> tuple[Axis, ...]:
        return tuple(Axis(f"a{i}", kind) for i, kind in enumerate(kinds)) + (Axis("y", "space"),
                                                                               Axis("x", "space"))

    u16 = np.dtype("<u2")
    assert pixels_of(axes("channel", "space"), (2, 3, 4, 5), u16, ()).dimension_order == "XYZCT"
    assert pixels_of(axes("space", "channel"), (2, 3, 4, 5), u16, ()).dimension_order == "XYCZT"
    assert pixels_of(axes("time"), (7, 4, 5), u16, ()).dimension_order == "XYTZC"
    # a custom axis takes a letter no other axis uses
    assert pixels_of(axes("other", "channel"), (2, 3, 4, 5), u16, ()).sizes == \
        {"X": 5, "Y": 4, "Z": 2, "C": 3, "T": 1}
    assert pixels_of(axes("space", "space"), (2, 3, 4, 5), u16, ()) is None  # two Z axes
    assert pixels_of(axes(), (4, 5), np.dtype("<i8"), ()) is None  # OME has no 64-bit integers
    pixels = pixels_of((Axis("c", "channel"), Axis("y", "space", "micrometer", 0.3),
                        Axis("x", "space", "parsec", 0.3)), (2, 4, 5), np.dtype(">f4"),
                       (Channel("a", "FF0000"), Channel(None, None)))
    root = ET.fromstring(ome_xml([(pixels, "name <&>")], "urn:uuid:0", "f.ome.tif"))
    element = root.find(f"{OME}Image/{OME}Pixels")
    assert element.get("Type") == "float" and element.get("BigEndian") == "true"
    assert element.get("PhysicalSizeY") == "0.3" and element.get("PhysicalSizeX") is None  # no symbol for parsec
    channels = element.findall(f"{OME}Channel")
    assert channels[0].get("Color") == str(-16776961) and channels[1].get("Name") is None
    assert root.find(f"{OME}Image").get("Name") == "name <&>"


def test_json_documents_stay_json(tmp_path: Path) -> None:
    """The group's own files are unchanged by the image's OME-TIFF beside them."""
    store = tmp_path / "img.zarr"
    _write_image(store, "0.4", None)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        document = json.loads((mount / ".group.json").read_text())
        assert document["attributes"]["multiscales"][0]["name"] == "cells"
        assert sorted(p.name for p in mount.root.glob("*.ome.tif")) == ["cells.ome.tif"]


@pytest.mark.parametrize("version", FORMATS)
def test_plate_is_one_ome_tiff_with_its_wells_and_fields(version: str, tmp_path: Path) -> None:
    """ome-zarr-py's HCS plate: Bio-Formats shows the plate, each field a series with its pyramid."""
    fmt, zarr_format = FORMATS[version]
    store = tmp_path / "plate.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
    wells = ["A/1", "B/3"]
    fields: dict[tuple[str, str], np.ndarray] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_plate_metadata(root, ["A", "B"], ["1", "2", "3"], wells, fmt=fmt(), name="screen", field_count=2)
        for number, well in enumerate(wells):
            row, column = well.split("/")
            well_group = root.require_group(row).require_group(column)
            write_well_metadata(well_group, ["0", "1"], fmt=fmt())
            for field in ("0", "1"):
                data = np.random.default_rng(number * 2 + int(field)).integers(0, 4000, (2, 64, 96), dtype=np.uint16)
                write_image(data, well_group.require_group(field), axes="cyx", fmt=fmt(), scale_factors=(2,))
                fields[(well, field)] = data
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = mount / "screen.ome.tif"
        info = showinf(path)
        assert info.reader == "OME-TIFF"
        assert [s["Resolutions"] for s in info.series] == [2, 2, 2, 2]
        plate = info.ome.find(f"{OME}Plate")
        assert (plate.get("Name"), plate.get("Rows"), plate.get("Columns")) == ("screen", "2", "3")
        placed = [(w.get("Row"), w.get("Column"), len(w.findall(f"{OME}WellSample"))) for w in plate]
        assert placed == [("0", "0", 2), ("1", "2", 2)]
        names = [image.get("Name") for image in info.ome.findall(f"{OME}Image")]
        assert names == ["Well A1, Field 1", "Well A1, Field 2", "Well B3, Field 1", "Well B3, Field 2"]
        # flattened, field k's level l is series 2k + l
        np.testing.assert_array_equal(bfconvert_plane(path, tmp_path, series=4, c=1), fields[("B/3", "0")][1])
        np.testing.assert_array_equal(bfconvert_plane(path, tmp_path, series=3, c=0),
                                      zarr.open_group(str(store / "A" / "1" / "1"), mode="r")["s1"][0])
        assert (mount / "B" / "3" / "1" / "image.ome.tif").exists()  # each field keeps its own file
