"""What every virtual file is: header bytes + C-order element region + trailer bytes."""

from __future__ import annotations

from dataclasses import dataclass


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
