"""Ordinary files of a share, passed through byte for byte.

A local file is read with `preadv` straight into the reply from a
descriptor the open file keeps: one copy, and the kernel's page cache is the
cache. A remote one is read in blocks of `BLOCK_BYTES` through the mount's
chunk cache (one budget with the stores' chunks). A read that continues
where the last one ended keeps blocks loading ahead of it: the reach starts
at `FIRST_AHEAD_BLOCKS` and doubles with each top-up to `MAX_AHEAD_BYTES` (or
a quarter of the budget), and each top-up is fetched as `REQUESTS_PER_TOP_UP`
ranged GETs of whole blocks side by side, so a long stream makes a few
large requests rather than one per block. Each block is checked against the
size the listing gave: a file that changed size since it was listed fails
the read (EIO) rather than mixing two versions.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..byte_ranges import RangeRequest
from ..errors import StoreError
from ..stores.store import Store
from .cache import ChunkCache
from .chunks import coalesce
from .geometry import Coords
from .loads import Batch
from .served import continues_stream

# 8 MiB blocks, the cache's entries and the smallest request: at 20 ms per request, 2 requests in
# flight already carry ~800 MB/s, and a block is small beside the cache budget.
BLOCK_BYTES = 8 << 20
# How far ahead of a sequential reader blocks load: this many blocks at first, doubling with each
# top-up to MAX_AHEAD_BYTES (or a quarter of the budget). Every request costs a round trip and the
# server's work per request (moto reads the whole object for each ranged GET); a long stream's
# requests grow with its reach (32 MiB each at 128 MiB), and its reach stays bounded.
FIRST_AHEAD_BLOCKS = 4
MAX_AHEAD_BYTES = 128 << 20
# Ranged GETs per top-up, side by side: one stream of an object store carries less than several
# (S3's guidance: 8-16 MiB ranges in parallel), and at the first reach each is one block.
REQUESTS_PER_TOP_UP = 4


class PlainFileReader:
    """One open ordinary file: `read_into(offset, out)`; `close` lets its descriptor go."""

    def __init__(self, store: Store, key: str, size: int, mtime_ns: int | None, cache: ChunkCache,
                 timeout: float) -> None:
        self.store = store
        self.key = key
        self.size = size
        self._cache = cache
        self._timeout = timeout
        # Blocks are named by the file's version as listed, so a later open of the same version reuses them
        # and a changed file (another size or time) never gets the old one's blocks.
        self.version = (store.display_name, key, size, mtime_ns)
        self._lock = threading.Lock()
        self._next_offset = -1  # where the last read ended: the next read there is sequential
        self._blocks = -(-size // BLOCK_BYTES)
        self._max_ahead = max(FIRST_AHEAD_BLOCKS, min(MAX_AHEAD_BYTES, cache.budget_bytes // 4) // BLOCK_BYTES)
        self._ahead = FIRST_AHEAD_BLOCKS  # the stream's reach now, in blocks
        self._requested_until = 0  # blocks before this one were asked for ahead of the stream
        path = store.local_path(key)
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC) if path is not None else None

    def read_into(self, offset: int, out: np.ndarray) -> int:
        """Write up to `len(out)` bytes of the file at `offset` into `out`; return how many."""
        stop = min(self.size, offset + len(out))
        if stop <= offset:
            return 0
        if self._fd is not None:
            return self._read_local(offset, out[:stop - offset])
        return self._read_remote(offset, stop, out)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    # ------------------------------------------------------------- internal

    def _read_local(self, offset: int, out: np.ndarray) -> int:
        assert self._fd is not None
        done = 0
        while done < len(out):
            count = os.preadv(self._fd, [memoryview(out[done:])], offset + done)
            if count == 0:
                raise StoreError(f"{self.store.display_name}: {self.key}: the file is shorter than its listed "
                                 f"size ({offset + done} of {self.size} bytes): it changed since it was listed")
            done += count
        return done

    def _read_remote(self, offset: int, stop: int, out: np.ndarray) -> int:
        first, last = offset // BLOCK_BYTES, (stop - 1) // BLOCK_BYTES
        keys = [self._block_key(index) for index in range(first, last + 1)]
        with self._lock:
            # The kernel's readahead sends a stream's reads several at a time, so they may arrive out of
            # order: the stream rule of the arrays' reads (served.py) tells them, not an exact offset.
            sequential = offset == 0 or continues_stream(self._next_offset, offset, stop)
            self._next_offset = max(self._next_offset, stop) if sequential else stop
            if not sequential:  # a new stream, wherever it goes next, starts its reach afresh
                self._ahead, self._requested_until = FIRST_AHEAD_BLOCKS, 0
        values, futures = self._cache.get_many(keys, self._load_block, size_hint=BLOCK_BYTES)
        try:
            if sequential:
                self._load_ahead(last + 1)
            for key, future in futures.items():
                values[key] = future.result(timeout=self._timeout)
            for key in keys:
                block = values[key]
                block_start = key[2] * BLOCK_BYTES
                begin, end = max(offset, block_start), min(stop, block_start + len(block))
                out[begin - offset:end - offset] = block[begin - block_start:end - block_start]
        finally:
            self._cache.release({key: values.get(key) for key in keys if key in values})
        return stop - offset

    def _load_ahead(self, after: int) -> None:
        """Top up the blocks loading ahead of a stream whose last read ended in block `after - 1`:
        once at least half its reach is missing, in REQUESTS_PER_TOP_UP spans of whole blocks."""
        with self._lock:
            first = max(self._requested_until, after)
            stop = min(self._blocks, after + self._ahead)
            if first >= stop or (stop - first < self._ahead // 2 and stop < self._blocks):
                return
            self._requested_until = stop
            reach, self._ahead = self._ahead, min(self._max_ahead, 2 * self._ahead)
        span = max(1, reach // REQUESTS_PER_TOP_UP)
        keys = [self._block_key(index) for index in range(first, stop)]
        spans = Batch(lambda key: (key[2] - first) // span, self._load_span)
        values, futures = self._cache.get_many(keys, self._load_block, size_hint=BLOCK_BYTES, prefetch=True,
                                               batch=spans)
        taken = len(values) + len(futures)  # the cache takes keys in order until it has no room
        if taken < len(keys):
            with self._lock:  # a later read asks for the rest
                self._requested_until = min(self._requested_until, first + taken)

    def _block_key(self, index: int) -> tuple[str, tuple[str, str, int, int | None], int]:
        return ("plain-file", self.version, index)

    def _load_block(self, key: Any) -> np.ndarray:
        return np.frombuffer(self._get(key[2], key[2] + 1), np.uint8)

    def _load_span(self, keys: list[Any]) -> Iterator[tuple[Any, np.ndarray]]:
        """The blocks of `keys` (one span's, those not cached yet), one ranged GET per run of
        neighbours (`coalesce`, as a shard's inner chunks). Each block is copied out, so that the
        cache's bytes are its entries' own: a block evicted frees its memory even while the span's
        others stay."""
        blocks: list[tuple[Coords, int, int]] = [((key[2],), key[2] * BLOCK_BYTES, BLOCK_BYTES) for key in keys]
        for run in coalesce(blocks, gap=0, limit=len(blocks) * BLOCK_BYTES):
            first = run.start // BLOCK_BYTES
            data = np.frombuffer(self._get(first, first + len(run.members)), np.uint8)
            for (index,), offset, _ in run.members:
                at = offset - run.start
                yield self._block_key(index), data[at:at + BLOCK_BYTES].copy()

    def _get(self, first: int, stop_block: int) -> bytes | bytearray:
        """The file's bytes of blocks [first, stop_block), checked against its listed size."""
        start, stop = first * BLOCK_BYTES, min(self.size, stop_block * BLOCK_BYTES)
        data = self.store.get_range(self.key, RangeRequest(start, stop))
        if data is None or len(data) != stop - start:
            got = "nothing" if data is None else f"{len(data)} bytes"
            raise StoreError(f"{self.store.display_name}: {self.key}: bytes [{start}:{stop}] came back as {got}: "
                             f"the file changed since it was listed ({self.size} bytes)")
        return data
