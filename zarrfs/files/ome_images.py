"""OME-TIFF files in the virtual tree, bound to the level arrays serving them.

- An image group's directory has `NAME.ome.tif`, the image's pyramid. NAME
  is the multiscale's `name` when it can stand as a file name, else the
  directory's own name (the group's, or the store's for a root image), less
  a trailing `.ome` (`X.ome.zarr` gets `X.ome.tif`); a group with several
  multiscales adds `-1`, `-2`... after the first.
- A plate group's directory has `NAME.ome.tif` too (the plate's `name`, else
  the directory's): every field of every well as one image of the file, each
  with its pyramid, and the Plate/Well/WellSample elements that place them,
  so Bio-Formats shows the plate. Fields of different pixel types join it,
  each its own Image type; a field that cannot (a multi-byte type in the
  other byte order) is left out of the plate file, with one log line; each
  still has its own file in its directory.
- A bioformats2raw collection's group has `NAME.ome.tif` (NAME: the
  directory's, without a trailing `.ome`): every series as one image of
  the file, in the series order, each with its pyramid, so Bio-Formats
  shows the collection as its series. Its OME-XML is the collection's
  `OME/METADATA.ome.xml` rewritten to what the file holds
  (`formats.ome_metadata`), else built from each series' multiscales.
  Series of different pixel types (a uint16 fluorescence series beside a
  uint8 RGB overview) are each an Image of its own type; series that cannot
  join it (a multi-byte type in the other byte order, axes OME-TIFF cannot
  say) are left out and reported with the layout's own problems
  (`CollectionFile.report`, for `.group.json`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from ..conventions.bioformats2raw import Collection, collection_of_group, layout_number
from ..conventions.image import OmeImage, images_of_group, level_arrays
from ..conventions.plate import plate_block, plate_of_group
from ..conventions.pyramid import overview_levels
from ..conventions.semantics import Semantics
from ..engine.engine import Engine
from ..errors import NotFoundError, ZarrfsError
from ..formats.ome_metadata import merged_ome_xml
from ..formats.ome_tiff import MAX_PLANES, ImageLevels, joins, ome_tiff_layout, safe_file_stem, storable
from ..formats.tiled_tiff import MAX_TILES
from ..formats.ome_xml import OmePlate
from ..model.meta import ArrayMeta, GroupMeta
from ..suffixes import OME_TIFF_SUFFIX
from .contract import DeferredFile
from .tiled import TiledFile

log = logging.getLogger(__name__)

SemanticsOf = Callable[[ArrayMeta], Semantics]


def ome_tiff_files(engine: Engine, group: GroupMeta, directory_name: str,
                   semantics_of: SemanticsOf) -> dict[str, DeferredFile]:
    """File name -> OME-TIFF of each multiscale image, and of the plate, the group declares.

    Names come from the group's metadata alone; each file is built the first
    time its size or bytes are asked for. A plate's file needs every well,
    field and level (thousands of nodes on a remote store): listing the
    plate's directory, and so mounting a plate, must not wait for them.
    """
    files: dict[str, DeferredFile] = {}
    for number, image in enumerate(images_of_group(group)):
        stem = safe_file_stem(image.name) or directory_name
        name = f"{_without_ome(stem)}{f'-{number}' if number else ''}{OME_TIFF_SUFFIX}"
        files[name] = _deferred(name, group, functools.partial(_image_file, engine, image, name, semantics_of))
    block = plate_block(group.attributes, "plate")
    if block is not None:
        plate_name = block.get("name") if isinstance(block.get("name"), str) else None
        name = f"{_without_ome(safe_file_stem(plate_name) or directory_name)}{OME_TIFF_SUFFIX}"
        if name not in files:
            files[name] = _deferred(name, group, functools.partial(_plate_file, engine, group, name, semantics_of))
    return files


def _without_ome(stem: str) -> str:
    """'X.ome' -> 'X': a store named `X.ome.zarr` gets `X.ome.tif`, not `X.ome.ome.tif`."""
    return stem[:-len(".ome")] if stem.lower().endswith(".ome") and len(stem) > len(".ome") else stem


def _deferred(name: str, group: GroupMeta, build: Callable[[], TiledFile | None]) -> DeferredFile:
    """`build` run when the file is first needed. A file its metadata cannot make (no level array a TIFF
    can hold, a plate without a well that resolves) is then ENOENT, logged once and not built again; a
    store error (a stalled node) is raised to that caller, and the next one tries again."""
    refused: list[NotFoundError] = []

    def build_once() -> TiledFile:
        if refused:
            raise refused[0]
        try:
            served = build()
        except ZarrfsError:
            raise
        except Exception:  # a file that cannot be built must not hide the directory
            log.exception("group /%s: cannot build its %s", group.path, name)
            served = None
        if served is None:
            log.warning("group /%s: %s cannot be made from its metadata; it reads as missing", group.path, name)
            refused.append(NotFoundError(f"/{group.path}/{name}: cannot be made from the metadata (see the log)"))
            raise refused[0]
        return served

    return DeferredFile(build_once)


def _image_levels(engine: Engine, image: OmeImage, semantics_of: SemanticsOf) -> ImageLevels | None:
    arrays = level_arrays(engine.hierarchy, image)
    full = arrays[0]
    if full is None or full.vlen or full.opaque_type:
        return None
    return ImageLevels((full, *overview_levels(full, arrays[1:])), semantics_of(full), image.name)


def _image_file(engine: Engine, image: OmeImage, name: str, semantics_of: SemanticsOf) -> TiledFile | None:
    levels = _image_levels(engine, image, semantics_of)
    return None if levels is None else _bind(engine, [levels], f"{image.group_path}#{image.index}", name)


def _plate_file(engine: Engine, group: GroupMeta, name: str, semantics_of: SemanticsOf) -> TiledFile | None:
    engine.hierarchy.fetch_named_below(group.path)
    plate = plate_of_group(engine.hierarchy, group)
    if plate is None:
        return None
    images: list[ImageLevels] = []
    wells: list[tuple[int, int, tuple[int, ...]]] = []
    for well in plate.wells:
        indices = []
        for number, field in enumerate(well.fields):
            levels = _image_levels(engine, field, semantics_of)
            if levels is None:
                continue
            # As Bio-Formats names the fields of the plate formats it reads.
            levels = dataclasses.replace(levels, name=f"Well {well.path.replace('/', '')}, Field {number + 1}")
            why = "cannot be stored in an OME-TIFF" if not storable(levels) else \
                "has another byte order than the fields before it (one file has one)" \
                if not joins(levels, images) else None
            if why is not None:
                log.warning("%s: plate /%s: field /%s %s; left out of %s", engine.hierarchy.store.display_name,
                            plate.group_path, field.group_path, why, name)
                continue
            indices.append(len(images))
            images.append(levels)
        if indices:
            wells.append((well.row, well.column, tuple(indices)))
    if not images:
        return None
    rows = max(len(plate.row_names), 1 + max(row for row, _, _ in wells))
    columns = max(len(plate.column_names), 1 + max(column for _, column, _ in wells))
    return _bind(engine, images, plate.group_path, name, OmePlate(plate.name, rows, columns, tuple(wells)))


class CollectionFile:
    """A bioformats2raw collection's OME-TIFF, built the first time it is needed, and what the collection
    could not give it (`report`).

    Its name comes from the group's metadata alone; the series (every
    series' levels, thousands of nodes on a remote store) and the original
    OME-XML are read when the file or the report is first asked for.
    """

    def __init__(self, engine: Engine, group: GroupMeta, directory_name: str, semantics_of: SemanticsOf,
                 with_file: bool) -> None:
        self.name = f"{directory_name.removesuffix('.ome') or directory_name}{OME_TIFF_SUFFIX}"
        self.file = _deferred(self.name, group, self._build)
        self._engine, self._group, self._semantics_of, self._with_file = engine, group, semantics_of, with_file
        self._lock = threading.Lock()
        self._collection: Collection | None = None
        self._left_out: list[str] = []  # series the file could not take, and why
        self._built: TiledFile | None = None

    def report(self) -> dict[str, Any]:
        """The collection for `.group.json`: its series, its file, everything it could not use."""
        collection = self._read()
        if self._with_file and collection.series:
            try:
                _ = self.file.size  # builds the file: what it leaves out is part of the report
            except ZarrfsError:
                pass  # a file refused is in the report; a store error is the file's to raise
        problems = [*collection.problems, *self._left_out]
        return {"layout": collection.describe(), "series": [s.path for s in collection.series],
                "file": self.name if self._built is not None else None, "problems": problems}

    def _read(self) -> Collection:
        with self._lock:
            if self._collection is None:
                self._engine.hierarchy.fetch_named_below(self._group.path)
                found = collection_of_group(self._engine.hierarchy, self._group)
                assert found is not None, "a CollectionFile is made only for a collection"
                for problem in found.problems:
                    log.warning("%s: bioformats2raw collection /%s: %s", self._engine.hierarchy.store.display_name,
                                self._group.path, problem)
                self._collection = found
            return self._collection

    def _build(self) -> TiledFile | None:
        collection = self._read()
        images: list[ImageLevels] = []
        sources: list[int] = []
        left_out: list[str] = []
        for series in collection.series:
            levels = _image_levels(self._engine, series.image, self._semantics_of)
            why = "its level 0 is no array OME-TIFF can hold" if levels is None or not storable(levels) else \
                "another byte order than the series before it (one file has one)" \
                if not joins(levels, images) else None
            if levels is None or why is not None:
                left_out.append(f"series {series.path!r} left out of {self.name}: {why}")
                continue
            images.append(dataclasses.replace(levels, name=levels.name or series.path))
            sources.append(series.index)
        original = collection.metadata
        rewrite = None
        if original is not None:
            def rewrite(built: bytes) -> bytes:
                merged = merged_ome_xml(original, built, sources)
                if merged is None:
                    left_out.append("OME/METADATA.ome.xml cannot describe the file (no OME 2016-06 document with "
                                    "Pixels in each Image), so its metadata comes from the multiscales")
                return built if merged is None else merged
        served = _bind(self._engine, images, f"{collection.group_path}#bioformats2raw", self.name,
                       rewrite=rewrite) if images else None
        if images and served is None:  # every image alone fits (`storable`): together they are too many
            left_out.append(f"no {self.name}: its series together need more planes or tiles than one OME-TIFF "
                            f"holds ({MAX_PLANES} planes, {MAX_TILES} tiles)")
        for problem in left_out:
            log.warning("%s: bioformats2raw collection /%s: %s", self._engine.hierarchy.store.display_name,
                        self._group.path, problem)
        self._left_out, self._built = left_out, served
        return served


def collection_file(engine: Engine, group: GroupMeta, directory_name: str, semantics_of: SemanticsOf,
                    with_file: bool = True) -> CollectionFile | None:
    """The bioformats2raw collection a group declares, as its OME-TIFF (`with_file`) and its report; None when
    it declares none or is a plate (which takes precedence). Decided from the group's attributes alone."""
    if layout_number(group.attributes) is None or plate_block(group.attributes, "plate") is not None:
        return None
    return CollectionFile(engine, group, directory_name, semantics_of, with_file)


def _bind(engine: Engine, images: list[ImageLevels], identity: str, name: str,
          plate: OmePlate | None = None, rewrite: Callable[[bytes], bytes] | None = None) -> TiledFile | None:
    # The same UUID for the same file at every mount: readers may remember files by it.
    file_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"zarrfs:{engine.hierarchy.store.display_name}/{identity}")
    built = ome_tiff_layout(images, f"urn:uuid:{file_uuid}", name, plate, rewrite)
    if built is None:
        return None
    layout, arrays = built
    return TiledFile(layout, engine, tuple(array.path for array in arrays))
