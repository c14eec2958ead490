"""Georeferencing of an array's last two axes (y, x), and its nodata value.

Read from what GDAL's Zarr driver writes (`_CRS` = {wkt, projjson, url},
1-D `X`/`Y` coordinate arrays, nodata as the array's fill value), what
xarray + rioxarray write (CF `grid_mapping` naming a variable with `crs_wkt` /
`spatial_ref` and optional `GeoTransform`, 1-D `x`/`y` coordinates,
`_FillValue`), and the GeoZarr conventions (`proj:code`, `proj:wkt2`,
`proj:projjson`, `spatial:transform`). Broken or contradictory metadata
raises `ConventionError`.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model.meta import ArrayMeta
from .crs import epsg_from_code, epsg_from_projjson, epsg_from_url, epsg_from_wkt
from ..errors import ConventionError
from .semantics import GeoReference

GeoTransform = tuple[float, float, float, float, float, float]
# Reads a whole (small) 1-D array; raises on a failed read.
ReadArray = Callable[[ArrayMeta], np.ndarray]

# Coordinate arrays are read whole when a file of the array is first listed: keep that small.
MAX_COORDINATE_ELEMENTS = 1 << 20
# Cell centres count as regularly spaced when each lies within this fraction of
# a step of first + i·step (float32 coordinates carry ~1e-7 relative error).
SPACING_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Crs:
    wkt: str | None
    epsg: int | None
    source: str


def georeference(meta: ArrayMeta, siblings: Mapping[str, ArrayMeta], group_attributes: Mapping[str, Any],
                 read_array: ReadArray) -> tuple[GeoReference | None, tuple[str, ...]]:
    """Where the last two axes lie on the map, and the conventions that said so.

    A georeference needs a CRS from some convention: coordinate arrays alone
    (a microscope's stage positions, a model grid) are not a map.
    """
    crs, transform_text = _crs(meta.attributes, siblings, group_attributes)
    if crs is None or meta.ndim < 2:
        return None, ()
    transform, how, point = _transform(meta, meta.attributes, group_attributes, transform_text, siblings,
                                       read_array)
    if transform is None:
        return None, (crs.source,)
    return GeoReference(transform, crs.wkt, crs.epsg, point), (crs.source, how)


# ------------------------------------------------------------------------ CRS


def _crs(attrs: Mapping[str, Any], siblings: Mapping[str, ArrayMeta],
         group_attributes: Mapping[str, Any]) -> tuple[Crs | None, Any]:
    """The CRS every convention present agrees on, and a CF `GeoTransform` text if one came with it."""
    found: list[Crs] = []
    transform_text = None
    for where, scope in (("array", attrs), ("group", group_attributes)):
        geozarr = geozarr_crs(scope, where)
        if geozarr:
            found.append(geozarr)
            break  # the array's own GeoZarr attributes override its group's
    if "grid_mapping" in attrs:
        name = attrs["grid_mapping"]
        mapping = siblings.get(name) if isinstance(name, str) else None
        if mapping is None:
            raise ConventionError(f"grid_mapping names {name!r}, which is not an array beside it")
        mapping_attrs = mapping.attributes
        wkt = mapping_attrs.get("crs_wkt", mapping_attrs.get("spatial_ref"))
        if wkt is not None:
            if not isinstance(wkt, str):
                raise ConventionError(f"grid mapping {name!r}: crs_wkt must be text")
            found.append(Crs(wkt, epsg_from_wkt(wkt), f"CF grid_mapping {name!r}"))
        transform_text = mapping_attrs.get("GeoTransform")
    if "_CRS" in attrs:
        found.append(_gdal_crs(attrs["_CRS"]))
    codes = {c.epsg for c in found if c.epsg is not None}
    if len(codes) > 1:
        raise ConventionError("the CRS conventions disagree: " + ", ".join(f"{c.source} says EPSG:{c.epsg}"
                                                                            for c in found if c.epsg))
    if not found:
        return None, transform_text
    wkt = next((c.wkt for c in found if c.wkt), None)
    epsg = next(iter(codes), None)
    return Crs(wkt, epsg, " + ".join(c.source for c in found)), transform_text


def geozarr_crs(scope: Mapping[str, Any], where: str) -> Crs | None:
    """The CRS of a scope's `proj:code`, `proj:wkt2`, `proj:projjson`; None when it has none of them."""
    code, wkt, projjson = scope.get("proj:code"), scope.get("proj:wkt2"), scope.get("proj:projjson")
    if code is None and wkt is None and projjson is None:
        return None
    if wkt is not None and not isinstance(wkt, str):
        raise ConventionError(f"{where} proj:wkt2 must be text")
    epsg = epsg_from_code(code) or (epsg_from_wkt(wkt) if wkt else None) or epsg_from_projjson(projjson)
    if code is not None and epsg_from_code(code) is None and not isinstance(code, str):
        raise ConventionError(f"{where} proj:code {code!r} is not text like 'EPSG:32633'")
    return Crs(wkt, epsg, f"GeoZarr proj: ({where})")


def _gdal_crs(value: Any) -> Crs:
    """GDAL reads `url`, then `wkt`, then `projjson`; so do we."""
    if not isinstance(value, dict):
        raise ConventionError(f"_CRS must be an object, got {type(value).__name__}")
    wkt = value.get("wkt")
    if wkt is not None and not isinstance(wkt, str):
        raise ConventionError("_CRS.wkt must be text")
    epsg = epsg_from_url(value.get("url")) or (epsg_from_wkt(wkt) if wkt else None) \
        or epsg_from_projjson(value.get("projjson"))
    if wkt is None and epsg is None:
        raise ConventionError("_CRS has no url, wkt or projjson this reader understands")
    return Crs(wkt, epsg, "GDAL _CRS")


# ------------------------------------------------------------- geotransform


def _transform(meta: ArrayMeta, attrs: Mapping[str, Any], group_attributes: Mapping[str, Any],
               transform_text: Any, siblings: Mapping[str, ArrayMeta],
               read_array: ReadArray) -> tuple[GeoTransform | None, str, bool]:
    """An explicit transform (GeoZarr, then CF `GeoTransform`) wins over coordinate arrays; and whether
    the values are samples at the cells' centres (a node-registered GeoZarr grid)."""
    for where, scope in (("array", attrs), ("group", group_attributes)):
        if "spatial:transform" in scope:
            _spatial_axes_are_the_last_two(scope, meta.dimension_names, where)
            node = registration(scope, where) == "node"
            gt = corner_transform(scope["spatial:transform"], node, f"{where} spatial:transform")
            return gt, f"GeoZarr spatial:transform ({where}{', node registration' if node else ''})", node
    if transform_text is not None:
        if not isinstance(transform_text, str):
            raise ConventionError("GeoTransform must be text of six numbers")
        try:
            numbers = [float(v) for v in transform_text.split()]
        except ValueError:
            raise ConventionError(f"GeoTransform {transform_text[:80]!r} is not six numbers") from None
        return _invertible(_six(numbers, "GeoTransform"), "GeoTransform"), "CF GeoTransform", False
    return (*_from_coordinates(meta, siblings, read_array), False)


def _spatial_axes_are_the_last_two(scope: Mapping[str, Any], names: tuple[str | None, ...] | None,
                                   where: str) -> None:
    """The transform is applied to the array's last two axes as (row, column): a `spatial:transform` of
    another type, or whose `spatial:dimensions` name other axes (x before y, a 3-D z, y, x), is not that."""
    kind = scope.get("spatial:transform_type", "affine")
    if kind != "affine":
        raise ConventionError(f"{where} spatial:transform_type {kind!r} is not 'affine', the one zarrfs applies")
    dimensions = scope.get("spatial:dimensions")
    if dimensions is None:
        return
    if not (isinstance(dimensions, list) and len(dimensions) == 2 and all(isinstance(d, str) for d in dimensions)):
        raise ConventionError(f"{where} spatial:dimensions {dimensions!r} are not two names [y, x] (zarrfs "
                              "georeferences two spatial axes)")
    last_two = list(names[-2:]) if names is not None and len(names) >= 2 else None
    if last_two is not None and None not in last_two and last_two != dimensions:
        raise ConventionError(f"{where} spatial:dimensions {dimensions} are not the array's last two dimensions "
                              f"{last_two}")


def registration(scope: Mapping[str, Any], where: str) -> str:
    """`spatial:registration` of the scope holding a `spatial:transform`: "pixel" (the default) or "node"."""
    value = scope.get("spatial:registration", "pixel")
    if value not in ("pixel", "node"):
        raise ConventionError(f"{where} spatial:registration {value!r} is neither 'pixel' nor 'node'")
    return value


def corner_transform(value: Any, node: bool, where: str) -> GeoTransform:
    """A `spatial:transform` ([a, b, c, d, e, f], rasterio's order) as GDAL's geotransform of the outer corner.

    A node-registered grid's transform maps index (0, 0) to the centre of the
    first cell (GeoTIFF's PixelIsPoint): its corner lies half a cell back
    along both axes.
    """
    a, b, c, d, e, f = _six(value, where)
    if node:
        c, f = c - (a + b) / 2, f - (d + e) / 2
    return _invertible((c, a, b, f, d, e), where)


def _six(value: Any, where: str) -> GeoTransform:
    if not isinstance(value, list) or len(value) != 6 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        raise ConventionError(f"{where} must be six finite numbers, got {value!r}")
    a, b, c, d, e, f = (float(v) for v in value)
    return a, b, c, d, e, f


def _invertible(gt: GeoTransform, where: str) -> GeoTransform:
    if gt[1] * gt[5] - gt[2] * gt[4] == 0:
        raise ConventionError(f"{where} {list(gt)} maps pixels onto a line (not invertible)")
    return gt


def _from_coordinates(meta: ArrayMeta, siblings: Mapping[str, ArrayMeta],
                      read_array: ReadArray) -> tuple[GeoTransform | None, str]:
    """Cell-centre coordinates named by the last two dimensions -> the outer corner's transform."""
    names = meta.dimension_names
    if not names or names[-1] is None or names[-2] is None:
        return None, ""
    y_name, x_name = names[-2], names[-1]
    if y_name not in siblings or x_name not in siblings:
        return None, ""
    y0, dy = _regular(siblings[y_name], meta.shape[-2], read_array)
    x0, dx = _regular(siblings[x_name], meta.shape[-1], read_array)
    return (x0 - dx / 2, dx, 0.0, y0 - dy / 2, 0.0, dy), f"coordinate arrays {y_name!r}, {x_name!r}"


def _regular(coordinate: ArrayMeta, length: int, read_array: ReadArray) -> tuple[float, float]:
    """(first centre, step) of a regularly spaced 1-D coordinate array of `length` values."""
    name = coordinate.path.rpartition("/")[2]
    if coordinate.shape != (length,):
        raise ConventionError(f"coordinate array {name!r} has shape {list(coordinate.shape)}, not [{length}]")
    if length < 2 or length > MAX_COORDINATE_ELEMENTS:
        raise ConventionError(f"coordinate array {name!r} has {length} values (2 to "
                              f"{MAX_COORDINATE_ELEMENTS} are read)")
    if coordinate.dtype.kind not in "iuf":
        raise ConventionError(f"coordinate array {name!r} has the non-numeric dtype {coordinate.dtype}")
    values = np.asarray(read_array(coordinate), dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise ConventionError(f"coordinate array {name!r} holds values that are not finite")
    with np.errstate(over="ignore", invalid="ignore"):  # values near the float limits: checked below
        step = (values[-1] - values[0]) / (length - 1)
        deviation = np.abs(values - (values[0] + step * np.arange(length)))
        # Written as "all within" so that a NaN deviation (overflow) fails too.
        regular = bool(np.isfinite(step) and step != 0 and np.all(deviation <= SPACING_TOLERANCE * abs(step)))
    if not regular:
        raise ConventionError(f"coordinate array {name!r} is not regularly spaced")
    return float(values[0]), float(step)


# -------------------------------------------------------------------- nodata


def nodata(meta: ArrayMeta) -> tuple[float | None, str]:
    """The value marking missing cells, and where it came from ('' when there is none).

    `_FillValue`, then `missing_value`; else the array's fill value when
    it is NaN (a float array's), or for GDAL's arrays (`_CRS`) and xarray's
    v2 arrays (`_ARRAY_DIMENSIONS`, or a `grid_mapping`), where those
    writers keep `_FillValue` (xarray reads it back as such, and so does
    GDAL). A `fill_value: null` declares none.

    GDAL's Zarr driver reports every fill value as its array's nodata. Zarr
    v3 requires a fill value and writers default it to 0, so a fill of 0 (or
    any number) by itself says what unwritten chunks hold, not that the value
    marks missing cells: stated as nodata, it would hide real zeros (dark
    pixels, sea level) from GDAL and QGIS. NaN is no measurement: a NaN fill
    marks missing cells, and saying so misleads no reader (formats.md).
    """
    attrs = meta.attributes
    for key in ("_FillValue", "missing_value"):
        if key in attrs:
            return _number(attrs[key], key, meta), key
    if meta.fill_value_null or meta.dtype.kind not in "iuf":
        return None, ""
    fill = float(meta.fill_value.item())
    if math.isnan(fill):
        return fill, "fill_value NaN as nodata"
    xarray_v2 = meta.zarr_format == "2" and ("grid_mapping" in attrs or "_ARRAY_DIMENSIONS" in attrs)
    if "_CRS" in attrs or xarray_v2:
        return fill, "fill_value as nodata"
    return None, ""


def _number(value: Any, key: str, meta: ArrayMeta) -> float:
    if isinstance(value, list) and len(value) == 1:  # netCDF-style one-element attribute
        value = value[0]
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("nan", "infinity", "-infinity", "inf", "-inf"):
            return float(text.replace("infinity", "inf"))
        return _xarray_v3_float(value, key, meta)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConventionError(f"{key} {value!r} is not a number")
    return float(value)


def _xarray_v3_float(text: str, key: str, meta: ArrayMeta) -> float:
    """xarray writes a float `_FillValue` of a v3 array as base64 of a little-endian float64."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error (a subclass), or text that is not ASCII
        raw = b""
    if meta.dtype.kind != "f" or len(raw) != 8:
        raise ConventionError(f"{key} {text[:40]!r} is not a number")
    return float(np.frombuffer(raw, "<f8")[0])
