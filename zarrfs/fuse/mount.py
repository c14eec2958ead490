"""Mount lifecycle: check the mount point, serve in the foreground or as a daemon, unmount.

Background mode runs the daemon as a fresh `zarrfs mount --foreground`
process (no fork of a process that may already have threads: fsspec starts
an event-loop thread on first use). The child reports over a pipe:
`MOUNTED <major:minor>` once the kernel mount exists, then `READY` (the root's
metadata was read before mounting), or `ERROR <message>` before giving up; the parent returns only
then, and clears what a daemon that failed or died left behind.
"""

from __future__ import annotations

import errno
import fcntl
import grp
import logging
import os
import pwd
import resource
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ZarrfsError
from ..memory import (
    HeapTrimmer,
    allocator_environment,
    memory_figures,
    trim_slack,
    tune_process,
)
from ..options import DEFAULT_MAX_OPEN_STORES, READY_TIMEOUT_SECONDS, EngineOptions
from .mountpoints import device, fstype, holders
from .connections import abort, answers, connection_number, connection_of, waiting
from .stopper import GRACE_SECONDS, Stopper, detach

log = logging.getLogger(__name__)

READY_TIMEOUT = READY_TIMEOUT_SECONDS  # seconds the parent waits for the daemon's READY
# In the environment of a daemon that restarted itself for the allocator's settings. glibc strips
# GLIBC_TUNABLES from the environment of a program it runs in secure mode (AT_SECURE: a setuid or
# setgid interpreter, or one with file capabilities): there the restarted daemon finds the
# settings missing again, and without this mark it would restart itself forever.
ALLOCATOR_RESTARTED = "ZARRFS_ALLOCATOR_RESTARTED"


class MountError(ZarrfsError):
    errno = errno.EINVAL


@dataclass(frozen=True)
class MountOptions:
    source: str  # with `catalog`, only what logs call the mount
    mountpoint: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    engine: EngineOptions = field(default_factory=EngineOptions)
    suffixes: tuple[str, ...] = ()
    allow_other: bool = False
    fuse_options: tuple[str, ...] = ()  # extra -o options, 'key' or 'key=value'
    attr_timeout: float = 3600.0
    catalog: str | None = None  # --catalog FILE: its named sources, each a top-level directory
    max_open_stores: int = DEFAULT_MAX_OPEN_STORES  # a mount of many stores (files/share.py)


# ------------------------------------------------------------------ checks


def check_mountpoint(path: str) -> None:
    """Refuse, with what to do next, a mount point that cannot take a mount.

    A stale zarrfs mount (its daemon was killed) is cleared instead: that is
    what the user would do next anyway. Another file system's stale mount is
    left alone. A zarrfs mount is looked at from a child process first: one
    whose daemon is stuck would hold this process forever.
    """
    if fstype(path) == "fuse.zarrfs" and answers(path) is None:
        raise MountError(f"{path} is a zarrfs mount that does not answer (its daemon is stuck or gone): "
                         f"clear it with `zarrfs unmount {path}`")
    try:
        os.stat(path)
        os.statvfs(path)  # never answered from the kernel's caches: a stale mount fails here
    except FileNotFoundError:
        raise MountError(f"mount point {path} does not exist: create it with `mkdir -p {path}`") from None
    except OSError as exc:
        # ECONNABORTED while the kernel is still aborting the dead daemon's connection, ENOTCONN after.
        if exc.errno not in (errno.ENOTCONN, errno.ECONNABORTED):
            raise MountError(f"cannot use mount point {path}: {exc.strerror}") from None
        kind = fstype(path)
        if kind != "fuse.zarrfs":
            raise MountError(f"{path} is a stale {kind or 'FUSE'} mount (its daemon died): unmount it first "
                             f"(`fusermount3 -u {path}`)") from None
        unmount(path)
        log.debug("cleared the stale zarrfs mount on %s (its daemon had died)", path)
        return check_mountpoint(path)
    if not os.path.isdir(path):
        raise MountError(f"mount point {path} is not a directory")
    if os.path.ismount(path):
        raise MountError(f"{path} is already a mount point: unmount it first (`zarrfs unmount {path}`)")
    if os.listdir(path):
        raise MountError(f"mount point {path} is not empty: use an empty directory")


def claim_mountpoint(path: str) -> None:
    """Lock the mount point's directory for the life of this process.

    Two `zarrfs mount` started at once on one directory would both pass the
    checks and stack two mounts. The lock is on the directory under the
    mount; a later `zarrfs mount` opens the mounted root instead, but its
    check finds the mount. The descriptor stays open on purpose until exit.
    """
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise MountError(f"{path} is being mounted by another zarrfs process") from None


def load_fuse_binding() -> Any:
    """mfusepy on libfuse 3 (on Linux; elsewhere the library mfusepy finds: macFUSE, FUSE-T, FreeBSD's
    libfuse 2), or an error that says which package to install."""
    if sys.platform.startswith("linux"):
        os.environ.setdefault("FUSE_LIBRARY_NAME", "fuse3")
    try:
        import mfusepy
    except (OSError, ImportError) as exc:
        raise MountError(
            f"libfuse 3 is not available ({exc}): install it with `sudo apt-get install fuse3` "
            "(Debian/Ubuntu) or `sudo dnf install fuse3` (Fedora)") from None
    check_fuse_device()
    return mfusepy


FUSE_DEVICE = "/dev/fuse"


def check_fuse_device(device: str = FUSE_DEVICE) -> None:
    """Refuse, with what to do next, a FUSE device this user cannot open.

    libfuse opens the device itself before it asks the setuid fusermount3 to
    mount, so a user without read/write access gets only libfuse's exit code.
    macOS has no such device (macFUSE and FUSE-T mount by their own helpers).
    """
    if sys.platform == "darwin":
        return
    if not os.path.exists(device):
        raise MountError(f"{device} is missing: load the fuse kernel module (`sudo modprobe fuse`); "
                         "in a container, start it with `--device /dev/fuse`")
    if os.access(device, os.R_OK | os.W_OK):
        return
    info = os.stat(device)
    owner, group = _account_name(pwd.getpwuid, info.st_uid), _account_name(grp.getgrgid, info.st_gid)
    raise MountError(
        f"this user cannot open {device} (mode {stat.S_IMODE(info.st_mode):04o}, owner {owner}, group {group}): "
        f"make it usable as Debian does by default (`sudo chmod 0666 {device}`), or add yourself to its "
        f"group (`sudo usermod -aG {group} $USER`, then log in again); in a container, pass the device "
        "through with `--device /dev/fuse`")


def _account_name(lookup: Callable[[int], Any], number: int) -> str:
    """The user or group name of `number` (pwd.getpwuid / grp.getgrgid), or the number when it has none."""
    try:
        return str(lookup(number)[0])
    except KeyError:
        return str(number)


# ----------------------------------------------------------- notifications


def sd_notify(message: str) -> None:
    """Tell systemd (Type=notify) about our state; a no-op outside systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(message.encode(), address)


# Kernel readahead of a mounted file, by where the store is (see raise_readahead).
READ_AHEAD_LOCAL_KB = 4096
READ_AHEAD_REMOTE_KB = 1024
# The readahead the daemon's INIT reply asks for: a little under the kernel's default for a new
# mount (128), so that the knob showing it tells the kernel has applied the reply (raise_readahead).
INIT_READ_AHEAD_KB = 124
# How long `raise_readahead` waits for the kernel to apply the INIT reply (it takes microseconds).
INIT_APPLIED_WAIT_S = 2.0
# Readahead requests the kernel keeps in flight, all open files together (its
# default is 12). Each holds a FUSE thread until answered, and a reader waiting
# on a slow store holds its requests for as long as the store takes.
MAX_BACKGROUND = 24
# FUSE threads: every request in flight holds one until it is answered. Up to
# the background limit of them are readahead; 8 more stay free for lookups,
# listings and direct reads while readers wait on a slow store. With 8
# threads (zarrfs's earlier setting) and the kernel's 12 readahead slots, 9
# readers stuck on a stalled HTTP store made `stat` of any other file wait out
# their timeouts (80 s); with 24 + 8, 10 stuck readers leave everything else
# answering at once (20 exhaust the readahead slots: reads of other files
# wait, lookups and listings do not).
FREE_THREADS = 8
# The price: a request in flight holds libfuse's 1 MiB reply buffer and its
# thread's 1 MiB receive buffer, outside the cache. So small budgets get fewer
# readahead slots: one per 4 MiB of budget, 4 to 24. A 16-reader soak
# (bench/soak.py) on a 16 MiB budget had 85 MiB of heap in use beyond the
# cache with 24 slots and 35-45 MiB with 8.
BUDGET_PER_BACKGROUND = 4 << 20
MIN_BACKGROUND = 4


# FUSE threads, once started, stay until the mount ends (max_idle_threads = max_threads). libfuse
# gives each thread a 1 MiB receive buffer from the heap when it starts (a request writes only its
# first page) and frees it when the thread ends. With 8 idle threads kept, the threads beyond them
# ended after each burst of requests and the next burst's new ones took their buffers from heap
# pages other blocks had just left resident: in HTTP soaks the 3 MiB daemon's quiet RSS stepped
# up 4-5 MiB at a time, its heap in use flat, a rise without end over a 30-minute run; with the
# threads kept it rose once, as they first started, and then stayed flat (bench/soak.py --http).
def fuse_concurrency(cache_bytes: int) -> tuple[int, int]:
    """(readahead requests in flight, FUSE threads) for a daemon with this cache budget."""
    background = max(MIN_BACKGROUND, min(MAX_BACKGROUND, cache_bytes // BUDGET_PER_BACKGROUND))
    return background, background + FREE_THREADS


def raise_readahead(mountpoint: str, kilobytes: int) -> None:
    """Let page-cache reads reach the daemon as 1 MiB requests, several at once.

    The kernel sizes FUSE readahead from the mount's bdi `read_ahead_kb`
    (default 128); 1 MiB is libfuse 3's largest request. Measured with
    bench/fuse_probe.py: 1024 gives 8x fewer requests and less daemon CPU
    per GiB than 128. 4096 keeps up to four 1 MiB requests in flight, so both
    FUSE threads of a 2-vCPU machine have one: cold `dd` of a local store
    5-10% faster than with 1024 (blosc-lz4, uncompressed; zstd unchanged);
    16384 was no faster. Remote stores keep 1024: a reader waiting on a slow
    store holds every readahead request it has in flight, and four per reader
    used up the kernel's readahead slots with as few as 2 stuck readers.
    Needs root; others keep the default.

    Called as the daemon's FUSE init runs, before its reply reaches the
    kernel: the kernel then sets the knob to the smaller of its value and the
    reply's `max_readahead`, which would undo a value written before. So it
    waits until the knob shows the reply's INIT_READ_AHEAD_KB first.
    """
    bdi = device(mountpoint)
    if bdi is None:
        return
    try:
        set_after_init(Path(f"/sys/class/bdi/{bdi}/read_ahead_kb"), kilobytes)
    except (OSError, ValueError) as exc:
        log.info("kept the kernel's default readahead for %s (%s)", mountpoint, getattr(exc, "strerror", exc))


# The daemon's soft limit on open descriptors, raised up to its hard limit (never lowered): the
# C read path keeps up to a quarter of it in chunk files (engine/served.py), beside the stores'
# connections and open files. systemd's default soft limit is 1024, its hard limit 524288 (soft
# 1024 is for programs that use select(); the daemon and libfuse never do).
OPEN_FILES_WANTED = 8192


def raise_open_file_limit(wanted: int = OPEN_FILES_WANTED) -> None:
    """Raise this process's soft RLIMIT_NOFILE to `wanted`, or to the hard limit if that is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.info("kept the open-file limit of %d (%s)", soft, exc)


def set_after_init(knob: Path, kilobytes: int) -> None:
    """Write `kilobytes` to a mount's `read_ahead_kb` once it shows INIT_READ_AHEAD_KB (the kernel
    has applied the INIT reply), or INIT_APPLIED_WAIT_S from now."""
    deadline = time.monotonic() + INIT_APPLIED_WAIT_S
    # (A knob caught while being written reads empty: not applied yet.)
    while knob.read_text().strip() != str(INIT_READ_AHEAD_KB) and time.monotonic() < deadline:
        time.sleep(0.001)
    knob.write_text(str(kilobytes), encoding="ascii")


# ------------------------------------------------------------------- serve


def serve(options: MountOptions, report: Callable[[str], None] | None = None) -> int:
    """Mount and serve until unmounted or signalled; `report` gets READY or ERROR lines."""
    report = report or (lambda _: None)
    # libfuse chdirs to / once mounted (even in the foreground), so a relative
    # mount point would no longer name the mount when `ready` looks at it.
    mountpoint = os.path.abspath(options.mountpoint)
    stopper = Stopper(mountpoint)
    try:
        check_mountpoint(options.mountpoint)
        claim_mountpoint(options.mountpoint)
        check_mountpoint(options.mountpoint)  # again: another mount may have won before the claim
        raise_open_file_limit()  # before the tree: its engines size their open files from it
        mfusepy = load_fuse_binding()
        from ..files.share import open_mount_tree
        from .ops import ReplyBufferFUSE, ZarrOperations

        # Fails here, before mounting, if SOURCE is neither Zarr nor a folder of anything.
        tree = open_mount_tree(options.source, options.storage_options, options.engine, options.suffixes,
                               options.catalog, options.max_open_stores)
        tree.stats_extras["memory"] = memory_figures
    except ZarrfsError as exc:
        report(f"ERROR {exc}")
        raise

    served = threading.Event()
    trimmer = HeapTrimmer(trim_slack(options.engine.cache_bytes))

    def ready() -> None:
        # libfuse's init ran, so the kernel mount exists: a signal from now on is a normal stop.
        served.set()
        # The parent's handle on this mount's FUSE connection, should it have to clear it.
        report(f"MOUNTED {device(mountpoint)}")
        # Ready once the kernel mount exists: the root's metadata was read before mounting (of_source), so
        # the root answers at once. Its listing (each child's metadata: 10,000 arrays take seconds) is not
        # waited for; it starts now in the background and a first `ls` joins it (VirtualTree.listdir).
        # Built from the operations themselves, never through the mount point: a request from one of our
        # own threads to our own mount, caught by a stop, waits forever uninterruptibly and holds the
        # FUSE device open, so that the connection outlives the daemon.
        threading.Thread(target=list_root_ahead, name="zarrfs-root-listing", daemon=True).start()
        raise_readahead(mountpoint, READ_AHEAD_LOCAL_KB if tree.source_is_local() else READ_AHEAD_REMOTE_KB)
        trimmer.start()  # a thread: only now, in the daemon (see memory.py)
        log.info("mounted %s on %s", tree.source_display_name(), mountpoint)
        sd_notify("READY=1")
        report("READY")

    def list_root_ahead() -> None:
        try:
            operations.readdir("/", None)
        except OSError:
            pass  # logged at the operations' boundary; whoever lists the root gets the error too

    class Operations(ZarrOperations):
        def init_with_config(self, conn: Any, config: Any) -> None:
            # FUSE's init context is the one place that knows its `struct fuse`.
            stopper.attach(mfusepy._libfuse, mfusepy._libfuse.fuse_get_context().contents.fuse)
            super().init_with_config(conn, config)

        def destroy(self, path: str) -> None:
            stopper.detached()

    tune_process()
    background, threads = fuse_concurrency(options.engine.cache_bytes)
    operations = Operations(tree, attr_timeout=options.attr_timeout, on_ready=ready, max_background=background,
                            max_readahead=INIT_READ_AHEAD_KB << 10)
    fuse_kwargs: dict[str, Any] = {"ro": True, "fsname": f"zarrfs:{tree.source_display_name()}"[:200],
                                   "subtype": "zarrfs", "default_permissions": True,
                                   # FUSE threads, once started, stay: see fuse_concurrency.
                                   "max_threads": threads, "max_idle_threads": threads,
                                   # fusermount3 stays as a watchdog that unmounts once the daemon is gone,
                                   # however it ended (kill -9 included): no mount is left without one.
                                   "auto_unmount": True}
    if options.allow_other:
        fuse_kwargs["allow_other"] = True
    for option in options.fuse_options:
        key, sep, value = option.partition("=")
        fuse_kwargs[key] = value if sep else True
    # libfuse handles SIGINT/SIGTERM/SIGHUP (exit the loop, then unmount); the
    # stopper bounds how long that may take.
    stopper.prepare()
    try:
        ReplyBufferFUSE(operations, mountpoint, foreground=True, raw_fi=True, **fuse_kwargs)
    except RuntimeError as exc:
        # libfuse's loop reports the signal that ended it as an error, and so a
        # read of /dev/fuse that the kernel failed as it tore the mount down.
        # After a successful mount both are normal ways to stop.
        if not served.is_set():
            message = (f"mounting {options.mountpoint} failed (libfuse error {exc}); libfuse's own message is "
                       "in the log (--log-file), or on the terminal with --foreground")
            report(f"ERROR {message}")
            raise MountError(message) from None
        log.info("the FUSE loop ended (a stop signal, or the kernel closed the connection)")
    finally:
        trimmer.stop()
        stopper.finished()
        sd_notify("STOPPING=1")
        log.info("unmounted %s; %s", mountpoint, tree.close())
    return 0


def daemon_interpreter() -> list[str]:
    """The command that starts the installed zarrfs package, and nothing else, in a new interpreter.

    `python -m zarrfs` alone puts the caller's working directory first on
    sys.path: a `zarrfs/` or `zarrfs.py` there (a checkout without the built
    extension, or a file planted in a shared directory) would run instead of
    the installed package, with the mounting user's rights. `-P` (Python
    3.11+, "safe path") leaves that directory out; everything else on the
    path is what the caller's own interpreter imported zarrfs from.
    """
    return [sys.executable, "-P", "-m", "zarrfs"]


def restart_with_allocator_environment(argv: list[str], ready_fd: int | None) -> None:
    """Start this daemon afresh, in the same process, if its allocator runs without the settings
    memory.py's `allocator_environment` gives; return if it has them.

    glibc reads them only when a process starts. A background mount starts its
    daemon with them (`spawn_daemon`); a daemon started in the foreground (by
    systemd, or by hand) replaces itself once, before anything else: the same
    PID (what systemd watches), the same arguments, `ready_fd` kept open.
    Once only: a daemon restarted already serves with what glibc gave it.
    """
    environ = allocator_environment(os.environ)
    if environ is None:
        return
    if ALLOCATOR_RESTARTED in os.environ:
        log.warning("kept glibc's default allocator settings: GLIBC_TUNABLES was dropped when this daemon "
                    "restarted to set them (glibc ignores it for a setuid, setgid or capability-raising "
                    "interpreter)")
        return
    environ[ALLOCATOR_RESTARTED] = "1"
    if ready_fd is not None:
        os.set_inheritable(ready_fd, True)
    sys.stdout.flush()
    sys.stderr.flush()
    command = [*daemon_interpreter(), *argv]
    try:
        os.execve(command[0], command, environ)
    except OSError as exc:  # the interpreter cannot be run again: serve without the settings
        log.warning("kept glibc's default allocator settings: cannot restart %s (%s)", command[0], exc)


def spawn_daemon(argv: list[str], log_file: str | None, env: dict[str, str], mountpoint: str,
                 ready_timeout: float = READY_TIMEOUT) -> None:
    """Run `zarrfs mount ... --foreground` detached; return once it is READY, raise MountError if it failed.

    `env` is added to the daemon's environment (credentials moved out of its
    command line), not to this process's, and so are the allocator's settings.
    A daemon that failed, or did not become ready within `ready_timeout`
    seconds, is stopped and the mount it made cleared (`_stop_daemon`).
    """
    environ = {**os.environ, **env}
    environ = allocator_environment(environ) or environ
    read_fd, write_fd = os.pipe()
    stderr = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    try:
        process = subprocess.Popen(
            [*daemon_interpreter(), *argv, "--foreground", "--ready-fd", str(write_fd)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            pass_fds=(write_fd,), start_new_session=True, close_fds=True, env=environ,
        )
    finally:
        os.close(write_fd)
        if not isinstance(stderr, int):  # the log file opened above (DEVNULL is a constant)
            stderr.close()
    report = _read_report(read_fd, ready_timeout)
    if report.ready:
        return
    if report.error is not None:
        message = report.error
    elif process.poll() is None:
        message = f"the daemon did not become ready within {ready_timeout:g} s; stopped it"
    else:
        message = f"the daemon exited with status {process.returncode} before the mount was ready (see --log-file)"
    _stop_daemon(process, os.path.abspath(mountpoint), report.device)
    raise MountError(message)


@dataclass
class _Report:
    """What a daemon said over its pipe: the device of the mount it made, then READY or ERROR."""

    device: str | None = None  # 'major:minor'
    ready: bool = False
    error: str | None = None


def _read_report(fd: int, timeout: float) -> _Report:
    report = _Report()

    def read() -> None:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as pipe:
            for line in pipe:
                word, _, rest = line.strip().partition(" ")
                if word == "MOUNTED":
                    report.device = rest if rest != "None" else None
                elif word == "READY":
                    report.ready = True
                    return
                elif word == "ERROR":
                    report.error = rest
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)  # the pipe ends early if the daemon dies: nothing else holds its end
    return report


# A daemon that failed gets this long to stop by itself (its stopper's two grace periods: the FUSE
# loop's and the process's), then this long after kill -9 for the kernel to end it.
STOP_SECONDS = 2 * GRACE_SECONDS + 1.0
KILL_SECONDS = 2.0


def _stop_daemon(process: subprocess.Popen, mountpoint: str, majmin: str | None) -> None:
    """End a daemon that failed, and clear the mount it reported making (`majmin`) if it is still there.

    A daemon stuck in a request to its own mount does not even die of
    kill -9 until its connection is aborted, so a daemon still there after
    its grace has its connection aborted first. Only the mount the daemon
    itself reported is touched: a failed daemon may have lost the mount
    point to another zarrfs daemon, whose mount stays.
    """
    number = None if majmin is None else connection_number(majmin)
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            if number is not None:
                abort(number)
            process.kill()
            try:
                process.wait(KILL_SECONDS)
            except subprocess.TimeoutExpired:
                log.warning("the daemon (pid %d) did not end after kill -9", process.pid)
    if majmin is not None and device(mountpoint) == majmin:
        abort(connection_number(majmin))
        detach(mountpoint)


def report_to_fd(fd: int) -> Callable[[str], None]:
    # Not inherited by what the daemon starts (fusermount3 stays running as its watchdog): the parent
    # learns that the daemon died from the end of this pipe.
    os.set_inheritable(fd, False)

    def report(line: str) -> None:
        try:
            os.write(fd, (line + "\n").encode())
        except OSError:
            pass  # the parent is gone; nothing to tell

    return report


# ----------------------------------------------------------------- unmount


def unmount(mountpoint: str, lazy: bool = False) -> None:
    if _abort_if_unanswered(mountpoint):
        lazy = True  # nothing can use a mount whose connection is aborted: detach it even if held
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    command = [tool, "-u"] + (["-z"] if lazy else []) + [mountpoint] if tool else \
        ["umount"] + (["-l"] if lazy else []) + [mountpoint]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode == 0:
        return
    detail = result.stderr.strip()
    if "busy" in detail.lower():
        users = holders(mountpoint)
        cause = f"in use by {', '.join(users)}" if users else "files on it are open or a shell is inside it"
        raise MountError(f"{mountpoint} is busy: {cause}. "
                         f"Close them, or detach anyway with `zarrfs unmount --lazy {mountpoint}`")
    if "not found in" in detail or "not mounted" in detail or "Invalid argument" in detail:
        raise MountError(f"{mountpoint} is not mounted")
    raise MountError(f"unmounting {mountpoint} failed: {detail}")


def _abort_if_unanswered(mountpoint: str) -> bool:
    """Abort the FUSE connection of a zarrfs mount that has requests waiting and does not answer.

    Its daemon is gone (a thread of it stuck keeps the connection open) or
    stuck: the processes waiting on it would wait forever, and hold the mount
    busy. True if it was aborted. A mount with nothing waiting unmounts as it
    is (the kernel aborts the connection of a mount it takes down).
    """
    if fstype(mountpoint) != "fuse.zarrfs":
        return False
    number = connection_of(mountpoint)
    if number is None or not waiting(number) or answers(mountpoint) is not None:
        return False
    if not abort(number):
        return False
    log.warning("%s did not answer with requests waiting on it: aborted its FUSE connection", mountpoint)
    return True
