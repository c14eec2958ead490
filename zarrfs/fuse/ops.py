"""FUSE operations: translate kernel calls into the view's lookups, listings and open handles.

Nothing here knows about Zarr. Every failure leaves as an errno: a
`ZarrfsError` with its own, anything unexpected as EIO with a traceback in the
log, so no exception reaches the binding's default handler.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import itertools
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

import mfusepy
import numpy as np

from .. import extensions
from ..errors import ZarrfsError
from ..files.contract import OpenedFile
from ..files.mount_tree import MountTree
from ..files.directory import typed_names
from ..files.tree import DirEntry, Entry, FileEntry, StatsEntry
from . import compiled
from .service_times import ServiceTimes

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

# What `stat` reports as the preferred I/O size: tools like cp and cat size
# their buffers from it, and 1 MiB is the largest read FUSE hands us anyway.
BLOCK_SIZE = 1 << 20
# What readdir tells of each name (libfuse passes st_mode on as the entry's d_type).
_DIRECTORY, _FILE = {"st_mode": stat.S_IFDIR}, {"st_mode": stat.S_IFREG}
_QUIET_ERRNOS = {errno.ENOENT, errno.EROFS}  # normal answers, not worth a log line
# Distinct failures remembered for logging each once; a bound keeps memory flat
# on a store that fails everywhere (later ones then log every time).
_MAX_REPORTED = 10_000
# Distinct stat images kept (`stat_image`); past it they are made afresh and the set starts again. A wide
# group of alike arrays needs one per file kind.
MAX_STAT_IMAGES = 4096
# Paths whose last open's version is remembered (`open`'s keep_cache); one forgotten is opened
# with its cached pages dropped, which costs rereads, never a stale byte.
MAX_REMEMBERED_VERSIONS = 4096
# What `load_for_c` answers C: its constants (zarrfs/_extension.h). Without the compiled read
# callback C never calls `load_for_c`, and any two distinct numbers stand for them.
LOADED, WRITTEN = (compiled.fast_read.LOADED, compiled.fast_read.WRITTEN) if compiled.fast_read is not None \
    else (0, 1)


def _errno_boundary(method: F) -> F:
    call = method.__name__.removesuffix("_into")  # log lines name the system call: "read", not "read_into"

    @functools.wraps(method)
    def wrapper(self: ZarrOperations, *args: Any) -> Any:
        try:
            return method(self, *args)
        except mfusepy.FuseOSError:
            raise
        except ZarrfsError as exc:
            if exc.errno not in _QUIET_ERRNOS:
                self.report_once(f"{call} {args[0] if args else ''}", exc)
            raise mfusepy.FuseOSError(exc.errno) from exc
        except Exception:
            log.exception("%s %s: unexpected error", call, args[0] if args else "")
            raise mfusepy.FuseOSError(errno.EIO) from None

    return wrapper  # type: ignore[return-value]


def _read_only(*_: Any) -> None:
    raise mfusepy.FuseOSError(errno.EROFS)


class ZarrOperations(mfusepy.Operations):
    use_ns = True

    def __init__(self, tree: MountTree, *, attr_timeout: float, on_ready: Callable[[], None] | None = None,
                 max_background: int | None = None, max_readahead: int | None = None) -> None:
        self.tree = tree
        self.attr_timeout = attr_timeout
        self.on_ready = on_ready
        self.max_background = max_background  # kernel readahead requests in flight (None: its default, 12)
        self.max_readahead = max_readahead  # bytes, told the kernel in the INIT reply (None: as it asked)
        self._handles: dict[int, OpenedFile] = {}
        self._next_handle = itertools.count(1)
        self._lock = threading.Lock()
        self._versions: OrderedDict[str, Hashable] = OrderedDict()  # by path: its last open's version
        self._uid, self._gid = os.getuid(), os.getgid()
        self._mount_time_ns = time.time_ns()
        self._reported: set[str] = set()
        self._stat_images: dict[tuple[Any, ...], bytes] = {}  # by what they say; a get and a set need no lock
        self.read_times = ServiceTimes(tree.fast_read_counters)
        tree.stats_extras["reads"] = self.read_times.summary  # the daemon's part of read latency

    # ------------------------------------------------------------- lifecycle

    def init_with_config(self, conn: Any, config: Any) -> None:
        if conn is not None and self.max_background:
            conn.max_background = self.max_background
            conn.congestion_threshold = self.max_background * 3 // 4  # the kernel's own default ratio
        if conn is not None and self.max_readahead:
            conn.max_readahead = min(conn.max_readahead, self.max_readahead)
        if config is not None:
            # Attributes and names for the attribute timeout (the metadata TTL, if any); pages for as
            # long as the file's version stays (`open`'s keep_cache: libfuse's kernel_cache would
            # keep them whatever it answers).
            config.attr_timeout = self.attr_timeout
            config.entry_timeout = self.attr_timeout
            config.negative_timeout = self.attr_timeout
        if self.on_ready is not None:
            threading.Thread(target=self.on_ready, name="zarrfs-ready", daemon=True).start()

    def report_once(self, call: str, exc: ZarrfsError) -> None:
        """Log a failure at ERROR the first time, at DEBUG after.

        The kernel retries a failed page read, and readers retry too: without
        this one corrupt chunk would fill the log with the same line.
        """
        message = str(exc)
        with self._lock:
            first = message not in self._reported
            if first and len(self._reported) < _MAX_REPORTED:
                self._reported.add(message)
        log.log(logging.ERROR if first else logging.DEBUG, "%s: %s", call, message)

    # -------------------------------------------------------------- metadata

    def _attributes(self, entry: Entry) -> dict[str, int]:
        common = {"st_uid": self._uid, "st_gid": self._gid, "st_atime": self._mount_time_ns,
                  "st_mtime": self._mount_time_ns, "st_ctime": self._mount_time_ns, "st_blksize": BLOCK_SIZE}
        if isinstance(entry, DirEntry):
            return {**common, "st_mode": stat.S_IFDIR | 0o555, "st_nlink": 2, "st_size": 0}
        if isinstance(entry, StatsEntry):  # size unknown until opened; read with direct_io
            return {**common, "st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": 0}
        size = entry.file.size
        if entry.mtime_ns is not None:
            common["st_mtime"] = common["st_ctime"] = entry.mtime_ns
        return {**common, "st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": size,
                "st_blocks": -(-size // 512)}

    @_errno_boundary
    def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
        return self._attributes(self.tree.lookup(path))

    @_errno_boundary
    def stat_image(self, path: str) -> bytes:
        """`getattr`'s answer as the bytes of libfuse's `struct stat` (ReplyBufferFUSE copies them into its
        buffer): one image per kind of answer, made once, not a dict and ten field sets per call."""
        entry = self.tree.lookup(path)
        if isinstance(entry, FileEntry):
            key: tuple[Any, ...] = (entry.file.size, entry.mtime_ns)
        else:
            key = (type(entry),)
        image = self._stat_images.get(key)
        if image is None:
            st = mfusepy.c_stat()
            mfusepy.set_st_attrs(st, self._attributes(entry), use_ns=self.use_ns)
            image = ctypes.string_at(ctypes.addressof(st), ctypes.sizeof(st))
            if len(self._stat_images) >= MAX_STAT_IMAGES:
                self._stat_images.clear()
            self._stat_images[key] = image
        return image

    @_errno_boundary
    def readdir(self, path: str, fh: Any) -> Iterator[tuple[str, dict[str, int], int]]:
        """The names, each with its type: `find`, `ls` and file managers then know the directories without
        a `stat` of every file (whose size can mean building its layout). Made as mfusepy hands them to
        libfuse, not listed first: a wide group's 700,000 names are not held twice over."""
        entry = self.tree.lookup(path)
        if not isinstance(entry, DirEntry):
            raise mfusepy.FuseOSError(errno.ENOTDIR)
        entries = self.tree.listdir(entry)
        return itertools.chain(((".", _DIRECTORY, 0), ("..", _DIRECTORY, 0)),
                               ((name, _DIRECTORY if is_directory else _FILE, 0)
                                for name, is_directory in typed_names(entries)))

    @_errno_boundary
    def access(self, path: str, amode: int) -> int:
        self.tree.lookup(path)
        if amode & os.W_OK:
            raise mfusepy.FuseOSError(errno.EROFS)
        return 0

    @_errno_boundary
    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": BLOCK_SIZE, "f_frsize": BLOCK_SIZE, "f_blocks": 0, "f_bfree": 0, "f_bavail": 0,
                "f_files": 0, "f_ffree": 0, "f_favail": 0, "f_namemax": 255}

    # No extended attributes. ENOSYS (not ENODATA) makes the kernel stop asking for the rest of the
    # mount: `ls -l` asks two of every entry, two FUSE round trips per file of a wide directory otherwise.
    def getxattr(self, path: str, name: str, position: int = 0) -> bytes:
        raise mfusepy.FuseOSError(errno.ENOSYS)

    def listxattr(self, path: str) -> list[str]:
        raise mfusepy.FuseOSError(errno.ENOSYS)

    # ------------------------------------------------------------------ data

    @_errno_boundary
    def open(self, path: str, fi: Any) -> int:
        if fi.flags & os.O_ACCMODE != os.O_RDONLY or fi.flags & (os.O_TRUNC | os.O_CREAT):
            raise mfusepy.FuseOSError(errno.EROFS)
        opened = self.tree.open(path)
        with self._lock:
            handle = next(self._next_handle)
            self._handles[handle] = opened
        fi.fh = handle
        opened.attach(handle)
        if opened.direct_io:
            fi.direct_io = 1
        # The pages an earlier open cached stay valid while the file is the same version (its size,
        # its array's reader: a metadata refresh makes new ones); else the kernel drops them now.
        fi.keep_cache = 0 if fi.direct_io else int(self._same_version(path, opened.version()))
        return 0

    def _same_version(self, path: str, version: Hashable) -> bool:
        """Whether the last open of `path` (as far as remembered) was of this version; remembers it."""
        with self._lock:
            last = self._versions.pop(path, None)
            self._versions[path] = version
            if len(self._versions) > MAX_REMEMBERED_VERSIONS:
                self._versions.popitem(last=False)
        return last is not None and last == version

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        """The plain mfusepy read. Its presence is what makes mfusepy install a read
        callback; under `ReplyBufferFUSE` that callback calls `read_into` instead."""
        out = np.empty(size, np.uint8)
        return out[:self.read_into(path, out, offset, fi)].tobytes()

    @_errno_boundary
    def read_into(self, path: str, out: np.ndarray, offset: int, fi: Any) -> int:
        """Write up to `len(out)` bytes of the file at `offset` into `out`; return how many."""
        opened = self._handles.get(fi.fh)
        if opened is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        start = time.perf_counter_ns()  # every read: no closure, one call to count it
        try:
            return opened.read_into(offset, out)
        finally:
            self.read_times.record(start)

    def load_for_c(self, fh: int, path: str | None, offset: int, out: memoryview, write: bool) -> tuple[int, int]:
        """C's read of `len(out)` bytes at `offset` in the element region of open file `fh` found
        chunks missing (or ran past its stream's stretch): _fast_read.c asks here once.

        (LOADED, until): the chunks are loaded and C copies the read; (WRITTEN, 0): the bytes are
        in `out` (always so with `write`: C found a chunk still missing); (-errno, 0): the read
        fails, logged as any read here is."""
        opened = self._handles.get(fh)
        if opened is None:
            return -errno.EBADF, 0
        start = time.perf_counter_ns()
        try:
            until = opened.load_for_c(offset, np.frombuffer(out, np.uint8), write)
        except ZarrfsError as exc:
            if exc.errno not in _QUIET_ERRNOS:
                self.report_once(f"read {path}", exc)
            return -exc.errno, 0
        except Exception:
            log.exception("read %s: unexpected error", path)
            return -errno.EIO, 0
        if until is None:
            self.read_times.record(start)  # answered here: C records the reads it copies
            return WRITTEN, 0
        return LOADED, until

    @_errno_boundary
    def release(self, path: str, fi: Any) -> int:
        with self._lock:
            opened = self._handles.pop(fi.fh, None)
        if opened is not None:
            opened.close()
        return 0

    # Every call that would change something is refused.
    write = truncate = create = mkdir = rmdir = unlink = rename = _read_only
    chmod = chown = setxattr = removexattr = symlink = link = utimens = mknod = _read_only


class ReplyBufferFUSE(mfusepy.FUSE):
    """mfusepy, with reads written straight into libfuse's reply buffer, the Python thread
    state of each libfuse thread kept from one request to the next, and reads of cached chunks
    (random ones, and a sequential stream's between readahead's steps) answered in C.

    mfusepy's own `read` takes the `bytes` an operation returns and memmoves
    them into the buffer libfuse will send: one more 1 MiB copy per request
    than needed. Here the operations' `read_into` fills that buffer itself.

    Every call from libfuse comes through `_wrapper`, in one of libfuse's own
    threads (or the main thread): without `keep_thread_state` each request
    would create and destroy a Python thread state, which costs about as
    much CPU as the rest of a small read's Python work.

    The read callback libfuse calls is `_fast_read.c`'s: it asks the engine's
    C path (engine/_cached_reads.c) first; a read that only lacks chunks comes
    to `load_for_c` once and is copied in C; every other read goes to
    mfusepy's callback, the Python path. mfusepy fills the
    operations table and mounts in one call, so the table is changed on its
    way to `fuse_main_real`.

    Without the compiled extensions (zarrfs/extensions.py, fuse/compiled.py)
    libfuse keeps mfusepy's callback, and thread states are made per request.
    """

    def __init__(self, operations: ZarrOperations, *args: Any, **kwargs: Any) -> None:
        extensions.log_once(log)
        fast_read, entry = compiled.fast_read, operations.tree.fast_read_entry()
        if fast_read is None or entry is None:  # no C path: mfusepy's read callback answers every read
            super().__init__(operations, *args, **kwargs)
            return
        real_main = mfusepy.fuse_main_real

        def main_with_fast_reads(argc: int, argv: Any, ops: Any, ops_size: int, data: Any) -> int:
            python_read = ops.contents.read  # mfusepy's callback object: C calls it while mounted
            try:
                address = fast_read.install(entry, ctypes.cast(python_read, ctypes.c_void_p).value,
                                            mfusepy.fuse_file_info.fh.offset, operations.load_for_c)
            except RuntimeError:  # another mount of this process has it: this one keeps the Python path
                log.info("reads of this mount all take the Python path: another mount in this process "
                         "answers from cached chunks in C")
                return real_main(argc, argv, ops, ops_size, data)
            ops.contents.read = type(python_read)(address)
            try:
                return real_main(argc, argv, ops, ops_size, data)
            finally:
                fast_read.uninstall()  # libfuse's loop is over: nothing calls the callback any more

        mfusepy.fuse_main_real = main_with_fast_reads
        try:
            super().__init__(operations, *args, **kwargs)
        finally:
            mfusepy.fuse_main_real = real_main

    def _wrapper(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        compiled.keep_thread_state()
        return super()._wrapper(func, *args, **kwargs)

    def getattr_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
        """The stat's bytes copied into libfuse's buffer (`stat_image`): mfusepy's own clears the buffer
        and sets each field of a dict the operation returns, most of a lookup's Python time."""
        if path is None:  # an open file's fstat with no path (libfuse's nullpath_ok): mfusepy's way
            return super().getattr_fuse_3(path, buf, fip)
        image = self.operations.stat_image(path.decode(self.encoding, self.errors))
        ctypes.memmove(buf, image, len(image))
        return 0

    def read(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
        out = np.frombuffer((ctypes.c_char * size).from_address(ctypes.addressof(buf.contents)), np.uint8)
        name = None if path is None else path.decode(self.encoding, self.errors)
        return self.operations.read_into(name, out, offset, fip.contents)
