"""The files of a variable-length (string or bytes) array: `.npy` at its fixed width, and `.json`.

Both are built once the width is known (engine/vlen_widths.py finds it), so the view
hands them out as deferred files (`files.contract.DeferredFile`). No `.raw`, `.tif` or `.raw` sidecars: a
reader of those would expect numbers, and their headers have no string type.

`.json` is the array's metadata plus `width` (n) and, when the fixed-width
array is at most `max_vlen_json_bytes()`, its `values` as nested lists in C
order: strings as JSON strings, bytes as base64 (`values_encoding`). These
are zarr-python's values exactly, trailing NULs included (the `.npy` cannot
keep those: numpy's `S`/`U` elements drop trailing NULs when read). Over the
bound `values` is null and `values_omitted` says why: the file stays small.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np

from ..conventions.semantics import Semantics
from ..model.limits import VLEN_JSON_VARIABLE, max_vlen_json_bytes
from ..model.meta import ArrayMeta
from .base import Layout
from .npy import npy_layout

VLEN_SUFFIXES = (".npy", ".json")


def vlen_npy_layout(served: ArrayMeta) -> Layout:
    """`served` is the array at its fixed width (`FixedWidth.meta`): a plain `.npy` of it."""
    layout = npy_layout(served.shape, served.dtype)
    assert layout is not None  # fixed-width U/S dtypes always have one
    return layout


def vlen_document(meta: ArrayMeta, semantics: Semantics, width: int, fixed_nbytes: int,
                  read_values: Callable[[], np.ndarray]) -> dict[str, Any]:
    """The `.json` document; `read_values` (the whole array as objects) is called only under the bound."""
    from . import array_document  # the package's builder of array documents

    document = array_document(meta, semantics)
    document["width"] = width
    limit = max_vlen_json_bytes()
    if fixed_nbytes <= limit:
        values = read_values()
        if meta.vlen == "bytes":
            document["values_encoding"] = "base64"
            values = np.vectorize(lambda b: base64.standard_b64encode(b).decode("ascii"), otypes=[object])(values) \
                if values.size else values
        document["values"] = values.tolist()
    else:
        document["values"] = None
        document["values_omitted"] = (f"the array is {fixed_nbytes} bytes at its fixed width, more than "
                                      f"{limit}; raise the bound with the environment variable {VLEN_JSON_VARIABLE}")
    return document
