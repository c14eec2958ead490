"""`N.raw.hdr`: an ENVI header for `N.raw`, as GDAL's ENVI driver reads it.

GDAL looks for `N.raw.hdr` first when it opens `N.raw`; a plain `N.hdr` would
also be picked up for `N.npy` and misread (formats.md §7.1). A C-order
`(..., Y, X)` region is band-sequential with bands = the product of the
leading dimensions. A georeferenced array gets `map info` (the outer corner
of pixel (1, 1), ENVI's 1-based reference pixel) and the CRS as WKT1 in
`coordinate system string` (WKT2 is converted when pyproj is installed);
a nodata value becomes `data ignore value`. CF packing becomes `data gain
values` and `data offset values` (GDAL's band scale and offset), the CF
`long_name` the `band names` where no OME channel names them; ENVI has no key
GDAL reads as the values' unit, so `units` is not written here.
"""

from __future__ import annotations

import math

from ..conventions.crs import wkt1
from ..conventions.semantics import GeoReference, Semantics
from ..model.meta import ArrayMeta
from .base import Layout
from .rawinfo import big_endian, number, type_name

# Per-band lists (gain, offset, a long name repeated) are written up to this many bands: GDAL reads a
# header line of at most 10 MB, and the header is held in memory.
MAX_LISTED_BANDS = 65536
# numpy kind+size -> ENVI data type code. ENVI has no int8 (GDAL reads code 1
# as unsigned) and no half float; bool is stored as 0/1 bytes.
_DATA_TYPES = {
    ("b", 1): 1, ("u", 1): 1,
    ("i", 2): 2, ("u", 2): 12,
    ("i", 4): 3, ("u", 4): 13,
    ("i", 8): 14, ("u", 8): 15,
    ("f", 4): 4, ("f", 8): 5,
    ("c", 8): 6, ("c", 16): 9,
}


def envi_header(meta: ArrayMeta, semantics: Semantics, raw_name: str) -> Layout | None:
    code = type_name(meta, _DATA_TYPES)
    if code is None:
        return None
    shape = meta.shape
    lines = [
        "ENVI",
        f"samples = {shape[-1]}",
        f"lines = {shape[-2] if meta.ndim >= 2 else 1}",
        f"bands = {math.prod(shape[:-2])}",
        "header offset = 0",
        "file type = ENVI Standard",
        f"data type = {code}",
        "interleave = bsq",
        f"byte order = {int(big_endian(meta.dtype))}",
    ]
    if semantics.geo is not None:
        lines += _map_lines(semantics.geo)
    if semantics.nodata is not None and meta.dtype.kind != "c":
        lines.append(f"data ignore value = {_nodata_text(semantics.nodata)}")
    bands = math.prod(shape[:-2])
    names = _band_names(semantics, meta)
    if names:
        lines.append("band names = {" + ", ".join(names) + "}")
    quantity = semantics.quantity
    if quantity is not None and quantity.packed and bands <= MAX_LISTED_BANDS:
        # One value per band, as GDAL demands; GDAL reads value = stored * gain + offset.
        gain = 1.0 if quantity.scale_factor is None else quantity.scale_factor
        lines.append("data gain values = {" + ", ".join([number(gain)] * bands) + "}")
        lines.append("data offset values = {" + ", ".join([number(quantity.add_offset or 0.0)] * bands) + "}")
    return Layout(("\n".join(lines) + "\n").encode("utf-8"), 0)


def _map_lines(geo: GeoReference) -> list[str]:
    """ENVI map info holds no shear: a rotated transform is left out rather than written wrong."""
    x0, dx, rx, y0, ry, dy = geo.geotransform
    if rx != 0 or ry != 0:
        return []
    # ENVI states the y pixel size as a positive number for a north-up image (y decreasing down the rows).
    projection = "Geographic Lat/Lon" if geo.epsg == 4326 else "Arbitrary"
    lines = [f"map info = {{{projection}, 1, 1, {number(x0)}, {number(y0)}, {number(dx)}, {number(-dy)}}}"]
    # GDAL's ENVI driver reads this key as WKT1 (WKT2 comes out garbled).
    text = wkt1(geo.crs_wkt) if geo.crs_wkt else None
    if text and not any(ch in text for ch in "{}\n"):
        lines.append(f"coordinate system string = {{{text}}}")
    return lines


def _nodata_text(value: float) -> str:
    if math.isnan(value):
        return "nan"
    return str(int(value)) if value.is_integer() else number(value)


def _band_names(semantics: Semantics, meta: ArrayMeta) -> list[str]:
    """OME channel labels when the channel axis is the only leading axis (so bands = channels), else the
    bands' names, else the CF `long_name` for every band; none when a name would break the list."""
    axes = semantics.axes
    bands = math.prod(meta.shape[:-2])
    long_name = semantics.quantity.long_name if semantics.quantity is not None else None
    if axes is not None and meta.ndim == 3 and axes[0].kind == "channel" and len(semantics.channels) == bands:
        labels = [c.label for c in semantics.channels]
    elif len(semantics.band_names) == bands:
        labels = list(semantics.band_names)
    elif long_name and bands <= MAX_LISTED_BANDS:
        labels = [long_name] * bands
    else:
        return []
    if not all(label and not any(ch in label for ch in ",{}\n") for label in labels):
        return []
    return [str(label) for label in labels]
