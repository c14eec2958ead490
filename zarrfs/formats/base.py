"""What every virtual file is: header bytes + C-order element region + trailer bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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

    def read(self, offset: int, size: int, read_region: Callable[[int, int], Any]) -> Any:
        """Bytes [offset, offset + size) of the file; `read_region(start, stop)` serves the element region.

        Inside the region the region reader's own buffer is returned as is;
        across a boundary the parts are joined into `bytes`.
        """
        header_end = len(self.header)
        region_end = header_end + self.data_nbytes
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        if header_end <= offset and end <= region_end:  # the common case: inside the region
            return read_region(offset - header_end, end - header_end)
        parts = []
        if offset < header_end:
            parts.append(self.header[offset:min(end, header_end)])
        if offset < region_end and end > header_end:
            parts.append(read_region(max(offset, header_end) - header_end, min(end, region_end) - header_end))
        if end > region_end:
            parts.append(self.trailer[max(offset, region_end) - region_end:end - region_end])
        return b"".join(parts)
