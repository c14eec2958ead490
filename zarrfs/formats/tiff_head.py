"""A tiled TIFF as tifffile wrote it, rearranged with every IFD and tag value at its head.

tifffile writes each page's IFD (and its tag values) right before the page's
tiles, so the IFDs of a pyramid or of a plate's thousands of images lie
scattered between tile regions. A reader opening the file reads every IFD
first, through a buffer: Bio-Formats fills 1 MiB at each IFD it meets, GDAL a
few KiB. Each such fill then reaches into the tiles after that IFD, and serving
those bytes means fetching and decoding their chunks: opening a 96-well
plate's OME-TIFF, metadata only (`showinf -nopix`), decoded all of its
17,664 chunks, 51-95 s over HTTP at 20 ms a request.

So the file is laid out as cloud-optimised GeoTIFFs are: the header and every
IFD with its values first (the head, in the order tifffile wrote them), then
`HEAD_GAP` zero bytes that a buffer filled at the head's end reads instead of
tiles, then the pages' tile regions in the order tifffile wrote them, then
`TAIL_GAP` zero bytes. Every
offset the file holds is moved with what it points at: the header's first IFD,
each IFD's next IFD, tag values stored away from their entry, SubIFDs, and the
tiles' offsets (StripOffsets and TileOffsets). The TIFF specification lets
IFDs and values lie anywhere in the file; only their offsets must be right.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Sequence
from typing import Literal

import numpy

from zarrfs.model.tiling import TILE_GAP, TileGrid

from .tiff import _SparseFile

# Zero bytes between the head and the first tile: more than the largest buffer a TIFF reader
# fills at an IFD (Bio-Formats' NIOFileHandle, 1 MiB).
HEAD_GAP = 1 << 20
# Zero bytes after the last tile: readers look at a file's last bytes as they open it (Bio-Formats
# reads its last 2), which would otherwise be the last tile's.
TAIL_GAP = TILE_GAP

# Tags whose values are offsets in the file: StripOffsets, TileOffsets, SubIFDs.
_OFFSET_TAGS = frozenset((273, 324, 330))
_SUBIFDS = 330
# Bytes per value of each TIFF field type (TIFF 6.0, BigTIFF).
_TYPE_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4, 16: 8, 17: 8, 18: 8}
# The types an offset may have (SHORT, LONG, IFD, LONG8, IFD8), as numpy reads them.
_OFFSET_TYPES = {3: "u2", 4: "u4", 13: "u4", 16: "u8", 18: "u8"}
_IFD_TYPES = (13, 18)

Part = bytes | tuple[int, int] | int  # file bytes, the tiles of (level, page), or that many zero bytes


class _Moves:
    """Where each stretch of the old file lies in the new one: the head's byte segments, then the tiles."""

    def __init__(self, old_starts: list[int], old_stops: list[int], new_starts: list[int]) -> None:
        self._starts = old_starts
        self._stops = old_stops
        self._deltas = [new - old for new, old in zip(new_starts, old_starts, strict=True)]
        self._start_array = numpy.asarray(old_starts, dtype=numpy.int64)
        self._stop_array = numpy.asarray(old_stops, dtype=numpy.int64)
        self._delta_array = numpy.asarray(self._deltas, dtype=numpy.int64)

    def moved(self, offset: int) -> int:
        """The new place of old byte `offset`; ValueError if the old file holds nothing there."""
        index = bisect.bisect_right(self._starts, offset) - 1
        if index < 0 or offset >= self._stops[index]:
            raise ValueError(f"offset {offset} points at no byte tifffile wrote")
        return offset + self._deltas[index]

    def moved_all(self, offsets: numpy.ndarray) -> numpy.ndarray:
        """`moved` of each offset."""
        index: numpy.ndarray = numpy.searchsorted(self._start_array, offsets, side="right") - 1
        if offsets.size and (index.min() < 0 or (offsets >= self._stop_array[index]).any()):
            raise ValueError("an offset points at no byte tifffile wrote")
        return offsets + self._delta_array[index]


def metadata_first(sink: _SparseFile, grids: Sequence[TileGrid], regions: Sequence[tuple[int, int, int]],
                   bigtiff: bool, byteorder: Literal["<", ">"]) -> tuple[Part, ...]:
    """The file tifffile wrote into `sink`, its pages' tiles at `regions` ((start, level, page)), as
    the head, `HEAD_GAP` zero bytes (more, up to a `TILE_GAP` boundary), the tile regions and
    `TAIL_GAP` zero bytes.

    Checks what `tiled_tiff` relies on: nothing but zeros was written inside a tile region, and
    every offset the IFDs hold points at bytes written outside the tile regions or at a tile."""
    ordered = sorted(regions)
    segments: list[tuple[int, int]] = []  # the old file's bytes outside the tile regions
    position = 0
    for start, level, _page in ordered:
        stop = start + grids[level].page_nbytes
        if start < position or stop > sink.size or not sink.only_zeros_within(start, stop):
            raise RuntimeError("tifffile wrote structure inside a tile region")
        segments.append((position, start))
        position = stop
    segments.append((position, sink.size))
    segments = [(a, b) for a, b in segments if a < b]
    head = bytearray(b"".join(sink.getrange(a, b) for a, b in segments))
    tiles_start = -(-(len(head) + HEAD_GAP) // TILE_GAP) * TILE_GAP
    old = segments + [(s, s + grids[level].page_nbytes) for s, level, _ in ordered]
    new_starts = list(itertools.accumulate((b - a for a, b in segments[:-1]), initial=0))
    tile_at = tiles_start
    for _, level, _ in ordered:
        new_starts.append(tile_at)
        tile_at += grids[level].page_nbytes
    order = sorted(range(len(old)), key=lambda i: old[i][0])
    moves = _Moves([old[i][0] for i in order], [old[i][1] for i in order], [new_starts[i] for i in order])
    _move_offsets(head, moves, bigtiff, byteorder)
    return (bytes(head), tiles_start - len(head), *((level, page) for _, level, page in ordered), TAIL_GAP)


def _move_offsets(head: bytearray, moves: _Moves, bigtiff: bool, byteorder: Literal["<", ">"]) -> None:
    """Rewrite in `head` every offset of the old file to where it now points (the IFDs and values
    are read as tifffile wrote them, from a copy: an IFD's values may follow an offset already moved)."""
    offset_format, count_format, entry_bytes, inline_bytes = ("Q", "Q", 20, 8) if bigtiff else ("I", "H", 12, 4)
    written = bytes(head)

    def old_bytes(start: int, stop: int) -> bytes:
        """Bytes [start, stop) of the old file, which lie in one of its segments outside the tiles."""
        at = moves.moved(start)
        if stop > start and moves.moved(stop - 1) != at + stop - start - 1:
            raise ValueError(f"bytes {start}-{stop} of the file tifffile wrote cross a tile region")
        return written[at:at + stop - start]

    def put(old_at: int, fmt: str, value: int) -> None:
        struct.pack_into(byteorder + fmt, head, moves.moved(old_at), value)

    first_at = 8 if bigtiff else 4
    pending = [struct.unpack(byteorder + offset_format, old_bytes(first_at, first_at + inline_bytes))[0]]
    put(first_at, offset_format, moves.moved(pending[0]))
    seen: set[int] = set()
    while pending:
        ifd = pending.pop()
        if ifd in seen:
            continue
        seen.add(ifd)
        count_bytes = struct.calcsize(count_format)
        (count,) = struct.unpack(byteorder + count_format, old_bytes(ifd, ifd + count_bytes))
        entries = old_bytes(ifd + count_bytes, ifd + count_bytes + count * entry_bytes + inline_bytes)
        for k in range(count):
            at = ifd + count_bytes + k * entry_bytes
            tag, kind, n = struct.unpack_from(byteorder + "HH" + offset_format, entries, k * entry_bytes)
            value_field = at + entry_bytes - inline_bytes
            if kind not in _TYPE_BYTES:
                raise ValueError(f"tag {tag} has a type ({kind}) that TIFF does not define")
            size = n * _TYPE_BYTES[kind]
            values_at = value_field
            if size > inline_bytes:  # the values lie elsewhere: the field is their offset
                (values_at,) = struct.unpack_from(byteorder + offset_format, entries,
                                                  k * entry_bytes + entry_bytes - inline_bytes)
                put(value_field, offset_format, moves.moved(values_at))
            if tag in _OFFSET_TAGS or kind in _IFD_TYPES:
                if kind not in _OFFSET_TYPES:
                    raise ValueError(f"tag {tag} holds offsets of type {kind}")
                dtype = numpy.dtype(_OFFSET_TYPES[kind]).newbyteorder(byteorder)
                offsets = numpy.frombuffer(old_bytes(values_at, values_at + size), dtype).astype(numpy.int64)
                if tag == _SUBIFDS or kind in _IFD_TYPES:
                    pending.extend(int(o) for o in offsets if o)
                moved = moves.moved_all(offsets)  # (an offset 0, no SubIFD, stays 0: the header does not move)
                start = moves.moved(values_at)
                head[start:start + size] = moved.astype(dtype).tobytes()
        next_at = ifd + count_bytes + count * entry_bytes
        (following,) = struct.unpack_from(byteorder + offset_format, entries, count * entry_bytes)
        if following:
            pending.append(following)
            put(next_at, offset_format, moves.moved(following))
