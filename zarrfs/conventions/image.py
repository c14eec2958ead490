"""OME-Zarr as the spec defines it: images, their level arrays at any depth, plates, wells and fields.

A multiscale image is a group whose attributes hold `multiscales` (0.1-0.4)
or `ome.multiscales` (0.5). Each `datasets[i].path` is a path relative to
that group and may reach into sub-groups (ngff-zarr writes `scale0/zyx`), so
the image of a level array is found by walking up from the array, not by
looking at its parent only. A plate (HCS) group lists its wells
(`plate.wells[].path`, `A/1`), each well group its fields
(`well.images[].path`), and each field is an image group. Label images sit
in the image's `labels/` group and are images of their own (`image-label`).

What is wrong with the metadata (a dataset path that is not a relative
path, a level or well that names nothing) is collected as `problems`: the
caller reports it once and serves the rest. Everything here reads metadata
alone.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ZarrfsError
from ..model.meta import ArrayMeta, GroupMeta
from .ome import normalised_dataset_path, ome_block, ome_member

if TYPE_CHECKING:
    from ..model.hierarchy import Hierarchy

# How far above an array its image group may be: datasets are usually one or
# two levels down; the bound keeps a lookup from walking a deep tree.
MAX_LEVEL_DEPTH = 8
# A field is `row/column/field` below its plate (the spec's layout); one level more is allowed for each.
MAX_WELL_DEPTH = 3
MAX_PLATE_DEPTH = 4


@dataclass(frozen=True)
class OmeImage:
    """One `multiscales` entry of an image group."""

    group_path: str  # '' for the store's root group
    version: str | None
    block: dict[str, Any]  # the object holding `multiscales` (and `omero`, `image-label`)
    index: int  # which entry of `multiscales`
    dataset_paths: tuple[str, ...]  # normalised, relative to the group; level 0 first
    # Datasets left out (a path that is not relative to the group); `level_problems` adds the levels
    # whose path names no array.
    problems: tuple[str, ...] = ()

    @property
    def multiscale(self) -> dict[str, Any]:
        return self.block["multiscales"][self.index]

    @property
    def name(self) -> str | None:
        name = self.multiscale.get("name")
        return name if isinstance(name, str) and name else None

    @property
    def is_label(self) -> bool:
        return isinstance(self.block.get("image-label"), dict)

    def level_path(self, level: int) -> str:
        """The hierarchy path of level `level`'s array."""
        return posixpath.join(self.group_path, self.dataset_paths[level]) if self.group_path \
            else self.dataset_paths[level]


def images_of_group(group: GroupMeta) -> tuple[OmeImage, ...]:
    """The multiscale images a group declares (none when it is not an OME-Zarr image group).

    Entries without a usable `datasets` list are left out (`conventions.ome`
    reports what is wrong with them when an array asks for its meaning); a
    dataset whose path is not a path below the group (`..`, absolute) is left
    out of its image, and said in the image's `problems`.
    """
    found = ome_block(group.attributes)
    if found is None:
        return ()
    version, block = found
    multiscales = block.get("multiscales")
    if not isinstance(multiscales, list):
        return ()
    images = []
    for index, multiscale in enumerate(multiscales):
        datasets = multiscale.get("datasets") if isinstance(multiscale, dict) else None
        if not isinstance(datasets, list) or not datasets or not all(isinstance(d, dict) for d in datasets):
            continue
        paths, problems = [], []
        for level, dataset in enumerate(datasets):
            path = normalised_dataset_path(dataset.get("path"))
            if path is None:
                problems.append(f"multiscales[{index}].datasets[{level}].path {dataset.get('path')!r} is not a "
                                "path below the image group")
            elif path not in paths:
                paths.append(path)
            else:
                problems.append(f"multiscales[{index}].datasets[{level}].path {path!r} repeats a level")
        if paths:
            images.append(OmeImage(group.path, version, block, index, tuple(paths), tuple(problems)))
    return tuple(images)


def _groups_above(hierarchy: Hierarchy, path: str, max_depth: int) -> Iterator[tuple[GroupMeta, str]]:
    """(group, path of `path` relative to it) for each group above `path`, nearest first, at most
    `max_depth` levels up."""
    if not path:
        return
    parts = path.split("/")
    for depth in range(1, min(len(parts), max_depth) + 1):
        try:
            group = hierarchy.node("/".join(parts[:-depth]))
        except ZarrfsError:
            continue
        if isinstance(group, GroupMeta):
            yield group, "/".join(parts[-depth:])


def image_of_array(hierarchy: Hierarchy, array_path: str) -> tuple[OmeImage, int] | None:
    """(image, level) of the multiscale image that lists `array_path` as a level; None if none does.

    The nearest enclosing image group wins (a label image inside `labels/` is
    its own image, not a level of the image above it).
    """
    for group, relative in _groups_above(hierarchy, array_path, MAX_LEVEL_DEPTH):
        for image in images_of_group(group):
            if relative in image.dataset_paths:
                return image, image.dataset_paths.index(relative)
    return None


def level_arrays(hierarchy: Hierarchy, image: OmeImage) -> tuple[ArrayMeta | None, ...]:
    """Each level's array, None where the path names no array."""
    levels: list[ArrayMeta | None] = []
    for level in range(len(image.dataset_paths)):
        try:
            node = hierarchy.node(image.level_path(level))
        except ZarrfsError:
            node = None
        levels.append(node if isinstance(node, ArrayMeta) else None)
    return tuple(levels)


def level_problems(image: OmeImage, arrays: tuple[ArrayMeta | None, ...]) -> tuple[str, ...]:
    """Everything wrong with an image's levels: its `problems` and each level that names no array."""
    missing = tuple(f"multiscales[{image.index}] level {image.dataset_paths[level]!r} names no array"
                    for level, array in enumerate(arrays) if array is None)
    return image.problems + missing


# ------------------------------------------------------------------ plates


@dataclass(frozen=True)
class PlateWell:
    """One well a plate lists, and the fields its well group lists (empty when the group is missing)."""

    path: str  # normalised, relative to the plate group ("A/1")
    row: str | None  # the row's and column's names, from the plate's `rows`/`columns` and the indexes
    column: str | None
    fields: tuple[str, ...]  # normalised, relative to the well group ("0")


@dataclass(frozen=True)
class OmePlate:
    """An HCS plate group (`plate`) with its wells and their fields."""

    group_path: str
    version: str | None
    name: str | None
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    wells: tuple[PlateWell, ...]
    problems: tuple[str, ...]  # wells or fields that name nothing, paths that are not relative

    def field_path(self, well: PlateWell, field: str) -> str:
        """The hierarchy path of one field's image group."""
        return "/".join(p for p in (self.group_path, well.path, field) if p)


@dataclass(frozen=True)
class PlateField:
    """Where an image group sits in its plate."""

    plate_path: str
    well: str  # relative to the plate ("A/1")
    field: str  # relative to the well ("0")
    acquisition: int | None = None

    def describe(self) -> str:
        acquisition = f" acquisition {self.acquisition}" if self.acquisition is not None else ""
        return f"OME-Zarr plate /{self.plate_path} well {self.well} field {self.field}{acquisition}"


def _names(value: Any) -> tuple[str, ...]:
    """`rows`/`columns` of a plate: their names ('' where one is not a name)."""
    if not isinstance(value, list):
        return ()
    return tuple(v["name"] if isinstance(v, dict) and isinstance(v.get("name"), str) else "" for v in value)


def _indexed(names: tuple[str, ...], index: Any) -> str | None:
    ok = isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(names) and names[index]
    return names[index] if ok else None


def _field_entries(group: GroupMeta) -> list[dict[str, Any]] | None:
    """The `well.images` entries of a well group; None when it is not one."""
    found = ome_member(group.attributes, "well")
    images = found[1].get("images") if found is not None and isinstance(found[1], dict) else None
    return [e for e in images if isinstance(e, dict)] if isinstance(images, list) else None


def _plate_object(group: GroupMeta) -> tuple[str | None, dict[str, Any]] | None:
    """(version, `plate` object) of a plate group; None when it is not one."""
    found = ome_member(group.attributes, "plate")
    return found if found is not None and isinstance(found[1], dict) else None


def plate_of_group(hierarchy: Hierarchy, group: GroupMeta) -> OmePlate | None:
    """The plate a group declares, each listed well read (one metadata lookup per well); None if none.

    A well that names no group, or a field that names no image group, is
    kept out and said in `problems`.
    """
    found = _plate_object(group)
    if found is None:
        return None
    version, plate = found
    rows, columns = _names(plate.get("rows")), _names(plate.get("columns"))
    wells_value = plate.get("wells")
    wells, problems = [], []
    if not isinstance(wells_value, list):
        problems.append(f"plate.wells must be a list, got {type(wells_value).__name__}")
        wells_value = []
    for number, entry in enumerate(wells_value):
        path = normalised_dataset_path(entry.get("path")) if isinstance(entry, dict) else None
        if path is None:
            problems.append(f"plate.wells[{number}] has no path below the plate group")
            continue
        well_group = _group_at(hierarchy, "/".join(p for p in (group.path, path) if p))
        entries = None if well_group is None else _field_entries(well_group)
        if entries is None:
            problems.append(f"well {path!r} names no well group")
            continue
        fields = []
        for field_entry in entries:
            field = normalised_dataset_path(field_entry.get("path"))
            field_path = "/".join(p for p in (group.path, path, field or "") if p)
            field_group = _group_at(hierarchy, field_path) if field is not None else None
            if field_group is None or not images_of_group(field_group):
                problems.append(f"well {path!r}: field {field_entry.get('path')!r} names no image group")
                continue
            fields.append(field)
        wells.append(PlateWell(path, _indexed(rows, entry.get("rowIndex")), _indexed(columns, entry.get("columnIndex")),
                               tuple(fields)))  # type: ignore[arg-type]
    name = plate.get("name")
    return OmePlate(group.path, version, name if isinstance(name, str) and name else None, rows, columns,
                    tuple(wells), tuple(problems))


def _group_at(hierarchy: Hierarchy, path: str) -> GroupMeta | None:
    try:
        node = hierarchy.node(path)
    except ZarrfsError:
        return None
    return node if isinstance(node, GroupMeta) else None


def field_of_image(hierarchy: Hierarchy, image: OmeImage) -> PlateField | None:
    """Where image `image` sits in a plate: the well group above that lists it, the plate above that lists
    the well; None when the image is not a plate's field."""
    for well_group, field in _groups_above(hierarchy, image.group_path, 1):
        entries = _field_entries(well_group)
        entry = next((e for e in entries or () if normalised_dataset_path(e.get("path")) == field), None)
        if entry is None:
            return None
        for plate_group, well in _groups_above(hierarchy, well_group.path, MAX_WELL_DEPTH):
            found = _plate_object(plate_group)
            listed = found[1].get("wells") if found is not None else None
            if isinstance(listed, list) and any(isinstance(w, dict) and normalised_dataset_path(w.get("path")) == well
                                                for w in listed):
                acquisition = entry.get("acquisition")
                acquisition = acquisition if isinstance(acquisition, int) and not isinstance(acquisition, bool) \
                    else None
                return PlateField(plate_group.path, well, field, acquisition)
    return None


def group_layout(hierarchy: Hierarchy, group: GroupMeta) -> str | None:
    """One line saying what OME-Zarr layout a group is (image, plate, well), for `zarrfs tree`; None if none."""
    parts = []
    for image in images_of_group(group):
        kind = "label image" if image.is_label else "image"
        name = f" {image.name!r}" if image.name else ""
        version = f" {image.version}" if image.version else ""
        count = len(image.dataset_paths)
        parts.append(f"OME-Zarr{version} {kind}{name}: {count} level{'s' if count > 1 else ''} "
                     f"({', '.join(image.dataset_paths)})")
        parts += [f"problem: {p}" for p in level_problems(image, level_arrays(hierarchy, image))]
    plate = plate_of_group(hierarchy, group)
    if plate is not None:
        fields = sum(len(w.fields) for w in plate.wells)
        parts.append(f"OME-Zarr plate{' ' + repr(plate.name) if plate.name else ''}: {len(plate.rows)} rows x "
                     f"{len(plate.columns)} columns, {len(plate.wells)} wells, {fields} fields")
        parts += [f"problem: {p}" for p in plate.problems]
    entries = _field_entries(group)
    if entries is not None:
        parts.append(f"OME-Zarr well: {len(entries)} fields")
    labels = ome_member(group.attributes, "labels")
    if labels is not None and isinstance(labels[1], list):
        parts.append(f"OME-Zarr labels: {', '.join(str(n) for n in labels[1])}")
    return "; ".join(parts) or None
