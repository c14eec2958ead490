"""Wide groups: every child present and readable by name, alike arrays kept apart, and a listed array's
memory bounded (tracemalloc in-process: what the daemon's heap holds per array, not a timing)."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import zarr

from mountutil import mounted
from zarrfs.files.tree import DirEntry, FileEntry, VirtualTree
from zarrfs.formats import FORMATS, GROUP_SUFFIXES
from zarrfs.model.limits import LISTED_NODE_BYTES
from zarrfs.options import EngineOptions

ALL_SUFFIXES = (*FORMATS, *GROUP_SUFFIXES)
# What the issue allows a listed array that was not opened: 3 KiB (its every file listed and sized).
LISTED_ARRAY_BYTES = 3 << 10


def _flat_group(store: Path, count: int) -> None:
    """A consolidated v3 group of `count` alike arrays: one written by zarr-python, its document repeated
    under `count` names in the consolidated block (as zarr-python's consolidate_metadata writes it; writing
    100,000 arrays through zarr-python would be most of the test's time)."""
    seed = store.parent / f"{store.name}-seed"
    group = zarr.open_group(str(seed), mode="w", zarr_format=3)
    group.create_array("a", shape=(16,), chunks=(16,), dtype="uint8", fill_value=7, compressors=None)
    zarr.consolidate_metadata(str(seed))
    root = json.loads((seed / "zarr.json").read_text())
    array = root["consolidated_metadata"]["metadata"]["a"]
    root["consolidated_metadata"]["metadata"] = {f"a{index:06d}": array for index in range(count)}
    store.mkdir()
    (store / "zarr.json").write_text(json.dumps(root))


def _tree(store: Path) -> VirtualTree:
    return VirtualTree.of_source(str(store), None, EngineOptions(), ALL_SUFFIXES)


def test_every_one_of_100000_arrays_is_present_and_readable_by_name(tmp_path: Path) -> None:
    count = 100_000
    store = tmp_path / "flat.zarr"
    _flat_group(store, count)
    tree = _tree(store)
    try:
        listed = tree.listdir(DirEntry(""))
        assert {name for name in listed if name.endswith(".raw")} == {f"a{i:06d}.raw" for i in range(count)}
        for index in range(count):
            entry = tree.lookup(f"/a{index:06d}.raw")  # by name, not through the listing's iteration
            assert isinstance(entry, FileEntry) and entry.file.size == 16
        for index in (*range(0, count, 997), count - 1):
            opened = tree.open(f"/a{index:06d}.raw")
            out = np.zeros(16, np.uint8)
            assert opened.read_into(0, out) == 16 and out.tolist() == [7] * 16  # the fill value
            opened.close()
    finally:
        tree.close()


def _held_per_array(root: Path, count: int) -> int:
    """The heap a tree holds for a flat group of `count` arrays once every file is listed and sized."""
    store = root / f"flat-{count}.zarr"
    _flat_group(store, count)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tree = _tree(store)
        entries = tree.listdir(DirEntry(""))
        assert sum(1 for name in entries if name.endswith(".npy")) == count
        for entry in entries.values():
            if isinstance(entry, FileEntry):
                assert entry.file.size >= 0
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    tree.close()
    return held


def test_a_listed_array_holds_at_most_3_kib(tmp_path: Path) -> None:
    """Listed and every file sized (`ls -l`), an array of a wide group holds at most 3 KiB: the slope
    between two group sizes, so that what a tree holds once does not count."""
    small, large = 1_000, 4_000
    per_array = (_held_per_array(tmp_path, large) - _held_per_array(tmp_path, small)) / (large - small)
    assert per_array <= LISTED_ARRAY_BYTES, f"{per_array:.0f} bytes per listed array"
    assert per_array <= LISTED_NODE_BYTES  # the metadata bound counts no less than is held


@pytest.fixture(scope="module")
def alike(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Arrays alike but for their attributes and data (they share what is parsed of them)."""
    store = tmp_path_factory.mktemp("alike") / "alike.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    for index in range(3):
        array = group.create_array(f"x{index}", shape=(4, 6), chunks=(2, 3), dtype="<u2")
        array[...] = np.arange(24, dtype="<u2").reshape(4, 6) * (index + 1)
        array.attrs["which"] = index
    zarr.consolidate_metadata(str(store))
    return store


def test_alike_arrays_keep_their_own_data_attributes_and_names(alike: Path, tmp_path: Path) -> None:
    with mounted(alike, tmp_path / "mnt", tmp_path / "log") as mount:
        for index in range(3):
            expected = np.arange(24, dtype="<u2").reshape(4, 6) * (index + 1)
            assert np.array_equal(np.load(mount / f"x{index}.npy"), expected)
            assert (mount / f"x{index}.raw").read_bytes() == expected.tobytes()
            document = json.loads((mount / f"x{index}.json").read_text())
            assert document["path"] == f"/x{index}" and document["attributes"] == {"which": index}
            header = (mount / f"x{index}.mhd").read_text()
            assert f"ElementDataFile = x{index}.raw" in header
            assert (mount / f"x{index}.mhd").stat().st_size == len(header.encode())
            assert f"x{index}.raw" in (mount / f"x{index}.nrrd.nhdr").read_text()
