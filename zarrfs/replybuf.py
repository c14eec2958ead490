"""Read replies built in memory that libfuse owns, so no copy is made on the way out.

With a plain `read` callback, libfuse mallocs the reply buffer and mfusepy
memmoves whatever Python returned into it: every byte of a FUSE read is copied
once more than needed. With `read_buf` the file system hands libfuse a
`fuse_bufvec` it allocated itself; libfuse writes it to /dev/fuse and then
frees both the vector and the memory with free(). zarrfs assembles array bytes
straight into such malloc'd memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

import numpy as np

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_malloc = _libc.malloc
_malloc.argtypes = [ctypes.c_size_t]
_malloc.restype = ctypes.c_void_p
_free = _libc.free
_free.argtypes = [ctypes.c_void_p]
_free.restype = None


class FuseBuf(ctypes.Structure):
    """`struct fuse_buf` of libfuse 3 (fuse_common.h)."""

    _fields_ = [("size", ctypes.c_size_t), ("flags", ctypes.c_int), ("mem", ctypes.c_void_p),
                ("fd", ctypes.c_int), ("pos", ctypes.c_int64)]


class FuseBufvec(ctypes.Structure):
    """`struct fuse_bufvec` with its one inline buffer (mfusepy declares `buf` as a pointer)."""

    _fields_ = [("count", ctypes.c_size_t), ("idx", ctypes.c_size_t), ("off", ctypes.c_size_t),
                ("buf", FuseBuf * 1)]


class ReplyBuffer:
    """`size` bytes of malloc'd memory, writable as a uint8 array, to be given to libfuse.

    Use as a context manager: the memory is freed on the way out unless
    `hand_over` gave it to libfuse, which then frees it after replying.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.address = _malloc(max(size, 1))
        if not self.address:
            raise MemoryError(f"cannot allocate a {size}-byte read reply")
        self.array = np.frombuffer((ctypes.c_uint8 * size).from_address(self.address), np.uint8)

    def __enter__(self) -> ReplyBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.address:
            _free(self.address)
            self.address = None

    def hand_over(self, bufpp: Any, nbytes: int) -> None:
        """Store in `*bufpp` a vector replying with the first `nbytes`; libfuse frees it all."""
        vector_address = _malloc(ctypes.sizeof(FuseBufvec))
        if not vector_address:
            raise MemoryError("cannot allocate a fuse_bufvec")
        vector = FuseBufvec.from_address(vector_address)
        vector.count, vector.idx, vector.off = 1, 0, 0
        vector.buf[0] = FuseBuf(size=nbytes, flags=0, mem=self.address, fd=-1, pos=0)
        bufpp[0] = ctypes.cast(vector_address, type(bufpp[0]))
        self.address = None  # libfuse's now; the array must not be used after this
        del self.array
