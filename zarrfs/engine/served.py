"""What small reads are served from without Python: the C side (`_cached_reads.c`) of the cache.

The cache tells `ServedChunks` of every chunk it keeps and every chunk that
leaves it; readers register their arrays (regular chunk grids only) and the
FUSE front registers open files. The C side then answers random reads whose
bytes all lie in cached chunks with no GIL; everything else takes the Python
path. Both paths give the same bytes: a chunk is only handed to C
when its elements are laid out as the reader would copy them (the array's
dtype, byte order included, and contiguous rows).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from ._cached_reads import CachedReads

# A read within max(4 x its size, this) of where the file's last read ended continues a
# sequential stream: the one rule `Readahead.track` and the C path both go by, so that every
# read of a stream reaches readahead.
SEQUENTIAL_REACH = 1 << 20


class ServedChunks:
    def __init__(self) -> None:
        self.table = CachedReads(SEQUENTIAL_REACH)
        # By cache key prefix: (array token, chunks per axis, dtype) of arrays C may serve.
        self._arrays: dict[Hashable, tuple[int, tuple[int, ...], np.dtype]] = {}

    def register_array(self, prefix: Hashable, token: int, chunk_counts: tuple[int, ...], dtype: np.dtype) -> None:
        """Chunks cached under keys `(prefix, coords)` belong to array `token`, a regular grid of
        `chunk_counts` chunks of `dtype` elements."""
        self._arrays[prefix] = (token, chunk_counts, dtype)

    def forget_array(self, prefix: Hashable, token: int) -> None:
        """The array's reader is gone: C lets go of its chunks now (those the cache still holds
        leave it later, unknown here). Safe from a finalizer: no lock of the cache is taken."""
        self._arrays.pop(prefix, None)
        self.table.remove_array(token)

    def cached(self, key: Hashable, value: Any) -> None:
        """The cache now holds `value` under `key`."""
        place = self._place(key)
        if place is None:
            return
        token, index, dtype = place
        if isinstance(value, np.ndarray) and value.dtype == dtype and not dtype.hasobject \
                and value.ndim == len(key[1]):  # type: ignore[index]
            self.table.add_chunk(token, index, value)

    def left(self, key: Hashable) -> None:
        """`key` left the cache: C lets go of its memory now, before anything reuses it."""
        place = self._place(key)
        if place is not None:
            self.table.remove_chunk(place[0], place[1])

    def touched(self, key: Hashable) -> bool:
        """Whether C served a read from `key` since the last time this was asked."""
        place = self._place(key)
        return place is not None and self.table.take_touched(place[0], place[1])

    def clear(self) -> None:
        self.table.clear_chunks()

    def _place(self, key: Hashable) -> tuple[int, int, np.dtype] | None:
        """(array token, flat chunk index, dtype) of a chunk key of a registered array, else None."""
        if not self._arrays or not isinstance(key, tuple) or len(key) != 2:
            return None
        array = self._arrays.get(key[0])
        if array is None:
            return None
        token, counts, dtype = array
        coords = key[1]
        if not isinstance(coords, tuple) or len(coords) != len(counts):
            return None
        index = 0
        for coord, count in zip(coords, counts, strict=True):
            index = index * count + coord
        return token, index, dtype
