"""Which entries of a share are store roots: told from listings, probed only where a name is ambiguous.

A share is a folder or prefix holding stores among ordinary files. An entry
is one of:

- a folder whose own listing shows Zarr metadata at its top (`zarr.json`,
  `.zgroup`, `.zarray`, `.zmetadata`, v1's `meta`), an Icechunk
  repository's top (`snapshots/` with `refs/` or `repo`), or whose name ends
  in `.parq`/`.parquet` (a Parquet reference set): a store;
- a `.ozx` file (a zipped OME-Zarr, RFC-9): a store, by its name alone;
- a `.zip` file whose central directory has Zarr metadata at its top, or a
  `.json` file that is a kerchunk reference set: a store, known only once
  probed (its tail, or its first 4 KiB);
- anything else: itself, an ordinary folder or file.

Deciding a folder costs its listing, which is also what it shows when it is
not a store, so a folder is decided when it is first looked up, never when
its parent is listed (`ls` of a folder of 10,000 stores lists one folder).
Files are decided when their folder is listed, since that is when they must
be shown as directories or files; the ambiguous ones are probed side by side
(`probe_files`), each within a deadline.
"""

from __future__ import annotations

import enum
import io
import logging
import posixpath
import threading
import zipfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from ..byte_ranges import RangeRequest
from ..options import StoreOptions
from ..stores.icechunk import looks_like_repository
from ..stores.references import PARQUET_SUFFIXES, SNIFF_BYTES, looks_like_references
from ..stores.redact import redact_url
from ..stores.store import Listed, Store

log = logging.getLogger(__name__)

# Files whose presence at a folder's top makes it a Zarr store root (v3, v2, v2 consolidated, v1).
STORE_MARKERS = frozenset({"zarr.json", ".zgroup", ".zarray", ".zmetadata"})
V1_MARKERS = frozenset({"meta", "attrs"})
ZIPPED_STORE_SUFFIX = ".zip"
ZIPPED_OME_ZARR_SUFFIX = ".ozx"
REFERENCES_SUFFIX = ".json"
# Probes of one folder's ambiguous files running at once, and how long they may take together: a folder
# of many zips is shown after that, the files not decided in time as ordinary files (and said once).
PROBES_AT_ONCE = 16
PROBE_DEADLINE_SECONDS = 10.0
# The most of a zip's tail a probe reads: the end record and, for most stores, the central directory.
ZIP_TAIL_BYTES = 1 << 20


class Kind(enum.Enum):
    FOLDER = "folder"
    FILE = "file"
    STORE = "store"  # a Zarr store in a folder, or an Icechunk repository, or a Parquet reference set
    ZIPPED = "zipped store"  # a zip archive holding a store at its top
    REFERENCES = "reference set"  # a kerchunk / VirtualiZarr JSON reference file


@dataclass(frozen=True)
class Decided:
    """An entry of a share's folder as it is shown."""

    listed: Listed
    kind: Kind

    @property
    def is_store(self) -> bool:
        return self.kind in (Kind.STORE, Kind.ZIPPED, Kind.REFERENCES)


def folder_kind(name: str, listing: Iterable[Listed]) -> Kind:
    """A folder's kind from its own listing (and its name, for a Parquet reference set)."""
    if name.lower().endswith(PARQUET_SUFFIXES):
        return Kind.STORE
    directories: set[str] = set()
    files: set[str] = set()
    for entry in listing:
        (directories if entry.directory else files).add(entry.name)
    if files & STORE_MARKERS or V1_MARKERS <= files or looks_like_repository(directories, files):
        return Kind.STORE
    return Kind.FOLDER


def needs_probe(name: str) -> bool:
    """Whether a file's name leaves open whether it is a store (its content decides)."""
    lower = name.lower()
    return lower.endswith(ZIPPED_STORE_SUFFIX) or lower.endswith(REFERENCES_SUFFIX)


def file_kind_by_name(name: str) -> Kind:
    return Kind.ZIPPED if name.lower().endswith(ZIPPED_OME_ZARR_SUFFIX) else Kind.FILE


def entry_kind(listed: Listed, probed: dict[str, Kind]) -> Kind:
    """How an entry of a folder's listing is shown before it is looked into: a sub-folder is a folder (its own
    listing decides whether it is a store root) unless its name says store; a file as probed or by its name."""
    if listed.directory:
        return folder_kind(listed.name, ())
    return probed.get(listed.name) or (Kind.FILE if needs_probe(listed.name) else file_kind_by_name(listed.name))


def probe_file(store: Store, key: str, size: int) -> Kind:
    """An ambiguous file's kind from its content: a zip with Zarr metadata at its top is a zipped store,
    a JSON document of kerchunk references a reference set; anything else, or what cannot be read, a file."""
    lower = key.lower()
    try:
        if lower.endswith(ZIPPED_STORE_SUFFIX):
            return Kind.ZIPPED if _zip_holds_store(store, key, size) else Kind.FILE
        head = store.get_range(key, RangeRequest(0, min(size, SNIFF_BYTES))) if size else b""
    except Exception as exc:  # noqa: BLE001 - a file that cannot be probed is shown as the file it is
        log.info("%s: %s: not probed (%s); shown as a file", store.display_name, key, exc)
        return Kind.FILE
    return Kind.REFERENCES if head is not None and looks_like_references(head) else Kind.FILE


def _zip_holds_store(store: Store, key: str, size: int) -> bool:
    """Whether the zip's central directory names Zarr metadata at the archive's top. Reads its tail only:
    the end record and the central directory, which zipfile reads from a buffer of those bytes."""
    if size < 22:  # shorter than a zip's end record
        return False
    start = max(0, size - ZIP_TAIL_BYTES)
    tail = store.get_range(key, RangeRequest(start, size))
    if tail is None:
        return False
    names = _central_directory_names(tail, start)
    return names is not None and bool(
        {posixpath.normpath(name) for name in names if "/" not in name.rstrip("/")} & STORE_MARKERS)


def _central_directory_names(tail: bytes | bytearray, tail_start: int) -> list[str] | None:
    """The member names of a zip from its last bytes, or None when the central directory is not within them."""
    class _Tail(io.RawIOBase):
        """The archive's bytes from `tail_start` on, at their offsets in the whole archive."""

        def __init__(self) -> None:
            self.position = 0

        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return True

        def seek(self, offset: int, whence: int = 0) -> int:
            end = tail_start + len(tail)
            self.position = offset if whence == 0 else self.position + offset if whence == 1 else end + offset
            return self.position

        def tell(self) -> int:
            return self.position

        def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
            if self.position < tail_start:
                raise OSError("the central directory lies before the bytes read")
            piece = tail[self.position - tail_start:self.position - tail_start + len(buffer)]
            buffer[:len(piece)] = piece
            self.position += len(piece)
            return len(piece)

    try:
        with zipfile.ZipFile(io.BufferedReader(_Tail())) as archive:
            return archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return None


def probe_files(store: Store, folder: str, entries: list[Listed]) -> dict[str, Kind]:
    """The kinds of a folder's files whose names need a probe, probed side by side within the deadline;
    those not decided in time are files (and said once)."""
    ambiguous = [entry for entry in entries if not entry.directory and needs_probe(entry.name)]
    if not ambiguous:
        return {}
    kinds: dict[str, Kind] = {}
    pool = ThreadPoolExecutor(max_workers=min(PROBES_AT_ONCE, len(ambiguous)), thread_name_prefix="zarrfs-probe")
    try:
        futures = {pool.submit(probe_file, store, posixpath.join(folder, entry.name) if folder else entry.name,
                               entry.size): entry.name for entry in ambiguous}
        done, late = wait(futures, timeout=PROBE_DEADLINE_SECONDS)
        for future in done:
            kinds[futures[future]] = future.result()
        if late:
            log.warning("%s: /%s: %d files not probed within %g s, shown as files: %s", store.display_name,
                        folder, len(late), PROBE_DEADLINE_SECONDS,
                        ", ".join(sorted(futures[future] for future in late)[:5]))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return kinds


def describe_store(name: str, listing: Iterable[Listed]) -> str:
    """What kind of store a folder is, from its listing: what `zarrfs tree` of a share prints beside it."""
    if name.lower().endswith(PARQUET_SUFFIXES):
        return "kerchunk reference set (Parquet)"
    directories: set[str] = set()
    files: set[str] = set()
    for entry in listing:
        (directories if entry.directory else files).add(entry.name)
    if "zarr.json" in files:
        return "Zarr v3 store"
    if ".zmetadata" in files:
        return "Zarr v2 store (consolidated)"
    if files & {".zgroup", ".zarray"}:
        return "Zarr v2 store"
    if V1_MARKERS <= files:
        return "Zarr v1 store"
    if looks_like_repository(directories, files):
        return "Icechunk repository"
    return "folder"


class ShareFolders:
    """A share's folders, read through its one store: listings, probes, each entry's URL. The layers above
    see a share only through this (and never a store itself)."""

    def __init__(self, store: Store, storage_options: dict[str, Any], root_listing: list[Listed] | None = None) -> None:
        self.store = store
        self.storage_options = storage_options  # the share's: every store in it is opened with them
        # The root's listing as `open` read it, handed to the root folder's first listing: the mount lists
        # its root once. Later listings ask the store, so a share that changes is seen changed.
        self._root_listing = root_listing
        self._root_lock = threading.Lock()

    @classmethod
    def open(cls, url: str, storage_options: dict[str, Any], options: StoreOptions,
             listing: list[Listed] | None = None) -> ShareFolders | None:
        """The share at `url`, or None when it is none: nothing is listed there (not a folder, or an empty
        one), or its listing is a store root's (a store that could not be opened is not a share: its own
        error is what to say). `listing`: the root's, when it was just listed (NotZarrError.root_listing)."""
        store = Store.open(url, storage_options, options)
        if listing is None:
            listing = store.list_entries("")
        if not listing or folder_kind(posixpath.basename(url.rstrip("/")), listing) is Kind.STORE:
            return None
        return cls(store, storage_options, listing)

    @property
    def display_name(self) -> str:
        return self.store.display_name

    @property
    def local(self) -> bool:
        return self.store.local_path("") is not None

    def listing(self, key: str) -> list[Listed]:
        if key == "" and self._root_listing is not None:
            with self._root_lock:
                listing, self._root_listing = self._root_listing, None
            if listing is not None:
                return listing
        return self.store.list_entries(key)

    def probe(self, key: str, listing: list[Listed]) -> dict[str, Kind]:
        return probe_files(self.store, key, listing)

    def url(self, key: str) -> str:
        """The SOURCE of `key` as `zarrfs mount` would take it (a local path stays a path)."""
        root = self.store.root
        path = f"{root.rstrip('/')}/{key}" if root else key
        protocol = self.store.fs.protocol
        name = protocol if isinstance(protocol, str) else protocol[0]
        if name in ("file", "local") or "://" in path:
            return path
        return f"{name}://{path}"


def shown_url(url: str) -> str:
    """A source's URL as logs and notes show it: without credentials."""
    return redact_url(url)
