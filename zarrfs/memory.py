"""The daemon's memory: allocator settings that keep it fast and within its cache budget, a
trimmer that gives freed heap back (`HeapTrimmer`), and the figures `.zarrfs-stats.json` shows.

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
import functools
import gc
import os
import sys
import threading
from collections.abc import Callable, Mapping

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
# Blocks above this are mapped on their own and unmapped when freed: 32 MiB,
# the most glibc's own dynamic threshold would grow to, holds a typical chunk
# (1-16 MiB) and the 1 MiB FUSE replies.
MMAP_THRESHOLD = 32 << 20


# glibc gives every thread a cache of the blocks it freed (tcache: up to 7 of each size up to
# 1 KiB) that only that thread's later mallocs take back; to the heap they stay in use, so the
# free space around them cannot join up, and each such hole keeps a partly used page resident
# that `malloc_trim` cannot give back. A remote daemon has 40-50 threads, most of them waiting on
# requests: with the default caches its RSS creeps up over hours. No cache at all costs the fast
# codecs' cold reads a tenth of their speed; one block of each size per thread keeps the speed
# and caches 7 times fewer blocks (the soaks behind this: docs/performance-history.md).
#
# And the heap asks for transparent huge pages (`hugetlb=1`: madvise, where the kernel's THP mode is
# `madvise`; nothing changes under `never`): memory the heap takes afresh (the first pass's chunks,
# an ordinary file's blocks) then faults in 2 MiB at a time, not 4 KiB. Paired cold `dd` of the 1 GiB
# blosc-lz4 array: 0.93x the time and the CPU (10 pairs); peak RSS of a stream with a 256 MiB budget
# as before; after `find` of a share of 10,000 stores 7-10 MiB more (huge pages of the heap).
#
# glibc reads these only when a process starts; a setting the user gave stands.
ALLOCATOR_TUNABLES = {"glibc.malloc.tcache_count": "1", "glibc.malloc.hugetlb": "1"}
ALLOCATOR_SETTING = ":".join(f"{name}={value}" for name, value in ALLOCATOR_TUNABLES.items())


def allocator_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """`environ` with glibc's per-thread caches cut to one block of each size and huge pages asked for,
    for a daemon about to start; None when it needs no change (the C library is not glibc, or
    GLIBC_TUNABLES already sets both)."""
    if not _is_glibc():
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    given = {item.partition("=")[0] for item in tunables.split(":")}
    missing = ":".join(f"{name}={value}" for name, value in ALLOCATOR_TUNABLES.items() if name not in given)
    if not missing:
        return None  # the user's choices stand
    return {**environ, "GLIBC_TUNABLES": f"{tunables}:{missing}" if tunables else missing}


def _is_glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):  # the name is glibc's own: other C libraries do not know it
        return False


def tune_process() -> None:
    """Process-wide settings for a long-running zarrfs process (the daemon, benchmarks)."""
    tune_malloc()
    tune_blosc()
    tune_gc()


# Allocations between collections of the youngest generation (CPython's default: 700, 2,000 from 3.13).
GC_THRESHOLD = 20_000


def tune_gc() -> None:
    """Collect cyclic garbage less often, and never scan what the process holds from its start.

    Listing a hierarchy makes many small objects that live as long as the
    mount (metadata, directory entries, file layouts) and almost no cycles:
    at the default threshold the collector's passes over them took a quarter
    of the time to build the 16,724 entries of a 96-well plate (1.36 s, 1.03 s
    this way; a flat group of 10,000 arrays 2.0 s and 1.6 s). The older
    generations keep their default ratios, so a cycle (an exception's
    traceback holding a chunk) is still collected within a few hundred
    thousand allocations, a fraction of a second of serving reads.
    """
    gc.freeze()  # the modules and the root's metadata: never garbage
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, middle, oldest)


def tune_blosc() -> None:
    """Decode blosc through its global context, parallelised by blosc's own threads.

    numcodecs otherwise uses a fresh context per call from non-main threads
    (ours are all non-main), and each pass over a large array then leaves
    allocator memory behind that the global context does not.
    """
    import numcodecs.blosc

    numcodecs.blosc.use_threads = True


def tune_malloc() -> bool:
    """Apply the allocator settings process-wide (glibc only); True if they were applied."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    return all((
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        mallopt(_M_TRIM_THRESHOLD, 16 << 20),
        mallopt(_M_ARENA_MAX, 1),
    ))


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def memory_figures() -> dict[str, int]:
    """Where this process's memory is, for `.zarrfs-stats.json` and the soak test.

    `rss_bytes` is what the system counts, of it `rss_anon_bytes` the process's own memory and
    `rss_file_bytes` pages of mapped files (libraries: they grow as code paths are first run, and
    the kernel may drop them), `rss_heap_bytes` the resident part of glibc's heap (the rest of
    the process's own memory is the interpreter's object arenas, thread stacks and libraries'
    data); the `heap_*` figures are glibc's (`mallinfo2`): bytes the heap holds from the system,
    of which in use and free (free but kept is fragmentation or cache of the allocator) and in how
    many free blocks, and bytes in blocks mapped on their own; `python_blocks` counts the
    interpreter's live objects.
    """
    figures = {"rss_bytes": _resident_bytes(), **_resident_kinds(), **_resident_heap()}
    info = _mallinfo2()
    if info is not None:
        figures.update(heap_bytes=info.arena, heap_in_use_bytes=info.uordblks, heap_free_bytes=info.fordblks,
                       heap_free_blocks=info.ordblks, mapped_bytes=info.hblkhd)
    figures["python_blocks"] = sys.getallocatedblocks()
    return figures


def _mallinfo2() -> _Mallinfo2 | None:
    function = getattr(_libc(), "mallinfo2", None)  # glibc 2.33 and later
    if function is None:
        return None
    function.restype = _Mallinfo2
    return function()


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, or None where there is none to load (found once: `find_library` runs a program)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


# Free heap the allocator may keep before `HeapTrimmer` gives it back, and how often it looks.
# The slack is a quarter of the cache budget within these bounds: memory stays within the budget
# plus a constant that does not dwarf a small budget. A fixed 16 MiB let a 3 MiB daemon's resident
# free heap grow from 3 to 8 MiB over a 30-minute HTTP soak (still short of the 16), while glibc
# counted 10-13 MiB free and so never trimmed; a trim when more than the slack is free costs a walk
# of the heap and a page fault per reused free page, which big budgets avoid with the full 16 MiB.
TRIM_SLACK = 16 << 20
MIN_TRIM_SLACK = 2 << 20
TRIM_INTERVAL = 1.0


def trim_slack(budget_bytes: int) -> int:
    """The free heap a daemon with this cache budget keeps before trimming."""
    return max(MIN_TRIM_SLACK, min(TRIM_SLACK, budget_bytes // 4))


class HeapTrimmer:
    """Gives the heap's free pages back to the system whenever glibc counts more than `slack` free.

    glibc returns memory only from the top of its heap (beyond M_TRIM_THRESHOLD). Under many
    readers the heap holds decoded chunks, libfuse's 1 MiB request and reply buffers and read
    windows side by side; when some are freed the holes between live blocks stay resident. A
    16-reader soak on a 16 MiB budget kept 55-96 MiB free in the heap, resident, and the daemon's
    RSS rose with it. `malloc_trim(0)` releases every free page, holes included; the blocks stay
    free (glibc's count of free bytes does not drop), so once the heap is that fragmented it runs
    every `interval`, releasing what was freed since. A steady stream of equal-sized chunks, each
    freed and reused at once, keeps the count under `slack` and is not trimmed.
    """

    def __init__(self, slack: int = TRIM_SLACK, interval: float = TRIM_INTERVAL) -> None:
        self.slack = slack
        self.interval = interval
        self.trims = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._trim: Callable[[int], int] | None = getattr(_libc(), "malloc_trim", None)

    def start(self) -> bool:
        """Start watching (False, doing nothing, where the allocator is not glibc's)."""
        if self._trim is None or _mallinfo2() is None:
            return False
        self._thread = threading.Thread(target=self._run, name="zarrfs-trim", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            info = _mallinfo2()
            if info is not None and info.fordblks > self.slack and self._trim is not None:
                self._trim(0)
                self.trims += 1


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _resident_heap() -> dict[str, int]:
    """The resident bytes of the `[heap]` mapping (glibc's one arena), from /proc/self/smaps."""
    try:
        with open("/proc/self/smaps") as smaps:
            in_heap = False
            for line in smaps:
                if line.rstrip().endswith("[heap]"):
                    in_heap = True
                elif in_heap and line.startswith("Rss:"):
                    return {"rss_heap_bytes": int(line.split()[1]) << 10}
    except OSError:
        pass
    return {}


def _resident_kinds() -> dict[str, int]:
    """RssAnon and RssFile of /proc/self/status, in bytes (empty where the kernel has no such lines)."""
    kinds = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile"):
                kinds[f"rss_{name[3:].lower()}_bytes"] = int(value.split()[0]) << 10
    return kinds
