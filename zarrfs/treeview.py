"""`zarrfs tree`: the hierarchy as text or JSON, with the reason for every node that cannot be served."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .hierarchy import Hierarchy
from .metadata.model import ArrayMeta, GroupMeta


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
    parts = [
        f"shape={tuple(meta.shape)}",
        f"dtype={info['dtype']}",
        f"chunks={tuple(info['chunk_shape'])}",
    ]
    if info["shard_shape"]:
        parts.append(f"shards={tuple(info['shard_shape'])}")
    parts += [f"codecs={_codec_names(info['codecs'])}", f"fill={info['fill_value']!r}",
              f"size={human_size(meta.nbytes)}"]
    if meta.dimension_names:
        parts.append("dims=" + ",".join(str(n) for n in meta.dimension_names))
    return "  ".join(parts)


def tree_lines(hierarchy: Hierarchy) -> Iterator[str]:
    root = hierarchy.root()
    label = f"zarr {hierarchy.zarr_format}"
    if isinstance(root, ArrayMeta):
        yield f"/  array ({label})  {_array_line(root)}"
        return
    yield f"/  group ({label})"
    yield from _group_lines(hierarchy, "", "  ")


def _group_lines(hierarchy: Hierarchy, path: str, indent: str) -> Iterator[str]:
    for child in hierarchy.children(path):
        if child.error is not None:
            yield f"{indent}{child.name}  UNAVAILABLE: {child.error}"
        elif isinstance(child.node, GroupMeta):
            yield f"{indent}{child.name}/  group"
            yield from _group_lines(hierarchy, child.node.path, indent + "  ")
        elif isinstance(child.node, ArrayMeta):
            yield f"{indent}{child.name}  array  {_array_line(child.node)}"


def tree_json(hierarchy: Hierarchy) -> dict[str, Any]:
    root = hierarchy.root()
    doc = root.describe()
    if isinstance(root, GroupMeta):
        doc["children"] = _group_json(hierarchy, "")
    return doc


def _group_json(hierarchy: Hierarchy, path: str) -> list[dict[str, Any]]:
    out = []
    for child in hierarchy.children(path):
        if child.error is not None:
            out.append({"name": child.name, "node_type": "unavailable", "reason": str(child.error),
                        "errno": child.error.errno})
            continue
        assert child.node is not None
        doc = {"name": child.name, **child.node.describe()}
        if isinstance(child.node, GroupMeta):
            doc["children"] = _group_json(hierarchy, child.node.path)
        out.append(doc)
    return out


def dump_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, default=str)
