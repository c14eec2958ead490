"""The kinds of virtual file an array can appear as, by file-name suffix.

Each builder gets the array's metadata, its `Semantics` (what the conventions
say the values mean) and the file stem the array appears under (`N`, for the
sidecars that point at `N.raw`); it returns the file's `Layout`, or None
when the array cannot be expressed in that format (a TIFF of a structured
dtype, an ENVI header for int8, say).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from ..conventions.semantics import Semantics
from ..model.meta import ArrayMeta
from .base import LazyLayout, Layout
from .envi import envi_header
from .metaimage import metaimage_header, metaimage_volume_headers
from .npy import npy_layout
from .nrrd import nrrd_header

LayoutBuilder = Callable[[ArrayMeta, Semantics, str], Layout | LazyLayout | None]


def _raw(meta: ArrayMeta, semantics: Semantics, stem: str) -> Layout:
    return Layout(b"", meta.nbytes)


def _npy(meta: ArrayMeta, semantics: Semantics, stem: str) -> LazyLayout | None:
    # An opaque type: numpy would see only anonymous bytes ('|V2'); .raw and .json say what it is.
    if meta.opaque_type or meta.dtype.hasobject:
        return None
    return LazyLayout(functools.partial(npy_layout, meta.shape, meta.dtype))  # type: ignore[arg-type]


def is_map(semantics: Semantics) -> bool:
    """A georeferenced raster without microscope meaning (no OME channels, no axis with a physical step).

    Its readers are GDAL and QGIS, which read a tiled file window by window
    and a strip file whole rows at a time: its `N.tif` is the tiled GeoTIFF,
    and ImageJ's strip file (ImageJ refuses tiled TIFFs) is `N.strips.tif`.
    """
    return semantics.geo is not None and not semantics.channels and all(
        axis.scale is None for axis in semantics.axes or ())


def _tif(meta: ArrayMeta, semantics: Semantics, stem: str) -> Layout | LazyLayout | None:
    """ImageJ's strip TIFF; for a map the tiled GeoTIFF, or the strip file when the array cannot be tiled."""
    if is_map(semantics):
        tiled = _tiled_layout(meta, semantics)
        if tiled is not None:
            return tiled
    return _strips_layout(meta, semantics)


def _strips(meta: ArrayMeta, semantics: Semantics, stem: str) -> LazyLayout | None:
    return _strips_layout(meta, semantics) if is_map(semantics) else None


def _strips_layout(meta: ArrayMeta, semantics: Semantics) -> LazyLayout | None:
    from .tiff import tiff_plan

    plan = tiff_plan(meta.shape, meta.dtype, meta.dimension_names, semantics)
    return None if plan is None else LazyLayout(plan)


def _bigtiff(meta: ArrayMeta, semantics: Semantics, stem: str) -> LazyLayout | None:
    from .tiff import bigtiff_plan

    plan = bigtiff_plan(meta.shape, meta.dtype, meta.dimension_names, semantics)
    return None if plan is None else LazyLayout(plan)


def _tiled(meta: ArrayMeta, semantics: Semantics, stem: str) -> LazyLayout | None:
    return None if is_map(semantics) else _tiled_layout(meta, semantics)  # a map's tiled file is its N.tif


def _tiled_layout(meta: ArrayMeta, semantics: Semantics) -> LazyLayout | None:
    from .tiled_tiff import LazyTiledLayout, tiled_plan

    plan = tiled_plan([meta], semantics)
    return None if plan is None else LazyTiledLayout(plan)  # the view binds it to the array's levels


def json_document(document: dict) -> bytes:
    return (json.dumps(document, indent=2, allow_nan=True, default=str) + "\n").encode("utf-8")


def array_document(meta: ArrayMeta, semantics: Semantics) -> dict[str, Any]:
    """The array's metadata, plus what its conventions were read as (only when there is something)."""
    document = meta.describe()
    if not semantics.empty:
        document["semantics"] = semantics.describe()
    return document


def _json(meta: ArrayMeta, semantics: Semantics, stem: str) -> LazyLayout:
    return LazyLayout(lambda: Layout(json_document(array_document(meta, semantics)), 0))


def _envi(meta: ArrayMeta, semantics: Semantics, stem: str) -> Layout | None:
    return envi_header(meta, semantics, stem + ".raw")


def _mhd(meta: ArrayMeta, semantics: Semantics, stem: str) -> Layout | None:
    return metaimage_header(meta, semantics, stem + ".raw")


def _nhdr(meta: ArrayMeta, semantics: Semantics, stem: str) -> Layout | None:
    return nrrd_header(meta, semantics, stem + ".raw")


# suffix -> builder; the order is the order of `ls`.
FORMATS: dict[str, LayoutBuilder] = {
    ".npy": _npy,
    ".raw": _raw,
    ".raw.hdr": _envi,
    ".mhd": _mhd,
    ".nrrd.nhdr": _nhdr,  # not N.nhdr, not N.raw.nhdr: no reader may pair it with another file (nrrd.py)
    ".tif": _tif,  # ImageJ's strip file; a map's tiled GeoTIFF (`is_map`)
    ".strips.tif": _strips,  # only for maps: ImageJ's strip file
    ".bigtiff.tif": _bigtiff,  # only where the classic strip file passes 4 GiB
    ".tiled.tif": _tiled,  # 2-D and more, not maps: tiles are chunks, overviews are the coarser OME levels
    ".json": _json,
}
# Several files of one format per array: suffix -> builder of {file name: layout}
# (the 3-D MetaImage headers of each volume of an array of more dimensions).
VOLUME_FORMATS: dict[str, Callable[[ArrayMeta, Semantics, str], dict[str, Layout]]] = {
    ".mhd": metaimage_volume_headers,
}
