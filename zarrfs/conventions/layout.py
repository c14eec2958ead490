"""Where a group sits in OME-Zarr's layouts: the plate field an image is, and a one-line summary for `zarrfs tree`.

A plate (HCS) group lists its wells (`plate.wells[].path`, `A/1`), each
well group its fields (`well.images[].path`, `0`), and each field is an
image group. The field of an image is found by walking up from it: the well
group that lists it, then the plate group that lists that well. Metadata
alone is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..model.meta import GroupMeta
from .geo_layout import geo_layout
from .image import OmeImage, groups_above, images_of_group, level_arrays, level_problems
from .labels import labelled_image
from .ome import normalised_dataset_path
from .plate import plate_block, plate_of_group
from .scene import scene_layout

if TYPE_CHECKING:
    from ..hierarchy import Hierarchy

# A well is `row/column` below its plate (the spec's layout); one level more is allowed.
MAX_WELL_DEPTH = 3


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


def field_entries(group: GroupMeta) -> list[dict[str, Any]] | None:
    """The `well.images` entries of a well group; None when it is not one."""
    well = plate_block(group.attributes, "well")
    images = well.get("images") if well is not None else None
    return [e for e in images if isinstance(e, dict)] if isinstance(images, list) else None


def field_of_image(hierarchy: Hierarchy, image: OmeImage) -> PlateField | None:
    """Where image `image` sits in a plate: the well group above that lists it, the plate above that lists
    the well; None when the image is not a plate's field."""
    for well_group, field in groups_above(hierarchy, image.group_path, 1):
        entries = field_entries(well_group)
        entry = next((e for e in entries or () if normalised_dataset_path(e.get("path")) == field), None)
        if entry is None:
            return None
        for plate_group, well in groups_above(hierarchy, well_group.path, MAX_WELL_DEPTH):
            plate = plate_block(plate_group.attributes, "plate")
            listed = plate.get("wells") if plate is not None else None
            if isinstance(listed, list) and any(isinstance(w, dict) and normalised_dataset_path(w.get("path")) == well
                                                for w in listed):
                acquisition = entry.get("acquisition")
                acquisition = acquisition if isinstance(acquisition, int) and not isinstance(acquisition, bool) \
                    else None
                return PlateField(plate_group.path, well, field, acquisition)
    return None


def group_layout(hierarchy: Hierarchy, group: GroupMeta) -> str | None:
    """What layout a group is (OME-Zarr image, plate, well, labels; GeoZarr multiscales), '; '-separated, for
    `zarrfs tree`; None if none.

    A plate counts the wells and fields that resolve to images; `conventions.plate`
    logs the ones that do not.
    """
    parts = []
    for image in images_of_group(group):
        kind = "label image" if image.is_label else "image"
        name = f" {image.name!r}" if image.name else ""
        version = f" {image.version}" if image.version else ""
        count = len(image.dataset_paths)
        label_of, label_problems = labelled_image(hierarchy, image) if image.is_label else (None, ())
        parts.append(f"OME-Zarr{version} {kind}{name}: {count} level{'s' if count > 1 else ''} "
                     f"({', '.join(image.dataset_paths)}){' of image ' + label_of if label_of else ''}")
        parts += [f"problem: {p}" for p in [*level_problems(image, level_arrays(hierarchy, image)), *label_problems]]
    plate = plate_of_group(hierarchy, group)
    if plate is not None:
        fields = sum(len(w.fields) for w in plate.wells)
        parts.append(f"OME-Zarr plate{' ' + repr(plate.name) if plate.name else ''}: {len(plate.row_names)} rows x "
                     f"{len(plate.column_names)} columns, {len(plate.wells)} wells, {fields} fields")
    entries = field_entries(group)
    if entries is not None:
        parts.append(f"OME-Zarr well: {len(entries)} fields")
    parts += scene_layout(group)
    ome = group.attributes.get("ome")
    labels = ome.get("labels") if isinstance(ome, dict) and "labels" in ome else group.attributes.get("labels")
    if isinstance(labels, list):
        parts.append(f"OME-Zarr labels: {', '.join(str(n) for n in labels)}")
    geo = geo_layout(group.attributes, group.path)
    if geo is not None:
        count = len(geo.levels)
        parts.append(f"GeoZarr multiscales layout: {count} level{'' if count == 1 else 's'} "
                     f"({', '.join(level.asset or '.' for level in geo.levels)})")
        parts += [f"problem: {p}" for p in geo.problems]
    return "; ".join(parts) or None
