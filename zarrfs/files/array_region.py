"""The element region of one open file of an array: the reader, the file's stream, its C grant.

An open file (layout_files.py, a NetCDF variable in netcdf_datasets.py) reads
its element region through `read_region`, hands it to C with `attach` (the
number the front gave the open file), and ends it with `close`. What the
engine keeps per open file stays here:

- the file's `ReadStream` (where its reads run, readahead's state, its
  window), shared by the FUSE threads reading the file, with its own lock;
- the C path's grant: a file whose element region is exactly its array's
  C-order bytes (or those bytes each byte-swapped, `swap`), of a regular grid, is registered with the C table
  (engine/_cached_reads.c), which then answers reads of cached chunks
  without Python, a sequential stream's only within the stretch readahead
  allows it (`ArrayReader` grants the stretches through the stream). A read
  C misses comes to `load_for_c` once (from fuse/_fast_read.c, through the
  front): the read is tracked, its chunks loaded, and C copies it.
"""

from __future__ import annotations

import logging
import numpy as np

from ..engine.readahead import ReadStream
from ..engine.reader import ArrayReader

log = logging.getLogger(__name__)


class ArrayRegion:
    def __init__(self, reader: ArrayReader, region: tuple[int, int] | None, *, swap: bool = False,
                 stream: ReadStream | None = None) -> None:
        """`region`: (offset, size) of the file's element region when it holds exactly the array's
        C-order bytes from the first (each element byte-swapped with `swap`), so that C may answer
        reads of it; None when it does not. `stream`: the region's read stream, when the file has one
        already (a NetCDF variable's, shared with its reads that C does not take)."""
        self.reader = reader
        self.stream = stream if stream is not None else ReadStream()
        self.swap = swap
        self.c_layout = self._c_layout(region)
        self._region_start = region[0] if region is not None else 0

    def read_region(self, start: int, stop: int, out: np.ndarray) -> int:
        """Bytes [start, stop) of the element region into `out`; the count."""
        return self.reader.read_into(start, stop, out, self.stream)

    def load_for_c(self, offset: int, out: np.ndarray, write: bool) -> int | None:
        """A read C missed, of `len(out)` bytes at file `offset` in the element region: the
        stretch C may answer next once it has copied this read from the chunks now cached, or
        None when the bytes were written into `out` here (always, with `write`)."""
        start = offset - self._region_start
        if write:
            self.reader.fill_region(start, start + len(out), out)
            until = None
        else:
            until = self.reader.load_for_c(start, start + len(out), out, self.stream)
        if until is None and self.swap:  # the array's bytes are in `out`: as the file holds them
            out.view(self.reader.meta.dtype).byteswap(inplace=True)
        return until

    def attach(self, handle: int) -> bool:
        """The front numbered this open file `handle`: let C answer its reads where it can.
        Whether C serves it."""
        if self.c_layout is None:
            return False
        try:
            self.reader.cache.served.open_file(handle, self.c_layout)
        except (ValueError, OverflowError) as exc:  # more axes or larger ones than C takes
            log.debug("array /%s: reads take the Python path (%s)", self.reader.meta.path, exc)
            return False
        self.stream.c_handle, self.stream.c_region = handle, self._region_start
        return True

    def close(self) -> None:
        handle, self.stream.c_handle = self.stream.c_handle, None
        if handle is not None:
            self.reader.cache.served.close_file(handle)

    def _c_layout(self, region: tuple[int, int] | None) -> tuple[int, int, int, int, tuple[int, ...],
                                                                  tuple[int, ...], int] | None:
        """`CachedReads.open_file`'s arguments after the handle (array token, region offset and
        size, item size, shape, chunk edges, swap), or None when C cannot answer this file's reads."""
        if region is None or not 0 < region[1] <= self.reader.nbytes:
            return None
        array = self.reader.served_layout()
        if array is None:
            return None
        token, itemsize, shape, edges = array
        return token, region[0], region[1], itemsize, shape, edges, itemsize if self.swap else 0
