"""What every virtual file is: header bytes + C-order element region + trailer bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..single_flight import Once


@dataclass(frozen=True)
class Layout:
    """Byte layout of one virtual file.

    The file is `header`, then `data_nbytes` bytes of array elements in C order
    (in the array's own byte order), then `trailer`. Only the element region
    needs chunk reads; header and trailer are built from metadata alone.
    """

    header: bytes
    data_nbytes: int
    trailer: bytes = b""

    @property
    def size(self) -> int:
        return len(self.header) + self.data_nbytes + len(self.trailer)

    @property
    def c_region(self) -> tuple[int, int] | None:
        """(offset, size) of the element region when it is exactly the array's C-order bytes, from
        the first: what the C path may answer (files/layout_files.py). None for a layout whose
        region holds them in another order."""
        return len(self.header), self.data_nbytes

    def read_into(self, offset: int, out: np.ndarray, read_region: Callable[[int, int, np.ndarray], Any]) -> int:
        """Write bytes [offset, offset + len(out)) of the file into `out`; return how many there were.

        `read_region(start, stop, target)` writes the element region's bytes
        [start, stop) into the uint8 array `target`.
        """
        header_end = len(self.header)
        region_end = header_end + self.data_nbytes
        end = min(offset + len(out), self.size)
        if offset >= end:
            return 0
        if header_end <= offset and end <= region_end:  # the common case: inside the region
            read_region(offset - header_end, end - header_end, out if end - offset == len(out) else out[:end - offset])
            return end - offset
        if offset < header_end:
            _copy_part(self.header, offset, min(end, header_end), out)
        if offset < region_end and end > header_end:
            start = max(offset, header_end)
            stop = min(end, region_end)
            read_region(start - header_end, stop - header_end, out[start - offset:stop - offset])
        if end > region_end:
            start = max(offset, region_end)
            _copy_part(self.trailer, start - region_end, end - region_end, out[start - offset:])
        return end - offset


def _copy_part(part: bytes, start: int, stop: int, out: np.ndarray) -> None:
    out[:stop - start] = np.frombuffer(part, np.uint8, stop - start, start)


@dataclass(frozen=True)
class PlanePermutedLayout(Layout):
    """A layout whose region holds the array's 2-D planes in another order.

    The region is `len(plane_order)` planes of `plane_nbytes` bytes; file
    plane i holds array plane `plane_order[i]` (a plane is the C-order run of
    the last two dimensions, so each one stays one contiguous run of the
    array's bytes). Only formats whose readers want a plane order other than
    C order use it (ImageJ's channel-fastest hyperstacks); every other file
    is a plain `Layout`, whose `read_into` stays the fast path.
    """

    plane_nbytes: int = 0
    plane_order: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.plane_nbytes * len(self.plane_order) != self.data_nbytes:
            raise ValueError(f"{len(self.plane_order)} planes of {self.plane_nbytes} bytes "
                             f"are not a region of {self.data_nbytes} bytes")
        if sorted(self.plane_order) != list(range(len(self.plane_order))):
            raise ValueError("plane_order is not a permutation of the planes")

    @property
    def c_region(self) -> None:
        return None  # planes in another order than the array's

    def read_into(self, offset: int, out: np.ndarray, read_region: Callable[[int, int, np.ndarray], Any]) -> int:
        return super().read_into(offset, out, self._array_reader(read_region))

    def _array_reader(
        self, read_region: Callable[[int, int, np.ndarray], Any]
    ) -> Callable[[int, int, np.ndarray], None]:
        """`read_region` in file coordinates: one call per run of planes adjacent in the array."""
        plane = self.plane_nbytes
        order = self.plane_order

        def read_file_region(start: int, stop: int, target: np.ndarray) -> None:
            done = 0
            while start < stop:
                index, within = divmod(start, plane)
                # Extend the run while the next file plane is the next array plane.
                end_index = index + 1
                while end_index * plane < stop and order[end_index] == order[end_index - 1] + 1:
                    end_index += 1
                run_stop = min(stop, end_index * plane)
                array_start = order[index] * plane + within
                n = run_stop - start
                read_region(array_start, array_start + n, target[done:done + n])
                done += n
                start = run_stop

        return read_file_region


class LazyLayout:
    """A layout whose existence the metadata decided and whose bytes (a TIFF's IFDs and tags) are built
    the first time the file is sized or read: a directory of thousands of arrays lists without building
    thousands of headers, and `find` or `ls`, which do not ask for sizes, never build them. `build` runs
    once (a failure is raised to its caller, and the next one tries again); once built it is the layout
    it builds, served as that layout is (the C path included)."""

    def __init__(self, build: Callable[[], Layout]) -> None:
        self._layout = Once(build)

    @property
    def layout(self) -> Layout:
        return self._layout.value()

    @property
    def size(self) -> int:
        return self.layout.size
