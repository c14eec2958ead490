"""Allocator settings that keep the daemon fast and within its cache budget.

Decoded chunks are megabytes each and turn over as the LRU evicts them. If
each one is mapped on its own (glibc's default above 128 KiB), every page of
every chunk is faulted in and zeroed afresh: on a cold 1 GiB read through the
mount that was a fifth of the daemon's CPU time, and the read ran 15-20%
slower than with buffers reused from the heap (bench/bench_mount.py).
So blocks up to 32 MiB come from the heap and are reused. The heap must not
keep what it frees, either: with glibc's defaults (one arena per thread, a
dynamic threshold) a pass over a 1 GiB array left 145 MiB over a 512 MiB
budget, and even two arenas fragmented to 650 MiB peak on that budget. One
arena and a 16 MiB trim threshold: 586-593 MiB peak with a 512 MiB budget,
327-334 MiB with 256 MiB, and no slower (chunk-sized mallocs are rare enough
that threads do not queue for the one arena's lock).
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
# Blocks above this are mapped on their own and unmapped when freed: 32 MiB,
# the most glibc's own dynamic threshold would grow to, holds a typical chunk
# (1-16 MiB) and the 1 MiB FUSE replies.
MMAP_THRESHOLD = 32 << 20


def tune_process() -> None:
    """Process-wide settings for a long-running zarrfs process (the daemon, benchmarks)."""
    tune_malloc()
    tune_blosc()


def tune_blosc() -> None:
    """Decode blosc through its global context, parallelised by blosc's own threads.

    numcodecs otherwise uses a fresh context per call from non-main threads
    (ours are all non-main); measured here, that left 64 MiB of allocator
    memory behind per pass over a 1 GiB array, and the global context none.
    """
    import numcodecs.blosc

    numcodecs.blosc.use_threads = True


def tune_malloc() -> bool:
    """Apply the allocator settings process-wide (glibc only); True if they were applied."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return all((
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        mallopt(_M_TRIM_THRESHOLD, 16 << 20),
        mallopt(_M_ARENA_MAX, 1),
    ))
