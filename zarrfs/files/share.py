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
import dataclasses
import posixpath
import threading
from collections.abc import Callable
from typing import Any

from ..engine.engine import SharedParts
from ..errors import IsDirectoryError, NotFoundError, NotZarrError, ZarrfsError
from ..formats import json_document
from ..hierarchy.folders import Kind, ShareFolders, shown_url
from ..options import DEFAULT_MAX_OPEN_STORES, EngineOptions
from .catalog import CatalogEntry, read_catalog
from .contract import OpenBytes, OpenedFile
from .layout_files import LayoutFile
from .mount_tree import MountTree
from .open_stores import OpenStores
from .share_entries import FolderEntries
from .share_nodes import ERROR_NOTE, Folder, Source, StoreFile, StoreMount
from .tree import STATS_FILE, DirEntry, Entry, FileEntry, StatsEntry, VirtualTree

Node = Folder | StoreMount | dict  # a catalog's root: name -> StoreMount or Folder


class ShareTree:
    """The tree of a mount of many stores, with the interface of `VirtualTree` the FUSE front uses."""

    def __init__(self, root: Folder | dict[str, StoreMount | Folder], options: EngineOptions,
                 suffixes: tuple[str, ...], display_name: str, local: bool,
                 max_open_stores: int = DEFAULT_MAX_OPEN_STORES) -> None:
        self.options = options
        self.suffixes = suffixes
        self.display_name = display_name
        self._local = local
        self._root = root
        self.shared = SharedParts.make(options, remote=not local)
        self.stats_extras: dict[str, Callable[[], Any]] = {}
        self._nodes: dict[str, Folder | StoreMount] = {}  # by mount path: folders and stores looked into
        self._lock = threading.Lock()
        self._stores = OpenStores(self.shared, suffixes, max_open_stores)
        self._folders = FolderEntries(options, lambda: self.shared.cache)

    # ------------------------------------------------------------ building

    @classmethod
    def of_folder(cls, share: ShareFolders, options: EngineOptions, suffixes: tuple[str, ...],
                  max_open_stores: int = DEFAULT_MAX_OPEN_STORES) -> ShareTree:
        return cls(Folder(share, "", options), options, suffixes, share.display_name, share.local, max_open_stores)

    @classmethod
    def of_catalog(cls, entries: list[CatalogEntry], options: EngineOptions, suffixes: tuple[str, ...],
                   display_name: str, max_open_stores: int = DEFAULT_MAX_OPEN_STORES) -> ShareTree:
        root: dict[str, StoreMount | Folder] = {}
        for entry in entries:
            entry_options = options if entry.ref is None else \
                dataclasses.replace(options, store=dataclasses.replace(options.store, ref=entry.ref))
            source = Source(entry.source, entry.storage_options, entry_options)
            root[entry.name] = StoreMount(entry.name, source, Kind.STORE, may_be_share=True)
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
        self._stores.close_all()
        stats = self.shared.cache.stats()
        self.shared.close()
        return f"cache {stats.as_dict()}; stores opened {self._stores.opened}, closed {self._stores.closed}"

    def lookup(self, path: str) -> Entry:
        """The entry at a mount path."""
        path = path.strip("/")
        node, rest = self._resolve(path)
        if isinstance(node, FileEntry | StatsEntry):
            return node
        if isinstance(node, StoreMount):
            return self._store_lookup(node, path, rest)
        return DirEntry(path)

    def listdir(self, directory: DirEntry) -> dict[str, Entry]:
        path = directory.group_path.strip("/")
        node, rest = self._resolve(path)
        node = self._settled(node)
        if isinstance(node, StoreMount):
            return self._store_listdir(node, path, rest)
        if isinstance(node, dict):
            entries: dict[str, Entry] = {name: DirEntry(posixpath.join(path, name)) for name in node}
        elif isinstance(node, Folder):
            entries = {name: self._folders.entry_of(node, path, decided)
                       for name, decided in self._folders.entries(node).items()}
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
        if isinstance(node, StoreMount):
            return self._store_open(node, path, rest)
        if isinstance(node, FileEntry):
            return node.file.open()
        raise IsDirectoryError(f"/{path} is a directory")

    def stats(self) -> dict[str, Any]:
        cache = self.shared.cache
        figures = {"cache": {"budget_bytes": cache.budget_bytes, **cache.stats().as_dict(), **cache.budget_figures()},
                   "share": {"source": self.display_name, "stores_open": self._stores.count(),
                             "stores_opened": self._stores.opened, "stores_closed": self._stores.closed,
                             "max_open_stores": self._stores.max_open_stores,
                             "prefixes_resolved": len(self._stores.prefixes)}}
        return {**figures, **{name: figures_of() for name, figures_of in self.stats_extras.items()}}

    # ------------------------------------------------------------ routing

    def _resolve(self, path: str) -> tuple[Any, str]:
        """(the node at or above `path`, the rest of `path` below it): a folder, a catalog's root, a store
        mount with the path inside the store, or a file entry of a folder."""
        directory, _, name = path.rpartition("/")
        known = self._stores.prefixes.get(directory) if directory else None
        if known is not None:
            return known[0], f"{known[1]}/{name}" if known[1] else name
        node: Any = self._root
        parts = path.split("/") if path else []
        walked: list[str] = []
        for index, part in enumerate(parts):
            node = self._settled(node)
            if isinstance(node, StoreMount):
                self._stores.prefixes.put(directory, node, "/".join(parts[index:-1]))
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
        if known is not None and not (isinstance(known, Folder) and self._folders.expired(known)):
            return known
        if known is not None:
            self._stores.prefixes.clear()  # a folder listed again: what was resolved below it is decided anew
        if isinstance(node, dict):
            child = node.get(name)
            if child is None:
                return None
            with self._lock:
                self._nodes[full] = child
            return child
        if not isinstance(node, Folder):
            return None
        decided = self._folders.entries(node).get(name)
        if decided is None:
            return None
        entry = self._folders.entry_of(node, path, decided)
        if isinstance(entry, FileEntry):
            return entry
        child = self._folders.decide_folder(node, name, decided) if decided.kind is Kind.FOLDER else \
            self._folders.store_of(node, name, decided)
        with self._lock:
            self._nodes[full] = child
        return child

    def _settled(self, node: Any) -> Any:
        """A catalog's entry that is a share is its folder once looked into (opened here); any other node
        as it is."""
        if isinstance(node, StoreMount) and node.may_be_share:
            with node.in_use():
                self._stores.tree_of(node)
            return node.folder or node
        return node


    def _store_lookup(self, mount: StoreMount, path: str, rest: str) -> Entry:
        with mount.in_use():
            return self._store_lookup_in_use(mount, path, rest)

    def _store_lookup_in_use(self, mount: StoreMount, path: str, rest: str) -> Entry:
        if not rest:
            return DirEntry(path)
        source_file = mount.source_file_name
        if source_file is not None and rest == source_file:
            return self._source_entry(mount)
        tree = self._stores.tree_of(mount)
        if tree is None:
            if rest == ERROR_NOTE:
                return FileEntry(LayoutFile.document(self._error_note(mount)))
            raise NotFoundError(f"/{path}: no such file (the store could not be opened: see {ERROR_NOTE})")
        entry = tree.lookup(rest)
        return DirEntry(path) if isinstance(entry, DirEntry) else entry

    def _store_listdir(self, mount: StoreMount, path: str, rest: str) -> dict[str, Entry]:
        with mount.in_use():
            return self._store_listdir_in_use(mount, path, rest)

    def _store_listdir_in_use(self, mount: StoreMount, path: str, rest: str) -> dict[str, Entry]:
        tree = self._stores.tree_of(mount)
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

    def _store_open(self, mount: StoreMount, path: str, rest: str) -> OpenedFile:
        mount.file_opened()  # before the lookup: the store stays open from here to the file's close
        try:
            entry = self._store_lookup_in_use(mount, path, rest)
            if isinstance(entry, DirEntry):
                raise IsDirectoryError(f"/{path} is a directory")
            tree = mount.tree
            if tree is not None and rest != mount.source_file_name:
                return StoreFile(tree.open(rest), mount)
            assert isinstance(entry, FileEntry)  # the error note, or the store's own bytes: not through the store
            opened = entry.file.open()
        except BaseException:
            mount.file_closed()
            raise
        mount.file_closed()
        return opened

    def _source_entry(self, mount: StoreMount) -> FileEntry:
        assert mount.original is not None
        share, key, listed = mount.original
        return FileEntry(self._folders.plain_file(share, key, listed), "", listed.mtime_ns)

    def _error_note(self, mount: StoreMount) -> bytes:
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
            share = ShareFolders.open(source, storage_options, options.store, not_zarr.root_listing)
        except ZarrfsError:
            raise not_zarr from None
        if share is None:
            raise type(not_zarr)(f"{not_zarr}; nor is it a share (a folder with stores or files in it)") from None
        return ShareTree.of_folder(share, options, suffixes, max_open_stores)
