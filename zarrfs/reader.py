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

from .cache import Batch, ChunkCache, new_token
from .chunks import ChunkSource, band_nbytes
from .errors import StoreTimeoutError, ZarrfsError
from .metadata.model import ArrayMeta

log = logging.getLogger(__name__)

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (start, stop) per dimension


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
                 readahead_max: int | None = None) -> None:
        self.source = source
        self.meta: ArrayMeta = source.meta
        self.cache = cache
        self.timeout = timeout
        self.itemsize = self.meta.dtype.itemsize
        self.nbytes = self.meta.nbytes
        self.read_shape = source.read_shape
        self.unit_nbytes = math.prod(self.read_shape) * self.itemsize
        self._key_prefix = ("chunk", new_token())
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
        if self.band_bytes > cache.budget_bytes:
            log.warning(
                "array /%s: one band of chunks is %d MiB but the cache is %d MiB; a sequential read "
                "will decode chunks more than once. Mount with --cache-size %dM or more.",
                self.meta.path, self.band_bytes >> 20, cache.budget_bytes >> 20,
                -(-2 * self.band_bytes // (1 << 20)),
            )

    # ---------------------------------------------------------------- public

    def read(self, start: int, stop: int, stream: ReadStream | None = None) -> bytes:
        """Bytes [start, stop) of the C-order element stream (fewer at the end)."""
        data = self.read_buffer(start, stop, stream)
        return data if isinstance(data, bytes) else data.tobytes()

    def read_buffer(self, start: int, stop: int, stream: ReadStream | None = None) -> bytes | np.ndarray:
        """As `read`, but a sequential stream gets a uint8 view of its assembled window.

        The FUSE layer hands such a view to libfuse without copying it into a
        `bytes` first; the view keeps the window alive, so eviction is safe.
        """
        stop = min(stop, self.nbytes)
        if start >= stop:
            return b""
        if stream is None:
            return self._read_exact(start, stop)
        self._track(stream, start, stop)
        if not stream.sequential or stop - start >= self.window_bytes:  # a window would not pay
            return self._read_exact(start, stop)
        window_key = ("window", self._key_prefix, stream.token)
        window = self.cache.peek(window_key)
        if window is None or not (window[0] <= start and stop <= window[0] + len(window[1])):
            window_stop = min(self.nbytes, max(stop, start + self.window_bytes))
            try:
                window = (start, self._assemble(start, window_stop))
            except ZarrfsError:
                # A bad chunk beyond what was asked must not fail this read.
                return self._read_exact(start, stop)
            self.cache.put(window_key, window)
        base, data = window
        return data[start - base:stop - base]

    # -------------------------------------------------------------- internal

    def _read_exact(self, start: int, stop: int) -> bytes | np.ndarray:
        """Bytes [start, stop), with a fast path for ranges inside one row of the last axis.

        Random small reads (a 4 KiB pread) are nearly always inside one row: then
        the bytes are slices of at most a few chunk rows, joined, with no box
        decomposition and no intermediate array.
        """
        itemsize = self.itemsize
        first = start // itemsize
        last = -(-stop // itemsize)
        if self.meta.ndim == 0:
            return self._assemble(start, stop)
        width = self._width
        row, column = divmod(first, width)
        if last - row * width > width:  # crosses into the next row
            return self._assemble(start, stop)
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
        coords = [(*lead, c) for c in range(column // step, (column_stop - 1) // step + 1)]
        keys = [self._key(c) for c in coords]
        values, pending = self.cache.get_many(keys, self._load, size_hint=self.unit_nbytes, batch=self._batch)
        if pending:
            self._wait(pending, values)
        parts = []
        for coord, key in zip(coords, keys, strict=True):
            base = coord[-1] * step
            lo = max(column, base) - base
            hi = min(column_stop, base + step) - base
            chunk = values[key]
            if chunk is None:
                parts.append(np.full(hi - lo, self.meta.fill_value, self.meta.dtype).tobytes())
            else:
                parts.append(chunk[within_index][lo:hi].tobytes())
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        skip = start - first * itemsize
        return data[skip:skip + (stop - start)] if skip or len(data) != stop - start else data

    def _wait(self, pending: dict, values: dict) -> None:
        _, late = wait(pending.values(), timeout=self.timeout)
        if late:
            raise StoreTimeoutError(f"array /{self.meta.path}: chunks not loaded within {self.timeout:.0f} s")
        for key, future in pending.items():
            values[key] = future.result()  # raises the load's error, if any

    def _assemble(self, start: int, stop: int) -> np.ndarray:
        """Bytes [start, stop) as a uint8 array, from the chunks that hold them."""
        first = start // self.itemsize
        last = -(-stop // self.itemsize)
        boxes = linear_boxes(first, last, self.meta.shape)
        coords = dict.fromkeys(c for box in boxes for c in self._units(box))
        values, pending = self.cache.get_many([self._key(c) for c in coords], self._load,
                                              size_hint=self.unit_nbytes, batch=self._batch)
        if pending:
            self._wait(pending, values)
        out = np.empty(last - first, self.meta.dtype)
        position = 0
        for box in boxes:
            box_shape = tuple(b - a for a, b in zip(*box, strict=True))
            size = math.prod(box_shape)
            self._fill_box(out[position:position + size].reshape(box_shape), box, values)
            position += size
        skip = start - first * self.itemsize
        return out.view(np.uint8)[skip:skip + (stop - start)]

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

    def _fill_box(self, target: np.ndarray, box: Box, values: dict) -> None:
        lo, hi = box
        for coords in self._units(box):
            chunk = values[self._key(coords)]
            src: list[slice] = []
            dst: list[slice] = []
            for c, size, a, b in zip(coords, self.read_shape, lo, hi, strict=True):
                begin = max(a, c * size)
                end = min(b, (c + 1) * size)
                src.append(slice(begin - c * size, end - c * size))
                dst.append(slice(begin - a, end - a))
            if chunk is None:
                target[tuple(dst)] = self.meta.fill_value
            else:
                target[tuple(dst)] = chunk[tuple(src)]

    def _track(self, stream: ReadStream, start: int, stop: int) -> None:
        """Decide whether reads follow each other; if so, grow readahead and load ahead."""
        stream.sequential = stream.next_offset >= 0 and \
            abs(start - stream.next_offset) <= max(4 * (stop - start), 1 << 20)
        stream.next_offset = max(stop, stream.next_offset) if stream.sequential else stop
        if not stream.sequential or self.readahead_max <= 0:
            stream.window = 0
            return
        self._readahead(stream, stop)

    def _readahead(self, stream: ReadStream, stop: int) -> None:
        stream.window = min(self.readahead_max, 2 * stream.window if stream.window else self.band_bytes)
        ahead_start = max(stop, stream.prefetched_until)
        ahead_stop = min(self.nbytes, stop + stream.window)
        # Top up in batches (a quarter window at a time), not one chunk per read.
        if ahead_start >= ahead_stop or (ahead_stop - ahead_start < stream.window // 4 and ahead_stop < self.nbytes):
            return
        stream.prefetched_until = ahead_stop
        first = ahead_start // self.itemsize
        last = -(-ahead_stop // self.itemsize)
        coords = dict.fromkeys(c for box in linear_boxes(first, last, self.meta.shape) for c in self._units(box))
        self.cache.get_many([self._key(c) for c in coords], self._load, size_hint=self.unit_nbytes, prefetch=True,
                            batch=self._batch)
