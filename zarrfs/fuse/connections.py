"""A mount's FUSE connection as the kernel shows it in fusectl (/sys/fs/fuse/connections/N).

A connection whose daemon is gone, or stuck, holds every process that asks
it something: the kernel waits for an answer that never comes, and a request
the daemon had already read waits uninterruptibly (not even kill -9 ends the
caller). Writing to the connection's `abort` file fails every such request
with ENOTCONN at once, and the mount can then be unmounted. N is the mount's
device number as the kernel encodes it (major << 20 | minor; FUSE mounts
take anonymous devices, major 0), the `major:minor` of /proc/self/mountinfo.

Nothing here touches a path on the mount itself: a probe of it runs in a
child process that may be abandoned (see `answers`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from .mountpoints import device

log = logging.getLogger(__name__)

FUSECTL = Path("/sys/fs/fuse/connections")
# How long a live daemon may take to answer a statfs (answered from memory, by FUSE threads kept
# free of reads): a mount that stays silent this long is treated as gone.
PROBE_SECONDS = 3.0
_KERNEL_MINOR_BITS = 20

# statvfs of argv[1] in a fresh interpreter: prints 0, or the errno it failed with.
_PROBE = "import os,sys\ntry:\n os.statvfs(sys.argv[1])\nexcept OSError as e:\n print(e.errno)\nelse:\n print(0)"


def connection_number(majmin: str) -> int:
    """fusectl's N for a mount whose mountinfo device is `majmin` ('0:52')."""
    major, minor = (int(part) for part in majmin.split(":"))
    return (major << _KERNEL_MINOR_BITS) | minor


def connection_of(mountpoint: str) -> int | None:
    """fusectl's N of the mount at `mountpoint`, or None if nothing is mounted there."""
    majmin = device(mountpoint)
    return None if majmin is None else connection_number(majmin)


def fusectl_available() -> bool:
    """Whether fusectl is mounted; mounts it when this process may (root) and it is not."""
    if device(str(FUSECTL)) is not None:
        return True
    if os.geteuid() != 0 or not FUSECTL.is_dir():
        return False
    result = subprocess.run(["mount", "-t", "fusectl", "none", str(FUSECTL)], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        log.info("cannot mount fusectl on %s: %s", FUSECTL, result.stderr.strip())
        return False
    return True


def waiting(number: int) -> int | None:
    """Requests the connection has taken and not answered; None if fusectl does not show it."""
    if not fusectl_available():
        return None
    try:
        return int((FUSECTL / str(number) / "waiting").read_text())
    except (OSError, ValueError):
        return None


def abort(number: int) -> bool:
    """Abort connection N: every request waiting on it, and every later one, fails at once.

    True if it was aborted; False when fusectl is not available (not mounted
    and not root) or does not show N (the connection is gone already).
    """
    if not fusectl_available():
        return False
    try:
        (FUSECTL / str(number) / "abort").write_text("1")
    except OSError as exc:
        log.debug("cannot abort FUSE connection %d: %s", number, exc)
        return False
    log.info("aborted FUSE connection %d", number)
    return True


def answers(mountpoint: str, timeout: float = PROBE_SECONDS) -> int | None:
    """statvfs of `mountpoint` from a child process: 0 if it answered, its errno if it failed, None if
    it did not answer within `timeout`.

    A child, because a request to a dead or stuck connection can block its
    caller for good; the child is killed and left to the kernel, which ends
    it once the connection is aborted.
    """
    probe = subprocess.Popen([sys.executable, "-I", "-S", "-c", _PROBE, mountpoint], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        out, _ = probe.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        probe.kill()  # takes effect once the connection is aborted; not waited for
        return None
    try:
        return int(out.strip())
    except ValueError:
        return None
