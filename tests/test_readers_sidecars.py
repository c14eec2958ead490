"""No served file crashes or misleads a common reader: sidecar names, headers past 3-D, pixel size.

Writers: ome-zarr-py (OME-Zarr 0.4 and 0.5, a t,c,z,y,x image whose planes
are one chunk each, and a y,x pyramid), zarr-python. Readers, each in its
own process: Bio-Formats 7.3.1 (showinf), VTK 9.2 as ParaView 5.11 ships it
(`vtkMetaImageReader`, `vtkNrrdReader`), ParaView 5.11 (pvpython `OpenDataFile`), SimpleITK, pynrrd,
libvips, OpenSlide (Debian's 3.4 command and OpenSlide 4 through
openslide-python), GDAL, tifffile. Expected values come from what was handed
to the writer, never from zarrfs.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import nrrd
import numpy as np
import openslide
import pytest
import SimpleITK as sitk
import tifffile
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.writer import write_image

from clients import gdal_read, gdalinfo_json
from mountutil import mounted
from readers import openslide_properties, paraview_open, showinf, vips_level, vtk_read

SHAPE = (2, 3, 4, 96, 128)  # t, c, z, y, x: each plane of each level is one chunk (ome-zarr-py's default)
SCALE = {"t": 2.0, "z": 0.8, "y": 0.5, "x": 0.5}
UNITS = {"t": "second", "z": "micrometer", "y": "micrometer", "x": "micrometer"}
FORMATS = {"0.4": (FormatV04, 2), "0.5": (FormatV05, 3)}
LEVELS = ("s0", "s1")


def _write_tczyx(path: Path, version: str) -> np.ndarray:
    fmt, zarr_format = FORMATS[version]
    data = (np.arange(np.prod(SHAPE), dtype=np.uint16) % 4001).reshape(SHAPE)
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ome-zarr-py warns that the channel axis gets the default scale 1
        write_image(data, group, axes="tczyx", fmt=fmt(), scale_factors=(2,), scale=SCALE, axes_units=UNITS)
    return data


def _scales(path: Path) -> dict[str, list[float]]:
    """Level path -> its scale (t, c, z, y, x), as ome-zarr-py recorded it (OME-Zarr 0.5)."""
    ome = json.loads((path / "zarr.json").read_text())["attributes"]["ome"]
    return {d["path"]: d["coordinateTransformations"][0]["scale"] for d in ome["multiscales"][0]["datasets"]}


def _stem(name: str) -> str:
    return name.rpartition(".")[0]


# ------------------------------------------------------------------ names


@pytest.mark.parametrize("version", FORMATS)
def test_bioformats_opens_every_tif_with_its_tiff_reader(version: str, tmp_path: Path) -> None:
    """A plain `N.nhdr` made Bio-Formats open `N.tif` as NRRD data (C 1, T 3 instead of C 3, Z 4, T 2)."""
    store = tmp_path / "tczyx.zarr"
    _write_tczyx(store, version)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        names = {p.name for p in mount.root.iterdir()}
        # The pairing rules of the readers (Bio-Formats' NRRDReader.isThisType, GDAL's ENVI header search):
        # X.nhdr / X.hdr is taken as the header of X and of any X.<ext>. Only N.raw may have one.
        for name in names:
            for header in (name + ".nhdr", _stem(name) + ".nhdr", name + ".hdr", _stem(name) + ".hdr"):
                assert header == name or header not in names or name.endswith(".raw"), (name, header)
        for level in LEVELS:
            assert f"{level}.nrrd.nhdr" in names and f"{level}.raw.hdr" in names
        tifs = sorted(n for n in names if n.endswith(".tif") and not n.endswith(".ome.tif"))
        # Every level's .tif and .tiled.tif: the tiled one is built for planes of exactly one chunk too.
        assert tifs == [f"{level}{kind}" for level in LEVELS for kind in (".tif", ".tiled.tif")]
        for name in tifs:
            info = showinf(mount / name)
            assert info.reader == "Tagged Image File Format", (name, info.output[-2000:])
            sizes = info.series[0]
            level = LEVELS.index(name.partition(".")[0])
            assert (sizes["SizeX"], sizes["SizeY"]) == (SHAPE[4] >> level, SHAPE[3] >> level), name
            if name.endswith(".tiled.tif"):  # pages in C order with no ImageJ hyperstack: all planes, one axis
                assert sizes["SizeZ"] * sizes["SizeC"] * sizes["SizeT"] == np.prod(SHAPE[:3]), name
            else:
                assert (sizes["SizeZ"], sizes["SizeC"], sizes["SizeT"]) == (SHAPE[2], SHAPE[1], SHAPE[0]), name


def test_tiled_tif_of_one_chunk_planes_over_a_megabyte(tmp_path: Path) -> None:
    """A plane that is exactly one tile has no gap after it (tifffile writes such pages contiguously)."""
    store = tmp_path / "planes.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    arrays = {"bands": (3, 512, 512), "pages": (2, 2, 512, 512)}  # float32 512 x 512: a 1 MiB tile
    expected = {}
    for name, shape in arrays.items():
        data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        group.create_array(name, shape=shape, dtype=data.dtype, chunks=(1,) * (len(shape) - 2) + (512, 512))[...] = data
        expected[name] = data
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        np.testing.assert_array_equal(gdal_read(str(mount / "bands.tiled.tif")), expected["bands"])
        np.testing.assert_array_equal(gdal_read(str(mount / "pages.tiled.tif"), page=4), expected["pages"][1, 1])
        with tifffile.TiffFile(mount / "pages.tiled.tif") as tif:
            np.testing.assert_array_equal(tif.asarray(key=range(4)).reshape(arrays["pages"]), expected["pages"])


# --------------------------------------------------- headers past 3-D: VTK, ParaView, ITK


def test_vtk_and_paraview_read_each_volume_itk_and_pynrrd_the_whole_array(tmp_path: Path) -> None:
    store = tmp_path / "tczyx.zarr"
    _write_tczyx(store, "0.5")
    scales = _scales(store)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        names = {p.name for p in mount.root.iterdir()}
        for level in LEVELS:
            expected = np.load(mount / f"{level}.npy")
            assert f"{level}.mhd" not in names  # a 5-D MetaImage corrupts VTK's heap
            volumes = sorted(n for n in names if n.startswith(f"{level}.t") and n.endswith(".mhd"))
            assert volumes == [f"{level}.t{t}.c{c}.mhd" for t in range(SHAPE[0]) for c in range(SHAPE[1])]
            for t in range(SHAPE[0]):
                for c in range(SHAPE[1]):
                    header = mount / f"{level}.t{t}.c{c}.mhd"
                    run = vtk_read(header, "vtkMetaImageReader", tmp_path)
                    assert run.returncode == 0 and run.result is not None, run.output[-2000:]
                    assert run.result["dimensions"] == list(expected.shape[:1:-1])
                    assert run.result["spacing"] == pytest.approx(scales[level][:1:-1])  # x, y, z
                    np.testing.assert_array_equal(run.values, expected[t, c], err_msg=header.name)
                    image = sitk.ReadImage(str(header))
                    np.testing.assert_array_equal(sitk.GetArrayFromImage(image), expected[t, c])
            # The whole 5-D array: ITK and pynrrd read it; VTK declines it (no crash, nothing read).
            whole = mount / f"{level}.nrrd.nhdr"
            run = vtk_read(whole, "vtkNrrdReader", tmp_path)
            assert run.returncode == 0 and run.result is not None, run.output[-2000:]
            assert run.result["dimensions"] == [0, 0, 0] and run.values is None
            image = sitk.ReadImage(str(whole))
            np.testing.assert_array_equal(sitk.GetArrayFromImage(image), expected)
            values, _ = nrrd.read(str(whole), index_order="C")
            np.testing.assert_array_equal(values, expected)
        # ParaView opens every file of a level with the reader it picks: it never crashes or hangs.
        for name in sorted(n for n in names if n.startswith("s1.")):
            run = paraview_open(mount / name)
            assert run.returncode == 0 and run.result is not None, (name, run.output[-2000:])
            if name.endswith(".mhd"):
                t, c = (int(part[1:]) for part in name.split(".")[1:3])
                volume = np.load(mount / "s1.npy")[t, c]
                assert run.result["reader"] == "MetaImageReader"
                assert run.result["extent"] == [0, volume.shape[2] - 1, 0, volume.shape[1] - 1,
                                                0, volume.shape[0] - 1]
                assert run.result["ranges"]["MetaImage"] == [float(volume.min()), float(volume.max())]


def test_vtk_reads_3d_headers_and_volumes_of_unnamed_axes(tmp_path: Path) -> None:
    store = tmp_path / "plain.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    zyx = (np.arange(6 * 24 * 20) % 251).astype(np.int16).reshape(6, 24, 20)
    four = (np.arange(3 * 5 * 16 * 12) % 997).astype(np.float32).reshape(3, 5, 16, 12)
    group.create_array("zyx", shape=zyx.shape, dtype=zyx.dtype, chunks=(2, 8, 8))[...] = zyx
    group.create_array("four", shape=four.shape, dtype=four.dtype, chunks=(1, 2, 8, 8))[...] = four
    group.create_array("many", shape=(65, 2, 4, 4), dtype="u1", chunks=(65, 2, 4, 4))  # 65 volumes: over the bound
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for name, reader in (("zyx.mhd", "vtkMetaImageReader"), ("zyx.nrrd.nhdr", "vtkNrrdReader")):
            run = vtk_read(mount / name, reader, tmp_path)
            assert run.returncode == 0, run.output[-2000:]
            np.testing.assert_array_equal(run.values, zyx, err_msg=name)
        names = {p.name for p in mount.root.iterdir()}
        assert "four.mhd" not in names
        assert "many.nrrd.nhdr" in names and not any(n.startswith("many.") and n.endswith(".mhd") for n in names)
        for i in range(four.shape[0]):
            run = vtk_read(mount / f"four.dim0_{i}.mhd", "vtkMetaImageReader", tmp_path)
            assert run.returncode == 0, run.output[-2000:]
            np.testing.assert_array_equal(run.values, four[i])
        run = vtk_read(mount / "four.nrrd.nhdr", "vtkNrrdReader", tmp_path)
        assert run.returncode == 0 and run.values is None, run.output[-2000:]
        np.testing.assert_array_equal(sitk.GetArrayFromImage(sitk.ReadImage(str(mount / "four.nrrd.nhdr"))), four)


# ------------------------------------------------------ pixel size the standard TIFF way


@pytest.mark.parametrize(("unit", "scale"), [("micrometer", 0.25), ("nanometer", 250.0)])
def test_tiled_tif_pixel_size_for_vips_and_openslide(unit: str, scale: float, tmp_path: Path) -> None:
    """`.tiled.tif`: pixels per centimetre (ResolutionUnit 3); `.tif` stays ImageJ's pixels per unit."""
    store = tmp_path / "yx.zarr"
    data = (np.arange(192 * 256) % 4001).astype(np.uint16).reshape(192, 256)
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(data, group, axes="yx", fmt=FormatV05(), scale_factors=(2, 4), scale={"y": scale, "x": scale},
                    axes_units={"y": unit, "x": unit}, storage_options={"chunks": (64, 64)})
    mpp = 0.25  # micrometres per pixel either way
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        tiled = mount / "s0.tiled.tif"
        _, fields = vips_level(tiled, -1, tmp_path)
        assert float(fields["xres"]) == pytest.approx(1000 / mpp)  # libvips: pixels per millimetre
        assert float(fields["yres"]) == pytest.approx(1000 / mpp)
        assert fields["resolution-unit"] == "cm"
        debian = openslide_properties(tiled)  # OpenSlide 3.4 reports the tags, not mpp, for a generic TIFF
        assert debian["tiff.ResolutionUnit"] == "centimeter"
        assert float(debian["tiff.XResolution"]) == pytest.approx(10000 / mpp)
        assert debian["openslide.level-count"] == "3"
        with openslide.OpenSlide(str(tiled)) as slide:  # OpenSlide 4: what QuPath and pathology tools read
            assert float(slide.properties["openslide.mpp-x"]) == pytest.approx(mpp)
            assert float(slide.properties["openslide.mpp-y"]) == pytest.approx(mpp)
            assert slide.level_dimensions == ((256, 192), (128, 96), (64, 48))
        # GDAL reads the same pixels, with the resolution as TIFF metadata.
        info = gdalinfo_json(str(tiled))
        assert info["metadata"][""]["TIFFTAG_RESOLUTIONUNIT"] == "3 (pixels/cm)"
        assert len(info["bands"][0]["overviews"]) == 2
        np.testing.assert_array_equal(gdal_read(str(tiled)), data)
        with tifffile.TiffFile(mount / "s0.tif") as tif:  # ImageJ's file: pixels per micrometre, unit none
            assert tif.pages[0].tags["ResolutionUnit"].value == 1
            assert tif.pages[0].get_resolution() == pytest.approx((1 / mpp, 1 / mpp) if unit == "micrometer"
                                                                  else (1 / scale, 1 / scale))
