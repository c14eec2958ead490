"""One `Semantics` per array, read once from every convention that applies.

Conventions are independent: a broken OME block does not cost an array its
georeference, nor the other way round. Whatever was ignored is reported in
ONE warning per array (per metadata generation), and the array is served
exactly as without conventions. What was ignored, and what a convention says
that the files cannot (`Semantics.unused`), is also in `zarrfs tree` and
`N.json`, not only in the log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..errors import ZarrfsError
from ..model.meta import ArrayMeta, GroupMeta
from .axes import named_axes
from .bands import band_names
from .cf import quantity
from .geo import ReadArray, georeference, nodata
from .geo_pyramid import GeoPyramid, geo_pyramid, layout_georeference
from .image import OmeImage, image_of_array, level_arrays, level_problems
from .labels import labelled_image
from .layout import PlateField, field_of_image
from .ome import label_colors, level_axes, ome_block, omero_channels
from .scene import SceneLink, placement, scene_of_image
from ..errors import ConventionError
from .semantics import Axis, Channel, GeoReference, LabelColor, Placement, Semantics

if TYPE_CHECKING:
    from ..hierarchy import Child, Hierarchy

log = logging.getLogger(__name__)


# Distinct meanings held for sharing (see `SemanticsIndex.of`); past it the set starts again.
MAX_DISTINCT_SEMANTICS = 4096
# Images whose place in a plate is remembered (`SemanticsIndex._field_of`); past it they start again.
MAX_IMAGES_PLACED = 4096


class SemanticsIndex:
    """`index.of(meta)`: the array's `Semantics`, computed on first use.

    Remembered per node object: a metadata refresh (`--metadata-ttl`) makes
    new `ArrayMeta` objects, so their meaning is read anew.
    """

    def __init__(self, hierarchy: Hierarchy, read_array: ReadArray) -> None:
        self.hierarchy = hierarchy
        self.read_array = read_array
        self._known: dict[str, tuple[ArrayMeta, Semantics]] = {}
        # Equal meanings held once: the arrays of a wide group mostly mean alike (`Semantics()` each).
        self._distinct: dict[Semantics, Semantics] = {}
        # A group's arrays by name, with the listing they were made from (a refresh makes a new one).
        self._arrays: dict[str, tuple[list[Child], dict[str, ArrayMeta]]] = {}
        # Where each image sits in a plate, by (metadata generation, image group): `_field_of`.
        self._fields: dict[tuple[int, str], PlateField | None] = {}
        # Images whose problems were reported (with the first of their arrays to be resolved).
        self._reported: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def of(self, meta: ArrayMeta) -> Semantics:
        with self._lock:
            known = self._known.get(meta.path)
        if known is not None and known[0] is meta:
            return known[1]
        semantics = self._resolve(meta)
        try:
            hash(semantics)
        except TypeError:  # a value that cannot be hashed: kept as it is
            hashable = False
        else:
            hashable = True
        with self._lock:
            if hashable:
                if len(self._distinct) >= MAX_DISTINCT_SEMANTICS:
                    self._distinct.clear()
                semantics = self._distinct.setdefault(semantics, semantics)
            self._known[meta.path] = (meta, semantics)
        return semantics

    def _resolve(self, meta: ArrayMeta) -> Semantics:
        parent_path, _, name = meta.path.rpartition("/")
        group_attributes: dict[str, Any] = {}
        siblings: dict[str, ArrayMeta] = {}
        if meta.path:  # the root array of a store has no group around it
            try:
                parent = self.hierarchy.node(parent_path)
                if isinstance(parent, GroupMeta):
                    group_attributes = parent.attributes
                    siblings = self._arrays_of(parent_path)
            except ZarrfsError as exc:  # e.g. its group's metadata became unreadable: serve the bytes anyway
                log.warning("%s: array /%s: its group could not be read for conventions (%s); served without "
                            "them", self.hierarchy.store.display_name, meta.path, exc)
                return Semantics()
        try:
            image = image_of_array(self.hierarchy, meta.path)
        except ZarrfsError as exc:
            log.warning("%s: array /%s: its image group could not be read for conventions (%s); served without "
                        "OME meaning", self.hierarchy.store.display_name, meta.path, exc)
            image = None
        problems: list[str] = []
        field = None
        label_of = None
        scene = None
        if image is not None:
            try:
                field = self._field_of(image[0])
                scene = scene_of_image(self.hierarchy, image[0])
                label_of, label_problems = labelled_image(self.hierarchy, image[0]) if image[0].is_label \
                    else (None, ())
                problems = self._first_report(image[0], label_problems)
            except ZarrfsError as exc:
                problems = [f"its image's levels or plate could not be read ({exc})"]

        def pyramid(geo: GeoReference | None) -> GeoPyramid | None:
            return geo_pyramid(self.hierarchy, meta, geo)

        def from_layout() -> tuple[GeoReference, tuple[str, ...]] | None:
            return layout_georeference(self.hierarchy, meta)

        return semantics_of(meta, name, group_attributes, siblings, self.read_array,
                            self.hierarchy.store.display_name, image, tuple(problems), field, label_of, scene,
                            pyramid, from_layout)

    def _field_of(self, image: OmeImage) -> PlateField | None:
        """`field_of_image`, found once per image and metadata generation: every level of an image sits
        where the image does, and finding it scans the plate's list of wells (a 1,536-well plate's
        levels would each scan it)."""
        key = (self.hierarchy.generation, image.group_path)
        with self._lock:
            if key in self._fields:
                return self._fields[key]
        field = field_of_image(self.hierarchy, image)
        with self._lock:
            if len(self._fields) >= MAX_IMAGES_PLACED:
                self._fields.clear()
            self._fields[key] = field
        return field

    def _arrays_of(self, group_path: str) -> dict[str, ArrayMeta]:
        """The arrays of a group by name, made once per listing of the group (not once per array: a
        group of 10,000 arrays would make it 10,000 times)."""
        children = self.hierarchy.children(group_path)
        with self._lock:
            made = self._arrays.get(group_path)
        if made is not None and made[0] is children:
            return made[1]
        arrays = {c.name: c.node for c in children if isinstance(c.node, ArrayMeta)}
        with self._lock:
            self._arrays[group_path] = (children, arrays)
        return arrays

    def _first_report(self, image: OmeImage, label_problems: tuple[str, ...]) -> list[str]:
        """What is wrong with the image's levels (and a label image's `source`), the first time one of its
        arrays asks (later ones: nothing).

        A plate's wells and fields that name nothing are `conventions.plate`'s to log.
        """
        with self._lock:
            first = (image.group_path, image.index) not in self._reported
            self._reported.add((image.group_path, image.index))
        if not first:
            return []
        return [f"OME-Zarr image /{image.group_path}: {p}"
                for p in [*level_problems(image, level_arrays(self.hierarchy, image)), *label_problems]]


def semantics_of(meta: ArrayMeta, name: str, group_attributes: dict[str, Any], siblings: dict[str, ArrayMeta],
                 read_array: ReadArray, store_name: str = "",
                 image: tuple[OmeImage, int] | None = None, problems: tuple[str, ...] = (),
                 field: PlateField | None = None, label_of: str | None = None,
                 scene: SceneLink | None = None,
                 pyramid: Callable[[GeoReference | None], GeoPyramid | None] | None = None,
                 from_layout: Callable[[], tuple[GeoReference, tuple[str, ...]] | None] | None = None) -> Semantics:
    """The meaning of array `meta` (called `name` in a group with `group_attributes` and array `siblings`).

    `image` is the OME-Zarr image listing the array as a level, and which
    level (`conventions.image.image_of_array`): it may be any group above
    the array, not only its parent. `problems` (its image's levels or plate
    that name nothing) join the array's one warning; `field` is where the
    image sits in a plate; `label_of` the image a label image belongs to;
    `scene` the OME-Zarr scene transformation that places the image;
    `pyramid` finds the overviews of a map in a GeoZarr multiscales layout,
    `from_layout` the georeference its layout entry states when the array's
    own conventions state none.
    """
    ignored: list[str] = list(problems)
    unused: list[str] = []
    colors: tuple[LabelColor, ...] = ()
    sources: list[str] = []
    placed: Placement | None = None
    axes: tuple[Axis, ...] | None = None
    channels: tuple[Channel, ...] = ()
    block = _ome_level(image, group_attributes, name)
    if block is not None:
        version, ome, dataset_path, index = block
        try:
            found = level_axes(ome, dataset_path, meta.ndim, version, index)
            if found is not None:
                axes = _checked_against_names(found.axes, meta.dimension_names)
                sources.append(found.source + (" (label image)" if "image-label" in ome else ""))
                unused += found.unused
                if scene is not None and image is not None:
                    placed, why_not = placement(scene, axes, found.system, image[0].multiscale)
                    unused += [why_not] if why_not else []
                    sources += [f"OME-Zarr scene {placed.scene}"] if placed else []
        except ConventionError as exc:
            ignored.append(f"OME-Zarr multiscales ({exc})")
        if axes is not None:
            try:
                channels = omero_channels(ome, axes, meta.shape)
                if channels:
                    sources.append("OME-Zarr omero channels")
            except ConventionError as exc:
                ignored.append(f"OME-Zarr omero ({exc})")
        if "image-label" in ome:
            try:
                colors = label_colors(ome)
            except ConventionError as exc:
                ignored.append(f"OME-Zarr image-label ({exc})")
    if field is not None:
        sources.append(field.describe())
    if axes is None:
        axes = named_axes(meta.dimension_names)
        if axes is not None:
            sources.append("dimension names")
    geo = None
    try:
        geo, how = georeference(meta, siblings, group_attributes, read_array)
        stated = from_layout() if geo is None and from_layout is not None and image is None else None
        if stated is not None:
            geo, how = stated
        sources += how
    except ConventionError as exc:
        ignored.append(f"georeferencing ({exc})")
    except (ZarrfsError, OSError) as exc:  # a coordinate array that cannot be read (missing chunk, bad codec)
        ignored.append(f"georeferencing (a coordinate array could not be read: {exc})")
    overviews: tuple[str, ...] = ()
    levels = pyramid(geo) if pyramid is not None and image is None else None
    if levels is not None:
        overviews = levels.overviews
        ignored += levels.notes
        if levels.level:
            sources.append(f"GeoZarr multiscales /{levels.layout_path} level {levels.level}"
                           f" ({len(overviews)} overview{'' if len(overviews) == 1 else 's'})")
    missing = None
    try:
        missing, source = nodata(meta)
        if source:
            sources.append(source)
    except ConventionError as exc:
        ignored.append(f"nodata ({exc})")
    names: tuple[str, ...] = ()
    try:
        names, source = band_names(meta, siblings, read_array)
        if source:
            sources.append(source)
    except ConventionError as exc:
        ignored.append(f"band names ({exc})")
    except (ZarrfsError, OSError) as exc:  # the coordinate array cannot be read
        ignored.append(f"band names (a coordinate array could not be read: {exc})")
    values, broken = quantity(meta)
    ignored += [f"CF {problem}" for problem in broken]
    if values is not None:
        sources.append("CF " + ", ".join(name for name, value in asdict(values).items() if value is not None))
    if ignored:
        log.warning("%s: array /%s: ignored %s; the array is served without it", store_name, meta.path,
                    "; ".join(ignored))
    return Semantics(axes, channels, geo, missing, tuple(sources), values, label_colors=colors, label_of=label_of,
                     band_names=names, placement=placed, unused=tuple(unused + ignored), overviews=overviews)


def _ome_level(image: tuple[OmeImage, int] | None, group_attributes: dict[str, Any],
               name: str) -> tuple[str | None, dict[str, Any], str, int | None] | None:
    """(version, OME block, dataset path, multiscale index) to read the array's level axes from.

    The image listing the array when there is one; else the parent group's
    OME block with the array's own name, so that broken `multiscales` in the
    parent are still reported (and the array served without them).
    """
    if image is not None:
        ome_image, level = image
        return ome_image.version, ome_image.block, ome_image.dataset_paths[level], ome_image.index
    block = ome_block(group_attributes)
    return None if block is None else (block[0], block[1], name, None)


def _checked_against_names(axes: tuple[Axis, ...], names: tuple[str | None, ...] | None) -> tuple[Axis, ...]:
    """OME 0.5 level arrays repeat the axis names as `dimension_names`: they must agree."""
    if names is not None and any(n is not None and n != axis.name for n, axis in zip(names, axes, strict=True)):
        raise ConventionError(f"axes {[a.name for a in axes]} contradict the array's dimension_names {list(names)}")
    return axes
