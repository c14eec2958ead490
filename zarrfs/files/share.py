"""A mount of many stores: a share (a folder or prefix holding stores among ordinary files) or a catalog.

The tree's directories are the share's folders; every store root below
them (hierarchy/folders.py says which entries are) is a directory holding
exactly what mounting that store alone shows (a `VirtualTree` of its own),
and every other file is itself, byte for byte (engine/plain_files.py). A
catalog's entries are its top-level directories, each a store or a share.

Lazy and bounded:
- Mounting reads nothing below the root; a folder is listed when it is
  first looked into (again once `--metadata-ttl` passed), and a store is
  opened at the first lookup below it.
- Every store's engine shares one chunk cache (`--cache-size` is one budget
  for the whole mount, and one table of files for the C read path) and one
  set of open chunk files.
- At most `--max-open-stores` stores are open at once: past that the least
  recently used ones that no open file reads are closed (their nodes, readers
  and metadata let go), to be opened again if looked into again.
- A store that cannot be opened is a directory holding `ZARRFS-ERROR.txt`,
  which says why; it never slows or breaks its siblings (each store opens
  under its own lock, and nothing else waits on it).

A store that is a file (a zip, a JSON reference set) keeps its own bytes at
`NAME/.zarrfs-source` plus the file's suffix (`scan.zip/.zarrfs-source.zip`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import posixpath
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine.engine import SharedParts
from ..engine.plain_files import PlainFileReader
from ..errors import IsDirectoryError, NotFoundError, NotZarrError, StoreError, ZarrfsError
from ..formats import json_document
from ..hierarchy.folders import (
    Decided,
    Kind,
    Listed,
    ShareFolders,
    entry_kind,
    folder_kind,
    shown_url,
)
from ..options import DEFAULT_MAX_OPEN_STORES, EngineOptions
from .catalog import CatalogEntry, read_catalog
from .contract import OpenBytes, OpenedFile, VirtualFile
from .layout_files import LayoutFile
from .mount_tree import MountTree
from .tree import STATS_FILE, DirEntry, Entry, FileEntry, StatsEntry, VirtualTree

log = logging.getLogger(__name__)

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

    def close(self) -> None:
        self._reader.close()


class _StoreFile(OpenedFile):
    """A store's open file, counted so that the store is never closed under it."""

    def __init__(self, opened: OpenedFile, mount: _StoreMount) -> None:
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
class _Source:
    """A SOURCE that is a store or a share, not yet known which (the mount's own, a catalog entry's)."""

    url: str
    storage_options: dict[str, Any]
    options: EngineOptions


@dataclass
class _Folder:
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
class _StoreMount:
    """A store root of the mount: opened at the first lookup below it, closed when let go."""

    name: str
    source: _Source
    kind: Kind
    original: tuple[ShareFolders, str, Listed] | None = None  # a store that is a file: its bytes, at SOURCE_FILE
    tree: VirtualTree | None = None
    error: ZarrfsError | None = None
    # A catalog's entry may name a share rather than a store: once opened, that folder (see _opened).
    may_be_share: bool = False
    folder: _Folder | None = None
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


Node = _Folder | _StoreMount | dict  # a catalog's root: name -> _StoreMount or _Folder


class ShareTree:
    """The tree of a mount of many stores, with the interface of `VirtualTree` the FUSE front uses."""

    def __init__(self, root: _Folder | dict[str, _StoreMount | _Folder], options: EngineOptions,
                 suffixes: tuple[str, ...], display_name: str, local: bool,
                 max_open_stores: int = DEFAULT_MAX_OPEN_STORES) -> None:
        self.options = options
        self.suffixes = suffixes
        self.display_name = display_name
        self._local = local
        self._root = root
        self.shared = SharedParts.make(options, remote=not local)
        self.max_open_stores = max_open_stores
        self.stats_extras: dict[str, Callable[[], Any]] = {}
        self._nodes: dict[str, _Folder | _StoreMount] = {}  # by mount path: folders and stores looked into
        self._open: OrderedDict[_StoreMount, None] = OrderedDict()  # open stores, least recently used first
        self._lock = threading.Lock()
        self._stores_opened = 0
        self._stores_closed = 0

    # ------------------------------------------------------------ building

    @classmethod
    def of_folder(cls, share: ShareFolders, options: EngineOptions, suffixes: tuple[str, ...],
                  max_open_stores: int = DEFAULT_MAX_OPEN_STORES) -> ShareTree:
        return cls(_Folder(share, "", options), options, suffixes, share.display_name, share.local, max_open_stores)

    @classmethod
    def of_catalog(cls, entries: list[CatalogEntry], options: EngineOptions, suffixes: tuple[str, ...],
                   display_name: str, max_open_stores: int = DEFAULT_MAX_OPEN_STORES) -> ShareTree:
        root: dict[str, _StoreMount | _Folder] = {}
        for entry in entries:
            entry_options = options if entry.ref is None else \
                dataclasses.replace(options, store=dataclasses.replace(options.store, ref=entry.ref))
            source = _Source(entry.source, entry.storage_options, entry_options)
            root[entry.name] = _StoreMount(entry.name, source, Kind.STORE, may_be_share=True)
        local = all("://" not in entry.source or entry.source.startswith("file://") for entry in entries)
        return cls(root, options, suffixes, display_name, local, max_open_stores)

    # ------------------------------------------------- the VirtualTree face

    def source_display_name(self) -> str:
        return self.display_name

    def source_is_local(self) -> bool:
        return self._local

    def fast_read_entry(self) -> Any:
        return self.shared.cache.served.serve_capsule()

    def fast_read_counters(self) -> dict[str, Any]:
        return self.shared.cache.served.counters()

    def close(self) -> str:
        with self._lock:
            stores = list(self._open)
            self._open.clear()
        for mount in stores:
            self._close_store(mount)
        stats = self.shared.cache.stats()
        self.shared.close()
        return f"cache {stats.as_dict()}; stores opened {self._stores_opened}, closed {self._stores_closed}"

    def lookup(self, path: str) -> Entry:
        """The entry at a mount path."""
        path = path.strip("/")
        node, rest = self._resolve(path)
        if isinstance(node, FileEntry | StatsEntry):
            return node
        if isinstance(node, _StoreMount):
            return self._store_lookup(node, path, rest)
        return DirEntry(path)

    def listdir(self, directory: DirEntry) -> dict[str, Entry]:
        path = directory.group_path.strip("/")
        node, rest = self._resolve(path)
        node = self._settled(node)
        if isinstance(node, _StoreMount):
            return self._store_listdir(node, path, rest)
        if isinstance(node, dict):
            entries: dict[str, Entry] = {name: DirEntry(posixpath.join(path, name)) for name in node}
        elif isinstance(node, _Folder):
            entries = {name: self._entry_of(node, path, decided) for name, decided in self._entries(node).items()}
        else:
            raise NotFoundError(f"/{path}: not a directory")
        if not path:
            entries.setdefault(STATS_FILE, StatsEntry())
        return entries

    def open(self, path: str) -> OpenedFile:
        """The file at `path`, opened for reading."""
        path = path.strip("/")
        node, rest = self._resolve(path)
        if isinstance(node, StatsEntry):
            return OpenBytes(json_document(self.stats()), direct_io=True)
        if isinstance(node, _StoreMount):
            return self._store_open(node, path, rest)
        if isinstance(node, FileEntry):
            return node.file.open()
        raise IsDirectoryError(f"/{path} is a directory")

    def stats(self) -> dict[str, Any]:
        cache = self.shared.cache
        with self._lock:
            open_stores = list(self._open)
        figures = {"cache": {"budget_bytes": cache.budget_bytes, **cache.stats().as_dict(), **cache.budget_figures()},
                   "share": {"source": self.display_name, "stores_open": len(open_stores),
                             "stores_opened": self._stores_opened, "stores_closed": self._stores_closed,
                             "max_open_stores": self.max_open_stores}}
        return {**figures, **{name: figures_of() for name, figures_of in self.stats_extras.items()}}

    # ------------------------------------------------------------ routing

    def _resolve(self, path: str) -> tuple[Any, str]:
        """(the node at or above `path`, the rest of `path` below it): a folder, a catalog's root, a store
        mount with the path inside the store, or a file entry of a folder."""
        node: Any = self._root
        parts = path.split("/") if path else []
        walked: list[str] = []
        for index, part in enumerate(parts):
            node = self._settled(node)
            if isinstance(node, _StoreMount):
                return node, "/".join(parts[index:])
            child = self._child(node, "/".join(walked), part)
            walked.append(part)
            if child is None:
                raise NotFoundError(f"/{path}: no such file or directory")
            if isinstance(child, FileEntry | StatsEntry) and index < len(parts) - 1:
                raise NotFoundError(f"/{path}: {'/'.join(walked)} is a file")
            node = child
        return node, ""

    def _child(self, node: Any, path: str, name: str) -> Any:
        """The node of `name` in the directory `node` at mount path `path`, or None."""
        full = posixpath.join(path, name) if path else name
        if not path and name == STATS_FILE:
            return StatsEntry()
        with self._lock:
            known = self._nodes.get(full)
        if known is not None and not (isinstance(known, _Folder) and self._expired(known)):
            return known
        if isinstance(node, dict):
            child = node.get(name)
            if child is None:
                return None
            with self._lock:
                self._nodes[full] = child
            return child
        if not isinstance(node, _Folder):
            return None
        decided = self._entries(node).get(name)
        if decided is None:
            return None
        entry = self._entry_of(node, path, decided)
        if isinstance(entry, FileEntry):
            return entry
        child = self._decide_folder(node, name, decided) if decided.kind is Kind.FOLDER else \
            self._store_of(node, name, decided)
        with self._lock:
            self._nodes[full] = child
        return child

    def _settled(self, node: Any) -> Any:
        """A catalog's entry that is a share is its folder once looked into (opened here); any other node
        as it is."""
        if isinstance(node, _StoreMount) and node.may_be_share:
            with node.in_use():
                self._opened(node)
            return node.folder or node
        return node

    def _expired(self, folder: _Folder) -> bool:
        ttl = self.options.metadata_ttl
        return ttl is not None and folder.entries is not None and time.monotonic() - folder.listed_at > ttl

    def _entries(self, folder: _Folder) -> dict[str, Decided]:
        """A folder's entries, listed once (again after the metadata TTL); ambiguous files probed."""
        with folder.lock:
            if folder.entries is not None and not self._expired(folder):
                return folder.entries
            listing = folder.share.listing(folder.key)
            probed = folder.share.probe(folder.key, listing)
            entries: dict[str, Decided] = {}
            for listed in sorted(listing, key=lambda entry: entry.name):
                entries[listed.name] = Decided(listed, entry_kind(listed, probed))
            folder.entries, folder.listed_at = entries, time.monotonic()
            return entries

    def _decide_folder(self, parent: _Folder, name: str, decided: Decided) -> _Folder | _StoreMount:
        """A sub-folder, told a store root or a folder by its own listing (which a folder keeps as its
        entries: deciding costs no request more than showing it)."""
        key = posixpath.join(parent.key, name) if parent.key else name
        folder = _Folder(parent.share, key, parent.options)
        try:
            listing = parent.share.listing(key)
        except StoreError as exc:
            log.error("%s: cannot list: %s", shown_url(parent.url(name)), exc)
            return _StoreMount(name, _Source(parent.url(name), {}, parent.options), Kind.FOLDER, error=exc)
        if folder_kind(name, listing) is Kind.STORE:
            return self._store_of(parent, name, Decided(decided.listed, Kind.STORE))
        with folder.lock:
            probed = parent.share.probe(key, listing)
            folder.entries = {listed.name: Decided(listed, entry_kind(listed, probed))
                              for listed in sorted(listing, key=lambda entry: entry.name)}
            folder.listed_at = time.monotonic()
        return folder

    def _store_of(self, folder: _Folder, name: str, decided: Decided) -> _StoreMount:
        url = folder.url(name)
        if decided.kind is Kind.ZIPPED and not name.lower().endswith(".ozx"):
            url = f"zip::{url}"  # (a .ozx is opened as the zip it is by the store layer itself)
        key = posixpath.join(folder.key, name) if folder.key else name
        original = (folder.share, key, decided.listed) if not decided.listed.directory else None
        source = _Source(url, dict(folder.share.storage_options), folder.options)
        return _StoreMount(name, source, decided.kind, original)

    def _entry_of(self, folder: _Folder, path: str, decided: Decided) -> Entry:
        listed = decided.listed
        if decided.kind is Kind.FILE:
            key = posixpath.join(folder.key, listed.name) if folder.key else listed.name
            return FileEntry(self._plain_file(folder.share, key, listed), "", listed.mtime_ns)
        return DirEntry(posixpath.join(path, listed.name) if path else listed.name)

    def _plain_file(self, share: ShareFolders, key: str, listed: Listed) -> PlainFile:
        def open_reader() -> PlainFileReader:
            timeout = max(self.options.read_timeout, self.options.store.worst_case_seconds())
            return PlainFileReader(share.store, key, listed.size, listed.mtime_ns, self.shared.cache, timeout)
        return PlainFile(open_reader, listed.size)

    # ------------------------------------------------------------- stores

    def _opened(self, mount: _StoreMount) -> VirtualTree | None:
        """The store's tree, opened now if it is not (None when it cannot be, with `mount.error` set, or when a
        catalog's entry turned out to be a share, with `mount.folder` set)."""
        with mount.lock:
            if mount.tree is None and mount.error is None and mount.folder is None:
                self._open_store(mount)
            tree = mount.tree
        if tree is not None:
            self._note_open(mount)
        return tree

    def _open_store(self, mount: _StoreMount) -> None:
        source = mount.source
        try:
            mount.tree = VirtualTree.of_source(source.url, source.storage_options, source.options, self.suffixes,
                                               self.shared)
            self._stores_opened += 1
        except NotZarrError as exc:
            folder = self._as_share(mount) if mount.may_be_share else None
            if folder is None:
                mount.error = exc
                log.error("%s: cannot be opened: %s", shown_url(source.url), exc)
            mount.folder = folder
        except ZarrfsError as exc:
            mount.error = exc
            log.error("%s: cannot be opened: %s", shown_url(source.url), exc)
        except Exception as exc:  # noqa: BLE001 - one store's bug must not break the mount
            log.exception("%s: cannot be opened", shown_url(source.url))
            mount.error = StoreError(f"{shown_url(source.url)}: cannot be opened: {type(exc).__name__}: {exc}")

    @staticmethod
    def _as_share(mount: _StoreMount) -> _Folder | None:
        """A catalog entry's SOURCE as a share, when it is a folder or prefix with something in it."""
        source = mount.source
        try:
            share = ShareFolders.open(source.url, source.storage_options, source.options.store)
        except ZarrfsError:
            return None
        return None if share is None else _Folder(share, "", source.options)

    def _note_open(self, mount: _StoreMount) -> None:
        """`mount` is in use: the most recently used open store. Past the bound, the least recently used ones
        that no open file reads are closed."""
        idle: list[_StoreMount] = []
        with self._lock:
            self._open[mount] = None
            self._open.move_to_end(mount)
            for candidate in list(self._open):
                if len(self._open) <= self.max_open_stores:
                    break
                if candidate is not mount and candidate.users == 0:
                    idle.append(candidate)
                    del self._open[candidate]
        for candidate in idle:
            self._close_store(candidate)

    def _close_store(self, mount: _StoreMount) -> None:
        with mount.lock:
            tree, mount.tree = mount.tree, None
        if tree is not None:
            summary = tree.close()
            self._stores_closed += 1
            log.debug("%s: closed (%s)", shown_url(mount.source.url), summary)

    def _store_lookup(self, mount: _StoreMount, path: str, rest: str) -> Entry:
        with mount.in_use():
            return self._store_lookup_in_use(mount, path, rest)

    def _store_lookup_in_use(self, mount: _StoreMount, path: str, rest: str) -> Entry:
        if not rest:
            return DirEntry(path)
        source_file = mount.source_file_name
        if source_file is not None and rest == source_file:
            return self._source_entry(mount)
        tree = self._opened(mount)
        if tree is None:
            if rest == ERROR_NOTE:
                return FileEntry(LayoutFile.document(self._error_note(mount)))
            raise NotFoundError(f"/{path}: no such file (the store could not be opened: see {ERROR_NOTE})")
        entry = tree.lookup(rest)
        return DirEntry(path) if isinstance(entry, DirEntry) else entry

    def _store_listdir(self, mount: _StoreMount, path: str, rest: str) -> dict[str, Entry]:
        with mount.in_use():
            return self._store_listdir_in_use(mount, path, rest)

    def _store_listdir_in_use(self, mount: _StoreMount, path: str, rest: str) -> dict[str, Entry]:
        tree = self._opened(mount)
        entries: dict[str, Entry]
        if tree is None:
            entries = {ERROR_NOTE: FileEntry(LayoutFile.document(self._error_note(mount)))}
        else:
            inner = tree.lookup(rest)
            if not isinstance(inner, DirEntry):
                raise NotFoundError(f"/{path}: not a directory")
            entries = {name: DirEntry(posixpath.join(path, name)) if isinstance(entry, DirEntry) else entry
                       for name, entry in tree.listdir(inner).items()}
        source_file = mount.source_file_name
        if not rest and source_file is not None:
            entries.setdefault(source_file, self._source_entry(mount))
        return entries

    def _store_open(self, mount: _StoreMount, path: str, rest: str) -> OpenedFile:
        mount.file_opened()  # before the lookup: the store stays open from here to the file's close
        try:
            entry = self._store_lookup_in_use(mount, path, rest)
            if isinstance(entry, DirEntry):
                raise IsDirectoryError(f"/{path} is a directory")
            tree = mount.tree
            if tree is not None and rest != mount.source_file_name:
                return _StoreFile(tree.open(rest), mount)
            assert isinstance(entry, FileEntry)  # the error note, or the store's own bytes: not through the store
            opened = entry.file.open()
        except BaseException:
            mount.file_closed()
            raise
        mount.file_closed()
        return opened

    def _source_entry(self, mount: _StoreMount) -> FileEntry:
        assert mount.original is not None
        share, key, listed = mount.original
        return FileEntry(self._plain_file(share, key, listed), "", listed.mtime_ns)

    def _error_note(self, mount: _StoreMount) -> bytes:
        return (f"zarrfs could not open {shown_url(mount.source.url)} as a {mount.kind.value}:\n"
                f"{mount.error}\n\n`zarrfs tree {shown_url(mount.source.url)}` says the same; the daemon's "
                "log (--log-file) has the details. The store is tried again after a remount.\n").encode()


def open_mount_tree(source: str, storage_options: dict[str, Any], options: EngineOptions,
                    suffixes: tuple[str, ...], catalog: str | None = None,
                    max_open_stores: int = DEFAULT_MAX_OPEN_STORES) -> MountTree:
    """The tree a mount of SOURCE serves: the store's, or, when SOURCE is a folder or prefix that is not
    itself a store, the share's; with a catalog, its entries'. Only the root is read (a catalog: not even
    that); no store below it is opened."""
    if catalog is not None:
        return ShareTree.of_catalog(read_catalog(catalog), options, suffixes, f"catalog {catalog}", max_open_stores)
    try:
        return VirtualTree.of_source(source, storage_options, options, suffixes)
    except NotZarrError as not_zarr:
        try:
            share = ShareFolders.open(source, storage_options, options.store)
        except ZarrfsError:
            raise not_zarr from None
        if share is None:
            raise type(not_zarr)(f"{not_zarr}; nor is it a share (a folder with stores or files in it)") from None
        return ShareTree.of_folder(share, options, suffixes, max_open_stores)
