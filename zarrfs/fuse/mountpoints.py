"""What the kernel says about a mount point: its file system type, and who keeps it busy.

Both read /proc, and at most stat a file there, so they work on a stale
mount whose daemon died (where any access fails with ENOTCONN).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """Mount table fields write space, tab, newline and backslash as octal escapes."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def _mount_entry(path: str) -> list[str] | None:
    """The mountinfo fields of the visible mount at `path` (the last one listed), or None (also where
    there is no /proc/self/mountinfo: macOS, FreeBSD)."""
    path = os.path.abspath(path)
    found = None
    try:
        table = open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape")  # noqa: SIM115
    except FileNotFoundError:
        return None
    with table:
        for line in table:
            fields = line.split()
            if _unescape(fields[4]) == path:
                found = fields
    return found


def device(path: str) -> str | None:
    """'major:minor' of the mount at `path` (its bdi under /sys/class/bdi), or None if nothing is mounted."""
    fields = _mount_entry(path)
    return None if fields is None else fields[2]


def fstype(path: str) -> str | None:
    """The file system type mounted at `path` ('fuse.zarrfs', ...), or None if nothing is."""
    fields = _mount_entry(path)
    return None if fields is None else fields[fields.index("-") + 1]


def holders(path: str, limit: int = 5) -> list[str]:
    """'name (pid N)' of processes with a file, mapping, working or root directory on the mount at `path`.

    Matched by mount, not only by name: a descriptor of the directory under
    the mount (the daemon's own lock on it) is not a holder. Only processes
    this user may inspect are seen; at most `limit` are named.
    """
    fields = _mount_entry(path)
    if fields is None:
        return []
    major, minor = (int(n) for n in fields[2].split(":"))
    mount = _Mount(os.path.abspath(path).rstrip("/") + "/", fields[0], os.makedev(major, minor))
    found: list[str] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mount.used_by(entry):
                found.append(f"{(entry / 'comm').read_text().strip()} (pid {entry.name})")
        except OSError:  # exited meanwhile, or not ours to inspect
            continue
        if len(found) >= limit:
            break
    return found


class _Mount:
    def __init__(self, prefix: str, mount_id: str, device: int) -> None:
        self.prefix, self.mount_id, self.device = prefix, mount_id, device

    def _under(self, target: str) -> bool:
        return (target + "/").startswith(self.prefix)

    def _on_device(self, link: Path) -> bool:
        try:
            return os.stat(link).st_dev == self.device
        except OSError:
            return True  # a stale mount fails stat: it is on it

    def used_by(self, process: Path) -> bool:
        for name in ("cwd", "root"):
            if self._under(os.readlink(process / name)) and self._on_device(process / name):
                return True
        for fd in (process / "fd").iterdir():
            try:
                if self._under(os.readlink(fd)) and self._fd_mount(process, fd.name) == self.mount_id:
                    return True
            except OSError:
                continue
        # np.load(mmap_mode="r") closes its file but keeps the mapping, which holds the mount too.
        with open(process / "maps", encoding="utf-8", errors="surrogateescape") as maps:
            for line in maps:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and self._under(parts[5].rstrip("\n")):
                    major, minor = (int(n, 16) for n in parts[3].split(":"))
                    if os.makedev(major, minor) == self.device:
                        return True
        return False

    @staticmethod
    def _fd_mount(process: Path, fd: str) -> str | None:
        for line in (process / "fdinfo" / fd).read_text().splitlines():
            if line.startswith("mnt_id:"):
                return line.split()[1]
        return None
