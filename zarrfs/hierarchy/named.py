"""The nodes a group's metadata names below it: how a store that cannot list is walked.

A public store served over plain HTTP cannot list its directories, and many
hierarchies carry no consolidated metadata. Their conventions still name
every node a reader needs, and the readers people compare zarrfs with
(ome-zarr-py, napari, vizarr, Neuroglancer, GDAL) walk them that way:

- OME-Zarr images (0.1-0.6): `multiscales[].datasets[].path`, the levels
  (paths may reach into sub-groups: `scale0/zyx`); an image group may hold a
  `labels` group, which is looked for (it is named nowhere).
- OME-Zarr labels groups: `labels` lists the label images.
- Plates: `plate.wells[].path` (`A/1`, through the row group `A`); wells:
  `well.images[].path`.
- bioformats2raw collections (`bioformats2raw.layout`): the `OME` group,
  whose `series` lists the series (paths relative to the collection's
  root); without that list the series are the groups `0`, `1`, ... up to
  the first one missing (`Naming.consecutive`).
- GeoZarr multiscales (an object with `layout[].asset`; `.` is the group).
- OME-Zarr 0.6 scenes: `scene.coordinateTransformations[]`, whose `input`
  (and `output`) name images by `path` (an `input` string is a path too).

0.4 keeps these in a group's attributes, 0.5 and later under `ome`. Only
paths are read here, never what they mean (that is `conventions/`); a path
that leaves the store is ignored. A named node that turns out absent is
normal (a `labels` group most images do not have) and costs one request,
remembered.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from ..model.meta import GroupMeta

# Series of a collection without a `series` list are looked for this many at a time.
CONSECUTIVE_BATCH = 32


@dataclass(frozen=True)
class Naming:
    """What one group's metadata names: hierarchy paths (from the store's root), and `consecutive`,
    a group whose children `0`, `1`, ... are series to look for until one is missing."""

    paths: tuple[str, ...] = ()
    consecutive: str | None = None


def naming(group: GroupMeta) -> Naming:
    """The node paths `group`'s metadata names below it (or, for a collection's `OME`, beside it)."""
    attributes = group.attributes
    ome = attributes.get("ome")
    block = ome if isinstance(ome, dict) else attributes
    relative: list[Any] = []  # what the metadata holds where a path belongs: `_below` keeps the paths
    consecutive = None
    multiscales = block.get("multiscales")
    if isinstance(multiscales, list):
        relative += [d.get("path") for m in multiscales if isinstance(m, dict)
                     for d in _objects(m.get("datasets"))]
        relative.append("labels")
    elif isinstance(attributes.get("multiscales"), dict):  # GeoZarr: an object with a layout
        relative += [entry.get("asset") for entry in _objects(attributes["multiscales"].get("layout"))]
    labels = block.get("labels")
    if isinstance(labels, list):
        relative += labels
    relative += [well.get("path") for well in _objects(_object(block.get("plate")).get("wells"))]
    relative += [image.get("path") for image in _objects(_object(block.get("well")).get("images"))]
    for transform in _objects(_object(block.get("scene")).get("coordinateTransformations")):
        source, target = transform.get("input"), transform.get("output")
        relative += [source if isinstance(source, str) else _object(source).get("path"), _object(target).get("path")]
    if "bioformats2raw.layout" in block:
        relative.append("OME")
    paths = [_below(group.path, p) for p in relative]
    series = block.get("series")
    if posixpath.basename(group.path) == "OME" and isinstance(series, list):
        parent = posixpath.dirname(group.path)
        paths += [_below(parent, s) for s in series]  # relative to the collection's root
    if "bioformats2raw.layout" in block and "plate" not in block:
        consecutive = group.path
    return Naming(tuple(dict.fromkeys(p for p in paths if p is not None and p != group.path)), consecutive)


def _below(parent: str, value: Any) -> str | None:
    """`value` (a relative path) joined to `parent`; None when it is no path below `parent`."""
    if not isinstance(value, str) or not value or value.startswith("/") or "://" in value:
        return None
    path = posixpath.normpath(value)
    if path == "." or path == ".." or path.startswith("../"):
        return None
    return posixpath.join(parent, path) if parent else path


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _objects(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
