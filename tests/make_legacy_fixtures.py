#!/usr/bin/env python3
"""Generate the legacy Zarr test fixtures under ``tests/fixtures/legacy/``.

Three families of stores that modern writers (zarr-python 3) cannot produce:

* ``v1/<name>/``        Zarr v1 arrays (one array per store: ``meta``, ``attrs``,
                        chunk keys ``"i.j"``), hand-written from the v1 spec with
                        numcodecs / zlib / bz2 / lzma.
* ``zp2/<name>.zr3/``   the 2022 "v3" layout as zarr-python 2.18 really wrote it
                        (``ZARR_V3_EXPERIMENTAL_API=1``, ``ZARR_V3_SHARDING=1``,
                        ``DirectoryStoreV3``), written by zarr 2.18 itself.
* ``seed/<name>/``      hand-made stores following the Dec 2022 draft spec bundle
                        (core/3.0 editor's draft: ``meta/group.json``,
                        ``meta/foo/bar.array.json``, ``data/foo/bar/c0/1``,
                        ``codecs`` list, sharding storage transformer).

``manifest.json`` lists one entry per array (store, node, format, expected .npy,
notes, plus dtype/shape/chunks/codec/fill/missing-chunk details) and one entry
per group (``"kind": "group"`` with its sorted ``children``).  The expected
``.npy`` files live under ``expected/`` and hold the exact array in the array's
own dtype and byte order.  For zp2 stores the values are what zarr 2.18 reads
back (the oracle); for hand-made stores they are the values that were written.

How to run (from the repository root)::

    /work/venv/bin/python tests/make_legacy_fixtures.py

The zp2 part needs a second interpreter with ``zarr==2.18.*`` (+ numcodecs<0.16
and pytest, which zarr 2.18 imports when it decodes sharded metadata).  By
default the script uses ``/work/venv-zp2/bin/python`` and creates that venv
(``python3 -m venv`` + ``pip install``) when it is missing.  Options:

    --python PATH     interpreter that has zarr 2.18 (skips venv creation)
    --zp2-venv DIR    where to create/find the zp2 venv (default /work/venv-zp2,
                      or $ZARRFS_ZP2_VENV)
    --out DIR         output directory (default tests/fixtures/legacy)
    --check-only      do not regenerate; only re-run the self-checks

The generator is deterministic (fixed RNG seeds, gzip mtime 0, sorted JSON) and
idempotent: it deletes and rebuilds the output directory on every run.  After
writing it runs self-checks: every array is re-decoded from the files on disk
by a small independent decoder in this script and compared bit-for-bit with
its ``.npy``; group children are re-discovered by listing; the v1 stores are
additionally cross-checked with zarr 2.18's own ``migrate_1to2`` + reader, and
the zp2 stores are compared with what zarr 2.18 reads back.

Internal modes (used by the script itself, run under the zp2 interpreter):
``--zp2-worker DIR`` writes the zp2 stores; ``--zp2-v1check DIR`` cross-checks
the v1 stores.
"""

from __future__ import annotations

import argparse
import base64
import bz2
import gzip
import itertools
import json
import lzma
import math
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "fixtures" / "legacy"
DEFAULT_ZP2_VENV = Path(os.environ.get("ZARRFS_ZP2_VENV", "/work/venv-zp2"))

SEED_CORE_URI = "https://purl.org/zarr/spec/core/3.0"
# URIs as the seed bundle (Dec 2022) writes them in its metadata examples.
SEED_GZIP_URI = "https://purl.org/zarr/spec/codecs/gzip/1.0"
SEED_BLOSC_URI = "https://purl.org/zarr/spec/codecs/blosc/1.0"
SEED_ENDIAN_URI = "https://purl.org/zarr/spec/codecs/endian/1.0"
SEED_SHARDING_URI = "https://purl.org/zarr/spec/extensions/storage_transformers/sharding/1.0"
# Variants that also appear in the seed text (used only in seed/variants).
SEED_GZIP_URI_ALT = "https://purl.org/zarr/spec/codec/gzip"  # gzip codec page example
SEED_SHARDING_URI_ALT = "https://purl.org/zarr/spec/extensions/storage-transformers/sharding/1.0"

SEED_DTYPES = {
    "bool": "|b1", "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
    "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
    "float16": "<f2", "float32": "<f4", "float64": "<f8",
    "complex64": "<c8", "complex128": "<c16",
}
U64MAX = 2**64 - 1


# ----------------------------------------------------------------------------
# small helpers shared by all writers
# ----------------------------------------------------------------------------

def grid_shape(shape, chunks):
    return tuple(math.ceil(s / c) for s, c in zip(shape, chunks))


def chunk_slices(idx, chunks, shape):
    return tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, shape))


def all_chunk_indices(shape, chunks):
    return list(itertools.product(*[range(n) for n in grid_shape(shape, chunks)]))


def dtype_json(dt: np.dtype):
    """dtype as the manifest records it: typestr, or descr list for structured."""
    if dt.fields is not None:
        return [[name, dt.fields[name][0].str] for name in dt.names]
    return dt.str


def full_of(shape, dtype, value):
    a = np.zeros(shape, dtype=dtype)
    if value is None:
        return a
    if dtype.fields is not None:
        if np.isscalar(value) and value == 0:
            return a
        for name, v in zip(dtype.names, value):
            a[name] = v
    else:
        a[...] = value
    return a


def junk_value(dtype: np.dtype):
    """A conspicuous value for the overhang of edge chunks (contents there are
    undefined by every spec; a reader that does not clip will show it)."""
    if dtype.fields is not None:
        return tuple(junk_value(dtype.fields[n][0]) for n in dtype.names)
    k = dtype.kind
    if k == "b":
        return True
    if k in "iu":
        return 99
    if k == "f":
        return 99.5
    if k == "c":
        return complex(99, -99)
    if k == "S":
        return b"JUNKJUNK"[: dtype.itemsize]
    if k == "V":
        return b"\xee" * dtype.itemsize
    if k == "U":
        return "J" * (dtype.itemsize // 4)
    raise ValueError(dtype)


def padded_chunk(expected, idx, chunks, dtype):
    """Full-size chunk for grid index idx: array values, junk in the overhang."""
    sl = chunk_slices(idx, chunks, expected.shape)
    if dtype.kind == "V" and dtype.fields is None:
        c = np.frombuffer(junk_value(dtype) * int(np.prod(chunks, dtype=np.int64)),
                          dtype=dtype).reshape(chunks).copy()
    else:
        c = full_of(tuple(chunks), dtype, junk_value(dtype))
    c[tuple(slice(0, s.stop - s.start) for s in sl)] = expected[sl]
    return c


def apply_missing(values, chunks, missing, fill, dtype):
    exp = values.copy()
    for idx in missing:
        sl = chunk_slices(idx, chunks, exp.shape)
        region = full_of(tuple(s.stop - s.start for s in sl), dtype, fill)
        exp[sl] = region
    return exp


def write_bytes(path: Path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def write_json(path: Path, obj, **kw):
    kw.setdefault("indent", 4)
    write_bytes(path, json.dumps(obj, **kw).encode("ascii"))


def save_expected(out: Path, rel: str, arr: np.ndarray) -> str:
    p = out / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    np.save(p, arr, allow_pickle=False)
    return rel


def sample_values(rng, shape, dtype: np.dtype):
    """Deterministic, recognisable test values for a dtype."""
    n = int(np.prod(shape, dtype=np.int64))
    if dtype.fields is not None:
        a = np.zeros(shape, dtype=dtype)
        for name in dtype.names:
            a[name] = sample_values(rng, shape, dtype.fields[name][0])
        return a
    k = dtype.kind
    if k == "b":
        return (rng.integers(0, 2, size=shape) == 1).astype(dtype)
    if k == "i":
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -1000), min(info.max, 1000)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    if k == "u":
        hi = min(np.iinfo(dtype).max, 60000)
        return rng.integers(0, hi, size=shape, endpoint=True).astype(dtype)
    if k == "f":
        return (np.round(rng.normal(0, 100, size=shape), 3)).astype(dtype)
    if k == "c":
        return (np.round(rng.normal(0, 10, size=shape), 2)
                + 1j * np.round(rng.normal(0, 10, size=shape), 2)).astype(dtype)
    if k == "S":
        words = [b"a", b"bc", b"def", b"ghij", b"klmno", b"", b"pq", b"rstu"]
        return np.array([words[i % len(words)][: dtype.itemsize]
                         for i in rng.permutation(n)], dtype=dtype).reshape(shape)
    if k == "U":
        words = ["x", "yz", "\u00e9t\u00e9", "\u03bb", "", "abc", "\U0001f600", "q"]
        return np.array([words[i % len(words)][: dtype.itemsize // 4]
                         for i in rng.permutation(n)], dtype=dtype).reshape(shape)
    if k == "M":
        base = np.datetime64("2022-12-02T00:00:00", "s")
        return (base + rng.integers(-10**8, 10**8, size=shape).astype("m8[s]")).astype(dtype)
    if k == "V":
        return np.frombuffer(rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
                             .tobytes(), dtype=dtype).reshape(shape).copy()
    raise ValueError(dtype)


# ----------------------------------------------------------------------------
# 1. Zarr v1 (hand-written)
# ----------------------------------------------------------------------------

def v1_compress(compression, opts, raw: bytes, dtype: np.dtype) -> bytes:
    if compression == "blosc":
        import numcodecs
        codec = numcodecs.Blosc(cname=opts["cname"], clevel=opts["clevel"], shuffle=opts["shuffle"])
        # typed view so that blosc records the element size as typesize, as zarr 1.x did
        return bytes(codec.encode(np.frombuffer(raw, dtype=dtype)))
    if compression in ("zlib", "gzip"):  # zarr 1.x: "gzip" is an alias of zlib
        return zlib.compress(raw, opts)
    if compression == "bz2":
        return bz2.compress(raw, opts)
    if compression == "lzma":
        return lzma.compress(raw, format=opts["format"], check=opts["check"],
                             preset=opts["preset"], filters=opts["filters"])
    if compression in ("none", None):
        return raw
    raise ValueError(compression)


V1_SPECS = [
    # name, dtype, shape, chunks, compression, opts, fill, order, missing, attrs, notes
    dict(name="blosc_f8_nan", dtype="<f8", shape=(5, 7), chunks=(2, 3),
         compression="blosc", opts={"cname": "lz4", "clevel": 5, "shuffle": 1},
         fill=float("nan"), order="C", missing=[(1, 2), (2, 0)],
         attrs={"foo": 42, "bar": "apples", "baz": [1, 2, 3, 4], "nan_attr": float("nan"),
                "inf_attr": float("inf")},
         notes="fill_value is the bare JSON token NaN (Python json.dumps, as zarr 1.x wrote it); "
               "attrs also hold bare NaN/Infinity; chunks 1.2 and 2.0 missing => NaN"),
    dict(name="zlib_i4_bigendian", dtype=">i4", shape=(4, 6, 3), chunks=(3, 4, 2),
         compression="zlib", opts=1, fill=-1, order="C", missing=[(1, 0, 1)],
         attrs={}, notes="big-endian int32, 3-D, edge chunks in every dim; chunk 1.0.1 missing => -1; attrs {}"),
    dict(name="bz2_u1", dtype="|u1", shape=(10,), chunks=(4,), compression="bz2", opts=9,
         fill=7, order="C", missing=[(1,)], attrs={"units": "counts"},
         notes="1-D; chunk 1 missing => 7; last chunk 2 holds 2 of 4 elements"),
    dict(name="lzma_b1", dtype="|b1", shape=(5, 7), chunks=(3, 3), compression="lzma",
         opts={"format": 1, "check": 0, "preset": 1, "filters": None},
         fill=False, order="C", missing=[(0, 1)], attrs={},
         notes="bool; lzma XZ (format 1) with zarr 1.x default opts check 0 (none), preset 1; "
               "chunk 0.1 missing => false"),
    dict(name="none_c16_nullfill", dtype="<c16", shape=(5, 7), chunks=(2, 4),
         compression="none", opts=None, fill=None, order="C", missing=[(2, 1)], attrs={},
         notes="compression 'none', compression_opts null, fill_value null; chunk 2.1 is missing: "
               "the spec calls its content undefined, the expected zeros follow the project rule "
               "(formats.md sections 0/1: null fill => zeros)"),
    dict(name="zlib_S4", dtype="|S4", shape=(10,), chunks=(3,), compression="zlib", opts=5,
         fill=None, order="C", missing=[], attrs={},
         notes="fixed bytes |S4 (NUL padded, some empty); fill null, all chunks present"),
    dict(name="blosc_struct", dtype=[("x", "<f4"), ("y", "<i2")], shape=(10,), chunks=(4,),
         compression="blosc", opts={"cname": "zstd", "clevel": 3, "shuffle": 2},
         fill=None, order="C", missing=[], attrs={},
         notes="structured dtype [[x,<f4],[y,<i2]] (6-byte packed records), blosc zstd bitshuffle; "
               "fill null, all chunks present"),
    dict(name="blosc_u2_forder", dtype="<u2", shape=(4, 6, 3), chunks=(3, 4, 2),
         compression="blosc", opts={"cname": "blosclz", "clevel": 9, "shuffle": 1},
         fill=42, order="F", missing=[(0, 1, 0)], attrs={},
         notes="order F: each chunk's bytes are Fortran-ordered (first index fastest); "
               "chunk 0.1.0 missing => 42"),
    dict(name="gzip_alias_i2", dtype="<i2", shape=(5, 7), chunks=(2, 3), compression="gzip",
         opts=1, fill=0, order="C", missing=[], attrs={},
         notes="zarr 1.x registered 'gzip' as an alias of its zlib compressor: chunks are zlib "
               "streams (78 01), NOT gzip members. zarr 2.x migrate_1to2 maps it to numcodecs "
               "GZip and fails; sniff the magic"),
]


def gen_v1(out: Path, entries: list):
    for i, spec in enumerate(V1_SPECS):
        rng = np.random.default_rng(1000 + i)
        dt = np.dtype(spec["dtype"])
        shape, chunks = spec["shape"], spec["chunks"]
        values = sample_values(rng, shape, dt)
        if spec["name"] == "zlib_i4_bigendian":
            values = (values.astype("i8") * 100000).astype(dt)  # use the upper bytes too
        fill = spec["fill"]
        expected = apply_missing(values, chunks, spec["missing"], fill, dt)
        store = out / "v1" / spec["name"]
        meta = {
            "chunks": list(chunks),
            "compression": spec["compression"],
            "compression_opts": spec["opts"],
            "dtype": dtype_json(dt),
            "fill_value": fill,
            "order": spec["order"],
            "shape": list(shape),
            "zarr_format": 1,
        }
        write_json(store / "meta", meta, sort_keys=True, ensure_ascii=True)
        write_json(store / "attrs", spec["attrs"], sort_keys=True, ensure_ascii=True)
        missing = set(map(tuple, spec["missing"]))
        for idx in all_chunk_indices(shape, chunks):
            if idx in missing:
                continue
            chunk = padded_chunk(expected, idx, chunks, dt)
            raw = chunk.tobytes(order=spec["order"])
            key = ".".join(map(str, idx))
            write_bytes(store / key, v1_compress(spec["compression"], spec["opts"], raw, dt))
        exp_rel = save_expected(out, f"expected/v1/{spec['name']}.npy", expected)
        codec = spec["compression"] if spec["opts"] is None else f"{spec['compression']} {json.dumps(spec['opts'])}"
        entries.append({
            "store": f"v1/{spec['name']}", "node": "", "format": "1", "kind": "array",
            "expected": exp_rel, "dtype": dtype_json(dt), "shape": list(shape),
            "chunks": list(chunks), "order": spec["order"], "codec": codec,
            "fill_value": fill if not (isinstance(fill, float) and math.isnan(fill)) else "NaN",
            "missing_chunks": [".".join(map(str, m)) for m in spec["missing"]],
            "notes": spec["notes"],
        })


# ----------------------------------------------------------------------------
# 3. Seed draft (Dec 2022 bundle) stores, hand-made
# ----------------------------------------------------------------------------

def seed_fill_to_value(fill, dtype: np.dtype):
    """Interpret a seed-draft fill_value for our expected array."""
    if isinstance(fill, str):
        if fill == "NaN":
            return float("nan")
        if fill == "+Infinity":
            return float("inf")
        if fill == "-Infinity":
            return float("-inf")
        if fill.startswith(("0x", "0b")):
            nbits = dtype.itemsize * 8
            base = 16 if fill.startswith("0x") else 2
            digits = fill[2:]
            assert len(digits) == (nbits // 4 if base == 16 else nbits), fill
            raw = int(digits, base).to_bytes(dtype.itemsize, "big")
            if dtype.kind == "V":
                return raw
            if dtype.kind == "c":
                # only an all-zero (byte-order-free) complex bit string is used here
                assert set(raw) == {0}
                return 0
            return np.frombuffer(raw, dtype=dtype.newbyteorder(">"))[0]
        raise ValueError(fill)
    return fill


def seed_encode_chunk(chunk: np.ndarray, layout: str, codecs: list, dtype: np.dtype) -> bytes:
    """Encode one full-size chunk following the seed's chunk encoding procedure."""
    import numcodecs
    # EC[0]: the chunk array, dimension order reversed for "F"
    cur = chunk.T if layout == "F" else chunk
    cur = np.ascontiguousarray(cur)
    is_bytes = False
    for c in codecs:
        uri, conf = c["type"], c.get("configuration", {})
        if uri == SEED_ENDIAN_URI:
            assert not is_bytes
            order = ">" if conf["endian"] == "big" else "<"
            cur = cur.astype(cur.dtype.newbyteorder(order)) if cur.dtype.kind not in "bV" else cur
        elif uri == SEED_BLOSC_URI:
            arr = cur.reshape(-1) if not is_bytes else np.frombuffer(cur, dtype=np.uint8)
            cur = bytes(numcodecs.Blosc(cname=conf["cname"], clevel=conf["clevel"],
                                        shuffle=conf["shuffle"],
                                        blocksize=conf.get("blocksize", 0)).encode(arr))
            is_bytes = True
        elif uri in (SEED_GZIP_URI, SEED_GZIP_URI_ALT):
            data = cur if is_bytes else cur.tobytes()
            cur = gzip.compress(data, compresslevel=conf["level"], mtime=0)
            is_bytes = True
        else:
            raise ValueError(uri)
    return cur if is_bytes else cur.tobytes()


def seed_chunk_key(path: str, idx, sep: str) -> str:
    ident = "c" + sep.join(map(str, idx))
    return ("data/" + path + "/" + ident) if path else ("data/" + ident)


def seed_write_array(out: Path, store_rel: str, path: str, *, data_type, np_dtype, shape, chunk_shape,
                     separator="/", layout="C", codecs=None, fill, attrs=None, missing=(),
                     sharding=None, seed=0, values=None, notes="", lenient=False,
                     sharding_uri=SEED_SHARDING_URI, entries=None, expected_dtype=None):
    store = out / store_rel
    dt = np.dtype(np_dtype)
    rng = np.random.default_rng(seed)
    if values is None:
        values = sample_values(rng, shape, dt)
    fill_value = seed_fill_to_value(fill, dt)
    if dt.kind == "V" and dt.fields is None:
        exp = values.copy()
        for idx in missing:
            sl = chunk_slices(idx, chunk_shape, shape)
            exp[sl] = np.frombuffer(fill_value, dtype=dt)[0]
    else:
        exp = apply_missing(values, chunk_shape, missing, fill_value, dt)
    doc = {
        "shape": list(shape),
        "data_type": data_type,
        "chunk_grid": {"type": "regular", "chunk_shape": list(chunk_shape), "separator": separator},
        "chunk_memory_layout": layout,
    }
    if codecs is not None:
        doc["codecs"] = codecs
    doc["fill_value"] = fill
    doc["extensions"] = []
    doc["attributes"] = attrs or {}
    if sharding is not None:
        doc["storage_transformers"] = [{
            "extension": sharding_uri, "type": "indexed",
            "configuration": {"chunks_per_shard": list(sharding["chunks_per_shard"])},
        }]
    meta_key = f"meta/{path}.array.json" if path else "meta/array.json"
    write_json(store / meta_key, doc, indent=2)
    missing = set(map(tuple, missing))
    encoded = {}
    for idx in all_chunk_indices(shape, chunk_shape) if shape else [()]:
        if idx in missing:
            continue
        chunk = padded_chunk(exp, idx, chunk_shape, dt) if shape else exp.copy()
        encoded[idx] = seed_encode_chunk(chunk, layout, codecs or [], dt)
    if sharding is None:
        for idx, data in encoded.items():
            write_bytes(store / seed_chunk_key(path, idx, separator), data)
    else:
        write_seed_shards(store, path, shape, chunk_shape, separator, sharding, encoded)
    # save in the stored byte order when an endian codec says big
    save_dt = exp.dtype
    if expected_dtype is not None:
        save_dt = np.dtype(expected_dtype)
    exp_rel = save_expected(out, f"expected/{store_rel}/{path or '__root__'}.npy", exp.astype(save_dt))
    codec_desc = ", ".join(c["type"].rsplit("/", 2)[-2] if c["type"].endswith("/1.0") else c["type"]
                           for c in (codecs or [])) or "none"
    e = {
        "store": store_rel, "node": path, "format": "3-draft-seed", "kind": "array",
        "expected": exp_rel, "dtype": dtype_json(save_dt), "data_type": data_type,
        "shape": list(shape), "chunks": list(chunk_shape), "order": layout,
        "separator": separator, "codec": codec_desc, "fill_value": fill,
        "missing_chunks": [seed_chunk_key(path, m, separator) for m in sorted(missing)],
        "notes": notes,
    }
    if sharding is not None:
        e["chunks_per_shard"] = list(sharding["chunks_per_shard"])
        e["shard_layout"] = sharding.get("describe", "")
    if lenient:
        e["lenient"] = True
    entries.append(e)


def write_seed_shards(store: Path, path, shape, chunk_shape, sep, sharding, encoded):
    cps = tuple(sharding["chunks_per_shard"])
    cgrid = grid_shape(shape, chunk_shape)
    sgrid = grid_shape(cgrid, cps)
    n_inner = int(np.prod(cps))
    absent_shards = set(map(tuple, sharding.get("absent_shards", [])))
    empty_index_shards = set(map(tuple, sharding.get("empty_index_shards", [])))
    for sidx in itertools.product(*[range(n) for n in sgrid]):
        if sidx in absent_shards:
            continue
        inner = list(itertools.product(*[range(n) for n in cps]))
        index = np.full((n_inner, 2), U64MAX, dtype="<u8")
        body = bytearray()
        if sidx not in empty_index_shards:
            # write the present chunks in REVERSE C order, with 5 unused bytes
            # between them: the seed allows any order and gaps
            for li in reversed(range(n_inner)):
                cidx = tuple(s * c + l for s, c, l in zip(sidx, cps, inner[li]))
                if cidx not in encoded:
                    continue
                if body:
                    body += b"\xa5" * 5
                index[li] = (len(body), len(encoded[cidx]))
                body += encoded[cidx]
        else:
            for li in range(n_inner):
                cidx = tuple(s * c + l for s, c, l in zip(sidx, cps, inner[li]))
                assert cidx not in encoded
        write_bytes(store / seed_chunk_key(path, sidx, sep), bytes(body) + index.tobytes())


def seed_entry_point():
    return {
        "zarr_format": SEED_CORE_URI,
        "metadata_encoding": {"type": "json", "metadata_key_suffix": ".json"},
        "extensions": [],
    }


def gen_seed(out: Path, entries: list):
    gz1 = {"type": SEED_GZIP_URI, "configuration": {"level": 1}}
    # ---------------------------------------------------------------- seed/hier
    st = "seed/hier"
    write_json(out / st / "zarr.json", seed_entry_point(), indent=2)
    write_json(out / st / "meta/group.json", {"attributes": {"title": "seed draft hierarchy", "spam": "ham", "eggs": 42}}, indent=2)
    write_json(out / st / "meta/foo.group.json", {"attributes": {"kind": "explicit group"}}, indent=2)
    common = dict(entries=entries)
    seed_write_array(out, st, "foo/bar", data_type="float64", np_dtype="<f8", shape=(5, 7), chunk_shape=(2, 3),
                     codecs=[gz1], fill="NaN", missing=[(1, 2)], seed=301,
                     attrs={"foo": 42, "bar": "apples", "baz": [1, 2, 3, 4]},
                     notes="gzip codec (gzip member, mtime 0); fill \"NaN\"; chunk data/foo/bar/c1/2 missing => NaN",
                     **common)
    seed_write_array(out, st, "foo/baz", data_type="int16", np_dtype="<i2", shape=(4, 6, 3), chunk_shape=(3, 4, 2),
                     separator=".", layout="F",
                     codecs=[{"type": SEED_ENDIAN_URI, "configuration": {"endian": "big"}},
                             {"type": SEED_BLOSC_URI, "configuration": {"cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}}],
                     fill=-7, missing=[(1, 0, 1)], seed=302, expected_dtype=">i2",
                     notes="separator '.', keys data/foo/baz/c0.1.0; chunk_memory_layout F (codecs see the "
                           "reversed-shape array => F-ordered elements); endian big then blosc (typesize 2, "
                           "numeric shuffle 1); expected .npy is big-endian (byte order from the endian codec); "
                           "c1.0.1 missing => -7",
                     **common)
    seed_write_array(out, st, "foo/flags", data_type="bool", np_dtype="|b1", shape=(5, 7), chunk_shape=(3, 3),
                     codecs=[{"type": SEED_BLOSC_URI, "configuration": {"cname": "zstd", "clevel": 3, "shuffle": -1, "blocksize": 0}}],
                     fill=True, missing=[(0, 1)], seed=303,
                     notes="bool; blosc zstd with shuffle -1 (auto: bit shuffle for 1-byte items); fill true; c0/1 missing => true",
                     **common)
    seed_write_array(out, st, "foo/scalar", data_type="float64", np_dtype="<f8", shape=(), chunk_shape=(),
                     codecs=[], fill="-Infinity", values=np.array(3.25, dtype="<f8"),
                     notes="0-d array: chunk_shape [], chunk key data/foo/scalar/c; empty codecs list; fill \"-Infinity\"",
                     **common)
    seed_write_array(out, st, "foo/posinf", data_type="float64", np_dtype="<f8", shape=(10,), chunk_shape=(4,),
                     codecs=[{"type": SEED_ENDIAN_URI, "configuration": {"endian": "big"}}],
                     fill="+Infinity", missing=[(0,)], seed=304, expected_dtype=">f8",
                     notes="endian big only (uncompressed big-endian doubles); fill \"+Infinity\"; c0 missing => +inf",
                     **common)
    seed_write_array(out, st, "imp/deeper/u8", data_type="uint8", np_dtype="|u1", shape=(10,), chunk_shape=(4,),
                     codecs=None, fill=255, missing=[(1,)], seed=305,
                     notes="no 'codecs' member at all (= no codecs); parents imp and imp/deeper are implicit "
                           "groups (no group document); c1 missing => 255",
                     **common)
    seed_write_array(out, st, "imp/cplx", data_type="complex64", np_dtype="<c8", shape=(5, 7), chunk_shape=(2, 4),
                     separator=".", layout="F",
                     codecs=[{"type": SEED_ENDIAN_URI, "configuration": {"endian": "big"}},
                             {"type": SEED_GZIP_URI, "configuration": {"level": 6}}],
                     fill="0x0000000000000000", missing=[(2, 0)], seed=306, expected_dtype=">c8",
                     notes="complex64, layout F, separator '.', endian big + gzip. The draft defines no complex "
                           "fill form; the all-zero 64-bit hex string is the only one whose meaning does not "
                           "depend on byte/part order => 0+0j; c2.0 missing",
                     **common)
    seed_write_array(out, st, "f32hex", data_type="float32", np_dtype="<f4", shape=(10,), chunk_shape=(3,),
                     codecs=[gz1], fill="0x3fc00000", missing=[(2,)], seed=307,
                     notes="fill as hex bit string \"0x3fc00000\" = IEEE bits of 1.5 written as a big-endian "
                           "integer (all 8 hex digits); c2 missing => 1.5",
                     **common)
    seed_write_array(out, st, "raw", data_type="r16", np_dtype="|V2", shape=(5, 7), chunk_shape=(2, 3),
                     codecs=[gz1], fill="0xabab", missing=[(2, 2)], seed=308,
                     notes="raw-bits data type r16 (2 opaque bytes, numpy |V2); fill \"0xabab\" (palindromic so "
                           "byte order cannot matter) => bytes ab ab; c2/2 missing",
                     **common)
    # sharded: shape (10,11), chunks (2,3) => chunk grid (5,4); cps (2,2) => shard grid (3,2)
    sh_missing = [(0, 3), (1, 2),            # shard (0,1): 2 of 4 inner chunks empty
                  (2, 0), (2, 1), (3, 0), (3, 1),  # shard (1,0): absent
                  (2, 2), (2, 3), (3, 2), (3, 3),  # shard (1,1): present, index all empty
                  (4, 1)]                     # shard (2,0): (4,1) empty, row 5 outside the array
    seed_write_array(out, st, "sharded", data_type="uint16", np_dtype="<u2", shape=(10, 11), chunk_shape=(2, 3),
                     codecs=[gz1], fill=7, missing=sh_missing, seed=309,
                     sharding={"chunks_per_shard": (2, 2), "absent_shards": [(1, 0)],
                               "empty_index_shards": [(1, 1)],
                               "describe": "shard keys data/sharded/c<i>/<j> on the shard grid (3,2); index at "
                                           "end, 16 B per inner chunk (u64le offset, u64le nbytes), C order, "
                                           "empty = both 2^64-1; inner chunks stored in reverse order with 5 "
                                           "unused bytes between them; shard c1/0 absent; shard c1/1 is only "
                                           "an all-empty index; shard c2/0 covers inner row 5 that lies wholly "
                                           "outside the array (index entries empty)"},
                     notes="sharding storage transformer (type indexed, chunks_per_shard [2,2]) with gzip inner "
                           "chunks; several empty inner chunks => 7",
                     **common)
    groups_hier = {
        "": (True, ["f32hex", "foo", "imp", "raw", "sharded"]),
        "foo": (True, ["bar", "baz", "flags", "posinf", "scalar"]),
        "imp": (False, ["cplx", "deeper"]),
        "imp/deeper": (False, ["u8"]),
    }
    for node, (explicit, children) in groups_hier.items():
        entries.append({"store": st, "node": node, "format": "3-draft-seed", "kind": "group",
                        "explicit": explicit, "children": children,
                        "notes": "explicit group document" if explicit else
                                 "implicit group: no document, implied by keys under meta/" + node + "/"})

    # ---------------------------------------------------------------- seed/rootarr
    st = "seed/rootarr"
    write_json(out / st / "zarr.json", seed_entry_point(), indent=2)
    seed_write_array(out, st, "", data_type="int32", np_dtype="<i4", shape=(5, 7), chunk_shape=(2, 3),
                     codecs=[{"type": SEED_BLOSC_URI, "configuration": {"cname": "blosclz", "clevel": 9, "shuffle": 2, "blocksize": 0}}],
                     fill=0, missing=[(0, 0)], seed=310, attrs={"role": "root array"},
                     notes="root array: metadata key meta/array.json, chunk keys data/c<i>/<j> (no path); "
                           "blosc bitshuffle; c0/0 missing => 0",
                     **common)

    # ---------------------------------------------------------------- seed/variants
    st = "seed/variants"
    write_json(out / st / "zarr.json", seed_entry_point(), indent=2)
    seed_write_array(out, st, "gzip_alt_uri", data_type="float64", np_dtype="<f8", shape=(5, 7), chunk_shape=(2, 3),
                     codecs=[{"type": SEED_GZIP_URI_ALT, "configuration": {"level": 1}}],
                     fill="NaN", missing=[(0, 0)], seed=311, lenient=True,
                     notes="LENIENT: gzip codec URI 'https://purl.org/zarr/spec/codec/gzip' as in the seed's gzip "
                           "codec page example (the core examples use .../codecs/gzip/1.0); a reader may accept "
                           "it as gzip or refuse the array",
                     **common)
    seed_write_array(out, st, "numpy_dtype", data_type="<f8", np_dtype="<f8", shape=(10,), chunk_shape=(4,),
                     codecs=[gz1], fill="NaN", seed=312, lenient=True,
                     notes="LENIENT: data_type \"<f8\" exactly as the seed's core array-metadata example writes "
                           "it (the data type table says float64)",
                     **common)
    seed_write_array(out, st, "sharded_hyphen_uri", data_type="uint8", np_dtype="|u1", shape=(6,), chunk_shape=(2,),
                     codecs=None, fill=1, missing=[(1,)], seed=313, lenient=True,
                     sharding={"chunks_per_shard": (2,), "describe": "shard c0 holds chunks 0 (present) and 1 "
                               "(empty); shard c1 holds chunk 2 and an out-of-range slot"},
                     sharding_uri=SEED_SHARDING_URI_ALT,
                     notes="LENIENT: sharding extension URI with 'storage-transformers' (the seed's "
                           "'Specification URI' line) instead of 'storage_transformers' (its configuration "
                           "example); uncompressed inner chunks",
                     **common)
    entries.append({"store": st, "node": "", "format": "3-draft-seed", "kind": "group", "explicit": False,
                    "children": ["gzip_alt_uri", "numpy_dtype", "sharded_hyphen_uri"],
                    "notes": "root group is implicit (no meta/group.json); only zarr.json and array documents"})


# ----------------------------------------------------------------------------
# 2. zarr-python 2.18 "v3" stores (runs under the zp2 interpreter)
# ----------------------------------------------------------------------------

def zp2_worker(out: Path):
    import warnings
    warnings.simplefilter("ignore")
    assert os.environ.get("ZARR_V3_EXPERIMENTAL_API") == "1"
    import numcodecs
    import zarr
    from zarr._storage.v3 import DirectoryStoreV3
    from zarr._storage.v3_storage_transformers import ShardingStorageTransformer

    assert zarr.__version__.startswith("2.18"), zarr.__version__
    # numcodecs' GZip leaves the gzip header MTIME at the current time; pin it to 0
    # so that the fixtures are reproducible byte for byte (MTIME carries no data)
    gzip_init = gzip.GzipFile.__init__

    def gzip_init_mtime0(self, *a, mtime=None, **k):
        gzip_init(self, *a, mtime=0 if mtime is None else mtime, **k)
    gzip.GzipFile.__init__ = gzip_init_mtime0
    entries = []

    def make(g, store_rel, name, *, dtype, shape, chunks, compressor, fill, missing=(), seed=0,
             order="C", filters=None, dimension_separator=None, values=None, attrs=None,
             sharding=None, notes="", write_regions=None):
        dt = np.dtype(dtype)
        rng = np.random.default_rng(seed)
        if values is None:
            values = sample_values(rng, shape, dt)
            if filters:
                values = np.cumsum(values.astype("i8") % 7, axis=-1).astype(dt)
        kw = dict(shape=shape, chunks=chunks, dtype=dt, compressor=compressor, fill_value=fill,
                  order=order, filters=filters)
        if dimension_separator:
            kw["dimension_separator"] = dimension_separator
        if sharding:
            kw["storage_transformers"] = [ShardingStorageTransformer("indexed", chunks_per_shard=sharding)]
        z = g.create_dataset(name, **kw) if name else zarr.create(store=g, zarr_version=3, path=None, **kw)
        if attrs:
            z.attrs.update(attrs)
        missing = set(map(tuple, missing))
        if shape == ():
            z[...] = values
        elif write_regions is not None:
            for sl in write_regions:
                z[sl] = values[sl]
        else:
            for idx in all_chunk_indices(shape, chunks):
                if idx not in missing:
                    sl = chunk_slices(idx, chunks, shape)
                    z[sl] = values[sl]
        return z, values

    def record(store_rel, node, z_written, intended, notes, meta_extra):
        # oracle: reopen the store read-only with zarr 2.18 and read everything back
        s = DirectoryStoreV3(str(out / store_rel))
        # (zarr.open_array(path=None) on a v3 store silently uses path "array"; zarr.open does not)
        z = zarr.open(s, mode="r", path=node or None, zarr_version=3)
        assert isinstance(z, zarr.Array)
        got = z[...]
        assert same_array(got, intended), (node, got.dtype, intended.dtype, got, intended)
        rel = save_expected(out, f"expected/{store_rel}/{node or '__root__'}.npy", got)
        mkey = f"meta/root/{node}.array.json" if node else "meta/root.array.json"
        doc = json.loads((out / store_rel / mkey).read_text())
        comp = z.compressor.get_config() if z.compressor is not None else None
        flt = [f.get_config() for f in (z.filters or [])]
        e = {"store": store_rel, "node": node, "format": "3-draft-zp2", "kind": "array", "expected": rel,
             "dtype": dtype_json(got.dtype), "shape": list(z.shape), "chunks": list(z.chunks),
             "order": z.order, "codec": (comp["id"] if comp else "none"), "compressor_config": comp,
             "filters": flt or None, "fill_value": doc["fill_value"], "notes": notes}
        e.update(meta_extra)
        entries.append(e)

    def arr(g, store_rel, node, notes="", **kw):
        z, values = make(g, store_rel, node, **kw)
        fill = kw["fill"]
        dt = np.dtype(kw["dtype"])
        if kw.get("write_regions") is not None:
            intended = full_of(values.shape, dt, fill)
            for sl in kw["write_regions"]:
                intended[sl] = values[sl]
            miss = kw.get("missing", ())
        else:
            miss = kw.get("missing", ())
            intended = apply_missing(values, kw["chunks"], miss, fill, dt) if kw["shape"] != () else values.astype(dt)
        sep = kw.get("dimension_separator") or "/"
        prefix = f"data/root/{node}/" if node else "data/root/"
        extra = {"missing_chunks": [prefix + "c" + sep.join(map(str, m)) for m in sorted(map(tuple, miss))]}
        if kw.get("sharding"):
            extra["chunks_per_shard"] = list(kw["sharding"])
        record(store_rel, node, z, intended, notes, extra)

    Blosc = numcodecs.Blosc
    # ------------------------------------------------------------ zp2/hier.zr3
    st = "zp2/hier.zr3"
    s = DirectoryStoreV3(str(out / st))
    root = zarr.group(store=s, zarr_version=3)
    root.attrs.update({"title": "zarr-python 2.18 v3 layout", "nan_attr": float("nan")})
    grp = root.create_group("grp")
    grp.attrs["level"] = 1
    grp.create_group("sub")
    arr(root, st, "grp/bool_blosc", dtype="bool", shape=(5, 7), chunks=(2, 3),
        compressor=Blosc("lz4", 5, Blosc.BITSHUFFLE), fill=False, missing=[(1, 1)], seed=201,
        notes="bool => data_type \"bool\"; blosc lz4 bitshuffle; chunk c1/1 missing => false")
    arr(root, st, "grp/i1_zlib", dtype="i1", shape=(10,), chunks=(4,), compressor=numcodecs.Zlib(1),
        fill=-3, missing=[(1,)], seed=202, notes="int8 => data_type \"i1\"; zlib; c1 missing => -3")
    arr(root, st, "grp/sub/i2_gzip_delta", dtype="<i2", shape=(4, 6, 3), chunks=(3, 4, 2),
        compressor=numcodecs.GZip(5), filters=[numcodecs.Delta("<i2")], fill=0, seed=203,
        notes="gzip compressor + delta filter; zp2 stores filters in attributes['filters'] (not a "
              "metadata member); decode = gzip then delta (cumsum along the flattened chunk)")
    arr(root, st, "grp/sub/f8be_zstd", dtype=">f8", shape=(5, 7), chunks=(2, 3), compressor=numcodecs.Zstd(3),
        fill=float("nan"), missing=[(0, 2), (2, 1)], seed=204,
        notes="big-endian float64 (data_type \">f8\"); zstd; fill \"NaN\"; c0/2 and c2/1 missing => NaN")
    arr(root, st, "c16_lz4_F", dtype="<c16", shape=(5, 7), chunks=(3, 3), compressor=numcodecs.LZ4(1),
        fill=complex(1, -2), missing=[(1, 2)], order="F", seed=205,
        notes="complex128, chunk_memory_layout F, lz4 (u32le length + LZ4 block); fill [1.0, -2.0]; c1/2 missing")
    arr(root, st, "dt_bz2", dtype="<M8[s]", shape=(10,), chunks=(3,), compressor=numcodecs.BZ2(9),
        fill=np.datetime64("NaT", "s"), missing=[(1,)], seed=206,
        notes="datetime64[s] as extension data_type object (type \"<M8[s]\"); bz2; fill NaT "
              "(-9223372036854775808); c1 missing => NaT")
    arr(root, st, "s5_lzma", dtype="|S5", shape=(10,), chunks=(4,), compressor=numcodecs.LZMA(),
        fill=b"zz", missing=[(0,)], seed=207,
        notes="fixed bytes |S5 as extension data_type object; lzma (xz, check -1); fill_value is base64 "
              "of the UNPADDED bytes b'zz' (\"eno=\") => b'zz' NUL-padded to 5; c0 missing")
    arr(root, st, "u3_none_dot", dtype="<U3", shape=(5, 7), chunks=(2, 3), compressor=None, fill="ab",
        dimension_separator=".", missing=[(2, 0)], seed=208,
        notes="UCS-4 <U3 (12 bytes/element) as extension data_type object; no compressor member; "
              "dimension_separator '.' (keys data/root/u3_none_dot/c0.1); fill \"ab\"; c2.0 missing")
    arr(root, st, "struct_blosc", dtype=[("x", "<f4"), ("y", "<i2")], shape=(10,), chunks=(4,),
        compressor=Blosc("zstd", 3, Blosc.SHUFFLE), fill=(1.5, -2), missing=[(1,)], seed=209,
        attrs={"nan_attr": float("nan"), "note": "attributes may hold bare NaN"},
        notes="structured dtype as extension data_type object (type = descr list); fill_value is base64 "
              "of the packed 6-byte record (x=1.5, y=-2) => \"AADAP/7/\"; c1 missing => (1.5, -2); attrs "
              "hold a bare NaN token")
    arr(root, st, "f4_blosc_F", dtype="<f4", shape=(4, 6, 3), chunks=(3, 4, 2),
        compressor=Blosc("blosclz", 5, Blosc.SHUFFLE), fill=-1.5, order="F", missing=[(1, 1, 0)], seed=210,
        notes="float32, chunk_memory_layout F, blosc blosclz; fill -1.5; c1/1/0 missing")
    arr(root, st, "scalar_0d", dtype="<f4", shape=(), chunks=(), compressor=None, fill=1.5,
        values=np.array(2.5, dtype="<f4"),
        notes="0-d array: zp2 stores its single chunk under data/root/scalar_0d/c0 (not .../c); "
              "chunk_shape []")
    # implicit parents imp, imp/deep: zp2 writes no group document for them
    arr(root, st, "imp/deep/u2_sharded", dtype="<u2", shape=(10, 11), chunks=(2, 3),
        compressor=numcodecs.Zlib(1), fill=7, sharding=(2, 2), seed=211,
        write_regions=[(slice(0, 4), slice(0, 3)), (slice(5, 10), slice(7, 11)), (slice(8, 10), slice(0, 2))],
        notes="sharding storage transformer (chunks_per_shard [2,2]), zlib inner chunks; only three "
              "regions written: shards c0/0, c1/1, c2/1, c2/0 exist, others absent; inside them some inner "
              "chunks are empty (2^64-1 index entries) => 7; zp2 appends new chunks so inner order is not C order")
    root_children = ["c16_lz4_F", "dt_bz2", "f4_blosc_F", "grp", "imp", "s5_lzma", "scalar_0d",
                     "struct_blosc", "u3_none_dot"]
    groups = {"": (True, root_children), "grp": (True, ["bool_blosc", "i1_zlib", "sub"]),
              "grp/sub": (True, ["f8be_zstd", "i2_gzip_delta"]), "imp": (False, ["deep"]),
              "imp/deep": (False, ["u2_sharded"])}
    check_groups(zarr, DirectoryStoreV3, out, st, groups, entries)

    # ------------------------------------------------------------ zp2/rootarr.zr3
    st = "zp2/rootarr.zr3"
    s = DirectoryStoreV3(str(out / st))
    arr(s, st, "", dtype="<i8", shape=(4, 6, 3), chunks=(3, 4, 2), compressor=numcodecs.Zlib(1), fill=-5,
        missing=[(0, 1, 1)], seed=212, attrs={"role": "root array"},
        notes="array at the root of the hierarchy: meta/root.array.json, chunk keys data/root/c0/0/0; "
              "c0/1/1 missing => -5")

    # ------------------------------------------------------------ zp2/consolidated.zr3
    st = "zp2/consolidated.zr3"
    s = DirectoryStoreV3(str(out / st))
    root = zarr.group(store=s, zarr_version=3)
    root.attrs["consolidated"] = True
    arr(root, st, "a", dtype="<f8", shape=(5, 7), chunks=(2, 3), compressor=Blosc("lz4", 5, Blosc.SHUFFLE),
        fill=0.0, missing=[(1, 1)], seed=213, notes="array inside a consolidated hierarchy; c1/1 missing")
    arr(root, st, "g/b", dtype="|u1", shape=(10,), chunks=(4,), compressor=numcodecs.Zlib(1), fill=3,
        missing=[], seed=214, notes="array under implicit group g in a consolidated hierarchy")
    zarr.consolidate_metadata(s)
    zm = out / st / "meta/root/consolidated/.zmetadata"
    assert zm.exists(), "zp2 did not write meta/root/consolidated/.zmetadata"
    groups = {"": (True, ["a", "consolidated", "g"]), "consolidated": (True, []), "g": (False, ["b"])}
    check_groups(zarr, DirectoryStoreV3, out, st, groups, entries,
                 extra={"": {"consolidated_metadata": "meta/root/consolidated/.zmetadata",
                             "notes": "zarr.consolidate_metadata on a v3 store first CREATES a group "
                                      "named 'consolidated' (meta/root/consolidated.group.json) and "
                                      "stores {zarr_consolidated_format: 1, metadata: {<full key>: doc}} at "
                                      "meta/root/consolidated/.zmetadata; keys are full store keys incl. "
                                      "'zarr.json'"},
                        "consolidated": {"notes": "artefact group created by zarr.consolidate_metadata; it "
                                                  "holds only the .zmetadata key (not a node document)"}})
    return entries


def check_groups(zarr, DirectoryStoreV3, out, st, groups, entries, extra=None):
    s = DirectoryStoreV3(str(out / st))
    for node, (explicit, children) in groups.items():
        # open_group(path=<implicit group>) raises GroupNotFoundError in zp2.18 (mode "r"),
        # but indexing from the root works
        g = zarr.open_group(s, mode="r", zarr_version=3)
        if node:
            g = g[node]
        found = sorted(list(g.group_keys()) + list(g.array_keys()))
        assert found == sorted(children), (st, node, found, children)
        doc = out / st / ("meta/root.group.json" if not node else f"meta/root/{node}.group.json")
        assert doc.exists() == explicit, (st, node, "explicit?", doc)
        e = {"store": st, "node": node, "format": "3-draft-zp2", "kind": "group", "explicit": explicit,
             "children": sorted(children),
             "notes": "explicit group document" if explicit else "implicit group (no group document); "
                                                                  "zp2 lists it from meta/root/ prefixes"}
        if extra and node in extra:
            e.update(extra[node])
        entries.append(e)


def zp2_v1check(out: Path):
    """Cross-check the hand-written v1 stores with zarr 2.18's migrate_1to2."""
    import warnings
    warnings.simplefilter("ignore")
    import zarr
    from zarr.storage import migrate_1to2
    manifest = json.loads((out / ".v1_entries.json").read_text())
    report = []
    for e in manifest:
        tmp = Path(tempfile.mkdtemp())
        try:
            shutil.copytree(out / e["store"], tmp / "s")
            store = zarr.DirectoryStore(str(tmp / "s"))
            migrate_1to2(store)
            try:
                got = zarr.open_array(store, mode="r")[...]
            except Exception as exc:  # noqa: BLE001
                report.append([e["store"], "error", f"{type(exc).__name__}: {exc}"])
                continue
            exp = np.load(out / e["expected"])
            if e["fill_value"] is None and e["missing_chunks"]:
                ok = "skipped (null fill + missing chunk: zp2 leaves it undefined)"
            else:
                same = got.dtype == exp.dtype and (
                    np.array_equal(got, exp, equal_nan=True) if exp.dtype.kind in "fc" else np.array_equal(got, exp))
                ok = "ok" if same else "MISMATCH"
            report.append([e["store"], ok, ""])
        finally:
            shutil.rmtree(tmp)
    print(json.dumps(report))


# ----------------------------------------------------------------------------
# independent decoder used by the self-check (this venv: numcodecs >= 0.16)
# ----------------------------------------------------------------------------

def _np_dtype_from_json(d):
    if isinstance(d, list):
        return np.dtype([(f, _np_dtype_from_json(t)) for f, t in d])
    return np.dtype(d)


def _v2_fill(fill, dt):
    if fill is None:
        return None
    if dt.kind == "f":
        return {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}.get(fill, fill)
    if dt.kind == "c":
        re_, im_ = (_v2_fill(x, np.dtype("f8")) for x in fill)
        return complex(re_, im_)
    if dt.kind in "SV" or dt.fields is not None:
        raw = base64.standard_b64decode(fill)
        if dt.kind == "S":  # zp2 stores the bytes without NUL padding (b"zz" -> "eno=")
            return np.array(raw, dtype=dt)[()]
        return np.frombuffer(raw, dtype=dt)[0]
    if dt.kind in "mM":
        return np.array(fill, dtype="i8").view(dt)[()]
    return fill


def _v1_decompress(meta, data):
    comp, opts = meta["compression"], meta["compression_opts"]
    if comp == "blosc":
        import numcodecs
        return bytes(numcodecs.Blosc().decode(data))
    if comp in ("zlib", "gzip"):
        return zlib.decompress(data)
    if comp == "bz2":
        return bz2.decompress(data)
    if comp == "lzma":
        return lzma.decompress(data, format=opts["format"],
                               filters=opts["filters"] if opts["format"] == 3 else None)
    if comp in ("none", None):
        return data
    raise ValueError(comp)


def _assemble(shape, chunks, dt, fill, get_chunk):
    out = full_of(tuple(shape), dt, None)
    if fill is not None:
        out[...] = fill
    if not shape:
        c = get_chunk(())
        if c is not None:
            out[...] = c.reshape(())
        return out
    for idx in all_chunk_indices(shape, chunks):
        c = get_chunk(idx)
        if c is None:
            continue
        sl = chunk_slices(idx, chunks, shape)
        out[sl] = c[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out


def decode_v1(store: Path):
    meta = json.loads((store / "meta").read_text())
    json.loads((store / "attrs").read_text())  # must exist and parse
    dt = _np_dtype_from_json(meta["dtype"])
    chunks = meta["chunks"]

    def get(idx):
        p = store / ".".join(map(str, idx))
        if not p.exists():
            return None
        raw = _v1_decompress(meta, p.read_bytes())
        return np.frombuffer(raw, dtype=dt).reshape(chunks, order=meta["order"])
    return _assemble(meta["shape"], chunks, dt, meta["fill_value"], get)


def _shard_get(store: Path, shard_key: str, local: tuple, cps: tuple):
    p = store / shard_key
    if not p.exists():
        return None
    blob = p.read_bytes()
    n = int(np.prod(cps))
    index = np.frombuffer(blob[-16 * n:], dtype="<u8").reshape(n, 2)
    off, nb = (int(x) for x in index[int(np.ravel_multi_index(local, cps))])
    if off == U64MAX and nb == U64MAX:
        return None
    assert off + nb <= len(blob) - 16 * n
    return blob[off:off + nb]


def decode_zp2(store: Path, node: str):
    import numcodecs
    entry = json.loads((store / "zarr.json").read_text())
    assert entry["zarr_format"] == "https://purl.org/zarr/spec/protocol/core/3.0"
    mkey = f"meta/root/{node}.array.json" if node else "meta/root.array.json"
    meta = json.loads((store / mkey).read_text())
    dtj = meta["data_type"]
    dt = _np_dtype_from_json(dtj["type"] if isinstance(dtj, dict) else dtj)
    shape, chunks = meta["shape"], meta["chunk_grid"]["chunk_shape"]
    sep = meta.get("dimension_separator") or meta["chunk_grid"]["separator"]
    comp = None
    if "compressor" in meta:
        cid = meta["compressor"]["codec"].rstrip("/").split("/")[-2]
        comp = numcodecs.get_codec(dict(meta["compressor"]["configuration"], id=cid))
    filters = [numcodecs.get_codec(f) for f in meta["attributes"].get("filters") or []]
    prefix = f"data/root/{node}/" if node else "data/root/"
    st = meta.get("storage_transformers") or []

    def raw_chunk(idx):
        ident = "c" + sep.join(map(str, idx if idx else (0,)))  # zp2: 0-d chunk key is c0
        if not st:
            p = store / (prefix + ident)
            return p.read_bytes() if p.exists() else None
        cps = tuple(st[0]["configuration"]["chunks_per_shard"])
        sidx = tuple(i // c for i, c in zip(idx, cps))
        local = tuple(i % c for i, c in zip(idx, cps))
        return _shard_get(store, prefix + "c" + sep.join(map(str, sidx)), local, cps)

    def get(idx):
        data = raw_chunk(idx)
        if data is None:
            return None
        if comp is not None:
            data = comp.decode(data)
        for f in reversed(filters):
            data = f.decode(data)
        return np.frombuffer(bytes(memoryview(data)), dtype=dt).reshape(chunks, order=meta["chunk_memory_layout"])
    return _assemble(shape, chunks, dt, _v2_fill(meta["fill_value"], dt), get)


def decode_seed(store: Path, node: str):
    import numcodecs
    entry = json.loads((store / "zarr.json").read_text())
    assert entry["zarr_format"] == SEED_CORE_URI
    assert entry["metadata_encoding"] == {"type": "json", "metadata_key_suffix": ".json"}
    mkey = f"meta/{node}.array.json" if node else "meta/array.json"
    meta = json.loads((store / mkey).read_text())
    allowed = {"shape", "data_type", "chunk_grid", "chunk_memory_layout", "fill_value", "extensions",
               "attributes", "codecs", "storage_transformers"}
    assert set(meta) <= allowed, set(meta) - allowed
    dtj = meta["data_type"]
    if dtj in SEED_DTYPES:
        dt = np.dtype(SEED_DTYPES[dtj])
    elif dtj.startswith("r"):
        dt = np.dtype(f"V{int(dtj[1:]) // 8}")
    else:
        dt = np.dtype(dtj)  # lenient: numpy typestr as in the seed's example
    shape = meta["shape"]
    grid = meta["chunk_grid"]
    chunks, sep = grid["chunk_shape"], grid.get("separator", "/")
    layout = meta["chunk_memory_layout"]
    codecs = meta.get("codecs", [])
    st = meta.get("storage_transformers") or []
    # representation dtype after the endian codec (if any)
    rep_dt = dt
    for c in codecs:
        if c["type"].endswith("/endian/1.0") and c["configuration"]["endian"] == "big" and dt.kind not in "bV":
            rep_dt = dt.newbyteorder(">")
    fill = seed_fill_to_value(meta["fill_value"], dt)
    if isinstance(fill, bytes):
        fill = np.frombuffer(fill, dtype=dt)[0]

    def raw_chunk(idx):
        if not st:
            p = store / seed_chunk_key(node, idx, sep)
            return p.read_bytes() if p.exists() else None
        cps = tuple(st[0]["configuration"]["chunks_per_shard"])
        sidx = tuple(i // c for i, c in zip(idx, cps))
        local = tuple(i % c for i, c in zip(idx, cps))
        return _shard_get(store, seed_chunk_key(node, sidx, sep), local, cps)

    def get(idx):
        data = raw_chunk(idx)
        if data is None:
            return None
        for c in reversed(codecs):
            t = c["type"]
            if t.endswith("/blosc/1.0"):
                data = bytes(numcodecs.Blosc().decode(data))
            elif "/gzip" in t:
                assert data[:2] == b"\x1f\x8b"
                data = gzip.decompress(data)
            elif t.endswith("/endian/1.0"):
                pass  # handled by rep_dt
            else:
                raise ValueError(t)
        rshape = list(chunks)[::-1] if layout == "F" else list(chunks)
        a = np.frombuffer(data, dtype=rep_dt).reshape(rshape)
        return a.T if layout == "F" else a
    out = _assemble(shape, chunks, rep_dt, fill, get)
    return out


def _children_of(meta_dir: Path, implied_by: callable) -> list[str]:
    """Child names under a draft `meta/...` folder: `x.array.json`, `x.group.json`, implied `x/`."""
    kids = set()
    if meta_dir.is_dir():
        for p in meta_dir.iterdir():
            if p.is_dir() and implied_by(p):
                kids.add(p.name)
            elif p.name.endswith(".array.json"):
                kids.add(p.name[: -len(".array.json")])
            elif p.name.endswith(".group.json"):
                kids.add(p.name[: -len(".group.json")])
    return sorted(kids)


def list_children_seed(store: Path, node: str):
    return _children_of(store / "meta" / node if node else store / "meta", lambda p: True)


def list_children_zp2(store: Path, node: str):
    # zarr-python 2.18 leaves empty folders behind; only ones holding metadata imply a group.
    return _children_of(store / "meta" / "root" / node if node else store / "meta" / "root",
                        lambda p: any(p.rglob("*.json")))


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.tobytes() == b.tobytes():
        return True
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return False


def selfcheck(out: Path, manifest: list) -> list:
    problems = []
    for e in manifest:
        store = out / e["store"]
        if e["kind"] == "group":
            lister = list_children_seed if e["format"] == "3-draft-seed" else list_children_zp2
            got = lister(store, e["node"])
            if got != e["children"]:
                problems.append(f"{e['store']}:{e['node']!r} children {got} != {e['children']}")
            continue
        exp = np.load(out / e["expected"], allow_pickle=False)
        try:
            if e["format"] == "1":
                got = decode_v1(store)
            elif e["format"] == "3-draft-zp2":
                got = decode_zp2(store, e["node"])
            else:
                got = decode_seed(store, e["node"])
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{e['store']}:{e['node']!r} decode error {type(exc).__name__}: {exc}")
            continue
        if not same_array(got, exp):
            problems.append(f"{e['store']}:{e['node']!r} mismatch: got {got.dtype} {got.shape} "
                            f"exp {exp.dtype} {exp.shape}")
        for key in e.get("missing_chunks", []):
            if "chunks_per_shard" not in e and (store / key).exists():
                problems.append(f"{e['store']}: chunk {key} should be missing")
    return problems


# ----------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------

def ensure_zp2_python(args) -> str:
    if args.python:
        return args.python
    venv = Path(args.zp2_venv)
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"creating zp2 venv at {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "zarr==2.18.*", "numcodecs<0.16", "pytest"],
                       check=True)
    return str(py)


def run_zp2(py: str, mode: str, out: Path) -> str:
    env = dict(os.environ, ZARR_V3_EXPERIMENTAL_API="1", ZARR_V3_SHARDING="1", PYTHONHASHSEED="0")
    r = subprocess.run([py, "-W", "ignore", str(Path(__file__).resolve()), mode, str(out)],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"zp2 helper {mode} failed")
    return r.stdout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--python", help="interpreter with zarr 2.18 installed")
    ap.add_argument("--zp2-venv", default=str(DEFAULT_ZP2_VENV))
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--zp2-worker", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--zp2-v1check", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.zp2_worker:
        entries = zp2_worker(Path(args.zp2_worker))
        (Path(args.zp2_worker) / ".zp2_entries.json").write_text(json.dumps(entries))
        return 0
    if args.zp2_v1check:
        zp2_v1check(Path(args.zp2_v1check))
        return 0

    out = Path(args.out)
    py = ensure_zp2_python(args)
    if not args.check_only:
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        entries: list = []
        gen_v1(out, entries)
        v1_entries = list(entries)
        run_zp2(py, "--zp2-worker", out)
        zp2_path = out / ".zp2_entries.json"
        entries += json.loads(zp2_path.read_text())
        zp2_path.unlink()
        gen_seed(out, entries)
        (out / "manifest.json").write_text(json.dumps(entries, indent=2, allow_nan=False) + "\n")
    manifest = json.loads((out / "manifest.json").read_text())
    v1_entries = [e for e in manifest if e["format"] == "1"]

    # cross-check v1 with zarr 2.18's migrate_1to2 + reader
    (out / ".v1_entries.json").write_text(json.dumps(v1_entries))
    try:
        report = json.loads(run_zp2(py, "--zp2-v1check", out).strip().splitlines()[-1])
    finally:
        (out / ".v1_entries.json").unlink()
    problems = selfcheck(out, manifest)
    for store, status, msg in report:
        expected_failure = store.endswith("gzip_alias_i2")
        if status != "ok" and not status.startswith("skipped") and not expected_failure:
            problems.append(f"zp2 migrate_1to2 cross-check {store}: {status} {msg}")
        if expected_failure and status == "ok":
            problems.append(f"{store}: expected zp2 migration to fail on the zlib-as-gzip alias")
    for store, status, msg in report:
        print(f"  v1 cross-check via zarr 2.18 migrate_1to2: {store}: {status} {msg[:80]}")
    n_arr = sum(e["kind"] == "array" for e in manifest)
    n_grp = sum(e["kind"] == "group" for e in manifest)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{n_arr} arrays, {n_grp} groups, {total} bytes under {out}")
    if problems:
        print("SELF-CHECK FAILED:\n  " + "\n  ".join(problems))
        return 1
    print("self-check ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
