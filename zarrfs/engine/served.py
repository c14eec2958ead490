"""What reads are served from without Python: the C side (`_cached_reads.c`) of the cache.

The cache tells `ServedChunks` of every chunk it keeps and every chunk that
leaves it; readers register their arrays (regular chunk grids only) and the
files of uncompressed local chunks they have read raw (engine/direct.py), and
the FUSE front registers open files. The C side then answers reads whose
bytes all lie in those chunks with no GIL; everything else takes the Python
path. Both paths give the same bytes: a chunk is only handed to C
when its elements are laid out as the reader would copy them (the array's
dtype, byte order included, and contiguous rows).

Without the compiled `_cached_reads` (zarrfs/extensions.py) there is no C
side: `in_c` is False, no array is registered, and every read takes the
Python path.
"""

from __future__ import annotations

import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from .. import extensions

CachedReads: Any = None
if extensions.wanted():
    try:
        # Names from the module, not `from . import _cached_reads`: a missing file is then a
        # ModuleNotFoundError, which extensions.py reports as the extension not compiled.
        from ._cached_reads import SEQUENTIAL_REACH as _C_SEQUENTIAL_REACH
        from ._cached_reads import CachedReads
        from ._cached_reads import continues_stream as _c_continues_stream
        from ._cached_reads import stream_reach as _c_stream_reach
    except ImportError as error:
        extensions.unavailable("zarrfs.engine._cached_reads", error)
else:
    extensions.unavailable("zarrfs.engine._cached_reads")

# The sequential-stream rule is C's (`_cached_reads.c`, `stream_continues`): the C path answers a
# stream's reads only within the stretch readahead allowed it (`Readahead.c_stretch`), so both must
# tell a stream's reads alike. `Readahead.track` asks these names; with the C side they are C's own
# functions. Without it no read is answered in C and these are the same arithmetic in Python
# (tests/test_stream_rule.py holds them to C's on a table of reads).

# A read within max(4 x its size, this) of where the file's last read ended continues its stream.
SEQUENTIAL_REACH = 1 << 20
INT64_MAX = 2**63 - 1


def python_continues_stream(last_end: int, start: int, stop: int) -> bool:
    """Whether a read of [start, stop) continues reads that last ended at `last_end` (-1: none)."""
    return last_end >= 0 and abs(start - last_end) <= python_stream_reach(stop - start)


def python_stream_reach(size: int) -> int:
    """How far from the last read's end a read of `size` bytes may start and still continue it
    (at most 2**63 - 1, where C's int64 reach saturates)."""
    return min(max(4 * size, SEQUENTIAL_REACH), INT64_MAX)


continues_stream: Callable[[int, int, int], bool] = python_continues_stream
stream_reach: Callable[[int], int] = python_stream_reach
if CachedReads is not None:
    SEQUENTIAL_REACH = _C_SEQUENTIAL_REACH
    continues_stream, stream_reach = _c_continues_stream, _c_stream_reach

# Chunk files the C side keeps open at most (each a descriptor), the least recently registered
# closed first. A random read of a file C does not hold crosses into Python, which reads it and
# hands it to C, closing another: random 4 KiB reads over a 1 GiB array of 256 chunk files took
# 110 us at the median with 64 kept against 36 us with all kept (the in-memory FUSE file system:
# 27 us). So enough for a few GiB of 4 MiB chunks, and never more than a quarter of the process's
# descriptors, which the stores' connections and open files share (`raw_file_limit`).
RAW_FILES_MOST = 1024
RAW_FILES_LEAST = 16


def raw_file_limit() -> int:
    """Chunk files the C side may keep open in this process, from its soft RLIMIT_NOFILE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return RAW_FILES_MOST
    return max(RAW_FILES_LEAST, min(RAW_FILES_MOST, soft // 4))


# What `counters` reports when there is no C side: no read answered there.
NO_COUNTERS: dict[str, Any] = {"reads": 0, "reads_in_streams": 0, "reads_after_loading": 0, "chunk_hits": 0,
                               "chunks": 0, "latency_buckets": []}


class ServedChunks:
    def __init__(self) -> None:
        self.table = CachedReads(SEQUENTIAL_REACH) if CachedReads is not None else None
        self.in_c = self.table is not None  # whether any read is answered in C
        self.max_raw_files = raw_file_limit()  # (the daemon raised its limit before building any)
        # By cache key prefix: (array token, chunks per axis, dtype) of arrays C may serve.
        self._arrays: dict[Hashable, tuple[int, tuple[int, ...], np.dtype]] = {}
        self._raw_files: OrderedDict[tuple[int, int], None] = OrderedDict()  # (token, index) given to C
        self._raw_lock = threading.Lock()

    @property
    def _c(self) -> CachedReads:
        """The C side, where only a chunk, chunk file or open file that was handed to C leads (which
        needs one): the methods below that take no `table is None` branch."""
        if self.table is None:
            raise RuntimeError("zarrfs.engine._cached_reads is not in use: nothing was handed to C")
        return self.table

    def register_array(self, prefix: Hashable, token: int, chunk_counts: tuple[int, ...], dtype: np.dtype) -> None:
        """Chunks cached under keys `(prefix, coords)` belong to array `token`, a regular grid of
        `chunk_counts` chunks of `dtype` elements. Without the C side nothing is registered."""
        if self.table is None:
            return
        self.table.register_array(token)
        self._arrays[prefix] = (token, chunk_counts, dtype)

    def forget_array(self, prefix: Hashable, token: int) -> None:
        """The array's reader is gone: C lets go of its chunks now (those the cache still holds
        leave it later, unknown here), and takes no more of them: a chunk whose place was found
        before this ran (`cached`, `open_raw_file` in another thread) is refused by C then.
        Safe from a finalizer: no lock of the cache is taken."""
        self._arrays.pop(prefix, None)
        if self.table is not None:
            self.table.remove_array(token)
        # Its chunk files' places stay in `_raw_files` (taking the lock here could deadlock the
        # thread holding it, if the collector runs this finalizer there) and leave it as the
        # oldest: tokens are never reused, so they name nothing C holds.

    def cached(self, key: Hashable, value: Any) -> None:
        """The cache now holds `value` under `key`."""
        if self.holds(key, value):
            token, index, _ = self._place(key)  # type: ignore[misc]
            self._c.add_chunk(token, index, value)

    def holds(self, key: Hashable, value: Any) -> bool:
        """Whether C reads `value` when the cache holds it under `key`: a chunk of a registered
        array, with its elements as the reader would copy them."""
        place = self._place(key)
        if place is None:
            return False
        dtype = place[2]
        return isinstance(value, np.ndarray) and value.dtype == dtype and not dtype.hasobject \
            and value.ndim == len(key[1])  # type: ignore[index]

    def open_raw_file(self, key: Hashable, path: str, shape: tuple[int, ...], not_after_ns: int | None = None) -> None:
        """C may read chunk `key` from its file at `path` (C-order elements of the array's dtype,
        uncompressed, a chunk of `shape`), which the Python path reads raw (engine/direct.py), while
        the file stays as C opened it, modified no later than `not_after_ns` (None: any time)."""
        place = self._place(key)
        if place is None:
            return
        token, index, dtype = place
        with self._raw_lock:
            if (token, index) in self._raw_files:
                self._raw_files.move_to_end((token, index))
                return
            try:
                limit = -1 if not_after_ns is None else not_after_ns
                if not self._c.add_file(token, index, path, shape, dtype.itemsize, limit):
                    return  # the array was forgotten meanwhile
            except (OSError, ValueError):  # gone or changed since: the Python path knows what to do
                return
            self._raw_files[(token, index)] = None
            if len(self._raw_files) > self.max_raw_files:
                self._c.remove_chunk(*self._raw_files.popitem(last=False)[0])

    def left(self, key: Hashable) -> None:
        """`key` left the cache: C lets go of its memory now, before anything reuses it."""
        place = self._place(key)
        if place is not None:
            self._c.remove_chunk(place[0], place[1])

    def touched(self, key: Hashable) -> bool:
        """Whether C served a read from `key` since the last time this was asked."""
        place = self._place(key)
        return place is not None and self._c.take_touched(place[0], place[1])

    def clear(self) -> None:
        if self.table is not None:
            self.table.clear_chunks()
        with self._raw_lock:
            self._raw_files.clear()

    def open_file(self, handle: int, layout: tuple[Any, ...]) -> None:
        """C answers reads of open file `handle` (`CachedReads.open_file`'s `layout`) where it can."""
        self._c.open_file(handle, *layout)

    def open_bytes(self, handle: int, start: int, data: bytes) -> None:
        """C answers reads of open file `handle` that lie within `data`, its bytes from `start`."""
        self._c.open_bytes(handle, start, data)

    def close_file(self, handle: int) -> None:
        self._c.close_file(handle)

    def allow_stream(self, handle: int, region: int, until: int) -> None:
        """C may answer the reads of the stream of open file `handle`'s region beginning at file offset
        `region` up to byte `until` of that region."""
        self._c.allow_stream(handle, until, region)

    def counters(self) -> dict[str, Any]:
        """The reads C answered and its latency histogram (`CachedReads.counters`)."""
        return self.table.counters() if self.table is not None else dict(NO_COUNTERS)

    def serve_capsule(self) -> Any:
        """The C entry point answering reads of open files (fuse/_fast_read.c); None without C."""
        return self.table.serve_capsule() if self.table is not None else None

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
