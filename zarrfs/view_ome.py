"""OME-TIFF files in the virtual tree, bound to the level arrays serving them.

- An image group's directory has `NAME.ome.tif`, the image's pyramid. NAME
  is the multiscale's `name` when it can stand as a file name, else the
  directory's own name (the group's, or the store's for a root image), less
  a trailing `.ome` (`X.ome.zarr` gets `X.ome.tif`); a group with several
  multiscales adds `-1`, `-2`... after the first.
- A plate group's directory has `NAME.ome.tif` too (the plate's `name`, else
  the directory's): every field of every well as one image of the file, each
  with its pyramid, and the Plate/Well/WellSample elements that place them,
  so Bio-Formats shows the plate. Fields that cannot join it (another sample
  type) are left out of the plate file, with one log line; each still has
  its own file in its directory.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable

from .conventions.image import OmeImage, images_of_group, level_arrays
from .conventions.plate import plate_block, plate_of_group
from .conventions.pyramid import overview_levels
from .conventions.semantics import Semantics
from .engine.engine import Engine
from .engine.tiles import TiledFile
from .errors import NotFoundError, ZarrfsError
from .formats import OME_TIFF_SUFFIX
from .formats.base import DeferredLayout
from .formats.ome_tiff import ImageLevels, ome_tiff_layout, safe_file_stem
from .formats.ome_xml import OmePlate
from .model.meta import ArrayMeta, GroupMeta

log = logging.getLogger(__name__)

SemanticsOf = Callable[[ArrayMeta], Semantics]


def ome_tiff_files(engine: Engine, group: GroupMeta, directory_name: str,
                   semantics_of: SemanticsOf) -> dict[str, DeferredLayout]:
    """File name -> OME-TIFF of each multiscale image, and of the plate, the group declares.

    Names come from the group's metadata alone; each file is built the first
    time its size or bytes are asked for. A plate's file needs every well,
    field and level (thousands of nodes on a remote store): listing the
    plate's directory, and so mounting a plate, must not wait for them.
    """
    files: dict[str, DeferredLayout] = {}
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


def _deferred(name: str, group: GroupMeta, build: Callable[[], TiledFile | None]) -> DeferredLayout:
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

    return DeferredLayout(build_once)  # type: ignore[arg-type]  # a TiledFile stands where a Layout stands


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


def _bind(engine: Engine, images: list[ImageLevels], identity: str, name: str,
          plate: OmePlate | None = None) -> TiledFile | None:
    # The same UUID for the same file at every mount: readers may remember files by it.
    file_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"zarrfs:{engine.hierarchy.store.display_name}/{identity}")
    built = ome_tiff_layout(images, f"urn:uuid:{file_uuid}", name, plate)
    if built is None:
        return None
    layout, arrays = built
    return TiledFile(layout, engine, tuple(array.path for array in arrays))
