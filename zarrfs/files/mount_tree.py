"""What the FUSE front serves: the tree of one store (`tree.VirtualTree`) or of many (`share.ShareTree`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .contract import OpenedFile
from .entries import DirEntry, Entry


class MountTree(Protocol):
    """A mount's tree as the FUSE front uses it: entries by path, directories' entries, open files, the C
    read path's entry point and counters, and the extra sections of the stats file."""

    stats_extras: dict[str, Callable[[], Any]]

    def lookup(self, path: str) -> Entry: ...

    def listdir(self, directory: DirEntry) -> Mapping[str, Entry]: ...

    def open(self, path: str) -> OpenedFile: ...

    def fast_read_entry(self) -> Any: ...

    def fast_read_counters(self) -> dict[str, Any]: ...

    def source_display_name(self) -> str: ...

    def source_is_local(self) -> bool: ...

    def close(self) -> str: ...
