"""A group's directory: its entries by name, an array's files named from the array, not held.

A wide group lists seven or more files per array (docs/collections.md#wide-groups). Held as entries,
those were most of what a listed array cost (a name, an entry and a file object each: about 1.4 KiB
per array). Here an array whose files are all named `stem + suffix` is held as its metadata alone:
its names are made when the directory is iterated, and an entry when its name is looked up (kept in a
small recently-used set, so that a lookup and the open after it share one file). Arrays whose files
need more (a variable-length array's width, found once; the per-volume headers of an array past 3-D)
keep their entries, as every other file of the directory does.

A name two children would claim goes to the first (groups, then arrays in order, then the group's own
files), as a dict filled in that order keeps it; the later claimant's file is not shown.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping

from ..model.meta import ArrayMeta
from .entries import DirEntry, Entry

# Entries made by lookups, kept per directory: a lookup and the getattr or open after it get the same
# file (a tiled TIFF's tiles are built once per file object).
MADE_ENTRIES = 256

ArrayFileMaker = Callable[[str, ArrayMeta, str], Entry | None]  # (stem, meta, suffix) -> the file's entry


class Directory(Mapping[str, Entry]):
    """Entries by name (see the module's doc); filled in listing order by `add`, `add_array`,
    `add_array_files`, then only read."""

    def __init__(self, make: ArrayFileMaker) -> None:
        self._make = make
        self._held: dict[str, Entry] = {}  # every entry held, in listing order
        self._order: list[str | None] = []  # a held name, or None for the next named array's files
        self._arrays: dict[str, ArrayMeta] = {}  # stem -> metadata of the arrays whose files are named
        self._default: tuple[str, ...] | None = None  # the suffixes most named arrays have
        self._other: dict[str, tuple[str, ...]] = {}  # stem -> its suffixes, where not the default
        self._suffixes: tuple[str, ...] = ()  # every suffix a named array has, the longest first
        self._hidden: set[tuple[str, str]] = set()  # (stem, suffix) whose name a sibling had first
        self._count = 0
        self._made: OrderedDict[str, Entry] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------- filling

    def add(self, name: str, entry: Entry) -> bool:
        """`entry` under `name` unless the name is taken; whether it was added."""
        if name in self:
            return False
        self._held[name] = entry
        self._order.append(name)
        self._count += 1
        return True

    def add_array_files(self, files: dict[str, Entry]) -> list[str]:
        """An array's files held as entries; the names a sibling had first (not added)."""
        return [name for name, entry in files.items() if not self.add(name, entry)]

    def add_array(self, stem: str, meta: ArrayMeta, suffixes: tuple[str, ...]) -> list[str]:
        """An array whose files are `stem + suffix`, named and not held; the names a sibling had first."""
        if not suffixes:  # no format can express it
            return []
        clashes = [stem + suffix for suffix in suffixes if stem + suffix in self]
        if self._default is None:
            self._default = suffixes
        elif suffixes != self._default:
            self._other[stem] = suffixes
        if any(suffix not in self._suffixes for suffix in suffixes):
            self._suffixes = tuple(sorted({*self._suffixes, *suffixes}, key=len, reverse=True))
        self._arrays[stem] = meta
        self._hidden.update((stem, name[len(stem):]) for name in clashes)
        self._order.append(None)
        self._count += len(suffixes) - len(clashes)
        return clashes

    def keep(self, name: str, entry: Entry) -> bool:
        """`entry`, just made for the named file `name` while the directory was filled (its layout was built
        to learn the suffixes), kept for the first lookups while the recently-made set has room: a small
        directory's lookups then build nothing again. False once the set is full (nothing more is kept)."""
        with self._lock:
            if len(self._made) >= MADE_ENTRIES:
                return False
            self._made.setdefault(name, entry)
            return True

    # ------------------------------------------------------------- reading

    def typed_names(self) -> Iterator[tuple[str, bool]]:
        """(name, whether a directory) of every entry, in listing order, without making any."""
        stems = iter(self._arrays)
        for item in self._order:
            if item is not None:
                yield item, isinstance(self._held[item], DirEntry)
                continue
            stem = next(stems)
            for suffix in self._suffixes_of(stem):
                if (stem, suffix) not in self._hidden:
                    yield stem + suffix, False

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self.typed_names())

    def __len__(self) -> int:
        return self._count

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._held or self._named(name) is not None)

    def __getitem__(self, name: str) -> Entry:
        held = self._held.get(name)
        if held is not None:
            return held
        with self._lock:
            made = self._made.get(name)
            if made is not None:
                self._made.move_to_end(name)
                return made
        named = self._named(name)
        entry = None if named is None else self._make(named[0], self._arrays[named[0]], named[1])
        if entry is None:
            raise KeyError(name)
        with self._lock:
            entry = self._made.setdefault(name, entry)
            if len(self._made) > MADE_ENTRIES:
                self._made.popitem(last=False)
        return entry

    def _suffixes_of(self, stem: str) -> tuple[str, ...]:
        return self._other.get(stem) or self._default or ()

    def _named(self, name: str) -> tuple[str, str] | None:
        """(stem, suffix) of the named array's file called `name`, None when there is none."""
        for suffix in self._suffixes:
            if name.endswith(suffix):
                stem = name[:-len(suffix)]
                if stem in self._arrays and suffix in self._suffixes_of(stem) and (stem, suffix) not in self._hidden:
                    return stem, suffix
        return None


def typed_names(entries: Mapping[str, Entry]) -> Iterator[tuple[str, bool]]:
    """(name, whether a directory) of a directory's entries, without making the ones it does not hold."""
    if isinstance(entries, Directory):
        return entries.typed_names()
    return ((name, isinstance(entry, DirEntry)) for name, entry in entries.items())
