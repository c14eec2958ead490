"""Spare buffers: the memory of evicted chunks, kept for the next decodes of the same size.

A decode into fresh memory page-faults on every 4 KiB it writes; in a cold
streaming read that was over a quarter of the daemon's CPU. A chunk the
cache evicts is usually the size of the next one it loads, so its memory
is kept and the next decode writes into it instead.

Reusing memory is only safe when nothing else can still read it: a reader
may hold the evicted chunk, a view of it, or a buffer exported from it
(the reply copy holds one while it runs). Each of those holds a reference
to the chunk or to the array that owns its memory, so `reusable` takes
the memory only when the two reference counts are exactly what the cache's
own eviction holds. The counts it expects are measured once, at import,
through the same calls, so they follow the interpreter's own counting.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

import numpy as np


def reusable(value: Any) -> np.ndarray | None:
    """The array owning `value`'s memory, if `value` is a plain numeric chunk that nothing but
    the caller's one name refers to (and nothing but `value` refers to its memory); else None."""
    if not isinstance(value, np.ndarray):
        return None
    owner = value if value.base is None else value.base
    if not (isinstance(owner, np.ndarray) and owner.flags.owndata and owner.flags.writeable
            and owner.flags.c_contiguous and owner.nbytes == value.nbytes and not owner.dtype.hasobject):
        return None
    if _reference_counts(value, owner) != _UNSHARED[value is owner]:
        return None
    return owner


def _reference_counts(value: np.ndarray, owner: np.ndarray) -> tuple[int, int]:
    return sys.getrefcount(value), sys.getrefcount(owner)


def _counts_as_reusable_sees(value: np.ndarray) -> tuple[int, int]:
    """What `reusable` counts for a value held by one name: the same frames, the same locals."""
    owner = value if value.base is None else value.base
    return _reference_counts(value, owner)


def _unshared_counts(owns_memory: bool) -> tuple[int, int]:
    value = np.empty(64, np.uint8) if owns_memory else np.empty(64, np.uint8).view(np.int8)  # one name
    return _counts_as_reusable_sees(value)


_UNSHARED = {True: _unshared_counts(True), False: _unshared_counts(False)}


class SpareBuffers:
    """Memory of evicted chunks, newest last, at most `limit` bytes. Not thread-safe: the cache
    calls it under its own lock and decides how much to keep."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.nbytes = 0
        self._buffers: deque[np.ndarray] = deque()

    def keep(self, buffer: np.ndarray) -> None:
        """Keep `buffer`, dropping the oldest ones beyond the limit (sizes that stopped coming)."""
        if buffer.nbytes > self.limit:
            return
        self._buffers.append(buffer)
        self.nbytes += buffer.nbytes
        self.shrink_to(self.limit)

    def take(self, nbytes: int) -> np.ndarray | None:
        """A kept buffer of exactly `nbytes` as flat bytes, the newest such; None if there is none."""
        for i in range(len(self._buffers) - 1, -1, -1):
            if self._buffers[i].nbytes == nbytes:
                buffer = self._buffers[i]
                del self._buffers[i]
                self.nbytes -= nbytes
                return buffer.reshape(-1).view(np.uint8)
        return None

    def shrink_to(self, nbytes: int) -> None:
        """Free the oldest kept buffers until at most `nbytes` are kept."""
        while self.nbytes > nbytes:
            self.nbytes -= self._buffers.popleft().nbytes
