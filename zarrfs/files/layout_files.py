"""Files made of a `formats` layout: header bytes, an array's element region, trailer bytes.

Every array file but the tiled TIFFs (`.npy`, `.raw` and its sidecars' data,
`.tif`, `.json`) and every document made of metadata alone (`.group.json`,
a collection's OME-XML), whose region is empty. The layout says whether C may
answer its region (`Layout.c_region`: the array's C-order bytes, not planes
in another order); C then answers the reads of cached chunks within it.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from ..engine.engine import Engine
from ..formats.base import LazyLayout, Layout
from .array_region import ArrayRegion
from .contract import OpenedFile, VirtualFile


class LayoutFile(VirtualFile):
    __slots__ = ("_layout", "engine", "array_path", "in_c")  # seven or more per array of a wide group
    """A layout, with the array whose elements fill its region (`array_path`; None for a document)."""

    def __init__(self, layout: Layout | LazyLayout, engine: Engine | None = None, array_path: str | None = None,
                 *, in_c: bool = True) -> None:
        """`in_c`: whether C may answer the region when the layout allows it (not a variable-length
        array's, whose fixed-width chunks only Python makes, engine/vlen_widths.py)."""
        assert (engine is None) == (array_path is None), "an array's file is read through its engine"
        self._layout, self.engine, self.array_path, self.in_c = layout, engine, array_path, in_c

    @classmethod
    def document(cls, content: bytes) -> LayoutFile:
        """A file made of metadata alone."""
        return cls(Layout(content, 0))

    @property
    def layout(self) -> Layout:
        """The layout, built now if it waited for the first use (a TIFF's IFDs)."""
        return self._layout.layout if isinstance(self._layout, LazyLayout) else self._layout

    @property
    def size(self) -> int:
        return self._layout.size

    def open(self) -> OpenLayoutFile:
        layout = self.layout
        if self.engine is None or self.array_path is None or not layout.data_nbytes:
            return OpenLayoutFile(layout, None)
        return OpenLayoutFile(layout, ArrayRegion(self.engine.reader(self.array_path),
                                                  layout.c_region if self.in_c else None))


class OpenLayoutFile(OpenedFile):
    """One open of a layout file: its region read through the array's reader, on this open's stream;
    C granted the region when the layout's region is the array's C-order bytes (`ArrayRegion.attach`)."""

    def __init__(self, layout: Layout, region: ArrayRegion | None) -> None:
        self.layout = layout
        self.region = region  # None: no element region (a document)

    @property
    def size(self) -> int:
        return self.layout.size

    def read_into(self, offset: int, out: np.ndarray) -> int:
        return self.layout.read_into(offset, out, _no_region if self.region is None else self.region.read_region)

    def attach(self, number: int) -> bool:
        return self.region is not None and self.region.attach(number)

    def load_for_c(self, offset: int, out: np.ndarray, write: bool) -> int | None:
        assert self.region is not None, "C is granted only a region"
        return self.region.load_for_c(offset, out, write)

    def close(self) -> None:
        if self.region is not None:
            self.region.close()

    def version(self) -> Hashable:
        """The array's reader (a metadata refresh makes a new one) and the layout's size; a
        document's own bytes (metadata alone, small)."""
        if self.region is None:
            return hash(self.layout.header), self.layout.size
        return self.region.reader.token, self.layout.size


def _no_region(start: int, stop: int, target: np.ndarray) -> None:
    raise AssertionError("a document has no element region")
