"""What every virtual file is: header bytes + C-order element region + trailer bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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

    def read_into(self, out: np.ndarray, offset: int, read_region: Callable[[np.ndarray, int, int], None]) -> int:
        """Bytes [offset, offset + len(out)) of the file into `out`; returns how many there were.

        `read_region(target, start, stop)` fills `target` with bytes [start, stop)
        of the element region.
        """
        header_end = len(self.header)
        region_end = header_end + self.data_nbytes
        end = min(offset + len(out), self.size)
        position = 0
        for part_start, part_end, source in ((0, header_end, self.header), (header_end, region_end, None),
                                             (region_end, self.size, self.trailer)):
            lo, hi = max(offset, part_start), min(end, part_end)
            if lo >= hi:
                continue
            target = out[position:position + hi - lo]
            if source is None:
                read_region(target, lo - header_end, hi - header_end)
            else:
                target[:] = np.frombuffer(source, np.uint8, hi - lo, lo - part_start)
            position += hi - lo
        return position
