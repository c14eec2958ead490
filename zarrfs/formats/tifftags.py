"""What a `.tif` says about its pixels, from an array's `Semantics`.

Pure functions from the conventions layer's description to what tifffile
writes: the ImageJ hyperstack axes and plane order, ImageJ's calibration
(pixel size, units, z spacing, frame interval, origins), its channel display
(composite mode, colours, names, display ranges), and the GeoTIFF tags and
band descriptions GDAL reads. `tiff.py` and `tiled_tiff.py` build the files;
nothing here touches pixel data.
"""

from __future__ import annotations

import colorsys
import enum
import math
import re
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

import numpy
from tifffile import geodb

from zarrfs.conventions.semantics import Axis, Channel, GeoReference, LabelColor, Quantity, Semantics

# A tifffile `extratags` entry: (code, TIFF type, count, value, write to the first page only).
TagTuple = tuple[int, int, int, Any, bool]

# Dimension names that say which ImageJ axis a leading dimension is, for
# axes the conventions did not classify (and for bare `dimension_names`).
AXIS_NAMES = {
    "t": "T",
    "time": "T",
    "frame": "T",
    "frames": "T",
    "z": "Z",
    "slice": "Z",
    "slices": "Z",
    "c": "C",
    "ch": "C",
    "channel": "C",
    "channels": "C",
}
_KIND_LETTERS = {"time": "T", "channel": "C", "space": "Z"}

# ImageJ's own spellings where it has one: it saves micrometres as "micron"
# (plural "microns", and shows µm for "um"); the description is 7-bit ASCII,
# so symbols like µ and Å cannot be written. Other UDUNITS names pass through
# as text, which ImageJ shows as it is.
_LENGTH_UNITS = {
    "micrometer": "micron",
    "micrometre": "micron",
    "micron": "micron",
    "um": "micron",
    "\u00b5m": "micron",
    "nanometer": "nm",
    "nanometre": "nm",
    "picometer": "pm",
    "millimeter": "mm",
    "millimetre": "mm",
    "centimeter": "cm",
    "centimetre": "cm",
    "meter": "m",
    "metre": "m",
    "kilometer": "km",
    "kilometre": "km",
    "inch": "inch",
}
# ImageJ's default time unit is "sec" and it spells milliseconds "msec".
_TIME_UNITS = {
    "second": "sec",
    "s": "sec",
    "sec": "sec",
    "millisecond": "msec",
    "ms": "msec",
    "microsecond": "usec",
    "nanosecond": "nsec",
    "minute": "min",
    "hour": "hour",
    "day": "day",
}

# GeoTIFF keys (GeoTIFF 1.0) and values written here.
_GT_MODEL_TYPE, _GT_RASTER_TYPE, _GEOGRAPHIC_TYPE, _PROJECTED_CS_TYPE = 1024, 1025, 2048, 3072
_MODEL_PROJECTED, _MODEL_GEOGRAPHIC, _RASTER_PIXEL_IS_AREA, _RASTER_PIXEL_IS_POINT = 1, 2, 1, 2
_TIFF_SHORT, _TIFF_ASCII, _TIFF_DOUBLE = 3, 2, 12
_GDAL_METADATA = 42112
_COLORMAP = 320
# Bands given their own GDAL_METADATA items (about 250 bytes each, held in the file's header).
MAX_METADATA_BANDS = 4096


@dataclass(frozen=True)
class Hyperstack:
    """The leading dimensions as ImageJ's frames x slices x channels, and the file's plane order."""

    frames: int
    slices: int
    channels: int
    # File plane i holds array plane plane_order[i]; None when that is C order.
    plane_order: tuple[int, ...] | None = None
    # Array dimension that alone is ImageJ's T / Z / C axis (None: absent or several merged).
    time_dim: int | None = None
    z_dim: int | None = None
    channel_dim: int | None = None


@dataclass(frozen=True)
class ImageJHints:
    """ImageJ description keys (besides geometry), IJMetadata items, X/YResolution and first-page tags."""

    description: dict[str, Any] = field(default_factory=dict)
    blobs: dict[str, Any] = field(default_factory=dict)  # tifffile's 'Labels', 'Ranges', 'LUTs'
    resolution: tuple[float, float] | None = None  # pixels per unit, ResolutionUnit none
    tags: tuple[TagTuple, ...] = ()  # ColorMap: a single channel's LUT


def semantic_axes(semantics: Semantics | None, ndim: int) -> tuple[Axis, ...] | None:
    """The axes of `semantics` when they describe this array, else None.

    Axes of another length belong to another array (a conventions bug): they
    are ignored rather than hiding the file.
    """
    if semantics is None or semantics.axes is None or len(semantics.axes) != ndim:
        return None
    return semantics.axes


def imagej_letter(axis: Axis) -> str:
    """Which of ImageJ's T, Z, C axes a leading dimension becomes; unknown ones are slices."""
    return _KIND_LETTERS.get(axis.kind) or AXIS_NAMES.get(axis.name.lower(), "Z")


def hyperstack(leading: tuple[int, ...], letters: tuple[str, ...]) -> Hyperstack:
    """Frames/slices/channels and plane order for leading dimensions with ImageJ letters.

    ImageJ reads planes channel fastest, then slice, then frame, whatever
    the description says (formats.md §6.3), so the file lists the T
    dimensions, then Z, then C, each group in array order; dimensions
    sharing a letter merge into one ImageJ axis (C order among them).
    """
    groups = {letter: [d for d, x in enumerate(letters) if x == letter] for letter in "TZC"}
    sizes = {letter: math.prod(leading[d] for d in dims) for letter, dims in groups.items()}
    file_dims = groups["T"] + groups["Z"] + groups["C"]
    count = math.prod(leading)
    order = numpy.arange(count).reshape(leading).transpose(file_dims).ravel()
    identity = bool((order == numpy.arange(count)).all())

    def alone(letter: str) -> int | None:
        return groups[letter][0] if len(groups[letter]) == 1 else None

    return Hyperstack(
        frames=sizes["T"],
        slices=sizes["Z"],
        channels=sizes["C"],
        plane_order=None if identity else tuple(order.tolist()),
        time_dim=alone("T"),
        z_dim=alone("Z"),
        channel_dim=alone("C"),
    )


# ------------------------------------------------------------------ ImageJ


def imagej_hints(
    axes: tuple[Axis, ...] | None, stack: Hyperstack, channels: tuple[Channel, ...], dtype: numpy.dtype,
    label_colors: tuple[LabelColor, ...] = (),
) -> ImageJHints:
    """Calibration and channel (or label image) display for ImageJ; empty without semantic axes."""
    if axes is None:
        return ImageJHints()
    description, resolution = _calibration(axes, stack)
    # ImageJ holds int16 as uint16 + 32768 and its display ranges in those raw values.
    offset = 32768.0 if dtype.kind == "i" and dtype.itemsize == 2 else 0.0
    display, blobs = _channel_display(channels, stack, offset)
    lut = label_lut(label_colors) if dtype.kind in "iu" else None
    if lut is None:
        return ImageJHints({**description, **display}, blobs, resolution)
    keys, label_blobs, tags = _label_display(lut, stack, offset)
    return ImageJHints({**description, **display, **keys}, {**blobs, **label_blobs}, resolution, tags)


def _calibration(axes: tuple[Axis, ...], stack: Hyperstack) -> tuple[dict[str, Any], tuple[float, float] | None]:
    """ImageJ's unit/spacing/finterval/origins and X/YResolution (pixels per unit).

    ImageJ's Calibration: physical = (pixel - origin_in_pixels) * pixel_size,
    so an axis whose index 0 lies at `origin` has origin -origin/scale pixels.
    Only space axes calibrate x, y and z; a merged Z or T (several array
    dimensions in one ImageJ axis) has no single step and stays uncalibrated.
    """
    keys: dict[str, Any] = {}
    x = _space(axes[-1]) if len(axes) >= 1 else None
    y = _space(axes[-2]) if len(axes) >= 2 else None
    z = _space(axes[stack.z_dim]) if stack.z_dim is not None else None
    units = {name: _length_unit(a.unit) if a is not None else None for name, a in (("x", x), ("y", y), ("z", z))}
    # ImageJ's `unit` is x's (and y's and z's unless they have their own).
    unit = units["x"]
    if unit:
        keys["unit"] = unit
    for name in ("y", "z"):
        if units[name] and units[name] != unit:
            keys[f"{name}unit"] = units[name]
    if z is not None and _step(z):
        keys["spacing"] = _step(z)
    for name, axis in (("xorigin", x), ("yorigin", y), ("zorigin", z)):
        if axis is not None and (step := _step(axis)) and axis.origin is not None and math.isfinite(axis.origin):
            keys[name] = -axis.origin / step
    keys.update(_frame_interval(axes[stack.time_dim] if stack.time_dim is not None else None))
    resolution = None
    if _step(x) or _step(y):
        # An axis without a step keeps 1 pixel per unit (ImageJ has no "unknown" pixel width).
        resolution = (1 / (_step(x) or 1.0), 1 / (_step(y) or 1.0))
    return keys, resolution


def _space(axis: Axis) -> Axis | None:
    return axis if axis.kind == "space" else None


def _step(axis: Axis | None) -> float | None:
    """The axis's scale when it is a usable step (finite, positive), else None."""
    if axis is None or axis.scale is None or not math.isfinite(axis.scale) or axis.scale <= 0:
        return None
    return float(axis.scale)


def _length_unit(unit: str | None) -> str | None:
    return _LENGTH_UNITS.get(unit.lower(), _text(unit)) if unit else None


def _text(value: str) -> str | None:
    """`value` if it can stand in the description, else None.

    ImageJ parses the description as Java properties: a newline would start a
    new key and a backslash is an escape; the tag is 7-bit ASCII.
    """
    return value if re.fullmatch(r"[\x20-\x5b\x5d-\x7e]+", value) else None


def _frame_interval(axis: Axis | None) -> dict[str, Any]:
    """finterval (and tunit) from a time axis; ImageJ assumes seconds without tunit."""
    step = _step(axis)
    if axis is None or axis.kind != "time" or step is None:
        return {}
    keys: dict[str, Any] = {"finterval": step}
    unit = _TIME_UNITS.get(axis.unit.lower(), _text(axis.unit)) if axis.unit else None
    if unit:
        keys["tunit"] = unit
    return keys


def _channel_display(
    channels: tuple[Channel, ...], stack: Hyperstack, offset: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """mode/min/max description keys and Labels/Ranges/LUTs for ImageJ.

    Several channels open as a composite. The hints apply only when they
    are one per ImageJ channel of a single channel dimension; Ranges and
    LUTs only when every channel has one (ImageJ pairs them by position).
    Display ranges are in ImageJ's raw pixel values: the data's plus `offset`.
    ImageJ labels planes, not channels: each plane gets its channel's name.
    """
    keys: dict[str, Any] = {"mode": "composite"} if stack.channels > 1 else {}
    if len(channels) != stack.channels or (stack.channels > 1 and stack.channel_dim is None):
        return keys, {}
    blobs: dict[str, Any] = {}
    windows = [c.window for c in channels if c.window is not None]
    if len(windows) == len(channels):
        if stack.channels == 1:
            keys["min"], keys["max"] = (v + offset for v in windows[0])
        else:
            blobs["Ranges"] = tuple(float(v) + offset for window in windows for v in window)
    luts = [_lut(c.color) for c in channels]
    if stack.channels > 1 and all(lut is not None for lut in luts):
        blobs["LUTs"] = luts
    if any(c.label for c in channels):
        labels = [_ascii(c.label or "") for c in channels]
        blobs["Labels"] = labels * (stack.frames * stack.slices)
    return keys, blobs


def _lut(color: str | None) -> numpy.ndarray | None:
    """ImageJ's (3, 256) uint8 LUT ramping from black to "RRGGBB", or None if not a colour."""
    if color is None or not re.fullmatch(r"[0-9A-Fa-f]{6}", color):
        return None
    rgb = [int(color[i:i + 2], 16) for i in (0, 2, 4)]
    ramp = numpy.arange(256, dtype=numpy.uint32)
    return numpy.stack([(ramp * c // 255).astype(numpy.uint8) for c in rgb])


def label_lut(colors: tuple[LabelColor, ...]) -> numpy.ndarray | None:
    """The (3, 256) uint8 LUT showing label value v in its `image-label` colour, or None.

    Listed values take their RGB (ImageJ's LUT has no alpha: it is
    dropped); unlisted ones show 0 (background) black and every other value
    in a fixed colour of its own (hues a golden angle apart, so neighbouring
    labels differ). None when no colour is listed, or when a listed value is
    not an integer 0-255: a 256-entry LUT has no entry of its own for it.
    """
    if not colors or not all(float(c.value).is_integer() and 0 <= c.value <= 255 for c in colors):
        return None
    lut = numpy.zeros((256, 3), numpy.uint8)
    for value in range(1, 256):
        lut[value] = [round(255 * v) for v in colorsys.hsv_to_rgb((value * 0.381966) % 1.0, 0.7, 1.0)]
    for color in colors:
        lut[int(color.value)] = color.rgba[:3]
    return lut.T.copy()


def _label_display(
    lut: numpy.ndarray, stack: Hyperstack, offset: float
) -> tuple[dict[str, Any], dict[str, Any], tuple[TagTuple, ...]]:
    """Display range, LUTs and ColorMap that show a label image in its colours in stock ImageJ.

    ImageJ spreads its 256 LUT entries over the display range, so the range
    is [0, 255] (raw values: + `offset`): entry v is label v for every pixel
    type ImageJ opens (8 and 16 bit, int16, 32-bit integers as float);
    values past 255 show as 255. Stock ImageJ takes a single channel's LUT
    from the ColorMap tag only (768 values, as ImageJ itself saves a LUT;
    for more than 8 bits libtiff warns that the count is wrong and ignores
    it), the IJMetadata LUTs only for composites, one per channel.
    """
    low, high = offset, offset + 255.0
    if stack.channels == 1:
        colormap = tuple((lut.astype(numpy.uint16) * 257).ravel().tolist())
        return {"min": low, "max": high}, {}, ((_COLORMAP, _TIFF_SHORT, len(colormap), colormap, True),)
    return {}, {"LUTs": [lut] * stack.channels, "Ranges": (low, high) * stack.channels}, ()


def _ascii(text: str) -> str:
    # tifffile writes labels as UTF-16, but keep them printable everywhere.
    return text.encode("ascii", "replace").decode("ascii")


# ----------------------------------------------------------------- GeoTIFF


def geotiff_tags(semantics: Semantics | None, axes: tuple[Axis, ...] | None, ndim: int) -> tuple[TagTuple, ...]:
    """GeoTIFF and GDAL_NODATA tags for every page, or none without a georeference.

    The georeference is the last two axes' (y, x): it belongs to the pages
    only when the array has two such axes and, if the conventions classified
    them, both are spatial.
    """
    if semantics is None:
        return ()
    tags: list[TagTuple] = []
    if semantics.geo is not None and ndim >= 2 and (axes is None or all(a.kind == "space" for a in axes[-2:])):
        tags += _georeference(semantics.geo)
    if semantics.nodata is not None:
        # GDAL's own tag: ASCII, written on every page (GDAL reads the page it opens).
        tags.append((42113, _TIFF_ASCII, 0, gdal_nodata_text(semantics.nodata), False))
    return tuple(tags)


def _georeference(geo: GeoReference) -> list[TagTuple]:
    """Model transform tags plus the GeoKeyDirectory, on every page (writeonce False).

    North-up grids (no rotation, y decreasing with row) get the usual
    ModelPixelScale + ModelTiepoint; anything else the full
    ModelTransformation. PixelIsArea: the geotransform is the outer corner.
    Point samples (`geo.point`) are PixelIsPoint, whose raster (0, 0) is the
    centre of the first pixel: the model point is half a pixel in (GDAL reads
    it back as the same corner geotransform, with AREA_OR_POINT=Point). The
    raster type is a GeoKey: without a directory (no EPSG code), the corner
    as PixelIsArea places the pixels as well, only the Point flag is lost.
    """
    x0, dx, rx, y0, ry, dy = (float(v) for v in geo.geotransform)
    keys = _geokeys(geo)
    if keys and geo.point:
        x0, y0 = x0 + (dx + rx) / 2, y0 + (ry + dy) / 2
    if rx == 0 and ry == 0 and dy < 0:
        tags: list[TagTuple] = [
            (33550, _TIFF_DOUBLE, 3, (dx, -dy, 0.0), False),
            (33922, _TIFF_DOUBLE, 6, (0.0, 0.0, 0.0, x0, y0, 0.0), False),
        ]
    else:
        matrix = (dx, rx, 0.0, x0, ry, dy, 0.0, y0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
        tags = [(34264, _TIFF_DOUBLE, 16, matrix, False)]
    if keys:
        directory = (1, 1, 0, len(keys)) + tuple(v for key in keys for v in key)
        tags.append((34735, _TIFF_SHORT, len(directory), directory, False))
    return tags


def _geokeys(geo: GeoReference) -> list[tuple[int, int, int, int]]:
    """GeoKey entries (KeyID, location 0 = inline, count 1, value), sorted by KeyID.

    The CRS is written only as an EPSG code whose kind (geographic or
    projected) is certain. Without one the file keeps its transform but has
    no GeoKeyDirectory at all, so GDAL reports the geotransform and no CRS
    (a directory without GTModelType makes GDAL invent an "unnamed"
    engineering CRS). GeoKeys can carry any other CRS only parameter by
    parameter, which needs a projection library to derive from WKT, and a
    half-right CRS is worse than none (the WKT stays in the array's .json).
    PixelIsArea is also the GeoTIFF default when the directory is absent.
    """
    kind = crs_kind(geo)
    if geo.epsg is None or not 0 < geo.epsg < 32767 or kind is None:
        return []
    if kind == "geographic":
        crs = [(_GT_MODEL_TYPE, 0, 1, _MODEL_GEOGRAPHIC), (_GEOGRAPHIC_TYPE, 0, 1, geo.epsg)]
    else:
        crs = [(_GT_MODEL_TYPE, 0, 1, _MODEL_PROJECTED), (_PROJECTED_CS_TYPE, 0, 1, geo.epsg)]
    raster = _RASTER_PIXEL_IS_POINT if geo.point else _RASTER_PIXEL_IS_AREA
    return sorted([(_GT_RASTER_TYPE, 0, 1, raster), *crs])


def crs_kind(geo: GeoReference) -> str | None:
    """"geographic", "projected" or None (unknown) for the CRS of `geo`.

    The WKT's top-level keyword decides when there is one; otherwise the
    EPSG code must be in the GeoTIFF registry tables tifffile ships.
    """
    if geo.crs_wkt:
        keyword = re.match(r"\s*([A-Z]+)\s*\[", geo.crs_wkt.upper())
        if keyword:
            word = keyword.group(1)
            if word in ("GEOGCS", "GEOGCRS", "GEOGRAPHICCRS"):
                return "geographic"
            if word in ("PROJCS", "PROJCRS", "PROJECTEDCRS"):
                return "projected"
            if word in ("GEODCRS", "GEODETICCRS") and "CS[ELLIPSOIDAL" in geo.crs_wkt.upper().replace(" ", ""):
                return "geographic"
            return None
    if geo.epsg is not None and _enumerated(geodb.GCS, geo.epsg):
        return "geographic"
    if geo.epsg is not None and _enumerated(geodb.PCS, geo.epsg):
        return "projected"
    return None


def _enumerated(codes: type[enum.IntEnum], value: int) -> bool:
    try:
        codes(value)
    except ValueError:
        return False
    return True


def gdal_nodata_text(value: float) -> str:
    """GDAL_NODATA as GDAL writes it: "nan", "-inf", integers without a fraction."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def gdal_metadata(semantics: Semantics | None, axes: tuple[Axis, ...] | None, bands: int) -> tuple[TagTuple, ...]:
    """GDAL_METADATA: what GDAL shows of the `bands` bands of a page besides pixels, on every such page.

    Band i's DESCRIPTION is OME channel i's label when the bands are the
    channels (the one leading axis is the channel axis, one channel per
    band), else band i's name (`conventions.bands`), else the CF `long_name`; OFFSET, SCALE and UNITTYPE come from CF
    packing and units, the same for every band (both OFFSET and SCALE when
    either is known: GDAL reads value = stored * scale + offset). `long_name`
    is also a dataset item, as GDAL's Zarr driver shows it. Past
    `MAX_METADATA_BANDS` bands only the dataset item is written.

    GDAL reads the tag (XML in UTF-8, as GDAL writes it) from the page it
    opens. GDAL escapes an item's value for XML and its XML writer escapes
    that text again; reading, it unescapes twice, so text is escaped twice
    here ("A & B" escaped once comes back as "A ").
    """
    if semantics is None:
        return ()
    quantity = semantics.quantity or Quantity()
    labels: list[str | None] = [quantity.long_name] * bands
    if axes is not None and axes[0].kind == "channel" and len(semantics.channels) == bands:
        labels = [c.label if c.label and c.label.isprintable() else quantity.long_name for c in semantics.channels]
    elif len(semantics.band_names) == bands:
        labels = list(semantics.band_names)
    band_items: list[tuple[str, str, str]] = []  # (name, role, value) for every band
    if quantity.packed:
        band_items += [("OFFSET", "offset", repr(quantity.add_offset or 0.0)),
                       ("SCALE", "scale", repr(1.0 if quantity.scale_factor is None else quantity.scale_factor))]
    if quantity.units:
        band_items.append(("UNITTYPE", "unittype", quantity.units))
    items = [f'<Item name="long_name">{_xml_text(quantity.long_name)}</Item>'] if quantity.long_name else []
    if bands <= MAX_METADATA_BANDS:
        for band, label in enumerate(labels):
            described = [("DESCRIPTION", "description", label)] if label else []
            items += [f'<Item name="{name}" sample="{band}" role="{role}">{_xml_text(value)}</Item>'
                      for name, role, value in described + band_items]
    if not items:
        return ()
    return ((_GDAL_METADATA, _TIFF_ASCII, 0, f"<GDALMetadata>{''.join(items)}</GDALMetadata>".encode(), False),)


def _xml_text(text: str) -> str:
    return escape(escape(text))
