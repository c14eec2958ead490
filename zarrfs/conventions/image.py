"""OME-Zarr images as the spec defines them: an image group, its multiscales, its level arrays at any depth.

A multiscale image is a group whose attributes hold `multiscales` (0.1-0.4)
or `ome.multiscales` (0.5). Each `datasets[i].path` is a path relative to
that group and may reach into sub-groups (ngff-zarr writes `scale0/zyx`), so
the image of a level array is found by walking up from the array, not by
looking at its parent only. Everything here reads metadata alone.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ZarrfsError
from ..model.meta import ArrayMeta, GroupMeta
from .ome import normalised_dataset_path, ome_block

if TYPE_CHECKING:
    from ..model.hierarchy import Hierarchy

# How far above an array its image group may be: datasets are usually one or
# two levels down; the bound keeps a lookup from walking a deep tree.
MAX_LEVEL_DEPTH = 8


@dataclass(frozen=True)
class OmeImage:
    """One `multiscales` entry of an image group."""

    group_path: str  # '' for the store's root group
    version: str | None
    block: dict[str, Any]  # the object holding `multiscales` (and `omero`, `image-label`)
    index: int  # which entry of `multiscales`
    dataset_paths: tuple[str, ...]  # normalised, relative to the group; level 0 first

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

    Entries without a usable `datasets` list are left out; `conventions.ome`
    reports what is wrong with them when an array asks for its meaning.
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
        if not isinstance(datasets, list) or not datasets:
            continue
        paths = tuple(normalised_dataset_path(d.get("path")) if isinstance(d, dict) else None for d in datasets)
        if None in paths:
            continue
        images.append(OmeImage(group.path, version, block, index, paths))  # type: ignore[arg-type]
    return tuple(images)


def image_of_array(hierarchy: Hierarchy, array_path: str) -> tuple[OmeImage, int] | None:
    """(image, level) of the multiscale image that lists `array_path` as a level; None if none does.

    The nearest enclosing image group wins (a label image inside `labels/` is
    its own image, not a level of the image above it).
    """
    if not array_path:
        return None
    parts = array_path.split("/")
    for depth in range(1, min(len(parts), MAX_LEVEL_DEPTH) + 1):
        group_path = "/".join(parts[:-depth])
        relative = "/".join(parts[-depth:])
        try:
            group = hierarchy.node(group_path)
        except ZarrfsError:
            continue
        if not isinstance(group, GroupMeta):
            continue
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
