"""Ask real third-party readers what they see in an image file.

zarrfs's files are only useful if the programs people use read them the same
way tifffile does, so tests can put the same question to:

* stock ImageJ 1.x: Debian's ``imagej`` package (its ``/usr/share/java/ij.jar``)
  running a ``-batch`` macro whose plain ``open()`` uses ImageJ's own TIFF
  reader, not Bio-Formats;
* GDAL's command-line tools (Debian's ``gdal-bin``).

``scripts/install_clients.sh`` installs both.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

IJ_JAR = Path("/usr/share/java/ij.jar")
IMAGEJ_TIMEOUT_S = 120.0
XVFB_START_TIMEOUT_S = 30.0
GDAL_TIMEOUT_S = 120.0

# Prefix of the lines our macro prints, to tell them from ImageJ's own messages
# (which go to the same stdout).
_TAG = "ZARRFS"

# In -batch mode any macro error opens a modal "Macro Error" dialog that nobody
# closes on a virtual display, so ImageJ would hang until the timeout.  The
# macro therefore checks everything that could fail and reports it with
# print() + exit instead.  A failed open() raises nothing either: ImageJ
# prints a message (not always) and leaves nImages at 0.
_MACRO_HEAD = f"""
open(getArgument());
if (nImages == 0) {{
    print("{_TAG} error: ImageJ opened no image");
    exit;
}}
getDimensions(width, height, channels, slices, frames);
print("{_TAG} dims " + width + " " + height + " " + channels + " " + slices + " " + frames + " " + bitDepth());

function value(x, y, index) {{
    if (x < 0 || y < 0 || x >= getWidth() || y >= getHeight() || index < 1 || index > nSlices) {{
        print("{_TAG} error: pixel (" + x + ", " + y + ", " + index + ") is outside the image");
        exit;
    }}
    setSlice(index);
    // d2s with negative decimals: scientific notation with all the digits a
    // float32 needs; print(v) would round to 4 decimals.
    print("{_TAG} value " + d2s(getPixel(x, y), -9));
}}
"""

# Appended when a test asks for ImageJ's calibration and channel display:
# pixel size and units, frame interval, origin, composite mode, and per
# channel the LUT's colour at 255, the display range and the plane label.
_MACRO_CALIBRATION = f"""
getVoxelSize(pixelWidth, pixelHeight, voxelDepth, unit);
print("{_TAG} voxel " + d2s(pixelWidth, -9) + " " + d2s(pixelHeight, -9) + " " + d2s(voxelDepth, -9) + " " + unit);
Stack.getUnits(xUnit, yUnit, zUnit, timeUnit, valueUnit);
print("{_TAG} units " + xUnit + "|" + yUnit + "|" + zUnit + "|" + timeUnit + "|" + valueUnit);
print("{_TAG} finterval " + d2s(Stack.getFrameInterval(), -9));
// Pixel (0, 0, slice 0) in calibrated units: the calibration's origin.
originX = 0; originY = 0; originZ = 0;
toScaled(originX, originY, originZ);
print("{_TAG} origin " + d2s(originX, -9) + " " + d2s(originY, -9) + " " + d2s(originZ, -9));
print("{_TAG} composite " + is("composite"));
for (c = 1; c <= channels; c++) {{
    if (channels > 1) Stack.setPosition(c, 1, 1);
    getLut(reds, greens, blues);
    getMinAndMax(low, high);
    // The label is last: it may hold spaces.
    print("{_TAG} channel " + reds[255] + " " + greens[255] + " " + blues[255] + " "
          + d2s(low, -9) + " " + d2s(high, -9) + " " + getInfo("slice.label"));
}}
"""

_ENVI_DTYPES = {1: "u1", 2: "i2", 3: "i4", 4: "f4", 5: "f8", 12: "u2", 13: "u4", 14: "i8", 15: "u8"}


class ClientError(RuntimeError):
    """A client program failed or misbehaved; the message carries its output."""


def imagej_available() -> bool:
    """True if stock ImageJ, a JVM and Xvfb are installed."""
    return IJ_JAR.is_file() and shutil.which("java") is not None and shutil.which("Xvfb") is not None


def gdal_available() -> bool:
    """True if GDAL's command-line tools are installed."""
    return shutil.which("gdalinfo") is not None and shutil.which("gdal_translate") is not None


def imagej_describe(path: str, pixels: list[tuple[int, int, int]], *, calibration: bool = False) -> dict:
    """Open ``path`` in stock ImageJ and report what it sees.

    ``pixels`` are (x, y, stack_index) triples, stack_index 1-based over
    ImageJ's whole stack (for a hyperstack: channel fastest, then slice, then
    frame).  Returns {"width", "height", "channels", "slices", "frames",
    "bitDepth", "values"}, values in the order of ``pixels``: int, or float for
    32-bit images.  With ``calibration``, also ImageJ's calibration and display: "voxelSize" (pixel
    width, height, depth), "unit", "units" (x, y, z, time), "frameInterval",
    "origin" (pixel 0, 0, slice 0 in calibrated units), "composite", and
    "channelDisplay" (per channel: LUT colour at 255, display range, label of
    the channel's first plane).  Raises ClientError with ImageJ's output on any failure.
    """
    calls = "".join(f"value({int(x)}, {int(y)}, {int(index)});\n" for x, y, index in pixels)
    macro = _MACRO_HEAD + (_MACRO_CALIBRATION if calibration else "") + calls + f'print("{_TAG} done");\n'
    output = _run_imagej(macro, os.path.abspath(path))
    seen = _parse_imagej_output(output, expected_values=len(pixels))
    return {**seen, **_parse_calibration(output)} if calibration else seen


def gdalinfo_json(path: str) -> dict:
    """What ``gdalinfo -json`` reports about ``path``."""
    return json.loads(_run_tool(["gdalinfo", "-json", path]))


def gdal_read(path: str, page: int | None = None) -> np.ndarray:
    """The pixels GDAL decodes from ``path``: (y, x) for one band, else (band, y, x).

    GDAL shows only the first page of a multi-page TIFF; ``page`` (1-based)
    picks another through GDAL's ``GTIFF_DIR:page:path`` subdataset syntax.
    The pixels leave GDAL as an ENVI file (raw samples plus a text header),
    so no second TIFF reader takes part in the answer.
    """
    source = path if page is None else f"GTIFF_DIR:{page}:{path}"
    with tempfile.TemporaryDirectory(prefix="zarrfs-gdal-") as tmp:
        raw = Path(tmp) / "pixels.raw"
        _run_tool(["gdal_translate", "-q", "-of", "ENVI", "-co", "INTERLEAVE=BSQ", source, str(raw)])
        return _read_envi(raw, raw.with_suffix(".hdr"))


# QGIS's Python API is Debian's python3-qgis, for Debian's python3 (not this venv's).
QGIS_PYTHON = "/usr/bin/python3"
_QGIS_LAYER = """
import json, os, sys
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from qgis.core import QgsApplication, QgsRasterLayer
app = QgsApplication([], False)
app.initQgis()
layer = QgsRasterLayer(sys.argv[1], "map", "gdal")
provider = layer.dataProvider()
extent = layer.extent()
print(json.dumps({"valid": layer.isValid(), "size": [layer.width(), layer.height()], "crs": layer.crs().authid(),
                  "extent": [extent.xMinimum(), extent.yMinimum(), extent.xMaximum(), extent.yMaximum()],
                  "has_pyramids": provider.hasPyramids(),
                  "pyramids": [[p.getXDim(), p.getYDim(), p.getExists()] for p in provider.buildPyramidList()]}))
del provider, layer  # a layer alive at exitQgis crashes QGIS 3.22's teardown
app.exitQgis()
"""


def qgis_available() -> bool:
    """True if Debian's python3 imports QGIS (python3-qgis)."""
    return subprocess.run([QGIS_PYTHON, "-c", "import qgis.core"], capture_output=True, check=False).returncode == 0


def qgis_layer(path: str) -> dict:
    """What QGIS (headless) makes of a raster: validity, size, CRS, extent and its pyramid list.

    The pyramid list is QGIS's own: the power-of-two levels it would build,
    `exists` where the file has an overview of (about) that size.
    """
    output = _run_tool([QGIS_PYTHON, "-c", _QGIS_LAYER, path])
    return json.loads(output.strip().splitlines()[-1])


def _run_imagej(macro: str, argument: str) -> str:
    """Run ``macro`` in a fresh ImageJ with ``argument`` as getArgument(); return its output."""
    with tempfile.TemporaryDirectory(prefix="zarrfs-imagej-") as tmp:
        workdir = Path(tmp)
        macro_file = workdir / "describe.ijm"
        macro_file.write_text(macro)
        command = [
            "java",
            # Keep the JVM's and ImageJ's per-user files (font cache, prefs) out of $HOME.
            f"-Duser.home={workdir}",
            "-cp", str(IJ_JAR), "ij.ImageJ",
            "-batch", str(macro_file), argument,
        ]
        with _virtual_display(workdir / "xvfb.log") as display:
            try:
                # One JVM process, no children: run()'s kill on timeout ends it all.
                done = subprocess.run(
                    command,
                    env={**os.environ, "DISPLAY": display},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=IMAGEJ_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired as exc:
                # run() has killed and reaped the JVM; the partial output is undecoded bytes.
                partial = (exc.stdout or b"").decode(errors="replace")
                raise ClientError(
                    f"ImageJ did not finish within {IMAGEJ_TIMEOUT_S:g} s (most likely stopped at an "
                    f"error dialog) on {argument}; its output:\n{partial}"
                ) from None
    # ImageJ -batch exits 0 even after an exception, so the output is the only verdict.
    return done.stdout


@contextmanager
def _virtual_display(log: Path) -> Iterator[str]:
    """Run a private Xvfb while the block runs; yield its DISPLAY value.

    ImageJ builds its menu bar even in -batch mode, and that needs an X
    display.  Xvfb is started directly rather than through xvfb-run so that it
    is our own child, ended and reaped here, and ``-displayfd`` lets the server
    pick a free display itself instead of guessing from lock files.
    """
    read_fd, write_fd = os.pipe()
    with open(read_fd, "rb", buffering=0) as reader:
        try:
            with log.open("wb") as log_file:
                xvfb = subprocess.Popen(
                    ["Xvfb", "-displayfd", str(write_fd), "-nolisten", "tcp", "-screen", "0", "1024x768x24"],
                    pass_fds=(write_fd,),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
        finally:
            os.close(write_fd)
        try:
            # Xvfb writes the display number once it accepts connections; EOF if it died.
            ready, _, _ = select.select([reader], [], [], XVFB_START_TIMEOUT_S)
            number = reader.read(64).decode().strip() if ready else ""
            if not number.isdigit():
                raise ClientError(f"Xvfb did not start; its output:\n{log.read_text(errors='replace')}")
            yield f":{number}"
        finally:
            end_process(xvfb)


def end_process(process: subprocess.Popen) -> None:
    """End a child we started and reap it: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _parse_imagej_output(output: str, expected_values: int) -> dict:
    """Turn the macro's tagged lines into imagej_describe's dict, or raise ClientError."""
    tagged = [line.split(maxsplit=1)[1] for line in output.splitlines() if line.startswith(_TAG + " ")]
    dims = [line.split()[1:] for line in tagged if line.startswith("dims ")]
    values = [line.split()[1] for line in tagged if line.startswith("value ")]
    if "done" not in tagged or len(dims) != 1 or len(values) != expected_values:
        raise ClientError(f"ImageJ did not describe the image; its output:\n{output}")
    width, height, channels, slices, frames, bit_depth = (int(d) for d in dims[0])
    # Only 32-bit images hold non-integers; the others come back as exact ints.
    numbers = [float(v) for v in values] if bit_depth == 32 else [int(float(v)) for v in values]
    return {
        "width": width,
        "height": height,
        "channels": channels,
        "slices": slices,
        "frames": frames,
        "bitDepth": bit_depth,
        "values": numbers,
    }


def _parse_calibration(output: str) -> dict:
    """The lines of _MACRO_CALIBRATION as imagej_describe's extra keys."""
    tagged = [line.split(maxsplit=1)[1] for line in output.splitlines() if line.startswith(_TAG + " ")]
    lines = {line.split(maxsplit=1)[0]: line.split(maxsplit=1)[1:] for line in tagged}
    if not {"voxel", "units", "finterval", "origin", "composite"} <= lines.keys():
        raise ClientError(f"ImageJ did not report the calibration; its output:\n{output}")
    width, height, depth, unit = lines["voxel"][0].split(maxsplit=3)
    x_unit, y_unit, z_unit, time_unit, _ = lines["units"][0].split("|")
    channels = []
    for line in tagged:
        if line.startswith("channel "):
            red, green, blue, low, high, *label = line.split(maxsplit=6)[1:]
            channels.append({"color": (int(red), int(green), int(blue)), "range": (float(low), float(high)),
                             "label": label[0] if label else ""})
    return {
        "voxelSize": (float(width), float(height), float(depth)),
        "unit": unit,
        "units": {"x": x_unit, "y": y_unit, "z": z_unit, "time": time_unit},
        "frameInterval": float(lines["finterval"][0]),
        "origin": tuple(float(v) for v in lines["origin"][0].split()),
        "composite": lines["composite"][0] == "1",
        "channelDisplay": channels,
    }


def _run_tool(command: list[str]) -> str:
    """Run a command-line tool; return its stdout, or raise ClientError with its stderr."""
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=GDAL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise ClientError(f"{command[0]} did not finish within {GDAL_TIMEOUT_S:.0f} s: {command}") from None
    if done.returncode != 0:
        raise ClientError(f"{command} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def _read_envi(raw: Path, header: Path) -> np.ndarray:
    """Read a band-sequential ENVI file as written by GDAL."""
    fields = dict(re.findall(r"^(samples|lines|bands|data type|byte order|header offset)\s*=\s*(\d+)",
                             header.read_text(), flags=re.MULTILINE))
    code = int(fields["data type"])
    if code not in _ENVI_DTYPES:
        raise ClientError(f"ENVI data type {code} is not one gdal_read handles")
    dtype = np.dtype(("<" if fields["byte order"] == "0" else ">") + _ENVI_DTYPES[code])
    shape = (int(fields["bands"]), int(fields["lines"]), int(fields["samples"]))
    data = np.fromfile(raw, dtype=dtype, offset=int(fields["header offset"])).reshape(shape)
    return data[0] if shape[0] == 1 else data
