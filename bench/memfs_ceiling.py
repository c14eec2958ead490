#!/usr/bin/env python3
"""Python FUSE ceiling: one read-only in-memory file, served with zarrfs's FUSE settings.

    python bench/memfs_ceiling.py MOUNTPOINT [--size 1G] [--content FILE] [--direct-io]
                                             [--foreground] [--nothreads]

Mounts a directory holding a single file, ``file``, of ``--size`` bytes whose
content is ``np.arange(n, dtype="<u8")`` (little-endian uint64 counter,
truncated to ``--size`` bytes), or a copy of FILE's bytes (``--content``).
``--direct-io`` opens it as zarrfs opens its tiled TIFFs: every read reaches
the daemon, no page cache and no kernel readahead. Nothing is computed per read: ``read()``
hands libfuse a zero-copy ctypes view of the preallocated buffer, so this is
the fastest a mfusepy file system can serve bytes on this machine, the peer
zarrfs is benchmarked against. Like zarrfs it keeps each libfuse thread's
Python thread state across requests (zarrfs/fuse/_threadstate.c): without
that, every request creates and destroys one, which zarrfs does not pay.

Without ``--foreground`` the command returns once the file system is mounted
and initialised (exit status 0), or fails with libfuse's message (status 1).
Stop it with ``fusermount3 -u MOUNTPOINT`` or SIGTERM/SIGINT to the daemon;
``auto_unmount`` removes the mount even if the daemon is killed with SIGKILL.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import re
import stat
import subprocess
import sys
import time
from typing import Any

import mfusepy
import numpy as np
from zarrfs.fuse._threadstate import keep as keep_thread_state

FILE = "/file"

# FUSE settings shared with zarrfs (measured in bench/fuse_probe.py):
#   ro + read-only open flags: nothing is writable.
#   auto_unmount: fusermount3 removes the mount when the daemon dies, even by SIGKILL.
#   default_permissions: the kernel checks modes itself (no access() round trips).
# (libfuse 3.14.0 prints "Ignoring invalid max threads value 4294967295" whatever the options: harmless.)
FUSE_OPTIONS: dict[str, Any] = {"ro": True, "default_permissions": True, "auto_unmount": True}
CACHE_TIMEOUT = 3600.0  # s; attr/entry/negative cache timeouts: the tree never changes while mounted
# bdi read-ahead (default 128 KiB): page-cache reads then reach read() as 1 MiB requests (the
# max_pages cap) with up to 4 in flight, which the multithreaded loop serves concurrently.
READ_AHEAD_KB = 4096


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMGT]?)(?:i?B)?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 4096, 512M, 1G)")
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2).upper() or " "))


def mount_device(mountpoint: str) -> str | None:
    """The 'major:minor' of the mount at mountpoint, from mountinfo (never touches the mount itself)."""
    with open("/proc/self/mountinfo") as f:
        devices = [fields[2] for fields in map(str.split, f) if fields[4] == mountpoint]
    return devices[-1] if devices else None  # the last one is the topmost mount


class MemFile(mfusepy.Operations):
    """Directory with one read-only file served from a preallocated buffer."""

    use_ns = True

    def __init__(self, size: int, mountpoint: str, ready_fd: int | None = None, content: str | None = None,
                 direct_io: bool = False) -> None:
        self.size = os.path.getsize(content) if content else size
        self.mountpoint = mountpoint
        self.ready_fd = ready_fd
        self.direct_io = direct_io
        self.destroyed = False
        words = (self.size + 7) // 8
        # bytearray (writable) so read() can alias it with ctypes.from_buffer; filled in
        # blocks so that no 1 GiB temporary is allocated and freed.
        self.buf = bytearray(words * 8)
        if content:
            with open(content, "rb") as source:
                source.readinto(memoryview(self.buf)[:self.size])
        else:
            view = np.frombuffer(self.buf, dtype="<u8")
            block = 1 << 23
            for start in range(0, words, block):
                stop = min(start + block, words)
                view[start:stop] = np.arange(start, stop, dtype="<u8")
            del view
        self.mtime_ns = time.time_ns()  # stable: a changing mtime makes the kernel drop the page cache

    # -- lifecycle --------------------------------------------------------------------------

    def init_with_config(self, conn: Any, config: Any) -> None:
        # Page-cache policy is set per open (fi.keep_cache); config.kernel_cache = 1 would force it on all.
        config.attr_timeout = config.entry_timeout = config.negative_timeout = CACHE_TIMEOUT
        config.use_ino = 1  # st_ino from getattr/readdir reaches stat()/readdir()
        # The kernel sets the bdi read-ahead to min(current, max_readahead) when it gets this INIT
        # reply, so raise both. The mount is listed by now; do not stat() it (it would wait on us).
        conn.max_readahead = READ_AHEAD_KB * 1024
        dev = mount_device(self.mountpoint)
        try:
            if dev is None:
                raise OSError(errno.ENOENT, "mount not in /proc/self/mountinfo")
            with open(f"/sys/class/bdi/{dev}/read_ahead_kb", "w") as f:
                f.write(str(READ_AHEAD_KB))
        except OSError as exc:  # e.g. not root: the kernel keeps its 128 KiB default
            print(f"memfs_ceiling: cannot raise read_ahead_kb: {exc}", file=sys.stderr)
        if self.ready_fd is not None:
            devnull = os.open(os.devnull, os.O_RDWR)  # detach from the parent's stderr pipe
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.close(devnull)
            os.write(self.ready_fd, b"1")
            os.close(self.ready_fd)
            self.ready_fd = None

    def destroy(self, path: str) -> None:
        self.destroyed = True

    # -- metadata ---------------------------------------------------------------------------

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        if path == "/":
            mode, size, ino, nlink = stat.S_IFDIR | 0o555, 0, 1, 2
        elif path == FILE:
            mode, size, ino, nlink = stat.S_IFREG | 0o444, self.size, 2, 1
        else:
            raise mfusepy.FuseOSError(errno.ENOENT)
        t = self.mtime_ns
        return {"st_mode": mode, "st_size": size, "st_ino": ino, "st_nlink": nlink,
                "st_uid": os.getuid(), "st_gid": os.getgid(), "st_atime": t, "st_mtime": t, "st_ctime": t}

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        # With use_ino, entries need their st_ino: a bare name gets d_ino 0, which readdir(3) skips.
        return [(name, {"st_ino": ino, "st_mode": mode}, 0) for name, ino, mode in
                ((".", 1, stat.S_IFDIR), ("..", 1, stat.S_IFDIR), (FILE[1:], 2, stat.S_IFREG))]

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": (self.size + 4095) // 4096, "f_namemax": 255}

    # -- data -------------------------------------------------------------------------------

    def open(self, path: str, fi: Any) -> int:  # raw_fi=True: fi is the fuse_file_info struct
        if path != FILE:
            raise mfusepy.FuseOSError(errno.ENOENT)
        if fi.flags & os.O_ACCMODE != os.O_RDONLY:
            raise mfusepy.FuseOSError(errno.EROFS)
        # Page cache on (mmap works, rereads are free, kept across opens), unless --direct-io.
        fi.direct_io = int(self.direct_io)
        fi.keep_cache = 1 - fi.direct_io
        return 0

    def read(self, path: str, size: int, offset: int, fi: Any) -> Any:
        keep_thread_state()
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        # A ctypes array aliasing the buffer: mfusepy memmoves it straight into libfuse's
        # reply buffer (bytes would cost an extra allocation and copy per request).
        return (ctypes.c_char * (end - offset)).from_buffer(self.buf, offset)


def serve(mountpoint: str, size: int, nothreads: bool, ready_fd: int | None, content: str | None = None,
          direct_io: bool = False) -> int:
    if ready_fd is not None:
        os.set_inheritable(ready_fd, False)  # keep it out of fusermount3 (auto_unmount watchdog)
    fs = MemFile(size, mountpoint, ready_fd, content, direct_io)
    try:
        mfusepy.FUSE(fs, mountpoint, raw_fi=True, foreground=True, nothreads=nothreads,
                     fsname="memfs_ceiling", subtype="memfs_ceiling", **FUSE_OPTIONS)
    except RuntimeError as exc:
        # libfuse 3.14's fuse_main returns 8 when SIGTERM/SIGINT/SIGHUP ended the loop; it has
        # unmounted and called destroy() by then, so that is a normal stop.
        if not fs.destroyed:
            print(f"memfs_ceiling: libfuse failed with status {exc}", file=sys.stderr)
            return 1
    return 0


def daemonize(argv: list[str], mountpoint: str) -> int:
    """Start the daemon as a new session and return once it has mounted and initialised.

    A fresh interpreter (not fork and not mfusepy's foreground=False, whose fork inside
    libfuse leaves the Python runtime in an undefined state if any thread exists)."""
    ready_r, ready_w = os.pipe()
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--foreground", "--ready-fd", str(ready_w)]
    proc = subprocess.Popen(cmd, pass_fds=(ready_w,), start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as ready:
        ok = ready.read(1) == b"1"  # EOF (b"") if the daemon died before init
    assert proc.stderr is not None
    if ok:
        # Relay what the daemon said before it detached (warnings); do not wait for more:
        # fusermount3's auto_unmount watchdog inherited the pipe and keeps it open.
        os.set_blocking(proc.stderr.fileno(), False)
        try:
            sys.stderr.write(os.read(proc.stderr.fileno(), 1 << 16).decode(errors="replace"))
        except BlockingIOError:
            pass
        proc.stderr.close()
        print(f"memfs_ceiling: mounted {mountpoint} (pid {proc.pid})", file=sys.stderr)
        return 0
    _, err = proc.communicate()
    sys.stderr.write(err.decode(errors="replace"))
    print(f"memfs_ceiling: mount failed (exit status {proc.returncode})", file=sys.stderr)
    return 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mountpoint")
    p.add_argument("--size", type=parse_size, default=1 << 30, help="file size, e.g. 1G (default), 256M")
    p.add_argument("--content", help="serve a copy of this file's bytes (the size is its size)")
    p.add_argument("--direct-io", action="store_true", help="open with direct I/O, as zarrfs's tiled TIFFs")
    p.add_argument("--foreground", action="store_true", help="serve in this process until unmounted")
    p.add_argument("--nothreads", action="store_true", help="single-threaded libfuse loop (-s)")
    p.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    mountpoint = os.path.realpath(args.mountpoint)  # as mountinfo lists it; libfuse chdir("/")s
    if mount_device(mountpoint) is not None:  # libfuse would stack a second mount on top
        p.error(f"{mountpoint} is already a mount point (stale? fusermount3 -u {mountpoint})")
    if args.foreground:
        return serve(mountpoint, args.size, args.nothreads, args.ready_fd, args.content, args.direct_io)
    argv = [mountpoint, "--size", str(args.size)] + (["--nothreads"] if args.nothreads else []) \
        + (["--content", os.path.abspath(args.content)] if args.content else []) \
        + (["--direct-io"] if args.direct_io else [])
    return daemonize(argv, mountpoint)


if __name__ == "__main__":
    sys.exit(main())
