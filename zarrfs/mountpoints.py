"""What the kernel says about a mount point: its file system type, and who keeps it busy.

Both read /proc only: nothing here touches the mount itself, so they work on
a stale mount whose daemon died (where any access fails with ENOTCONN).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """Mount table fields write space, tab, newline and backslash as octal escapes."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def fstype(path: str) -> str | None:
    """The file system type mounted at `path` ('fuse.zarrfs', ...), or None if nothing is."""
    path = os.path.abspath(path)
    found = None
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            fields = line.split()
            if _unescape(fields[4]) == path:
                found = fields[fields.index("-") + 1]  # the last mount on a path is the visible one
    return found


def holders(path: str, limit: int = 5) -> list[str]:
    """'name (pid N)' of processes with a file, mapping, working or root directory under `path`.

    Only processes this user may inspect are seen; at most `limit` are named.
    """
    prefix = os.path.abspath(path).rstrip("/") + "/"
    found: list[str] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if _uses(entry, prefix):
                found.append(f"{(entry / 'comm').read_text().strip()} (pid {entry.name})")
        except OSError:  # exited meanwhile, or not ours to inspect
            continue
        if len(found) >= limit:
            break
    return found


def _uses(process: Path, prefix: str) -> bool:
    def under(target: str) -> bool:
        return (target + "/").startswith(prefix)

    if under(os.readlink(process / "cwd")) or under(os.readlink(process / "root")):
        return True
    for fd in (process / "fd").iterdir():
        try:
            if under(os.readlink(fd)):
                return True
        except OSError:
            continue
    # np.load(mmap_mode="r") closes its file but keeps the mapping, which holds the mount too.
    with open(process / "maps", encoding="utf-8", errors="surrogateescape") as maps:
        return any(under(line.split(maxsplit=5)[5].strip()) for line in maps if line.count(" ") >= 5
                   and len(line.split(maxsplit=5)) == 6)
