"""TIFF virtual files: tifffile writes the structure, the element region stays virtual.

The strip file for ImageJ: `N.tif` of every array but a map, whose `N.tif` is
the tiled GeoTIFF (`tiled_tiff.py`) and whose strip file is `N.strips.tif`
(`formats.is_map`).

An N-D array becomes a stack of 2-D pages: the last two dimensions are one
page (0-d is 1x1, 1-D is one row). Every page is uncompressed,
single-sample, one strip, NewSubfileType 0 (GDAL treats 1 as an overview).

Page order, for every reader (ImageJ, tifffile, GDAL, libtiff): ImageJ's
hyperstack order, frame slowest, then slice, then channel fastest. Stock
ImageJ reads contiguous planes only in that order (formats.md §6.3: its
`order=` key is ignored on the contiguous path this file needs), so:

* with `semantics` axes (time/channel/space from OME-Zarr and the like)
  the leading dimensions are served as t, z, c whatever their array order
  (OME's t, c, z included): a `PlanePermutedLayout` maps each file plane
  to its array plane, every plane still one contiguous run of the array's
  bytes. Page i is then array plane `layout.plane_order[i]`. When the
  array's order already is t, z, c the layout is a plain `Layout`;
* without axes the leading dimensions stay in C order (page i is array
  plane i) and dimension names map to frames/slices/channels only when
  they already come in t, z, c order; anything else is one run of slices.

The meaning in `Semantics` adds (`tifftags.py`): ImageJ calibration
(X/YResolution in pixels per unit with ResolutionUnit none, `unit`,
`spacing`, `finterval`/`tunit`, origins), composite channels with LUTs,
labels and display ranges, a label image's colours (a ColorMap LUT), and
GeoTIFF tags plus GDAL_NODATA on every page.

tifffile writes the file into `_SparseFile`, which keeps what is written and
only the extent of what is skipped: tifffile reserves the pixel data with a
seek (`data=None`), so building the layout of a 100 GB array costs a few
small writes. tifffile puts all pixel data of an uncompressed series right
after the first IFD and the other IFDs after the data, which is exactly the
`header + region + trailer` shape of a `Layout`:

* header: file header, IFD0 and its out-of-line values (ImageDescription,
  resolutions), padding to tifffile's 16-byte data alignment;
* region: the planes back to back, `a.tobytes()` (planes permuted as above);
* trailer: IFD1 ... IFDn-1 (empty for a single page or ImageJ's > 4 GiB form).

Arrays of 3 or more dimensions (and 2-D ones with a known pixel size) carry
an ImageJ hyperstack ImageDescription (`images`, `channels`/`slices`/
`frames`, calibration). It is kept for every dtype, also those ImageJ cannot
show (64-bit, complex, float16): it only states geometry and calibration,
which are true whatever the dtype; tifffile reads the N-D shape from it for
every dtype (tested), and ImageJ refuses such files for their pixel type,
not for the description.

Classic TIFF offsets are 32-bit. When the stack does not fit:

* `tiff_layout` follows ImageJ's own convention: a classic file with only
  IFD0, `images=n`, and all planes contiguous past 4 GiB (ImageJ and tifffile
  read it; libtiff and GDAL see the first plane only). It is offered only for
  the dtypes ImageJ shows faithfully (uint8/bool, uint16, int16, float32),
  since for any other dtype nobody would read it whole;
* `bigtiff_layout` gives a BigTIFF with one IFD per plane (libtiff, GDAL,
  tifffile, Bio-Formats). Below 4 GiB it returns None: the classic file
  serves everyone.
"""

from __future__ import annotations

import bisect
import functools
import io
import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy
import tifffile

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12 on

from zarrfs.conventions.semantics import Semantics
from zarrfs.formats.base import Layout, PlanePermutedLayout
from zarrfs.formats.tifftags import (
    AXIS_NAMES,
    Hyperstack,
    ImageJHints,
    TagTuple,
    gdal_metadata,
    geotiff_tags,
    hyperstack,
    imagej_hints,
    imagej_letter,
    semantic_axes,
)

# (kind, itemsize) pairs TIFF stores with BitsPerSample/SampleFormat as they
# are in memory; complex is SampleFormat 6 (IEEE complex), whole item per sample.
_SAMPLE_TYPES = frozenset(
    [("u", n) for n in (1, 2, 4, 8)]
    + [("i", n) for n in (1, 2, 4, 8)]
    + [("f", n) for n in (2, 4, 8)]
    + [("c", n) for n in (8, 16)]
)

# Pixel types ImageJ 1.x shows as they are (uint8, uint16, int16, float32; it
# reads int8 as unsigned and (u)int32 converted to float). tifffile's ImageJ
# writer accepts exactly these `dtype.char`s.
_IMAGEJ_CHARS = frozenset("BHhf")

_IMAGEJ_ORDER = "TZC"  # slowest to fastest: ImageJ stack index = (t*Z + z)*C + c

# Upper bound of what one page adds besides pixel data and the tags counted
# one by one (description, IJMetadata, GeoTIFF: `_tags_nbytes`), file header
# and alignment included: tifffile's IFDs are ~200 bytes here. Used only to
# decide, before writing, whether a classic file fits.
_IFD_BOUND = 512
_TIFF_TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 7: 1, 11: 4, 12: 8, 16: 8}
_CLASSIC_LIMIT = 2**32

# Every IFD is a few hundred bytes held in memory (and written in a Python
# loop by tifffile): beyond this many planes a TIFF is no container for the
# array (e.g. shape (10**6, 3, 2)), and header/trailer memory must stay small.
MAX_PAGES = 2**16


@dataclass(frozen=True)
class _Stack:
    """An array seen as ImageJ's TZC-ordered stack of 2-D planes, with what the file says about them."""

    planes: Hyperstack  # frames/slices/channels and the file's plane order
    height: int
    width: int
    dtype: numpy.dtype  # sample type in the array's byte order (bool -> uint8)
    description: str | None  # ImageJ's (ndim >= 3, or calibration), on the first page
    imagej: ImageJHints = ImageJHints()
    extratags: tuple[TagTuple, ...] = ()  # GeoTIFF / GDAL tags on every page

    @property
    def pages(self) -> int:
        return self.planes.frames * self.planes.slices * self.planes.channels

    @property
    def plane_nbytes(self) -> int:
        return self.height * self.width * self.dtype.itemsize

    @property
    def data_nbytes(self) -> int:
        return self.pages * self.plane_nbytes

    @property
    def byteorder(self) -> Literal["<", ">"]:
        # dtype.str spells native order explicitly; '|' (1-byte) is either.
        return ">" if self.dtype.str[0] == ">" else "<"

    def first_page_tags(self) -> tuple[TagTuple, ...]:
        """Tags besides the baseline ones on the first page: GeoTIFF plus ImageJ's ColorMap and IJMetadata."""
        tags = self.extratags + self.imagej.tags
        if self.description is None or not self.imagej.blobs:
            return tags
        return tags + tuple(tifffile.imagej_metadata_tag(self.imagej.blobs, self.byteorder))

    def first_ifd_nbytes(self) -> int:
        """Upper bound of the file header plus IFD0 with all its values.

        `_IFD_BOUND` covers a description of geometry alone; calibration and
        display keys lengthen it, so such a description counts in full.
        """
        description = len(self.description or "") if self.imagej.description else 0
        return _IFD_BOUND + description + _tags_nbytes(self.first_page_tags())

    def fits_classic(self) -> bool:
        """Whether every IFD and strip offset of a full classic TIFF fits in 32 bits."""
        other_ifds = (self.pages - 1) * (_IFD_BOUND + _tags_nbytes(self.extratags))
        return self.data_nbytes + self.first_ifd_nbytes() + other_ifds <= _CLASSIC_LIMIT


def tiff_layout(
    shape: tuple[int, ...],
    dtype: numpy.dtype,
    dimension_names: tuple[str | None, ...] | None = None,
    semantics: Semantics | None = None,
) -> Layout | None:
    """Layout of a classic TIFF (ImageJ hyperstack for ndim >= 3) over the array.

    `semantics` (axes, channels, georeference, nodata) adds ImageJ
    calibration and channel display, serves the planes in ImageJ's order
    and writes GeoTIFF tags; without axes the leading dimensions are
    guessed from `dimension_names` as before.

    Returns None when TIFF cannot hold the dtype (structured, strings,
    datetime, object, float128...), when a dimension is 0 (a TIFF page cannot
    be empty), when there are more than `MAX_PAGES` planes, and when the
    stack passes 4 GiB unless ImageJ's single-IFD convention applies (more
    than one plane, each under 4 GiB, dtype uint8/bool/uint16/int16/float32);
    `bigtiff_layout` then gives the file for everyone else.
    """
    plan = tiff_plan(shape, dtype, dimension_names, semantics)
    return None if plan is None else plan()


def tiff_plan(
    shape: tuple[int, ...],
    dtype: numpy.dtype,
    dimension_names: tuple[str | None, ...] | None = None,
    semantics: Semantics | None = None,
) -> Callable[[], Layout] | None:
    """`tiff_layout` decided from metadata alone (cheap): the build of its layout, or None where it gives
    None. Listing a directory decides; building the IFDs waits until the file is read or sized."""
    stack = _stack(shape, dtype, dimension_names, semantics)
    if stack is None:
        return None
    if stack.fits_classic():
        return functools.partial(_build, stack, bigtiff=False, imagej_truncated=False)
    if (
        stack.pages > 1
        and stack.plane_nbytes + stack.first_ifd_nbytes() <= _CLASSIC_LIMIT
        and stack.dtype.char in _IMAGEJ_CHARS
    ):
        return functools.partial(_build, stack, bigtiff=False, imagej_truncated=True)
    return None


def bigtiff_layout(
    shape: tuple[int, ...],
    dtype: numpy.dtype,
    dimension_names: tuple[str | None, ...] | None = None,
    semantics: Semantics | None = None,
) -> Layout | None:
    """Layout of a BigTIFF with one IFD per plane, only when a classic TIFF cannot hold them all.

    None when the classic file holds every plane with its own IFD (under
    4 GiB), and for dtypes and shapes TIFF cannot hold at all (see
    `tiff_layout`; a single plane past 4 GiB is fine here, a width or height
    of 2**32 or more is not). `semantics` as for `tiff_layout`.
    """
    plan = bigtiff_plan(shape, dtype, dimension_names, semantics)
    return None if plan is None else plan()


def bigtiff_plan(
    shape: tuple[int, ...],
    dtype: numpy.dtype,
    dimension_names: tuple[str | None, ...] | None = None,
    semantics: Semantics | None = None,
) -> Callable[[], Layout] | None:
    """`bigtiff_layout` decided from metadata alone, as `tiff_plan`."""
    stack = _stack(shape, dtype, dimension_names, semantics)
    if stack is None or stack.fits_classic():
        return None
    return functools.partial(_build, stack, bigtiff=True, imagej_truncated=False)


def _stack(
    shape: tuple[int, ...],
    dtype: numpy.dtype,
    dimension_names: tuple[str | None, ...] | None,
    semantics: Semantics | None,
) -> _Stack | None:
    """The array as a page stack, or None when TIFF cannot represent it."""
    sample = _sample_dtype(numpy.dtype(dtype))
    if sample is None or 0 in shape:
        return None
    if dimension_names is not None and len(dimension_names) != len(shape):
        raise ValueError(f"{len(dimension_names)} dimension names for {len(shape)} dimensions")
    height, width = ((1, 1) + tuple(shape))[-2:]
    leading = tuple(shape[:-2])
    # Checked before any per-plane work (the plane order has one entry per plane).
    # ImageWidth/ImageLength are 32-bit even in BigTIFF.
    if math.prod(leading) > MAX_PAGES or max(height, width) >= 2**32:
        return None
    axes = semantic_axes(semantics, len(shape))
    if axes is not None:
        planes = hyperstack(leading, tuple(imagej_letter(axis) for axis in axes[:-2]))
    else:
        names = None if dimension_names is None else tuple(dimension_names[:-2])
        planes = Hyperstack(*_hyperstack(leading, names))
    hints = imagej_hints(axes, planes, semantics.channels if semantics is not None else (), sample,
                         semantics.label_colors if semantics is not None else ())
    described = bool(leading) or bool(hints.description) or hints.resolution is not None
    return _Stack(
        planes,
        height,
        width,
        sample,
        description=_description(planes, height, width, hints) if described else None,
        imagej=hints,
        extratags=geotiff_tags(semantics, axes, len(shape)) + gdal_metadata(semantics, axes, 1),
    )


def _sample_dtype(dtype: numpy.dtype) -> numpy.dtype | None:
    """The TIFF sample type for `dtype` (same byte order), or None if TIFF has none."""
    if dtype.fields is not None or dtype.subdtype is not None:
        return None
    if dtype.kind == "b":
        # bool is stored as bytes 0/1 already: present it as uint8, not as
        # tifffile's packed 1-bit (bilevel) image.
        return numpy.dtype("u1")
    if (dtype.kind, dtype.itemsize) not in _SAMPLE_TYPES:
        return None
    return dtype


def _hyperstack(
    leading: tuple[int, ...], names: tuple[str | None, ...] | None
) -> tuple[int, int, int]:
    """(frames, slices, channels) for the leading dimensions, from bare dimension names.

    Without semantics the planes stay in C order, and ImageJ's plane order
    is channel fastest, then slice, then frame. So names map to T/Z/C only
    when each names a distinct axis and they appear in T, Z, C order;
    anything else is one run of slices.
    """
    if names:
        found = [AXIS_NAMES.get(name.lower()) if name else None for name in names]
        axes = [axis for axis in found if axis is not None]
        if len(axes) == len(found):
            positions = [_IMAGEJ_ORDER.index(axis) for axis in axes]
            if all(a < b for a, b in itertools.pairwise(positions)):
                sizes = dict(zip(axes, leading, strict=True))
                return sizes.get("T", 1), sizes.get("Z", 1), sizes.get("C", 1)
    return 1, math.prod(leading), 1


def _build(stack: _Stack, *, bigtiff: bool, imagej_truncated: bool) -> Layout:
    """Let tifffile write the file without pixel data and cut it around the region."""
    sink = _SparseFile()
    extra: dict[str, Any]
    planes = stack.planes
    if imagej_truncated:
        # Only tifffile's ImageJ writer can write IFD0 alone (`truncate`).
        # tifffile writes to any seekable binary file object (`_SparseFile`); its annotation names IO[bytes].
        writer = tifffile.TiffWriter(sink, byteorder=stack.byteorder, imagej=True)  # type: ignore[arg-type]
        shape: tuple[int, ...] = (planes.frames, planes.slices, planes.channels)
        metadata = {"axes": "TZCYX", **stack.imagej.description, **stack.imagej.blobs}
        extra = {"metadata": metadata, "truncate": True, "extratags": stack.extratags + stack.imagej.tags}
    else:
        writer = tifffile.TiffWriter(
            sink, bigtiff=bigtiff, byteorder=stack.byteorder, shaped=False, ome=False  # type: ignore[arg-type]
        )  # (as above: any seekable binary file object)
        shape = (stack.pages,)
        # metadata=None: no tifffile JSON, the description (if any) is ImageJ's.
        extra = {"metadata": None, "description": stack.description, "extratags": stack.first_page_tags()}
    if stack.imagej.resolution is not None:
        # Pixels per unit with ResolutionUnit none: ImageJ takes the unit from its description.
        extra.update(resolution=stack.imagej.resolution, resolutionunit=1)
    with writer:
        offset = writer.write(
            shape=shape + (stack.height, stack.width),
            dtype=stack.dtype,
            photometric="minisblack",  # never guess RGB from a width of 3 or 4
            subfiletype=0,
            software=False,
            returnoffset=True,
            **extra,
        )
    return _cut(sink, stack, offset)


def _description(planes: Hyperstack, height: int, width: int, hints: ImageJHints) -> str:
    """ImageJ's hyperstack description: geometry, calibration and display mode."""
    shape = (planes.frames, planes.slices, planes.channels, height, width)
    return tifffile.imagej_description(shape, axes="TZCYX", **hints.description)


def _tags_nbytes(tags: tuple[TagTuple, ...]) -> int:
    """Upper bound of the bytes `tags` add to an IFD: entries, values, alignment."""
    total = 0
    for _code, tiff_type, count, value, _once in tags:
        if isinstance(value, (str, bytes)):
            size = len(value) + 1
        else:
            size = count * _TIFF_TYPE_SIZES[tiff_type]
        total += 12 + size + 8
    return total


def _cut(sink: _SparseFile, stack: _Stack, offset: tuple[int, int] | None) -> Layout:
    """Split the written file into header, region and trailer, checking the region."""
    # returnoffset gives (first strip offset, bytes of one page); tifffile
    # returns it only when the data are one contiguous block.
    if offset is None or offset[1] != stack.plane_nbytes:
        raise RuntimeError(f"tifffile did not write contiguous planes: {offset}")
    start = offset[0]
    stop = start + stack.data_nbytes
    if stop > sink.size or not sink.only_zeros_within(start, stop):
        raise RuntimeError("tifffile wrote structure inside the pixel region")
    header, trailer = sink.getrange(0, start), sink.getrange(stop, sink.size)
    if stack.planes.plane_order is None:
        return Layout(header, stack.data_nbytes, trailer)
    return PlanePermutedLayout(header, stack.data_nbytes, trailer,
                               plane_nbytes=stack.plane_nbytes, plane_order=stack.planes.plane_order)


class _SparseFile(io.RawIOBase):
    """Seekable file keeping the bytes written and the extent of the rest.

    tifffile reserves pixel data with seek (plus one NUL at the end), so a
    file of any size costs only the structure it writes. Read back (never-
    written bytes are 0), it lets tifffile parse the IFDs it wrote.

    The bytes written are kept as disjoint segments sorted by offset (a
    later write replaces what it overlaps), so a read is a binary search
    and a copy of the segments it touches: tifffile reads a file of
    thousands of pages back in thousands of small reads.
    """

    def __init__(self) -> None:
        super().__init__()
        self._pos = 0
        self.size = 0
        self._starts: list[int] = []  # segment offsets, increasing; segments never overlap
        self._chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        stop = min(self.size, self._pos + len(view))
        if stop <= self._pos:
            return 0
        n = stop - self._pos
        view[:n] = self.getrange(self._pos, stop)
        self._pos = stop
        return n

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self.size}[whence]
        self._pos = base + offset
        return self._pos

    def write(self, data: Buffer) -> int:
        chunk = bytes(data)
        start, stop = self._pos, self._pos + len(chunk)
        if chunk:
            first, last = self._touching(start, stop)
            kept = []
            if first < last and self._starts[first] < start:  # the part of the first segment before this write
                kept.append((self._starts[first], self._chunks[first][:start - self._starts[first]]))
            kept.append((start, chunk))
            if first < last and self._starts[last - 1] + len(self._chunks[last - 1]) > stop:  # and after it
                kept.append((stop, self._chunks[last - 1][stop - self._starts[last - 1]:]))
            self._starts[first:last] = [pos for pos, _ in kept]
            self._chunks[first:last] = [part for _, part in kept]
        self._pos = stop
        self.size = max(self.size, stop)
        return len(chunk)

    def _touching(self, start: int, stop: int) -> tuple[int, int]:
        """The segments [first, last) that hold bytes of [start, stop)."""
        first = bisect.bisect_right(self._starts, start) - 1
        if first < 0 or self._starts[first] + len(self._chunks[first]) <= start:
            first += 1
        return first, max(first, bisect.bisect_left(self._starts, stop))

    def getrange(self, start: int, stop: int) -> bytes:
        """File bytes [start, stop): never-written bytes are 0."""
        out = bytearray(stop - start)
        first, last = self._touching(start, stop)
        for pos, chunk in zip(self._starts[first:last], self._chunks[first:last], strict=True):
            lo, hi = max(pos, start), min(pos + len(chunk), stop)
            # memoryview: the BigTIFF trailer is one write of megabytes
            out[lo - start : hi - start] = memoryview(chunk)[lo - pos : hi - pos]
        return bytes(out)

    def only_zeros_within(self, start: int, stop: int) -> bool:
        """Whether every byte written inside [start, stop) is 0."""
        first, last = self._touching(start, stop)
        for pos, chunk in zip(self._starts[first:last], self._chunks[first:last], strict=True):
            lo, hi = max(pos, start), min(pos + len(chunk), stop)
            if chunk[lo - pos : hi - pos].count(0) != hi - lo:
                return False
        return True
