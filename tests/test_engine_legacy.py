"""The committed legacy fixtures: Zarr v1, zarr-python 2.18's v3 layout and the Dec 2022 seed draft.

`tests/fixtures/legacy/manifest.json` lists each array (with the .npy its
writer read back) and each group (with its children). Entries marked
`lenient` follow a self-contradictory draft: the engine may read them or
refuse them with a typed error, but never return other bytes.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from zarrfs.engine.engine import Engine
from zarrfs.errors import MetadataError, UnsupportedError
from zarrfs.model.meta import ArrayMeta, GroupMeta

LEGACY = Path(__file__).parent / "fixtures" / "legacy"
MANIFEST: list[dict[str, Any]] = json.loads((LEGACY / "manifest.json").read_text())
ARRAYS = [entry for entry in MANIFEST if entry["kind"] == "array"]
GROUPS = [entry for entry in MANIFEST if entry["kind"] == "group"]
LENIENT = {(entry["store"], entry["node"]) for entry in ARRAYS if entry.get("lenient")}


def entry_id(entry: dict[str, Any]) -> str:
    return f"{entry['store']}:/{entry['node']}"


def test_manifest_covers_every_format() -> None:
    assert {entry["format"] for entry in ARRAYS} == {"1", "3-draft-zp2", "3-draft-seed"}
    assert all((LEGACY / entry["expected"]).is_file() for entry in ARRAYS)


@pytest.mark.parametrize("entry", ARRAYS, ids=entry_id)
def test_legacy_array(entry: dict[str, Any], open_engine: Callable[..., Engine]) -> None:
    engine = open_engine(LEGACY / entry["store"])
    assert engine.hierarchy.zarr_format == entry["format"]
    expected = np.load(LEGACY / entry["expected"])
    try:
        reader = engine.reader(entry["node"])
    except (UnsupportedError, MetadataError):
        if entry.get("lenient"):
            return  # refusing a contradictory draft variant is allowed
        raise
    meta = reader.meta
    assert meta.shape == tuple(entry["shape"]) == expected.shape
    assert np.can_cast(expected.dtype, meta.dtype, "equiv"), (expected.dtype, meta.dtype)
    want = np.ascontiguousarray(expected).astype(meta.dtype).tobytes()
    assert reader.read(0, meta.nbytes) == want
    rng = np.random.default_rng(zlib.crc32(entry_id(entry).encode()))
    for _ in range(200):
        start = int(rng.integers(0, len(want) + 1))
        stop = start + int(rng.integers(0, max(2, len(want) // 3)))
        assert reader.read(start, stop) == want[start:stop], (start, stop)


@pytest.mark.parametrize("entry", GROUPS, ids=entry_id)
def test_legacy_group(entry: dict[str, Any], open_engine: Callable[..., Engine]) -> None:
    engine = open_engine(LEGACY / entry["store"])
    assert engine.hierarchy.zarr_format == entry["format"]
    assert isinstance(engine.hierarchy.node(entry["node"]), GroupMeta)
    children = engine.hierarchy.children(entry["node"])
    assert [child.name for child in children] == entry["children"]
    for child in children:
        path = f"{entry['node']}/{child.name}" if entry["node"] else child.name
        if (entry["store"], path) in LENIENT and child.error is not None:
            assert isinstance(child.error, (UnsupportedError, MetadataError))  # listed, marked broken
            continue
        assert child.error is None, child.error
        assert isinstance(child.node, (ArrayMeta, GroupMeta))
