"""Where decoded chunks come from: one `ChunkSource` per array.

A source knows the *read grid* of its array (the chunk grid, or the grid of
the inner chunks of its shards) and loads one unit by coordinates on it: fetch, decode, check. `None`
means "all fill value" (the key is absent or the shard marks it empty), so
missing chunks cost no memory.

`load_many` loads several units at once where that saves requests: the
sharded source reads adjacent inner chunks of one shard with one ranged
GET. `group(coords)` says which units may share such a call (None: none).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
from collections.abc import Hashable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..byte_ranges import within
from ..codecs.sharding import EMPTY, ShardingCodec, sharding_alone
from ..errors import ChunkError, ZarrfsError
from ..model.grids import ChunkGrid, refine
from ..model.meta import ArrayMeta
from ..stores.store import ABSENT, Store, Versioned
from .cache import ChunkCache, new_token
from .chunk_versions import ChunkVersions
from .fetches import RangeFetches
from .shard_spans import Share, ShardSpans

log = logging.getLogger(__name__)


Coords = tuple[int, ...]
# A loaded unit, or the error that unit alone failed with.
Outcome = np.ndarray | None | ZarrfsError

# Only ranges that touch are joined: bytes between wanted inner chunks belong
# to other inner chunks (cached already, or never asked for), and reading
# them along would fetch bytes twice or in vain.
COALESCE_GAP = 0
# One coalesced request stays at most this big, so a batch still finishes
# quickly and other batches keep their share of the connection.
COALESCE_MAX = 16 << 20


class ChunkSource(Protocol):
    meta: ArrayMeta
    read_grid: ChunkGrid
    plain_local_files: bool  # `raw_file` may name files to read instead of decoding

    def load(self, coords: Coords) -> np.ndarray | None: ...

    def group(self, coords: Coords) -> Hashable | None: ...

    def load_many(self, coords: list[Coords]) -> Iterator[tuple[Coords, Outcome]]: ...

    def fetch_ahead(self, coords: list[Coords]) -> None: ...

    def raw_file(self, coords: Coords) -> str | None: ...


DecodeSlots = threading.Semaphore | AbstractContextManager


def make_source(store: Store, meta: ArrayMeta, cache: ChunkCache, decode_slots: DecodeSlots,
                fetches: RangeFetches) -> ChunkSource:
    """The source for `meta`; `decode_slots` bounds decodes running at once across sources, and
    `fetches` (one per store) fetches the ranges of a sharded load side by side.

    Remote stores run many loader threads so that many requests wait at once;
    without the bound their decodes would all run at once too, and the chunk
    a reader waits for would share the CPUs with dozens of readahead decodes.
    """
    sharding = sharding_alone(meta.codec)
    if sharding is not None:
        return ShardedChunkSource(store, meta, sharding, cache, decode_slots, fetches)
    return PlainChunkSource(store, meta, cache, decode_slots)


def _located(store: Store, meta: ArrayMeta, key: str, exc: ZarrfsError) -> ZarrfsError:
    """The same error type, its message naming store, array and chunk key."""
    located = type(exc)(f"{store.display_name}: array /{meta.path}: chunk {key!r}: {exc}")
    located.__cause__ = exc
    return located


def _memory_for(cache: ChunkCache, meta: ArrayMeta, shape: tuple[int, ...]) -> np.ndarray:
    """Memory to decode a chunk of `shape` into, for a codec that decodes into memory it is given:
    an evicted chunk's (buffers.py), else new memory of the chunk's own, which can be reused
    in turn (memory a codec allocates cannot: it belongs to a bytes object)."""
    nbytes = math.prod(shape) * meta.dtype.itemsize
    buffer = cache.take_buffer(nbytes)
    return buffer if buffer is not None else np.empty(nbytes, np.uint8)


def _checked(chunk: np.ndarray, meta: ArrayMeta, shape: tuple[int, ...]) -> np.ndarray:
    if chunk.shape != shape:
        raise ChunkError(f"decoded to shape {chunk.shape}, expected {shape}")
    if chunk.dtype != meta.dtype:
        chunk = chunk.astype(meta.dtype)
    return chunk


# Where each format keeps an array's metadata document, beside its chunks.
_DOCUMENTS = {"2": ".zarray", "3": "zarr.json"}


def _local_document(store: Store, meta: ArrayMeta) -> str | None:
    """The local file of the array's metadata document, if it has one: an absent chunk of an array
    whose document is gone is of a removed array, not fill value."""
    name = _DOCUMENTS.get(meta.zarr_format)
    path = store.local_path(f"{meta.path}/{name}" if meta.path else name) if name is not None else None
    return path if path is not None and os.path.isfile(path) else None


class PlainChunkSource:
    """One stored object per chunk."""

    def __init__(self, store: Store, meta: ArrayMeta, cache: ChunkCache, decode_slots: DecodeSlots) -> None:
        self.store = store
        self.meta = meta
        self.cache = cache
        self.decode_slots = decode_slots
        self.read_grid = meta.grid
        self._decodes_into = meta.codec.decodes_into(meta.dtype)
        # One source per reader: the chunks' versions its open files read (chunk_versions.py).
        self.versions = ChunkVersions(f"{store.display_name}: array /{meta.path}")
        self._document = _local_document(store, meta)
        # Pre-2.8 zarr NestedDirectoryStore wrote 'i/j' keys without saying so.
        # None = not known yet: a missing dotted key also tries the nested one,
        # until a chunk is found either way (a declared separator needs no such
        # guess: each missing chunk would cost a second 404). Loads run on many
        # threads at once, so the layout only ever changes from unknown to known.
        self._nested: bool | None = None if meta.key_separator_guessed and meta.ndim > 1 else False
        stores_plain = getattr(meta.codec, "stores_plain_elements", None)
        self.plain_local_files = meta.ndim > 0 and store.local_path("") is not None \
            and stores_plain is not None and stores_plain(meta.dtype)

    def raw_file(self, coords: Coords) -> str | None:
        """The local file that holds chunk `coords` as its plain C-order elements, if the array stores them so.

        None for compressed or filtered arrays, remote stores, and while the
        key layout is still being probed.
        """
        if not self.plain_local_files:
            return None
        layout = self._nested if self._nested is not None else self._probe_local_layout(coords)
        if layout is None:
            return None
        return self.store.local_path(self._nested_key(coords) if layout else self.meta.chunk_key(coords))

    def _probe_local_layout(self, coords: Coords) -> bool | None:
        """Settle the key layout by looking for this chunk's file under either key (None: under neither)."""
        for nested, key in ((False, self.meta.chunk_key(coords)), (True, self._nested_key(coords))):
            path = self.store.local_path(key)
            if path is not None and os.path.isfile(path):
                self._nested = nested
                return nested
        return None

    def _nested_key(self, coords: tuple[int, ...]) -> str:
        prefix, _, name = self.meta.chunk_key(coords).rpartition("/")
        return f"{prefix}/{name.replace('.', '/')}" if prefix else name.replace(".", "/")

    def group(self, coords: Coords) -> Hashable | None:
        return None  # one object per chunk: nothing to share

    def fetch_ahead(self, coords: list[Coords]) -> None:
        return None  # a chunk's object is fetched by its load, decoded as soon as it comes

    def load_many(self, coords: list[Coords]) -> Iterator[tuple[Coords, Outcome]]:
        for one in coords:
            try:
                yield one, self.load(one)
            except ZarrfsError as exc:
                yield one, exc

    def load(self, coords: Coords) -> np.ndarray | None:
        layout = self._nested  # read once: another thread may settle it meanwhile
        key = self._nested_key(coords) if layout else self.meta.chunk_key(coords)
        got = self.store.get_versioned(key)
        if layout is None:
            if got.data is not None:
                self._nested = False
            elif (nested := self._nested_key(coords)) != key:
                got = self.store.get_versioned(nested)
                if got.data is not None:
                    self._nested, key = True, nested
        self.versions.check(coords, key, got)
        data = got.data
        if data is None:
            if self._document is not None and not os.path.exists(self._document):
                raise self.versions.stale(key, "is of an array removed from the store")
            return None
        try:
            shape = self.read_grid.stored_shape(coords)
            out = _memory_for(self.cache, self.meta, shape) if self._decodes_into else None
            with self.decode_slots:
                chunk = self.meta.codec.decode(data, shape, self.meta.dtype, out)
            return _checked(chunk, self.meta, shape)
        except ZarrfsError as exc:
            raise _located(self.store, self.meta, key, exc) from exc


@dataclass(frozen=True)
class _Run:
    """One ranged GET: [start, stop) of a shard, covering these inner chunks."""

    start: int
    stop: int
    members: list[tuple[Coords, int, int]]  # (coords, offset, nbytes)


def coalesce(wanted: list[tuple[Coords, int, int]], gap: int = COALESCE_GAP,
             limit: int = COALESCE_MAX) -> list[_Run]:
    """Group (coords, offset, nbytes) byte ranges into runs of nearby ranges, in file order."""
    runs: list[_Run] = []
    for coords, offset, nbytes in sorted(wanted, key=lambda item: item[1]):
        last = runs[-1] if runs else None
        if last is not None and last.stop <= offset <= last.stop + gap and offset + nbytes - last.start <= limit:
            runs[-1] = _Run(last.start, offset + nbytes, [*last.members, (coords, offset, nbytes)])
        else:
            runs.append(_Run(offset, offset + nbytes, [(coords, offset, nbytes)]))
    return runs


class ShardedChunkSource:
    """Inner chunks of shards, read by byte range after reading the shard index once."""

    def __init__(self, store: Store, meta: ArrayMeta, sharding: ShardingCodec, cache: ChunkCache,
                 decode_slots: DecodeSlots, fetches: RangeFetches) -> None:
        self.store = store
        self.fetches = fetches
        self.meta = meta
        self.decode_slots = decode_slots
        self.sharding = sharding
        self.cache = cache
        self.inner_shape = sharding.chunk_shape  # sharding needs one regular inner chunk shape
        self.read_grid = refine(meta.grid, sharding.chunk_shape, f"array /{meta.path}")
        self.plain_local_files = False
        self._index_key_prefix: Hashable = ("shard-index", new_token())
        # A local shard's identity is checked after each load from it (chunk_versions.py); a remote
        # one's is not yet (docs/live-stores.md).
        self.versions = ChunkVersions(f"{store.display_name}: array /{meta.path}")
        # Decodes write into memory given to them, never returning a view of their input.
        self._decodes_into = sharding.codec.decodes_into(meta.dtype)
        # Over a network, a shard a load wants a quarter or more of comes in one request
        # (shard_spans.py); only for decodes into new memory, so no chunk keeps a view of a span alive.
        self._spans = ShardSpans(cache, fetches, enabled=store.remote and self._decodes_into)

    def group(self, coords: Coords) -> Hashable | None:
        return self._shard(coords)

    def raw_file(self, coords: Coords) -> str | None:
        return None  # inner chunks sit at offsets only the shard index knows: always decoded

    def load(self, coords: Coords) -> np.ndarray | None:
        for _, outcome in self.load_many([coords]):
            if isinstance(outcome, ZarrfsError):
                raise outcome
            return outcome
        raise AssertionError("load_many yields one outcome per unit")

    def fetch_ahead(self, coords: list[Coords]) -> None:
        """A sequential stream will decode `coords` next: the shards it wants a quarter of or more
        are fetched whole ahead of their decodes, when that fits (shard_spans.py)."""
        by_shard: dict[Coords, int] = {}
        for one in coords:
            shard = self._shard(one)
            by_shard[shard] = by_shard.get(shard, 0) + 1
        for shard, wanted in by_shard.items():
            shape = self.meta.grid.stored_shape(shard)
            self._spans.fetch_ahead(shard, self._share(shape, wanted),
                                    functools.partial(self._index, self.meta.chunk_key(shard), shard, shape, wanted))

    def load_many(self, coords: list[Coords]) -> Iterator[tuple[Coords, Outcome]]:
        """Inner chunks of any shards; those of one shard that sit together come in one request."""
        by_shard: dict[Coords, list[Coords]] = {}
        for one in coords:
            by_shard.setdefault(self._shard(one), []).append(one)
        for shard, inner in by_shard.items():
            yield from self._load_from_shard(shard, inner)

    # -------------------------------------------------------------- internal

    def _shard(self, coords: Coords) -> Coords:
        return tuple(outer.locate(inner.start(c))[0]
                     for outer, inner, c in zip(self.meta.grid.axes, self.read_grid.axes, coords, strict=True))

    def _within(self, shard: Coords, coords: Coords) -> Coords:
        """Coordinates of an inner chunk in its shard's own grid of inner chunks."""
        return tuple((inner.start(c) - outer.start(s)) // n for outer, inner, s, c, n
                     in zip(self.meta.grid.axes, self.read_grid.axes, shard, coords, self.inner_shape, strict=True))

    def _load_from_shard(self, shard: Coords, coords: list[Coords]) -> Iterator[tuple[Coords, Outcome]]:
        key = self.meta.chunk_key(shard)
        shard_shape = self.meta.grid.stored_shape(shard)
        try:
            index = self._index(key, shard, shard_shape, len(coords))
        except ZarrfsError as exc:
            error = _located(self.store, self.meta, f"{key} (shard index)", exc)
            yield from ((one, error) for one in coords)
            return
        try:
            self._check_shard(shard, key)
        except ZarrfsError as exc:
            yield from ((one, exc) for one in coords)
            return
        wanted: list[tuple[Coords, int, int]] = []
        for one in coords:
            entry = self._entry(index, shard_shape, self._within(shard, one))
            if entry is None:
                yield one, None
            else:
                wanted.append((one, *entry))
        if index is not None:
            try:
                held = self._spans.span_for(key, shard, index, wanted)
            except ZarrfsError as exc:
                yield from ((one, self._error(key, one, exc)) for one, _, _ in wanted)
                return
            if held is not None:
                begin, span = held
                for one, offset, nbytes in wanted:
                    yield one, self._decode(key, one, span, offset - begin, nbytes)
                self._spans.decoded(shard, wanted, self._flat)
                return
        runs = coalesce(wanted)
        fetched = self.fetches.ranges(
            key, [(run.start, run.stop) for run in runs],
            [[(offset, offset + nbytes) for _, offset, nbytes in run.members] for run in runs])
        for run, data in zip(runs, fetched, strict=True):
            if data is None:
                data = ChunkError("shard vanished after its index was read")
            if isinstance(data, ZarrfsError):
                yield from ((one, self._error(key, one, data)) for one, _, _ in run.members)
                continue
            try:
                self._check_shard(shard, key)  # after the read: a write under it shows
            except ZarrfsError as exc:
                yield from ((one, exc) for one, _, _ in run.members)
                continue
            for one, offset, nbytes in run.members:
                yield one, self._decode(key, one, data, offset - run.start, nbytes)

    def _flat(self, coords: Coords) -> int:
        """The index entry of inner chunk `coords` in its shard."""
        shard = self._shard(coords)
        per_shard = self.sharding.chunks_per_shard(self.meta.grid.stored_shape(shard))
        return int(np.ravel_multi_index(self._within(shard, coords), per_shard))

    def _check_shard(self, shard: Coords, key: str) -> None:
        """StaleChunkError when the local file of `shard` is not the version this reader serves:
        its index (cached) and its inner chunks must come from one version of it."""
        path = self.store.local_path(key)
        if path is None:
            return
        try:
            status = os.stat(path)
        except FileNotFoundError:
            got = Versioned(None, ABSENT)
        except OSError:
            return  # the read itself reports what is wrong with the file
        else:
            got = Versioned(None, (status.st_ino, status.st_size, status.st_mtime_ns), status.st_mtime_ns)
        self.versions.check(shard, key, got)

    def _entry(self, index: np.ndarray | None, shard_shape: tuple[int, ...], within: Coords) -> tuple[int, int] | None:
        """(offset, nbytes) of inner chunk `within` of its shard; None when it is fill value."""
        if index is None:  # no shard: every inner chunk is fill
            return None
        per_shard = self.sharding.chunks_per_shard(shard_shape)
        offset, nbytes = (int(v) for v in index[int(np.ravel_multi_index(within, per_shard))])
        return None if offset == int(EMPTY) else (offset, nbytes)

    def _decode(self, key: str, coords: Coords, data: bytes | bytearray | memoryview, start: int,
                nbytes: int) -> Outcome:
        try:
            if start + nbytes > len(data):
                # A short answer: the index points past the shard's end, or the body was cut.
                raise ChunkError(f"inner chunk [{start}:{start + nbytes}] of the run is beyond the "
                                 f"{len(data)} bytes received (truncated shard or response)")
            piece: bytes | bytearray | memoryview = data
            if start or nbytes != len(data):
                # A view when decoding writes new memory (a compressed chunk); a copy when the chunk
                # may be a view of its input: it must not keep the whole run's bytes alive.
                piece = memoryview(data)[start:start + nbytes] if self._decodes_into else data[start:start + nbytes]
            out = _memory_for(self.cache, self.meta, self.inner_shape) if self._decodes_into else None
            with self.decode_slots:
                chunk = self.sharding.codec.decode(piece, self.inner_shape, self.meta.dtype, out)
            return _checked(chunk, self.meta, self.inner_shape)
        except ZarrfsError as exc:
            return self._error(key, coords, exc)

    def _error(self, key: str, coords: Coords, exc: ZarrfsError) -> ZarrfsError:
        return _located(self.store, self.meta, f"{key} inner {list(coords)}", exc)

    def _index(self, key: str, shard: Coords, shard_shape: tuple[int, ...], wanted: int) -> np.ndarray | None:
        """The shard's index, cached, loaded (`_load_index`) on a miss."""
        return self.cache.get((self._index_key_prefix, shard),
                              lambda _: self._load_index(key, shard, shard_shape, wanted))

    def _load_index(self, key: str, shard: Coords, shard_shape: tuple[int, ...], wanted: int) -> np.ndarray | None:
        """The shard's index: from the whole shard when a load wanting `wanted` of its inner chunks
        fetches it in one request (shard_spans.py), else read alone."""
        index_at = self.sharding.index_range(shard_shape)
        return self._spans.shard_index(
            key, shard, self._share(shard_shape, wanted), lambda: self._read_index(key, shard_shape),
            lambda data: self.sharding.parse_index(data[within(index_at, len(data))].tobytes(),
                                                   shard_shape, len(data)))

    def _share(self, shard_shape: tuple[int, ...], wanted: int) -> Share:
        """What a load of `wanted` inner chunks wants of a shard of `shard_shape`."""
        return Share(wanted, math.prod(self.sharding.chunks_per_shard(shard_shape)),
                     math.prod(shard_shape) * self.meta.dtype.itemsize, self.sharding.index_nbytes(shard_shape))

    def _read_index(self, key: str, shard_shape: tuple[int, ...]) -> np.ndarray | None:
        raw = self.store.get_range(key, self.sharding.index_range(shard_shape))
        if raw is None:
            return None
        return self.sharding.parse_index(raw, shard_shape)
