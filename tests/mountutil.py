"""Really mount zarrfs for a test: start the daemon, wait, always clean up, police its log.

`mounted(...)` runs `python -m zarrfs mount SOURCE MOUNTPOINT --log-file LOG`
the way a user does (background mode: the command returns once the mount is
usable), or with `foreground=True` starts the `--foreground` daemon itself
with Popen (for signal tests) and waits until the mount point lists.

Teardown, whatever the test did: `fusermount3 -u`, then `-u -z`, then SIGKILL
of the daemon this helper started (its PID comes from the Popen, or from
/proc for the daemon a background mount spawned for our unique mount point),
then a lazy unmount of whatever stale mount is left. The test then fails if
the daemon did not exit by itself after the unmount, or if its log holds a
line the test did not declare in `expected_log`: anything but the daemon's
own DEBUG/INFO records (so warnings, errors, tracebacks, stray stderr).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import pytest

MOUNT_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 10.0
FUSERMOUNT = "fusermount3"

# The daemon's own log records below WARNING (format of cli/mount_command._setup_logging):
# the only lines a test need not declare.
_QUIET_RECORD = re.compile(r"^\S+ \S+ zarrfs\[\d+\] (DEBUG|INFO) ")


def zarrfs_command(*args: str | os.PathLike) -> list[str]:
    # -P: the installed package, as the `zarrfs` command runs it, never a zarrfs/ in the working directory.
    return [sys.executable, "-P", "-m", "zarrfs", *map(str, args)]


def run_zarrfs(*args: str | os.PathLike, timeout: float = MOUNT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run the `zarrfs` command as a user would; never raises on a non-zero exit."""
    return subprocess.run(zarrfs_command(*args), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


# ------------------------------------------------------------ kernel and /proc


def mount_points() -> set[str]:
    """Mount points in the mount table (stale ones too, unlike os.path.ismount)."""
    with open("/proc/self/mounts", encoding="utf-8") as table:
        # Spaces and other specials are octal escapes (\040) in the table.
        return {re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[1]) for line in table}


def is_mounted(path: Path) -> bool:
    return os.path.realpath(path) in mount_points()


def daemon_pids(mountpoint: Path) -> list[int]:
    """PIDs of `zarrfs mount ... --foreground` processes serving `mountpoint`.

    The mount point is a fresh per-test directory, so matching it names only
    daemons this test started.
    """
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # exited meanwhile
            continue
        words = [a.decode(errors="replace") for a in argv]
        if "zarrfs" in words and "mount" in words and "--foreground" in words and str(mountpoint) in words \
                and pid_alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def watchdog_of(daemon: int) -> int:
    """The fusermount3 that mounted for `daemon` and stays to unmount once it is gone (-o auto_unmount)."""
    children = Path(f"/proc/{daemon}/task/{daemon}/children").read_text().split()
    found = [int(c) for c in children if Path(f"/proc/{c}/comm").read_text().strip() == "fusermount3"]
    if len(found) != 1:
        raise RuntimeError(f"daemon {daemon} has children {children}, not one fusermount3")
    return found[0]


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def fusermount(path: Path, *, lazy: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FUSERMOUNT, "-u", *(["-z"] if lazy else []), str(path)],
                          capture_output=True, text=True, check=False)


# ----------------------------------------------------------------- the mount


@dataclass
class Mount:
    source: Path
    mountpoint: Path
    log: Path
    args: tuple[str, ...] = ()
    expected_log: tuple[str, ...] = ()
    foreground: bool = False
    cwd: Path | None = None  # where the command runs: lets SOURCE and MOUNTPOINT be relative
    pid: int | None = None  # the daemon's, once mounted
    process: subprocess.Popen | None = None  # foreground: the daemon; background: the mount command
    _log_stream: BinaryIO | None = field(default=None, repr=False)

    @property
    def root(self) -> Path:
        """The mount point as a path usable from the test process."""
        return (self.cwd or Path.cwd()) / self.mountpoint

    def __truediv__(self, relative: str) -> Path:
        return self.root / relative

    # ---------------------------------------------------------------- start

    def launch(self) -> None:
        """Start mounting without waiting (so that several mounts can start at once)."""
        command = zarrfs_command("--log-level", "info", "mount", self.source, self.mountpoint,
                                 "--log-file", self.log, *self.args)
        if self.foreground:
            # libfuse writes to stderr: keep it in the log that gets checked.
            self._log_stream = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
            command.append("--foreground")
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log_stream,
                                            stderr=self._log_stream, cwd=self.cwd)
        else:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, cwd=self.cwd)

    def wait_ready(self) -> None:
        """Background: the command's own wait, no polling here; foreground: until the mount lists."""
        assert self.process is not None
        if self.foreground:
            if not wait_until(self._foreground_ready, MOUNT_TIMEOUT_S):
                raise RuntimeError(f"zarrfs did not mount {self.root} within {MOUNT_TIMEOUT_S:.0f} s"
                                   f"{self._log_excerpt()}")
            self.pid = self.process.pid
            return
        try:
            out, err = self.process.communicate(timeout=MOUNT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
        # A successful mount says nothing; the daemon's words go to its log.
        if self.process.returncode != 0 or out or err:
            raise RuntimeError(f"`zarrfs mount {self.source} {self.mountpoint}` exited "
                               f"{self.process.returncode}: {out}{err.strip()}{self._log_excerpt()}")
        pids = daemon_pids(self.mountpoint)
        if len(pids) != 1:
            raise RuntimeError(f"expected one daemon serving {self.mountpoint}, found {pids}")
        self.pid = pids[0]

    def _foreground_ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the zarrfs daemon exited {self.process.returncode} before mounting"
                               f"{self._log_excerpt()}")
        try:
            return is_mounted(self.root) and os.listdir(self.root) is not None
        except OSError:
            return False

    # ----------------------------------------------------------------- stop

    def stop(self) -> list[str]:
        """Unmount and end the daemon, whatever state the test left; return what went wrong."""
        problems = []
        if self.pid is not None and not pid_alive(self.pid):
            # A killed daemon's fusermount3 watchdog (auto_unmount) unmounts it: let it, not race it.
            wait_until(lambda: not is_mounted(self.root), 5)
        if is_mounted(self.root) and fusermount(self.root).returncode != 0:
            problems.append(f"{self.root} did not unmount cleanly (a file left open?); detached it")
            fusermount(self.root, lazy=True)
        for pid in self._our_daemons():
            if not wait_until(lambda: not pid_alive(pid), EXIT_TIMEOUT_S):
                problems.append(f"daemon {pid} still ran {EXIT_TIMEOUT_S:.0f} s after the unmount; killed it")
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda: not pid_alive(pid), EXIT_TIMEOUT_S)
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()  # reap our child
        if self._log_stream is not None:
            self._log_stream.close()
        if is_mounted(self.root):  # stale: its daemon was killed
            fusermount(self.root, lazy=True)
        problems += [f"unexpected daemon log line: {line}" for line in self.unexpected_log_lines()]
        return problems

    def _our_daemons(self) -> list[int]:
        # The recorded PID, plus any daemon on our private mount point that a
        # test started (a second mount); nothing else is ever signalled.
        found = set(daemon_pids(self.mountpoint))
        if self.pid is not None and pid_alive(self.pid):
            found.add(self.pid)
        return sorted(found)

    # ------------------------------------------------------------------ log

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines() if self.log.exists() else []

    def unexpected_log_lines(self) -> list[str]:
        allowed = [re.compile(p) for p in self.expected_log]
        return [line for line in self.log_lines()
                if line.strip() and not _QUIET_RECORD.match(line) and not any(p.search(line) for p in allowed)]

    def _log_excerpt(self) -> str:
        return "\n--- daemon log ---\n" + "\n".join(self.log_lines()[-30:])


@contextmanager
def mounted_many(mounts: Sequence[Mount]) -> Iterator[Sequence[Mount]]:
    """Start every mount at once, wait for all, and stop all on the way out.

    Fails the test (or fixture) if any daemon left a problem behind; when the
    body already failed, the problems are added to its error instead.
    """
    try:
        for mount in mounts:
            try:
                mount.root.mkdir(parents=True)
            except FileExistsError:
                pass  # (not `exist_ok`: its check stats the directory, which a stale mount on it fails)
            mount.launch()
        for mount in mounts:
            mount.wait_ready()
        yield mounts
    except BaseException as exc:
        problems = [p for mount in mounts for p in mount.stop()]
        if problems:
            exc.add_note("\n".join(problems))
        raise
    problems = [p for mount in mounts for p in mount.stop()]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@contextmanager
def mounted(source: Path, mountpoint: Path, log: Path, *args: str, expected_log: Sequence[str] = (),
            foreground: bool = False) -> Iterator[Mount]:
    """Mount `source` on `mountpoint` for the block; see the module docstring."""
    mount = Mount(Path(source), Path(mountpoint), Path(log), tuple(args), tuple(expected_log), foreground)
    with mounted_many([mount]):
        yield mount


def mount_in(tmp: Path, source: Path, *args: str, expected_log: Sequence[str] = (),
             foreground: bool = False, name: str = "mnt") -> Mount:
    """A not yet started Mount with its mount point and log under `tmp`."""
    return Mount(Path(source), tmp / name, tmp / f"{name}.log", tuple(args), tuple(expected_log), foreground)
