"""Time `Layout.read_into` alone: the split of a FUSE read into header/region/trailer; and the build of a
100 GiB array's .tif and .bigtiff.tif layouts (metadata only: tests/test_formats_tiff.py checks their sizes).

The region reader is a fake that copies from an in-memory array, so the
numbers are the layout's own cost per 1 MiB read (plus one memcpy), for the
plain C-order layout every read goes through and, when the layout module
offers it, the plane-permuted one (.tif pages in ImageJ's order).

Usage: .venv/bin/python bench/bench_layout.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from zarrfs.formats import base
from zarrfs.formats.base import Layout
from zarrfs.formats.tiff import bigtiff_layout, tiff_layout

MiB = 2**20
READ = 1 * MiB
HEADER = 4096
REGION = 256 * MiB


def _fake_region(data: np.ndarray) -> Callable[[int, int, np.ndarray], None]:
    def read_region(start: int, stop: int, target: np.ndarray) -> None:
        target[:] = data[start:stop]
    return read_region


def _time_reads(layout: Layout, data: np.ndarray, repeats: int = 2000) -> float:
    """Median microseconds per 1 MiB read at offsets spread over the region."""
    read_region = _fake_region(data)
    out = np.empty(READ, np.uint8)
    rng = np.random.default_rng(0)
    offsets = rng.integers(len(layout.header), len(layout.header) + layout.data_nbytes - READ, repeats)
    times = []
    for offset in offsets.tolist():
        start = time.perf_counter()
        layout.read_into(offset, out, read_region)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def _time_memcpy(data: np.ndarray, repeats: int = 2000) -> float:
    out = np.empty(READ, np.uint8)
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        out[:] = data[i * 4096:i * 4096 + READ]
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def _time_100_gib_layouts(repeats: int = 5) -> float:
    """Median milliseconds to build the strip TIFF and BigTIFF layouts of a (1600, 8192, 8192) uint8 array."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tiff_layout((1600, 8192, 8192), np.dtype("u1"))
        bigtiff_layout((1600, 8192, 8192), np.dtype("u1"))
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def main() -> None:
    print(f"the .tif and .bigtiff.tif layouts of 100 GiB: {_time_100_gib_layouts():8.1f} ms")
    data = np.random.default_rng(1).integers(0, 255, REGION, dtype=np.uint8)
    plain = Layout(b"\0" * HEADER, REGION, b"\0" * 1000)
    print(f"memcpy of 1 MiB alone:               {_time_memcpy(data):8.1f} us")
    print(f"Layout.read_into, 1 MiB (identity):  {_time_reads(plain, data):8.1f} us")
    permuted_cls = getattr(base, "PlanePermutedLayout", None)
    if permuted_cls is None:
        return
    # (t=4, c=8, z=16) planes of 512x512 uint16 served in t,z,c order: 512 KiB planes.
    plane = 512 * 512 * 2
    order = np.arange(4 * 8 * 16).reshape(4, 8, 16).transpose(0, 2, 1).ravel()
    permuted = permuted_cls(b"\0" * HEADER, REGION, b"\0" * 1000, plane_nbytes=plane,
                            plane_order=tuple(order.tolist()))
    print(f"PlanePermutedLayout, 1 MiB, 512 KiB planes: {_time_reads(permuted, data):8.1f} us")
    small = 64 * 64 * 2  # 8 KiB planes: 128 region calls per 1 MiB read
    order = np.arange(REGION // small).reshape(-1, 8, 16).transpose(0, 2, 1).ravel()
    permuted = permuted_cls(b"\0" * HEADER, REGION, b"\0" * 1000, plane_nbytes=small,
                            plane_order=tuple(order.tolist()))
    print(f"PlanePermutedLayout, 1 MiB, 8 KiB planes:   {_time_reads(permuted, data, 500):8.1f} us")


if __name__ == "__main__":
    main()
