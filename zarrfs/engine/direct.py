"""Uncompressed chunks of local arrays, read straight from their files.

When a chunk's stored bytes *are* its C-order elements (no compressor, no
filters, the array's own byte order) and the store is a local directory,
decoding is a copy. Reading such a chunk through the cache costs a read of the
whole file into a fresh buffer and then a gather into the reply; `preadv` of
just the wanted rows into the reply does one copy instead of two, touches no
new memory and uses no cache budget. The page cache is the cache.

Anything unexpected (a file of the wrong size, an I/O error, a short read)
answers False, and the caller takes the ordinary decode path, which reports
the problem the usual way. A missing file is a chunk of fill value, as for any
store.
"""

from __future__ import annotations

import errno
import itertools
import math
import os
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .gather import preadv_into

# Open descriptors kept for reuse, across all arrays: a sequential read visits
# each chunk file once per 1 MiB request, and opening it each time costs more
# than the read. Far below the usual limit of 1024 open files.
MAX_OPEN_FILES = 128
# preadv2's "page cache only" flag (Linux 4.14+); 0 where the platform has none: reads may then wait.
NOWAIT = getattr(os, "RWF_NOWAIT", 0)


@dataclass
class _OpenFile:
    fd: int
    size: int
    mtime_ns: int  # at open: a read after which it differs read a file written meanwhile
    users: int = 0
    evicted: bool = False  # closed by the last user to release it


class ChunkFiles:
    """Shared, bounded set of open chunk files; safe to use from many threads.

    A descriptor is only closed when no read is using it: closing one that
    another thread is about to read would let the number be reused by an
    unrelated file, and that read would return its bytes.
    """

    def __init__(self, max_open: int = MAX_OPEN_FILES) -> None:
        self.max_open = max_open
        self._lock = threading.Lock()
        self._files: OrderedDict[tuple[int, str], _OpenFile] = OrderedDict()  # by (owner, path)
        self._nowait = bool(NOWAIT)  # whether the file system honours RWF_NOWAIT (cleared at its first refusal)
        self.reads = 0
        self.bytes_read = 0

    def read_block(self, owner: int, path: str, chunk_shape: tuple[int, ...], src: tuple[slice, ...],
                   dst: np.ndarray, *, cached_only: bool = False, not_after_ns: int | None = None) -> bool | None:
        """Fill `dst` with block `src` of the C-order chunk stored raw in `path`.

        Descriptors are shared per `owner` (a reader's token): a reader made
        after a metadata refresh opens the files anew, so a chunk file
        replaced meanwhile is read as it is now, as the decode path would.
        A file written since it was opened here, or modified after `not_after_ns` (when the reader
        began: engine/chunk_versions.py), answers False: the decode path checks its version and
        fails the read if it changed under the reader's open files.

        False when the caller must decode instead: the file is not exactly one
        chunk long, or reading it failed or came up short. With `cached_only`,
        None when the bytes are not all in the page cache (the read would wait
        for the disk): the caller may retry without it.
        """
        if cached_only and not self._nowait:
            return None
        flags = NOWAIT if cached_only else 0
        key = (owner, path)
        try:
            handle = self._acquire(key)
        except OSError:  # absent (fill value), or unreadable: the decode path knows what that means
            return False
        nbytes_read = 0
        try:
            if handle.size != math.prod(chunk_shape) * dst.itemsize:
                return False
            for start, piece in _runs(chunk_shape, src, dst):
                if preadv_into(handle.fd, piece, start * dst.itemsize, flags) != piece.nbytes:
                    return None if flags else False  # with RWF_NOWAIT a short read may just be uncached
            after = os.fstat(handle.fd)  # after the read: a write that began before it shows here
            if (after.st_size, after.st_mtime_ns) != (handle.size, handle.mtime_ns) or \
                    (not_after_ns is not None and after.st_mtime_ns > not_after_ns):
                return False
            nbytes_read = dst.nbytes
        except BlockingIOError:  # RWF_NOWAIT: nothing of it cached
            return None
        except OSError as exc:
            if flags and exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # this file system ignores RWF_NOWAIT
                self._nowait = False
                return None
            return False  # an I/O error: the decode path reads again and reports it
        finally:
            self._release(handle, nbytes_read)
        return True

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"reads": self.reads, "bytes": self.bytes_read, "open_files": len(self._files)}

    def close(self) -> None:
        with self._lock:
            for handle in self._files.values():
                if handle.users:
                    handle.evicted = True
                else:
                    os.close(handle.fd)
            self._files.clear()

    # -------------------------------------------------------------- internal

    def _acquire(self, key: tuple[int, str]) -> _OpenFile:
        with self._lock:
            handle = self._files.get(key)
            if handle is not None:
                self._files.move_to_end(key)
                handle.users += 1
                return handle
        # O_NONBLOCK: a FIFO in the store must not hang the read in open().
        fd = os.open(key[1], os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise IsADirectoryError(errno.EISDIR, "not a regular file", key[1])
        except OSError:
            os.close(fd)
            raise
        size = status.st_size
        with self._lock:
            handle = self._files.get(key)
            if handle is not None:  # another thread opened it meanwhile
                os.close(fd)
            else:
                handle = self._files[key] = _OpenFile(fd, size, status.st_mtime_ns)
                while len(self._files) > self.max_open:
                    _, oldest = self._files.popitem(last=False)
                    if oldest.users:
                        oldest.evicted = True
                    else:
                        os.close(oldest.fd)
            self._files.move_to_end(key)
            handle.users += 1
            return handle

    def _release(self, handle: _OpenFile, nbytes_read: int) -> None:
        """Done with `handle`; count the read if it filled its block (one lock round trip for both)."""
        with self._lock:
            handle.users -= 1
            if handle.evicted and not handle.users:
                os.close(handle.fd)
            if nbytes_read:
                self.reads += 1
                self.bytes_read += nbytes_read


def _runs(shape: tuple[int, ...], src: tuple[slice, ...], dst: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(C-order index in the chunk, destination piece) for each contiguous run of block `src`.

    One run when the block is contiguous in the chunk (whole rows, say);
    otherwise one run per row of the last axis (an edge chunk cut short).
    """
    start = _contiguous_start(shape, src)
    if start is not None:
        return [(start, dst)]
    runs = []
    leading = itertools.product(*(range(s.start, s.stop) for s in src[:-1]))
    for dst_index, src_index in zip(np.ndindex(*dst.shape[:-1]), leading, strict=True):
        row = 0
        for i, n in zip(src_index, shape[:-1], strict=True):
            row = row * n + i
        runs.append((row * shape[-1] + src[-1].start, dst[dst_index]))
    return runs


def _contiguous_start(shape: tuple[int, ...], block: tuple[slice, ...]) -> int | None:
    """C-order index of the block's first element if the block is one run of the chunk, else None.

    It is one run when every axis after the first axis with extent > 1 is whole.
    """
    start = 0
    spread = False  # an axis with extent > 1 came before this one
    for s, n in zip(block, shape, strict=True):
        if spread and (s.start or s.stop != n):
            return None
        spread = spread or s.stop - s.start > 1
        start = start * n + s.start
    return start
