"""Bad input: every failure is a typed error with the right errno, naming store, node and chunk key.

Broken metadata fails only its own node (siblings stay readable); broken
chunks fail only reads that touch them; hostile chunks (decompression bombs,
pickles) are refused without allocating or executing anything.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import pickle
import struct
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec

from oracles import quiet, write_zarr
from zarrfs.codecs import UnknownCodecError
from zarrfs.engine.engine import Engine
from zarrfs.errors import ChunkError, MetadataError, NotFoundError, NotZarrError, UnsupportedError, ZarrfsError
from zarrfs.model.meta import ArrayMeta

ERRNO = {MetadataError: errno.EIO, UnsupportedError: errno.ENOTSUP, UnknownCodecError: errno.ENOTSUP,
         ChunkError: errno.EIO, NotZarrError: errno.ENOENT}

V2_ARRAY: dict[str, Any] = {"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": "<i4", "compressor": None,
                            "fill_value": 5, "order": "C", "filters": None}
V3_ARRAY: dict[str, Any] = {
    "zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "int32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 5, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
}


def assert_error(exc: BaseException, kind: type[ZarrfsError], store: Path | str, *names: str) -> None:
    """Exactly `kind`, with its errno, and a message naming the store and each of `names`.

    `names` are looked for after the store path is cut out: the path holds the
    test's name, which would otherwise match words like 'shape' or 'victim'.
    """
    assert type(exc) is kind, f"{type(exc).__name__}: {exc}"
    assert exc.errno == ERRNO[kind]
    message = str(exc)
    assert str(store) in message, f"{store} not in {message}"
    rest = message.replace(str(store), "")
    for name in names:
        assert name in rest, f"{name!r} not in {message}"


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())


def group_with(root: Path, zarr_format: int, bad: Any) -> Path:
    """A root group holding a valid array `good` (all fill) and `victim` with metadata `bad`."""
    store = root / "s.zarr"
    if zarr_format == 2:
        write_json(store / ".zgroup", {"zarr_format": 2})
        write_json(store / "good" / ".zarray", V2_ARRAY)
        write_json(store / "victim" / ".zarray", bad)
    else:
        write_json(store / "zarr.json", {"zarr_format": 3, "node_type": "group"})
        write_json(store / "good" / "zarr.json", V3_ARRAY)
        write_json(store / "victim" / "zarr.json", bad)
    return store


def assert_good_sibling(engine: Engine) -> None:
    reader = engine.reader("good")
    assert reader.read(0, reader.meta.nbytes) == np.full((4, 6), 5, "<i4").tobytes()


# ------------------------------------------------------------ metadata errors


def v2(**changes: Any) -> dict[str, Any]:
    return {k: v for k, v in {**V2_ARRAY, **changes}.items() if v is not ...}


def v3(**changes: Any) -> dict[str, Any]:
    return {k: v for k, v in {**V3_ARRAY, **changes}.items() if v is not ...}


def grid(chunk_shape: Any) -> dict[str, Any]:
    return {"name": "regular", "configuration": {"chunk_shape": chunk_shape}}


# (id, zarr_format, document (dict, or raw bytes), error type, words the message must contain)
BAD_METADATA: list[tuple[str, int, Any, type[ZarrfsError], tuple[str, ...]]] = [
    ("v2-invalid-json", 2, b'{"zarr_format": 2, "shape": [4,', MetadataError, ("invalid JSON",)),
    ("v2-not-utf8", 2, b'{"zarr_format": 2, "dtype": "\xff"}', MetadataError, ("invalid JSON",)),
    ("v2-not-an-object", 2, [1, 2], MetadataError, ("JSON object",)),
    ("v2-shape-string", 2, v2(shape="4,6"), MetadataError, ("shape",)),
    ("v2-shape-float", 2, v2(shape=[4.0, 6]), MetadataError, ("shape",)),
    ("v2-shape-bool", 2, v2(shape=[True, 6]), MetadataError, ("shape",)),
    ("v2-chunks-string", 2, v2(chunks=["2", 3]), MetadataError, ("chunks",)),
    ("v2-dtype-number", 2, v2(dtype=4), MetadataError, ("dtype",)),
    ("v2-dtype-unknown", 2, v2(dtype="<x9"), MetadataError, ("dtype",)),
    ("v2-order", 2, v2(order="K"), MetadataError, ("order",)),
    ("v2-separator", 2, v2(dimension_separator=":"), MetadataError, ("dimension_separator",)),
    ("v2-compressor-string", 2, v2(compressor="zlib"), MetadataError, ("compressor",)),
    ("v2-filters-object", 2, v2(filters={"id": "delta"}), MetadataError, ("filters",)),
    ("v2-fill-wrong-type", 2, v2(fill_value="lots"), MetadataError, ("fill_value",)),
    ("v2-codec-without-id", 2, v2(compressor={"level": 1}), MetadataError, ("id",)),
    ("v2-codec-bad-config", 2, v2(compressor={"id": "zlib", "nonsense": 1}), MetadataError, ("zlib",)),
    ("v2-zarr-format", 2, v2(zarr_format=7), MetadataError, ("zarr_format",)),
    ("v2-missing-shape", 2, v2(shape=...), MetadataError, ("shape", "missing")),
    ("v2-missing-chunks", 2, v2(chunks=...), MetadataError, ("chunks", "missing")),
    ("v2-missing-dtype", 2, v2(dtype=...), MetadataError, ("dtype",)),
    ("v2-negative-shape", 2, v2(shape=[-1, 6]), MetadataError, ("shape", "[-1, 6]")),
    ("v2-zero-chunk", 2, v2(chunks=[0, 3]), MetadataError, ("chunks", "[0, 3]")),
    ("v2-rank-mismatch", 2, v2(chunks=[2]), MetadataError, ("rank",)),
    ("v2-overflow", 2, v2(shape=[2**31, 2**31], chunks=[1, 1], dtype="<f8"), MetadataError, ("2**63",)),
    ("v2-dim-over-int64", 2, v2(shape=[2**64, 1], chunks=[1, 1]), MetadataError, ("int64",)),
    ("v2-chunk-overflow", 2, v2(shape=[4, 6], chunks=[2**40, 2**40], dtype="<i8"), MetadataError, ("2**63",)),
    ("v2-unknown-compressor", 2, v2(compressor={"id": "nosuchcodec"}), UnknownCodecError, ("nosuchcodec",)),
    ("v2-unknown-filter", 2, v2(filters=[{"id": "nosuchfilter"}]), UnknownCodecError, ("nosuchfilter",)),
    ("v2-object-without-object-codec", 2, v2(dtype="|O"), UnsupportedError, ("object codec",)),
    ("v2-object-vlen-array", 2, v2(dtype="|O", filters=[{"id": "vlen-array", "dtype": "<i4"}]), UnsupportedError,
     ("vlen-array",)),
    ("v2-pickle-compressor", 2, v2(compressor={"id": "pickle"}), UnsupportedError, ("pickle",)),
    ("v2-pickle-object", 2, v2(dtype="|O", filters=[{"id": "pickle"}]), UnsupportedError, ()),
    ("v2-zero-size-dtype", 2, v2(dtype="|S0"), UnsupportedError, ("zero-size",)),
    ("v3-invalid-json", 3, b'{"zarr_format": 3, "node_type": "array", ', MetadataError, ("invalid JSON",)),
    ("v3-not-an-object", 3, "array", MetadataError, ("JSON object",)),
    ("v3-node-type", 3, v3(node_type="table"), MetadataError, ("node_type",)),
    ("v3-missing-node-type", 3, v3(node_type=...), MetadataError, ("node_type",)),
    ("v3-zarr-format-string", 3, v3(zarr_format="3"), MetadataError, ("zarr_format",)),
    ("v3-shape-string", 3, v3(shape="4x6"), MetadataError, ("shape",)),
    ("v3-codecs-object", 3, v3(codecs={"name": "bytes"}), MetadataError, ("codecs",)),
    ("v3-chunk-grid-number", 3, v3(chunk_grid=3), MetadataError, ("chunk_grid",)),
    ("v3-data-type-number", 3, v3(data_type=32), MetadataError, ("data_type",)),
    ("v3-attributes-list", 3, v3(attributes=[1]), MetadataError, ("attributes",)),
    ("v3-dimension-names-string", 3, v3(dimension_names="xy"), MetadataError, ("dimension_names",)),
    ("v3-dimension-names-length", 3, v3(dimension_names=["x"]), MetadataError, ("dimension_names",)),
    ("v3-fill-wrong-type", 3, v3(fill_value=[1, 2]), MetadataError, ("fill_value",)),
    ("v3-endian", 3, v3(codecs=[{"name": "bytes", "configuration": {"endian": "middle"}}]), MetadataError,
     ("endian",)),
    ("v3-no-array-bytes-codec", 3, v3(codecs=[{"name": "gzip", "configuration": {"level": 1}}]), MetadataError,
     ("gzip",)),
    ("v3-two-array-bytes-codecs", 3, v3(codecs=[{"name": "bytes"}, {"name": "bytes"}]), MetadataError,
     ("array->bytes",)),
    ("v3-transpose-order", 3, v3(codecs=[{"name": "transpose", "configuration": {"order": [0, 0]}},
                                         {"name": "bytes"}]), MetadataError, ("transpose",)),
    ("v3-missing-shape", 3, v3(shape=...), MetadataError, ("shape", "missing")),
    ("v3-missing-data-type", 3, v3(data_type=...), MetadataError, ("data_type", "missing")),
    ("v3-missing-chunk-grid", 3, v3(chunk_grid=...), MetadataError, ("chunk_grid", "missing")),
    ("v3-missing-codecs", 3, v3(codecs=...), MetadataError, ("codecs", "missing")),
    ("v3-negative-shape", 3, v3(shape=[4, -6]), MetadataError, ("shape",)),
    ("v3-zero-chunk", 3, v3(chunk_grid=grid([2, 0])), MetadataError, ("chunk_shape",)),
    ("v3-overflow", 3, v3(shape=[2**40, 2**40], data_type="int64"), MetadataError, ("2**63",)),
    ("v3-sharding-not-dividing", 3, v3(codecs=[{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 2], "codecs": [{"name": "bytes"}]}}]), MetadataError, ("divide",)),
    ("v3-unknown-codec", 3, v3(codecs=[{"name": "bytes"}, {"name": "nosuchcodec"}]), UnknownCodecError,
     ("nosuchcodec",)),
    ("v3-unknown-numcodecs", 3, v3(codecs=[{"name": "bytes"}, {"name": "numcodecs.nosuch"}]), UnknownCodecError,
     ("nosuch",)),
    ("v3-pickle", 3, v3(codecs=[{"name": "bytes"}, {"name": "numcodecs.pickle"}]), UnsupportedError, ("pickle",)),
    ("v3-unknown-data-type", 3, v3(data_type="int3"), UnsupportedError, ("int3",)),
    ("v3-string-with-bytes-codec", 3, v3(data_type="string", fill_value="", codecs=[{"name": "bytes"}]),
     UnsupportedError, ("variable-length",)),
    ("v3-unknown-chunk-grid", 3, v3(chunk_grid={"name": "rectilinear", "configuration": {}}), UnsupportedError,
     ("rectilinear",)),
    ("v3-unknown-key-encoding", 3, v3(chunk_key_encoding={"name": "hashed"}), UnsupportedError, ("hashed",)),
    ("v3-must-understand-field", 3, v3(future_feature={"x": 1}), UnsupportedError, ("future_feature",)),
    ("v3-must-understand-true", 3, v3(future_feature={"must_understand": True}), UnsupportedError,
     ("future_feature",)),
    ("v3-storage-transformer", 3, v3(storage_transformers=[{"name": "bitshift"}]), UnsupportedError,
     ("bitshift",)),
]


@pytest.mark.parametrize(("zarr_format", "doc", "kind", "words"), [case[1:] for case in BAD_METADATA],
                         ids=[case[0] for case in BAD_METADATA])
def test_bad_metadata(zarr_format: int, doc: Any, kind: type[ZarrfsError], words: tuple[str, ...],
                      tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    store = group_with(tmp_path, zarr_format, doc)
    engine = open_engine(store)
    with pytest.raises(ZarrfsError) as raised:
        engine.hierarchy.node("victim")
    assert_error(raised.value, kind, str(store), "victim", *words)
    with pytest.raises(ZarrfsError) as raised:
        engine.reader("victim")
    assert type(raised.value) is kind
    children = {child.name: child for child in engine.hierarchy.children("")}
    assert sorted(children) == ["good", "victim"]
    assert children["victim"].node is None
    assert type(children["victim"].error) is kind
    assert isinstance(children["good"].node, ArrayMeta) and children["good"].error is None
    assert_good_sibling(engine)


def test_v3_field_that_need_not_be_understood_is_ignored(tmp_path: Path,
                                                         open_engine: Callable[[Path], Engine]) -> None:
    store = group_with(tmp_path, 3, v3(future_feature={"must_understand": False, "anything": [1, 2]}))
    reader = open_engine(store).reader("victim")
    assert reader.read(0, reader.meta.nbytes) == np.full((4, 6), 5, "<i4").tobytes()


ROOT_DOCS: list[tuple[str, bytes, type[ZarrfsError], str]] = [
    ("invalid-json", b"{nope", MetadataError, "invalid JSON"),
    ("must-understand", b'{"zarr_format": 3, "node_type": "group", "extra": {"y": 1}}', UnsupportedError, "extra"),
    ("unknown-format", b'{"zarr_format": "https://example.org/zarr/9"}', MetadataError, "zarr_format"),
]


@pytest.mark.parametrize(("doc", "kind", "word"), [c[1:] for c in ROOT_DOCS], ids=[c[0] for c in ROOT_DOCS])
def test_bad_root_document(doc: bytes, kind: type[ZarrfsError], word: str, tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    write_json(store / "zarr.json", doc)
    with pytest.raises(ZarrfsError) as raised:
        Engine.open(str(store)).hierarchy.root()
    assert_error(raised.value, kind, str(store), word)


def test_not_zarr(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "sub").mkdir()
    with pytest.raises(ZarrfsError) as raised:
        Engine.open(str(tmp_path))
    assert_error(raised.value, NotZarrError, tmp_path)


def test_missing_node_is_not_found(tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    engine = open_engine(group_with(tmp_path, 3, V3_ARRAY))
    with pytest.raises(NotFoundError) as raised:
        engine.hierarchy.node("nothing/here")
    assert raised.value.errno == errno.ENOENT and "/nothing/here" in str(raised.value)
    with pytest.raises(NotFoundError):
        engine.reader("")  # the root is a group


# ------------------------------------------------- variable-length elements


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_vlen_arrays_are_served_at_a_fixed_width(zarr_format: int, tmp_path: Path,
                                                 open_engine: Callable[[Path], Engine]) -> None:
    """Variable-length arrays are no longer refused (issue 14; tests/test_vlen.py tests them in depth)."""
    store = tmp_path / "s.zarr"
    with quiet():
        group = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
        group.create_array("text", shape=(3,), chunks=(2,), dtype=str)[...] = ["a", "bb", "ccc"]
        group.create_array("blobs", shape=(2,), chunks=(2,), dtype=zarr.core.dtype.VariableLengthBytes())[...] = [
            b"x", b""]
        group.create_array("numbers", shape=(3,), chunks=(2,), dtype="<u2")[...] = [1, 2, 3]
    engine = open_engine(store)
    children = {child.name: child for child in engine.hierarchy.children("")}
    assert sorted(children) == ["blobs", "numbers", "text"]
    assert all(child.error is None for child in children.values())
    assert engine.reader("text").read(0, 36) == np.array(["a", "bb", "ccc"], "<U3").tobytes()
    assert engine.reader("blobs").read(0, 2) == b"x\0"
    reader = engine.reader("numbers")
    assert reader.read(0, 6) == np.array([1, 2, 3], "<u2").tobytes()


class _Exploit:
    """Unpickling this creates `marker`: proof that a pickle was executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("where", ["compressor", "filter"])
def test_pickle_is_never_unpickled(where: str, tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Exploit(marker))
    doc = v2(compressor={"id": "pickle"}) if where == "compressor" else v2(dtype="|O", filters=[{"id": "pickle"}])
    store = group_with(tmp_path, 2, doc)
    (store / "victim" / "0.0").write_bytes(payload)
    engine = open_engine(store)
    with pytest.raises(UnsupportedError):
        engine.reader("victim")
    assert [c.name for c in engine.hierarchy.children("") if c.error] == ["victim"]
    assert not marker.exists()


# ------------------------------------------------------------ invalid names


def test_invalid_names_in_v3_consolidated_metadata(tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    group_doc = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    names = ["ok", "..", ".", "a\x00b", "__reserved", "x/y"]
    root = {**group_doc, "consolidated_metadata": {"kind": "inline", "must_understand": False,
                                                   "metadata": {name: group_doc for name in names}}}
    store = tmp_path / "s.zarr"
    write_json(store / "zarr.json", root)
    assert [c.name for c in open_engine(store).hierarchy.children("")] == ["ok"]


def test_invalid_names_in_v2_consolidated_metadata(tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    names = ["ok", "..", ".", "a\x00b"]
    metadata = {".zgroup": {"zarr_format": 2}, **{f"{name}/.zgroup": {"zarr_format": 2} for name in names}}
    store = tmp_path / "s.zarr"
    write_json(store / ".zmetadata", {"zarr_consolidated_format": 1, "metadata": metadata})
    write_json(store / ".zgroup", {"zarr_format": 2})
    assert [c.name for c in open_engine(store).hierarchy.children("")] == ["ok"]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_undecodable_local_name_is_skipped(zarr_format: int, tmp_path: Path,
                                           open_engine: Callable[[Path], Engine]) -> None:
    store = group_with(tmp_path, zarr_format, V2_ARRAY if zarr_format == 2 else V3_ARRAY)
    doc_name = ".zarray" if zarr_format == 2 else "zarr.json"
    bad_dir = os.fsencode(store) + b"/caf\xe9"  # Latin-1, not UTF-8
    try:
        os.mkdir(bad_dir)
    except OSError as exc:  # some file systems insist on UTF-8 names
        pytest.skip(f"cannot create a non-UTF-8 name here: {exc}")
    with open(bad_dir + b"/" + doc_name.encode(), "wb") as f:
        f.write(json.dumps(V2_ARRAY if zarr_format == 2 else V3_ARRAY).encode())
    engine = open_engine(store)
    assert [c.name for c in engine.hierarchy.children("")] == ["good", "victim"]
    assert_good_sibling(engine)


# --------------------------------------------------------------- chunk errors


def read_error(engine: Engine, node: str, start: int = 0, stop: int | None = None) -> ZarrfsError:
    reader = engine.reader(node)
    with pytest.raises(ZarrfsError) as raised:
        reader.read(start, reader.meta.nbytes if stop is None else stop)
    return raised.value


def v2_zlib_store(root: Path) -> tuple[Path, np.ndarray]:
    data = np.arange(24, dtype="<i4").reshape(4, 6)
    oracle = write_zarr(root, data, zarr_format=2, chunks=(2, 3), node="arr", compressors=numcodecs.Zlib(level=1))
    return oracle.store, data


def corrupt(path: Path, change: Callable[[bytes], bytes]) -> None:
    path.write_bytes(change(path.read_bytes()))


CHUNK_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "garbage": lambda raw: b"this is not a zlib stream at all",
    "truncated": lambda raw: raw[: len(raw) // 2],
    "empty": lambda raw: b"",
    "flipped-byte": lambda raw: raw[:5] + bytes([raw[5] ^ 0xFF]) + raw[6:],
    "wrong-size": lambda raw: zlib.compress(bytes(20)),
    "too-large": lambda raw: zlib.compress(bytes(28)),
}


@pytest.mark.parametrize("damage", sorted(CHUNK_DAMAGE))
def test_damaged_v2_chunk(damage: str, tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    store, data = v2_zlib_store(tmp_path)
    corrupt(store / "arr" / "0.1", CHUNK_DAMAGE[damage])
    engine = open_engine(store)
    assert_error(read_error(engine, "arr"), ChunkError, str(store), "/arr", "arr/0.1")
    # Same error on the next read (failures are not cached as data) ...
    assert_error(read_error(engine, "arr", 12, 24), ChunkError, store, "arr/0.1")
    # ... and reads that avoid the chunk still work: row 3 lives in chunks 1.0 and 1.1.
    reader = engine.reader("arr")
    assert reader.read(72, 96) == data[3].tobytes()


@pytest.mark.parametrize("length", [0, 23, 25, 48])
def test_uncompressed_chunk_of_wrong_length(length: int, tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    """No compressor: a 2x3 int32 chunk must be exactly 24 bytes."""
    store = group_with(tmp_path, 2, V2_ARRAY)
    (store / "victim" / "1.1").write_bytes(bytes(range(length)))
    engine = open_engine(store)
    assert_error(read_error(engine, "victim"), ChunkError, str(store), "/victim", "victim/1.1")
    assert engine.reader("victim").read(0, 12) == np.full(3, 5, "<i4").tobytes()  # chunk 0.0: absent, fill


V3_DAMAGE: list[tuple[str, list[Any], Callable[[bytes], bytes]]] = [
    ("gzip-truncated", [GzipCodec(level=1)], lambda raw: raw[:-9]),
    ("gzip-garbage", [GzipCodec(level=1)], lambda raw: raw[:10] + b"\x00" * (len(raw) - 10)),
    ("zstd-truncated", "zstd", lambda raw: raw[: len(raw) // 2]),
    ("blosc-truncated", "blosc", lambda raw: raw[: len(raw) - 3]),
    ("blosc-garbage-body", "blosc", lambda raw: raw[:16] + bytes(len(raw) - 16)),
    ("crc32c-mismatch", [Crc32cCodec()], lambda raw: bytes([raw[0] ^ 1]) + raw[1:]),
    ("crc32c-truncated", [Crc32cCodec()], lambda raw: raw[:2]),
    ("bytes-wrong-size", None, lambda raw: raw + b"\x00"),
]


@pytest.mark.parametrize(("compressors", "change"), [case[1:] for case in V3_DAMAGE], ids=[c[0] for c in V3_DAMAGE])
def test_damaged_v3_chunk(compressors: Any, change: Callable[[bytes], bytes], tmp_path: Path,
                          open_engine: Callable[[Path], Engine]) -> None:
    data = np.arange(2400, dtype="<f8").reshape(40, 60)  # compressible: blosc must not store it verbatim
    oracle = write_zarr(tmp_path, data, zarr_format=3, chunks=(20, 30), compressors=_v3_compressors(compressors))
    corrupt(oracle.store / "arr" / "c" / "1" / "0", change)
    engine = open_engine(oracle.store)
    assert_error(read_error(engine, "arr"), ChunkError, str(oracle.store), "/arr", "arr/c/1/0")
    assert engine.reader("arr").read(0, 480) == oracle.expected[0].tobytes()


def _v3_compressors(spec: Any) -> Any:
    if spec == "zstd":
        return zarr.codecs.ZstdCodec(level=1)
    if spec == "blosc":
        return zarr.codecs.BloscCodec(cname="lz4", shuffle="shuffle")
    return spec


# ------------------------------------------------------------------- shards


def sharded_store(root: Path, *, location: str = "end", checksum: bool = False) -> tuple[Path, np.ndarray]:
    """A 4x6 int32 array in one 4x6 shard of 2x3 inner chunks, uncompressed."""
    data = np.arange(24, dtype="<i4").reshape(4, 6) + 1
    index_codecs = [BytesCodec()] + ([Crc32cCodec()] if checksum else [])
    serializer = ShardingCodec(chunk_shape=(2, 3), codecs=[BytesCodec()], index_codecs=index_codecs,
                               index_location=location)  # zarr-python 3.1 and 3.4 both parse the name
    oracle = write_zarr(root, data, zarr_format=3, chunks=(4, 6), serializer=serializer, compressors=None)
    return oracle.store, data


def rewrite_index(shard: Path, location: str, change: Callable[[np.ndarray, int], None]) -> None:
    """Apply `change(index, shard_size)` to the (4, 2) uint64 index of an un-checksummed shard."""
    raw = bytearray(shard.read_bytes())
    start = 0 if location == "start" else len(raw) - 64
    index = np.frombuffer(bytes(raw[start:start + 64]), "<u8").reshape(4, 2).copy()
    change(index, len(raw))
    raw[start:start + 64] = index.tobytes()
    shard.write_bytes(bytes(raw))


def _past_end(index: np.ndarray, size: int) -> None:
    index[3] = (size - 4, 24)


def _huge_offset(index: np.ndarray, size: int) -> None:
    index[3] = (2**63, 24)


def _overflowing(index: np.ndarray, size: int) -> None:
    index[3] = (2**64 - 2, 24)


def _half_empty(index: np.ndarray, size: int) -> None:
    index[3] = (2**64 - 1, 24)


def _short_entry(index: np.ndarray, size: int) -> None:
    index[3, 1] -= 4


SHARD_DAMAGE: dict[str, Callable[[np.ndarray, int], None]] = {
    "past-end": _past_end, "huge-offset": _huge_offset, "overflowing": _overflowing,
    "half-empty": _half_empty, "short-entry": _short_entry,
}


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("damage", sorted(SHARD_DAMAGE))
def test_bad_shard_index(damage: str, location: str, tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    store, data = sharded_store(tmp_path, location=location)
    rewrite_index(store / "arr" / "c" / "0" / "0", location, SHARD_DAMAGE[damage])
    engine = open_engine(store)
    # Inner chunk (1, 1) holds rows 2-3, columns 3-5.
    assert_error(read_error(engine, "arr", 60, 72), ChunkError, str(store), "/arr", "arr/c/0/0")
    if damage == "past-end":  # the other damages make the whole index invalid
        assert engine.reader("arr").read(0, 12) == data[0, :3].tobytes()


def test_shard_index_checksum_mismatch(tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    store, _ = sharded_store(tmp_path, checksum=True)
    corrupt(store / "arr" / "c" / "0" / "0", lambda raw: raw[:-20] + bytes([raw[-20] ^ 1]) + raw[-19:])
    assert_error(read_error(open_engine(store), "arr"), ChunkError, str(store), "arr/c/0/0")


@pytest.mark.parametrize("location", ["start", "end"])
def test_truncated_shard(location: str, tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    store, _ = sharded_store(tmp_path, location=location)
    corrupt(store / "arr" / "c" / "0" / "0", lambda raw: raw[:40])
    assert_error(read_error(open_engine(store), "arr"), ChunkError, str(store), "/arr", "arr/c/0/0")


def test_bad_nested_shard(tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    data = np.arange(64, dtype="<u2").reshape(8, 8)
    serializer = ShardingCodec(chunk_shape=(4, 4), codecs=[ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec()],
                                                                         index_codecs=[BytesCodec()])])
    oracle = write_zarr(tmp_path, data, zarr_format=3, chunks=(8, 8), serializer=serializer, compressors=None)
    shard = oracle.store / "arr" / "c" / "0" / "0"
    outer = np.frombuffer(shard.read_bytes()[-68:-4], "<u8").reshape(4, 2)
    offset, nbytes = (int(v) for v in outer[0])
    # The first inner shard's own index (its last 64 bytes): point entry 0 past its end.
    corrupt(shard, lambda raw: raw[: offset + nbytes - 64] + struct.pack("<QQ", nbytes, 8) + raw[offset + nbytes - 48:])
    engine = open_engine(oracle.store)
    assert_error(read_error(engine, "arr", 0, 2), ChunkError, str(oracle.store), "arr/c/0/0")


# ------------------------------------------------------- decompression bombs


def gzip_of_zeros(nbytes: int) -> bytes:
    """A valid gzip member of `nbytes` zero bytes, built from identical fully-flushed deflate blocks."""
    piece = 1 << 24
    assert nbytes % piece == 0
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    zeros = bytes(piece)
    block = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(nbytes // piece):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    final_empty_block = b"\x03\x00"
    return header + block * (nbytes // piece) + final_empty_block + struct.pack("<II", crc, nbytes & 0xFFFFFFFF)


def zstd_without_content_size(frame: bytes) -> bytes:
    """The same zstd frame with its Frame_Content_Size removed (as streaming writers leave it)."""
    descriptor = frame[4]
    fcs_flag, single_segment = descriptor >> 6, (descriptor >> 5) & 1
    assert descriptor & 3 == 0  # no dictionary id
    fcs_bytes = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    body = frame[5 + (0 if single_segment else 1) + fcs_bytes:]
    window_log_27 = (27 - 10) << 3
    return frame[:4] + bytes([descriptor & 0b100, window_log_27]) + body


ZEROS = 64 << 20  # far beyond the 1 KiB chunk the metadata claims

BOMBS: dict[str, tuple[dict[str, Any] | None, Callable[[], bytes]]] = {
    "gzip-1GiB": ({"id": "gzip", "level": 1}, lambda: gzip_of_zeros(1 << 30)),
    "zlib": ({"id": "zlib", "level": 1}, lambda: zlib.compress(bytes(ZEROS), 1)),
    "zstd": ({"id": "zstd", "level": 1}, lambda: bytes(numcodecs.Zstd(level=1).encode(bytes(ZEROS)))),
    "zstd-no-content-size": ({"id": "zstd", "level": 1},
                             lambda: zstd_without_content_size(bytes(numcodecs.Zstd(level=1).encode(bytes(ZEROS))))),
    "blosc": ({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
              lambda: bytes(numcodecs.Blosc(cname="lz4").encode(bytes(ZEROS)))),
    "lz4": ({"id": "lz4"}, lambda: bytes(numcodecs.LZ4().encode(bytes(ZEROS)))),
    "bz2": ({"id": "bz2", "level": 1}, lambda: bytes(numcodecs.BZ2(level=1).encode(bytes(16 << 20)))),
    "lzma": ({"id": "lzma"}, lambda: bytes(numcodecs.LZMA(preset=0).encode(bytes(16 << 20)))),
}


@functools.cache
def bomb_payload(bomb: str) -> bytes:
    """Built once per session: both zarr formats read the same bytes."""
    return BOMBS[bomb][1]()


def bomb_store(root: Path, zarr_format: int, compressor: dict[str, Any], payload: bytes, side: int = 16) -> Path:
    """A single-chunk side x side int32 array (1 KiB by default) whose only chunk is `payload`."""
    if zarr_format == 2:
        doc = v2(shape=[side, side], chunks=[side, side], compressor=compressor)
        chunk_key = "0.0"
    else:
        codec = {"name": compressor["id"], "configuration": {k: v for k, v in compressor.items() if k != "id"}}
        if compressor["id"] not in ("gzip", "zstd"):
            codec["name"] = f"numcodecs.{compressor['id']}"
        doc = v3(shape=[side, side], chunk_grid=grid([side, side]), codecs=[{"name": "bytes"}, codec])
        chunk_key = "c/0/0"
    store = group_with(root, zarr_format, doc)
    (store / "victim" / chunk_key).parent.mkdir(parents=True, exist_ok=True)
    (store / "victim" / chunk_key).write_bytes(payload)
    return store


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_decompression_bomb(bomb: str, zarr_format: int, tmp_path: Path, open_engine: Callable[[Path], Engine]) -> None:
    store = bomb_store(tmp_path, zarr_format, BOMBS[bomb][0], bomb_payload(bomb))
    engine = open_engine(store)
    reader = engine.reader("victim")
    tracemalloc.start()
    try:
        with pytest.raises(ZarrfsError) as raised:
            reader.read(0, 1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_error(raised.value, ChunkError, str(store), "/victim")
    assert peak < 16 << 20, f"decoding the bomb allocated {peak >> 20} MiB"
    assert_good_sibling(engine)


@pytest.mark.parametrize("content", ["arange", "random"])
@pytest.mark.parametrize("side", [16, 300])
def test_zstd_without_content_size_decodes(content: str, side: int, tmp_path: Path,
                                           open_engine: Callable[[Path], Engine]) -> None:
    """Honest frames without a content size (compressed or raw blocks, one or many) still read."""
    rng = np.random.default_rng(side)
    data = (np.arange(side * side) if content == "arange" else rng.integers(0, 2**31, side * side)).astype("<i4")
    payload = zstd_without_content_size(bytes(numcodecs.Zstd(level=3).encode(data.tobytes())))
    store = bomb_store(tmp_path, 2, {"id": "zstd", "level": 3}, payload, side)
    assert open_engine(store).reader("victim").read(0, data.nbytes) == data.tobytes()
