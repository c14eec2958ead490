"""zarrfs without its compiled extensions: the Python path serves the same bytes, and says it runs so.

Two ways to be without them: ZARRFS_NO_EXTENSIONS set (the extensions are built
but not imported: the CI run of the fast subset that way, scripts/test.sh), and
a package whose compiled files are gone (a failed build, macOS, FreeBSD): a
copy of the package without its `.so` files. Each is held to the bytes the
engine serves with them (or to the writer's own arrays), for every file kind:
`.npy`, `.raw` and its headers, `.tif`, `.tiled.tif`, an image's `.ome.tif`,
`.json`, a string array's files; uncompressed chunk files (read with
`preadv`), compressed, big-endian and 3-D arrays. The mount test does the same
through two real mounts, one each way.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import Zlib
from ome_zarr.format import FormatV04
from ome_zarr.writer import write_image

from mountutil import mounted
from zarrfs import extensions
from zarrfs.formats import FORMATS
from zarrfs.options import EngineOptions
from zarrfs.files.tree import STATS_FILE, FileEntry, VirtualTree
from zarrfs.suffixes import OME_TIFF_SUFFIX

NOT_USED = (r"compiled extensions: not used \(_gather, _cached_reads, _fast_read, _threadstate: "
            r"ZARRFS_NO_EXTENSIONS is set\); reads take the Python path, slower")
PREADS = 300


def write_store(root: Path) -> dict[str, np.ndarray]:
    """A v2 hierarchy with an array for each read path and an OME-Zarr image; {array path: data}."""
    rng = np.random.default_rng(44)
    arrays = {
        "plain": rng.integers(0, 60000, (300, 500), dtype="<u2"),  # uncompressed: chunk files read raw
        "big_endian": rng.normal(size=(4, 50, 60)).astype(">f4"),
        "volume": rng.integers(-(1 << 30), 1 << 30, (3, 5, 40, 30), dtype="<i4"),
    }
    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group.create_array("plain", data=arrays["plain"], chunks=(64, 64), compressors=None)
        group.create_array("big_endian", data=arrays["big_endian"], chunks=(2, 16, 16), compressors=Zlib(level=1))
        group.create_array("volume", data=arrays["volume"], chunks=(1, 2, 16, 16), compressors=Zlib(level=1))
        names = group.create_array("names", shape=(7,), dtype=str, chunks=(3,))
        names[...] = np.array(["a", "zarr", "", "µm", "longer text", "x", "yz"])
        image = (np.arange(200 * 300, dtype=np.uint16).reshape(200, 300) * 7 % 50000)
        write_image(image, group.create_group("image"), axes="yx", fmt=FormatV04(), scale_factors=(2,),
                    storage_options={"chunks": (64, 64)})
    return arrays


def tree_digests(source: Path) -> dict[str, str]:
    """sha256 of every file the engine serves for `source` (the stats file aside), read in
    uneven pieces through its open files."""
    tree = VirtualTree.of_source(str(source), None, EngineOptions(), (*FORMATS, OME_TIFF_SUFFIX))
    try:
        digests: dict[str, str] = {}
        pending = [""]
        while pending:
            directory = pending.pop()
            for name, entry in tree.listdir(tree.lookup(directory)).items():
                path = f"{directory}/{name}"
                if name == STATS_FILE:
                    continue
                if isinstance(entry, FileEntry):
                    handle = tree.open(path)
                    digest, offset = hashlib.sha256(), 0
                    while offset < handle.size:
                        out = np.empty(min(65_537, handle.size - offset), np.uint8)
                        got = handle.read_into(offset, out)
                        assert got > 0, path
                        digest.update(out[:got].tobytes())
                        offset += got
                    handle.close()
                    digests[path] = digest.hexdigest()
                else:
                    pending.append(path)
        return digests
    finally:
        tree.close()


DIGESTS = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_extensions import tree_digests
from zarrfs import extensions
from zarrfs.engine import gather, served
from zarrfs.fuse import compiled
print(json.dumps({{"digests": tree_digests(__import__("pathlib").Path(sys.argv[1])),
                  "compiled": [gather.COMPILED, served.ServedChunks().in_c, compiled.fast_read is not None],
                  "missing": extensions.missing(), "package": __import__("zarrfs").__file__}}))
"""


def python_path_run(source: Path, env: dict[str, str], cwd: Path | None = None) -> dict:
    result = subprocess.run([sys.executable, "-c", DIGESTS, str(source)], capture_output=True, text=True,
                            env=env, cwd=cwd, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray], dict[str, str]]:
    """The hierarchy, its arrays, and the digests of its files as this process's engine serves them."""
    root = tmp_path_factory.mktemp("extensions") / "kinds.zarr"
    arrays = write_store(root)
    digests = tree_digests(root)
    suffixes = {Path(path).name.partition(".")[2] for path in digests}
    assert {"npy", "raw", "raw.hdr", "mhd", "nrrd.nhdr", "tif", "tiled.tif", "json", "ome.tif"} <= suffixes, suffixes
    for name, data in arrays.items():
        assert digests[f"/{name}.raw"] == hashlib.sha256(data.tobytes()).hexdigest(), name
    return root, arrays, digests


def test_with_no_extensions_set_every_layer_takes_its_python_path_to_the_same_bytes(store: tuple) -> None:
    root, _, digests = store
    found = python_path_run(root, {**os.environ, extensions.NO_EXTENSIONS_VARIABLE: "1"})
    assert found["compiled"] == [False, False, False]
    assert sorted(found["missing"]) == sorted(extensions.ALL)
    assert set(found["missing"].values()) == {"ZARRFS_NO_EXTENSIONS is set"}
    assert found["digests"] == digests


def test_a_package_without_its_compiled_files_imports_and_serves_the_same_bytes(store: tuple,
                                                                                tmp_path: Path) -> None:
    """The package copied without its `.so` files (a build where none compiled): every import of
    an extension fails, is recorded, and the Python path answers."""
    root, _, digests = store
    package = Path(extensions.__file__).parent
    shutil.copytree(package, tmp_path / "zarrfs", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    assert not list((tmp_path / "zarrfs").rglob("*.so"))
    env = {key: value for key, value in os.environ.items() if key != extensions.NO_EXTENSIONS_VARIABLE}
    found = python_path_run(root, {**env, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path)
    assert found["package"] == str(tmp_path / "zarrfs" / "__init__.py")
    assert found["compiled"] == [False, False, False]
    assert sorted(found["missing"]) == sorted(extensions.ALL)
    assert all(why.startswith("ModuleNotFoundError") for why in found["missing"].values()), found["missing"]
    assert found["digests"] == digests

    version = subprocess.run([sys.executable, "-m", "zarrfs", "--version"], capture_output=True, text=True,
                             env={**env, "PYTHONPATH": str(tmp_path)}, cwd=tmp_path, check=False)
    assert version.returncode == 0 and version.stderr == "", version.stderr
    last = version.stdout.splitlines()[-1]
    assert last.startswith("compiled extensions: not used (_gather, _cached_reads, _fast_read, _threadstate: "
                           "ModuleNotFoundError"), last
    assert last.endswith("); reads take the Python path, slower"), last


def test_version_says_whether_the_extensions_are_used() -> None:
    def last_line(value: str) -> str:
        result = subprocess.run([sys.executable, "-m", "zarrfs", "--version"], capture_output=True, text=True,
                                env={**os.environ, extensions.NO_EXTENSIONS_VARIABLE: value}, check=False)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return result.stdout.splitlines()[-1]

    assert re.fullmatch(NOT_USED, last_line("1"))
    if extensions.wanted():  # a run with the extensions (a run without them may have none built)
        assert last_line("0") == "compiled extensions: in use"


def test_a_mount_without_extensions_serves_every_file_as_the_mount_with_them(
        store: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real mounts of one hierarchy, the daemon of one without the extensions: every file
    has the same bytes in both (and the digests the engine gives), random preads agree, the
    one without logs once that it runs so and answers no read in C; the other answers some."""
    root, arrays, digests = store
    monkeypatch.setenv(extensions.NO_EXTENSIONS_VARIABLE, "1")
    with mounted(root, tmp_path / "python", tmp_path / "python.log", expected_log=[NOT_USED]) as python:
        monkeypatch.setenv(extensions.NO_EXTENSIONS_VARIABLE, "0")
        with mounted(root, tmp_path / "c", tmp_path / "c.log") as c:
            for path, digest in digests.items():
                in_python, in_c = (python / path.lstrip("/")).read_bytes(), (c / path.lstrip("/")).read_bytes()
                assert hashlib.sha256(in_python).hexdigest() == digest, path
                assert in_python == in_c, path
            rng = random.Random(44)
            for name in arrays:
                files = [os.open(mount / f"{name}.raw", os.O_RDONLY | os.O_DIRECT) for mount in (python, c)]
                try:
                    size = os.fstat(files[0]).st_size
                    for _ in range(PREADS):
                        offset, length = rng.randrange(size), rng.randint(1, 70_000)
                        assert os.pread(files[0], length, offset) == os.pread(files[1], length, offset), (name, offset)
                finally:
                    for fd in files:
                        os.close(fd)
            stats_python = json.loads((python / STATS_FILE).read_text())
            stats_c = json.loads((c / STATS_FILE).read_text())
    assert stats_python["reads"]["answered_in_c"] == 0
    assert stats_c["reads"]["answered_in_c"] > 0
    log = (tmp_path / "python.log").read_text()
    assert log.count("compiled extensions: not used") == 1, log
    assert "compiled extensions" not in (tmp_path / "c.log").read_text()
