"""The entries of a directory: a directory, a file, the counters file."""

from __future__ import annotations

from dataclasses import dataclass

from .contract import VirtualFile


# Entries have slots: a wide group holds seven or more per array (docs/collections.md#wide-groups).
@dataclass(frozen=True, slots=True)
class DirEntry:
    group_path: str


@dataclass(frozen=True, slots=True)
class FileEntry:
    file: VirtualFile
    suffix: str = ""
    mtime_ns: int | None = None  # an ordinary file's own time (None: the mount's)


@dataclass(frozen=True)
class StatsEntry:
    """The counters file: its content is made at each open, so it is never page-cached."""


Entry = DirEntry | FileEntry | StatsEntry
