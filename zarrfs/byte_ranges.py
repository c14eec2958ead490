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


@dataclass(frozen=True)
class OffsetRequest:
    """Bytes from `start` to the object's end."""

    start: int


@dataclass(frozen=True)
class SuffixRequest:
    """The last `length` bytes of the object (all of it when it is shorter): a shard index at the
    shard's end, whose size is not known before it is read."""

    length: int


ByteRequest = RangeRequest | OffsetRequest | SuffixRequest


def expected_nbytes(request: ByteRequest) -> int | None:
    """How many bytes an answer to `request` has at most (None: as many as the object has past the offset)."""
    return request.end - request.start if isinstance(request, RangeRequest) else \
        request.length if isinstance(request, SuffixRequest) else None


def within(request: ByteRequest, size: int) -> slice:
    """Where the requested bytes lie in the whole object of `size` bytes: `whole[within(request, len(whole))]`."""
    match request:
        case RangeRequest(start, end):
            return slice(min(start, size), min(end, size))
        case OffsetRequest(start):
            return slice(min(start, size), size)
        case SuffixRequest(length):
            return slice(max(0, size - length), size)  # (not [-length:], which is all of it for 0)
