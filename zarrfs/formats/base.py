"""What every virtual file is: header bytes + C-order element region + trailer bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


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
