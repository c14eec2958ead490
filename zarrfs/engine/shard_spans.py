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

A load wanting a quarter of a shard whose index is not read yet fetches the
whole shard object instead (`shard_index`): one request for the index and
the inner chunks, where reading the index first would cost a round trip
more. It asks for bytes [0, limit] (the span's size limit below, plus one):
a shard that turns out larger than the limit is not held, and ends whole
fetches for the array. Shards whose decoded size (with a margin for codec
headers) is within the limit are asked whole at once. For others the first
index read alone tells the shards' stored size: the load reading it fetches
its span, the loads arriving meanwhile wait for it (they would spend that
round trip on their own index), then fetch whole if that shard fitted 7/8 of
the limit, so a store whose shards exceed the limit asks nothing it does not
use. (A shard too large after others fitted wastes one request per load
asking at that moment.)

A sequential stream also has the shards of its next readahead batch fetched
whole ahead of their decodes (`fetch_ahead`, from readahead.py's
`fetch_ahead`): a shard row's decodes then overlap the next row's fetch
instead of waiting for it (the 1 GiB benchmark store over HTTP: each row's
116 MB came in ~0.15 s, then the link stood idle for the ~0.6 s of the row's
decodes, 4 requests in flight at most). Only shards known to fit the limit
are fetched ahead, and only while the spans held (fetched, with inner chunks
left to decode) and those being fetched ahead take at most 1/AHEAD_SHARE of
the budget; the rest wait in a short queue and start as held shards finish.
So the next row's fetch starts when this row's last batch is asked for, and
comes while that batch decodes. The spans are cache entries like any other,
so the budget holds whatever this asks; what it risks is only a span evicted
before its shard is done (its chunks then read their own ranges), and the
passed bands, demoted, go before any span.

Only the cache holds a span (this module keeps a weak reference), so its
memory stays within the budget; a span the cache evicted before its shard
was done leaves the shard's other inner chunks to their own ranges. Spans
larger than a share of the budget are never fetched (`SPAN_SHARE`,
`SPAN_MAX`).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from ..byte_ranges import RangeRequest
from ..codecs.sharding import EMPTY
from ..errors import ChunkError
from .cache import ChunkCache, new_token
from .fetches import RangeFetches

Coords = tuple[int, ...]
Wanted = list[tuple[Coords, int, int]]  # (coords, offset in the shard, nbytes)
ParseIndex = Callable[[np.ndarray], np.ndarray]  # a whole shard's bytes -> its index, checked
ReadIndex = Callable[[], np.ndarray | None]  # the index read alone (None: no shard)

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
# Spans held and being fetched ahead take at most 1/AHEAD_SHARE of the budget before another shard is
# fetched ahead: two rows of the benchmark's shards at the default 512M (the row decoding, 4 x 29 MB,
# and the next, 4 x 32 MiB limits while they come). At 1/4 the next row waited for this row's last
# batch to decode, and the link stood idle meanwhile.
AHEAD_SHARE = 2
# Shards waiting to be fetched ahead, at most (the oldest are forgotten: their loads fetch them).
AHEAD_QUEUE = 16
# Shards of an array are fetched whole when the first one read fits 7/8 of the limit: the others
# may be somewhat larger (less compressible data).
FIT_MARGIN = (8, 7)


@dataclass(frozen=True)
class Share:
    """What a load wants of one shard: `wanted` of its `per_shard` inner chunks; the shard's
    decoded bytes and its index's bytes."""

    wanted: int
    per_shard: int
    decoded_nbytes: int
    index_nbytes: int


@dataclass
class _Held:
    """A shard read whole: where its span begins, the span (while anything holds it), its stored
    inner chunks not decoded from it yet, and the span's cache key."""

    start: int
    span: weakref.ref[np.ndarray]
    left: set[int]
    key: Hashable


class ShardSpans:
    """The spans of shards being read whole, for one sharded array."""

    def __init__(self, cache: ChunkCache, fetches: RangeFetches, *, enabled: bool) -> None:
        self.cache = cache
        self.fetches = fetches
        self.enabled = enabled
        self._key_prefix: Hashable = ("shard-span", new_token())
        self._held: OrderedDict[Coords, _Held] = OrderedDict()
        self._lock = threading.Lock()
        # Whether this array's shards fit the limit: None until an index read alone (or a shard
        # fetched whole that turned out too large) told.
        self._shards_fit: bool | None = None
        self._learning = False  # a load is reading the first index
        self._learned = threading.Event()
        # Shards to fetch whole ahead of their decodes, and those being fetched so.
        self._ahead: deque[tuple[Coords, Callable[[], object]]] = deque(maxlen=AHEAD_QUEUE)
        self._fetching_ahead: set[Coords] = set()

    def shard_index(self, key: str, shard: Coords, share: Share, read_index: ReadIndex,
                    parse_index: ParseIndex) -> np.ndarray | None:
        """The shard's index (None: no shard): from the whole shard, fetched in one request and
        held as its span, when the load wants a quarter of it and it fits; else `read_index()`.
        Raises ZarrfsError when a fetch fails or the index is bad."""
        if not self.enabled or SPAN_FROM * share.wanted < share.per_shard:
            return read_index()
        with self._lock:
            if shard in self._held:  # the index was evicted, not the span; or the span, and it is not fetched again
                return read_index()
        limit = self._limit()
        if not _surely_within(share, limit):
            learned = self._learn(share, limit, read_index)
            if learned is not None:
                return learned[0]
            if not self._shards_fit:
                return read_index()
        whole_key = (self._key_prefix, "whole", shard)
        try:
            data = self.cache.get(whole_key, lambda _: self._fetch_whole(key, limit))
        except _TooLarge:
            self._shards_fit = False
            return read_index()
        if data is None:
            return None
        index = parse_index(data)
        stored = {int(i) for i in np.flatnonzero(index[:, 0] != EMPTY)}
        self._hold(shard, _Held(0, weakref.ref(data), stored, whole_key))
        return index

    def _learn(self, share: Share, limit: int, read_index: ReadIndex) -> tuple[np.ndarray | None] | None:
        """Until this array's shards are known to fit the limit or not, the first load reads its
        index alone, which tells: (that index,), and the load fetches its span. Loads arriving
        meanwhile wait for it (they would spend the same round trip on their own index): None."""
        with self._lock:
            learner = self._shards_fit is None and not self._learning
            self._learning = self._learning or learner
        if not learner:
            if self._shards_fit is None:
                self._learned.wait(self.fetches.store.options.worst_case_seconds() + 1)
            return None
        index = None
        try:
            index = read_index()
        finally:
            if index is not None:
                stored = index[index[:, 0] != EMPTY]
                extent = int((stored[:, 0] + stored[:, 1]).max()) if len(stored) else 0
                self._shards_fit = (extent + share.index_nbytes) * FIT_MARGIN[0] <= limit * FIT_MARGIN[1]
            with self._lock:
                self._learning = False
            self._learned.set()
        return (index,)

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
        if stop - start > self._limit():
            return None
        span_key = (self._key_prefix, shard)
        span = self.cache.get(span_key, lambda _: self._fetch(key, start, stop, pieces))
        self._hold(shard, _Held(start, weakref.ref(span), {int(i) for i in stored}, span_key))
        return start, memoryview(span)

    def fetch_ahead(self, shard: Coords, share: Share, fetch: Callable[[], object]) -> None:
        """A stream will soon decode `share` of `shard`: `fetch()` (its index by `shard_index`,
        the shard fetched whole) runs on a fetch thread once the spans held leave room; only for a
        shard known to fit the limit, not held already, when the share would read it whole."""
        if not self.enabled or SPAN_FROM * share.wanted < share.per_shard:
            return
        if not (self._shards_fit or (self._shards_fit is None and _surely_within(share, self._limit()))):
            return
        with self._lock:
            if shard in self._held or shard in self._fetching_ahead or any(q == shard for q, _ in self._ahead):
                return
            self._ahead.append((shard, fetch))
        self._start_ahead()

    def _start_ahead(self) -> None:
        """Start the queued fetches ahead that fit beside the spans held (see AHEAD_SHARE)."""
        limit = self._limit()
        while True:
            with self._lock:
                alive = sum(span.nbytes for held in self._held.values() if (span := held.span()) is not None)
                fetching = len(self._fetching_ahead) * limit
                if not self._ahead or alive + fetching + limit > self.cache.budget_bytes // AHEAD_SHARE:
                    return
                shard, fetch = self._ahead.popleft()
                if shard in self._held:
                    continue
                self._fetching_ahead.add(shard)
            if not self.fetches.ahead(functools.partial(self._run_ahead, shard, fetch)):
                with self._lock:
                    self._fetching_ahead.discard(shard)
                return

    def _run_ahead(self, shard: Coords, fetch: Callable[[], object]) -> None:
        try:
            fetch()
        except Exception:  # noqa: BLE001 - nothing waits for this fetch to report it
            pass  # not cached: the loads that need the shard fetch it again, and report what fails
        finally:
            with self._lock:
                self._fetching_ahead.discard(shard)
        self._start_ahead()

    def _limit(self) -> int:
        return min(SPAN_MAX, self.cache.budget_bytes // SPAN_SHARE)

    def _hold(self, shard: Coords, held: _Held) -> None:
        with self._lock:
            self._held.setdefault(shard, held)
            while len(self._held) > TRACKED_SHARDS:
                self._held.popitem(last=False)

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
        self.cache.demote([held.key])
        self._start_ahead()  # the shard's span left room

    def _fetch_whole(self, key: str, limit: int) -> np.ndarray | None:
        data = self.fetches.store.get_range(key, RangeRequest(0, limit + 1))
        if data is None:
            return None
        if len(data) > limit:
            raise _TooLarge
        return np.frombuffer(data, np.uint8)  # side data: its nbytes count against the budget

    def _fetch(self, key: str, start: int, stop: int, pieces: list[tuple[int, int]]) -> np.ndarray:
        (data,) = self.fetches.ranges(key, [(start, stop)], [pieces])
        if data is None:
            raise ChunkError("shard vanished after its index was read")
        if isinstance(data, BaseException):
            raise data
        if len(data) != stop - start:
            raise ChunkError(f"shard span [{start}:{stop}] came back with {len(data)} bytes (truncated shard)")
        return np.frombuffer(data, np.uint8)  # side data: its nbytes count against the budget


def _surely_within(share: Share, limit: int) -> bool:
    """Whether a shard's stored bytes fit `limit` even if no inner chunk compressed at all: its
    decoded bytes and index, plus codec headers (zstd, blosc, gzip add tens of bytes per chunk, a
    fraction of a percent of incompressible data)."""
    decoded = share.decoded_nbytes
    return decoded + decoded // 64 + 256 * share.per_shard + share.index_nbytes <= limit


class _TooLarge(Exception):
    """A shard fetched whole was larger than a span may be (not a failure: the index is read alone)."""
