"""Stores inside zip archives, and kerchunk reference sets named the ways users name them.

A zip made by Python's `zipfile` (or by most tools that zip "the contents of
a folder") has no directory entries: the archive's top is the empty path, and
every listing must still find its children. Each case is read back whole
against the array its writer reads, at the archive's top and inside a
sub-folder, with and without directory entries, consolidated or not.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

from engineutil import read_all
from mountutil import run_zarrfs
from remoteutil import http_server
from zarrfs.engine.engine import Engine

LEGACY_V1 = Path(__file__).parent / "fixtures" / "legacy"
V1_STORE = "v1/blosc_f8_nan"


def write_group(root: Path, zarr_format: int, consolidated: bool) -> dict[str, np.ndarray]:
    """A group with an array at the top and one in a sub-group; returns {node path: values}."""
    group = zarr.open_group(str(root), mode="w", zarr_format=zarr_format)
    top = np.arange(20, dtype="<i2").reshape(4, 5)
    deep = np.linspace(0, 1, 7, dtype="<f4")
    group.create_array("a", shape=top.shape, chunks=(2, 2), dtype=top.dtype)[...] = top
    group.create_group("sub").create_array("b", shape=deep.shape, chunks=(3,), dtype=deep.dtype)[...] = deep
    if consolidated:
        zarr.consolidate_metadata(str(root))
    return {"a": top, "sub/b": deep}


def zip_directory(source: Path, archive: Path, *, directory_entries: bool, inside: str = "") -> None:
    """Zip `source` the way Python's zipfile does: directory entries only when asked."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for folder, _, files in os.walk(source):
            relative = Path(folder).relative_to(source)
            if directory_entries and relative != Path("."):
                out.write(folder, f"{Path(inside, relative).as_posix()}/")
            for name in files:
                out.write(Path(folder, name), Path(inside, relative, name).as_posix())


CASES = [(fmt, consolidated) for fmt in (2, 3) for consolidated in (False, True)]


@pytest.mark.parametrize("directory_entries", [False, True], ids=["no-dir-entries", "dir-entries"])
@pytest.mark.parametrize("inside", ["", "deep/folder/data.zarr"], ids=["at-top", "in-sub-folder"])
@pytest.mark.parametrize(("zarr_format", "consolidated"), CASES, ids=[f"v{f}-{'cons' if c else 'plain'}" for f, c in CASES])
def test_group_in_a_zip(zarr_format: int, consolidated: bool, inside: str, directory_entries: bool,
                        tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    expected = write_group(tmp_path / "data.zarr", zarr_format, consolidated)
    archive = tmp_path / "store.zip"
    zip_directory(tmp_path / "data.zarr", archive, directory_entries=directory_entries, inside=inside)
    url = f"zip://{inside}::file://{archive}" if inside else f"zip::file://{archive}"
    found = read_all(open_engine(url))
    assert sorted(found) == sorted(expected)
    for path, values in expected.items():
        np.testing.assert_array_equal(found[path], values)


@pytest.mark.parametrize("directory_entries", [False, True], ids=["no-dir-entries", "dir-entries"])
def test_v1_array_in_a_zip(directory_entries: bool, tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    archive = tmp_path / "v1.zip"
    zip_directory(LEGACY_V1 / V1_STORE, archive, directory_entries=directory_entries)
    expected = np.load(LEGACY_V1 / "expected" / f"{V1_STORE}.npy")
    found = read_all(open_engine(f"zip::file://{archive}"))
    np.testing.assert_array_equal(found[""], expected)


def test_zip_over_http(tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    served = tmp_path / "served"
    served.mkdir()
    expected = write_group(tmp_path / "data.zarr", 3, consolidated=False)
    zip_directory(tmp_path / "data.zarr", served / "store.zip", directory_entries=False)
    with http_server(served) as server:
        found = read_all(open_engine(f"zip::{server.url}/store.zip"))
    for path, values in expected.items():
        np.testing.assert_array_equal(found[path], values)


def test_zarrfs_tree_lists_a_zip_without_directory_entries(tmp_path: Path) -> None:
    write_group(tmp_path / "data.zarr", 2, consolidated=False)
    zip_directory(tmp_path / "data.zarr", tmp_path / "store.zip", directory_entries=False)
    result = run_zarrfs("tree", f"zip::file://{tmp_path / 'store.zip'}")
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()[1:]]
    assert names == ["a", "sub/", "b"]
    assert result.stderr == ""


# ------------------------------------------------------------- kerchunk references


@pytest.fixture
def references(tmp_path: Path) -> Iterator[tuple[Path, dict[str, np.ndarray]]]:
    """A version-1 reference set over a v2 group: metadata inline, chunks as [path, offset, length]."""
    expected = write_group(tmp_path / "data.zarr", 2, consolidated=False)
    refs: dict[str, object] = {}
    for path in sorted((tmp_path / "data.zarr").rglob("*")):
        if path.is_file():
            key = path.relative_to(tmp_path / "data.zarr").as_posix()
            data = path.read_bytes()
            refs[key] = data.decode() if path.name.startswith(".") else [str(path), 0, len(data)]
    target = tmp_path / "refs.json"
    target.write_text(json.dumps({"version": 1, "refs": refs}))
    yield target, expected
    shutil.rmtree(tmp_path / "data.zarr")


@pytest.mark.parametrize("spelling", ["url", "option"])
def test_reference_file_named_in_the_url_or_as_fo(spelling: str, references: tuple[Path, dict[str, np.ndarray]],
                                                   open_engine: Callable[..., Engine]) -> None:
    refs, expected = references
    engine = (open_engine(f"reference://{refs}") if spelling == "url" else
              Engine.open("reference://", {"fo": str(refs)}))
    try:
        found = read_all(engine)
    finally:
        engine.close()
    for path, values in expected.items():
        np.testing.assert_array_equal(found[path], values)


@pytest.mark.parametrize(("args", "says"), [
    (("reference://",), "reference:// needs the kerchunk reference file"),
    (("reference:///nonexistent/refs.json",), "/nonexistent/refs.json does not exist"),
])
def test_reference_errors_say_what_to_do(args: tuple[str, ...], says: str) -> None:
    result = run_zarrfs("tree", *args)
    assert result.returncode == 1
    assert says in result.stderr
    assert "Traceback" not in result.stderr and "positional argument" not in result.stderr


def test_a_reference_file_that_is_not_json_is_named(tmp_path: Path) -> None:
    (tmp_path / "refs.json").write_text("{not json")
    result = run_zarrfs("tree", f"reference://{tmp_path / 'refs.json'}")
    assert result.returncode == 1
    assert "is not a kerchunk reference set" in result.stderr
