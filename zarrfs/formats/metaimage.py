"""`N.mhd`: a MetaImage header for `N.raw` (ITK, SimpleITK, ParaView, 3D Slicer).

`ElementDataFile` must be the last line: MetaIO stops parsing there. It names
`N.raw` relative to the header's directory (the same directory).
"""

from __future__ import annotations

from ..conventions.semantics import Semantics
from ..model.meta import ArrayMeta
from .base import Layout
from .rawinfo import big_endian, number, space_calibration, type_name

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


def metaimage_header(meta: ArrayMeta, semantics: Semantics, raw_name: str) -> Layout | None:
    element_type = type_name(meta, _ELEMENT_TYPES, raw_name)
    if element_type is None:
        return None
    lines = [
        "ObjectType = Image",
        f"NDims = {meta.ndim}",
        "DimSize = " + " ".join(str(s) for s in reversed(meta.shape)),
        f"ElementType = {element_type}",
    ]
    calibration = space_calibration(semantics, meta.ndim)
    if calibration is not None:
        spacing, origin = calibration
        lines.append("ElementSpacing = " + " ".join(number(v) for v in reversed(spacing)))
        lines.append("Offset = " + " ".join(number(v) for v in reversed(origin)))
    lines += [
        "BinaryData = True",
        f"BinaryDataByteOrderMSB = {big_endian(meta.dtype)}",
        "CompressedData = False",
        "HeaderSize = 0",
        f"ElementDataFile = {raw_name}",  # last: MetaIO reads no further
    ]
    return Layout(("\n".join(lines) + "\n").encode("utf-8"), 0)
