"""What a listing of a store prefix says of each name directly under it (`Listed`), from a local
directory or from an fsspec listing."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError


@dataclass(frozen=True)
class Listed:
    """One entry of a listing: a name directly under the listed prefix."""

    name: str
    directory: bool
    size: int  # bytes of a file as listed (0 for a directory)
    mtime_ns: int | None  # as the listing tells it; None when it does not (HTTP index pages)


# Where fsspec's backends put an entry's modification time: local (seconds), S3 (a datetime),
# GCS/Azure (an ISO string or datetime), zip (a date tuple).
_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modified", "date_time")


def modified_ns(entry: dict[str, Any]) -> int | None:
    """An fsspec listing entry's modification time in ns since the epoch, or None when it has none."""
    for key in _MTIME_KEYS:
        value = entry.get(key)
        if value is None:
            continue
        if isinstance(value, int | float):
            return int(value * 1_000_000_000)
        if isinstance(value, datetime.datetime):
            moment = value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
            return int(moment.timestamp() * 1_000_000_000)
        if isinstance(value, tuple) and len(value) == 6:  # zipfile's (year, month, day, h, m, s)
            return int(datetime.datetime(*value, tzinfo=datetime.timezone.utc).timestamp() * 1_000_000_000)
        if isinstance(value, str):
            try:
                moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            moment = moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)
            return int(moment.timestamp() * 1_000_000_000)
    return None


def local_entries(path: str) -> list[Listed]:
    """A local directory's entries: a directory's type comes from the listing itself (no `stat` of each,
    which a folder of 10,000 stores would pay), a file's size and time from one `stat`. What vanishes
    between the two is left out; a symlink is what it points to."""
    listed: list[Listed] = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_dir():
                        listed.append(Listed(entry.name, True, 0, None))
                        continue
                    status = entry.stat()
                except OSError:
                    continue
                listed.append(Listed(entry.name, False, status.st_size, status.st_mtime_ns))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise StoreError(f"{path}: cannot list: {exc.strerror}") from exc
    return listed


def listed_under(base: str, entries: list[dict[str, Any]]) -> list[Listed]:
    """The entries of an fsspec listing of `base` that lie directly under it, by name relative to it."""
    listed: list[Listed] = []
    # Names come back as full paths; a root of '' (the top of a zip archive) has no '/' to strip.
    parent = base.rstrip("/") + "/" if base else ""
    for entry in entries:
        name = str(entry["name"]).rstrip("/")
        if not name.startswith(parent):
            # HTTP listings may return absolute URLs of other places.
            continue
        child = name[len(parent):]
        if not child or "/" in child:
            continue
        directory = entry.get("type") == "directory"
        size = entry.get("size") if not directory else 0
        listed.append(Listed(child, directory, int(size) if isinstance(size, int | float) else 0,
                             modified_ns(entry)))
    return listed
