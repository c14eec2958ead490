"""OME-Zarr (OME-NGFF) 0.1–0.6: axes, per-level scale and translation, `omero` channels, label colours.

A level array is described by its image group (any group above it whose
`multiscales` list it: `conventions.image`): 0.1–0.4 keep `multiscales`
(and `omero`, `image-label`) in the group's attributes, 0.5 and 0.6
under `attributes.ome`. 0.6 (RFC-5) moves the axes into named
`coordinateSystems`: a level's axes are those of the system its transformation
outputs to (the last one listed, "the default", when it names none), and its
transformation is any axis-aligned composition (`conventions.transforms`).
What a 0.6 image says that the files cannot (a rotation, a displacement
field, other coordinate systems) comes back as notes to report, not as an
error. Every function here raises `ConventionError` for metadata that is
broken or contradicts itself; the caller then serves the array without that
meaning.
"""

from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from .axes import guess_kind
from .geo_layout import is_layout_object
from ..errors import ConventionError
from .semantics import Axis, Channel, LabelColor
from .transforms import NotAxisAligned, axis_aligned, describe, endpoint_name, numbers

# OME 0.4/0.5 list these UDUNITS-2 names; a unit of one kind on an axis of the
# other (a "second" on a space axis) is a contradiction, not a typo we can fix.
SPACE_UNITS = frozenset("""angstrom attometer centimeter decimeter exameter femtometer foot gigameter hectometer
    inch kilometer megameter meter micrometer mile millimeter nanometer parsec petameter picometer terameter
    yard yoctometer yottameter zeptometer zettameter""".split())
TIME_UNITS = frozenset("""attosecond centisecond day decisecond exasecond femtosecond gigasecond hectosecond hour
    kilosecond megasecond microsecond millisecond minute nanosecond petasecond picosecond second terasecond
    yoctosecond yottasecond zeptosecond zettasecond""".split())

# 0.1 and 0.2 have no `axes`: images are always 5-D t, c, z, y, x.
_IMPLICIT_AXES = ("t", "c", "z", "y", "x")
# 0.6 and its release candidates and dev tags ("0.6rc0", "0.6.dev4"); the 0.9.dev tags towards 1.0 keep its
# coordinate systems (and add RFC-4 orientation).
_COORDINATE_SYSTEM_VERSION = re.compile(r"0\.([6-9])(\.\d+)?(rc\d+|\.dev\d+)?")
# RFC-4 anatomical orientation: what an axis's values increase towards, as "<from>-to-<to>".
ANATOMICAL_DIRECTIONS = frozenset("""left-to-right right-to-left anterior-to-posterior posterior-to-anterior
    inferior-to-superior superior-to-inferior dorsal-to-ventral ventral-to-dorsal dorsal-to-palmar palmar-to-dorsal
    dorsal-to-plantar plantar-to-dorsal rostral-to-caudal caudal-to-rostral cranial-to-caudal caudal-to-cranial
    proximal-to-distal distal-to-proximal""".split())


def has_coordinate_systems(version: str | None) -> bool:
    """True for the versions whose axes live in `coordinateSystems` (0.6 on)."""
    return version is not None and _COORDINATE_SYSTEM_VERSION.fullmatch(version) is not None


def ome_block(attributes: dict[str, Any]) -> tuple[str | None, dict[str, Any]] | None:
    """(version, the object holding `multiscales`/`omero`) of a group, or None if it is not OME-Zarr.

    A `multiscales` object (not a list) is the zarr-conventions layout of GeoZarr (`conventions.geo_layout`).
    """
    ome = attributes.get("ome")
    if isinstance(ome, dict) and "multiscales" in ome:  # 0.5
        version = ome.get("version")
        return (version if isinstance(version, str) else None), ome
    if "multiscales" in attributes and not is_layout_object(attributes["multiscales"]):  # 0.1-0.4
        return None, attributes
    return None


def normalised_dataset_path(value: Any) -> str | None:
    """A dataset path as a relative path without `.` parts; None when it is not one (absolute, `..`).

    Dataset paths are relative to the image group and may reach into
    sub-groups (ngff-zarr writes `scale0/zyx`); plate well paths (`A/1`)
    and well field paths (`0`) follow the same rule.
    """
    if not isinstance(value, str) or not value or value.startswith("/"):
        return None
    path = posixpath.normpath(value)
    if path in (".", "..") or path.startswith("../"):
        return None
    return path


@dataclass(frozen=True)
class LevelAxes:
    """A level's calibrated axes, where they came from, and what the image says that they cannot."""

    axes: tuple[Axis, ...]
    source: str  # "OME-Zarr 0.6 multiscales level 0 (system 'physical')"
    unused: tuple[str, ...] = ()
    system: str | None = None  # 0.6: the name of the coordinate system the axes belong to


def level_axes(block: dict[str, Any], dataset_path: str, ndim: int, block_version: str | None,
               multiscale_index: int | None = None) -> LevelAxes | None:
    """The calibrated axes of the level `dataset_path` (normalised, relative to the image group); only
    `multiscales[multiscale_index]` is searched when given.

    None when no multiscale of the group lists this dataset (an array that is
    not one of the image's levels, e.g. beside it), or when `multiscales` is
    not a list at all (GeoZarr's `multiscales` object is another convention's).
    """
    multiscales = block.get("multiscales")
    if not isinstance(multiscales, list):
        return None
    for index, multiscale in enumerate(multiscales):
        if multiscale_index is not None and index != multiscale_index:
            continue
        if not isinstance(multiscale, dict):
            raise ConventionError(f"multiscales[{index}] must be an object")
        datasets = multiscale.get("datasets")
        if not isinstance(datasets, list) or not all(isinstance(d, dict) for d in datasets):
            raise ConventionError(f"multiscales[{index}].datasets must be a list of objects")
        for level, dataset in enumerate(datasets):
            if normalised_dataset_path(dataset.get("path")) != dataset_path:
                continue
            version = block_version or multiscale.get("version")
            version = version if isinstance(version, str) else "?"
            source = f"OME-Zarr {version} multiscales level {level}"
            # A 0.6 version with 0.5's `axes` (a writer between the two) is read the 0.5 way.
            if "coordinateSystems" in multiscale or (has_coordinate_systems(version) and "axes" not in multiscale):
                return _coordinate_system_level(multiscale, dataset, ndim, version, source)
            names_kinds_units = _axes(multiscale.get("axes"), version, ndim)
            scale, origin = _transform(dataset.get("coordinateTransformations"),
                                       multiscale.get("coordinateTransformations"), ndim)
            axes = tuple(Axis(name, kind, unit, None if scale is None else scale[i],
                              None if origin is None else origin[i], orientation)
                         for i, (name, kind, unit, orientation) in enumerate(names_kinds_units))
            return LevelAxes(axes, source)
    return None


def _coordinate_system_level(multiscale: dict[str, Any], dataset: dict[str, Any], ndim: int, version: str,
                             source: str) -> LevelAxes:
    """A 0.6 level: the axes of the system its transformation outputs to, calibrated by that transformation.

    The multiscale's own `coordinateTransformations` lead to other systems
    (the spec's "additional transformations"); the files stay in the levels'
    system and name the others as not applied.
    """
    systems = multiscale.get("coordinateSystems")
    if not isinstance(systems, list) or not systems or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) for s in systems):
        raise ConventionError(f"no 'coordinateSystems' list of named systems (version {version})")
    transforms = dataset.get("coordinateTransformations")
    if not isinstance(transforms, list) or not transforms:
        raise ConventionError(f"{source}: 'coordinateTransformations' must be a non-empty list")
    target = endpoint_name(transforms[-1].get("output")) if isinstance(transforms[-1], dict) else None
    named = {s["name"]: s for s in systems}
    if target is not None and target not in named:
        raise ConventionError(f"{source}: its transformation outputs to {target!r}, which is not one of the "
                              f"coordinateSystems {list(named)}")
    system = named[target] if target is not None else systems[-1]
    names_kinds_units = _axes(system.get("axes"), version, ndim)
    unused = []
    try:
        aligned = axis_aligned(transforms, ndim)
        scale: list[float] | None = list(aligned.scale)
        origin: list[float] | None = list(aligned.translation)
        if any(s <= 0 for s in aligned.scale):
            raise ConventionError(f"{source}: scale {list(aligned.scale)} has a value that is not positive")
    except NotAxisAligned as exc:
        scale = origin = None
        unused.append(f"OME-Zarr level transformation {exc}; the level is served without a physical scale")
    others = multiscale.get("coordinateTransformations") or []
    if not isinstance(others, list):
        raise ConventionError(f"multiscale 'coordinateTransformations' must be a list, got {others!r}")
    for other in others:
        target = endpoint_name(other.get("output")) if isinstance(other, dict) else None
        unused.append(f"OME-Zarr coordinate system {target!r} ({describe(other)}) is not applied: the files are in "
                      f"{system['name']!r}, the levels' own system")
    axes = tuple(Axis(name, kind, unit, None if scale is None else scale[i], None if origin is None else origin[i],
                      orientation)
                 for i, (name, kind, unit, orientation) in enumerate(names_kinds_units))
    return LevelAxes(axes, f"{source} (system {system['name']!r})", tuple(unused), system["name"])


def _axes(value: Any, version: str, ndim: int) -> list[tuple[str, str, str | None, str | None]]:
    """(name, kind, unit, RFC-4 anatomical orientation) per dimension."""
    if value is None:
        if version in ("0.1", "0.2") and ndim == len(_IMPLICIT_AXES):
            return [(name, guess_kind(name), None, None) for name in _IMPLICIT_AXES]
        raise ConventionError(f"no 'axes' (version {version}) for a {ndim}-D array")
    if not isinstance(value, list):
        raise ConventionError(f"'axes' must be a list, got {type(value).__name__}")
    if len(value) != ndim:
        raise ConventionError(f"{len(value)} axes for a {ndim}-D array")
    out: list[tuple[str, str, str | None, str | None]] = []
    for axis in value:
        if isinstance(axis, str):  # 0.3: names only
            out.append((axis, guess_kind(axis), None, None))
            continue
        if not isinstance(axis, dict) or not isinstance(axis.get("name"), str):
            raise ConventionError(f"axis {axis!r} must be an object with a string 'name'")
        name, kind, unit = axis["name"], axis.get("type"), axis.get("unit")
        if kind is not None and not isinstance(kind, str):
            raise ConventionError(f"axis {name!r}: 'type' must be a string, got {kind!r}")
        if unit is not None and not isinstance(unit, str):
            raise ConventionError(f"axis {name!r}: 'unit' must be a string, got {unit!r}")
        kind = kind if kind in ("time", "channel", "space") else (guess_kind(name) if kind is None else "other")
        if (kind == "space" and unit in TIME_UNITS) or (kind == "time" and unit in SPACE_UNITS):
            raise ConventionError(f"axis {name!r} of type {kind} has the unit {unit!r}")
        out.append((name, kind, unit, _orientation(name, axis.get("orientation"))))
    names = [name for name, _, _, _ in out]
    if len(set(names)) != len(names):
        raise ConventionError(f"axis names {names} repeat")
    return out


def _orientation(name: str, value: Any) -> str | None:
    """An axis's RFC-4 anatomical orientation ("left-to-right"); None when it has none."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "anatomical":
        raise ConventionError(f"axis {name!r}: 'orientation' {value!r} is not an anatomical orientation")
    direction = value.get("value")
    if direction not in ANATOMICAL_DIRECTIONS:
        raise ConventionError(f"axis {name!r}: anatomical orientation {direction!r} is not one RFC-4 defines")
    return direction


def _transform(dataset_value: Any, multiscale_value: Any,
               ndim: int) -> tuple[list[float] | None, list[float] | None]:
    """Scale and origin (physical coordinate of index 0) per dimension.

    The multiscale-level transform applies after the dataset's:
    x = s_ms·(s_ds·i + t_ds) + t_ms, so scale = s_ms·s_ds, origin = s_ms·t_ds + t_ms.
    """
    scale, translation = _scale_translation(dataset_value, ndim, "dataset")
    outer_scale, outer_translation = _scale_translation(multiscale_value, ndim, "multiscale")
    if scale is None:
        if outer_scale is not None or outer_translation is not None:
            raise ConventionError("a multiscale-level coordinateTransformations without per-dataset ones")
        return None, None
    translation = translation or [0.0] * ndim
    if outer_scale is not None:
        scale = [a * b for a, b in zip(outer_scale, scale, strict=True)]
        translation = [a * b for a, b in zip(outer_scale, translation, strict=True)]
    if outer_translation is not None:
        translation = [a + b for a, b in zip(translation, outer_translation, strict=True)]
    return scale, translation


def _scale_translation(value: Any, ndim: int, where: str) -> tuple[list[float] | None, list[float] | None]:
    """One `scale` then at most one `translation` (0.4/0.5); None, None when absent (0.1-0.3)."""
    if value is None:
        return None, None
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConventionError(f"{where} coordinateTransformations must be a list of objects")
    kinds = [t.get("type") for t in value]
    if kinds not in (["scale"], ["scale", "translation"]):
        raise ConventionError(f"{where} coordinateTransformations must be one scale, then at most one "
                              f"translation; got {kinds}")
    scale = numbers(value[0].get("scale"), ndim, f"{where} scale")
    if any(s <= 0 for s in scale):
        raise ConventionError(f"{where} scale {scale} has a value that is not positive")
    translation = numbers(value[1].get("translation"), ndim, f"{where} translation") if len(value) == 2 else None
    return scale, translation


def omero_channels(block: dict[str, Any], axes: tuple[Axis, ...], shape: tuple[int, ...]) -> tuple[Channel, ...]:
    """`omero.channels`, one per index of the channel axis; () when there is no `omero` block."""
    omero = block.get("omero")
    if omero is None:
        return ()
    channels = omero.get("channels") if isinstance(omero, dict) else None
    if not isinstance(channels, list) or not all(isinstance(c, dict) for c in channels):
        raise ConventionError("omero.channels must be a list of objects")
    positions = [i for i, axis in enumerate(axes) if axis.kind == "channel"]
    count = shape[positions[0]] if positions else 1
    if len(channels) != count:
        raise ConventionError(f"omero lists {len(channels)} channels, the channel axis has {count}")
    return tuple(_channel(c) for c in channels)


def _channel(doc: dict[str, Any]) -> Channel:
    label, color, window = doc.get("label"), doc.get("color"), doc.get("window")
    if label is not None and not isinstance(label, str):
        raise ConventionError(f"omero channel label {label!r} is not a string")
    if color is not None:
        if not isinstance(color, str) or len(color) != 6 or any(c not in "0123456789abcdefABCDEF" for c in color):
            raise ConventionError(f"omero channel color {color!r} is not RRGGBB")
        color = color.upper()
    bounds = None
    if window is not None:
        start, end = (window.get("start"), window.get("end")) if isinstance(window, dict) else (None, None)
        numbers = [float(v) for v in (start, end) if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numbers) != 2:
            raise ConventionError(f"omero channel window {window!r} needs numbers 'start' and 'end'")
        bounds = (numbers[0], numbers[1])
    return Channel(label, color, bounds)


def label_colors(block: dict[str, Any]) -> tuple[LabelColor, ...]:
    """`image-label.colors` of a label image: the RGBA of each label value; () when it lists none."""
    image_label = block.get("image-label")
    if not isinstance(image_label, dict):
        raise ConventionError(f"'image-label' must be an object, got {type(image_label).__name__}")
    colors = image_label.get("colors")
    if colors is None:
        return ()
    if not isinstance(colors, list) or not all(isinstance(c, dict) for c in colors):
        raise ConventionError("image-label.colors must be a list of objects")
    out = []
    for color in colors:
        value, rgba = color.get("label-value"), color.get("rgba")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise ConventionError(f"image-label colour {color!r}: 'label-value' must be a number")
        if not (isinstance(rgba, list) and len(rgba) == 4
                and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in rgba)):
            raise ConventionError(f"image-label colour {color!r}: 'rgba' must be four integers 0-255")
        out.append(LabelColor(value, tuple(rgba)))
    values = [c.value for c in out]
    if len(set(values)) != len(values):
        raise ConventionError(f"image-label colours repeat label values {values}")
    return tuple(out)
