"""`N.nrrd.nhdr`: a detached NRRD header for `N.raw` (3D Slicer, ITK, pynrrd, teem, VTK, ParaView).

Not `N.nhdr`: Bio-Formats' NRRD reader takes `X.nhdr` as the header of any
`X.*` it is asked to open (`N.tif` would open as this header's data). Not
`N.raw.nhdr` either: GDAL's ENVI driver pairs any `N.raw.*` with
`N.raw.hdr` and would read the header's text as pixels (formats.md §7.1).

Sizes fastest first; `data file` is relative to the header's directory.
When every axis is a calibrated space axis the header states a world space
(`space dimension`, `space directions`, `space origin`), which is what ITK
and Slicer read; otherwise per-axis `spacings` (nan where unknown). The
origin is the centre of the first sample, as in OME-Zarr. When the three
axes carry RFC-4 anatomical orientations (left/right, anterior/posterior,
inferior/superior), the world space is named, `space: left-posterior-superior`,
and each axis's direction points the way its values run.

VTK's NRRD reader (VTK 9.1, ParaView 5.11) takes the fastest axis of an
array of more than 3 dimensions as vector components and crashes reading
it; it refuses any `byte skip` cleanly. So such a header says `byte skip: -1`
(the data are the last bytes of the file: `N.raw` is exactly the elements),
which ITK, pynrrd and teem read as the same bytes, and VTK declines; VTK and
ParaView read those arrays volume by volume (`metaimage.py`).
"""

from __future__ import annotations

from ..conventions.semantics import Semantics
from ..model.meta import ArrayMeta
from .base import Layout
from .rawinfo import anatomical_frame, big_endian, number, type_name

# More dimensions than VTK's image data has: the header keeps VTK out (see above).
VTK_MAX_NDIM = 3
# NRRD has no half float and no complex type.
_TYPES = {
    ("b", 1): "uint8", ("u", 1): "uint8", ("i", 1): "int8",
    ("u", 2): "uint16", ("i", 2): "int16",
    ("u", 4): "uint32", ("i", 4): "int32",
    ("u", 8): "uint64", ("i", 8): "int64",
    ("f", 4): "float", ("f", 8): "double",
}


def nrrd_header(meta: ArrayMeta, semantics: Semantics, raw_name: str) -> Layout | None:
    kind = type_name(meta, _TYPES, raw_name)
    if kind is None:
        return None
    lines = [
        "NRRD0004",
        f"type: {kind}",
        f"dimension: {meta.ndim}",
        "sizes: " + " ".join(str(s) for s in reversed(meta.shape)),
    ]
    lines += _geometry(semantics, meta.ndim)
    if meta.dtype.itemsize > 1:
        lines.append(f"endian: {'big' if big_endian(meta.dtype) else 'little'}")
    if meta.ndim > VTK_MAX_NDIM:
        lines.append("byte skip: -1")
    lines += ["encoding: raw", f"data file: {raw_name}"]
    return Layout(("\n".join(lines) + "\n").encode("utf-8"), 0)


def _geometry(semantics: Semantics, ndim: int) -> list[str]:
    axes = semantics.axes
    if axes is None or len(axes) != ndim:
        return []
    fastest_first = list(reversed(axes))
    lines = []
    if all(a.kind == "space" and a.scale is not None for a in axes) and ndim <= 3:
        # Each axis's world direction: its own world axis, or its LPS axis and sign when anatomically oriented.
        frame = anatomical_frame(axes)
        world = list(reversed(frame)) if frame is not None else [(i, 1) for i in range(ndim)]
        directions = []
        origin = [0.0] * ndim
        for axis, (component, sign) in zip(fastest_first, world, strict=True):
            vector = [0.0] * ndim
            vector[component] = sign * (axis.scale or 0.0)  # (every axis has a scale here)
            directions.append("(" + ",".join(number(v) for v in vector) + ")")
            origin[component] = sign * (axis.origin or 0.0)
        lines += ["space: left-posterior-superior" if frame is not None else f"space dimension: {ndim}",
                  "space directions: " + " ".join(directions),
                  "space origin: (" + ",".join(number(v) for v in origin) + ")"]
        units = [a.unit for a in fastest_first]
        if all(u and '"' not in u for u in units):
            lines.append("space units: " + " ".join(f'"{u}"' for u in units))
    elif any(a.kind == "space" and a.scale is not None for a in axes):
        # Only space axes carry a spacing, as in the .mhd: a time step is no voxel size.
        lines.append("spacings: " + " ".join(number(a.scale) if a.kind == "space" and a.scale is not None
                                             else "nan" for a in fastest_first))
    names = [a.name for a in fastest_first]
    if all(n and '"' not in n and "\n" not in n for n in names):
        lines.append("labels: " + " ".join(f'"{n}"' for n in names))
    return lines
