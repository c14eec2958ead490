"""`.npy`: numpy's own header (via `numpy.lib.format`) over the C-order region."""

from __future__ import annotations

import io
import warnings

import numpy as np
from numpy.lib import format as npy_format

from .base import Layout


def npy_layout(shape: tuple[int, ...], dtype: np.dtype) -> Layout | None:
    """Header padded (by numpy) so the data starts 64-byte aligned, as for mmap."""
    if dtype.hasobject:
        return None
    header = {"descr": npy_format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy warns when it must pick a newer header version
        try:
            npy_format.write_array_header_1_0(buffer, header)
        except ValueError:  # header over 64 KiB: version 2.0 has a 32-bit length
            buffer = io.BytesIO()
            npy_format.write_array_header_2_0(buffer, header)
    return Layout(buffer.getvalue(), int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
