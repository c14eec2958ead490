"""Blocks of plain chunks read straight from their local files: no decode, no cache.

A chunk stored uncompressed in a local file holds its elements as the array
does, so a read copies its rows from the file into the reply (`ChunkFiles`,
direct.py) and the kernel's page cache is the only cache. Each file read
this way is also given to C (`ServedChunks.open_raw_file`), so later reads of
it are answered there.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np

from .chunks import ChunkSource
from .direct import ChunkFiles
from .geometry import Coords
from .served import ServedChunks

# A block of one chunk and where it goes: (chunk coords, block in the chunk, a view of the output).
Target = tuple[Coords, tuple[int | slice, ...], np.ndarray]


class RawChunks:
    """One reader's chunk files, read raw (`token`, `key_prefix`: the reader's names in C)."""

    def __init__(self, files: ChunkFiles, source: ChunkSource, token: int, key_prefix: Hashable,
                 began_ns: int | None, served: ServedChunks, in_c: bool) -> None:
        self._files = files
        self._source = source
        self._token = token
        self._key_prefix = key_prefix
        self._began_ns = began_ns  # chunk files modified after it are not the reader's version
        self._served = served
        self._in_c = in_c  # whether the reader's files are served in C (a regular grid)

    def fill(self, targets: list[Target]) -> list[Target]:
        """Copy each block from its chunk file; the targets it could not read (no file: fill value,
        or the chunk is not stored plain), for the decoding path."""
        undone: list[Target] = []
        uncached: list[Target] = []
        # Page-cache reads first: they keep the GIL (`_gather`) and run
        # back to back; reads that may wait for the disk release it, after.
        for one in targets:
            done = self._read(*one, cached_only=True)
            if done is None:
                uncached.append(one)
            elif not done:
                undone.append(one)
        return undone + [one for one in uncached if not self._read(*one)]

    def open_in_c(self, chunks: Iterable[Coords]) -> None:
        """Give C these chunks' files before the stream reads them."""
        for coords in chunks:
            path = self._source.raw_file(coords)
            if path is not None:
                shape = self._source.read_grid.stored_shape(coords)
                self._served.open_raw_file((self._key_prefix, coords), path, shape, self._began_ns)

    def _read(self, coords: Coords, src: tuple[int | slice, ...], destination: np.ndarray,
              cached_only: bool = False) -> bool | None:
        path = self._source.raw_file(coords)
        if path is None:
            return False
        shape = self._source.read_grid.stored_shape(coords)
        block = tuple(slice(i, i + 1) if isinstance(i, int) else i for i in src)  # the file's rows as runs
        done = self._files.read_block(self._token, path, shape, block, destination, cached_only=cached_only,
                                      not_after_ns=self._began_ns)
        if done and self._in_c:
            self._served.open_raw_file((self._key_prefix, coords), path, shape, self._began_ns)
        return done
