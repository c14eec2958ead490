"""Which bytes of a stored object a read asks for, as a type rather than a sign convention.

`RangeRequest(start, end)` is bytes [start, end); `OffsetRequest(start)` is
everything from `start` on; `SuffixRequest(length)` is the last `length`
bytes (a shard index at the shard's end, whose size is unknown before the
read). `None` where a `ByteRequest` is expected means the whole object. The
three are zarr-python's `ByteRequest`s: a number's sign never says which
one is meant, so a caller cannot ask for a suffix by mistake.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RangeRequest:
    """Bytes [start, end) of the object."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"byte range [{self.start}:{self.end}] is not 0 <= start <= end")

    @property
    def nbytes(self) -> int | None:
        return self.end - self.start

    def within(self, size: int) -> slice:
        """Where these bytes lie in the whole object of `size` bytes: `whole[request.within(len(whole))]`."""
        return slice(min(self.start, size), min(self.end, size))

    def __str__(self) -> str:
        return f"[{self.start}:{self.end}]"


@dataclass(frozen=True)
class OffsetRequest:
    """Bytes from `start` to the object's end."""

    start: int

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ValueError(f"byte offset {self.start} is negative")

    @property
    def nbytes(self) -> int | None:
        return None  # the object's size decides

    def within(self, size: int) -> slice:
        return slice(min(self.start, size), size)

    def __str__(self) -> str:
        return f"[{self.start}:]"


@dataclass(frozen=True)
class SuffixRequest:
    """The last `length` bytes of the object (all of it when it is shorter)."""

    length: int

    def __post_init__(self) -> None:
        if self.length < 0:
            raise ValueError(f"byte suffix of {self.length} bytes is negative")

    @property
    def nbytes(self) -> int | None:
        return self.length

    def within(self, size: int) -> slice:
        return slice(max(0, size - self.length), size)  # (not [-length:], which is all of it for 0)

    def __str__(self) -> str:
        return f"[-{self.length}:]"


ByteRequest = RangeRequest | OffsetRequest | SuffixRequest
