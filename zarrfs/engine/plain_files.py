"""Ordinary files of a share, passed through byte for byte.

A local file is read with `preadv` straight into the reply from a
descriptor the open file keeps: one copy, and the kernel's page cache is the
cache. A remote one is read in blocks of `BLOCK_BYTES` through the mount's
chunk cache (one budget with the stores' chunks), so a sequential reader's
1 MiB requests become a few large ranged GETs, made ahead of it: a read that
continues where the last one ended loads the next `AHEAD_BLOCKS` blocks in
the background. Each block is checked against the size the listing gave: a
file that changed size since it was listed fails the read (EIO) rather than
mixing two versions.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from ..byte_ranges import RangeRequest
from ..errors import StoreError
from ..stores.store import Store
from .cache import ChunkCache
from .served import continues_stream

# 8 MiB blocks: at 20 ms per request, 2 requests in flight already carry ~800 MB/s, and a block is
# small beside the cache budget.
BLOCK_BYTES = 8 << 20
# Blocks loaded ahead of a sequential reader.
AHEAD_BLOCKS = 4


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
        values, futures = self._cache.get_many(keys, self._load_block, size_hint=BLOCK_BYTES)
        try:
            if sequential:
                ahead = [self._block_key(index) for index in range(last + 1, last + 1 + AHEAD_BLOCKS)
                         if index * BLOCK_BYTES < self.size]
                if ahead:
                    self._cache.get_many(ahead, self._load_block, size_hint=BLOCK_BYTES, prefetch=True)
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

    def _block_key(self, index: int) -> tuple[str, tuple[str, str, int, int | None], int]:
        return ("plain-file", self.version, index)

    def _load_block(self, key: Any) -> np.ndarray:
        index = key[2]
        start = index * BLOCK_BYTES
        stop = min(self.size, start + BLOCK_BYTES)
        data = self.store.get_range(self.key, RangeRequest(start, stop))
        if data is None or len(data) != stop - start:
            got = "nothing" if data is None else f"{len(data)} bytes"
            raise StoreError(f"{self.store.display_name}: {self.key}: bytes [{start}:{stop}] came back as {got}: "
                             f"the file changed since it was listed ({self.size} bytes)")
        return np.frombuffer(data, np.uint8)
