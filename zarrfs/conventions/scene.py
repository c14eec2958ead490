"""OME-Zarr 0.6 scenes: a group placing several images in one coordinate system (`ome.scene`).

A scene group's `ome.scene` lists `coordinateSystems` (e.g. `world`) and
`coordinateTransformations` whose `input` is an image (`{"path": "tile_0",
"name": "physical"}`: the image group below the scene, and its coordinate
system) and whose `output` is a scene system. An image's place is that
transformation applied to its level axes: axis-aligned transformations
(translation, scale, their sequences) give each axis its step and the
coordinate of index 0 in the scene's system (`Placement`); anything else is
named as not applied. Paths are relative to the scene group. The images
keep their own calibration; the placement is said beside it (OME-XML plane
positions, `N.json`, `zarrfs tree`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .image import OmeImage, groups_above
from .ome import normalised_dataset_path
from ..errors import ConventionError
from .semantics import Axis, Placement
from .transforms import AxisAligned, NotAxisAligned, axis_aligned, describe, endpoint_name, endpoint_path, identity

if TYPE_CHECKING:
    from ..hierarchy import Hierarchy
    from ..model.meta import GroupMeta

# How far above an image its scene group may be.
MAX_SCENE_DEPTH = 8


@dataclass(frozen=True)
class SceneLink:
    """One transformation of a scene that takes an image into a scene system."""

    scene: str  # the scene group's path
    image: str  # the image group's path, relative to the scene group
    input_system: str | None  # the image's coordinate system the transformation starts from (None: its default)
    system: str  # the scene system it outputs to
    system_axes: tuple[Any, ...]  # that system's `axes` as written
    transform: dict[str, Any]


def scene_block(group: GroupMeta) -> dict[str, Any] | None:
    """The `scene` object of a group's OME metadata, or None."""
    ome = group.attributes.get("ome")
    scene = ome.get("scene") if isinstance(ome, dict) else None
    return scene if isinstance(scene, dict) else None


def scene_links(group: GroupMeta) -> tuple[list[SceneLink], list[str]]:
    """The image placements a scene group declares, and what in it cannot place an image (with why)."""
    scene = scene_block(group)
    if scene is None:
        return [], []
    systems = scene.get("coordinateSystems")
    named = {s["name"]: s for s in systems if isinstance(s, dict) and isinstance(s.get("name"), str)} \
        if isinstance(systems, list) else {}
    transforms = scene.get("coordinateTransformations")
    if not isinstance(transforms, list):
        return [], [f"OME-Zarr scene /{group.path}: 'coordinateTransformations' is not a list"]
    links, problems = [], []
    for transform in transforms:
        if not isinstance(transform, dict):
            problems.append(f"OME-Zarr scene /{group.path}: transformation {transform!r} is not an object")
            continue
        source, target = transform.get("input"), endpoint_name(transform.get("output"))
        image = normalised_dataset_path(endpoint_path(source))
        if image is None or target is None or target not in named:
            problems.append(f"OME-Zarr scene /{group.path}: {describe(transform)} does not lead from an image to "
                            f"one of the scene's coordinate systems {list(named)}; not applied")
            continue
        axes = named[target].get("axes")
        links.append(SceneLink(group.path, image, source.get("name") if isinstance(source, dict) else None,
                               target, tuple(axes) if isinstance(axes, list) else (), transform))
    return links, problems


def scene_of_image(hierarchy: Hierarchy, image: OmeImage) -> SceneLink | None:
    """The scene transformation that places `image`: the first one naming it in the nearest scene group above it
    that names it."""
    for group, relative in groups_above(hierarchy, image.group_path, MAX_SCENE_DEPTH):
        for link in scene_links(group)[0]:
            if link.image == relative:
                return link
    return None


def placement(link: SceneLink, axes: tuple[Axis, ...], level_system: str | None,
              multiscale: dict[str, Any]) -> tuple[Placement | None, str | None]:
    """The image's axes in the scene system (its level axes, then the scene's transformation), or None and why not.

    When the scene starts from another of the image's systems than its levels'
    one, the image's own transformation to that system comes first (it must be
    axis-aligned too).
    """
    where = f"OME-Zarr scene /{link.scene}: {describe(link.transform)}"
    ndim = len(axes)
    if len(link.system_axes) != ndim or not all(isinstance(a, dict) and isinstance(a.get("name"), str)
                                                 for a in link.system_axes):
        return None, (f"{where} is not applied: the scene system {link.system!r} has {len(link.system_axes)} "
                      f"axes, the image {ndim}")
    try:
        before = identity(ndim)
        if link.input_system is not None and link.input_system != level_system:
            before = _to_system(multiscale, level_system, link.input_system, ndim)
        total = before.then(axis_aligned(link.transform, ndim))
    except (NotAxisAligned, ConventionError) as exc:
        return None, f"{where} is not applied: {exc}"
    placed = []
    for axis, scene_axis, scale, shift in zip(axes, link.system_axes, total.scale, total.translation, strict=True):
        step = 1.0 if axis.scale is None else axis.scale
        start = 0.0 if axis.origin is None else axis.origin
        unit = scene_axis.get("unit")
        kind = scene_axis.get("type")
        placed.append(Axis(scene_axis["name"], kind if kind in ("time", "channel", "space") else axis.kind,
                           unit if isinstance(unit, str) else axis.unit, scale * step, scale * start + shift))
    return Placement("/" + link.scene, link.system, tuple(placed)), None


def _to_system(multiscale: dict[str, Any], source: str | None, target: str, ndim: int) -> AxisAligned:
    """The image's own axis-aligned transformation from its levels' system to `target`."""
    for transform in multiscale.get("coordinateTransformations") or ():
        if isinstance(transform, dict) and endpoint_name(transform.get("output")) == target and (
                endpoint_name(transform.get("input")) in (None, source)):
            return axis_aligned(transform, ndim)
    raise ConventionError(f"the image has no transformation from {source!r} to {target!r}")


def scene_layout(group: GroupMeta) -> list[str]:
    """`zarrfs tree` lines of a scene group: its systems, the images it places, what it cannot apply."""
    scene = scene_block(group)
    if scene is None:
        return []
    version = group.attributes["ome"].get("version")
    version = f" {version}" if isinstance(version, str) else ""
    links, problems = scene_links(group)
    systems = scene.get("coordinateSystems")
    names = [s.get("name") for s in systems if isinstance(s, dict)] if isinstance(systems, list) else []
    lines = [f"OME-Zarr{version} scene: systems {', '.join(repr(n) for n in names) or 'none'}, "
             f"{len(links)} image transformation{'s' if len(links) != 1 else ''}"]
    lines += [f"  {link.image} -> {link.system} by {describe(link.transform)}" for link in links]
    return lines + [f"not applied: {problem}" for problem in problems]
