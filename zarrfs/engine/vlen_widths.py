"""Variable-length arrays at a fixed width: the one place that finds the width n.

A string or bytes array has no byte layout of its own. zarrfs serves it as
numpy's fixed-width `<U{n}` (strings) or `S{n}` (bytes), n being the longest
of its elements and its fill value (at least 1). Only reading every chunk
can tell n, so this is the one exception to "file sizes from metadata alone":

* when: the first time the size of one of the array's files is asked for
  (`stat`, `open`; `ls -l` asks), never at mount or at a plain listing;
  then once per array for the life of the mount (per metadata generation);
* how: every chunk is fetched and decoded once (by a few threads, as many
  as the engine's loader pool) and dropped;
  only elements inside the array count (edge chunks may hold anything
  beyond it); a missing chunk counts as its fill value;
* bounds (model/limits.py): arrays of more than `max_vlen_elements()` are
  refused at metadata time; a fixed-width region over `max_vlen_bytes()`, or
  a fixed-width chunk larger than the cache budget, is refused after the
  scan (EFBIG, with the reason and the setting that would allow it).

The array served at width n (`FixedWidth.meta`) is the parsed ArrayMeta with
dtype `<U{n}`/`S{n}` and its fill value at that width; `FixedWidthSource`
gives the reader its chunks converted to that width, so reads use the normal
reader and cache, and the cache holds (and counts) fixed-width chunks. The
source knows where each chunk sits: elements of an edge chunk beyond the
array's end (a writer may leave anything there) are blanked before the
conversion, as they do not count towards n.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
from collections import deque
from collections.abc import Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import EllipsisType

import numpy as np

from ..codecs.vlen import fixed_width_dtype, longest, to_fixed_width
from ..errors import ChunkError, TooLargeError, ZarrfsError
from ..model.grids import ChunkGrid
from ..model.limits import VLEN_SIZE_VARIABLE, max_vlen_bytes
from ..model.meta import ArrayMeta
from ..stores.store import Store
from .cache import ChunkCache
from .chunks import ChunkSource, Coords, DecodeSlots, Outcome, make_source
from .fetches import RangeFetches

# Read units asked of a chunk source at once (a shard's inner chunks then come in one request).
_BATCH = 256
# ... by one scanning thread: small enough that the threads share the work of a small array.
_SCAN_BATCH = 16


@dataclass(frozen=True)
class FixedWidth:
    width: int  # n: characters (str) or bytes (bytes) per element
    meta: ArrayMeta  # the array as served: dtype <U{n} / S{n}, its fill value at that width


class FixedWidthSource:
    """The chunks of a vlen array (`inner`, a source of object chunks) at the width of `served`."""

    plain_local_files = False

    def __init__(self, inner: ChunkSource, served: ArrayMeta, kind: str, store_name: str) -> None:
        self.inner = inner
        self.meta = served
        self.kind = kind
        self.read_grid = inner.read_grid
        self.store_name = store_name

    def group(self, coords: Coords) -> Hashable | None:
        return self.inner.group(coords)

    def fetch_ahead(self, coords: list[Coords]) -> None:
        self.inner.fetch_ahead(coords)

    def raw_file(self, coords: Coords) -> str | None:
        return None

    def load(self, coords: Coords) -> np.ndarray | None:
        chunk = self.inner.load(coords)
        return None if chunk is None else self._fixed(coords, chunk)

    def load_many(self, coords: list[Coords]) -> Iterator[tuple[Coords, Outcome]]:
        for one, outcome in self.inner.load_many(coords):
            if isinstance(outcome, np.ndarray):
                try:
                    outcome = self._fixed(one, outcome)
                except ZarrfsError as exc:
                    outcome = exc
            yield one, outcome

    def _fixed(self, coords: Coords, chunk: np.ndarray) -> np.ndarray:
        inside = _inside(self.read_grid, coords)
        if any(s.stop < n for s, n in zip(inside, chunk.shape, strict=True)):  # an edge chunk
            blanked = np.full(chunk.shape, "" if self.kind == "str" else b"", object)
            blanked[inside] = chunk[inside]
            chunk = blanked
        try:
            return to_fixed_width(chunk, self.kind, self.meta.dtype)
        except ChunkError as exc:
            raise _located(self.store_name, self.meta, self.read_grid, coords, exc) from exc


def _located(store_name: str, meta: ArrayMeta, read_grid: ChunkGrid, coords: Coords, exc: ChunkError) -> ChunkError:
    """`exc` naming store, array and chunk (its key, or the inner chunk's place in a shard)."""
    chunk = repr(meta.chunk_key(coords)) if read_grid == meta.grid else f"(inner chunk {list(coords)})"
    return ChunkError(f"{store_name}: array /{meta.path}: chunk {chunk}: {exc}")


def _inside(read_grid: ChunkGrid, coords: Coords) -> tuple[slice, ...]:
    """The part of read unit `coords` that lies inside the array, in the unit's own coordinates."""
    starts, stops = read_grid.chunk_box(coords)
    return tuple(slice(0, stop - start) for start, stop in zip(starts, stops, strict=True))


class VlenArrays:
    """The fixed-width form of each variable-length array of one engine, found once."""

    def __init__(self, store: Store, cache: ChunkCache, decode_slots: DecodeSlots, scan_threads: int,
                 fetches: RangeFetches) -> None:
        self.store = store
        self.fetches = fetches
        self.cache = cache
        self.decode_slots = decode_slots  # bounds the decodes of every scan and read together
        self.scan_threads = max(1, scan_threads)
        # path -> (the parsed meta it was found for, its FixedWidth or the refusal)
        self._found: dict[str, tuple[ArrayMeta, FixedWidth | TooLargeError]] = {}
        self._scanning: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def fixed(self, meta: ArrayMeta) -> FixedWidth:
        """`meta` at its fixed width; the first call per array reads the whole array (one scan at a time)."""
        with self._lock:
            scan_lock = self._scanning.setdefault(meta.path, threading.Lock())
        with scan_lock:
            found = self._found.get(meta.path)
            if found is None or found[0] is not meta:
                try:
                    result: FixedWidth | TooLargeError = self._fixed_width(meta)
                except TooLargeError as exc:  # remembered: the scan is not repeated (the FUSE layer logs it)
                    result = exc
                found = (meta, result)
                self._found[meta.path] = found
        if isinstance(found[1], TooLargeError):
            raise found[1]
        return found[1]

    def source(self, meta: ArrayMeta) -> FixedWidthSource:
        """The chunk source the reader of vlen array `meta` reads (its width found first, if need be)."""
        assert meta.vlen is not None
        inner = make_source(self.store, meta, self.cache, self.decode_slots, self.fetches)
        return FixedWidthSource(inner, self.fixed(meta).meta, meta.vlen, self.store.display_name)

    def objects(self, meta: ArrayMeta) -> np.ndarray:
        """The whole array as an object array of str/bytes, as zarr-python reads it (for `.json` values)."""
        out = np.empty(meta.shape, object)
        source = make_source(self.store, meta, self.cache, self.decode_slots, self.fetches)
        for batch in _batches(source.read_grid, _BATCH):
            for coords, elements in _elements(meta, source, batch):
                starts, stops = source.read_grid.chunk_box(coords)
                out[tuple(slice(a, b) for a, b in zip(starts, stops, strict=True))] = elements
        return out

    # -------------------------------------------------------------- internal

    def _fixed_width(self, meta: ArrayMeta) -> FixedWidth:
        assert meta.vlen is not None
        width = max(1, len(meta.fill_value.item()), self._scan(meta))
        dtype = fixed_width_dtype(meta.vlen, width)
        where = f"{self.store.display_name}: array /{meta.path}"
        nbytes = math.prod(meta.shape) * dtype.itemsize
        if nbytes > max_vlen_bytes():
            raise TooLargeError(
                f"{where}: its longest element makes it {dtype} ({nbytes} bytes), more than the "
                f"{max_vlen_bytes()} bytes of a variable-length array zarrfs serves; raise the bound with the "
                f"environment variable {VLEN_SIZE_VARIABLE} (e.g. {VLEN_SIZE_VARIABLE}={-(-nbytes >> 20)}M)")
        chunk_nbytes = math.prod(meta.grid.max_stored_shape()) * dtype.itemsize
        if chunk_nbytes > self.cache.budget_bytes:
            raise TooLargeError(
                f"{where}: one chunk at width {dtype} is {chunk_nbytes} bytes, more than the cache budget "
                f"({self.cache.budget_bytes}); mount with --cache-size {-(-2 * chunk_nbytes >> 20)}M or more")
        fill = np.array(meta.fill_value.item(), dtype)
        return FixedWidth(width, dataclasses.replace(meta, dtype=dtype, fill_value=fill, vlen=None))

    def _scan(self, meta: ArrayMeta) -> int:
        """The longest element, the chunks loaded by `scan_threads` at once (a remote store answers
        each request in tens of milliseconds: one at a time, a big array would hold `stat` for minutes).
        At most two batches per thread are in flight, so the decoded chunks held stay bounded."""
        assert meta.vlen is not None
        kind = meta.vlen
        source = make_source(self.store, meta, self.cache, self.decode_slots, self.fetches)

        def longest_in(batch: list[Coords]) -> int:
            most = 0
            for coords, elements in _elements(meta, source, batch):
                try:
                    most = max(most, longest(elements, kind))
                except ChunkError as exc:
                    raise _located(self.store.display_name, meta, source.read_grid, coords, exc) from exc
            return most

        most = 0
        with ThreadPoolExecutor(self.scan_threads, thread_name_prefix="zarrfs-vlen") as pool:
            pending: deque[Future[int]] = deque()
            try:
                for batch in _batches(source.read_grid, _SCAN_BATCH):
                    pending.append(pool.submit(longest_in, batch))
                    if len(pending) >= 2 * self.scan_threads:
                        most = max(most, pending.popleft().result())
                while pending:
                    most = max(most, pending.popleft().result())
            finally:
                for future in pending:  # after a failure: nothing more to start
                    future.cancel()
        return most


def _batches(read_grid: ChunkGrid, size: int) -> Iterator[list[Coords]]:
    """The read units of a grid in C order, `size` at a time (never all at once: there may be millions)."""
    all_coords = itertools.product(*(range(n) for n in read_grid.grid_shape))
    while batch := list(itertools.islice(all_coords, size)):
        yield batch


def _elements(meta: ArrayMeta, source: ChunkSource, batch: list[Coords]) -> Iterator[tuple[Coords, np.ndarray]]:
    """(coords, its elements inside the array) of each read unit of `batch`; a missing unit gives the fill value."""
    for coords, outcome in source.load_many(batch):
        if isinstance(outcome, ZarrfsError):
            raise outcome
        inside = _inside(source.read_grid, coords)
        if outcome is None:
            # the 0-d object fill itself: np.full of a bytes value would drop its trailing NULs
            yield coords, np.full(tuple(s.stop for s in inside), meta.fill_value, object)
        else:
            within: tuple[slice | EllipsisType, ...] = (*inside, ...)
            yield coords, outcome[within]  # a view, also of a 0-d chunk
