"""Variable-length strings and bytes (issue 14), against zarr-python 3.1 (in process) and 3.4.2 (out of process).

Each array is served as `N.npy` at a fixed width n (the longest of its
elements and its fill value, at least 1): its bytes must be exactly numpy's
`astype(f"<U{n}")` / `astype(f"S{n}")` of zarr-python's read, and `N.json`
must hold zarr-python's values (bytes as base64, trailing NULs kept).
"""

from __future__ import annotations

import base64
import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.core.dtype import VariableLengthBytes

from mountutil import mounted, run_zarrfs
from oracles import quiet
from zarrfs.engine.engine import Engine
from zarrfs.errors import ChunkError, TooLargeError
from zarrfs.model.limits import VLEN_ELEMENTS_VARIABLE, VLEN_JSON_VARIABLE, VLEN_SIZE_VARIABLE
from zarrfs.files.tree import VirtualTree
from zp3x import Writer, zp3x  # noqa: F401  (zp3x is the fixture)

STRINGS = ["héllo", "😀 emoji", "", "日本語のテキスト", "tab\tand\nnewline", "x", "", "ß" * 9, "end"]
BYTES = [b"ab\x00", b"", b"\xff\x00\x01", b"plain", b"\x00", b"\x00\x00tail\x00", b"z", b"", b"\x80"]
NOT_SERVED = (".raw", ".raw.hdr", ".mhd", ".nrrd.nhdr", ".tif", ".bigtiff.tif")


def objects(values: list[Any], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(values), object)
    out[:] = values
    return out.reshape(shape)


def as_objects(read: np.ndarray) -> np.ndarray:
    """zarr-python's read (StringDType for strings in numpy 2) as an object array of str/bytes."""
    read = np.asarray(read)
    return read.astype(object) if read.dtype.kind != "O" else read


def fixed(read: np.ndarray, fill: str | bytes) -> np.ndarray:
    """What `.npy` must hold: numpy's astype at n = the longest of the elements and the fill (>= 1)."""
    values = as_objects(read)
    width = max([1, len(fill), *(len(v) for v in values.reshape(-1))])
    kind = "<U" if isinstance(fill, str) else "S"
    return values.astype(f"{kind}{width}")


def check_served(mount_root: Path, name: str, read: np.ndarray, fill: str | bytes) -> None:
    """`.npy` (plain and memory-mapped) and `.json` of array `name` against zarr-python's read."""
    want = fixed(read, fill)
    got = np.load(mount_root / f"{name}.npy")  # allow_pickle is False by default
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, want.dtype)
    assert got.tobytes() == want.tobytes(), name
    mapped = np.load(mount_root / f"{name}.npy", mmap_mode="r")
    assert mapped.tobytes() == want.tobytes(), name
    del mapped
    document = json.loads((mount_root / f"{name}.json").read_text("utf-8"))
    values = np.array(document["values"], dtype=object).reshape(-1).tolist() if read.size else []
    if isinstance(fill, bytes):
        assert document["values_encoding"] == "base64"
        values = [base64.b64decode(v) for v in values]
    assert values == as_objects(read).reshape(-1).tolist(), name
    assert document["width"] == want.dtype.itemsize // (4 if isinstance(fill, str) else 1)
    listing = set(os.listdir(mount_root))
    assert not any(f"{name}{suffix}" in listing for suffix in NOT_SERVED), listing


# ------------------------------------------------------------ stores written by zarr-python 3.1


def write_zp31(store: Path, zarr_format: int) -> dict[str, tuple[str | bytes, np.ndarray]]:
    """A group of string and bytes arrays: name -> (fill value, zarr-python's read)."""
    cases: dict[str, tuple[str | bytes, np.ndarray]] = {}
    with quiet():
        group = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
        # 2-D, edge chunks, a partial write: rows 3.. are the fill value, the last chunk row is never written.
        text = group.create_array("text", shape=(5, 3), chunks=(2, 2), dtype=str, fill_value="fill")
        text[:3] = objects(STRINGS, (3, 3))
        blobs = group.create_array("blobs", shape=(5, 3), chunks=(2, 2), dtype=VariableLengthBytes(),
                                   fill_value=b"f\x00" if zarr_format == 3 else b"")
        blobs[:3] = objects(BYTES, (3, 3))
        group.create_array("empty", shape=(4,), chunks=(3,), dtype=str)[...] = objects(["", "", "", ""], (4,))
        group.create_array("unwritten", shape=(3,), chunks=(2,), dtype=str, fill_value="never written")
        group.create_array("scalar", shape=(), dtype=str)[...] = "one 😀"
        group.create_array("nothing", shape=(0,), chunks=(2,), dtype=str)
        if zarr_format == 3:
            sharded = group.create_array("sharded", shape=(10,), chunks=(2,), shards=(4,), dtype=str, fill_value="q")
            sharded[:7] = objects(STRINGS[:7], (7,))  # inner chunks and the last shard missing
        if zarr_format == 2:
            group.create_array("fortran", shape=(3, 4), chunks=(2, 3), dtype=str, order="F",
                               fill_value="F")[:2] = objects(STRINGS[:8], (2, 4))
            uncompressed = group.create_array("plain", shape=(4,), chunks=(2,), dtype=str, compressors=None)
            uncompressed[...] = objects(STRINGS[:4], (4,))
    for name in ("text", "blobs", "empty", "unwritten", "scalar", "nothing", "fortran", "plain", "sharded"):
        if (store / name).exists():
            with quiet():
                array = zarr.open_array(str(store), path=name, mode="r")
            fill = array.fill_value
            fill = fill if isinstance(fill, (bytes, str)) else (b"" if name == "blobs" else "")
            cases[name] = (fill.item() if isinstance(fill, np.generic) else fill, np.asarray(array[...]))
    return cases


def write_json2(store: Path) -> tuple[str, np.ndarray]:
    """A v2 array with the json2 object codec, written with numcodecs: zarr-python 3 neither writes nor
    reads json2 arrays, so the values written (and the fill value where a chunk is missing) are the oracle."""
    codec = numcodecs.JSON()
    (store / "js").mkdir(parents=True)
    (store / "js" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [5], "chunks": [2], "dtype": "|O", "fill_value": "j", "order": "C",
        "filters": [codec.get_config()], "compressor": {"id": "zlib", "level": 1}}))
    values = objects(["é", "😀😀", "", "quote\"d", "x"], (5,))
    # Chunk 1 is missing (the fill value); the edge chunk 2 is whole, as v2 writes it, and the element
    # beyond the array's end must not count towards the width.
    chunks = {0: values[0:2], 2: objects(["x", "beyond the end of the array, much longer"], (2,))}
    for index, chunk in chunks.items():
        (store / "js" / str(index)).write_bytes(numcodecs.Zlib(1).encode(codec.encode(chunk)))
    expected = values.copy()
    expected[2:4] = "j"
    return "j", expected


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zp31_vlen_arrays_through_the_mount(zarr_format: int, tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    cases = write_zp31(store, zarr_format)
    if zarr_format == 2:
        cases["js"] = write_json2(store)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        for name, (fill, read) in cases.items():
            check_served(mount.root, name, read, fill)
        # Trailing NULs: the .npy element holds the bytes as astype wrote them and numpy drops the NULs
        # when reading; .json keeps the real value.
        blobs = np.load(mount / "blobs.npy")
        assert blobs[0, 0] == b"ab" and blobs.tobytes()[:3] == b"ab\x00"
        assert json.loads((mount / "blobs.json").read_text())["values"][0][0] == base64.b64encode(b"ab\x00").decode()
        assert os.stat(mount / "text.npy").st_size == len((mount / "text.npy").read_bytes())


# ------------------------------------------------------------ stores written by zarr-python 3.4.2


def test_zp34_vlen_arrays_through_the_mount(zp3x: Writer, tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    written: dict[str, tuple[str | bytes, np.ndarray]] = {}
    for fmt in (2, 3):
        text = zp3x.write(store / f"v{fmt}", "text", {"shape": [4, 3], "chunks": [3, 2], "dtype": "string",
                                                       "fill_value": "zz", "zarr_format": fmt},
                          values=objects(STRINGS, (3, 3)), region=[(0, 3), (0, 3)])
        assert text.ok, text.error
        blobs = zp3x.write(store / f"v{fmt}", "blobs", {"shape": [9], "chunks": [4], "dtype": "vlen-bytes",
                                                         "zarr_format": fmt}, values=objects(BYTES[:6], (6,)),
                           region=[(0, 6)])
        assert blobs.ok, blobs.error
        written[f"v{fmt}/text"] = ("zz", text.expected)
        written[f"v{fmt}/blobs"] = (b"", blobs.expected)
    for fmt in (2, 3):  # each store is one Zarr format: one mount each
        with mounted(store / f"v{fmt}", tmp_path / f"mnt{fmt}", tmp_path / f"log{fmt}") as mount:
            for name in ("text", "blobs"):
                check_served(mount.root, name, written[f"v{fmt}/{name}"][1], written[f"v{fmt}/{name}"][0])


# ------------------------------------------------------------ width, bounds and refusals (no mount)


def vlen_store(tmp_path: Path, count: int = 6, *, compressors: Any = "auto") -> Path:
    store = tmp_path / "b.zarr"
    with quiet():
        group = zarr.open_group(str(store), mode="w", zarr_format=3)
        group.create_array("words", shape=(count,), chunks=(2,), dtype=str, compressors=compressors)[...] = \
            objects([f"word{i}" * (i + 1) for i in range(count)], (count,))
        group.create_array("numbers", shape=(3,), dtype="<i4")[...] = [1, 2, 3]
    return store


def test_listing_reads_no_chunk_and_stat_finds_the_width(tmp_path: Path) -> None:
    engine = Engine.open(str(vlen_store(tmp_path)))
    try:
        tree = VirtualTree(engine)
        before = engine.store.stats.as_dict()["requests"]
        names = set(tree.listdir(tree.lookup("/")))
        assert {"words.npy", "words.json", "numbers.npy", "numbers.raw"} <= names
        assert not names & {f"words{suffix}" for suffix in NOT_SERVED}
        listed = engine.store.stats.as_dict()["requests"]
        entry = tree.lookup("/words.npy")
        assert engine.store.stats.as_dict()["requests"] == listed  # looking up the name reads nothing either
        size = entry.file.size  # the first stat scans the 3 chunks
        assert engine.store.stats.as_dict()["requests"] - listed == 3, (before, listed)
        assert size == 128 + 6 * 4 * len("word5" * 6)
        assert tree.lookup("/words.npy").file.size == size  # found once
        assert engine.store.stats.as_dict()["requests"] - listed == 3
    finally:
        engine.close()


def test_reads_stay_within_the_cache_budget(tmp_path: Path, open_engine: Any) -> None:
    store = tmp_path / "big.zarr"
    values = objects([f"{i}:" + "é" * (i % 50) for i in range(20_000)], (200, 100))
    with quiet():
        zarr.create_array(str(store), shape=(200, 100), chunks=(10, 100), dtype=str)[...] = values
    engine = open_engine(store, cache_bytes=1 << 20)  # one chunk at <U55 is 220 KB: 4 fit
    reader = engine.reader("")
    got = np.frombuffer(reader.read(0, reader.nbytes), reader.meta.dtype).reshape(200, 100)
    assert got.tobytes() == values.astype(reader.meta.dtype).tobytes() and reader.meta.dtype == np.dtype("<U55")
    stats = engine.cache.stats().as_dict()
    assert stats["cached_bytes"] <= 1 << 20 and stats["evictions"] > 0, stats


def test_chunk_over_the_cache_budget_is_efbig(tmp_path: Path, open_engine: Any) -> None:
    store = tmp_path / "wide.zarr"
    with quiet():
        zarr.create_array(str(store), shape=(4,), chunks=(4,), dtype=str)[...] = objects(["x" * 100_000] * 4, (4,))
    engine = open_engine(store, cache_bytes=1 << 20)  # one chunk is 1.6 MB at <U100000
    with pytest.raises(TooLargeError, match="cache-size"):
        engine.reader("")


def test_array_over_the_element_bound_is_listed_with_the_reason(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = vlen_store(tmp_path)
    monkeypatch.setenv(VLEN_ELEMENTS_VARIABLE, "5")
    result = run_zarrfs("tree", store)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.strip().startswith("words"))
    assert "UNAVAILABLE" in line and VLEN_ELEMENTS_VARIABLE in line and "6 elements" in line, line
    assert VLEN_ELEMENTS_VARIABLE in result.stderr  # the log line
    engine = Engine.open(str(store))
    try:
        names = set(VirtualTree(engine).listdir(VirtualTree(engine).lookup("/")))
        assert not any(name.startswith("words") for name in names) and "numbers.npy" in names
    finally:
        engine.close()


def test_array_over_the_size_bound_is_efbig_at_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VLEN_SIZE_VARIABLE, "500")  # 6 elements of <U30 are 720 bytes
    store = vlen_store(tmp_path)
    engine = Engine.open(str(store))
    try:
        tree = VirtualTree(engine)
        requests = []
        for _ in range(2):
            with pytest.raises(TooLargeError) as caught:
                _ = tree.lookup("/words.npy").file.size
            assert caught.value.errno == errno.EFBIG and VLEN_SIZE_VARIABLE in str(caught.value)
            requests.append(engine.store.stats.as_dict()["requests"])
        assert requests[0] == requests[1]  # the refusal is remembered: no second scan
        assert tree.lookup("/numbers.npy").file.size == 128 + 12
    finally:
        engine.close()
    with mounted(store, tmp_path / "mnt", tmp_path / "log", expected_log=[rf"ERROR .*{VLEN_SIZE_VARIABLE}"]) as mount:
        for _ in range(2):
            with pytest.raises(OSError) as raised:
                os.stat(mount / "words.npy")
            assert raised.value.errno == errno.EFBIG
        assert np.load(mount / "numbers.npy").tolist() == [1, 2, 3]
        lines = [line for line in mount.log_lines() if VLEN_SIZE_VARIABLE in line]
    assert len(lines) == 1, lines


def test_json_lists_values_only_under_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VLEN_JSON_VARIABLE, "700")  # 720 bytes at <U30
    engine = Engine.open(str(vlen_store(tmp_path)))
    try:
        opened = VirtualTree(engine).lookup("/words.json").file.open()
        out = np.empty(opened.size, np.uint8)
        opened.read_into(0, out)
        document = json.loads(out.tobytes())
        assert document["values"] is None and VLEN_JSON_VARIABLE in document["values_omitted"]
        assert document["width"] == 30 and document["shape"] == [6] and document["vlen"] == "str"
    finally:
        engine.close()


def test_pickle_object_codec_is_refused_with_the_reason(tmp_path: Path) -> None:
    store = tmp_path / "p.zarr"
    (store / "p").mkdir(parents=True)
    (store / ".zgroup").write_text('{"zarr_format": 2}')
    (store / "p" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|O", "fill_value": 0, "order": "C",
        "filters": [{"id": "pickle", "protocol": 5}], "compressor": None}))
    result = run_zarrfs("tree", store)
    assert "p  UNAVAILABLE" in result.stdout and "pickle" in result.stdout and "run code" in result.stdout


def test_corrupt_vlen_chunk_is_eio_at_stat_with_one_log_line(tmp_path: Path) -> None:
    store = vlen_store(tmp_path, compressors=None)
    (store / "words" / "c" / "1").write_bytes(b"\x05\x00\x00\x00garbage")  # claims 5 elements
    with mounted(store, tmp_path / "mnt", tmp_path / "log", expected_log=[r"ERROR .*words.*c/1"]) as mount:
        for _ in range(2):
            with pytest.raises(OSError) as caught:
                os.stat(mount / "words.npy")
            assert caught.value.errno == errno.EIO
        assert np.load(mount / "numbers.npy").tolist() == [1, 2, 3]  # every other file keeps working
        lines = [line for line in mount.log_lines() if "c/1" in line]
    assert len(lines) == 1 and "vlen-utf8" in lines[0], lines


def test_element_of_the_wrong_type_is_a_chunk_error(tmp_path: Path) -> None:
    """json2 can hold any JSON value; zarrfs serves strings only, and says so."""
    store = tmp_path / "j.zarr"
    codec = numcodecs.JSON()
    (store / "js").mkdir(parents=True)
    (store / "js" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|O", "fill_value": None, "order": "C",
        "filters": [codec.get_config()], "compressor": None}))
    (store / "js" / "0").write_bytes(codec.encode(objects(["a", 5], (2,))))
    engine = Engine.open(str(store / "js"))
    try:
        with pytest.raises(ChunkError, match=r"array /: chunk '0': element 5 is int, not str"):
            _ = VirtualTree(engine).lookup("/array.npy").file.size
    finally:
        engine.close()


def test_mount_process_has_no_pickle(tmp_path: Path) -> None:
    """numpy loads every .npy of the mount with allow_pickle=False (checked in check_served); the header says so."""
    store = vlen_store(tmp_path)
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        code = ("import numpy as np, sys; a = np.load(sys.argv[1], allow_pickle=False); "
                "assert a.dtype.kind == 'U' and not a.dtype.hasobject; print(a[-1])")
        out = subprocess.run([sys.executable, "-c", code, str(mount / "words.npy")], capture_output=True,
                             text=True, check=True).stdout
    assert out.strip() == "word5" * 6


def test_msgpack2_object_codec(tmp_path: Path) -> None:
    """msgpack2, written with numcodecs (zarr-python 3 neither writes nor reads it); the test extra has msgpack."""
    from numcodecs import msgpacks
    codec = msgpacks.MsgPack()
    store = tmp_path / "m.zarr"
    (store / "m").mkdir(parents=True)
    (store / "m" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [5], "chunks": [2], "dtype": "|O", "fill_value": "fill", "order": "C",
        "filters": [codec.get_config()], "compressor": None}))
    (store / "m" / "0").write_bytes(codec.encode(objects(["é😀", ""], (2,))))
    (store / "m" / "2").write_bytes(codec.encode(objects(["z", "beyond the end"], (2,))))
    engine = Engine.open(str(store / "m"))
    try:
        reader = engine.reader("")
        got = np.frombuffer(reader.read(0, reader.nbytes), reader.meta.dtype)
        assert got.tobytes() == objects(["é😀", "", "fill", "fill", "z"], (5,)).astype("<U4").tobytes()
    finally:
        engine.close()


def test_mounted_listing_reads_no_chunk(tmp_path: Path) -> None:
    store = vlen_store(tmp_path)

    def requests(root: Path) -> int:
        return json.loads((root / ".zarrfs-stats.json").read_text())["store"]["requests"]

    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        assert "words.npy" in os.listdir(mount.root)
        listed = requests(mount.root)
        assert os.stat(mount / "words.npy").st_size == 128 + 6 * 4 * 30
        assert requests(mount.root) - listed == 3  # the scan: one request per chunk, at the first stat
