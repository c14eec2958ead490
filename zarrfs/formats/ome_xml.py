"""The OME-XML (2016-06 schema) of an OME-TIFF: its Images (Pixels, Channels, TiffData) and a Plate.

Only what the metadata says is written: sizes and type always; physical
sizes, time increment, channel names and colours when the OME-Zarr image
declares them; each plane's stage position (`Plane PositionX/Y/Z`: the
centre of its first pixel, as OME-Zarr's origin is) when the image has an
origin, or a place in an OME-Zarr scene, which then gives the positions.
Units are OME's symbols (`µm`, `s`); a unit OME has no symbol for is left
out with its value rather than stated wrongly.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

import numpy

from ..conventions.semantics import Axis, Channel

NAMESPACE = "http://www.openmicroscopy.org/Schemas/OME/2016-06"
_SCHEMA_LOCATION = f"{NAMESPACE} {NAMESPACE}/ome.xsd"

# OME `Pixels@Type` by numpy (kind, itemsize); OME has no 64-bit integers nor float16.
PIXEL_TYPES = {
    ("i", 1): "int8", ("u", 1): "uint8", ("b", 1): "uint8",
    ("i", 2): "int16", ("u", 2): "uint16",
    ("i", 4): "int32", ("u", 4): "uint32",
    ("f", 4): "float", ("f", 8): "double",
    ("c", 8): "complex", ("c", 16): "double-complex",
}

# UDUNITS-2 names (OME-Zarr) and common abbreviations -> OME UnitsLength / UnitsTime symbols.
LENGTH_SYMBOLS = {
    "angstrom": "Å", "picometer": "pm", "nanometer": "nm", "nm": "nm", "micrometer": "µm", "micrometre": "µm",
    "micron": "µm", "um": "µm", "µm": "µm", "\u03bcm": "µm", "millimeter": "mm", "millimetre": "mm",
    "mm": "mm", "centimeter": "cm", "centimetre": "cm", "cm": "cm", "decimeter": "dm", "meter": "m",
    "metre": "m", "m": "m", "kilometer": "km", "inch": "in", "foot": "ft", "yard": "yd", "mile": "mi",
}
# Plane elements beyond this many (one per z, c, t) would make the header big for little: none are written.
MAX_PLANE_ELEMENTS = 10_000
TIME_SYMBOLS = {
    "picosecond": "ps", "nanosecond": "ns", "microsecond": "µs", "millisecond": "ms", "ms": "ms",
    "second": "s", "s": "s", "sec": "s", "minute": "min", "min": "min", "hour": "h", "h": "h", "day": "d",
}


@dataclass(frozen=True)
class OmePixels:
    """What the Pixels element says: XYZCT sizes, order of the planes, calibration, channels."""

    dimension_order: str  # e.g. "XYZCT": the planes' order, fastest first after X and Y
    sizes: dict[str, int]  # "X", "Y", "Z", "C", "T"
    dtype: numpy.dtype
    physical: dict[str, tuple[float, str]]  # "X"/"Y"/"Z" -> (size, OME unit symbol)
    time_increment: tuple[float, str] | None
    channels: tuple[Channel, ...]
    # "X"/"Y"/"Z" -> (position of index 0, step, OME unit symbol); empty when no plane positions are said.
    positions: dict[str, tuple[float, float, str]] = dataclasses.field(default_factory=dict)


def pixels_of(axes: tuple[Axis, ...], shape: tuple[int, ...], dtype: numpy.dtype,
              channels: tuple[Channel, ...], placed: tuple[Axis, ...] | None = None) -> OmePixels | None:
    """The Pixels of an array with `axes` (last two y, x), planes in C order; None when OME cannot say it.

    `placed` are the same axes in a scene's coordinate system: the plane
    positions are said there; else in `axes` when one has an origin.

    Each leading axis becomes Z, C or T by its kind (a custom axis takes a
    letter no other axis uses); two leading axes that need the same letter,
    or more than three, cannot be said. C order over the leading axes makes
    the last one the fastest: DimensionOrder lists them from the last, then
    the letters of size 1.
    """
    if len(axes) != len(shape) or len(shape) < 2 or len(shape) > 5 or PIXEL_TYPES.get(
            (dtype.kind, dtype.itemsize)) is None:
        return None
    letters: list[str | None] = [{"space": "Z", "channel": "C", "time": "T"}.get(a.kind) for a in axes[:-2]]
    free = [letter for letter in "ZTC" if letter not in letters]
    for i, letter in enumerate(letters):
        if letter is None:
            letters[i] = free.pop(0)
    if len(set(letters)) != len(letters):
        return None
    used = [letter for letter in letters if letter is not None]
    order = "XY" + "".join(reversed(used)) + "".join(letter for letter in "ZCT" if letter not in used)
    sizes = {"X": shape[-1], "Y": shape[-2], "Z": 1, "C": 1, "T": 1}
    for letter, size in zip(used, shape[:-2], strict=True):
        sizes[letter] = size
    physical: dict[str, tuple[float, str]] = {}
    time_increment = None
    for letter, axis in [*zip(used, axes[:-2], strict=True), ("Y", axes[-2]), ("X", axes[-1])]:
        if axis.scale is None:
            continue
        if letter in "XYZ" and axis.kind == "space" and LENGTH_SYMBOLS.get(axis.unit or "micrometer"):
            physical[letter] = (axis.scale, LENGTH_SYMBOLS[axis.unit or "micrometer"])
        elif letter == "T" and axis.kind == "time" and TIME_SYMBOLS.get(axis.unit or "second"):
            time_increment = (axis.scale, TIME_SYMBOLS[axis.unit or "second"])
    if len(channels) != sizes["C"]:
        channels = ()
    letter_of = dict(zip(range(len(axes) - 2), used, strict=True)) | {len(axes) - 2: "Y", len(axes) - 1: "X"}
    positions = _positions(placed if placed is not None and len(placed) == len(axes) else axes, letter_of,
                           must=placed is not None)
    return OmePixels(order, sizes, dtype, physical, time_increment, channels, positions)


def _positions(axes: tuple[Axis, ...], letter_of: dict[int, str], must: bool) -> dict[str, tuple[float, float, str]]:
    """X/Y/Z -> (coordinate of index 0, step, unit) of the space axes with a length unit; empty unless one has
    a non-zero origin or `must`."""
    positions = {}
    for index, axis in enumerate(axes):
        letter = letter_of[index]
        unit = LENGTH_SYMBOLS.get(axis.unit or "micrometer")
        if letter in "XYZ" and axis.kind == "space" and unit and axis.origin is not None:
            positions[letter] = (axis.origin, axis.scale if axis.scale is not None else 0.0, unit)
    return positions if must or any(origin for origin, _, _ in positions.values()) else {}


@dataclass(frozen=True)
class OmePlate:
    """The Plate element: which image each well's samples are (indices into the file's images)."""

    name: str | None
    rows: int
    columns: int
    wells: tuple[tuple[int, int, tuple[int, ...]], ...]  # (row, column, image indices)


def ome_xml(images: Sequence[tuple[OmePixels, str | None]], uuid: str, file_name: str,
            plate: OmePlate | None = None) -> bytes:
    """The OME-XML document for `images` (pixels, name) stored in one file, one after the other in the
    main IFD chain, every plane of each in its DimensionOrder; with `plate`, the Plate that holds them."""
    ET.register_namespace("", NAMESPACE)
    root = ET.Element(_tag("OME"), {
        "xmlns:xsi": "http://www.w3.org/2001/XMLSchema-instance",
        "xsi:schemaLocation": _SCHEMA_LOCATION,
        "UUID": uuid,
        "Creator": "zarrfs",
    })
    if plate is not None:  # the schema puts Plate before Image
        _plate(root, plate)
    first_ifd = 0
    for index, (pixels, name) in enumerate(images):
        first_ifd += _image(root, index, pixels, name, first_ifd, uuid, file_name)
    return b'<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(root, encoding="utf-8", xml_declaration=False)


def _image(root: ET.Element, index: int, pixels: OmePixels, name: str | None, first_ifd: int, uuid: str,
           file_name: str) -> int:
    """Add Image `index`, whose planes start at IFD `first_ifd`; return its plane count."""
    image = ET.SubElement(root, _tag("Image"), {"ID": f"Image:{index}", **({"Name": name} if name else {})})
    attributes = {
        "ID": f"Pixels:{index}",
        "DimensionOrder": pixels.dimension_order,
        "Type": PIXEL_TYPES[(pixels.dtype.kind, pixels.dtype.itemsize)],
        **{f"Size{letter}": str(pixels.sizes[letter]) for letter in "XYZCT"},
        "BigEndian": "true" if pixels.dtype.byteorder == ">" else "false",
        "Interleaved": "false",
    }
    for letter, (size, unit) in pixels.physical.items():
        attributes[f"PhysicalSize{letter}"] = _number(size)
        attributes[f"PhysicalSize{letter}Unit"] = unit
    if pixels.time_increment is not None:
        attributes["TimeIncrement"] = _number(pixels.time_increment[0])
        attributes["TimeIncrementUnit"] = pixels.time_increment[1]
    element = ET.SubElement(image, _tag("Pixels"), attributes)
    for channel_index in range(pixels.sizes["C"]):
        channel = pixels.channels[channel_index] if pixels.channels else Channel()
        channel_attributes = {"ID": f"Channel:{index}:{channel_index}", "SamplesPerPixel": "1"}
        if channel.label:
            channel_attributes["Name"] = channel.label
        if channel.color:
            channel_attributes["Color"] = str(_signed_rgba(channel.color))
        ET.SubElement(element, _tag("Channel"), channel_attributes)
    planes = pixels.sizes["Z"] * pixels.sizes["C"] * pixels.sizes["T"]
    tiff_data = ET.SubElement(element, _tag("TiffData"), {"IFD": str(first_ifd), "PlaneCount": str(planes)})
    ET.SubElement(tiff_data, _tag("UUID"), {"FileName": file_name}).text = uuid
    if pixels.positions and planes <= MAX_PLANE_ELEMENTS:  # the schema puts Plane after TiffData
        _planes(element, pixels)
    return planes


def _planes(element: ET.Element, pixels: OmePixels) -> None:
    """One Plane per (z, c, t) in the file's order, with the stage position of its first pixel's centre."""
    letters = pixels.dimension_order[2:]  # fastest first
    for number in range(pixels.sizes["Z"] * pixels.sizes["C"] * pixels.sizes["T"]):
        index, rest = {}, number
        for letter in letters:
            index[letter], rest = rest % pixels.sizes[letter], rest // pixels.sizes[letter]
        attributes = {"TheZ": str(index["Z"]), "TheT": str(index["T"]), "TheC": str(index["C"])}
        for letter, (origin, step, unit) in pixels.positions.items():
            # X and Y: the plane's first pixel; Z: this plane's own depth.
            attributes[f"Position{letter}"] = _number(origin + step * index["Z"] if letter == "Z" else origin)
            attributes[f"Position{letter}Unit"] = unit
        ET.SubElement(element, _tag("Plane"), attributes)


def _plate(root: ET.Element, plate: OmePlate) -> None:
    element = ET.SubElement(root, _tag("Plate"), {
        "ID": "Plate:0", **({"Name": plate.name} if plate.name else {}),
        "Rows": str(plate.rows), "Columns": str(plate.columns),
        "RowNamingConvention": "letter", "ColumnNamingConvention": "number",
    })
    for well_index, (row, column, images) in enumerate(plate.wells):
        well = ET.SubElement(element, _tag("Well"), {"ID": f"Well:{well_index}", "Row": str(row),
                                                      "Column": str(column)})
        for sample_index, image in enumerate(images):
            sample = ET.SubElement(well, _tag("WellSample"), {"ID": f"WellSample:{well_index}:{sample_index}",
                                                               "Index": str(image)})  # unique in the plate
            ET.SubElement(sample, _tag("ImageRef"), {"ID": f"Image:{image}"})


def _tag(name: str) -> str:
    return f"{{{NAMESPACE}}}{name}"


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value)) if abs(value) < 1e15 \
        else repr(float(value))


def _signed_rgba(color: str) -> int:
    """'RRGGBB' as OME's Color: RGBA (alpha 255) read as a signed 32-bit integer."""
    value = (int(color, 16) << 8) | 0xFF
    return value - (1 << 32) if value >= 1 << 31 else value
