#!/usr/bin/env python3
"""Build a corpus of broken Zarr stores, and a manifest of what zarrfs must answer for each.

    python tests/make_broken_corpus.py OUT_DIR      # writes OUT_DIR/*.zarr and OUT_DIR/manifest.json

Every broken node lives beside a healthy array `good` in a hierarchy of its
dialect (v2.zarr, v3.zarr, zp2.zarr, seed.zarr), so one mount serves many
cases and shows that siblings stay readable; v1 stores and broken roots are
stores of their own. Cases:

- metadata: invalid JSON; every field of every metadata format missing (when
  required) or replaced by a value of each wrong JSON type; negative, zero and
  overflowing shapes and chunk shapes; unknown codecs, data types, grids and
  must_understand extensions; JSON nested too deeply;
- chunk: for every codec, truncated, emptied, garbage and wrong-size chunks,
  and bit flips at fixed positions; decompression bombs;
- shard: indexes pointing outside the shard, into the index, overlapping,
  half empty, truncated, with a bad checksum;
- name: child names `..`, `.`, with `/`, NUL, invalid UTF-8, or too long;
- root: a broken root document.

The manifest lists each case: where it is, the error type zarrfs raises (its
errno follows from the type), words its message contains, and for chunk
cases which byte range to read and what outcome is allowed. Bit flips in a
codec without a checksum can decode to other bytes of the right size; no
reader can tell, so those cases allow "an error or the right size", and
codecs with checksums (gzip, zlib, bz2, lzma, crc32c) allow "an error or the
exact bytes".
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np

# ----------------------------------------------------------------- manifest


@dataclass(frozen=True)
class Case:
    id: str
    store: str  # relative to the corpus root
    node: str  # node path inside the store ('' for the root)
    stage: str  # "metadata", "chunk" or "name"
    error: str | None  # ZarrfsError subclass name; None: no error (a name that is skipped, say)
    words: tuple[str, ...] = ()  # the message contains each
    outcome: str = "error"  # chunk cases: "error", "error-or-exact", "error-or-size"
    read: tuple[int, int] | None = None  # chunk cases: byte range of the .raw to read
    chunk_key: str | None = None  # chunk cases: the key the error names
    expected_sha: str | None = None  # chunk cases: digest of the right bytes of `read`


@dataclass
class Corpus:
    root: Path
    cases: list[Case] = field(default_factory=list)

    def add(self, case: Case) -> None:
        self.cases.append(case)

    def write_manifest(self) -> Path:
        path = self.root / "manifest.json"
        path.write_text(json.dumps([asdict(c) for c in self.cases], indent=1))
        return path


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())


# A wrong value of each JSON type; a field lists the kinds it accepts.
MUTANTS: dict[str, Any] = {"string": "zz", "int": 7, "negative": -3, "float": 2.5, "bool": True, "null": None,
                           "list": [1, "a"], "object": {"q": 1}}

GOOD = np.arange(48, dtype="<i4").reshape(6, 8)  # the data of every `good` array and chunk case


@dataclass(frozen=True)
class Field:
    required: bool
    accepts: tuple[str, ...] = ()  # mutant kinds that are valid values
    unsupported: tuple[str, ...] = ()  # mutant kinds answered UnsupportedError (a name zarrfs does not know)


# ------------------------------------------------------------------- dialects


@dataclass(frozen=True)
class Dialect:
    """How one metadata format lays out a hierarchy, so cases can be written into it."""

    name: str
    array_doc: Callable[[], dict[str, Any]]  # a valid 6x8 int32 array document, uncompressed, fill 5
    fields: dict[str, Field]

    def store(self, corpus: Corpus) -> Path:
        return corpus.root / f"{self.name}.zarr"

    def init(self, corpus: Corpus) -> None:
        store = self.store(corpus)
        if self.name == "v2":
            write_json(store / ".zgroup", {"zarr_format": 2})
        elif self.name == "v3":
            write_json(store / "zarr.json", {"zarr_format": 3, "node_type": "group"})
        elif self.name == "zp2":
            write_json(store / "zarr.json", {"zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0",
                                             "metadata_encoding": "https://purl.org/zarr/spec/protocol/core/3.0",
                                             "metadata_key_suffix": ".json", "extensions": []})
            write_json(store / "meta" / "root.group.json", {"attributes": {}})
        else:
            write_json(store / "zarr.json", {"zarr_format": "https://purl.org/zarr/spec/core/3.0",
                                             "metadata_encoding": {"type": "json", "metadata_key_suffix": ".json"},
                                             "extensions": []})
            write_json(store / "meta" / "group.json", {"attributes": {}})
        self.write_array(corpus, "good", self.array_doc(), GOOD)

    def doc_path(self, corpus: Corpus, node: str) -> Path:
        store = self.store(corpus)
        return {"v2": store / node / ".zarray", "v3": store / node / "zarr.json",
                "zp2": store / "meta" / "root" / f"{node}.array.json",
                "seed": store / "meta" / f"{node}.array.json"}[self.name]

    def chunk_path(self, corpus: Corpus, node: str, coords: tuple[int, int]) -> Path:
        store = self.store(corpus)
        i, j = coords
        return {"v2": store / node / f"{i}.{j}", "v3": store / node / "c" / str(i) / str(j),
                "zp2": store / "data" / "root" / node / f"c{i}" / str(j),
                "seed": store / "data" / node / f"c{i}" / str(j)}[self.name]

    def chunk_key(self, node: str, coords: tuple[int, int]) -> str:
        i, j = coords
        return {"v2": f"{node}/{i}.{j}", "v3": f"{node}/c/{i}/{j}", "zp2": f"data/root/{node}/c{i}/{j}",
                "seed": f"data/{node}/c{i}/{j}"}[self.name]

    def write_array(self, corpus: Corpus, node: str, doc: Any, data: np.ndarray | None = None,
                    encode: Callable[[bytes], bytes] = bytes) -> None:
        write_json(self.doc_path(corpus, node), doc)
        if data is None:
            return
        for i in range(2):
            for j in range(2):
                chunk = np.ascontiguousarray(data[i * 3:(i + 1) * 3, j * 4:(j + 1) * 4])
                path = self.chunk_path(corpus, node, (i, j))
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(encode(chunk.tobytes()))


def _v2_doc() -> dict[str, Any]:
    return {"zarr_format": 2, "shape": [6, 8], "chunks": [3, 4], "dtype": "<i4", "compressor": None,
            "fill_value": 5, "order": "C", "filters": None, "dimension_separator": "."}


def _v3_doc() -> dict[str, Any]:
    return {"zarr_format": 3, "node_type": "array", "shape": [6, 8], "data_type": "int32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3, 4]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 5, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "attributes": {}, "storage_transformers": [], "dimension_names": ["y", "x"]}


def _zp2_doc() -> dict[str, Any]:
    return {"shape": [6, 8], "data_type": "<i4", "chunk_grid": {"type": "regular", "chunk_shape": [3, 4],
                                                                 "separator": "/"},
            "chunk_memory_layout": "C", "compressor": None, "fill_value": 5, "extensions": [], "attributes": {}}


def _seed_doc() -> dict[str, Any]:
    return {"shape": [6, 8], "data_type": "int32", "chunk_grid": {"type": "regular", "chunk_shape": [3, 4],
                                                                   "separator": "/"},
            "chunk_memory_layout": "C", "codecs": [], "fill_value": 5, "extensions": [], "attributes": {}}


_SHAPES = Field(True)
DIALECTS = [
    Dialect("v2", _v2_doc, {
        "zarr_format": Field(True), "shape": _SHAPES, "chunks": _SHAPES, "dtype": Field(True),
        "compressor": Field(False, ("null",)), "fill_value": Field(False, ("int", "negative", "float", "null")),
        "order": Field(False), "filters": Field(False, ("null",)), "dimension_separator": Field(False)}),
    Dialect("v3", _v3_doc, {
        "zarr_format": Field(True), "node_type": Field(True), "shape": _SHAPES,
        "data_type": Field(True, unsupported=("string",)), "chunk_grid": Field(True, unsupported=("string",)),
        "chunk_key_encoding": Field(False, ("null",), unsupported=("string",)),
        "fill_value": Field(False, ("int", "negative", "float", "null")), "codecs": Field(True),
        "attributes": Field(False, ("object",)), "storage_transformers": Field(False, ("null",)),
        "dimension_names": Field(False, ("null",))}),
    Dialect("zp2", _zp2_doc, {
        "shape": _SHAPES, "data_type": Field(True, unsupported=("string",)), "chunk_grid": Field(True),
        "chunk_memory_layout": Field(False), "compressor": Field(False, ("null",)),
        "fill_value": Field(False, ("int", "negative", "float", "null")), "extensions": Field(False, ("null",)),
        "attributes": Field(False, ("null", "object"))}),
    Dialect("seed", _seed_doc, {
        "shape": _SHAPES, "data_type": Field(True, unsupported=("string",)), "chunk_grid": Field(True),
        "chunk_memory_layout": Field(False), "codecs": Field(False, ("null",)),
        "fill_value": Field(False, ("int", "negative", "float", "null")), "extensions": Field(False, ("null",)),
        "attributes": Field(False, ("null", "object"))}),
]


# ------------------------------------------------------------------ metadata


def metadata_cases(corpus: Corpus, dialect: Dialect) -> None:
    store = dialect.store(corpus).name

    def add(case_id: str, doc: Any, error: str, *words: str) -> None:
        node = f"{dialect.name}-{case_id}"
        dialect.write_array(corpus, node, doc)
        corpus.add(Case(node, store, node, "metadata", error, words))

    for name, spec in dialect.fields.items():
        if spec.required:
            doc = dialect.array_doc()
            doc.pop(name)
            add(f"missing-{name}", doc, "MetadataError", name)
        for kind, value in MUTANTS.items():
            if kind in spec.accepts:
                continue
            doc = {**dialect.array_doc(), name: value}
            add(f"{name}-{kind}", doc, "UnsupportedError" if kind in spec.unsupported else "MetadataError", name)
    shape_key = "chunks" if dialect.name == "v2" else "chunk_grid"

    def with_chunks(chunks: list[int]) -> dict[str, Any]:
        doc = dialect.array_doc()
        if dialect.name == "v2":
            doc["chunks"] = chunks
        elif dialect.name == "v3":
            doc["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": chunks}}
        else:
            doc["chunk_grid"] = {**doc["chunk_grid"], "chunk_shape": chunks}
        return doc

    add("shape-negative", {**dialect.array_doc(), "shape": [-1, 8]}, "MetadataError", "shape", "[-1, 8]")
    add("shape-over-int64", {**dialect.array_doc(), "shape": [2**64, 1]}, "MetadataError", "shape", "int64")
    add("shape-overflows", {**dialect.array_doc(), "shape": [2**40, 2**40]}, "MetadataError", "2**63")
    add("shape-rank", {**dialect.array_doc(), "shape": [6]}, "MetadataError", "rank")
    add("chunks-zero", with_chunks([0, 4]), "MetadataError", "[0, 4]")
    add("chunks-negative", with_chunks([3, -4]), "MetadataError", "[3, -4]")
    add("chunks-overflow", with_chunks([2**40, 2**40]), "MetadataError", "2**63")
    add("chunks-empty", with_chunks([]), "MetadataError", "rank")
    del shape_key
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    add("json-too-deep", {**dialect.array_doc(), "attributes": {"deep": deep}}, "MetadataError", "levels deep")
    for case_id, raw in (("json-truncated", b'{"shape": [6, 8], "data_ty'), ("json-not-utf8", b'{"shape": "\xff"}'),
                         ("json-empty", b""), ("json-trailing", json.dumps(dialect.array_doc()).encode() + b"}x"),
                         ("json-not-object", b"[1, 2, 3]")):
        add(case_id, raw, "MetadataError", "JSON")
    for case_id, doc, words in unknown_extensions(dialect):
        # A codec name nobody registered has its own error class (same errno).
        unknown_codec = case_id.startswith(("unknown-codec", "unknown-compressor", "unknown-filter"))
        add(case_id, doc, "UnknownCodecError" if unknown_codec else "UnsupportedError", *words)


def unknown_extensions(dialect: Dialect) -> Iterator[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """Valid documents naming a codec, data type or extension zarrfs does not know."""
    doc = dialect.array_doc
    if dialect.name == "v2":
        yield "unknown-compressor", {**doc(), "compressor": {"id": "nosuchcodec"}}, ("nosuchcodec",)
        yield "unknown-filter", {**doc(), "filters": [{"id": "nosuchfilter"}]}, ("nosuchfilter",)
        yield "pickle-codec", {**doc(), "compressor": {"id": "pickle"}}, ("pickle",)
        yield "object-dtype", {**doc(), "dtype": "|O", "filters": None}, ("object codec",)
    elif dialect.name == "v3":
        yield "unknown-codec", {**doc(), "codecs": [{"name": "bytes"}, {"name": "nosuchcodec"}]}, ("nosuchcodec",)
        yield "unknown-codec-optional", {**doc(), "codecs": [{"name": "bytes"}, {
            "name": "nosuchcodec", "must_understand": False}]}, ("nosuchcodec",)
        yield "unknown-field", {**doc(), "future": {"x": 1}}, ("future",)
        yield "must-understand-true", {**doc(), "future": {"must_understand": True}}, ("future",)
        yield "unknown-transformer", {**doc(), "storage_transformers": [{"name": "bitshift"}]}, ("bitshift",)
        yield "unknown-grid", {**doc(), "chunk_grid": {"name": "rectilinear", "configuration": {}}}, ("rectilinear",)
        yield "unknown-data-type", {**doc(), "data_type": "int3"}, ("int3",)
        yield "vlen-string", {**doc(), "data_type": "string", "fill_value": "",
                              "codecs": [{"name": "bytes"}]}, ("variable-length",)
    elif dialect.name == "zp2":
        yield "unknown-compressor", {**doc(), "compressor": {
            "codec": "https://purl.org/zarr/spec/codec/nosuch/1.0", "configuration": {}}}, ("nosuch",)
        yield "unknown-transformer", {**doc(), "storage_transformers": [{
            "extension": "https://purl.org/zarr/spec/storage_transformers/nosuch/1.0"}]}, ("nosuch",)
    else:
        yield "unknown-codec", {**doc(), "codecs": [{"type": "https://purl.org/zarr/spec/codecs/nosuch/1.0"}]}, \
            ("nosuch",)
        yield "unknown-field", {**doc(), "future": 1}, ("future",)


# -------------------------------------------------------------------- chunks

# codec name -> (v2 compressor config or v3 codec list, encoder, has a checksum)
V2_CODECS: dict[str, tuple[dict[str, Any], bool]] = {
    "zlib": ({"id": "zlib", "level": 1}, True),
    "gzip": ({"id": "gzip", "level": 1}, True),
    "bz2": ({"id": "bz2", "level": 1}, True),
    "lzma": ({"id": "lzma"}, True),
    "zstd": ({"id": "zstd", "level": 1}, False),
    "lz4": ({"id": "lz4"}, False),
    "blosc-lz4": ({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}, False),
    "blosc-zstd": ({"id": "blosc", "cname": "zstd", "clevel": 5, "shuffle": 2}, False),
    "none": ({}, False),
}
V3_CODECS: dict[str, tuple[list[dict[str, Any]], bool]] = {
    "bytes": ([], False),
    "gzip": ([{"name": "gzip", "configuration": {"level": 1}}], True),
    "zstd": ([{"name": "zstd", "configuration": {"level": 1, "checksum": False}}], False),
    "blosc": ([{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                   "typesize": 4, "blocksize": 0}}], False),
    "crc32c": ([{"name": "crc32c"}], True),
    "numcodecs-zlib": ([{"name": "numcodecs.zlib", "configuration": {"level": 1}}], True),
    "numcodecs-bz2": ([{"name": "numcodecs.bz2", "configuration": {"level": 1}}], True),
    "numcodecs-lzma": ([{"name": "numcodecs.lzma", "configuration": {}}], True),
    "numcodecs-lz4": ([{"name": "numcodecs.lz4", "configuration": {}}], False),
    "delta-zlib": ([{"name": "numcodecs.delta", "configuration": {"dtype": "<i4"}},
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "numcodecs.zlib", "configuration": {"level": 1}}], True),
}

DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "truncated-half": lambda raw: raw[: len(raw) // 2],
    "truncated-1": lambda raw: raw[:-1],
    "empty": lambda raw: b"",
    "garbage": lambda raw: bytes(range(7, 7 + 40)),
    "extended": lambda raw: raw + b"\x00" * 7,
    "flip-first": lambda raw: _flip(raw, 0),
    "flip-middle": lambda raw: _flip(raw, len(raw) // 2),
    "flip-last": lambda raw: _flip(raw, len(raw) - 1),
}
FLIPS = {"flip-first", "flip-middle", "flip-last"}
# The one damaged chunk (1, 1) holds rows 3-5, columns 4-7: read row 4 of it.
CHUNK_READ = (4 * 32 + 16, 4 * 32 + 32)


def _flip(raw: bytes, position: int) -> bytes:
    return raw[:position] + bytes([raw[position] ^ 0x10]) + raw[position + 1:] if raw else raw


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _v2_encoder(config: dict[str, Any]) -> Callable[[bytes], bytes]:
    if not config:
        return bytes
    codec = numcodecs.get_codec(dict(config))
    return lambda raw: bytes(codec.encode(raw))


def _v3_encoder(codecs: list[dict[str, Any]]) -> Callable[[bytes], bytes]:
    stages: list[Callable[[bytes], bytes]] = []
    for spec in codecs:
        name, config = spec["name"], spec.get("configuration", {})
        if name == "bytes":
            continue
        if name == "crc32c":
            import google_crc32c

            stages.append(lambda raw: raw + struct.pack("<I", google_crc32c.value(raw)))
            continue
        codec_id = name.removeprefix("numcodecs.")
        params = {k: v for k, v in config.items() if k != "checksum"}
        if codec_id == "blosc":
            params["shuffle"] = 1
            params.pop("typesize", None)
        codec = numcodecs.get_codec({"id": codec_id, **params})
        if codec_id == "delta":
            stages.append(lambda raw, c=codec: bytes(c.encode(np.frombuffer(raw, "<i4"))))
        else:
            stages.append(lambda raw, c=codec: bytes(c.encode(raw)))

    def encode(raw: bytes) -> bytes:
        for stage in stages:
            raw = stage(raw)
        return raw

    return encode


def chunk_cases(corpus: Corpus) -> None:
    expected = GOOD[4, 4:8].tobytes()
    for dialect, codecs in ((DIALECTS[0], V2_CODECS), (DIALECTS[1], V3_CODECS)):
        store = dialect.store(corpus).name
        for codec_name, (spec, checked) in codecs.items():
            if dialect.name == "v2":
                doc = {**dialect.array_doc(), "compressor": spec or None}
                encode = _v2_encoder(spec)  # type: ignore[arg-type]
            else:
                has_bytes = any(s["name"] == "bytes" for s in spec)  # type: ignore[index]
                doc = {**dialect.array_doc(),
                       "codecs": (spec if has_bytes else [{"name": "bytes", "configuration": {"endian": "little"}},
                                                          *spec])}
                encode = _v3_encoder(spec)  # type: ignore[arg-type]
            for damage, change in DAMAGES.items():
                node = f"{dialect.name}-chunk-{codec_name}-{damage}"
                dialect.write_array(corpus, node, doc, GOOD, encode)
                path = dialect.chunk_path(corpus, node, (1, 1))
                path.write_bytes(change(path.read_bytes()))
                # Bytes after a complete stream change nothing decoded: the exact bytes are right too.
                outcome = "error-or-exact" if damage == "extended" else \
                    "error" if damage not in FLIPS else ("error-or-exact" if checked else "error-or-size")
                corpus.add(Case(node, store, node, "chunk", "ChunkError", (), outcome, CHUNK_READ,
                                dialect.chunk_key(node, (1, 1)), _digest(expected)))
            node = f"{dialect.name}-chunk-{codec_name}-wrong-size"
            dialect.write_array(corpus, node, doc, GOOD, encode)
            dialect.chunk_path(corpus, node, (1, 1)).write_bytes(encode(GOOD[:2, :4].tobytes()))
            corpus.add(Case(node, store, node, "chunk", "ChunkError", (), "error", CHUNK_READ,
                            dialect.chunk_key(node, (1, 1)), _digest(expected)))
    bomb_cases(corpus)
    shard_cases(corpus)


# ------------------------------------------------------------------- bombs

BOMB_BYTES = 64 << 20  # the chunk is 48 bytes


def _gzip_of_zeros(nbytes: int) -> bytes:
    """A valid gzip member of `nbytes` zeros from repeated fully flushed deflate blocks (1 GiB -> ~1 MB)."""
    piece = 1 << 24
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    block = deflate.compress(bytes(piece)) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(nbytes // piece):
        crc = zlib.crc32(bytes(piece), crc)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + block * (nbytes // piece) + b"\x03\x00"
            + struct.pack("<II", crc, nbytes & 0xFFFFFFFF))


BOMBS: dict[str, tuple[dict[str, Any], Callable[[], bytes]]] = {
    "gzip-1GiB": ({"id": "gzip", "level": 1}, lambda: _gzip_of_zeros(1 << 30)),
    "zlib": ({"id": "zlib", "level": 1}, lambda: zlib.compress(bytes(BOMB_BYTES), 1)),
    "zstd": ({"id": "zstd", "level": 1}, lambda: bytes(numcodecs.Zstd(level=1).encode(bytes(BOMB_BYTES)))),
    "blosc": ({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1},
              lambda: bytes(numcodecs.Blosc(cname="lz4").encode(bytes(BOMB_BYTES)))),
    "lz4": ({"id": "lz4"}, lambda: bytes(numcodecs.LZ4().encode(bytes(BOMB_BYTES)))),
    "bz2": ({"id": "bz2", "level": 1}, lambda: bytes(numcodecs.BZ2(level=1).encode(bytes(16 << 20)))),
    "lzma": ({"id": "lzma"}, lambda: bytes(numcodecs.LZMA(preset=0).encode(bytes(16 << 20)))),
}


def bomb_cases(corpus: Corpus) -> None:
    dialect = DIALECTS[0]
    for name, (config, make) in BOMBS.items():
        node = f"v2-bomb-{name}"
        doc = {**dialect.array_doc(), "compressor": config}
        dialect.write_array(corpus, node, doc, GOOD, _v2_encoder(config))
        dialect.chunk_path(corpus, node, (1, 1)).write_bytes(make())
        corpus.add(Case(node, "v2.zarr", node, "chunk", "ChunkError", (), "error", CHUNK_READ,
                        dialect.chunk_key(node, (1, 1)), _digest(GOOD[4, 4:8].tobytes())))


# ------------------------------------------------------------------- shards


def _shard(data: np.ndarray, location: str, checksum: bool) -> tuple[bytes, np.ndarray]:
    """One 6x8 shard of four 3x4 inner chunks, uncompressed: (shard bytes, its (4, 2) index)."""
    chunks = [np.ascontiguousarray(data[i * 3:(i + 1) * 3, j * 4:(j + 1) * 4]).tobytes()
              for i in range(2) for j in range(2)]
    index_nbytes = 64 + (4 if checksum else 0)
    base = index_nbytes if location == "start" else 0
    index = np.array([(base + 48 * k, 48) for k in range(4)], "<u8")
    return b"".join(chunks), index


def _shard_bytes(body: bytes, index: np.ndarray, location: str, checksum: bool) -> bytes:
    raw_index = index.astype("<u8").tobytes()
    if checksum:
        import google_crc32c

        raw_index += struct.pack("<I", google_crc32c.value(raw_index))
    return raw_index + body if location == "start" else body + raw_index


SHARD_DAMAGE: dict[str, Callable[[np.ndarray, int], np.ndarray | None]] = {
    "past-end": lambda index, size: _set(index, 3, (size - 4, 48)),
    "huge-offset": lambda index, size: _set(index, 3, (2**63, 48)),
    "wrapping": lambda index, size: _set(index, 3, (2**64 - 2, 48)),
    "half-empty": lambda index, size: _set(index, 3, (2**64 - 1, 48)),
    "overlapping": lambda index, size: _set(index, 3, (int(index[2, 0]) + 8, 48)),
    "short-entry": lambda index, size: _set(index, 3, (int(index[3, 0]), 44)),
}


def _set(index: np.ndarray, entry: int, value: tuple[int, int]) -> np.ndarray:
    out = index.copy()
    out[entry] = value
    return out


def shard_cases(corpus: Corpus) -> None:
    dialect = DIALECTS[1]
    read_last_chunk = (4 * 32 + 16, 4 * 32 + 32)  # row 4, columns 4-7: inner chunk (1, 1)
    for location in ("start", "end"):
        for checksum in (False, True):
            index_codecs = [{"name": "bytes", "configuration": {"endian": "little"}}] + (
                [{"name": "crc32c"}] if checksum else [])
            doc = {**dialect.array_doc(),
                   "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [6, 8]}},
                   "codecs": [{"name": "sharding_indexed", "configuration": {
                       "chunk_shape": [3, 4], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                       "index_codecs": index_codecs, "index_location": location}}]}
            body, index = _shard(GOOD, location, checksum)
            damages: dict[str, Callable[[], bytes]] = {
                name: (lambda change=change: _shard_bytes(body, change(index, len(body) + index.size * 8),
                                                          location, checksum))
                for name, change in SHARD_DAMAGE.items()}
            damages["truncated"] = lambda: _shard_bytes(body, index, location, checksum)[:40]
            damages["truncated-index"] = lambda: _shard_bytes(body, index, location, checksum)[:-3] \
                if location == "end" else _shard_bytes(body, index, location, checksum)[:60]
            if checksum:
                damages["index-flip"] = lambda: _flip(_shard_bytes(body, index, location, checksum),
                                                      len(body) + 5 if location == "end" else 5)
            for damage, make in damages.items():
                node = f"v3-shard-{location}{'-crc' if checksum else ''}-{damage}"
                dialect.write_array(corpus, node, doc)
                path = dialect.store(corpus) / node / "c" / "0" / "0"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(make())
                corpus.add(Case(node, "v3.zarr", node, "chunk", "ChunkError", (), "error", read_last_chunk,
                                f"{node}/c/0/0", _digest(GOOD[4, 4:8].tobytes())))


# -------------------------------------------------------------------- names


BAD_NAMES = ["..", ".", "a\x00b", "x" * 300, "y" * 5000, "back\\slash"]


def name_cases(corpus: Corpus) -> None:
    """Consolidated metadata naming children that must never become path components."""
    group = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    array = {**_v3_doc(), "attributes": {}}
    metadata = {name: group for name in BAD_NAMES} | {"good": array} | {"up/../..": group}
    write_json(corpus.root / "names-v3.zarr" / "zarr.json", {
        **group, "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": metadata}})
    _write_chunks(corpus.root / "names-v3.zarr" / "good", "v3")
    v2_meta: dict[str, Any] = {".zgroup": {"zarr_format": 2}, "good/.zarray": _v2_doc()}
    v2_meta |= {f"{name}/.zgroup": {"zarr_format": 2} for name in BAD_NAMES}
    v2_meta["../../etc/.zgroup"] = {"zarr_format": 2}
    write_json(corpus.root / "names-v2.zarr" / ".zmetadata", {"zarr_consolidated_format": 1, "metadata": v2_meta})
    write_json(corpus.root / "names-v2.zarr" / ".zgroup", {"zarr_format": 2})
    write_json(corpus.root / "names-v2.zarr" / "good" / ".zarray", _v2_doc())
    _write_chunks(corpus.root / "names-v2.zarr" / "good", "v2")
    _write_chunks(corpus.root / "names-v2-local.zarr" / "good", "v2")
    # Draft dialects take names from file names: 'meta/root/..array.json' names '.'.
    zp2 = corpus.root / "names-zp2.zarr"
    write_json(zp2 / "zarr.json", {"zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0",
                                   "metadata_encoding": "https://purl.org/zarr/spec/protocol/core/3.0",
                                   "metadata_key_suffix": ".json", "extensions": []})
    for name in ("..", ".", "z" * 244):
        write_json(zp2 / "meta" / "root" / f"{name}.group.json", {"attributes": {}})
    write_json(zp2 / "meta" / "root" / "good.array.json", _zp2_doc())
    _write_chunks(zp2 / "data" / "root" / "good", "zp2")
    undecodable = os.fsencode(corpus.root / "names-v2-local.zarr") + b"/caf\xe9"
    write_json(corpus.root / "names-v2-local.zarr" / ".zgroup", {"zarr_format": 2})
    write_json(corpus.root / "names-v2-local.zarr" / "good" / ".zarray", _v2_doc())
    local_names = ["caf\udce9"]
    try:
        os.makedirs(undecodable, exist_ok=True)
        with open(undecodable + b"/.zgroup", "wb") as f:
            f.write(b'{"zarr_format": 2}')
    except OSError:  # a file system that insists on UTF-8 names cannot hold this case
        local_names = []
    for store, names in (("names-v3.zarr", BAD_NAMES + ["up/../.."]), ("names-v2.zarr", BAD_NAMES),
                         ("names-zp2.zarr", ["..", ".", "z" * 244]), ("names-v2-local.zarr", local_names)):
        for name in names:
            corpus.add(Case(f"{store}:{name[:20]!r}", store, name, "name", None, ("not a valid node name",)))


def _write_chunks(array_dir: Path, dialect: str) -> None:
    for i in range(2):
        for j in range(2):
            path = array_dir / {"v3": f"c/{i}/{j}", "zp2": f"c{i}/{j}", "v2": f"{i}.{j}"}[dialect]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(np.ascontiguousarray(GOOD[i * 3:(i + 1) * 3, j * 4:(j + 1) * 4]).tobytes())


# ---------------------------------------------------------------- v1, roots


def v1_cases(corpus: Corpus) -> None:
    base = {"zarr_format": 1, "shape": [6, 8], "chunks": [3, 4], "dtype": "<i4", "compression": "zlib",
            "compression_opts": 1, "fill_value": 5, "order": "C"}
    variants: dict[str, tuple[dict[str, Any], str, tuple[str, ...]]] = {
        "shape-string": ({**base, "shape": "6x8"}, "MetadataError", ("shape",)),
        "chunks-zero": ({**base, "chunks": [0, 4]}, "MetadataError", ("chunks",)),
        "dtype-unknown": ({**base, "dtype": "<x9"}, "MetadataError", ("dtype",)),
        "order": ({**base, "order": "K"}, "MetadataError", ("order",)),
        "compression-unknown": ({**base, "compression": "nosuch"}, "UnsupportedError", ("nosuch",)),
        "compression-opts-string": ({**base, "compression": "blosc", "compression_opts": "fast"},
                                    "MetadataError", ("compression_opts",)),
        "fill-wrong-type": ({**base, "fill_value": "lots"}, "MetadataError", ("fill_value",)),
        "overflow": ({**base, "shape": [2**40, 2**40]}, "MetadataError", ("2**63",)),
    }
    for name, (doc, error, words) in variants.items():
        store = f"v1-{name}.zarr"
        write_json(corpus.root / store / "meta", doc)
        write_json(corpus.root / store / "attrs", {})
        corpus.add(Case(f"v1-{name}", store, "", "metadata", error, words))


def root_cases(corpus: Corpus) -> None:
    roots: dict[str, tuple[bytes, str, tuple[str, ...]]] = {
        "root-invalid-json": (b"{nope", "MetadataError", ("invalid JSON",)),
        "root-unknown-format": (b'{"zarr_format": "https://example.org/zarr/9"}', "MetadataError",
                                ("zarr_format",)),
        "root-must-understand": (b'{"zarr_format": 3, "node_type": "group", "extra": {"y": 1}}',
                                 "UnsupportedError", ("extra",)),
        "root-too-deep": (b'{"zarr_format": 3, "node_type": "group", "attributes": {"a": ' + b"[" * 5000
                          + b"]" * 5000 + b"}}", "MetadataError", ("levels deep",)),
        "root-not-object": (b'"group"', "MetadataError", ("JSON object",)),
    }
    for name, (raw, error, words) in roots.items():
        write_json(corpus.root / f"{name}.zarr" / "zarr.json", raw)
        corpus.add(Case(name, f"{name}.zarr", "", "metadata", error, words))


def build(root: Path) -> Corpus:
    corpus = Corpus(root)
    root.mkdir(parents=True, exist_ok=True)
    for dialect in DIALECTS:
        dialect.init(corpus)
        metadata_cases(corpus, dialect)
    chunk_cases(corpus)
    name_cases(corpus)
    v1_cases(corpus)
    root_cases(corpus)
    corpus.write_manifest()
    return corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="an empty or new directory")
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty")
    corpus = build(args.out)
    stages: dict[str, int] = {}
    for case in corpus.cases:
        stages[case.stage] = stages.get(case.stage, 0) + 1
    print(f"{len(corpus.cases)} cases in {args.out} ({', '.join(f'{n} {s}' for s, n in sorted(stages.items()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
