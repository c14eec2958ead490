"""bioformats2raw collections (`bioformats2raw.layout: 3`): one OME-TIFF holding every series, as Bio-Formats
and tifffile read it, its OME-XML from the original `OME/METADATA.ome.xml`.

Writers: yaozarrs' `Bf2RawBuilder` (OME-Zarr 0.5, with an original OME-XML),
ome-writers' multi-position acquisition (0.5, no OME-XML), and a 0.4 store
on Zarr v2 assembled as the spec lays it out, its images written by
ome-zarr-py, with a hand-written METADATA.ome.xml. Readers through real
mounts: Bio-Formats 7.3.1 (showinf, bfconvert), tifffile's OME series and
levels; every OME-XML is checked against the 2016-06 schema (the XSD
ome-types ships, with xmlschema). Pixels compared are compared with
zarr-python's read of the level arrays.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import tifffile
import xmlschema
import zarr

from mountutil import mounted
from readers import OME, bfconvert_plane, showinf
from zarrfs.formats.ome_metadata import merged_ome_xml

_SCHEMA: xmlschema.XMLSchema | None = None


def schema_errors(document: str | bytes) -> list[str]:
    """What the OME 2016-06 schema finds wrong with `document` (the XSD ome-types ships)."""
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = xmlschema.XMLSchema(str(resources.files("ome_types") / "ome-2016-06.xsd"))
    text = document.decode() if isinstance(document, bytes) else document
    return [f"{error.path}: {error.reason}" for error in _SCHEMA.iter_errors(text)]


def original_ome_xml(images: list[tuple[str, str, list[tuple[str, int | None]]]]) -> str:
    """An OME-XML as bioformats2raw writes it (MetadataOnly pixels) for (name, description, channels) images,
    with an instrument, objective, acquisition dates, stage labels and plane positions."""
    parts = ['<?xml version="1.0" encoding="UTF-8"?>'
             '<OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06" '
             'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" Creator="OME Bio-Formats 7.3.1" '
             'UUID="urn:uuid:0d0e5a1c-0000-4000-8000-000000000001" '
             'xsi:schemaLocation="http://www.openmicroscopy.org/Schemas/OME/2016-06 '
             'http://www.openmicroscopy.org/Schemas/OME/2016-06/ome.xsd">'
             '<Instrument ID="Instrument:0"><Microscope Manufacturer="Zeiss" Model="LSM 980"/>'
             '<Objective ID="Objective:0:0" Model="Plan-Apochromat 63x/1.40 Oil" NominalMagnification="63.0" '
             'LensNA="1.4"/></Instrument>']
    for index, (name, description, channels) in enumerate(images):
        channel_xml = "".join(f'<Channel ID="Channel:{index}:{c}" Name="{label}" SamplesPerPixel="1"'
                              f'{f" Color={chr(34)}{color}{chr(34)}" if color is not None else ""}/>'
                              for c, (label, color) in enumerate(channels))
        planes = "".join(f'<Plane TheZ="0" TheC="{c}" TheT="0" PositionX="{100 * index}.0" PositionXUnit="µm" '
                         f'PositionY="50.0" PositionYUnit="µm"/>' for c in range(len(channels)))
        parts.append(
            f'<Image ID="Image:{index}" Name="{name}"><AcquisitionDate>2026-03-01T10:0{index}:00</AcquisitionDate>'
            f'<Description>{description}</Description><InstrumentRef ID="Instrument:0"/>'
            f'<ObjectiveSettings ID="Objective:0:0"/>'
            f'<StageLabel Name="stage {name}" X="{100 * index}.0" XUnit="µm" Y="50.0" YUnit="µm"/>'
            # The original's sizes are the acquisition's (here 512 x 512): the file's replace them.
            f'<Pixels ID="Pixels:{index}" DimensionOrder="XYCZT" Type="uint16" SizeX="512" SizeY="512" SizeZ="1" '
            f'SizeC="{len(channels)}" SizeT="1" BigEndian="false" Interleaved="false" SignificantBits="12" '
            f'PhysicalSizeX="0.1" PhysicalSizeXUnit="µm" PhysicalSizeY="0.1" PhysicalSizeYUnit="µm">'
            f'{channel_xml}<MetadataOnly/>{planes}</Pixels></Image>')
    parts.append('<StructuredAnnotations><MapAnnotation ID="Annotation:0"><Value><M K="objective">63x</M></Value>'
                 '</MapAnnotation></StructuredAnnotations></OME>')
    return "".join(parts)


def sample(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4000, shape, dtype=np.uint16)


def _bioformats_series(path: Path) -> tuple[list[str | None], list[list[str | None]], list[list[int]]]:
    info = showinf(path)
    assert info.reader == "OME-TIFF", info.output[-2000:]
    assert "No validation errors found" in info.output, info.output[-3000:]
    images = info.ome.findall(f"{OME}Image")
    return ([image.get("Name") for image in images], [info.channel_names(k) for k in range(len(images))],
            info.resolution_widths)


def _check_pixels(path: Path, out: Path, levels: list[list[np.ndarray]]) -> None:
    """Bio-Formats' first plane of the first and the last series at level 0 and at their smallest level
    (flattened: series k's level l is series sum(levels before k) + l), and tifffile's every level, against the
    arrays."""
    starts = np.cumsum([0, *(len(series) for series in levels)])
    for k in (0, len(levels) - 1):
        for level in sorted({0, len(levels[k]) - 1}):
            array = levels[k][level]
            np.testing.assert_array_equal(bfconvert_plane(path, out, series=int(starts[k]) + level, c=0),
                                          array.reshape(-1, *array.shape[-2:])[0])
    with tifffile.TiffFile(path) as tif:
        assert len(tif.series) == len(levels)
        for series, arrays in zip(tif.series, levels, strict=True):
            assert len(series.levels) == len(arrays)
            for level, array in zip(series.levels, arrays, strict=True):
                np.testing.assert_array_equal(level.asarray().reshape(array.shape), array)


def _write_yaozarrs(store: Path, ome_xml: str | None) -> dict[str, list[np.ndarray]]:
    """Three series of different sizes, written in the order 2, 0, 1 (the OME/ series list's order)."""
    from yaozarrs import v05
    from yaozarrs.write.v05 import Bf2RawBuilder

    builder = Bf2RawBuilder(store, ome_xml=ome_xml, chunks=(1, 32, 32))
    written: dict[str, list[np.ndarray]] = {}
    for name, (height, width) in (("2", (64, 96)), ("0", (48, 80)), ("1", (32, 40))):
        axes = [v05.ChannelAxis(name="c"), v05.SpaceAxis(name="y", unit="micrometer"),
                v05.SpaceAxis(name="x", unit="micrometer")]
        datasets = [v05.Dataset(path=str(level), coordinateTransformations=[
            v05.ScaleTransformation(scale=[1.0, 0.1 * 2**level, 0.1 * 2**level])]) for level in range(2)]
        image = v05.Image(multiscales=[v05.Multiscale(name=f"series {name}", axes=axes, datasets=datasets)])
        full = sample((2, height, width), int(name))
        written[name] = [full, full[:, ::2, ::2].copy()]
        builder.write_image(name, image, written[name])
    return written


def test_yaozarrs_collection_is_one_ome_tiff_with_the_original_metadata(tmp_path: Path) -> None:
    store = tmp_path / "acquisition.ome.zarr"
    original = original_ome_xml([("Position 1", "first field", [("DAPI", 65535), ("GFP", 16711935)]),
                                 ("Position 2", "second field", [("DAPI", 65535), ("GFP", 16711935)]),
                                 ("Position 3", "third field", [("Hoechst", None), ("mCherry", -16776961)])])
    assert schema_errors(original) == []
    written = _write_yaozarrs(store, original)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = mount / "acquisition.ome.tif"  # named for the store, without a doubled .ome
        names, channels, widths = _bioformats_series(path)
        assert names == ["Position 1", "Position 2", "Position 3"]  # Image i is series i of OME/'s list: 2, 0, 1
        assert channels == [["DAPI", "GFP"], ["DAPI", "GFP"], ["Hoechst", "mCherry"]]
        assert widths == [[96, 48], [80, 40], [40, 20]]
        _check_pixels(path, tmp_path, [written["2"], written["0"], written["1"]])
        with tifffile.TiffFile(path) as tif:
            document = tif.ome_metadata
        assert schema_errors(document) == []
        root = ET.fromstring(document)
        first = root.find(f"{OME}Image")
        assert first.findtext(f"{OME}Description") == "first field"
        assert first.findtext(f"{OME}AcquisitionDate") == "2026-03-01T10:00:00"
        assert first.find(f"{OME}StageLabel").get("Name") == "stage Position 1"
        assert root.find(f"{OME}Instrument/{OME}Objective").get("NominalMagnification") == "63.0"
        pixels = first.find(f"{OME}Pixels")
        assert (pixels.get("SizeX"), pixels.get("SizeY"), pixels.get("SizeC")) == ("96", "64", "2")
        assert pixels.get("PhysicalSizeX") == "0.1" and pixels.find(f"{OME}MetadataOnly") is None
        assert [len(p.findall(f"{OME}Plane")) for p in root.iter(f"{OME}Pixels")] == [2, 2, 2]
        assert [t.get("IFD") for t in root.iter(f"{OME}TiffData")] == ["0", "2", "4"]
        assert (mount / "OME" / "METADATA.ome.xml").read_text() == original
        report = json.loads((mount / ".group.json").read_text())["bioformats2raw"]
        assert report["series"] == ["2", "0", "1"] and report["problems"] == []
        assert report["file"] == "acquisition.ome.tif"
        assert (mount / "1" / "series 1.ome.tif").exists()  # each series keeps its own file


# (series, numpy type, OME Pixels Type, channels): a fluorescence stack, the slide's RGB overview, a float map.
_MIXED_SERIES = [("0", np.uint16, "uint16", 2), ("1", np.uint8, "uint8", 3), ("2", np.float32, "float", 1)]


def _write_mixed_types(store: Path, ome_xml: str) -> dict[str, list[np.ndarray]]:
    """yaozarrs' collection of three series of different pixel types, two levels each."""
    from yaozarrs import v05
    from yaozarrs.write.v05 import Bf2RawBuilder

    builder = Bf2RawBuilder(store, ome_xml=ome_xml, chunks=(1, 32, 32))
    written: dict[str, list[np.ndarray]] = {}
    for name, dtype, _, channels in _MIXED_SERIES:
        axes = [v05.ChannelAxis(name="c"), v05.SpaceAxis(name="y", unit="micrometer"),
                v05.SpaceAxis(name="x", unit="micrometer")]
        datasets = [v05.Dataset(path=str(level), coordinateTransformations=[
            v05.ScaleTransformation(scale=[1.0, 0.5 * 2**level, 0.5 * 2**level])]) for level in range(2)]
        image = v05.Image(multiscales=[v05.Multiscale(name=f"series {name}", axes=axes, datasets=datasets)])
        values = np.random.default_rng(20 + int(name)).integers(0, 250, (channels, 48, 64))
        full = (values * 0.25).astype(dtype) if dtype == np.float32 else values.astype(dtype) * (
            100 if dtype == np.uint16 else 1)
        written[name] = [full, full[:, ::2, ::2].copy()]
        builder.write_image(name, image, written[name])
    return written


def test_series_of_different_pixel_types_are_each_an_image_of_its_type(tmp_path: Path) -> None:
    """A uint16 fluorescence series beside a uint8 RGB overview and a float32 series: every series is in the
    collection's file, each Image with its own Pixels Type and each IFD its own BitsPerSample/SampleFormat, as
    Bio-Formats (showinf, bfconvert) and tifffile read them."""
    store = tmp_path / "slide.ome.zarr"
    original = original_ome_xml([("fluorescence", "stack", [("DAPI", 65535), ("GFP", 16711935)]),
                                 ("overview", "macro image", [("R", None), ("G", None), ("B", None)]),
                                 ("map", "float values", [("height", None)])])
    written = _write_mixed_types(store, original)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = mount / "slide.ome.tif"
        names, channels, widths = _bioformats_series(path)
        assert names == ["fluorescence", "overview", "map"] and widths == [[64, 32]] * 3
        info = showinf(path)
        assert [info.pixels(k).get("Type") for k in range(3)] == [t for _, _, t, _ in _MIXED_SERIES]
        assert [s["SizeC"] for s in info.series] == [2, 3, 1]
        assert [re.search(r"Pixel type = (\S+)", block).group(1) for block in re.split(
            r"\n\s*Series #\d+", info.output)[1:]] == ["uint16", "uint8", "float"]
        for k, (name, dtype, _, _) in enumerate(_MIXED_SERIES):  # flattened: series k's level 0 is 2 k
            for c in range(written[name][0].shape[0]):
                plane = bfconvert_plane(path, tmp_path, series=2 * k, c=c)
                assert plane.dtype == dtype
                np.testing.assert_array_equal(plane, written[name][0][c])
        np.testing.assert_array_equal(bfconvert_plane(path, tmp_path, series=3, c=2), written["1"][1][2])
        _check_pixels(path, tmp_path, [written[name] for name, _, _, _ in _MIXED_SERIES])
        with tifffile.TiffFile(path) as tif:
            # Each main IFD (a plane) says its own sample type: 2 planes of uint16, 3 of uint8, 1 of float32
            # (read before the series, which make tifffile read later IFDs as frames of the first).
            assert [(p.bitspersample, p.sampleformat) for p in tif.pages] == [(16, 1)] * 2 + [(8, 1)] * 3 + [
                (32, 3)]
            assert [s.dtype for s in tif.series] == [np.dtype(t) for _, t, _, _ in _MIXED_SERIES]
            assert [[level.dtype for level in s.levels] for s in tif.series] == [
                [np.dtype(t)] * 2 for _, t, _, _ in _MIXED_SERIES]
            document = tif.ome_metadata
        assert schema_errors(document) == []
        report = json.loads((mount / ".group.json").read_text())["bioformats2raw"]
        assert report["series"] == ["0", "1", "2"] and report["problems"] == []


def test_a_series_in_the_other_byte_order_is_left_out_and_said(tmp_path: Path) -> None:
    """Zarr v2 keeps a big-endian dtype (`>u2`); one TIFF file has one byte order and a tile is its chunk's
    bytes: after a little-endian uint16 series and a uint8 one, a big-endian uint16 series is left out, with
    the reason; the other two are served at their types (tifffile)."""
    from zarrfs.options import EngineOptions
    from zarrfs.files.tree import VirtualTree

    store = tmp_path / "orders.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=2)
    root.attrs["bioformats2raw.layout"] = 3
    written = {}
    for name, dtype in (("0", "<u2"), ("1", "|u1"), ("2", ">u2")):
        image = root.require_group(name)
        written[name] = (np.arange(16 * 24).reshape(16, 24) % 200).astype(dtype)
        image.create_array("0", shape=written[name].shape, chunks=(16, 16), dtype=dtype)[...] = written[name]
        image.attrs["multiscales"] = [{"version": "0.4", "axes": [{"name": "y", "type": "space"}, {
            "name": "x", "type": "space"}], "datasets": [
            {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1]}]}]}]
    tree = VirtualTree.of_source(str(store), None, EngineOptions(), (".json", ".ome.tif"))
    try:
        handle = tree.open("/orders.ome.tif")
        content = np.zeros(handle.size, np.uint8)
        handle.read_into(0, content)
        handle.close()
        with tifffile.TiffFile(io.BytesIO(content.tobytes())) as tif:
            assert tif.byteorder == "<"
            assert [s.dtype for s in tif.series] == [np.dtype("<u2"), np.dtype("u1")]
            for series, name in zip(tif.series, ("0", "1"), strict=True):
                np.testing.assert_array_equal(series.asarray(), written[name])
        document = tree.open("/.group.json")
        report = np.zeros(document.size, np.uint8)
        document.read_into(0, report)
        problems = json.loads(report.tobytes())["bioformats2raw"]["problems"]
        assert problems == ["series '2' left out of orders.ome.tif: another byte order than the series before it "
                            "(one file has one)"]
    finally:
        tree.close()


def test_ome_writers_positions_are_the_series_of_one_file(tmp_path: Path) -> None:
    """A multi-position acquisition (no OME-XML): each position a series, named by its position."""
    positions = ["A1", "B2", "C3"]
    store = tmp_path / "positions.ome.zarr"
    frames = sample((2, 3, 2, 48, 64), 7)
    np.save(tmp_path / "frames.npy", frames)
    # In a process of its own: tests/ome_writers.py (the zarr-python 3.4 writers) hides the package here.
    subprocess.run([sys.executable, "-I", "-c", _OME_WRITERS_SCRIPT, str(store), str(tmp_path / "frames.npy"),
                    ",".join(positions)], check=True, timeout=120)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = mount / "positions.ome.tif"
        names, _, widths = _bioformats_series(path)
        assert names == positions and widths == [[64]] * 3
        levels = [[zarr.open_array(store / p / "0", mode="r")[:]] for p in positions]
        np.testing.assert_array_equal(levels[2][0], frames[:, 2])
        _check_pixels(path, tmp_path, levels)
        with tifffile.TiffFile(path) as tif:
            assert schema_errors(tif.ome_metadata) == []
        assert not (mount / "OME" / "METADATA.ome.xml").exists()


_OME_WRITERS_SCRIPT = """
import sys
import numpy as np
import ome_writers as ow
store, frames, positions = sys.argv[1], np.load(sys.argv[2]), sys.argv[3].split(",")
t, p, c, y, x = frames.shape
dimensions = [ow.Dimension(name="t", count=t, type="time"),
              ow.Dimension(name="p", type="position", coords=positions),
              ow.Dimension(name="c", count=c, type="channel"),
              ow.Dimension(name="y", count=y, type="space"), ow.Dimension(name="x", count=x, type="space")]
settings = ow.AcquisitionSettings(root_path=store, dimensions=dimensions, dtype="uint16",
                                  format=ow.OmeZarrFormat(backend="zarr-python"))
with ow.create_stream(settings) as stream:
    for frame in frames.reshape(-1, y, x):  # acquisition order: t, then position, then channel
        stream.append(frame)
"""


def _write_04_collection(store: Path, series: list[str], ome_xml: str | None) -> dict[str, list[np.ndarray]]:
    """A 0.4 collection on Zarr v2 as the spec lays it out: images by ome-zarr-py in groups 0, 1, ..."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image

    root = zarr.open_group(str(store), mode="w", zarr_format=2)
    root.attrs["bioformats2raw.layout"] = 3
    ome = root.require_group("OME")
    ome.attrs["series"] = series
    if ome_xml is not None:
        (store / "OME" / "METADATA.ome.xml").write_text(ome_xml)
    written = {}
    shapes = {"0": ((2, 3, 4, 64, 80), "tczyx"), "1": ((4, 48, 56), "zyx")}
    for name, (shape, axes) in shapes.items():
        data = sample(shape, 10 + int(name))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ome-zarr-py's deprecations
            write_image(data, root.require_group(name), axes=axes, fmt=FormatV04(), scale_factors=(2,))
        group = zarr.open_group(str(store / name), mode="r")
        written[name] = [group[d["path"]][:] for d in group.attrs["multiscales"][0]["datasets"]]
    return written


def test_ome_zarr_py_04_collection_on_zarr_v2(tmp_path: Path) -> None:
    store = tmp_path / "plate-less.zarr"
    original = original_ome_xml([("time lapse", "t, c, z", [("DAPI", 65535), ("GFP", 16711935), ("RFP", -16776961)]),
                                 ("stack", "z only", [("brightfield", None)])])
    written = _write_04_collection(store, ["0", "1"], original)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        path = mount / "plate-less.ome.tif"
        names, channels, widths = _bioformats_series(path)
        assert names == ["time lapse", "stack"] and channels == [["DAPI", "GFP", "RFP"], ["brightfield"]]
        assert widths == [[80, 40], [56, 28]]
        _check_pixels(path, tmp_path, [written["0"], written["1"]])
        with tifffile.TiffFile(path) as tif:
            assert schema_errors(tif.ome_metadata) == []
            assert [s.axes for s in tif.series] == ["TCZYX", "ZYX"]


FLOAT_SERIES = np.arange(64, dtype=np.float32).reshape(8, 8) / 4


def test_what_the_layout_cannot_use_is_reported(tmp_path: Path) -> None:
    """A listed series that is missing, one that is no image, and an OME-XML with another Image count:
    `zarrfs tree` and `.group.json` say each; the rest is served, a series of another data type too."""
    store = tmp_path / "broken.zarr"
    original = original_ome_xml([("a", "", [("c0", None)] * 3), ("b", "", [("z", None)])])
    written = _write_04_collection(store, ["0", "missing", "1", "odd", "2"], original)
    zarr.open_group(str(store), mode="a", zarr_format=2).require_group("odd")
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(FLOAT_SERIES, zarr.open_group(str(store / "2"), mode="w", zarr_format=2),
                    axes="yx", fmt=FormatV04(), scale_factors=())
    result = _run_tree(store)
    assert "bioformats2raw collection: 3 series listed in OME/ (0, 1, 2)" in result
    assert "problem: series 'missing' (Image 1 of the OME-XML) is missing" in result
    assert "problem: series 'odd' (Image 3 of the OME-XML) is not a multiscale image, left out" in result
    assert "problem: OME/METADATA.ome.xml describes 2 Images for 5 series" in result
    with mounted(store, tmp_path / "mnt", tmp_path / "log",
                 expected_log=[r"bioformats2raw collection /: (series|OME/METADATA)"]) as mount:
        report = json.loads((mount / ".group.json").read_text())["bioformats2raw"]
        assert report["series"] == ["0", "1", "2"]
        assert not any("left out of broken.ome.tif" in p for p in report["problems"])
        assert any("'missing'" in p for p in report["problems"])
        with tifffile.TiffFile(mount / "broken.ome.tif") as tif:
            # series 0 is the original's Image 0; series 1 (Image 2) and 2 (Image 4) are past the original's
            # Images: the name ome-zarr-py gave their multiscales
            assert [s.name for s in tif.series] == ["a", "image", "image"]
            assert [s.dtype for s in tif.series] == [np.dtype("uint16"), np.dtype("uint16"), np.dtype("float32")]
            document = tif.ome_metadata
            np.testing.assert_array_equal(tif.series[1].levels[0].asarray(), written["1"][0])
            np.testing.assert_array_equal(tif.series[2].asarray(), FLOAT_SERIES)
        assert schema_errors(document) == []


def _run_tree(store: Path) -> str:
    from mountutil import run_zarrfs

    result = run_zarrfs("tree", str(store))
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_plate_with_the_layout_stays_a_plate(tmp_path: Path) -> None:
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_plate_metadata, write_well_metadata

    store = tmp_path / "screen.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_plate_metadata(root, ["A"], ["1"], ["A/1"], fmt=FormatV04(), name="screen")
        well = root.require_group("A").require_group("1")
        write_well_metadata(well, ["0"], fmt=FormatV04())
        write_image(sample((32, 32), 1), well.require_group("0"), axes="yx", fmt=FormatV04(), scale_factors=())
    root.attrs["bioformats2raw.layout"] = 3
    assert "beside the plate: read as the plate" in _run_tree(store)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        assert sorted(p.name for p in mount.root.glob("*.ome.tif")) == ["screen.ome.tif"]
        assert "bioformats2raw" not in json.loads((mount / ".group.json").read_text())
        with tifffile.TiffFile(mount / "screen.ome.tif") as tif:
            assert ET.fromstring(tif.ome_metadata).find(f"{OME}Plate") is not None


def test_merge_keeps_what_the_file_cannot_contradict() -> None:
    """Unit: the original's Images past the file's are dropped with their ImageRefs; an image the original has
    no Image for keeps the file's own, renumbered; a document that is no 2016-06 OME-XML is not used."""
    original = original_ome_xml([("a", "", [("x", None)]), ("b", "", [("y", None)])]).replace(
        '<Instrument ID="Instrument:0">',
        '<Dataset ID="Dataset:0"><ImageRef ID="Image:0"/><ImageRef ID="Image:1"/></Dataset><Instrument ID="Instrument:0">')
    from zarrfs.conventions.semantics import Axis
    from zarrfs.formats.ome_xml import ome_xml, pixels_of

    pixels = pixels_of((Axis("c", "channel"), Axis("y", "space"), Axis("x", "space")), (1, 8, 8),
                       np.dtype("<u2"), ())
    assert pixels is not None
    ours = ome_xml([(pixels, "first"), (pixels, "second")], "urn:uuid:00000000-0000-4000-8000-000000000002", "f.ome.tif")
    merged = merged_ome_xml(original.encode(), ours, [1, 5])
    assert merged is not None and schema_errors(merged) == []
    root = ET.fromstring(merged)
    assert [(i.get("ID"), i.get("Name")) for i in root.findall(f"{OME}Image")] == [("Image:1", "b"),
                                                                                 ("Image:3", "second")]
    assert [r.get("ID") for r in root.iter(f"{OME}ImageRef")] == ["Image:1"]
    assert merged_ome_xml(b"<OME/>", ours, [0, 1]) is None
    assert merged_ome_xml(b'<!DOCTYPE x [<!ENTITY a "b">]><x/>', ours, [0]) is None


def test_numbered_series_end_at_the_first_gap_and_unknown_layouts_are_named(tmp_path: Path) -> None:
    """Without OME/'s series list the series are 0, 1, ... up to the first missing number; groups past the gap
    are named as left out. A layout number other than 3 is named, and the images stay one by one."""
    store = tmp_path / "numbered.zarr"
    _write_04_collection(store, ["0", "1"], None)
    del zarr.open_group(str(store / "OME"), mode="a", zarr_format=2).attrs["series"]
    (store / "1").rename(store / "3")
    tree = _run_tree(store)
    assert "bioformats2raw collection: 1 series numbered (0)" in tree
    assert "problem: numbered groups 3 come after a gap in the numbering" in tree
    zarr.open_group(str(store), mode="a", zarr_format=2).attrs["bioformats2raw.layout"] = 4
    assert "problem: bioformats2raw.layout 4 is not a layout zarrfs knows (3): its images are served one by one" \
        in _run_tree(store)


def test_series_list_keeps_each_entry_at_its_image() -> None:
    """Entry i of OME/'s `series` is Image i of the OME-XML: an unusable or repeated entry keeps its place."""
    from zarrfs.conventions.bioformats2raw import listed_series

    paths, problems = listed_series({"ome": {"version": "0.5", "series": ["0", "../x", "0", "2"]}})
    assert paths == ["0", None, None, "2"] and len(problems) == 2
    assert listed_series({"series": ["a", "b"]}) == (["a", "b"], [])
    assert listed_series({"series": "0"})[0] is None and listed_series({}) == (None, [])


def test_a_collection_too_large_for_one_file_is_reported(tmp_path: Path) -> None:
    """Two series of 40,000 planes each could each have a file of their own, not one together (65,536 planes at
    most): the report says so, and the file named at the listing reads as missing (built from metadata alone,
    no file written)."""
    from zarrfs.errors import NotFoundError
    from zarrfs.options import EngineOptions
    from zarrfs.files.tree import VirtualTree

    store = tmp_path / "many.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=2)
    root.attrs["bioformats2raw.layout"] = 3
    for name in ("0", "1"):
        image = root.require_group(name)
        image.create_array("0", shape=(40_000, 1, 1), chunks=(40_000, 1, 1), dtype="uint8")
        image.attrs["multiscales"] = [{"version": "0.4", "axes": [{"name": "z", "type": "space"}, {
            "name": "y", "type": "space"}, {"name": "x", "type": "space"}], "datasets": [
            {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 1]}]}]}]
    tree = VirtualTree.of_source(str(store), None, EngineOptions(), (".json", ".ome.tif"))
    try:
        document = tree.open("/.group.json")
        content = np.zeros(document.size, np.uint8)
        document.read_into(0, content)
        report = json.loads(content.tobytes())["bioformats2raw"]
        assert report["file"] is None
        with pytest.raises(NotFoundError):  # named from metadata when listed, refused when first sized
            tree.open("/many.ome.tif").size
        assert report["problems"] == ["no many.ome.tif: its series together need more planes or tiles than one "
                                      "OME-TIFF holds (65536 planes, 1048576 tiles)"]
    finally:
        tree.close()
