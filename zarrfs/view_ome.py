"""OME-TIFF files in the virtual tree, bound to the level arrays serving them.

- An image group's directory has `NAME.ome.tif`, the image's pyramid. NAME
  is the multiscale's `name` when it can stand as a file name, else the
  directory's own name (the group's, or the store's for a root image); a
  group with several multiscales adds `-1`, `-2`... after the first.
- A plate group's directory has `NAME.ome.tif` too (the plate's `name`, else
  the directory's): every field of every well as one image of the file, each
  with its pyramid, and the Plate/Well/WellSample elements that place them,
  so Bio-Formats shows the plate. Fields that cannot join it (another sample
  type) are left out of the plate file, with one log line; each still has
  its own file in its directory.
- A bioformats2raw collection's group has `NAME.ome.tif` (NAME: the
  directory's, without a trailing `.ome`): every series as one image of
  the file, in the series order, each with its pyramid, so Bio-Formats
  shows the collection as its series. Its OME-XML is the collection's
  `OME/METADATA.ome.xml` rewritten to what the file holds
  (`formats.ome_metadata`), else built from each series' multiscales.
  Series that cannot join it (another sample type, axes OME-TIFF cannot
  say) are left out and reported with the layout's own problems.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .conventions.bioformats2raw import Collection, collection_of_group
from .conventions.image import OmeImage, images_of_group, level_arrays
from .conventions.plate import Plate, plate_of_group
from .conventions.pyramid import overview_levels
from .conventions.semantics import Semantics
from .engine.engine import Engine
from .engine.tiles import TiledFile
from .formats import OME_TIFF_SUFFIX
from .formats.ome_metadata import merged_ome_xml
from .formats.ome_tiff import MAX_PLANES, ImageLevels, ome_tiff_layout, safe_file_stem, storable
from .formats.tiled_tiff import MAX_TILES
from .formats.ome_xml import OmePlate
from .model.meta import ArrayMeta, GroupMeta

log = logging.getLogger(__name__)

SemanticsOf = Callable[[ArrayMeta], Semantics]


def ome_tiff_files(engine: Engine, group: GroupMeta, directory_name: str,
                   semantics_of: SemanticsOf) -> dict[str, TiledFile]:
    """File name -> OME-TIFF of each multiscale image, and of the plate, the group declares."""
    files: dict[str, TiledFile] = {}
    for number, image in enumerate(images_of_group(group)):
        stem = safe_file_stem(image.name) or directory_name
        name = f"{stem}{f'-{number}' if number else ''}{OME_TIFF_SUFFIX}"
        served = _guarded(name, group, lambda: _image_file(engine, image, name, semantics_of))
        if served is not None:
            files[name] = served
    plate = plate_of_group(engine.hierarchy, group)
    if plate is not None:
        name = f"{safe_file_stem(plate.name) or directory_name}{OME_TIFF_SUFFIX}"
        served = _guarded(name, group, lambda: _plate_file(engine, plate, name, semantics_of))
        if served is not None and name not in files:
            files[name] = served
    return files


def _guarded(name: str, group: GroupMeta, build: Callable[[], TiledFile | None]) -> TiledFile | None:
    try:
        return build()
    except Exception:  # one file that cannot be built must not hide the directory
        log.exception("group /%s: cannot build its %s", group.path, name)
        return None


def _image_levels(engine: Engine, image: OmeImage, semantics_of: SemanticsOf) -> ImageLevels | None:
    arrays = level_arrays(engine.hierarchy, image)
    full = arrays[0]
    if full is None or full.vlen or full.opaque_type:
        return None
    return ImageLevels((full, *overview_levels(full, arrays[1:])), semantics_of(full), image.name)


def _image_file(engine: Engine, image: OmeImage, name: str, semantics_of: SemanticsOf) -> TiledFile | None:
    levels = _image_levels(engine, image, semantics_of)
    return None if levels is None else _bind(engine, [levels], f"{image.group_path}#{image.index}", name)


def _plate_file(engine: Engine, plate: Plate, name: str, semantics_of: SemanticsOf) -> TiledFile | None:
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
            if images and levels.levels[0].dtype != images[0].levels[0].dtype:
                log.warning("%s: plate /%s: field /%s has another data type than the first field; left out of "
                            "%s", engine.hierarchy.store.display_name, plate.group_path, field.group_path, name)
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


@dataclass(frozen=True)
class CollectionFile:
    """A bioformats2raw collection's OME-TIFF and what it says about the collection (for `.group.json`)."""

    name: str
    file: TiledFile | None  # None when no series can be stored
    report: dict[str, Any]


def collection_file(engine: Engine, group: GroupMeta, directory_name: str, semantics_of: SemanticsOf,
                    build: bool = True) -> CollectionFile | None:
    """The OME-TIFF of the bioformats2raw collection a group declares (with `build` false, its report alone);
    None when the group declares none."""
    collection = collection_of_group(engine.hierarchy, group)
    if collection is None:
        return None
    name = f"{directory_name.removesuffix('.ome') or directory_name}{OME_TIFF_SUFFIX}"
    left_out: list[str] = []
    built = _guarded(name, group, lambda: _collection_file(engine, collection, name, semantics_of, left_out)) \
        if build and collection.series else None
    problems = [*collection.problems, *left_out]
    for problem in problems:
        log.warning("%s: bioformats2raw collection /%s: %s", engine.hierarchy.store.display_name, group.path,
                    problem)
    report = {"layout": collection.describe(), "series": [s.path for s in collection.series],
              "file": name if built is not None else None, "problems": problems}
    return CollectionFile(name, built, report)


def _collection_file(engine: Engine, collection: Collection, name: str, semantics_of: SemanticsOf,
                     left_out: list[str]) -> TiledFile | None:
    images: list[ImageLevels] = []
    sources: list[int] = []
    for series in collection.series:
        levels = _image_levels(engine, series.image, semantics_of)
        why = "its level 0 is no array OME-TIFF can hold" if levels is None or not storable(levels) else \
            "another data type than the first series (one file holds one)" \
            if images and levels.levels[0].dtype != images[0].levels[0].dtype else None
        if why is not None:
            left_out.append(f"series {series.path!r} left out of {name}: {why}")
            continue
        images.append(dataclasses.replace(levels, name=levels.name or series.path))  # type: ignore
        sources.append(series.index)
    if not images:
        return None
    original = collection.metadata
    rewrite = None
    if original is not None:
        def rewrite(built: bytes) -> bytes:
            merged = merged_ome_xml(original, built, sources)
            if merged is None:
                left_out.append("OME/METADATA.ome.xml cannot describe the file (no OME 2016-06 document with Pixels "
                                "in each Image), so its metadata comes from the multiscales")
            return built if merged is None else merged
    served = _bind(engine, images, f"{collection.group_path}#bioformats2raw", name, rewrite=rewrite)
    if served is None:  # every image alone fits (`storable`): together they are too many
        left_out.append(f"no {name}: its series together need more planes or tiles than one OME-TIFF holds "
                        f"({MAX_PLANES} planes, {MAX_TILES} tiles)")
    return served


def _bind(engine: Engine, images: list[ImageLevels], identity: str, name: str,
          plate: OmePlate | None = None, rewrite: Callable[[bytes], bytes] | None = None) -> TiledFile | None:
    # The same UUID for the same file at every mount: readers may remember files by it.
    file_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"zarrfs:{engine.hierarchy.store.display_name}/{identity}")
    built = ome_tiff_layout(images, f"urn:uuid:{file_uuid}", name, plate, rewrite)
    if built is None:
        return None
    layout, arrays = built
    return TiledFile(layout, engine, tuple(array.path for array in arrays))
