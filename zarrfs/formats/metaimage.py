"""MetaImage headers for `N.raw` (ITK, SimpleITK, VTK, ParaView, 3D Slicer).

`N.mhd` describes the whole array, for arrays of at most 3 dimensions: VTK's
MetaImage reader (VTK 9.1, ParaView 5.11) refuses more and then reads the
whole file into a buffer sized for nothing, which corrupts its heap (abort or
hang). An array of more dimensions gets instead one 3-D header per volume
(each index over the leading dimensions): `N.t1.c0.mhd` is the volume at
t = 1, c = 0, found in `N.raw` at byte `HeaderSize`. VTK, ParaView and ITK
read each of them; the whole N-D array stays readable to ITK through the
NRRD header. There are at most MAX_VOLUME_HEADERS of them, and none when a
volume starts past what MetaIO's C-int `HeaderSize` holds.

The origin (`Offset`) is the centre of the first voxel, as in OME-Zarr. When
the volume's three axes carry RFC-4 anatomical orientations, `Offset` and
`TransformMatrix` (each axis's direction, one row per axis) are in ITK's LPS
world and `AnatomicalOrientation` names, per axis, the side its values start
from (ITK's letters: `RAI` is the identity in LPS).

`ElementDataFile` must be the last line: MetaIO stops parsing there. It names
`N.raw` relative to the header's directory (the same directory).
"""

from __future__ import annotations

import itertools
import math
import re

from ..conventions.semantics import Semantics
from ..model.meta import ArrayMeta
from .base import Layout
from .rawinfo import MAX_C_INT, anatomical_frame, big_endian, number, space_calibration, type_name

# numpy kind+size -> MetaIO element type. MET_LONG/MET_ULONG are 4 bytes in
# MetaIO, so 8-byte integers are the LONG_LONG types. No half floats, no complex.
_ELEMENT_TYPES = {
    ("b", 1): "MET_UCHAR",  # bool: 0/1 bytes
    ("u", 1): "MET_UCHAR", ("i", 1): "MET_CHAR",
    ("u", 2): "MET_USHORT", ("i", 2): "MET_SHORT",
    ("u", 4): "MET_UINT", ("i", 4): "MET_INT",
    ("u", 8): "MET_ULONG_LONG", ("i", 8): "MET_LONG_LONG",
    ("f", 4): "MET_FLOAT", ("f", 8): "MET_DOUBLE",
}
VOLUME_NDIM = 3
# One header per volume is a file per volume in the listing: beyond this many, none.
MAX_VOLUME_HEADERS = 64
_SAFE_AXIS_NAME = re.compile(r"[A-Za-z]+")


def metaimage_header(meta: ArrayMeta, semantics: Semantics, raw_name: str) -> Layout | None:
    """`N.mhd`: the whole array, when it has at most 3 dimensions."""
    element_type = type_name(meta, _ELEMENT_TYPES, raw_name)
    if element_type is None or meta.ndim > VOLUME_NDIM:
        return None
    return _header(meta.shape, element_type, meta, semantics, raw_name, 0)


def metaimage_volume_headers(meta: ArrayMeta, semantics: Semantics, stem: str) -> dict[str, Layout]:
    """`N.<axis><index>....mhd` -> the 3-D header of that volume of an array of more than 3 dimensions."""
    raw_name = stem + ".raw"
    element_type = type_name(meta, _ELEMENT_TYPES, raw_name)
    leading, volume = meta.shape[:-VOLUME_NDIM], meta.shape[-VOLUME_NDIM:]
    count = math.prod(leading)
    volume_nbytes = math.prod(volume) * meta.dtype.itemsize
    if (element_type is None or meta.ndim <= VOLUME_NDIM or count > MAX_VOLUME_HEADERS
            or (count - 1) * volume_nbytes > MAX_C_INT):
        return {}
    names = _leading_axis_names(semantics, meta.ndim)
    headers = {}
    for position, index in enumerate(itertools.product(*(range(n) for n in leading))):
        tag = ".".join(f"{name}{i}" for name, i in zip(names, index, strict=True))
        headers[f"{stem}.{tag}.mhd"] = _header(volume, element_type, meta, semantics, raw_name,
                                               position * volume_nbytes)
    return headers


def _oriented(frame: list[tuple[int, int]], origin: list[float], orientations: list[str | None]) -> list[str]:
    """Offset, TransformMatrix and AnatomicalOrientation of a volume whose axes (fastest first) run along
    `frame` (LPS world axis, sign)."""
    offset = [0.0] * 3
    rows = []
    for (component, sign), start in zip(frame, origin, strict=True):
        offset[component] = sign * start
        row = [0.0] * 3
        row[component] = float(sign)
        rows += row
    starts = "".join((o or "?")[0].upper() for o in orientations)  # "right-to-left" starts from R
    return ["Offset = " + " ".join(number(v) for v in offset),
            "TransformMatrix = " + " ".join(number(v) for v in rows),
            f"AnatomicalOrientation = {starts}"]


def _leading_axis_names(semantics: Semantics, ndim: int) -> list[str]:
    """The leading axes' names when they are distinct plain words (OME's t, c), else dim0, dim1, ..."""
    axes = semantics.axes
    names = [a.name for a in axes[:-VOLUME_NDIM]] if axes is not None and len(axes) == ndim else []
    if names and all(_SAFE_AXIS_NAME.fullmatch(n) for n in names) and len(set(names)) == len(names):
        return names
    return [f"dim{k}_" for k in range(ndim - VOLUME_NDIM)]


def _header(shape: tuple[int, ...], element_type: str, meta: ArrayMeta, semantics: Semantics, raw_name: str,
            offset: int) -> Layout:
    """A header of `shape` (the array's last dimensions) whose elements start `offset` bytes into `raw_name`."""
    lines = [
        "ObjectType = Image",
        f"NDims = {len(shape)}",
        "DimSize = " + " ".join(str(s) for s in reversed(shape)),
        f"ElementType = {element_type}",
    ]
    calibration = space_calibration(semantics, meta.ndim)
    if calibration is not None:
        spacing, origin = (values[-len(shape):] for values in calibration)
        lines.append("ElementSpacing = " + " ".join(number(v) for v in reversed(spacing)))
        frame = anatomical_frame(semantics.axes[-len(shape):]) if semantics.axes is not None else None
        if frame is None or semantics.axes is None:
            lines.append("Offset = " + " ".join(number(v) for v in reversed(origin)))
        else:
            lines += _oriented(frame[::-1], origin[::-1], [a.orientation for a in reversed(semantics.axes[-3:])])
    lines += [
        "BinaryData = True",
        f"BinaryDataByteOrderMSB = {big_endian(meta.dtype)}",
        "CompressedData = False",
        f"HeaderSize = {offset}",
        f"ElementDataFile = {raw_name}",  # last: MetaIO reads no further
    ]
    return Layout(("\n".join(lines) + "\n").encode("utf-8"), 0)
