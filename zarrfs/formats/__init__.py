"""The kinds of virtual file an array can appear as, by file-name suffix.

Each builder returns the file's `Layout`, or None when the array cannot be
expressed in that format (a TIFF of a structured dtype, say).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ..metadata.model import ArrayMeta
from .base import Layout
from .npy import npy_layout

LayoutBuilder = Callable[[ArrayMeta], Layout | None]


def _raw(meta: ArrayMeta) -> Layout:
    return Layout(b"", meta.nbytes)


def _npy(meta: ArrayMeta) -> Layout | None:
    if meta.opaque_type:  # numpy would see only anonymous bytes ('|V2'): .raw and .json say it
        return None
    return npy_layout(meta.shape, meta.dtype)


def _tif(meta: ArrayMeta) -> Layout | None:
    from .tiff import tiff_layout

    return tiff_layout(meta.shape, meta.dtype, meta.dimension_names)


def _bigtiff(meta: ArrayMeta) -> Layout | None:
    from .tiff import bigtiff_layout

    return bigtiff_layout(meta.shape, meta.dtype, meta.dimension_names)


def json_document(document: dict) -> bytes:
    return (json.dumps(document, indent=2, allow_nan=True, default=str) + "\n").encode("utf-8")


def _json(meta: ArrayMeta) -> Layout:
    return Layout(json_document(meta.describe()), 0)


# suffix -> builder; the order is the order of `ls`.
FORMATS: dict[str, LayoutBuilder] = {
    ".npy": _npy,
    ".raw": _raw,
    ".tif": _tif,
    ".bigtiff.tif": _bigtiff,  # only where the classic .tif passes 4 GiB
    ".json": _json,
}
# `--formats tif` turns on both TIFF flavours.
FORMAT_GROUPS = {"npy": (".npy",), "raw": (".raw",), "tif": (".tif", ".bigtiff.tif"), "json": (".json",)}
DEFAULT_FORMATS = ("npy", "raw", "tif", "json")
