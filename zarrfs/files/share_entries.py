"""A share's folders as the mount shows them: each listed once (again after the metadata TTL), its entries
decided (a sub-folder a folder or a store root by its own listing, a file by its name or a probe), and
each entry made the node or file it is."""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable

from ..engine.cache import ChunkCache
from ..engine.plain_files import PlainFileReader
from ..errors import StoreError
from ..hierarchy.folders import Decided, Kind, Listed, ShareFolders, entry_kind, folder_kind, shown_url
from ..options import EngineOptions
from .share_nodes import Folder, PlainFile, Source, StoreMount
from .tree import DirEntry, Entry, FileEntry

log = logging.getLogger(__name__)


class FolderEntries:
    """The decided entries of a share's folders, and the node or file each entry is."""

    def __init__(self, options: EngineOptions, cache: Callable[[], ChunkCache]) -> None:
        self.options = options
        self._cache = cache  # the mount's one cache, which remote ordinary files are read through

    def expired(self, folder: Folder) -> bool:
        ttl = self.options.metadata_ttl
        return ttl is not None and folder.entries is not None and time.monotonic() - folder.listed_at > ttl

    def entries(self, folder: Folder) -> dict[str, Decided]:
        """A folder's entries, listed once (again after the metadata TTL); ambiguous files probed."""
        with folder.lock:
            if folder.entries is not None and not self.expired(folder):
                return folder.entries
            listing = folder.share.listing(folder.key)
            probed = folder.share.probe(folder.key, listing)
            entries: dict[str, Decided] = {}
            for listed in sorted(listing, key=lambda entry: entry.name):
                entries[listed.name] = Decided(listed, entry_kind(listed, probed))
            folder.entries, folder.listed_at = entries, time.monotonic()
            return entries

    def decide_folder(self, parent: Folder, name: str, decided: Decided) -> Folder | StoreMount:
        """A sub-folder, told a store root or a folder by its own listing (which a folder keeps as its
        entries: deciding costs no request more than showing it)."""
        key = posixpath.join(parent.key, name) if parent.key else name
        folder = Folder(parent.share, key, parent.options)
        try:
            listing = parent.share.listing(key)
        except StoreError as exc:
            log.error("%s: cannot list: %s", shown_url(parent.url(name)), exc)
            return StoreMount(name, Source(parent.url(name), {}, parent.options), Kind.FOLDER, error=exc)
        if folder_kind(name, listing) is Kind.STORE:
            return self.store_of(parent, name, Decided(decided.listed, Kind.STORE))
        with folder.lock:
            probed = parent.share.probe(key, listing)
            folder.entries = {listed.name: Decided(listed, entry_kind(listed, probed))
                              for listed in sorted(listing, key=lambda entry: entry.name)}
            folder.listed_at = time.monotonic()
        return folder

    def store_of(self, folder: Folder, name: str, decided: Decided) -> StoreMount:
        url = folder.url(name)
        if decided.kind is Kind.ZIPPED and not name.lower().endswith(".ozx"):
            url = f"zip::{url}"  # (a .ozx is opened as the zip it is by the store layer itself)
        key = posixpath.join(folder.key, name) if folder.key else name
        original = (folder.share, key, decided.listed) if not decided.listed.directory else None
        source = Source(url, dict(folder.share.storage_options), folder.options)
        return StoreMount(name, source, decided.kind, original)

    def entry_of(self, folder: Folder, path: str, decided: Decided) -> Entry:
        listed = decided.listed
        if decided.kind is Kind.FILE:
            key = posixpath.join(folder.key, listed.name) if folder.key else listed.name
            return FileEntry(self.plain_file(folder.share, key, listed), "", listed.mtime_ns)
        return DirEntry(posixpath.join(path, listed.name) if path else listed.name)

    def plain_file(self, share: ShareFolders, key: str, listed: Listed) -> PlainFile:
        def open_reader() -> PlainFileReader:
            timeout = max(self.options.read_timeout, self.options.store.worst_case_seconds())
            return PlainFileReader(share.store, key, listed.size, listed.mtime_ns, self._cache(), timeout)
        return PlainFile(open_reader, listed.size)
