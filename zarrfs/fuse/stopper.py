"""A bounded stop: once the FUSE loop is asked to end, the process ends within a grace period.

libfuse's signal handler (SIGTERM, SIGINT, SIGHUP) marks the session as
exited, and the loop then joins every worker thread: a worker inside a read
that waits on a slow store (an HTTP request with its timeouts and retries)
would hold the stop for minutes. A watcher thread polls the session's exit
flag; from the moment it is set the loop gets `grace` seconds to return and
the process `grace` more to end. Past that the watcher detaches the mount and
ends the process: the kernel then fails the abandoned reads with ENOTCONN
instead of leaving their callers blocked.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, NoReturn

from .connections import abort, connection_of

log = logging.getLogger(__name__)

GRACE_SECONDS = 5.0
POLL_SECONDS = 0.1  # the watcher wakes 10 times a second: negligible, and a stop starts within 0.1 s
# Sent to the main thread once the loop should end: libfuse's loop sleeps in
# sem_wait there, and only a signal delivered to that thread interrupts it;
# libfuse's own handler may have run on another thread (any thread that does
# not block the signal can take it), leaving the main thread asleep.
WAKE_SIGNAL = signal.SIGUSR1


class Stopper:
    """Call `prepare()` in the main thread before the FUSE loop, `attach()` from FUSE's init
    callback, `detached()` from its destroy callback and `finished()` once the loop returned."""

    def __init__(self, mountpoint: str, grace: float = GRACE_SECONDS) -> None:
        self.mountpoint = mountpoint
        self.grace = grace
        self._lock = threading.Lock()  # held while reading libfuse's session: destroy waits for it
        self._session: int | None = None
        self._exited: Any = None
        self._returned = threading.Event()
        self._main: int | None = None

    def prepare(self) -> None:
        # libfuse takes a stop signal only where its disposition is the default
        # (a shell starts background jobs with SIGINT ignored); SIGHUP stays as
        # the caller left it, so `nohup` keeps working.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(WAKE_SIGNAL, lambda *_: None)  # its only job: interrupt the main thread's wait
        self._main = threading.main_thread().ident

    def attach(self, libfuse: Any, fuse: int) -> None:
        """In FUSE's init callback: watch the session of `fuse` (a `struct fuse *`)."""
        libfuse.fuse_get_session.restype = ctypes.c_void_p
        libfuse.fuse_get_session.argtypes = [ctypes.c_void_p]
        libfuse.fuse_session_exited.restype = ctypes.c_int
        libfuse.fuse_session_exited.argtypes = [ctypes.c_void_p]
        self._exited = libfuse.fuse_session_exited
        self._session = libfuse.fuse_get_session(fuse)
        threading.Thread(target=self._watch, name="zarrfs-stop", daemon=True).start()

    def detached(self) -> None:
        """In FUSE's destroy callback: the session is about to be freed; stop reading it."""
        with self._lock:
            self._session = None

    def finished(self) -> None:
        """The FUSE loop returned: the process gets `grace` seconds to end.

        Loads still running on a slow store would otherwise hold the exit
        (Python joins the loader threads at exit).
        """
        self._returned.set()
        threading.Thread(target=self._end_in_time, name="zarrfs-exit", daemon=True).start()

    # ------------------------------------------------------------- threads

    def _exiting(self) -> bool | None:
        """The session's exit flag; None once the session is gone."""
        with self._lock:
            return None if self._session is None else bool(self._exited(self._session))

    def _watch(self) -> None:
        while True:
            exiting = self._exiting()
            if exiting is None:
                return
            if exiting:
                break
            time.sleep(POLL_SECONDS)
        log.info("unmounting; reads in progress get %.0f s to finish", self.grace)
        if self._main is not None:
            signal.pthread_kill(self._main, WAKE_SIGNAL)
        if not self._returned.wait(self.grace):
            self._force(f"reads still waiting {self.grace:.0f} s after the stop began")

    def _end_in_time(self) -> None:
        time.sleep(self.grace)
        log.warning("exit held %.0f s by loads still waiting on the store; abandoning them", self.grace)
        end_process(0)

    def _force(self, reason: str) -> None:
        """Detach the mount and end the process now; pending reads get ENOTCONN."""
        log.warning("stopping: %s; abandoning them and detaching %s", reason, self.mountpoint)
        # Aborted first: the abandoned reads fail now, whatever still holds the connection open.
        number = connection_of(self.mountpoint)
        if number is not None:
            abort(number)
        detach(self.mountpoint)
        end_process(0)


def end_process(code: int) -> NoReturn:
    """End the daemon now, after its log, without the interpreter's finalization.

    Finalization flushes C stdio, and that can wait forever: when the loop
    ends libfuse cancels its worker threads, and a worker cancelled while
    inside perror() (it reports a failed read of /dev/fuse, which the kernel
    returns when an unmount races a request in flight) never releases glibc's
    stderr lock. Seen after `unmount --lazy`: the mount was gone, the daemon
    stayed. Nothing is lost by skipping finalization: the engine is closed.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader gone: nothing more to say there
            pass
    os._exit(code)


def detach(mountpoint: str) -> None:
    """Lazy unmount, quietly: a mount point that is not mounted is fine."""
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    command = [tool, "-u", "-z", "-q", mountpoint] if tool else ["umount", "-l", mountpoint]
    subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
