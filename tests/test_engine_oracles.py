"""The engine against stores written by zarr-python 3 and tensorstore.

Each oracle store must read as exactly the bytes of the array its writer
reads back, in the engine's own dtype (whose byte order is the stored one):
as a whole, beyond its end, and in a few hundred random unaligned ranges.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from oracles import ORACLES, HierarchyOracle, Oracle, write_hierarchy
from zarrfs.engine.engine import Engine
from zarrfs.model.meta import ArrayMeta, GroupMeta

RANDOM_RANGES = 300


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Oracle]:
    """Builds each oracle store once per module, on first use."""
    stores: dict[str, Oracle] = {}

    def get(name: str) -> Oracle:
        if name not in stores:
            stores[name] = ORACLES[name](tmp_path_factory.mktemp(name))
        return stores[name]

    return get


def expected_bytes(expected: np.ndarray, meta: ArrayMeta) -> bytes:
    return np.ascontiguousarray(expected).astype(meta.dtype).tobytes()


def random_ranges(nbytes: int, seed: int, count: int) -> Iterator[tuple[int, int]]:
    """Unaligned (start, stop) pairs: tiny, element-sized, large, and past the end (drawn at once: numpy's
    scalar draws cost more than the reads)."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, nbytes + 1, count)
    lengths = np.choose(rng.integers(0, 3, count), [rng.integers(0, 4, count), rng.integers(1, 64, count),
                                                    rng.integers(1, nbytes + 16, count)])
    return zip(starts.tolist(), (starts + lengths).tolist(), strict=True)


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_full_read(name: str, built: Callable[[str], Oracle], open_engine: Callable[[Path], Engine]) -> None:
    oracle = built(name)
    reader = open_engine(oracle.store).reader(oracle.node)
    meta = reader.meta
    assert meta.shape == oracle.expected.shape
    assert np.can_cast(oracle.expected.dtype, meta.dtype, "equiv"), (oracle.expected.dtype, meta.dtype)
    assert meta.nbytes == oracle.expected.nbytes
    want = expected_bytes(oracle.expected, meta)
    assert reader.read(0, meta.nbytes) == want
    assert reader.read(0, meta.nbytes + 1000) == want
    assert reader.read(meta.nbytes, meta.nbytes + 10) == b""


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_random_ranges(name: str, built: Callable[[str], Oracle], open_engine: Callable[[Path], Engine]) -> None:
    oracle = built(name)
    reader = open_engine(oracle.store).reader(oracle.node)
    want = expected_bytes(oracle.expected, reader.meta)
    for start, stop in random_ranges(len(want), zlib.crc32(name.encode()), RANDOM_RANGES):
        assert reader.read(start, stop) == want[start:stop], (start, stop)


# ------------------------------------------------------------------ hierarchy


def as_json(value: object) -> str:
    """Attributes compared as their JSON text (NaN == NaN there)."""
    return json.dumps(value, sort_keys=True)


@pytest.fixture(scope="module", params=[(2, False), (2, True), (3, False), (3, True)],
                ids=["v2", "v2-consolidated", "v3", "v3-consolidated"])
def hierarchy_oracle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> HierarchyOracle:
    zarr_format, consolidated = request.param
    oracle = write_hierarchy(tmp_path_factory.mktemp("hier"), zarr_format, consolidated=consolidated)
    # A directory that is not a node must never be listed.
    (oracle.store / "obs" / "notes").mkdir()
    (oracle.store / "obs" / "notes" / "readme.txt").write_text("not zarr")
    return oracle


def test_hierarchy_nodes(hierarchy_oracle: HierarchyOracle, open_engine: Callable[[Path], Engine]) -> None:
    engine = open_engine(hierarchy_oracle.store)
    for path, spec in hierarchy_oracle.nodes.items():
        node = engine.hierarchy.node(path)
        assert isinstance(node, GroupMeta if spec.kind == "group" else ArrayMeta), path
        assert node.path == path
        assert as_json(node.attributes) == as_json(spec.attributes), path
        if isinstance(node, ArrayMeta):
            assert node.dimension_names == spec.dimension_names, path
            reader = engine.reader(path)
            assert reader.read(0, node.nbytes) == expected_bytes(spec.expected, node), path


def test_hierarchy_children(hierarchy_oracle: HierarchyOracle, open_engine: Callable[[Path], Engine]) -> None:
    engine = open_engine(hierarchy_oracle.store)
    for path, spec in hierarchy_oracle.nodes.items():
        if spec.kind != "group":
            continue
        children = engine.hierarchy.children(path)
        assert [c.name for c in children] == list(spec.children), path
        for child in children:
            assert child.error is None
            child_path = f"{path}/{child.name}" if path else child.name
            expected_kind = hierarchy_oracle.nodes[child_path].kind
            assert isinstance(child.node, GroupMeta if expected_kind == "group" else ArrayMeta)


def test_hierarchy_format(hierarchy_oracle: HierarchyOracle, open_engine: Callable[[Path], Engine]) -> None:
    engine = open_engine(hierarchy_oracle.store)
    expected = "3" if (hierarchy_oracle.store / "zarr.json").exists() else "2"
    assert engine.hierarchy.zarr_format == expected


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_consolidated_metadata_is_used(zarr_format: int, tmp_path: Path,
                                       open_engine: Callable[[Path], Engine]) -> None:
    """With consolidated metadata, nodes resolve even when their own documents are gone."""
    oracle = write_hierarchy(tmp_path, zarr_format, consolidated=True)
    doc = "zarr.json" if zarr_format == 3 else ".zarray"
    (oracle.store / "obs" / "deeper" / "counts" / doc).unlink()
    engine = open_engine(oracle.store)
    assert [c.name for c in engine.hierarchy.children("obs/deeper")] == ["counts"]
    spec = oracle.nodes["obs/deeper/counts"]
    reader = engine.reader("obs/deeper/counts")
    assert reader.read(0, reader.meta.nbytes) == expected_bytes(spec.expected, reader.meta)
