"""Byte ranges of an array's C-order element stream, assembled from chunks.

`ArrayReader.read(start, stop)` returns exactly `a.tobytes()[start:stop]`.
The byte range is widened to whole elements, cut into at most 2·ndim
hyperrectangles (each a contiguous run of the output), and each box is filled
from the read units (chunks or inner chunks) it crosses.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterator
from concurrent.futures import wait
from dataclasses import dataclass, field

import numpy as np

from ..errors import StoreTimeoutError, ZarrfsError
from ..model.meta import ArrayMeta
from ._gather import copy_into
from .cache import Batch, ChunkCache, new_token
from .chunks import ChunkSource, band_nbytes
from .direct import ChunkFiles

log = logging.getLogger(__name__)

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (start, stop) per dimension
# A block of one read unit and where it goes: (unit coords, block in the unit,
# the destination: a view of the output).
Block = tuple[tuple[int, ...], tuple[slice, ...], np.ndarray]


def linear_boxes(first: int, last: int, shape: tuple[int, ...]) -> list[Box]:
    """Hyperrectangles covering C-order elements [first, last), in order."""
    if first >= last:
        return []
    if not shape:
        return [((), ())]
    row = math.prod(shape[1:])
    sub = shape[1:]
    r0, r1 = divmod(first, row)
    r_last, end_in_row = divmod(last, row)
    if r0 == r_last or (r0 + 1 == r_last and end_in_row == 0 and r1 != 0):
        # Everything in one row of the leading axis.
        stop = end_in_row if r0 == r_last else row
        return [((r0, *lo), (r0 + 1, *hi)) for lo, hi in linear_boxes(r1, stop, sub)]
    boxes: list[Box] = []
    if r1:
        boxes += [((r0, *lo), (r0 + 1, *hi)) for lo, hi in linear_boxes(r1, row, sub)]
        r0 += 1
    if r_last > r0:
        boxes.append(((r0, *(0 for _ in sub)), (r_last, *sub)))
    if end_in_row:
        boxes += [((r_last, *lo), (r_last + 1, *hi)) for lo, hi in linear_boxes(0, end_in_row, sub)]
    return boxes


def copy_block(destination: np.ndarray, source: np.ndarray) -> None:
    """`destination[...] = source`, keeping the GIL when no conversion is needed (see `_gather`)."""
    if source.dtype == destination.dtype:
        copy_into(destination, source)
    else:  # another byte order (a 0-d chunk indexed with () is a native scalar): numpy converts
        destination[...] = source


# A sequential reader gets this many bytes assembled at once and then served
# by slicing: the per-chunk Python work is paid once per window instead of
# once per (typically 128 KiB) FUSE read. 1 MiB, the largest FUSE read.
WINDOW_BYTES = 1 << 20


@dataclass
class ReadStream:
    """Per open file: where the last read ended and how far ahead to load."""

    token: int = field(default_factory=new_token)  # names this stream's window in the cache
    next_offset: int = -1
    window: int = 0  # readahead window, bytes
    prefetched_until: int = 0
    sequential: bool = False


class ArrayReader:
    def __init__(self, source: ChunkSource, cache: ChunkCache, *, timeout: float = 300.0,
                 readahead_max: int | None = None, files: ChunkFiles | None = None) -> None:
        self.source = source
        # Plain chunks in local files are read from the files, not decoded into the cache.
        self._files = files if source.plain_local_files else None
        self.meta: ArrayMeta = source.meta
        self.cache = cache
        self.timeout = timeout
        self.itemsize = self.meta.dtype.itemsize
        self.nbytes = self.meta.nbytes
        self.read_shape = source.read_shape
        self.unit_nbytes = math.prod(self.read_shape) * self.itemsize
        self._token = new_token()  # names this reader's chunks in the cache and its open chunk files
        self._key_prefix = ("chunk", self._token)
        # Misses in one shard load together: adjacent inner chunks come in one request.
        self._batch = Batch(lambda key: source.group(key[1]), self._load_many)
        self.band_bytes = band_nbytes(self.meta, self.read_shape)
        # For the one-row fast path: the last axis, and the leading axes paired
        # with their read-unit sizes, innermost first.
        self._width = self.meta.shape[-1] if self.meta.ndim else 1
        self._step = self.read_shape[-1] if self.meta.ndim else 1
        self._lead_shape_reversed = tuple(reversed(tuple(zip(self.meta.shape[:-1], self.read_shape[:-1]))))
        # A stream's assembled window is cached too: it must fit beside one band.
        self.window_bytes = min(WINDOW_BYTES, max(0, cache.budget_bytes - self.band_bytes) // 2)
        # Readahead starts at one band and doubles; it never claims more than
        # half of what the cache has left after the band being read.
        room = max(0, cache.budget_bytes - self.band_bytes - WINDOW_BYTES) // 2
        self.readahead_max = min(readahead_max if readahead_max is not None else room, room)
        self.readahead_step = self._readahead_step()
        if self.band_bytes > cache.budget_bytes:
            log.warning(
                "array /%s: one band of chunks is %d MiB but the cache is %d MiB; a sequential read "
                "will decode chunks more than once. Mount with --cache-size %dM or more.",
                self.meta.path, self.band_bytes >> 20, cache.budget_bytes >> 20,
                -(-2 * self.band_bytes // (1 << 20)),
            )

    def _readahead_step(self) -> int:
        """Array bytes per readahead batch of a sharded array (0: batches of a quarter window).

        A batch then covers whole groups of bands ending on shard-row
        boundaries, so that the inner chunks a shard stores next to each other
        are asked for together and come in one ranged GET. zarr-python stores
        them in Morton order: one band of a shard is never contiguous, two
        bands pair up, four make the whole shard row. Batches end on the last
        group boundary inside the readahead window, so a group leaves at least
        one read window of lookahead.
        """
        if self.meta.ndim == 0 or self.read_shape == self.meta.chunk_shape or not self.meta.shape[0]:
            return 0
        bands_per_shard = self.meta.chunk_shape[0] // self.read_shape[0]
        bands = 1
        while 2 * bands <= bands_per_shard and 2 * bands * self.band_bytes <= self.readahead_max - WINDOW_BYTES:
            bands *= 2
        return 0 if bands < 2 else bands * self.read_shape[0] * (self.nbytes // self.meta.shape[0])

    # ---------------------------------------------------------------- public

    def read(self, start: int, stop: int, stream: ReadStream | None = None) -> bytes:
        """Bytes [start, stop) of the C-order element stream (fewer at the end)."""
        out = np.empty(max(0, min(stop, self.nbytes) - start), np.uint8)
        return out[:self.read_into(start, stop, out, stream)].tobytes()

    def read_into(self, start: int, stop: int, out: np.ndarray, stream: ReadStream | None = None) -> int:
        """As `read`, written into the uint8 array `out`; returns the byte count.

        The FUSE layer passes libfuse's reply buffer as `out`, so chunk bytes
        are gathered straight into the reply with no copy in between.
        """
        stop = min(stop, self.nbytes)
        if start >= stop:
            return 0
        size = stop - start
        if stream is not None:
            self._track(stream, start, stop)
            if stream.sequential and size < self.window_bytes:  # a window pays for small reads
                window = self._window(stream, start, stop)
                if window is not None:
                    base, data = window
                    copy_block(out[:size], data[start - base:stop - base])
                    return size
        self._fill_bytes(start, stop, out if len(out) == size else out[:size])
        return size

    def fill_blocks(self, blocks: list[Block]) -> None:
        """Copy blocks of read units into place, for files not in C order (`engine/tiles.py`)."""
        self._fill_blocks(blocks)

    # -------------------------------------------------------------- internal

    def _window(self, stream: ReadStream, start: int, stop: int) -> tuple[int, np.ndarray] | None:
        """The stream's assembled window holding [start, stop), built if need be (None if that fails)."""
        window_key = ("window", self._key_prefix, stream.token)
        window = self.cache.peek(window_key)
        if window is not None and window[0] <= start and stop <= window[0] + len(window[1]):
            return window
        window_stop = min(self.nbytes, max(stop, start + self.window_bytes))
        data = np.empty(window_stop - start, np.uint8)
        try:
            self._fill_bytes(start, window_stop, data)
        except ZarrfsError:
            return None  # a bad chunk beyond what was asked must not fail this read
        self.cache.put(window_key, (start, data))
        return start, data

    def _fill_bytes(self, start: int, stop: int, out: np.ndarray) -> None:
        """Write bytes [start, stop) into `out` (uint8, exactly that long).

        Whole elements are written through a typed view of `out`; a range that
        starts or ends inside an element goes through a small typed array.
        """
        itemsize = self.itemsize
        first, skip = divmod(start, itemsize)
        last = -(-stop // itemsize)
        if skip == 0 and stop % itemsize == 0:
            self._fill_elements(first, last, out.view(self.meta.dtype))
            return
        elements = np.empty(last - first, self.meta.dtype)
        self._fill_elements(first, last, elements)
        out[:] = elements.view(np.uint8)[skip:skip + len(out)]

    def _fill_elements(self, first: int, last: int, target: np.ndarray) -> None:
        """Write C-order elements [first, last) into the 1-D array `target`.

        Random small reads (a 4 KiB pread) nearly always stay inside one row of
        the last axis: then the elements are slices of at most a few chunk rows,
        with no box decomposition.
        """
        width = self._width
        row, column = divmod(first, width)
        if self.meta.ndim == 0 or last - row * width > width:  # crosses into the next row
            self._fill_boxes(first, last, target)
            return
        lead: list[int] = []
        within: list[int] = []
        for size, unit in self._lead_shape_reversed:
            row, i = divmod(row, size)
            lead.append(i // unit)
            within.append(i % unit)
        lead.reverse()
        within_index = tuple(reversed(within))
        column_stop = column + (last - first)
        step = self._step
        pieces: list[tuple[tuple[int, ...], int, int, int]] = []  # (unit, columns lo:hi in it, place in target)
        for c in range(column // step, (column_stop - 1) // step + 1):
            base = c * step
            lo = max(column, base) - base
            pieces.append(((*lead, c), lo, min(column_stop, base + step) - base, base + lo - column))
        if self._files is not None:
            rows = tuple(slice(i, i + 1) for i in within_index)
            self._fill_blocks([(coord, (*rows, slice(lo, hi)), target[at:at + hi - lo])
                               for coord, lo, hi, at in pieces])
            return
        prefix = self._key_prefix
        keys = [(prefix, piece[0]) for piece in pieces]
        values, pending = self.cache.get_many(keys, self._load, size_hint=self.unit_nbytes, batch=self._batch)
        if pending:
            self._wait(pending, values)
        for (_, lo, hi, at), key in zip(pieces, keys, strict=True):
            chunk = values[key]
            if chunk is None:
                target[at:at + hi - lo] = self.meta.fill_value
            else:
                copy_block(target[at:at + hi - lo], chunk[within_index][lo:hi])

    def _fill_boxes(self, first: int, last: int, target: np.ndarray) -> None:
        """As `_fill_elements`, for any range: box by box, from the units each box crosses."""
        blocks: list[Block] = []
        position = 0
        for lo, hi in linear_boxes(first, last, self.meta.shape):
            box_shape = tuple(b - a for a, b in zip(lo, hi, strict=True))
            size = math.prod(box_shape)
            view = target[position:position + size].reshape(box_shape)
            for coords in self._units((lo, hi)):
                src: list[slice] = []
                dst: list[slice] = []
                for c, unit, a, b in zip(coords, self.read_shape, lo, hi, strict=True):
                    begin = max(a, c * unit)
                    end = min(b, (c + 1) * unit)
                    src.append(slice(begin - c * unit, end - c * unit))
                    dst.append(slice(begin - a, end - a))
                # A 0-d box is the view itself: indexing it with () would give a scalar, not a view.
                blocks.append((coords, tuple(src), view[tuple(dst)] if dst else view))
            position += size
        self._fill_blocks(blocks)

    def _fill_blocks(self, blocks: list[Block]) -> None:
        """Copy each block of a unit into place: read raw from its file when stored plain, else decoded."""
        if self._files is not None:
            undone: list[Block] = []
            uncached: list[Block] = []
            # Page-cache reads first: they keep the GIL (`_gather`) and run
            # back to back; reads that may wait for the disk release it, after.
            for block in blocks:
                done = self._read_raw(*block, cached_only=True)
                if done is None:
                    uncached.append(block)
                elif not done:
                    undone.append(block)
            undone += [block for block in uncached if not self._read_raw(*block)]
            if not undone:
                return
            blocks = undone
        prefix = self._key_prefix
        keys = list(dict.fromkeys((prefix, block[0]) for block in blocks))
        values, pending = self.cache.get_many(keys, self._load, size_hint=self.unit_nbytes, batch=self._batch)
        if pending:
            self._wait(pending, values)
        for coords, src, destination in blocks:
            chunk = values[(prefix, coords)]
            if chunk is None:
                destination[...] = self.meta.fill_value
            else:
                copy_block(destination, chunk[src])

    def _read_raw(self, coords: tuple[int, ...], src: tuple[slice, ...], destination: np.ndarray,
                  cached_only: bool = False) -> bool | None:
        assert self._files is not None
        path = self.source.raw_file(coords)
        if path is None:
            return False
        return self._files.read_block(self._token, path, self.read_shape, src, destination, cached_only=cached_only)

    def _wait(self, pending: dict, values: dict) -> None:
        _, late = wait(pending.values(), timeout=self.timeout)
        if late:
            raise StoreTimeoutError(f"array /{self.meta.path}: chunks not loaded within {self.timeout:.0f} s")
        for key, future in pending.items():
            values[key] = future.result()  # raises the load's error, if any

    def _key(self, coords: tuple[int, ...]) -> tuple:
        return (self._key_prefix, coords)

    def _load(self, key: tuple) -> np.ndarray | None:
        return self.source.load(key[1])

    def _load_many(self, keys: list[tuple]) -> Iterator[tuple[tuple, object]]:
        return ((self._key(c), outcome) for c, outcome in self.source.load_many([key[1] for key in keys]))

    def _units(self, box: Box) -> Iterator[tuple[int, ...]]:
        lo, hi = box
        ranges = [range(a // c, (b - 1) // c + 1) for a, b, c in zip(lo, hi, self.read_shape, strict=True)]
        return itertools.product(*ranges)

    def _track(self, stream: ReadStream, start: int, stop: int) -> None:
        """Decide whether reads follow each other; if so, grow readahead and load ahead."""
        stream.sequential = stream.next_offset >= 0 and \
            abs(start - stream.next_offset) <= max(4 * (stop - start), 1 << 20)
        stream.next_offset = max(stop, stream.next_offset) if stream.sequential else stop
        if not stream.sequential or self.readahead_max <= 0 or self._files is not None:
            # (Files read raw get their readahead from the kernel, file by file.)
            stream.window = 0
            return
        self._readahead(stream, stop)

    def _readahead(self, stream: ReadStream, stop: int) -> None:
        stream.window = min(self.readahead_max, 2 * stream.window if stream.window else self.band_bytes)
        ahead_start = max(stop, stream.prefetched_until)
        ahead_stop = min(self.nbytes, stop + stream.window)
        # Top up in batches, not one chunk per read: whole groups of bands for a
        # sharded array (see `_readahead_step`), else a quarter window at a time.
        if self.readahead_step:
            if ahead_stop < self.nbytes:
                ahead_stop -= ahead_stop % self.readahead_step
            if ahead_start >= ahead_stop:
                return
        elif ahead_start >= ahead_stop or (ahead_stop - ahead_start < stream.window // 4 and ahead_stop < self.nbytes):
            return
        stream.prefetched_until = ahead_stop
        first = ahead_start // self.itemsize
        last = -(-ahead_stop // self.itemsize)
        coords = dict.fromkeys(c for box in linear_boxes(first, last, self.meta.shape) for c in self._units(box))
        self.cache.get_many([self._key(c) for c in coords], self._load, size_hint=self.unit_nbytes, prefetch=True,
                            batch=self._batch)
