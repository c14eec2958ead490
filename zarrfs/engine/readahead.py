"""Readahead: per-stream sequential detection, band-sized prefetch, and each stream's window.

A C-order read of a chunked array crosses a whole *band* (the chunks sharing
one index along the first axis; on a rectilinear grid bands differ in height)
before it leaves any of them. The policy loads ahead in whole bands and never
claims more of the cache than it has left beside the band being read, so each
chunk decodes once; when the budget cannot hold a band it says which would.

A stream is loaded ahead by its window, which starts at one band and doubles
with each read, but no further than the stream has read in sequence until it
has read 16 MiB (`Readahead.reach`): a short run (a slab of a few MiB) is
not taken for the start of a long one.

A sequential stream also gets its bytes assembled a window at a time (the
per-chunk Python work is paid once per window instead of once per FUSE read).
Readahead of all streams together is bounded too (budget.py):
each sequential stream claims the band it reads, and loads ahead only get
half of what the budget leaves beside the claimed bands; chunks it cannot
load ahead now it loads at a later read, or the read that needs them does.

The window is the stream's own buffer, not a cache entry (it lives and dies
with the open file), but its bytes count against the cache budget while it
lives (`ChunkCache.hold`), so that memory stays bounded however many files
are read at once: streams past half the budget read without a window.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import ZarrfsError
from ..model.grids import ChunkGrid
from .cache import ChunkCache
from .geometry import Coords, chunks_of_elements, element_range
from .served import continues_stream, stream_reach

log = logging.getLogger(__name__)

# A sequential reader gets this many bytes assembled at once and then served by
# slicing. 1 MiB, the largest FUSE read.
WINDOW_BYTES = 1 << 20


# A stream is loaded ahead by no more than it has read in sequence until it has read this much: more
# than a slab of a few MiB with the kernel's readahead (4 MiB) behind it, and little enough that a
# long stream's start is not slowed (a cold `dd` of a 1 GiB blosc array: no measurable change).
FULL_REACH_AFTER = 16 << 20

# How far past a band a stream reads before the band counts as left behind: more than the
# kernel's readahead keeps in flight (the mount sets 4 MiB for local stores).
PASSED_SLACK = 8 << 20

# On a local store, readahead reaches no further than this (or one band, if that is more; less the
# slack by which a band counts as passed, `Readahead.__init__`). A chunk
# file costs no round trip, so this is lookahead enough for the workers to decode ahead of the FUSE
# transport; every byte more is memory the stream's first pass takes fresh from the kernel, which
# zeroes it (a cold `dd` of a 1 GiB blosc-lz4 array with a 512 MiB cache: 300 MiB of first-pass
# buffers and a sixth of the daemon's CPU in `clear_page` with the budget's half as the reach).
LOCAL_READAHEAD_BYTES = 64 << 20

# On a local store, inner chunks this big or bigger are read ahead in quarter windows, not in
# groups of bands (`Readahead._step`): a read of a chunk file costs no round trip, and quarter
# windows overlap the reads of one band with the decodes of another. On a remote store every
# request costs a round trip and the server's work, and groups of bands, whose ranges one load
# fetches side by side (engine/fetches.py), read faster whatever the inner chunk size (README,
# "Remote stores").
REQUEST_PER_CHUNK_FROM = 1 << 20


@dataclass
class ReadStream:
    """Per open file: where the last read ended, how far ahead is loaded, and its window.

    Every FUSE thread reading the open file shares it (the kernel keeps several
    readahead requests of one file in flight): a read updates it, from `track`
    to telling C its stretch, holding `lock`, so that no two reads interleave
    their updates of the band claim, `prefetched_until` and `c_until`.
    `buffer` is read and replaced whole, outside the lock (`windowed`).
    """

    next_offset: int = -1
    run_start: int = 0  # where the stream's current sequential run began
    window: int = 0  # readahead window, bytes
    prefetched_until: int = 0
    sequential: bool = False
    buffer: tuple[int, np.ndarray] | None = None  # (offset, bytes) assembled for the stream
    band: BandClaim | None = None  # from its first read while it stays sequential: its band's claim
    band_index: int = -1  # while sequential: the band its last read began in (less the slack)
    # Where the C path answers reads of cached chunks (engine/_cached_reads.c): how far this
    # stream's reads may be answered there without coming here (`Readahead.c_stretch`), and the
    # open file's number in C's table (files/array_region.py; None: every read comes here) with the
    # begin of the file's element region this stream reads (a NetCDF file has one per variable).
    c_until: int = 0
    c_handle: int | None = None
    c_region: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


class BandClaim:
    """A sequential stream's claim on the cache for the band it is reading (`ChunkCache.claim`),
    given back when the stream stops being sequential or is closed."""

    def __init__(self, cache: ChunkCache, nbytes: int) -> None:
        cache.claim(nbytes)
        weakref.finalize(self, cache.budget.unclaim, nbytes)


class Readahead:
    """The readahead policy of one array: which chunks of its read grid to load ahead of a stream."""

    def __init__(self, name: str, read_grid: ChunkGrid, outer_grid: ChunkGrid, itemsize: int, nbytes: int,
                 cache: ChunkCache, *, enabled: bool, readahead_max: int | None = None, remote: bool = False) -> None:
        budget_bytes = cache.budget_bytes
        self.cache = cache
        self.enabled = enabled
        self.grid = read_grid
        self.itemsize = itemsize
        self.nbytes = nbytes
        self.band_bytes = read_grid.band_nbytes(itemsize)
        self.row_elements = math.prod(read_grid.shape[1:])  # elements per index of the first axis
        # Small bands are left sooner: the band the stream left stays in the cache until then.
        self.passed_slack = min(PASSED_SLACK, self.band_bytes // 4)
        # Windows count against the budget: at most half of what one band
        # leaves, so a small budget gets a smaller window, or none.
        self.window_bytes = min(WINDOW_BYTES, max(0, budget_bytes - self.band_bytes) // 2)
        # Readahead starts at one band and doubles; it never claims more than
        # half of what the cache has left after the band being read.
        room = max(0, budget_bytes - self.band_bytes - WINDOW_BYTES) // 2
        if not remote:
            # Short of the slack (and one read) by which the band left behind is handed on: the
            # loads that reach into the next band but one start once the stream has passed the band
            # before, and decode into its memory (a band-wise pass then takes two bands' worth of
            # memory fresh from the kernel, not three).
            room = min(room, max(LOCAL_READAHEAD_BYTES, self.band_bytes) - self.passed_slack - WINDOW_BYTES)
        self.readahead_max = min(readahead_max if readahead_max is not None else room, room) if enabled else 0
        self.step = self._step(read_grid, outer_grid, remote)
        # Said once, when a stream of the array first turns sequential: readers of tiles
        # (`.tiled.tif`, `.ome.tif`) and random reads never need a band in the cache.
        self._band_advice: tuple[str, int, int, int] | None = None
        if self.band_bytes > budget_bytes:
            self._band_advice = (name, self.band_bytes >> 20, budget_bytes >> 20,
                                 -(-2 * self.band_bytes // (1 << 20)))

    def _step(self, read_grid: ChunkGrid, outer_grid: ChunkGrid, remote: bool) -> int:
        """Array bytes per readahead batch of a sharded array (0: batches of a quarter window).

        A batch then covers whole groups of bands ending on shard-row
        boundaries, so that the inner chunks a shard stores next to each other
        are asked for together and come in one ranged GET. zarr-python stores
        them in Morton order: one band of a shard is never contiguous, two
        bands pair up, four make the whole shard row. Batches end on the last
        group boundary inside the readahead window, so a group leaves at least
        one read window of lookahead. Needs shards and inner chunks of one
        height each along the first axis (else 0), and on a local store inner
        chunks smaller than REQUEST_PER_CHUNK_FROM.
        """
        if not read_grid.shape or read_grid is outer_grid or not read_grid.shape[0]:
            return 0
        if not remote and math.prod(read_grid.max_stored_shape()) * self.itemsize >= REQUEST_PER_CHUNK_FROM:
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
        first_read = stream.next_offset < 0
        # Reads the C path answered in the stretch it was allowed did not come here: the stream
        # continues anywhere up to the stretch's end. A read of a sequential stream that lands up to
        # PASSED_SLACK behind where it got to is one of the kernel's readahead requests coming late
        # (one that waited for its chunks while the C path answered those after it): still the stream.
        stream.sequential = continues_stream(stream.next_offset, start, stop) \
            or 0 <= stream.next_offset <= start <= stream.c_until + stream_reach(stop - start) \
            or (stream.sequential and stream.next_offset - PASSED_SLACK <= start < stream.next_offset)
        stream.next_offset = max(stop, stream.next_offset) if stream.sequential else stop
        if not stream.sequential:
            stream.run_start = start
            stream.band_index = -1  # `passed` starts afresh when the stream turns sequential
        elif self._band_advice is not None:
            advice, self._band_advice = self._band_advice, None
            if advice is not None:  # another stream's thread may have said it meanwhile
                log.warning("array /%s: one band of chunks is %d MiB but the cache is %d MiB; a sequential read "
                            "will decode chunks more than once. Mount with --cache-size %dM or more.", *advice)
        if self.readahead_max <= 0 or not (stream.sequential or first_read):
            stream.window = 0
            stream.band = None
            return []
        # A stream claims its band from its first read (it may turn out sequential at the next),
        # so that readahead for streams already known does not take the room this one needs.
        if stream.band is None:
            stream.band = BandClaim(self.cache, self.band_bytes)
        if first_read:
            return []
        stream.window = min(self.readahead_max, 2 * stream.window if stream.window else self.band_bytes)
        ahead = self._ahead(stream, stream.next_offset)
        if ahead is None:
            return []
        stream.prefetched_until = ahead[1]
        first, last, _ = element_range(*ahead, self.itemsize)
        return chunks_of_elements(self.grid, first, last)

    def fetch_ahead(self, stream: ReadStream) -> list[Coords]:
        """After `track` loaded ahead: the chunks of the batch after the one it loaded (a sharded
        array's, `_step`), whose stored bytes the source may fetch without decoding them yet
        (chunks.py `fetch_ahead`): over a network, their fetch then overlaps this batch's decodes.
        Empty for arrays read in quarter windows."""
        if not self.step:
            return []
        return self.chunks_between(stream.prefetched_until, min(self.nbytes, stream.prefetched_until + self.step))

    def _ahead(self, stream: ReadStream, stop: int) -> tuple[int, int] | None:
        """The bytes `track` loads ahead of a sequential stream once its reads reached `stop`: None
        while they are too few. It tops up in batches, not one chunk per read: whole groups of bands
        for a sharded array (see `_step`), else a quarter of the reach at a time."""
        reach = self.reach(stream.window, stop - stream.run_start)
        ahead_start = max(stop, stream.prefetched_until)
        ahead_stop = min(self.nbytes, stop + reach)
        if self.step:
            if ahead_stop < self.nbytes:
                ahead_stop -= ahead_stop % self.step
            if ahead_start >= ahead_stop:
                return None
        elif ahead_start >= ahead_stop or (ahead_stop - ahead_start < reach // 4 and ahead_stop < self.nbytes):
            return None
        return ahead_start, ahead_stop

    def reach(self, window: int, run: int) -> int:
        """How far past its last read a sequential stream that has read `run` bytes in sequence is
        loaded ahead: its window, but no more than `run` until that is FULL_REACH_AFTER (or a
        quarter of a smaller array, whose readahead costs little; a sharded one's then asks for
        whole shard rows, `_step`). A slab read (one time step of a NetCDF variable, a few MiB with
        the kernel's readahead) looks like the start of a stream; ahead of it by its window,
        readahead would decode bands nobody reads."""
        return window if run >= min(FULL_REACH_AFTER, self.nbytes // 4) else min(window, run)

    def _first_load_at(self, stream: ReadStream) -> int:
        """The smallest read end past the stream's last read at which `track` loads ahead (`_ahead`
        is monotonic in it: a later end reaches further, and no less far than a smaller one).

        Estimated in closed form for the two ways the reach grows, then checked against `_ahead`
        itself; a binary search settles it when the estimate is off (integer rounding)."""
        start, prefetched, window = stream.next_offset, stream.prefetched_until, stream.window
        full_from = stream.run_start + min(window, FULL_REACH_AFTER, self.nbytes // 4)  # reach = window
        if self.step:
            boundary = prefetched - prefetched % self.step + self.step  # the next batch ends here
            full = boundary - window
            ramp = -(-(boundary + stream.run_start) // 2)  # stop + (stop - run_start) >= boundary
        else:
            full = prefetched - window + window // 4
            ramp = stream.run_start + -(-4 * (prefetched - stream.run_start) // 7)  # 2 run - run / 4 >= left
        estimate = max(start + 1, ramp if ramp < full_from else max(full, full_from))
        if self._ahead(stream, estimate) is not None and \
                (estimate == start + 1 or self._ahead(stream, estimate - 1) is None):
            return estimate
        low, high = start, self.nbytes  # nothing is loaded at `low`; from `high` on, nothing is left to load
        while high - low > 1:
            middle = (low + high) // 2
            if self._ahead(stream, middle) is None:
                low = middle
            else:
                high = middle
        return high

    def passed(self, stream: ReadStream, start: int) -> list[Coords]:
        """The chunks of the bands a sequential stream has just left behind (often none).

        A C-order stream does not come back to them, yet its last reads made
        them the most recently used chunks; left there, they would outlive the
        chunks readahead loaded for the next bands (of this stream or
        another), which no read has touched yet. A band counts as passed once
        the stream is `passed_slack` beyond it: the kernel's readahead has
        several requests in flight, and they may arrive out of order.
        """
        if not stream.sequential or not self.grid.shape:
            return []
        row = max(0, start - self.passed_slack) // self.itemsize // self.row_elements
        band = self.grid.axes[0].locate(min(row, self.grid.shape[0] - 1))[0]
        left, stream.band_index = stream.band_index, band
        if not 0 <= left < band:
            return []
        return list(itertools.product(range(left, band), *(range(axis.count) for axis in self.grid.axes[1:])))

    def c_stretch(self, stream: ReadStream) -> int:
        """After this stream's read was tracked (`track`, `passed`): the byte its reads may end at
        without coming here, because until then `track` would load nothing ahead and `passed` hand
        on no band. 0 while the stream is not sequential or its window still grows (each read
        doubles it); while its reach still grows with its run, the stretch ends where that reach
        first makes `track` load."""
        if not stream.sequential or stream.band_index < 0 or not self.grid.shape:
            return 0
        if not self.enabled:  # chunk files read raw: nothing cached to load ahead or hand on
            return self.nbytes
        until = self.nbytes
        axis = self.grid.axes[0]
        if stream.band_index + 1 < axis.count:  # `passed` hands on the band once a read starts here
            until = axis.start(stream.band_index + 1) * self.row_elements * self.itemsize + self.passed_slack
        if self.readahead_max > 0 and stream.prefetched_until < self.nbytes:
            if stream.window < self.readahead_max:
                return 0
            until = min(until, self._first_load_at(stream) - 1, self.nbytes - stream.window - 1)
        return max(0, until)

    def answered_in_c(self, stream: ReadStream, start: int) -> list[Coords]:
        """The chunks of the bytes this stream read in C since its last read here (which ends
        where `start` begins, or where the stretch did)."""
        if not stream.c_until:
            return []
        return self.chunks_between(stream.next_offset, min(start, stream.c_until))

    def chunks_between(self, begin: int, end: int) -> list[Coords]:
        """The chunks holding bytes [begin, end) of the array (none if the range is empty)."""
        if begin < 0 or begin >= end:
            return []
        first, last, _ = element_range(begin, end, self.itemsize)
        return chunks_of_elements(self.grid, first, last)

    def refused(self, stream: ReadStream, coords: Coords) -> None:
        """The cache had no room to load chunk `coords` (and those after it) ahead: the stream's
        readahead resumes from the first byte that needs it, at a later read."""
        first = 0
        for axis, c, extent in zip(self.grid.axes, coords, self.grid.shape, strict=True):
            first = first * extent + axis.start(c)
        stream.prefetched_until = min(stream.prefetched_until, first * self.itemsize)


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
        weakref.finalize(data, cache.budget.release, window_stop - start)
        try:
            fill(start, window_stop, data)
        except ZarrfsError:
            return None
        window = stream.buffer = (start, data)
    base, data = window
    return data[start - base:stop - base]
