"""The virtual file tree: groups as directories, each array as a set of files.

An array `N` in group `P` appears as `P/N.npy`, `P/N.raw` with its header
sidecars `P/N.raw.hdr`, `P/N.mhd` (`P/N.t0.c1.mhd`... per volume past 3-D), `P/N.nrrd.nhdr`,
`P/N.tif`, `P/N.tiled.tif`, `P/N.json` (the
enabled formats that can express it; a georeferenced raster's `P/N.tif` is the tiled GeoTIFF and
its strip file `P/N.strips.tif`, see `formats.is_map`); a string or bytes array as `P/N.npy`
and `P/N.json` only, sized the first time they are asked about (the one
exception to "sizes from metadata": see engine/vlen_widths.py). Each directory also has
`.group.json` with the group's metadata and attributes, and an OME-Zarr
image group its pyramidal OME-TIFF, `NAME.ome.tif` (ome_images.py). A SOURCE that is a
single array appears in the mount root under the store's name. Names are
decided from metadata alone; the only chunks read are those of small 1-D
coordinate arrays that georeference a sibling (see `conventions.geo`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import posixpath
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..conventions.bioformats2raw import METADATA_FILE, collection_metadata
from ..conventions.resolve import SemanticsIndex
from ..conventions.semantics import Semantics
from ..engine.engine import Engine, SharedParts
from ..errors import IsDirectoryError, NotFoundError, StoreError
from ..options import EngineOptions
from ..formats import FORMATS, VOLUME_FORMATS, is_map, json_document
from ..formats.base import LazyLayout, Layout
from ..formats.tiled_tiff import LazyTiledLayout
from ..formats.vlen_files import VLEN_SUFFIXES, vlen_document, vlen_npy_layout
from ..model.meta import ArrayMeta, GroupMeta
from ..suffixes import GROUP_SUFFIXES, NC_SUFFIX, OME_TIFF_SUFFIX
from .contract import DeferredFile, OpenBytes, OpenedFile, VirtualFile
from .directory import Directory
from .entries import DirEntry, Entry, FileEntry, StatsEntry
from .layout_files import LayoutFile
from .netcdf_datasets import netcdf_files
from .ome_images import CollectionFile, collection_file, ome_tiff_files
from .tiled import tiled_file

log = logging.getLogger(__name__)

GROUP_FILE = ".group.json"
# Live counters (cache hits, loads, store requests...) at the mount root.
STATS_FILE = ".zarrfs-stats.json"




def _group_document(group: GroupMeta, collection: CollectionFile) -> LayoutFile:
    """`.group.json` of a bioformats2raw collection's group: its metadata and the collection's report."""
    return LayoutFile.document(json_document({**group.describe(), "bioformats2raw": collection.report()}))


# The formats whose layout is made of an array's shape, dtype, dimension names, opaque type and semantics
# alone (not of its name, path, grid or codecs, nor of the semantics' `sources`, which only describe where
# the meaning was found: a plate's fields differ there alone): arrays alike share one layout, built and
# sized once. A wide group of like arrays, or a plate's like levels, then lists, and `ls -l` sizes it (a
# TIFF's header included), once, not once per array. A map's `.tif` is its tiled GeoTIFF, bound to its
# chunks: not shared.
SHARED_LAYOUT_SUFFIXES = frozenset({".npy", ".raw", ".tif", ".strips.tif", ".bigtiff.tif"})
# Signatures of alike arrays remembered at once (the oldest forgotten past it): a group of all different
# arrays holds no more than this many layouts beyond its arrays' own.
MAX_SHARED_SIGNATURES = 4096


class SharedLayouts:
    """The layouts of `SHARED_LAYOUT_SUFFIXES` by the signature they are made of (see above)."""

    def __init__(self) -> None:
        self._by_signature: dict[tuple[Any, ...], dict[str, Layout | LazyLayout | None]] = {}
        self._lock = threading.Lock()

    def alike(self, meta: ArrayMeta, semantics: Semantics) -> dict[str, Layout | LazyLayout | None] | None:
        """The shared layouts of arrays like `meta` (a suffix absent: not built yet; None as a value: the
        format cannot express them); None when nothing is shared (semantics that cannot be hashed, a map)."""
        if is_map(semantics):
            return None
        described_alike = dataclasses.replace(semantics, sources=()) if semantics.sources else semantics
        signature = (meta.shape, meta.dtype, meta.dimension_names, meta.opaque_type, described_alike)
        try:
            hash(signature)
        except TypeError:
            return None
        with self._lock:
            shared = self._by_signature.get(signature)
            if shared is None:
                if len(self._by_signature) >= MAX_SHARED_SIGNATURES:
                    del self._by_signature[next(iter(self._by_signature))]
                shared = self._by_signature[signature] = {}
            return shared


# Documents made of an array's metadata alone (its `.json`, and the sidecar headers that name its `N.raw`):
# built at each size or open, never kept. A wide group lists each at the cost of a `RebuiltDocument`;
# building one again takes microseconds, and the kernel keeps its size and pages.
REBUILT_SUFFIXES = frozenset({".json", ".raw.hdr", ".mhd", ".nrrd.nhdr"})


class RebuiltDocument(VirtualFile):
    """An array's document, built by `FORMATS[suffix]` whenever it is sized or opened (see REBUILT_SUFFIXES)."""

    __slots__ = ("_suffix", "_meta", "_semantics", "_stem")

    def __init__(self, suffix: str, meta: ArrayMeta, semantics: Semantics, stem: str) -> None:
        self._suffix, self._meta, self._semantics, self._stem = suffix, meta, semantics, stem

    def _layout(self) -> Layout:
        built = FORMATS[self._suffix](self._meta, self._semantics, self._stem)
        # The same metadata built it when the directory was listed: it exists still.
        assert built is not None, f"/{self._meta.path}: {self._suffix} was built once"
        return built.layout if isinstance(built, LazyLayout) else built

    @property
    def size(self) -> int:
        return self._layout().size

    def open(self) -> OpenedFile:
        return LayoutFile(self._layout()).open()


def _built(suffix: str, meta: ArrayMeta, semantics: Semantics, stem: str,
           alike: dict[str, Layout | LazyLayout | None] | None) -> Layout | LazyLayout | None:
    """`FORMATS[suffix]`'s layout of the array: the one of the arrays alike (`SharedLayouts.alike`), built
    by the first of them, where the suffix's layout is made of what they share."""
    if alike is None or suffix not in SHARED_LAYOUT_SUFFIXES:
        return FORMATS[suffix](meta, semantics, stem)
    if suffix not in alike:
        alike[suffix] = FORMATS[suffix](meta, semantics, stem)
    return alike[suffix]


# Suffixes a single-array SOURCE's name loses: the store's kind, not the array's name.
SOURCE_SUFFIXES = (".zip", ".ozx", ".json", ".parq", ".parquet", ".zarr")


def source_name(source: str) -> str:
    """'/data/scan.zarr/' -> 'scan', 'zip::/data/scan.zarr.zip' -> 'scan': the name a single-array SOURCE
    appears under."""
    name = posixpath.basename(re.sub(r"[?#].*$", "", source.split("::")[-1]).rstrip("/"))
    for suffix in SOURCE_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[:-len(suffix)]
    return name or "array"


@dataclass
class VirtualTree:
    engine: Engine
    suffixes: tuple[str, ...] = (*FORMATS, *GROUP_SUFFIXES)
    root_name: str = "array"
    # More sections of the stats file, by name, from the layers above (the daemon's memory, its read times).
    stats_extras: dict[str, Callable[[], Any]] = field(default_factory=dict)
    # Built directories, with the hierarchy generation they were built from:
    # a metadata refresh (--metadata-ttl) makes them stale.
    _dirs: dict[str, tuple[int, Directory]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _building: dict[str, threading.Lock] = field(default_factory=dict)  # directories being built, see listdir
    _semantics: SemanticsIndex = field(init=False)
    _shared_layouts: SharedLayouts = field(default_factory=SharedLayouts)

    def __post_init__(self) -> None:
        self._semantics = SemanticsIndex(self.engine.hierarchy, self.engine.read_array)

    @classmethod
    def of_source(cls, source: str, storage_options: dict[str, Any] | None, options: EngineOptions,
                  suffixes: tuple[str, ...], shared: SharedParts | None = None,
                  layouts: SharedLayouts | None = None) -> VirtualTree:
        """The tree of SOURCE, its root read now: NotZarrError (and the like) before anything mounts.
        `shared`: the cache and open files of a mount of many stores (files/share.py); `layouts`: the
        layouts its stores' alike arrays share (a share of like stores sizes their files once)."""
        engine = Engine.open(source, storage_options, options, shared)
        try:
            engine.hierarchy.root()
        except BaseException:
            engine.close()
            raise
        return cls(engine, suffixes, source_name(source),
                   _shared_layouts=layouts if layouts is not None else SharedLayouts())

    def source_display_name(self) -> str:
        """The store as logs and `mount` show it (credentials redacted)."""
        return self.engine.store.display_name

    def source_is_local(self) -> bool:
        return self.engine.store.local_path("") is not None

    def close(self) -> str:
        """Stop the engine; a one-line summary of what it did, for the log."""
        stats = self.engine.cache.stats()
        store = self.engine.store
        self.engine.close()
        return f"cache {stats.as_dict()}; store requests {store.requests}, bytes {store.bytes_fetched}"

    def lookup(self, path: str) -> Entry:
        """The entry at a mount path like '/grp/arr.npy'."""
        path = path.strip("/")
        if not path:
            return DirEntry("")
        parent, _, name = path.rpartition("/")
        parent_entry = self.lookup(parent) if parent else DirEntry("")
        if not isinstance(parent_entry, DirEntry):
            raise NotFoundError(f"/{path}: {parent} is a file")
        entry = self.listdir(parent_entry).get(name)
        if entry is None:
            raise self._unreachable(parent_entry.group_path, name) or NotFoundError(f"/{path}: no such file")
        return entry

    def _unreachable(self, group_path: str, name: str) -> StoreError | None:
        """The store's error when `name` is a child node of the group (or one of its files) whose metadata
        could not be fetched: EIO for whoever looks it up, not a silent ENOENT. (Broken metadata stays
        ENOENT: that node is not served, and `zarrfs tree` says why.)"""
        for child in self.engine.hierarchy.children(group_path):
            if isinstance(child.error, StoreError) and (name == child.name or name.startswith(child.name + ".")):
                return child.error
        return None

    def fast_read_entry(self) -> Any:
        """The C function that answers reads of attached files without Python (a capsule)."""
        return self.engine.fast_read_entry()

    def fast_read_counters(self) -> dict[str, Any]:
        return self.engine.fast_read_counters()

    def open(self, path: str) -> OpenedFile:
        """The file at `path`, opened for reading."""
        entry = self.lookup(path)
        if isinstance(entry, StatsEntry):
            extras = {name: figures() for name, figures in self.stats_extras.items()}
            return OpenBytes(json_document({**self.engine.stats(), **extras}), direct_io=True)
        if not isinstance(entry, FileEntry):
            raise IsDirectoryError(f"/{path.strip('/')} is a directory")
        return entry.file.open()

    def listdir(self, directory: DirEntry) -> Mapping[str, Entry]:
        """The directory's entries, built once per hierarchy generation. One build at a time per
        directory: a caller that finds it under way (the root's background listing, a second `ls`)
        waits for it and takes its result instead of deciding every file again."""
        path = directory.group_path
        generation = self.engine.hierarchy.generation
        with self._lock:
            cached = self._dirs.get(path)
            if cached is not None and cached[0] == generation:
                return cached[1]
            building = self._building.setdefault(path, threading.Lock())
        with building:
            with self._lock:
                cached = self._dirs.get(path)
            if cached is not None and cached[0] == generation:
                return cached[1]
            try:
                entries = self._build_dir(path)
                with self._lock:
                    self._dirs[path] = (generation, entries)
            finally:
                with self._lock:
                    self._building.pop(path, None)
        return entries

    # -------------------------------------------------------------- internal

    def _build_dir(self, group_path: str) -> Directory:
        hierarchy = self.engine.hierarchy
        root = hierarchy.root() if not group_path else None
        entries = Directory(self._array_entry)
        if isinstance(root, ArrayMeta):
            self._add_array(entries, self.root_name, root)
            entries.add(STATS_FILE, StatsEntry())
            return entries
        for child in hierarchy.children(group_path):
            if isinstance(child.node, GroupMeta):
                entries.add(child.name, DirEntry(child.node.path))
        for child in hierarchy.children(group_path):
            if isinstance(child.node, ArrayMeta):
                for name in self._add_array(entries, child.name, child.node):
                    log.warning("/%s: %s of array %s clashes with a sibling; not shown",
                                group_path, name, child.node.path)
        if not group_path:
            entries.add(STATS_FILE, StatsEntry())
        group = hierarchy.node(group_path)
        group_document = FileEntry(LayoutFile.document(json_document(group.describe())))
        if isinstance(group, GroupMeta):
            directory_name = group_path.rpartition("/")[2] or self.root_name
            files = ome_tiff_files(self.engine, group, directory_name, self.semantics) \
                if OME_TIFF_SUFFIX in self.suffixes else {}
            collection = collection_file(self.engine, group, directory_name, self.semantics,
                                         OME_TIFF_SUFFIX in self.suffixes)
            if collection is not None:
                files.setdefault(collection.name, collection.file)
                # The collection's report walks its series: made when the document is first read.
                group_document = FileEntry(DeferredFile(functools.partial(_group_document, group, collection)))
            for name, served in files.items():
                if not entries.add(name, FileEntry(served, OME_TIFF_SUFFIX)):
                    log.warning("/%s: the image's %s clashes with a sibling; not shown", group_path, name)
            original = collection_metadata(hierarchy, group)
            if original is not None:
                entries.add(METADATA_FILE, FileEntry(LayoutFile.document(original)))
        if NC_SUFFIX in self.suffixes and isinstance(group, GroupMeta):
            self._add_netcdf_files(entries, group)
        entries.add(GROUP_FILE, group_document)
        return entries

    def _add_netcdf_files(self, entries: Directory, group: GroupMeta) -> None:
        directory_name = group.path.rpartition("/")[2] or self.root_name
        try:
            files = netcdf_files(self.engine, group, directory_name)
        except Exception:  # a file that cannot be built must not hide the directory
            log.exception("group /%s: cannot build its NetCDF file", group.path)
            return
        for name, served in files.items():
            if not entries.add(name, FileEntry(served, NC_SUFFIX)):
                log.warning("/%s: the dataset's %s clashes with a sibling; not shown", group.path, name)

    def semantics(self, meta: ArrayMeta) -> Semantics:
        """What the array's conventions say (`Semantics()` when nothing was recognised)."""
        return self._semantics.of(meta)

    def _add_array(self, entries: Directory, name: str, meta: ArrayMeta) -> list[str]:
        """The array's files added to the directory: named, not held, when each is `name + suffix` (see
        directory.py); the names a sibling had first."""
        if meta.vlen:
            return entries.add_array_files(self._vlen_files(name, meta))
        semantics = self.semantics(meta)
        alike = self._shared_layouts.alike(meta, semantics)
        layouts: dict[str, Layout | LazyLayout] = {}
        volumes: dict[str, Entry] = {}
        for suffix in self.suffixes:
            if suffix not in FORMATS:  # a group's file (the image's .ome.tif), not an array's
                continue
            try:
                layout = _built(suffix, meta, semantics, name, alike)
                in_volumes = VOLUME_FORMATS[suffix](meta, semantics, name) if suffix in VOLUME_FORMATS else {}
            except Exception:  # a format that cannot express this array must not hide the others
                log.exception("array /%s: cannot build its %s layout", meta.path, suffix)
                continue
            if layout is not None:
                layouts[suffix] = layout
            volumes.update((volume_name, FileEntry(LayoutFile(volume, self.engine, meta.path), suffix))
                           for volume_name, volume in in_volumes.items())
        if not volumes:
            clashes = entries.add_array(name, meta, tuple(layouts))
            for suffix, layout in layouts.items():  # the layouts just built serve the first lookups too
                if name + suffix not in clashes and \
                        not entries.keep(name + suffix, self._file_entry(name, meta, semantics, suffix, layout)):
                    break
            return clashes
        files = {name + suffix: self._file_entry(name, meta, semantics, suffix, layout)
                 for suffix, layout in layouts.items()}
        return entries.add_array_files({**files, **volumes})

    def _array_entry(self, name: str, meta: ArrayMeta, suffix: str) -> FileEntry | None:
        """The entry of file `name + suffix` of an array the directory named (`Directory.add_array`)."""
        semantics = self.semantics(meta)
        if suffix in REBUILT_SUFFIXES:  # built when listed, so it exists; built again at each size or open
            return FileEntry(RebuiltDocument(suffix, meta, semantics, name), suffix)
        layout = _built(suffix, meta, semantics, name, self._shared_layouts.alike(meta, semantics))
        return None if layout is None else self._file_entry(name, meta, semantics, suffix, layout)

    def _file_entry(self, name: str, meta: ArrayMeta, semantics: Semantics, suffix: str,
                    layout: Layout | LazyLayout) -> FileEntry:
        if isinstance(layout, LazyTiledLayout):  # tiles of its levels, built when first used
            return FileEntry(DeferredFile(functools.partial(tiled_file, self.engine, meta, semantics, layout.plan)),
                             suffix)
        if suffix in REBUILT_SUFFIXES:
            return FileEntry(RebuiltDocument(suffix, meta, semantics, name), suffix)
        return FileEntry(LayoutFile(layout, self.engine, meta.path), suffix)

    def _vlen_files(self, name: str, meta: ArrayMeta) -> dict[str, Entry]:
        """`N.npy` and `N.json` of a variable-length array, sized when first asked (engine/vlen_widths.py)."""
        engine = self.engine
        semantics = self.semantics(meta)

        def npy() -> LayoutFile:
            return LayoutFile(vlen_npy_layout(engine.vlen.fixed(meta).meta), engine, meta.path, in_c=False)

        def document() -> LayoutFile:
            fixed = engine.vlen.fixed(meta)
            return LayoutFile.document(json_document(vlen_document(meta, semantics, fixed.width, fixed.meta.nbytes,
                                                                   lambda: engine.vlen.objects(meta))))

        builders = {".npy": npy, ".json": document}
        return {name + suffix: FileEntry(DeferredFile(builders[suffix]), suffix)
                for suffix in VLEN_SUFFIXES if suffix in self.suffixes}
