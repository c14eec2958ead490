"""Strided copies and reads into a reply: the compiled `_gather` when there is one, else the same in Python.

Both keep one contract (tests/test_gather.py holds each to numpy and to the
file's bytes): `copy_into(dst, src)` copies a block's bytes as they are between
blocks of one shape and element size; `preadv_into(fd, dst, offset, flags)`
reads consecutive file bytes into a block in C order and returns how many it
read, stopping at the first short read. The compiled one keeps the GIL while
the copy cannot sleep (`_gather.c` says why that matters on a FUSE daemon);
the Python one lets numpy and `os.preadv` release it, which is slower under
many FUSE threads, not different.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

import numpy as np

from .. import extensions


def python_copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """`copy_into` in Python: the bytes of `src` into the writable block `dst`."""
    if dst.shape != src.shape or dst.itemsize != src.itemsize:
        raise ValueError("copy_into: blocks differ in shape or element size")
    if not dst.flags.writeable:
        raise ValueError("copy_into: the destination is read-only")
    if dst.dtype == src.dtype:
        np.copyto(dst, src, casting="no")
        return
    element = np.dtype((np.void, dst.itemsize))  # elements of one size copied as they are, whatever they mean
    np.copyto(dst.view(element), src.view(element), casting="no")


def python_preadv_into(fd: int, dst: np.ndarray, offset: int, flags: int) -> int:
    """`preadv_into` in Python: `os.preadv` into the block's contiguous runs, `IOV_MAX` at a time;
    where the platform has no `preadv` (or `flags` is 0 and it lacks one), one `os.pread` per run."""
    if offset < 0:
        raise ValueError("preadv_into: negative offset")
    if not dst.flags.writeable:
        raise ValueError("preadv_into: the destination is read-only")
    runs = _runs(dst)
    total = 0
    for first in range(0, len(runs), _IOV_MAX):
        batch = runs[first:first + _IOV_MAX]
        want = sum(len(run) for run in batch)
        got = _read_runs(fd, batch, offset + total, flags)
        total += got
        if got < want:
            break
    return total


def _read_runs(fd: int, runs: list[memoryview], offset: int, flags: int) -> int:
    if hasattr(os, "preadv"):
        return os.preadv(fd, runs, offset, flags) if flags else os.preadv(fd, runs, offset)
    if flags:  # RWF_* flags exist only with preadv2 (Linux)
        raise OSError(errno.EOPNOTSUPP, "preadv flags are not supported here")  # direct.py reads without them
    done = 0
    for run in runs:
        data = os.pread(fd, len(run), offset + done)
        run[:len(data)] = data
        done += len(data)
        if len(data) < len(run):
            break
    return done


def _runs(block: np.ndarray) -> list[memoryview]:
    """The block's bytes as writable runs in C order: its innermost axes that are contiguous
    together form one run, the outer axes are walked."""
    outer = block.ndim
    while outer > 0 and block[(0,) * (outer - 1) + (...,)].flags.c_contiguous:
        outer -= 1
    if block.size == 0:
        return []
    return [memoryview(block[(*index, ...)].reshape(-1).view(np.uint8)) for index in np.ndindex(*block.shape[:outer])]


_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024

copy_into: Callable[[np.ndarray, np.ndarray], None]
preadv_into: Callable[[int, np.ndarray, int, int], int]
COMPILED = False
if extensions.wanted():
    try:
        from ._gather import copy_into, preadv_into
        COMPILED = True
    except ImportError as error:
        extensions.unavailable("zarrfs.engine._gather", error)
else:
    extensions.unavailable("zarrfs.engine._gather")
if not COMPILED:
    copy_into, preadv_into = python_copy_into, python_preadv_into
