"""`zarrfs tree`: the hierarchy as text or JSON, with the reason for every node that cannot be served."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from ..conventions.layout import group_layout
from ..conventions.semantics import Axis, Quantity, Semantics
from ..formats.netcdf import netcdf_plan
from ..hierarchy import Hierarchy
from ..model.meta import ArrayMeta, GroupMeta
from ..files.tree import source_name
from ..files.netcdf_datasets import dataset_arrays
from ..suffixes import NC_SUFFIX

# The meaning of an array (`SemanticsIndex.of`); without one, none is shown.
SemanticsOf = Callable[[ArrayMeta], Semantics]


def human_size(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _codec_names(codecs: list[dict[str, Any]]) -> str:
    names = []
    for codec in codecs:
        name = codec.get("name") or codec.get("id") or "?"
        inner = codec.get("configuration", {}).get("codecs") if name == "sharding_indexed" else None
        names.append(f"{name}[{_codec_names(inner)}]" if inner else str(name))
    return ",".join(names) or "none"


def _array_line(meta: ArrayMeta) -> str:
    info = meta.describe()
    parts = [f"shape={tuple(meta.shape)}", f"dtype=vlen-{meta.vlen}" if meta.vlen else f"dtype={info['dtype']}"]
    grid = info["chunk_grid"]
    # A rectilinear grid shows its edges per axis, as run-length [length, count] pairs: the
    # chunks', or the shards' when sharded (inner chunks are regular).
    edges = "rectilinear" + json.dumps(grid["chunk_shapes"], separators=(",", ":")) \
        if grid["name"] == "rectilinear" else None
    parts.append(f"chunks={tuple(info['chunk_shape'])}" if info["chunk_shape"] is not None else f"chunks={edges}")
    if info["shard_shape"]:
        parts.append(f"shards={tuple(info['shard_shape'])}")
    elif edges and info["chunk_shape"] is not None:
        parts.append(f"shards={edges}")
    parts += [f"codecs={_codec_names(info['codecs'])}", f"fill={info['fill_value']!r}",
              # a vlen array's size is known only once its width is (engine/vlen_widths.py): tree reads no chunks
              "size=variable (served as .npy and .json)" if meta.vlen else f"size={human_size(meta.nbytes)}"]
    if meta.dimension_names:
        parts.append("dims=" + ",".join(str(n) for n in meta.dimension_names))
    return "  ".join(parts)


def _number(value: float) -> str:
    return f"{value:.12g}"


def semantics_lines(semantics: Semantics) -> Iterator[str]:
    """What the conventions said, one short line per kind of meaning (nothing for plain arrays)."""
    if semantics.axes is not None:
        yield "axes " + _axes_text(semantics.axes)
    if semantics.placement is not None:
        placed = semantics.placement
        yield f"in scene {placed.scene} system {placed.system!r}: {_axes_text(placed.axes)}"
    if semantics.channels:
        yield "channels " + ", ".join(f"{c.label or '?'}{' #' + c.color if c.color else ''}"
                                      for c in semantics.channels)
    if semantics.geo is not None:
        geo = semantics.geo
        crs = f"EPSG:{geo.epsg}" if geo.epsg is not None else ("WKT CRS" if geo.crs_wkt else "no CRS")
        yield f"geo {crs}  geotransform=({', '.join(_number(v) for v in geo.geotransform)})"
    if semantics.nodata is not None:
        yield f"nodata {_number(semantics.nodata)}"
    if semantics.quantity is not None:
        yield "values " + _quantity_text(semantics.quantity)
    if semantics.band_names:
        yield "bands " + ", ".join(semantics.band_names)
    if semantics.label_of is not None:
        yield f"labels of image {semantics.label_of}"
    for unused in semantics.unused:
        yield f"not used: {unused}"
    if semantics.overviews:
        yield "overviews " + ", ".join("/" + path for path in semantics.overviews)
    if semantics.sources:
        yield "from " + "; ".join(semantics.sources)


def _axes_text(axes: tuple[Axis, ...]) -> str:
    """'z:space 0.5 micrometer/px @2, y:space ...': each axis's kind, step, origin, anatomical orientation."""
    parts = []
    for axis in axes:
        text = f"{axis.name or '?'}:{axis.kind}"
        if axis.scale is not None:
            text += f" {_number(axis.scale)}{' ' + axis.unit if axis.unit else ''}/px"
        elif axis.unit:
            text += f" [{axis.unit}]"
        if axis.origin:
            text += f" @{_number(axis.origin)}"
        if axis.orientation:
            text += f" {axis.orientation}"
        parts.append(text)
    return ", ".join(parts)


def _quantity_text(quantity: Quantity) -> str:
    """'stored*0.01 + 273.15 K "2 metre temperature"': the CF formula, unit and long name."""
    parts = []
    if quantity.packed:
        scale = 1.0 if quantity.scale_factor is None else quantity.scale_factor
        parts.append(f"stored*{_number(scale)} + {_number(quantity.add_offset or 0.0)}")
    if quantity.units:
        parts.append(quantity.units)
    if quantity.long_name:
        parts.append(json.dumps(quantity.long_name, ensure_ascii=False))
    return " ".join(parts)


def tree_lines(hierarchy: Hierarchy, semantics_of: SemanticsOf | None = None) -> Iterator[str]:
    root = hierarchy.root()
    label = f"zarr {hierarchy.zarr_format}"
    if isinstance(root, ArrayMeta):
        yield f"/  array ({label})  {_array_line(root)}"
        yield from _meaning_lines(root, semantics_of, "    ")
    else:
        yield f"/  group ({label})"
        yield from _layout_lines(hierarchy, root, "    ")
        yield from _group_lines(hierarchy, "", "  ", semantics_of)
    # A remote reference set's targets the trust rule refuses: their chunks would be EIO.
    for refusal in hierarchy.store.refusals():
        yield refusal.describe()


def _layout_lines(hierarchy: Hierarchy, group: GroupMeta, indent: str) -> Iterator[str]:
    """The OME-Zarr layout of a group (image, plate, well, labels), one line each; its NetCDF file."""
    layout = group_layout(hierarchy, group)
    for line in layout.split("; ") if layout else ():
        yield f"{indent}{line}"
    yield from (f"{indent}{line}" for line in netcdf_lines(hierarchy, group))


def netcdf_lines(hierarchy: Hierarchy, group: GroupMeta) -> list[str]:
    """A dataset group's NetCDF file: how many variables, and each array it leaves out, with why."""
    arrays = dataset_arrays(hierarchy, group)
    if arrays is None:
        return []
    plan = netcdf_plan(group, arrays)
    name = (group.path.rpartition("/")[2] or source_name(hierarchy.store.display_name)) + NC_SUFFIX
    lines = [f"NetCDF dataset: {name}: {len(plan.layout.variables)} variables"]
    lines += [f"{name}: /{path} left out: {reason}" for path, reason in plan.left_out]
    return lines


def _meaning_lines(meta: ArrayMeta, semantics_of: SemanticsOf | None, indent: str) -> Iterator[str]:
    if semantics_of is not None:
        for line in semantics_lines(semantics_of(meta)):
            yield f"{indent}{line}"


def _group_lines(hierarchy: Hierarchy, path: str, indent: str, semantics_of: SemanticsOf | None) -> Iterator[str]:
    for child in hierarchy.children(path):
        if child.error is not None:
            yield f"{indent}{child.name}  UNAVAILABLE: {child.error}"
        elif isinstance(child.node, GroupMeta):
            yield f"{indent}{child.name}/  group"
            yield from _layout_lines(hierarchy, child.node, indent + "    ")
            yield from _group_lines(hierarchy, child.node.path, indent + "  ", semantics_of)
        elif isinstance(child.node, ArrayMeta):
            yield f"{indent}{child.name}  array  {_array_line(child.node)}"
            yield from _meaning_lines(child.node, semantics_of, indent + "    ")


def tree_json(hierarchy: Hierarchy, semantics_of: SemanticsOf | None = None) -> dict[str, Any]:
    root = hierarchy.root()
    doc = _node_json(root, semantics_of, hierarchy)
    if isinstance(root, GroupMeta):
        doc["children"] = _group_json(hierarchy, "", semantics_of)
    refusals = hierarchy.store.refusals()
    if refusals:
        doc["refused_references"] = [refusal._asdict() for refusal in refusals]
    return doc


def _node_json(node: ArrayMeta | GroupMeta, semantics_of: SemanticsOf | None, hierarchy: Hierarchy) -> dict[str, Any]:
    doc = node.describe()
    layout = group_layout(hierarchy, node) if isinstance(node, GroupMeta) else None
    if layout:
        doc["ome_layout"] = layout.split("; ")
    netcdf = netcdf_lines(hierarchy, node) if isinstance(node, GroupMeta) else []
    if netcdf:
        doc["netcdf"] = netcdf
    if isinstance(node, ArrayMeta) and semantics_of is not None:
        semantics = semantics_of(node)
        if not semantics.empty:
            doc["semantics"] = semantics.describe()
    return doc


def _group_json(hierarchy: Hierarchy, path: str, semantics_of: SemanticsOf | None) -> list[dict[str, Any]]:
    out = []
    for child in hierarchy.children(path):
        if child.error is not None:
            out.append({"name": child.name, "node_type": "unavailable", "reason": str(child.error),
                        "errno": child.error.errno})
            continue
        assert child.node is not None
        doc = {"name": child.name, **_node_json(child.node, semantics_of, hierarchy)}
        if isinstance(child.node, GroupMeta):
            doc["children"] = _group_json(hierarchy, child.node.path, semantics_of)
        out.append(doc)
    return out


def dump_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, default=str)
