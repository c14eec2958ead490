"""Buffers by lease: the memory of evicted chunks, handed to the next decodes of the same size.

A decode into fresh memory page-faults on every 4 KiB it writes; in a cold
streaming read that was over a quarter of the daemon's CPU. A chunk the
cache evicts is usually the size of the next one it loads, so its memory
is kept and the next decode writes into it instead.

Reusing memory is only safe when nothing can still read it. The rule: a
chunk's memory is reused only when, as it leaves the cache, no lease on it
is open. Every reader of cached chunks holds a lease while it copies
(`ChunkCache.get_many` hands out leased values, `release` ends them); the C
read path holds a buffer export and a pin, and the cache takes
the chunk out of C (which waits for copies in flight) before its memory can
move. A chunk evicted while leased is simply dropped: its memory is freed
when its last holder lets go, never reused. Side data (shard indexes) is
never reused: its users take no leases.

`owned_memory` says whether a chunk's memory can be reused at all: a plain
numeric array owning (or viewing the whole of) a writable, contiguous
buffer of its own size.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np


def owned_memory(value: Any) -> np.ndarray | None:
    """The array owning `value`'s memory, when that memory is exactly `value`'s and may be written."""
    if not isinstance(value, np.ndarray):
        return None
    owner = value if value.base is None else value.base
    if not (isinstance(owner, np.ndarray) and owner.flags.owndata and owner.flags.writeable
            and owner.flags.c_contiguous and owner.nbytes == value.nbytes and not owner.dtype.hasobject):
        return None
    return owner


class BufferPool:
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
