"""Readahead: per-stream sequential detection, band-sized prefetch, and each stream's window.

A C-order read of a chunked array crosses a whole *band* (the chunks sharing
one index along the first axis; on a rectilinear grid bands differ in height)
before it leaves any of them. The policy loads ahead in whole bands and never
claims more of the cache than it has left beside the band being read, so each
chunk decodes once; when the budget cannot hold a band it says which would.

A sequential stream also gets its bytes assembled a window at a time (the
per-chunk Python work is paid once per window instead of once per FUSE read).
The window is the stream's own buffer, not a cache entry (it lives and dies
with the open file), but its bytes count against the cache budget while it
lives (`ChunkCache.hold`), so that memory stays bounded however many files
are read at once: streams past half the budget read without a window.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import ZarrfsError
from ..model.grids import ChunkGrid
from .cache import ChunkCache
from .geometry import Coords, chunks_of_elements, element_range

log = logging.getLogger(__name__)

# A sequential reader gets this many bytes assembled at once and then served by
# slicing. 1 MiB, the largest FUSE read.
WINDOW_BYTES = 1 << 20


@dataclass
class ReadStream:
    """Per open file: where the last read ended, how far ahead is loaded, and its window."""

    next_offset: int = -1
    window: int = 0  # readahead window, bytes
    prefetched_until: int = 0
    sequential: bool = False
    buffer: tuple[int, np.ndarray] | None = None  # (offset, bytes) assembled for the stream


class Readahead:
    """The readahead policy of one array: which chunks of its read grid to load ahead of a stream."""

    def __init__(self, name: str, read_grid: ChunkGrid, outer_grid: ChunkGrid, itemsize: int, nbytes: int,
                 budget_bytes: int, *, enabled: bool, readahead_max: int | None = None) -> None:
        self.grid = read_grid
        self.itemsize = itemsize
        self.nbytes = nbytes
        self.band_bytes = read_grid.band_nbytes(itemsize)
        # Windows count against the budget: at most half of what one band
        # leaves, so a small budget gets a smaller window, or none.
        self.window_bytes = min(WINDOW_BYTES, max(0, budget_bytes - self.band_bytes) // 2)
        # Readahead starts at one band and doubles; it never claims more than
        # half of what the cache has left after the band being read.
        room = max(0, budget_bytes - self.band_bytes - WINDOW_BYTES) // 2
        self.readahead_max = min(readahead_max if readahead_max is not None else room, room) if enabled else 0
        self.step = self._step(read_grid, outer_grid)
        if self.band_bytes > budget_bytes:
            log.warning(
                "array /%s: one band of chunks is %d MiB but the cache is %d MiB; a sequential read "
                "will decode chunks more than once. Mount with --cache-size %dM or more.",
                name, self.band_bytes >> 20, budget_bytes >> 20, -(-2 * self.band_bytes // (1 << 20)),
            )

    def _step(self, read_grid: ChunkGrid, outer_grid: ChunkGrid) -> int:
        """Array bytes per readahead batch of a sharded array (0: batches of a quarter window).

        A batch then covers whole groups of bands ending on shard-row
        boundaries, so that the inner chunks a shard stores next to each other
        are asked for together and come in one ranged GET. zarr-python stores
        them in Morton order: one band of a shard is never contiguous, two
        bands pair up, four make the whole shard row. Batches end on the last
        group boundary inside the readahead window, so a group leaves at least
        one read window of lookahead. Needs shards and inner chunks of one
        height each along the first axis (else 0).
        """
        if not read_grid.shape or read_grid is outer_grid or not read_grid.shape[0]:
            return 0
        shard, inner = outer_grid.axes[0].uniform_edge(), read_grid.axes[0].uniform_edge()
        if shard is None or inner is None or shard == inner:
            return 0
        bands_per_shard = shard // inner
        bands = 1
        while 2 * bands <= bands_per_shard and 2 * bands * self.band_bytes <= self.readahead_max - WINDOW_BYTES:
            bands *= 2
        return 0 if bands < 2 else bands * inner * (self.nbytes // read_grid.shape[0])

    def track(self, stream: ReadStream, start: int, stop: int) -> list[Coords]:
        """Note a read of [start, stop); the chunks to load ahead of it now (often none)."""
        stream.sequential = stream.next_offset >= 0 and \
            abs(start - stream.next_offset) <= max(4 * (stop - start), 1 << 20)
        stream.next_offset = max(stop, stream.next_offset) if stream.sequential else stop
        if not stream.sequential or self.readahead_max <= 0:
            stream.window = 0
            return []
        stream.window = min(self.readahead_max, 2 * stream.window if stream.window else self.band_bytes)
        ahead_start = max(stop, stream.prefetched_until)
        ahead_stop = min(self.nbytes, stop + stream.window)
        # Top up in batches, not one chunk per read: whole groups of bands for a
        # sharded array (see `_step`), else a quarter window at a time.
        if self.step:
            if ahead_stop < self.nbytes:
                ahead_stop -= ahead_stop % self.step
            if ahead_start >= ahead_stop:
                return []
        elif ahead_start >= ahead_stop or (ahead_stop - ahead_start < stream.window // 4 and ahead_stop < self.nbytes):
            return []
        stream.prefetched_until = ahead_stop
        first, last, _ = element_range(ahead_start, ahead_stop, self.itemsize)
        return chunks_of_elements(self.grid, first, last)


def windowed(stream: ReadStream, start: int, stop: int, nbytes: int, window_bytes: int, cache: ChunkCache,
             fill: Callable[[int, int, np.ndarray], None]) -> np.ndarray | None:
    """Bytes [start, stop) out of the stream's window, assembling a new window with `fill` if need be.

    None when there is no window: the budget has no room for one, or
    assembling failed (a bad chunk beyond what was asked must not fail this
    read; the caller reads just the range and reports its own errors).
    """
    window = stream.buffer
    if window is None or not (window[0] <= start and stop <= window[0] + len(window[1])):
        stream.buffer = window = None  # the old window's hold ends with its last reference
        window_stop = min(nbytes, max(stop, start + window_bytes))
        if not cache.hold(window_stop - start):
            return None
        data = np.empty(window_stop - start, np.uint8)
        weakref.finalize(data, cache.release, window_stop - start)
        try:
            fill(start, window_stop, data)
        except ZarrfsError:
            return None
        window = stream.buffer = (start, data)
    base, data = window
    return data[start - base:stop - base]
