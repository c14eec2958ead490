"""bioformats2raw collections (`bioformats2raw.layout`, OME-Zarr 0.4 transitional, still written in 0.5+).

A group whose attributes hold `"bioformats2raw.layout": 3` (0.4: in the
attributes; 0.5+: under `attributes.ome`) is a collection of images, one
per `Image` of the original OME-XML:
- the images are groups below it; the `OME/` group's `series` attribute,
  when present, lists their paths in the order of the OME-XML's Images
  (and is then the list: nothing else counts); without it, they are the
  consecutively numbered groups `0`, `1`, ... (the first missing number
  ends the collection);
- `OME/METADATA.ome.xml`, when present, is the original OME-XML (names,
  channels, instrument, stage positions), a plain file, not Zarr;
- a group that is also a plate is read as the plate (the spec's
  precedence), not as a collection.
What zarrfs cannot use (a series listed but missing or not an image, an
OME-XML with another number of Images, a layout number it does not know)
is collected as `problems` for `zarrfs tree` and `.group.json`; metadata
alone is read (and the OME-XML document, bounded).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..byte_ranges import RangeRequest
from ..errors import ZarrfsError
from ..model.limits import max_document_bytes
from ..model.meta import GroupMeta, join_key
from .image import OmeImage, images_of_group
from .ome import normalised_dataset_path
from .plate import group_at, plate_block

if TYPE_CHECKING:
    from ..hierarchy import Hierarchy

LAYOUT_KEY = "bioformats2raw.layout"
SUPPORTED_LAYOUT = 3
OME_GROUP = "OME"
OME_NAMESPACE = "http://www.openmicroscopy.org/Schemas/OME/2016-06"
METADATA_FILE = "METADATA.ome.xml"
# Series found by counting up (no `series` list) stop here: one lookup each, and a collection this large
# is a plate in practice. The same bound as a group's children (model.limits).
MAX_SERIES = 10_000


@dataclass(frozen=True)
class Series:
    """One image of a collection."""

    path: str  # relative to the collection group
    image: OmeImage  # the first multiscale of its group
    index: int  # which Image of the original OME-XML it is (its place in the series order)


@dataclass(frozen=True)
class Collection:
    group_path: str
    series: tuple[Series, ...]  # in the series order; only those that are images
    listed: bool  # the order came from `OME/`'s `series` list
    metadata: bytes | None  # OME/METADATA.ome.xml as stored, None when absent or unreadable
    problems: tuple[str, ...]  # what was left out or cannot be used, and why

    def describe(self) -> str:
        source = "listed in OME/" if self.listed else "numbered"
        metadata = f", with {OME_GROUP}/{METADATA_FILE} ({len(self.metadata)} bytes)" if self.metadata is not None \
            else ""
        if not self.series:
            return f"bioformats2raw collection: no series zarrfs can serve{metadata}"
        paths = ", ".join(s.path for s in self.series[:8]) + (", ..." if len(self.series) > 8 else "")
        return f"bioformats2raw collection: {len(self.series)} series {source} ({paths}){metadata}"


def layout_number(attributes: dict[str, Any]) -> Any:
    """The group's `bioformats2raw.layout` value (0.5+: under `ome`), or None when it has none."""
    ome = attributes.get("ome")
    if isinstance(ome, dict) and LAYOUT_KEY in ome:
        return ome[LAYOUT_KEY]
    return attributes.get(LAYOUT_KEY)


def listed_series(ome_attributes: dict[str, Any]) -> tuple[list[str | None] | None, list[str]]:
    """The series paths the `OME/` group's attributes list (0.5+: under `ome`), in order (entry i is Image i of
    the OME-XML; None for an entry that is no usable path), and what is wrong with the list; (None, []) when
    there is no `series` attribute."""
    ome = ome_attributes.get("ome")
    value = ome["series"] if isinstance(ome, dict) and "series" in ome else ome_attributes.get("series")
    if value is None:
        return None, []
    if not isinstance(value, list):
        return None, [f"OME/ 'series' is not a list ({type(value).__name__}): the numbered groups are read instead"]
    paths: list[str | None] = []
    problems: list[str] = []
    for entry in value:
        path = normalised_dataset_path(entry)
        if path is None or path in paths:
            problems.append(f"OME/ series entry {entry!r} is {'repeated' if path else 'not a path below the group'}, "
                            "left out")
            path = None
        paths.append(path)
    return paths, problems


def collection_of_group(hierarchy: Hierarchy, group: GroupMeta) -> Collection | None:
    """The collection a group declares; None when it declares none or is a plate (which takes precedence)."""
    number = layout_number(group.attributes)
    if number is None or plate_block(group.attributes, "plate") is not None:
        return None
    problems: list[str] = []
    if number != SUPPORTED_LAYOUT:
        return Collection(group.path, (), False, None, (f"{LAYOUT_KEY} {number!r} is not a layout zarrfs knows "
                                                         f"({SUPPORTED_LAYOUT}): its images are served one by one",))
    ome_group = group_at(hierarchy, join_key(group.path, OME_GROUP))
    paths, list_problems = listed_series(ome_group.attributes) if ome_group is not None else (None, [])
    problems += list_problems
    series: list[Series] = []
    if paths is not None:
        for index, path in enumerate(paths):
            if path is None:
                continue
            found = _series(hierarchy, group, path, index)
            if isinstance(found, str):
                problems.append(found)
            else:
                series.append(found)
    else:
        series, numbered_problems = _numbered_series(hierarchy, group)
        problems += numbered_problems
    metadata, metadata_problem = _metadata(hierarchy, group.path)
    if metadata_problem:
        problems.append(metadata_problem)
    elif metadata is not None:
        problems += _metadata_problems(metadata, len(paths) if paths is not None else len(series))
    return Collection(group.path, tuple(series), paths is not None, metadata, tuple(problems))


def collection_metadata(hierarchy: Hierarchy, group: GroupMeta) -> bytes | None:
    """`METADATA.ome.xml` when `group` is the `OME/` group of a group with a `bioformats2raw.layout` (a plate's
    too: the file is there whichever way the root is read); None otherwise or when it cannot be read."""
    parent, _, name = group.path.rpartition("/")
    above = group_at(hierarchy, parent) if name == OME_GROUP else None
    if above is None or layout_number(above.attributes) is None:
        return None
    return _metadata(hierarchy, parent)[0]


def metadata_key(collection_path: str) -> str:
    """The store key of a collection's original OME-XML."""
    return join_key(join_key(collection_path, OME_GROUP), METADATA_FILE)


def _series(hierarchy: Hierarchy, group: GroupMeta, path: str, index: int) -> Series | str:
    """The series at `path`, or why it cannot be one."""
    found = group_at(hierarchy, join_key(group.path, path))
    if found is None:
        return f"series {path!r} (Image {index} of the OME-XML) is missing: no group at /{join_key(group.path, path)}"
    images = images_of_group(found)
    if not images:
        return f"series {path!r} (Image {index} of the OME-XML) is not a multiscale image, left out"
    return Series(path, images[0], index)


def _numbered_series(hierarchy: Hierarchy, group: GroupMeta) -> tuple[list[Series], list[str]]:
    """Groups `0`, `1`, ... up to the first missing number, and numbered groups past that gap."""
    series: list[Series] = []
    problems: list[str] = []
    for index in range(MAX_SERIES):
        found = _series(hierarchy, group, str(index), index)
        if isinstance(found, str):
            if group_at(hierarchy, join_key(group.path, str(index))) is not None:
                problems.append(found)  # a group that is not an image ends the numbering too
            break
        series.append(found)
    taken = {s.path for s in series}
    past = sorted((child.name for child in hierarchy.children(group.path)
                   if child.name.isdigit() and child.name not in taken and isinstance(child.node, GroupMeta)), key=int)
    if past:
        problems.append(f"numbered groups {', '.join(past[:8])}{', ...' if len(past) > 8 else ''} come after a gap in "
                        f"the numbering (no OME/ series list) and are not in the collection")
    return series, problems


def _metadata_problems(metadata: bytes, series_count: int) -> list[str]:
    """What keeps the original OME-XML from describing the series: not XML, not OME, another Image count."""
    where = f"{OME_GROUP}/{METADATA_FILE}"
    if b"<!DOCTYPE" in metadata[:4096] or b"<!ENTITY" in metadata:
        return [f"{where} declares a DTD or entities, which zarrfs does not expand, not used"]
    try:
        root = ET.fromstring(metadata)
    except ET.ParseError as exc:
        return [f"{where} is not well-formed XML ({exc}), not used"]
    if root.tag != f"{{{OME_NAMESPACE}}}OME":
        return [f"{where} is not OME-XML of the 2016-06 schema (root {root.tag}), not used"]
    images = len(root.findall(f"{{{OME_NAMESPACE}}}Image"))
    if images != series_count:
        return [f"{where} describes {images} Images for {series_count} series: the series beyond its Images get "
                "their metadata from their multiscales" if images < series_count else
                f"{where} describes {images} Images for {series_count} series: the Images beyond the series are "
                "left out"]
    return []


def _metadata(hierarchy: Hierarchy, collection_path: str) -> tuple[bytes | None, str | None]:
    """The original OME-XML, bounded as metadata documents are, or why it cannot be read."""
    key = metadata_key(collection_path)
    limit = max_document_bytes()
    try:
        raw = hierarchy.store.get_range(key, RangeRequest(0, limit + 1))
    except ZarrfsError as exc:
        return None, f"{OME_GROUP}/{METADATA_FILE} cannot be read: {exc}"
    if raw is not None and len(raw) > limit:
        return None, (f"{OME_GROUP}/{METADATA_FILE} is over the {limit >> 20} MiB metadata limit "
                      "(ZARRFS_MAX_METADATA_SIZE), not used")
    # bytes: the document is kept in the `Collection` and becomes part of a layout's header; the disk cache
    # may answer with a bytearray.
    return (bytes(raw) if raw is not None else None), None

