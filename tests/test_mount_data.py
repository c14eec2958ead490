"""Bytes read through a real mount equal what independent writers read back.

Every oracle store (zarr-python 3 v2/v3 with sharding, tensorstore) and every
committed legacy fixture (v1, zarr-python 2.18's v3 layout, the 2022 draft)
is checked through the kernel: `np.load` with mmap, the `.raw` bytes, 1,000
random unaligned preads, the `.tif` as tifffile decodes it, and 8 threads
reading at once.

To mount once per module, the oracle arrays are copied (byte for byte) into
one v3 and one v2 hierarchy; a few stores are also mounted as they are, to
cover a single-array SOURCE, consolidated metadata and nested nodes. The
legacy fixtures are mounted in place, all at once.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pytest
import tifffile
from numpy.lib import format as npy_format

from mountutil import Mount, mount_in, mounted_many
from oracles import ORACLES, Oracle

LEGACY = Path(__file__).parent / "fixtures" / "legacy"
PREADS = 1000
THREADS = 8
PREADS_PER_THREAD = 250
# Stores also mounted as they are (SOURCE naming, consolidated metadata, nested node paths).
DIRECT = ("zp3-root-array", "zp2-root-array", "ts3-sharding-start", "zp2-consolidated", "zp3-nested-node")
# TIFF sample types: (kind, itemsize) as tifffile reads them back.
TIFF_SAMPLES = {("u", n) for n in (1, 2, 4, 8)} | {("i", n) for n in (1, 2, 4, 8)} | {("f", n) for n in (2, 4, 8)} \
    | {("c", 8), ("c", 16)}


@dataclass
class Served:
    """One array as a mount shows it: `stem` + '.npy', '.raw', '.tif'."""

    stem: Path
    expected: np.ndarray
    mount: Mount
    lenient: bool = False  # a legacy variant the format's draft leaves readers free to refuse

    def file(self, suffix: str) -> Path:
        return self.stem.with_name(self.stem.name + suffix)

    @cached_property
    def dtype(self) -> np.dtype:
        """The element type zarrfs serves (its byte order is the stored one), from the .npy header."""
        with open(self.file(".npy"), "rb") as file:
            version = npy_format.read_magic(file)
            read_header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
            return read_header(file)[2]

    @cached_property
    def raw(self) -> bytes:
        """The C-order element bytes the writer's array stands for, in the served dtype."""
        assert np.can_cast(self.expected.dtype, self.dtype, "equiv"), (self.expected.dtype, self.dtype)
        return np.ascontiguousarray(self.expected).astype(self.dtype).tobytes()

    @cached_property
    def npy(self) -> bytes:
        """The whole .npy file as numpy itself would write it."""
        header = io.BytesIO()
        npy_format.write_array_header_1_0(header, {"descr": npy_format.dtype_to_descr(self.dtype),
                                                   "fortran_order": False, "shape": self.expected.shape})
        return header.getvalue() + self.raw


def build_combined(tmp: Path) -> tuple[dict[str, Served], list[Mount]]:
    """Write every oracle store, gather them into one hierarchy per format, and plan the mounts."""
    roots = {"3": tmp / "all-v3.zarr", "2": tmp / "all-v2.zarr"}
    roots["3"].mkdir()
    (roots["3"] / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    roots["2"].mkdir()
    (roots["2"] / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    mounts = {fmt: mount_in(tmp, root, name=f"all-v{fmt}") for fmt, root in roots.items()}
    served: dict[str, Served] = {}
    for name in sorted(ORACLES):
        oracle: Oracle = ORACLES[name](tmp / "build" / name)
        array_dir = oracle.store / oracle.node
        fmt = "3" if (array_dir / "zarr.json").exists() else "2"
        shutil.copytree(array_dir, roots[fmt] / name)
        served[name] = Served(mounts[fmt].root / name, oracle.expected, mounts[fmt])
        if name in DIRECT:
            direct = mount_in(tmp, oracle.store, name=f"direct-{name}")
            node = oracle.node or oracle.store.name.removesuffix(".zarr")  # a root array is named after the store
            served[f"{name} (as is)"] = Served(direct.root / node, oracle.expected, direct)
            mounts[name] = direct
    return served, list(mounts.values())


def legacy_cases() -> list[dict]:
    return [entry for entry in json.loads((LEGACY / "manifest.json").read_text()) if entry["kind"] == "array"]


def legacy_id(entry: dict) -> str:
    return f"legacy {entry['store']}/{entry['node']}".rstrip("/")


@pytest.fixture(scope="module")
def oracle_arrays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    served, mounts = build_combined(tmp_path_factory.mktemp("oracles"))
    with mounted_many(mounts):
        yield served


@pytest.fixture(scope="module")
def legacy_arrays(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Served]]:
    tmp = tmp_path_factory.mktemp("legacy")
    stores = sorted({entry["store"] for entry in legacy_cases()})
    mounts = {store: mount_in(tmp, LEGACY / store, name=store.replace("/", "-"), expected_log=[
        # refusing a lenient variant is allowed, with a warning naming it
        rf"WARNING .*/{entry['node']}: " for entry in legacy_cases() if entry["store"] == store and entry.get("lenient")
    ]) for store in stores}
    served = {}
    for entry in legacy_cases():
        node = entry["node"] or Path(entry["store"]).name.removesuffix(".zarr")
        served[legacy_id(entry)] = Served(mounts[entry["store"]].root / node, np.load(LEGACY / entry["expected"]),
                                          mounts[entry["store"]], bool(entry.get("lenient")))
    with mounted_many(list(mounts.values())):
        yield served


ORACLE_IDS = sorted(ORACLES) + [f"{name} (as is)" for name in DIRECT]
CASES = ORACLE_IDS + [legacy_id(entry) for entry in legacy_cases()]


@pytest.fixture(params=CASES)
def array(request: pytest.FixtureRequest) -> Served:
    group = "legacy_arrays" if request.param.startswith("legacy ") else "oracle_arrays"
    served: Served = request.getfixturevalue(group)[request.param]
    if served.lenient and not served.file(".npy").exists():
        node = served.stem.relative_to(served.mount.root)
        assert any(f"/{node}: " in line and " WARNING " in line for line in served.mount.log_lines())
        pytest.skip(f"zarrfs refuses the lenient legacy variant /{node}, as the draft allows, and says why")
    return served


# ------------------------------------------------------------ one reader at a time


def test_npy_mmap(array: Served) -> None:
    loaded = np.load(array.file(".npy"), mmap_mode="r")
    assert loaded.shape == array.expected.shape
    if loaded.dtype.names is None:  # (NaN in a struct field never compares equal: the bytes below decide)
        np.testing.assert_array_equal(loaded, array.expected)
    assert np.ascontiguousarray(loaded).tobytes() == array.raw
    assert array.file(".npy").read_bytes() == array.npy  # the header too, byte for byte


def test_raw_is_the_npy_payload(array: Served) -> None:
    raw = array.file(".raw").read_bytes()
    assert raw == array.raw
    assert array.npy.endswith(raw)


def test_random_unaligned_preads(array: Served) -> None:
    want = array.npy
    rng = random.Random(array.stem.name)
    # O_DIRECT: each pread reaches the daemon as issued, not as page-sized cache fills.
    fd = os.open(array.file(".npy"), os.O_RDONLY | os.O_DIRECT)
    try:
        for _ in range(PREADS):
            offset = rng.randrange(len(want) + 8)
            size = rng.choice([rng.randint(1, 8), rng.randint(1, 300), rng.randint(1, len(want) + 16)])
            assert os.pread(fd, size, offset) == want[offset:offset + size], (offset, size)
    finally:
        os.close(fd)


def tiff_pages(expected: np.ndarray) -> np.ndarray | None:
    """The pages a TIFF of `expected` holds (last two dims; 0-d 1x1; 1-D one row; bool as uint8), or None."""
    dtype = expected.dtype
    if expected.size == 0 or not (dtype.kind == "b" or (dtype.kind, dtype.itemsize) in TIFF_SAMPLES):
        return None
    pages = expected.astype(np.uint8) if dtype.kind == "b" else expected
    height, width = ((1, 1) + pages.shape)[-2:]
    return pages.reshape(-1, height, width)


def test_tif(array: Served) -> None:
    pages = tiff_pages(array.expected)
    if pages is None:
        assert not array.file(".tif").exists()
        return
    with tifffile.TiffFile(array.file(".tif")) as tif:
        assert len(tif.pages) == pages.shape[0]
        decoded = tif.asarray()
    assert decoded.size == pages.size
    np.testing.assert_array_equal(decoded.reshape(pages.shape), pages)
    np.testing.assert_array_equal(tifffile.imread(array.file(".tif")).reshape(pages.shape), pages)


# ------------------------------------------------------------ many readers at once


def read_concurrently(arrays: list[Served]) -> list[str]:
    """8 threads, each preading random ranges of random files at once; returns the mismatches."""
    files = [(a.file(suffix), data) for a in arrays for suffix, data in ((".npy", a.npy), (".raw", a.raw))
             if data]
    start = threading.Barrier(THREADS)
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        try:
            for _ in range(PREADS_PER_THREAD):
                path, want = rng.choice(files)
                offset = rng.randrange(len(want))
                size = rng.randint(1, min(len(want), 1 << 16))
                fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
                try:
                    got = os.pread(fd, size, offset)
                finally:
                    os.close(fd)
                if got != want[offset:offset + size]:
                    errors.append(f"{path} [{offset}:{offset + size}]")
        except Exception as exc:  # noqa: BLE001 - reported by the test, not lost in the thread
            errors.append(f"thread {seed}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_eight_threads_oracles(oracle_arrays: dict[str, Served]) -> None:
    assert read_concurrently(list(oracle_arrays.values())) == []


def test_eight_threads_legacy(legacy_arrays: dict[str, Served]) -> None:
    refused = [a for a in legacy_arrays.values() if a.lenient and not a.file(".npy").exists()]  # see `array`
    assert read_concurrently([a for a in legacy_arrays.values() if a not in refused]) == []


@pytest.mark.parametrize(("name", "raw"), [("zp3-codec-none", True), ("zp2-compressor-none", True),
                                           ("zp3-codec-zstd", False)])
def test_uncompressed_chunks_are_copied_from_their_files(name: str, raw: bool,
                                                         oracle_arrays: dict[str, Served]) -> None:
    """Through the mount, plain chunks go the raw-file path (zarrfs/direct.py), others are decoded."""
    array = oracle_arrays[name]
    want = array.raw
    stats_file = array.mount.root / ".zarrfs-stats.json"
    before = json.loads(stats_file.read_text())["raw_chunk_reads"]["bytes"]
    fd = os.open(array.file(".raw"), os.O_RDONLY | os.O_DIRECT)  # past the kernel's page cache
    try:
        assert os.pread(fd, len(want) + 4096, 0) == want
    finally:
        os.close(fd)
    copied = json.loads(stats_file.read_text())["raw_chunk_reads"]["bytes"] - before
    assert copied == (len(want) if raw else 0)
