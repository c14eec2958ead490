"""Byte ranges of an array's C-order element stream, filled from chunks.

`ArrayReader.read(start, stop)` returns exactly `a.tobytes()[start:stop]`.
`geometry` says which blocks of which chunks (of the source's read grid) the
range covers; the reader fetches them (the cache, or the chunk files
themselves when stored plain) and copies each block into the reply.
`readahead` decides what to load ahead of a sequential stream.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from concurrent.futures import wait

import numpy as np

from ..errors import StoreTimeoutError
from ..model.meta import ArrayMeta
from .gather import copy_into
from .cache import ChunkCache, new_token
from .chunks import ChunkSource
from .direct import ChunkFiles
from .geometry import element_range, plan_elements
from .loads import Batch
from .raw_chunks import RawChunks, Target
from .readahead import Readahead, ReadStream, windowed

# How far ahead of a stream over uncompressed chunk files their files are given to C.
RAW_AHEAD_BYTES = 4 << 20


def copy_block(destination: np.ndarray, source: np.ndarray) -> None:
    """`destination[...] = source`, keeping the GIL when no conversion is needed (see `_gather`)."""
    if isinstance(source, np.ndarray) and source.dtype == destination.dtype:
        copy_into(destination, source)
    else:  # another byte order, or a 0-d chunk indexed with () (a numpy scalar): numpy converts
        destination[...] = source


class ArrayReader:
    def __init__(self, source: ChunkSource, cache: ChunkCache, *, timeout: float = 300.0,
                 readahead_max: int | None = None, files: ChunkFiles | None = None, remote: bool = False) -> None:
        self.source = source
        # Plain chunks in local files are read from the files, not decoded into the cache.
        self._files = files if source.plain_local_files else None
        # Chunk files modified after the reader began are not its version (chunk_versions.py).
        versions = getattr(source, "versions", None)
        self._began_ns: int | None = versions.began_ns if versions is not None else None
        self.meta: ArrayMeta = source.meta
        self.grid = source.read_grid
        self.cache = cache
        self.timeout = timeout
        self.itemsize = self.meta.dtype.itemsize
        self.nbytes = self.meta.nbytes
        # Reserved per load while it runs: the largest chunk the grid stores.
        self.unit_nbytes = math.prod(self.grid.max_stored_shape()) * self.itemsize
        self._token = new_token()  # names this reader's chunks in the cache and its open chunk files
        self._key_prefix = ("chunk", self._token)
        # Misses in one shard load together: adjacent inner chunks come in one request.
        self._batch = Batch(lambda key: source.group(key[1]), self._load_many)
        # A stream over an array larger than the cache would evict the bands it passed before a
        # later pass could use them: their memory goes straight to the next decodes.
        self._recycles = self.nbytes > cache.budget_bytes
        edges = tuple(axis.uniform_edge() for axis in self.grid.axes)
        # Reads of a regular grid, when the file reading them is open in the FUSE front, are
        # answered in C from cached chunks or chunk files read raw first (served.py,
        # `served_layout`); not for an empty array, nor without the C side.
        uniform = tuple(edge for edge in edges if edge is not None)
        self._served_grid = (self.grid.shape, uniform) if cache.served.in_c and self.grid.shape \
            and all(self.grid.shape) and len(uniform) == len(edges) else None
        if self._served_grid is not None:
            cache.served.register_array(self._key_prefix, self._token,
                                        tuple(axis.count for axis in self.grid.axes), self.meta.dtype)
            # A reader replaced after a metadata refresh takes its chunks out of C when it goes.
            self.leave_c = weakref.finalize(self, cache.served.forget_array, self._key_prefix, self._token)
        self._raw = RawChunks(self._files, source, self._token, self._key_prefix, self._began_ns, cache.served,
                              self._served_grid is not None) if self._files is not None else None
        # Files read raw get their readahead from the kernel, file by file.
        self.readahead = Readahead(self.meta.path, self.grid, self.meta.grid, self.itemsize, self.nbytes,
                                   cache, enabled=self._files is None, readahead_max=readahead_max,
                                   remote=remote)

    # ---------------------------------------------------------------- public

    @property
    def token(self) -> int:
        """This reader's number: one version of the array's metadata and of the chunks it serves."""
        return self._token

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
            with stream.lock:  # one read at a time updates the stream (`ReadStream`)
                granted = stream.c_until
                sequential = self._track(stream, start, stop)
                if stream.c_handle is not None and (granted or stream.c_until):
                    self.cache.served.allow_stream(stream.c_handle, stream.c_region, stream.c_until)
            if sequential:
                window_bytes = self.readahead.window_bytes
                if size < window_bytes:  # a window pays for small reads
                    data = windowed(stream, start, stop, self.nbytes, window_bytes, self.cache, self._fill_bytes)
                    if data is not None:
                        copy_block(out[:size], data)
                        return size
        self._fill_bytes(start, stop, out if len(out) == size else out[:size])
        return size

    def load_for_c(self, start: int, stop: int, out: np.ndarray, stream: ReadStream) -> int | None:
        """A read of bytes [start, stop) that the C path missed (a chunk not cached, or the stream
        past its stretch): readahead sees it and its chunks are loaded. The stretch C may answer
        next (C copies this read from the chunks, all cached now), or None when this wrote `out`
        itself: chunk files read raw, or a chunk C does not hold (a fill-value chunk)."""
        with stream.lock:
            self._track(stream, start, stop)
            until = stream.c_until
        if self._files is None:
            keys = [(self._key_prefix, c) for c in self.readahead.chunks_between(start, stop)]
            values = self._leased(keys)
            self.cache.release(values)
            if all(self.cache.served.holds(key, value) for key, value in values.items()):
                return until
        self._fill_bytes(start, stop, out)
        if stream.c_handle is not None:  # None: the file left C meanwhile (closed), nothing to allow
            self.cache.served.allow_stream(stream.c_handle, stream.c_region, until)
        return None

    def fill_region(self, start: int, stop: int, out: np.ndarray) -> None:
        """Bytes [start, stop) into `out` (its length), with no readahead: a read already tracked."""
        self._fill_bytes(start, stop, out)

    def _track(self, stream: ReadStream, start: int, stop: int) -> bool:
        """Readahead's bookkeeping of a read of [start, stop) (the stream's lock held); whether
        the stream is sequential."""
        if stream.c_until and self._files is None:
            # Chunks the reads answered in C used are no longer readahead's (`ChunkCache.note_read`):
            # those of the stretch were counted when it was granted (`_allow_c`); this counts
            # the ones that were still loading then.
            used = self.readahead.answered_in_c(stream, start)
            if used:
                self.cache.note_read([(self._key_prefix, c) for c in used])
        ahead = self.readahead.track(stream, start, stop)
        # The bands left behind are handed on before the loads ahead start, so that those decode
        # into their memory rather than into memory fresh from the kernel (buffers.py).
        if stream.sequential:  # random reads (every pread) skip this
            behind = self.readahead.passed(stream, start)
            if behind:
                self.cache.demote([(self._key_prefix, c) for c in behind], recycle=self._recycles)
        if ahead:
            values, pending = self.cache.get_many([(self._key_prefix, c) for c in ahead], self._load,
                                                  size_hint=self.unit_nbytes, prefetch=True, batch=self._batch)
            taken = len(values) + len(pending)  # the cache takes keys in order until it has no room
            if taken < len(ahead):
                self.readahead.refused(stream, ahead[taken])
            self.source.fetch_ahead(self.readahead.fetch_ahead(stream))
        self._allow_c(stream)  # after `passed`: the stretch it allows ends where readahead has work
        return stream.sequential

    def _allow_c(self, stream: ReadStream) -> None:
        """The stretch of the stream's next reads the C path may answer, as far as readahead has
        nothing to do (`stream.c_until`; the caller tells C)."""
        if stream.c_handle is None:
            return
        until = self.readahead.c_stretch(stream)
        if until or stream.c_until:
            # The stretch's chunks count as read now, as the first read of a band would count
            # them here: the most recently used, and no longer readahead's. Left where they were
            # loaded while C read them, the next band's chunks would be the least recently used
            # when readahead loads the band after it, and each chunk the stream then reloaded
            # would evict the next it needs: chunks decoded twice.
            # (Chunk files read raw are not cached, and their stretch is the rest of the file.)
            used = self.readahead.chunks_between(stream.next_offset, until) if self._files is None else []
            if used:
                self.cache.note_read([(self._key_prefix, c) for c in used])
            stream.c_until = until
            if self._raw is not None and until > stream.next_offset:
                # C gets the chunk files ahead of the stream: else the first read of each band of
                # chunk files comes to Python to open them, and when a band is smaller than a read,
                # every read does.
                end = min(until, stream.next_offset + RAW_AHEAD_BYTES)
                ahead = self.readahead.chunks_between(stream.next_offset, end)
                self._raw.open_in_c(ahead[:self.cache.served.max_raw_files // 2])

    def served_layout(self) -> tuple[int, int, tuple[int, ...], tuple[int, ...]] | None:
        """(array token, item size, shape, chunk edges) for `ServedChunks`' files, or None when
        the C path cannot serve this array (an irregular grid, or an empty array)."""
        if self._served_grid is None:
            return None
        shape, edges = self._served_grid
        return self._token, self.itemsize, shape, edges

    def fill_targets(self, targets: list[Target]) -> None:
        """Copy blocks of read units into place, for files not in C order (`engine/tiles.py`)."""
        self._fill_targets(targets)

    # -------------------------------------------------------------- internal

    def _fill_bytes(self, start: int, stop: int, out: np.ndarray) -> None:
        """Write bytes [start, stop) into `out` (uint8, exactly that long).

        Whole elements are written through a typed view of `out`; a range that
        starts or ends inside an element goes through a small typed array.
        """
        first, last, skip = element_range(start, stop, self.itemsize)
        if skip == 0 and stop % self.itemsize == 0:
            self._fill_elements(first, last, out.view(self.meta.dtype))
            return
        elements = np.empty(last - first, self.meta.dtype)
        self._fill_elements(first, last, elements)
        out[:] = elements.view(np.uint8)[skip:skip + len(out)]

    def _fill_elements(self, first: int, last: int, target: np.ndarray) -> None:
        """Write C-order elements [first, last) into the 1-D array `target`."""
        targets: list[Target] = []
        for box in plan_elements(self.grid, first, last):
            view = target[box.position:box.position + math.prod(box.shape)].reshape(box.shape)
            # A 0-d box is the view itself: indexing it with () would give a scalar, not a view.
            targets += [(coords, src, view[dst] if dst else view) for coords, src, dst in box.blocks]
        self._fill_targets(targets)

    def _fill_targets(self, targets: list[Target]) -> None:
        """Copy each block of a chunk into place: read raw from its file when stored plain, else decoded."""
        if self._raw is not None:
            targets = self._raw.fill(targets)
            if not targets:
                return
        prefix = self._key_prefix
        values = self._leased(list(dict.fromkeys((prefix, one[0]) for one in targets)))
        try:
            for coords, src, destination in targets:
                chunk = values[(prefix, coords)]
                if chunk is None:
                    destination[...] = self.meta.fill_value
                else:
                    copy_block(destination, chunk[src])
        finally:
            self.cache.release(values)

    def _leased(self, keys: list[tuple]) -> dict[tuple, np.ndarray | None]:
        """The chunks of `keys`, loaded if need be, each leased until `cache.release` (buffers.py)."""
        values, pending = self.cache.get_many(keys, self._load, size_hint=self.unit_nbytes, batch=self._batch)
        if not pending:
            return values
        try:
            _, late = wait(pending.values(), timeout=self.timeout)
            if late:
                raise StoreTimeoutError(f"array /{self.meta.path}: chunks not loaded within {self.timeout:.0f} s")
            for key, future in pending.items():
                values[key] = future.result()  # raises the load's error, if any
        except BaseException:  # end the leases of every value this read got, loaded or not
            values.update((key, future.result()) for key, future in pending.items()
                          if key not in values and future.done() and future.exception() is None)
            self.cache.release(values)
            raise
        return values

    def _load(self, key: tuple) -> np.ndarray | None:
        return self.source.load(key[1])

    def _load_many(self, keys: list[tuple]) -> Iterator[tuple[tuple, object]]:
        return (((self._key_prefix, c), outcome) for c, outcome in self.source.load_many([key[1] for key in keys]))
