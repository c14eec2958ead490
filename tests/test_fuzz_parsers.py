"""Fuzzing with hypothesis: metadata parsers, the shard index parser and the chunk decoders.

Whatever the input, the only exceptions allowed out are zarrfs's typed
errors (MetadataError/UnsupportedError for metadata, ChunkError for chunks);
what is accepted must be consistent (sizes, index ranges inside the shard).
Inputs are random JSON, valid documents with random parts replaced, and
valid encodings with random bytes changed.
"""

from __future__ import annotations

import copy
import os
import struct
from typing import Any

import google_crc32c
import numcodecs
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budget import examples
from zarrfs.codecs import V2ChunkCodec, V3ChunkCodec, parse_codecs
from zarrfs.codecs.layout_codecs import BytesCodec
from zarrfs.codecs.sharding import EMPTY, ShardingCodec
from zarrfs.errors import ChunkError, MetadataError, UnsupportedError
from zarrfs.model.v3_drafts import parse_seed_array, parse_zp2_array
from zarrfs.model.meta import ArrayMeta, parse_json
from zarrfs.model.v2 import parse_v1_array, parse_v2_array
from zarrfs.model.v3 import parse_v3_array

from make_broken_corpus import V2_CODECS, V3_CODECS, _seed_doc, _v2_doc, _v3_doc, _zp2_doc

# A long run: ZARRFS_FUZZ_EXAMPLES=20000 python -m pytest tests/test_fuzz_parsers.py --hypothesis-show-statistics
FUZZ = settings(max_examples=int(os.environ.get("ZARRFS_FUZZ_EXAMPLES", examples(400))), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
METADATA_ERRORS = (MetadataError, UnsupportedError)

json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | \
    st.text(max_size=12) | st.sampled_from(["NaN", "Infinity", "0x7fc00000", "bytes", "regular", "<i4", "|O",
                                            "int32", "float64", "r16", "c", "C", "F", "/", ".", "little"])
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.text(max_size=8) | st.sampled_from(
                               ["name", "configuration", "id", "chunk_shape", "must_understand", "type"]),
                               inner, max_size=4), max_leaves=12)


def v1_doc() -> dict[str, Any]:
    return {"zarr_format": 1, "shape": [6, 8], "chunks": [3, 4], "dtype": "<i4", "compression": "zlib",
            "compression_opts": 1, "fill_value": 5, "order": "C"}


def v3_rich_doc() -> dict[str, Any]:
    """A v3 document that exercises more of the parser: sharding, transpose, blosc."""
    return {**_v3_doc(), "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                                    {"name": "sharding_indexed", "configuration": {
                                        "chunk_shape": [3, 2], "codecs": [
                                            {"name": "bytes", "configuration": {"endian": "big"}},
                                            {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 1,
                                                                                "shuffle": "bitshuffle"}}],
                                        "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}],
                                        "index_location": "start"}}]}


PARSERS = {
    "v1": (v1_doc, lambda doc: parse_v1_array(doc, {}, "fuzz")),
    "v2": (_v2_doc, lambda doc: parse_v2_array(doc, "a", "a", {}, "fuzz")),
    "v3": (_v3_doc, lambda doc: parse_v3_array(doc, "a", "a", "fuzz")),
    "v3-rich": (v3_rich_doc, lambda doc: parse_v3_array(doc, "a", "a", "fuzz")),
    "zp2": (_zp2_doc, lambda doc: parse_zp2_array(doc, "a", "fuzz")),
    "seed": (_seed_doc, lambda doc: parse_seed_array(doc, "a", "fuzz")),
}


def check_parse(parser: Any, doc: Any) -> None:
    try:
        meta = parser(doc)
    except METADATA_ERRORS:
        return
    assert isinstance(meta, ArrayMeta)
    assert all(s >= 0 for s in meta.shape) and all(c > 0 for c in meta.chunk_shape)
    assert len(meta.shape) == len(meta.chunk_shape) and meta.nbytes < 2**63
    assert meta.fill_value.shape == () and meta.fill_value.dtype == meta.dtype
    meta.describe()  # the .json sidecar must build for anything accepted
    if meta.ndim:
        meta.chunk_key(tuple(0 for _ in meta.shape))


@FUZZ
@given(st.sampled_from(sorted(PARSERS)), json_values)
def test_random_json_documents(dialect: str, doc: Any) -> None:
    check_parse(PARSERS[dialect][1], doc)


@st.composite
def mutated(draw: st.DrawFn, base: Any) -> Any:
    """`base` with one to three random places (at any depth) replaced, deleted or added to."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        parent, key = _random_place(draw, doc)
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace" or parent is None:
            value = draw(json_values)
            if parent is None:
                doc = value
            else:
                parent[key] = value
        elif action == "delete":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(json_values)
        else:
            parent.append(draw(json_values))
    return doc


def _random_place(draw: st.DrawFn, doc: Any) -> tuple[Any, Any]:
    """(container, key) of a random element, walking down a random path; (None, None) for the root."""
    parent, key, node = None, None, doc
    while isinstance(node, (dict, list)) and node and draw(st.booleans()):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        parent, key = node, draw(st.sampled_from(keys))
        node = node[key]
    return parent, key


@FUZZ
@given(st.data())
def test_mutated_valid_documents(data: st.DataObject) -> None:
    dialect = data.draw(st.sampled_from(sorted(PARSERS)))
    base, parser = PARSERS[dialect]
    check_parse(parser, data.draw(mutated(base())))


@FUZZ
@given(st.binary(max_size=200) | st.text(max_size=100).map(str.encode))
def test_random_bytes_as_json(raw: bytes) -> None:
    try:
        parse_json(raw, "fuzz")
    except MetadataError:
        pass


# ----------------------------------------------------------------- shard index


@st.composite
def sharding_codecs(draw: st.DrawFn) -> tuple[ShardingCodec, tuple[int, ...]]:
    ndim = draw(st.integers(1, 3))
    inner = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    per_shard = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    shard = tuple(i * n for i, n in zip(inner, per_shard, strict=True))
    checksum = draw(st.booleans())
    index_docs = [{"name": "bytes"}] + ([{"name": "crc32c"}] if checksum else [])
    index_codec = parse_codecs(index_docs, (*per_shard, 2), np.zeros((), "<u8"), "fuzz")
    codec = ShardingCodec(chunk_shape=inner, codec=V3ChunkCodec((), BytesCodec("little"), ()),
                          index_codec=index_codec, index_location=draw(st.sampled_from(["start", "end"])),
                          fill_value=np.zeros((), "<u2"))
    return codec, shard


def _index_bytes(entries: list[tuple[int, int]], checksum: bool) -> bytes:
    raw = b"".join(struct.pack("<QQ", offset % 2**64, size % 2**64) for offset, size in entries)
    return raw + (struct.pack("<I", google_crc32c.value(raw)) if checksum else b"")


offsets = st.integers(0, 300) | st.sampled_from([2**63, 2**64 - 1, 2**64 - 2, 2**63 - 1])


@FUZZ
@given(sharding_codecs(), st.data())
def test_shard_index(sharding: tuple[ShardingCodec, tuple[int, ...]], data: st.DataObject) -> None:
    codec, shard_shape = sharding
    n = int(np.prod(codec.chunks_per_shard(shard_shape)))
    checksum = bool(codec.index_codec.bytes_codecs)
    entries = data.draw(st.lists(st.tuples(offsets, offsets), min_size=n, max_size=n))
    raw = data.draw(st.sampled_from(["exact", "random", "short"]))
    index_raw = _index_bytes(entries, checksum) if raw == "exact" else \
        data.draw(st.binary(min_size=codec.index_nbytes(shard_shape), max_size=codec.index_nbytes(shard_shape))) \
        if raw == "random" else _index_bytes(entries, checksum)[:-1]
    shard_size = data.draw(st.none() | st.integers(0, 400))
    try:
        index = codec.parse_index(index_raw, shard_shape, shard_size)
    except ChunkError:
        return
    used = [(int(o), int(s)) for o, s in index if not (o == EMPTY and s == EMPTY)]
    low = codec.index_nbytes(shard_shape) if codec.index_location == "start" else 0
    high = None if shard_size is None else (
        shard_size if codec.index_location == "start" else shard_size - codec.index_nbytes(shard_shape))
    for offset, size in used:
        assert offset >= low and offset + size < 2**64
        assert high is None or offset + size <= high
    ranges = sorted(set(used))
    for (a_start, a_stop), (b_start, _) in zip(ranges, ranges[1:]):
        assert b_start >= a_start + a_stop or (a_start, a_stop) == (b_start, _), "accepted overlapping entries"


@FUZZ
@given(sharding_codecs(), st.binary(max_size=600))
def test_whole_shard_decode(sharding: tuple[ShardingCodec, tuple[int, ...]], raw: bytes) -> None:
    codec, shard_shape = sharding
    try:
        out = codec.decode(raw, shard_shape, np.dtype("<u2"))
    except ChunkError:
        return
    assert out.shape == shard_shape


# ----------------------------------------------------------------- chunk codecs

CHUNK = np.arange(48, dtype="<i4").reshape(6, 8) % 7  # compressible


def _v2_case(name: str) -> tuple[V2ChunkCodec, bytes]:
    config, _ = V2_CODECS[name]
    codec = numcodecs.get_codec(dict(config)) if config else None
    pipeline = V2ChunkCodec(codec)
    return pipeline, bytes(codec.encode(CHUNK.tobytes())) if codec else CHUNK.tobytes()


def _v3_case(name: str) -> tuple[V3ChunkCodec, bytes]:
    from make_broken_corpus import _v3_encoder

    spec, _ = V3_CODECS[name]
    docs = spec if any(s["name"] == "bytes" for s in spec) else [{"name": "bytes"}, *spec]
    return parse_codecs(docs, CHUNK.shape, np.zeros((), "<i4"), "fuzz"), _v3_encoder(spec)(CHUNK.tobytes())


CODEC_CASES = {f"v2-{n}": n for n in V2_CODECS} | {f"v3-{n}": n for n in V3_CODECS}


@st.composite
def damaged(draw: st.DrawFn, encoded: bytes) -> bytes:
    raw = bytearray(encoded)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "cut", "insert"]))
        if not raw:
            break
        position = draw(st.integers(0, len(raw) - 1))
        if kind == "flip":
            raw[position] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            raw[position] = draw(st.integers(0, 255))
        elif kind == "cut":
            del raw[position:]
        else:
            raw[position:position] = draw(st.binary(min_size=1, max_size=8))
    return bytes(raw)


@FUZZ
@given(st.data())
def test_damaged_chunks(data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(sorted(CODEC_CASES)))
    pipeline, encoded = (_v2_case if case.startswith("v2-") else _v3_case)(CODEC_CASES[case])
    raw = data.draw(damaged(encoded) | st.binary(max_size=100))
    try:
        out = pipeline.decode(raw, CHUNK.shape, np.dtype("<i4"))
    except ChunkError:
        return
    assert out.shape == CHUNK.shape and out.dtype == np.dtype("<i4")  # never a chunk of another size
