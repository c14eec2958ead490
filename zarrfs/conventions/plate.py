"""OME-Zarr high-content screening plates: plate group -> wells -> fields, each field an image group.

0.4 keeps `plate` in the plate group's attributes and `well` in each well
group's; 0.5 keeps them under `attributes.ome`. Well paths (`A/1`) are
relative to the plate, field paths (`0`) to the well. A well or field that
is missing or not an image is left out of the plate, with one log line.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ZarrfsError
from ..model.meta import GroupMeta
from .image import OmeImage, images_of_group
from .ome import normalised_dataset_path

if TYPE_CHECKING:
    from ..hierarchy import Hierarchy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Well:
    row: int  # rowIndex
    column: int  # columnIndex
    path: str  # relative to the plate group
    fields: tuple[OmeImage, ...]  # the first multiscale image of each field group, in the well's order


@dataclass(frozen=True)
class Plate:
    group_path: str
    name: str | None
    row_names: tuple[str, ...]
    column_names: tuple[str, ...]
    wells: tuple[Well, ...]


def plate_block(attributes: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The `plate` or `well` object of a group's attributes (0.5: under `ome`), or None."""
    ome = attributes.get("ome")
    value = ome.get(key) if isinstance(ome, dict) and key in ome else attributes.get(key)
    return value if isinstance(value, dict) else None


def plate_of_group(hierarchy: Hierarchy, group: GroupMeta) -> Plate | None:
    """The plate a group declares, with the wells and fields that resolve to images; None when it is no plate
    or none of its wells holds an image."""
    block = plate_block(group.attributes, "plate")
    if block is None:
        return None
    wells: list[Well] = []
    entries = block.get("wells")
    for entry in entries if isinstance(entries, list) else []:
        well = _well(hierarchy, group, entry)
        if well is not None:
            wells.append(well)
    if not wells:
        return None
    name = block.get("name")
    return Plate(group.path, name if isinstance(name, str) and name else None, _names(block.get("rows")),
                 _names(block.get("columns")), tuple(wells))


def _well(hierarchy: Hierarchy, plate: GroupMeta, entry: Any) -> Well | None:
    where = f"{hierarchy.store.display_name}: plate /{plate.path}"
    path = normalised_dataset_path(entry.get("path")) if isinstance(entry, dict) else None
    row, column = (entry.get("rowIndex"), entry.get("columnIndex")) if isinstance(entry, dict) else (None, None)
    if path is None:
        log.warning("%s: well %r has no usable path; left out of the plate", where, entry)
        return None
    if not (isinstance(row, int) and isinstance(column, int)):  # 0.3 has no indices: from the path
        row, column = _indices_from_path(path)
    group = group_at(hierarchy, _join(plate.path, path))
    block = plate_block(group.attributes, "well") if group is not None else None
    images = block.get("images") if block is not None else None
    if not isinstance(images, list):
        log.warning("%s: well %s is not a well group; left out of the plate", where, path)
        return None
    fields: list[OmeImage] = []
    for image in images:
        field_path = normalised_dataset_path(image.get("path")) if isinstance(image, dict) else None
        field = group_at(hierarchy, _join(group.path, field_path)) if field_path is not None else None  # type: ignore
        found = images_of_group(field) if field is not None else ()
        if not found:
            log.warning("%s: field %r of well %s is not an image; left out of the plate", where, image, path)
            continue
        fields.append(found[0])
    return Well(row, column, path, tuple(fields)) if fields and row >= 0 and column >= 0 else None


def _indices_from_path(path: str) -> tuple[int, int]:
    """'B/3' -> (1, 2): row letters and column numbers as most plates name them; (-1, -1) when not."""
    row, _, column = path.partition("/")
    if len(row) == 1 and row.isalpha() and column.isdigit() and int(column) > 0:
        return ord(row.upper()) - ord("A"), int(column) - 1
    return -1, -1


def group_at(hierarchy: Hierarchy, path: str) -> GroupMeta | None:
    """The group at `path`; None when there is none (missing, an array, unreadable)."""
    try:
        node = hierarchy.node(path)
    except ZarrfsError:
        return None
    return node if isinstance(node, GroupMeta) else None


def _join(parent: str, child: str) -> str:
    return posixpath.join(parent, child) if parent else child


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(v.get("name")) if isinstance(v, dict) else "" for v in value)
