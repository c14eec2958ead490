"""Shapes as metadata spells them: lists of integers, checked against int64.

Below both the parsers of `model/` and the codecs, which import it: the
sharding codec reads its inner chunk shape with `parse_shape`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import MetadataError

# int64 bounds every size (numpy indexing, st_size).
MAX_BYTES = 2**63 - 1


def parse_shape(value: Any, name: str, where: str, *, positive: bool) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise MetadataError(f"{where}: {name} must be a list of integers, got {value!r}")
    low = 1 if positive else 0
    if any(v < low for v in value):
        raise MetadataError(f"{where}: {name} {value} has a value below {low}")
    if any(v > MAX_BYTES for v in value):
        raise MetadataError(f"{where}: {name} {value} overflows int64")
    return tuple(value)


def check_sizes(shape: tuple[int, ...], chunks: tuple[int, ...], dtype: np.dtype, where: str) -> None:
    if len(shape) != len(chunks):
        raise MetadataError(f"{where}: shape {list(shape)} and chunk shape {list(chunks)} differ in rank")
    if math.prod(shape) * dtype.itemsize > MAX_BYTES:
        raise MetadataError(f"{where}: shape {list(shape)} of {dtype} is more than 2**63 bytes")
    if math.prod(chunks) * dtype.itemsize > MAX_BYTES:
        raise MetadataError(f"{where}: chunk shape {list(chunks)} of {dtype} is more than 2**63 bytes")
