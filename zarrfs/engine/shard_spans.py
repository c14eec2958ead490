"""Shards read whole over a network: one request for a shard's inner chunks, held while they decode.

A sequential read of a sharded array loads a shard's inner chunks in a few
batches (groups of bands, readahead.py `_step`); zarr-python stores them in
Morton order, so each batch's chunks lie in several separate ranges, and each
range costs a request (a round trip, and the server's work). TensorStore reads
a shard in one request. The rule here: on a network store, a load that wants
at least a quarter of a shard's stored inner chunks (one band of a shard of
4 x 4, the smallest share of a shard a C-order stream's batch asks for)
fetches the span from the first stored byte to the last (the index says
where, so its size is known before anything is fetched) in one request, and
keeps it in the cache as side data (counted against the budget like any
entry) until the shard's other inner chunks have been decoded from it; then
it is the first entry evicted. A load wanting fewer (random access, a tile)
reads just its ranges; one that wants a quarter fetches at most four times
the bytes it decodes now, and keeps the rest for the reads that continue.

Only the cache holds a span (this module keeps a weak reference), so its
memory stays within the budget; a span the cache evicted before its shard
was done leaves the shard's other inner chunks to their own ranges. Spans
larger than a share of the budget are never fetched (`SPAN_SHARE`,
`SPAN_MAX`).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from ..codecs.sharding import EMPTY
from ..errors import ChunkError
from .cache import ChunkCache, new_token
from .fetches import RangeFetches

Coords = tuple[int, ...]
Wanted = list[tuple[Coords, int, int]]  # (coords, offset in the shard, nbytes)

# A load wanting at least 1/SPAN_FROM of a shard's stored inner chunks reads the shard's span.
SPAN_FROM = 4
# A held span takes at most 1/SPAN_SHARE of the cache budget: the spans of a shard row (4 shards
# in the benchmark's store) held at once then take at most a quarter of it, and the band being
# read and readahead keep their room (at 1/8, a 256 MiB cache evicted spans before their shards
# were done, and a sequential read fetched 28% more than the store holds).
SPAN_SHARE = 16
# Nor more than this, so that one request still ends well within the store's per-request timeout
# on a slow link (a shard of the benchmark's 1 GiB store: 29 MB).
SPAN_MAX = 64 << 20
# Shards read whole remembered at once (a sequential stream reads one shard row at a time); past
# it the oldest is forgotten, and its span ages out of the cache.
TRACKED_SHARDS = 64


@dataclass
class _Held:
    """A shard read whole: where its span begins, the span (while anything holds it), and its
    stored inner chunks not decoded from it yet."""

    start: int
    span: weakref.ref[np.ndarray]
    left: set[int]


class ShardSpans:
    """The spans of shards being read whole, for one sharded array."""

    def __init__(self, cache: ChunkCache, fetches: RangeFetches, *, enabled: bool) -> None:
        self.cache = cache
        self.fetches = fetches
        self.enabled = enabled
        self._key_prefix: Hashable = ("shard-span", new_token())
        self._held: OrderedDict[Coords, _Held] = OrderedDict()
        self._lock = threading.Lock()

    def span_for(self, key: str, shard: Coords, index: np.ndarray, wanted: Wanted) -> tuple[int, memoryview] | None:
        """(its first byte's offset in the shard, the span) to decode `wanted` from; None: read
        `wanted`'s own ranges. Raises ZarrfsError when the span's fetch fails."""
        if not self.enabled or not wanted:
            return None
        with self._lock:
            held = self._held.get(shard)
        if held is not None:
            # The cache's entry, looked up without touching its place in the LRU; once the cache
            # evicted it (and no decode still uses it) the rest of the shard reads its own ranges.
            span = held.span()
            if span is not None:
                return held.start, memoryview(span)
            with self._lock:
                self._held.pop(shard, None)
            return None
        stored = np.flatnonzero(index[:, 0] != EMPTY)
        if SPAN_FROM * len(wanted) < len(stored):
            return None
        pieces = [(int(index[i, 0]), int(index[i, 0]) + int(index[i, 1])) for i in stored]
        start, stop = min(begin for begin, _ in pieces), max(end for _, end in pieces)
        if stop - start > min(SPAN_MAX, self.cache.budget_bytes // SPAN_SHARE):
            return None
        span = self.cache.get((self._key_prefix, shard), lambda _: self._fetch(key, start, stop, pieces))
        with self._lock:
            self._held.setdefault(shard, _Held(start, weakref.ref(span), {int(i) for i in stored}))
            while len(self._held) > TRACKED_SHARDS:
                self._held.popitem(last=False)
        return start, memoryview(span)

    def decoded(self, shard: Coords, wanted: Wanted, flat: Callable[[Coords], int]) -> None:
        """`wanted` were decoded from the shard's span: once none is left, the span goes first."""
        with self._lock:
            held = self._held.get(shard)
            if held is None:
                return
            held.left.difference_update(flat(coords) for coords, _, _ in wanted)
            if held.left:
                return
            del self._held[shard]
        self.cache.demote([(self._key_prefix, shard)])

    def _fetch(self, key: str, start: int, stop: int, pieces: list[tuple[int, int]]) -> np.ndarray:
        (data,) = self.fetches.ranges(key, [(start, stop)], [pieces])
        if data is None:
            raise ChunkError("shard vanished after its index was read")
        if isinstance(data, BaseException):
            raise data
        if len(data) != stop - start:
            raise ChunkError(f"shard span [{start}:{stop}] came back with {len(data)} bytes (truncated shard)")
        return np.frombuffer(data, np.uint8)  # side data: its nbytes count against the budget
