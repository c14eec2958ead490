"""Wide groups: every child present and readable by name, alike arrays kept apart, and a listed array's
memory bounded (tracemalloc in-process: what the daemon's heap holds per array, not a timing)."""

from __future__ import annotations

import gc
import json
import os
import stat
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import zarr

from mountutil import mounted
from zarrfs.files.directory import Directory, typed_names
from zarrfs.files.tree import DirEntry, FileEntry, VirtualTree
from zarrfs.formats import FORMATS
from zarrfs.model.limits import LISTED_NODE_BYTES
from zarrfs.model.shared_json import loads_shared
from zarrfs.options import EngineOptions
from zarrfs.suffixes import GROUP_SUFFIXES

ALL_SUFFIXES = (*FORMATS, *GROUP_SUFFIXES)
# What the issue allows a listed array that was not opened: 3 KiB (its every file listed and sized).
LISTED_ARRAY_BYTES = 3 << 10
# Arrays alike but for their names: their documents parse into one, their files are named and not held
# (files/directory.py), their meanings are one `Semantics`: about 0.5 KiB each (10,000 arrays, 2026-12-02).
LIKE_ARRAY_BYTES = 1 << 10


def _flat_group(store: Path, count: int, *, distinct: bool = False) -> None:
    """A consolidated v3 group of `count` alike arrays: one written by zarr-python, its document repeated
    under `count` names in the consolidated block (as zarr-python's consolidate_metadata writes it; writing
    100,000 arrays through zarr-python would be most of the test's time). `distinct`: each array's
    attributes its own."""
    seed = store.parent / f"{store.name}-seed"
    group = zarr.open_group(str(seed), mode="w", zarr_format=3)
    group.create_array("a", shape=(16,), chunks=(16,), dtype="uint8", fill_value=7, compressors=None)
    zarr.consolidate_metadata(str(seed))
    root = json.loads((seed / "zarr.json").read_text())
    array = root["consolidated_metadata"]["metadata"]["a"]
    root["consolidated_metadata"]["metadata"] = {
        f"a{index:06d}": {**array, "attributes": {"index": index, "name": f"array {index}"}} if distinct else array
        for index in range(count)}
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


def _held_per_array(root: Path, count: int, distinct: bool) -> int:
    """The heap a tree holds for a flat group of `count` arrays once every file is listed and sized."""
    store = root / f"flat-{count}-{distinct}.zarr"
    _flat_group(store, count, distinct=distinct)
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


@pytest.mark.parametrize(("distinct", "bound"), [(False, LIKE_ARRAY_BYTES), (True, LISTED_ARRAY_BYTES)],
                         ids=["alike", "own-attributes"])
def test_a_listed_array_holds_at_most_its_bound(tmp_path: Path, distinct: bool, bound: int) -> None:
    """Parsed, listed and every file sized (`ls -l`), an array of a wide group holds at most 3 KiB, and
    like arrays at most 1 KiB: the slope between two group sizes, so that what a tree holds once does not
    count. The parse is inside what is measured: the consolidated document's repeated parts held once."""
    small, large = 1_000, 4_000
    per_array = (_held_per_array(tmp_path, large, distinct) - _held_per_array(tmp_path, small, distinct)) \
        / (large - small)
    assert per_array <= bound, f"{per_array:.0f} bytes per listed array"
    assert per_array <= LISTED_NODE_BYTES  # the metadata bound counts no less than is held


def test_a_directory_answers_as_a_dict_filled_in_order_would() -> None:
    """Named arrays' files (files/directory.py) are found, iterated and counted as held entries are; a
    name two claim is the first claimant's (groups, then arrays in order, then the group's files)."""
    made: list[tuple[str, str]] = []

    def make(stem: str, meta: object, suffix: str) -> FileEntry:
        made.append((stem, suffix))
        return FileEntry(None, suffix)  # type: ignore[arg-type]  # a stand-in file: only its suffix is read

    directory = Directory(make)  # type: ignore[arg-type]
    expected: dict[str, tuple[str, str] | str] = {}
    assert directory.add("g", DirEntry("g"))
    expected["g"] = "held"
    assert directory.add_array("a", object(), (".npy", ".tif", ".tiled.tif")) == []  # type: ignore[arg-type]
    expected.update({"a.npy": ("a", ".npy"), "a.tif": ("a", ".tif"), "a.tiled.tif": ("a", ".tiled.tif")})
    # "a.tiled" + ".tif" is "a"'s file already, "g" + "" is no suffix: the later claimant loses the name.
    assert directory.add_array("a.tiled", object(), (".npy", ".tif")) == ["a.tiled.tif"]  # type: ignore[arg-type]
    expected["a.tiled.npy"] = ("a.tiled", ".npy")
    assert directory.add_array("g", object(), (".npy",)) == []  # type: ignore[arg-type]  # g.npy is free
    expected["g.npy"] = ("g", ".npy")
    assert not directory.add("a.npy", DirEntry("a.npy"))
    assert directory.add(".group.json", FileEntry(None))  # type: ignore[arg-type]
    expected[".group.json"] = "held"
    assert list(directory) == list(expected) and len(directory) == len(expected)
    assert [name for name, is_dir in typed_names(directory) if is_dir] == ["g"]
    assert made == []  # listed, counted, typed: nothing made
    for name, owner in expected.items():
        entry = directory[name]
        if owner != "held":
            assert isinstance(entry, FileEntry) and made[-1] == owner and entry.suffix == owner[1]
            assert directory[name] is entry  # made once while recently used: a lookup and an open share it
    for absent in ("a", "a.raw", "a.tiled.tif.npy", "x.npy", "g.tif"):
        assert absent not in directory and directory.get(absent) is None


def test_equal_json_objects_are_held_once_and_values_keep_their_kind() -> None:
    text = ('{"a": {"g": {"s": [16, 16]}, "f": 0.0, "n": 1}, "b": {"g": {"s": [16, 16]}, "f": -0.0, "n": 1},'
            ' "c": {"g": {"s": [16, 16]}, "f": 0.0, "n": 1}, "d": {"g": {"s": [16, 16]}, "f": 0.0, "n": 1.0},'
            ' "e": {"g": {"s": [16, 16]}, "f": 0.0, "n": true}, "x": [NaN, Infinity]}')
    doc = loads_shared(text)
    assert json.dumps(doc) == json.dumps(json.loads(text))
    assert doc["a"] is doc["c"]  # equal: one object
    assert doc["b"] is not doc["a"] and str(doc["b"]["f"]) == "-0.0"  # -0.0 is not 0.0
    assert doc["d"] is not doc["a"] and doc["e"] is not doc["a"] and doc["e"] is not doc["d"]  # 1, 1.0, true
    assert doc["b"]["g"] is doc["a"]["g"] and doc["a"]["g"]["s"] is doc["d"]["g"]["s"]  # equal parts shared


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
        # Every file's stat, as the front answers it (one image per kind of answer, fuse/ops.py), says what
        # reading it gives: its size, its blocks, a read-only regular file; a directory's, a directory.
        assert stat.S_ISDIR(os.stat(mount.root).st_mode)
        for name in os.listdir(mount.root):
            status = os.stat(mount / name)
            size = len((mount / name).read_bytes()) if name != ".zarrfs-stats.json" else 0
            assert stat.S_ISREG(status.st_mode) and stat.S_IMODE(status.st_mode) == 0o444, name
            assert (status.st_size, status.st_blocks, status.st_nlink) == (size, -(-size // 512), 1), name
            assert f"x{index}.raw" in (mount / f"x{index}.nrrd.nhdr").read_text()
