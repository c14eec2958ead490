"""One contract for a virtual file: what the tree lists (`VirtualFile`) and what an open gives (`OpenedFile`).

A file kind knows its size (from metadata alone, but for a variable-length
array's, found once) and opens into an `OpenedFile`, which the FUSE front
reads through and which says itself whether and how C may serve its reads:

- `read_into(offset, out)`: the Python path, every byte of the file;
- `attach(number)`: the front numbered the open file; the file registers
  with the C path what C can answer (an array's C-order region, bytes held
  in memory, a NetCDF file's variables) and says whether it registered
  anything: the C grant. A file that grants nothing keeps the default;
- `load_for_c(offset, out, write)`: a read C missed within what the file
  granted (fuse/_fast_read.c asks once per miss): the stretch C may copy
  next, or None when the bytes were written into `out` here;
- `close()`: the grant ends; C forgets the number.

The kinds: `layout_files.py` (a `formats` layout: header, an array's element
region, trailer; documents made of metadata alone), `tiled.py` (tiled TIFFs,
the OME-TIFFs of `ome_images.py` included), `netcdf_datasets.py` (NetCDF).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable

import numpy as np

from ..single_flight import Once


class OpenedFile(ABC):
    """One open of a virtual file: what the FUSE front reads through (see the module's doc).

    `direct_io` files bypass the kernel's page cache: the counters file
    (made at open, its size known only then) and tiled TIFFs (whole tiles at
    random places: the kernel's readahead past a tile would decode chunks
    nobody asked for).
    """

    direct_io: bool = False

    @property
    @abstractmethod
    def size(self) -> int: ...

    @abstractmethod
    def read_into(self, offset: int, out: np.ndarray) -> int:
        """Write up to `len(out)` bytes of the file at `offset` into `out`; return how many."""

    def attach(self, number: int) -> bool:
        """The C grant: register with the C path what it may answer of this file, as open file
        `number`; whether anything was. By default nothing: every read takes the Python path."""
        return False

    def load_for_c(self, offset: int, out: np.ndarray, write: bool) -> int | None:
        """A read C missed, within what `attach` granted: the stretch C may answer next once it has
        copied this read, or None when the bytes were written into `out` here (always, with `write`)."""
        raise AssertionError(f"{type(self).__name__} granted C nothing, so C misses none of its reads")

    def close(self) -> None:  # noqa: B027 - a default, not abstract: most files hold nothing to let go
        """The open ends: C forgets what `attach` granted."""

    def version(self) -> Hashable:
        """What tells this open's bytes from another open's of the same path: equal for two opens
        of one version of the file, so that the kernel may keep the pages the earlier one cached
        (fuse/ops.py). By default the size: files with a store behind them say more."""
        return self.size


class VirtualFile(ABC):
    """One file of the tree: its size, and `open`."""

    __slots__ = ()  # (kinds a wide group holds many of have slots: LayoutFile)

    @property
    @abstractmethod
    def size(self) -> int: ...

    @abstractmethod
    def open(self) -> OpenedFile: ...


class DeferredFile(VirtualFile):
    """A file built the first time it is sized or opened: a directory lists without building it (a
    TIFF's IFDs, an OME-TIFF's plate of wells, a variable-length array's width). `build` runs once;
    a failure goes to that caller and the next one tries again (a store may fail only for a while)."""

    def __init__(self, build: Callable[[], VirtualFile]) -> None:
        self.file = Once(build)

    @property
    def size(self) -> int:
        return self.file.value().size

    def open(self) -> OpenedFile:
        return self.file.value().open()


class OpenBytes(OpenedFile):
    """An open file whose every byte is in `content` (the counters file, made at its open)."""

    def __init__(self, content: bytes, direct_io: bool = False) -> None:
        self.content = content
        self.direct_io = direct_io

    @property
    def size(self) -> int:
        return len(self.content)

    def read_into(self, offset: int, out: np.ndarray) -> int:
        n = max(0, min(len(out), len(self.content) - offset))
        out[:n] = np.frombuffer(self.content, np.uint8, n, offset)
        return n
