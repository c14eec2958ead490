"""The nodes of a mount of many stores (files/share.py): a share's folders, its store roots, and the files
that are neither a store's nor made here (an ordinary file, a store's open file counted against its store).
"""

from __future__ import annotations

import contextlib
import posixpath
import threading
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine.plain_files import PlainFileReader
from ..errors import ZarrfsError
from ..hierarchy.folders import Decided, Kind, Listed, ShareFolders
from ..options import EngineOptions
from .contract import OpenedFile, VirtualFile
from .tree import VirtualTree

# The note a store that could not be opened shows in its directory.
ERROR_NOTE = "ZARRFS-ERROR.txt"
# Where a store that is a file keeps its own bytes, inside its directory (plus the file's suffix).
SOURCE_FILE = ".zarrfs-source"


class PlainFile(VirtualFile):
    """An ordinary file of the share, itself byte for byte."""

    def __init__(self, open_reader: Callable[[], PlainFileReader], size: int) -> None:
        self._open_reader = open_reader
        self._size = size

    @property
    def size(self) -> int:
        return self._size

    def open(self) -> OpenedFile:
        return _OpenPlainFile(self._open_reader())


class _OpenPlainFile(OpenedFile):
    """An open ordinary file: read in Python (a local file with preadv, a remote one by blocks); C is
    granted nothing."""

    def __init__(self, reader: PlainFileReader) -> None:
        self._reader = reader

    @property
    def size(self) -> int:
        return self._reader.size

    def read_into(self, offset: int, out: np.ndarray) -> int:
        return self._reader.read_into(offset, out)

    def version(self) -> Hashable:
        return self._reader.version  # its size and time as listed: the kernel keeps pages while they stay

    def close(self) -> None:
        self._reader.close()


class StoreFile(OpenedFile):
    """A store's open file, counted so that the store is never closed under it."""

    def __init__(self, opened: OpenedFile, mount: StoreMount) -> None:
        self._opened = opened
        self._mount = mount
        self.direct_io = opened.direct_io

    @property
    def size(self) -> int:
        return self._opened.size

    def read_into(self, offset: int, out: np.ndarray) -> int:
        return self._opened.read_into(offset, out)

    def attach(self, number: int) -> bool:
        return self._opened.attach(number)

    def load_for_c(self, offset: int, out: np.ndarray, write: bool) -> int | None:
        return self._opened.load_for_c(offset, out, write)

    def version(self) -> Hashable:
        return self._opened.version()

    def close(self) -> None:
        try:
            self._opened.close()
        finally:
            self._mount.file_closed()


@dataclass
class Source:
    """A SOURCE that is a store or a share, not yet known which (the mount's own, a catalog entry's)."""

    url: str
    storage_options: dict[str, Any]
    options: EngineOptions


@dataclass
class Folder:
    """A folder of a share: its entries, decided when first listed."""

    share: ShareFolders  # `key` is the folder's key in it
    key: str
    options: EngineOptions
    listed_at: float = 0.0
    entries: dict[str, Decided] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, name: str) -> str:
        """The SOURCE of entry `name` as `zarrfs mount` would take it."""
        return self.share.url(posixpath.join(self.key, name) if self.key else name)


@dataclass(eq=False)  # hashable by identity: the open stores are an ordered set of them
class StoreMount:
    """A store root of the mount: opened at the first lookup below it, closed when let go."""

    name: str
    source: Source
    kind: Kind
    original: tuple[ShareFolders, str, Listed] | None = None  # a store that is a file: its bytes, at SOURCE_FILE
    tree: VirtualTree | None = None
    error: ZarrfsError | None = None
    # A catalog's entry may name a share rather than a store: once opened, that folder (see _opened).
    may_be_share: bool = False
    folder: Folder | None = None
    # Calls under way in the store's tree plus its open files: a store in use is never closed.
    users: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _count_lock: threading.Lock = field(default_factory=threading.Lock)

    def file_opened(self) -> None:
        with self._count_lock:
            self.users += 1

    def file_closed(self) -> None:
        with self._count_lock:
            self.users -= 1

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        self.file_opened()
        try:
            yield
        finally:
            self.file_closed()

    @property
    def source_file_name(self) -> str | None:
        if self.original is None:
            return None
        suffix = posixpath.splitext(self.original[2].name)[1]
        return SOURCE_FILE + suffix


