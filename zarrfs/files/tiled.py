"""Tiled TIFFs (`N.tiled.tif`, a map's `N.tif`, the `.ome.tif` of ome_images.py): a tiled layout bound
to the arrays of its levels, its overviews included.

Tiles are not C order and overview levels are other arrays: the Python path
reads them through the readers of the levels (engine/tiles.py), whole tiles
at random places, so the kernel's readahead is off (`direct_io`: it would
decode chunks nobody asked for). C answers the reads of the file's head (its
IFDs and tag values, held in memory: thousands of small reads as a reader
opens the file).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol

import numpy as np

from ..conventions.pyramid import coarser_levels
from ..conventions.semantics import Semantics
from ..engine.engine import Engine
from ..engine.served import ServedChunks
from ..engine.tiles import read_tile_bytes
from ..formats.tiled_tiff import TiledLayout, tiled_layout
from ..model.meta import ArrayMeta
from ..model.tiling import TileGrid
from .contract import OpenedFile, VirtualFile


class TileRegions(Protocol):
    """What `TiledFile` needs of a pure tiled layout (`formats.tiled_tiff.TiledLayout`)."""

    @property
    def size(self) -> int: ...
    @property
    def grids(self) -> tuple[TileGrid, ...]: ...
    @property
    def samples(self) -> tuple[np.dtype, ...]: ...  # each level's element type
    @property
    def head(self) -> bytes: ...  # the file's first bytes, its IFDs (formats/tiff_head.py)

    def read_into(self, offset: int, out: np.ndarray, read_tiles: Any) -> int: ...


class TiledFile(VirtualFile):
    """A tiled layout bound to the arrays of its levels (`paths[i]` serves `layout.grids[i]`)."""

    def __init__(self, layout: TileRegions, engine: Engine, paths: tuple[str, ...]) -> None:
        self.layout, self.engine, self.paths = layout, engine, paths

    @property
    def size(self) -> int:
        return self.layout.size

    def open(self) -> OpenTiledFile:
        return OpenTiledFile(self)



class OpenTiledFile(OpenedFile):
    """One open of a tiled TIFF: its tiles read through the levels' readers, taken at the open (one
    version of the store per open file: docs/live-stores.md); C granted its head."""

    direct_io = True

    def __init__(self, file: TiledFile) -> None:
        self.file = file
        self.layout = file.layout
        self._readers = [file.engine.reader(path) for path in file.paths]
        self._head = HeldHead(file.engine.cache.served, file.layout.head, self.read_into)

    def read_tiles(self, level: int, start: int, stop: int, target: np.ndarray) -> None:
        """Bytes [start, stop) of level `level`'s tile region into the uint8 array `target`."""
        read_tile_bytes(self._readers[level], self.layout.grids[level], self.layout.samples[level], start, stop,
                        target)

    @property
    def size(self) -> int:
        return self.layout.size

    def read_into(self, offset: int, out: np.ndarray) -> int:
        return self.layout.read_into(offset, out, self.read_tiles)

    def version(self) -> Hashable:
        return self.size, tuple(reader.token for reader in self._readers)

    def attach(self, number: int) -> bool:
        return self._head.attach(number)

    def load_for_c(self, offset: int, out: np.ndarray, write: bool) -> int | None:
        return self._head.load_for_c(offset, out, write)

    def close(self) -> None:
        self._head.close()


class HeldHead:
    """An open file's first bytes, held in memory by C (engine/_cached_reads.c `open_bytes`): C copies
    the reads within them; every other read takes the Python path (`read_into`)."""

    def __init__(self, served: ServedChunks, head: bytes, read_into: Callable[[int, np.ndarray], int]) -> None:
        self.served = served
        self.head = head
        self.read_into = read_into
        self._handle: int | None = None

    def attach(self, handle: int) -> bool:
        if not self.served.in_c or not self.head:
            return False
        self.served.open_bytes(handle, 0, self.head)
        self._handle = handle
        return True

    def load_for_c(self, offset: int, out: np.ndarray, write: bool) -> int | None:
        """C never misses a read of bytes it holds; any read that comes here is answered whole."""
        self.read_into(offset, out)
        return None

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            self.served.close_file(handle)


def tiled_file(engine: Engine, meta: ArrayMeta, semantics: Semantics,
               single: Callable[[], TiledLayout]) -> TiledFile:
    """The tiled file of `meta`, with the coarser levels of its multiscale image or GeoZarr layout as
    overviews when it has some (else `single`, the array's alone)."""
    levels = (meta, *coarser_levels(engine.hierarchy, meta, semantics))
    layout = (tiled_layout(levels, semantics) if len(levels) > 1 else None) or single()
    return TiledFile(layout, engine, tuple(level.path for level in levels[:len(layout.grids)]))
