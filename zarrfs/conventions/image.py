"""OME-Zarr images as the spec defines them: an image group, its multiscales, its level arrays at any depth.

A multiscale image is a group whose attributes hold `multiscales` (0.1-0.4)
or `ome.multiscales` (0.5). Each `datasets[i].path` is a path relative to
that group and may reach into sub-groups (ngff-zarr writes `scale0/zyx`), so
the image of a level array is found by walking up from the array, not by
looking at its parent only. Label images sit in the image's `labels/`
group and are images of their own (`image-label`); plates are
`conventions.plate`, where an image sits in one `conventions.layout`.

What is wrong with an image's metadata (a dataset path that is not a
relative path, a level that names no array) is collected as `problems`:
the caller reports it once and serves the rest. Everything here reads
metadata alone.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ZarrfsError
from ..model.meta import ArrayMeta, GroupMeta
from .ome import normalised_dataset_path, ome_block

if TYPE_CHECKING:
    from ..hierarchy import Hierarchy

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


def groups_above(hierarchy: Hierarchy, path: str, max_depth: int) -> Iterator[tuple[GroupMeta, str]]:
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
    for group, relative in groups_above(hierarchy, array_path, MAX_LEVEL_DEPTH):
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
