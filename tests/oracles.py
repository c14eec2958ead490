"""Stores written by independent Zarr implementations, with the array each must read as.

Every builder takes an empty directory, writes one store into it with
zarr-python 3 or tensorstore, and returns an `Oracle`: where the store is,
which node to read, and the array the writing library reads back (so lossy
filters such as quantize are judged by their own implementation, not ours).

`ORACLES` maps a stable case name to its builder; tests parametrize over the
names and build each store once per session.
"""

from __future__ import annotations

import json
import string
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import tensorstore as ts
import zarr
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    ShardingCodecIndexLocation,
    TransposeCodec,
    ZstdCodec,
)
from zarr.codecs import numcodecs as zn

@dataclass(frozen=True)
class Oracle:
    store: Path  # the store root: what `Engine.open` gets
    node: str  # node path inside the store ('' for a root array)
    expected: np.ndarray  # the array as the writing library reads it back


Builder = Callable[[Path], Oracle]


# ------------------------------------------------------------------ sample data


def sample(shape: tuple[int, ...], dtype: np.dtype | str, seed: int = 0) -> np.ndarray:
    """Varied values of `dtype` (extremes, NaN/inf, NaT, empty strings) in `shape`."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype.fields is not None:
        out = np.zeros(shape, dtype)
        for i, name in enumerate(dtype.names or ()):
            out[name] = sample(shape, dtype.fields[name][0], seed + i + 1)
        return out
    n = int(np.prod(shape, dtype=np.int64))
    return _flat_sample(n, dtype, rng).reshape(shape)


def _flat_sample(n: int, dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    kind = dtype.kind
    if kind == "b":
        return rng.integers(0, 2, n).astype(dtype)
    if kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype.newbyteorder("="), endpoint=True).astype(dtype)
    if kind == "f":
        values = rng.standard_normal(n) * 1000
        values[rng.random(n) < 0.1] = np.nan
        values[rng.random(n) < 0.05] = np.inf
        return values.astype(dtype)
    if kind == "c":
        real = _flat_sample(n, np.dtype("f8"), rng)
        return (real + 1j * rng.standard_normal(n)).astype(dtype)
    if kind in "Mm":
        ints = rng.integers(-(10**9), 10**9, n)
        ints[rng.random(n) < 0.1] = np.iinfo(np.int64).min  # NaT
        return ints.astype("<i8").view(dtype.newbyteorder("<")).astype(dtype)
    if kind == "S":
        alphabet = list(string.ascii_letters.encode())
        return np.array([bytes(rng.choice(alphabet, rng.integers(0, dtype.itemsize + 1))) for _ in range(n)], dtype)
    if kind == "U":
        alphabet = list("abcXYZ éß€漢字🙂")
        length = dtype.itemsize // 4
        return np.array(["".join(rng.choice(alphabet, rng.integers(0, length + 1))) for _ in range(n)], dtype)
    if kind == "V":
        return np.frombuffer(rng.bytes(n * dtype.itemsize), dtype)
    raise TypeError(f"no sample for {dtype}")


def blank_chunks(data: np.ndarray, chunks: tuple[int, ...], fill: Any, every: int = 3) -> np.ndarray:
    """`data` with every `every`-th chunk set to `fill`, so writers omit those chunks."""
    out = data.copy()
    grid = [range(0, s, c) for s, c in zip(data.shape, chunks, strict=True)]
    for i, starts in enumerate(np.ndindex(*[len(g) for g in grid])):
        if i % every == 0:
            region = tuple(slice(g[k], g[k] + c) for g, k, c in zip(grid, starts, chunks, strict=True))
            out[region] = fill
    return out


# --------------------------------------------------------------- zarr-python


def quiet() -> warnings.catch_warnings:
    """zarr-python warns about unstable specs for numcodecs.* and extension dtypes."""
    return warnings.catch_warnings(action="ignore")


def zarr_read(store: Path, node: str) -> np.ndarray:
    with quiet():
        return np.asarray(zarr.open_array(str(store), path=node, mode="r")[...])


def write_zarr(
    root: Path,
    data: np.ndarray,
    *,
    zarr_format: int,
    chunks: tuple[int, ...],
    node: str = "arr",
    drop: int = 0,
    consolidate: bool = False,
    attributes: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Oracle:
    """Write `data` with zarr-python under a root group, delete chunks, read back.

    `drop` is a bit mask over the flat (C-order) index of the stored objects
    (chunks, or shards): bit i % 64 set deletes object i.
    """
    store = root / "store.zarr"
    with quiet():
        group = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
        if node:
            array = group.create_array(node, shape=data.shape, chunks=chunks, dtype=data.dtype, **kwargs)
        else:
            array = zarr.create_array(str(store), shape=data.shape, chunks=chunks, dtype=data.dtype,
                                      zarr_format=zarr_format, overwrite=True, **kwargs)
        array[...] = data
        if attributes:
            array.attrs.update(attributes)
        if consolidate:
            zarr.consolidate_metadata(str(store), zarr_format=zarr_format)
    absent = drop_chunks(array, store / node, drop)
    expected = zarr_read(store, node)
    if array.metadata.fill_value is None:
        # zarr-python leaves absent chunks uninitialised here; a null fill means zeros (formats.md §2.4).
        for region in absent:
            expected[region] = np.zeros((), expected.dtype)
    return Oracle(store, node, expected)


def drop_chunks(array: zarr.Array, array_dir: Path, mask: int) -> list[tuple[slice, ...]]:
    """Delete the stored objects selected by `mask`; return the regions of every absent one."""
    meta = array.metadata
    stored_shape = meta.chunks if meta.zarr_format == 2 else meta.chunk_grid.chunk_shape
    grid = [-(-s // c) for s, c in zip(array.shape, stored_shape, strict=True)]
    absent: list[tuple[slice, ...]] = []
    for flat, coords in enumerate(np.ndindex(*grid)):
        path = array_dir / meta.encode_chunk_key(coords)
        if mask >> (flat % 64) & 1:
            path.unlink(missing_ok=True)
        if not path.exists():
            absent.append(tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, stored_shape, strict=True)))
    return absent


def _v3(data: np.ndarray, chunks: tuple[int, ...], **kwargs: Any) -> Builder:
    return partial(write_zarr, data=data, zarr_format=3, chunks=chunks, **kwargs)


def _v2(data: np.ndarray, chunks: tuple[int, ...], **kwargs: Any) -> Builder:
    return partial(write_zarr, data=data, zarr_format=2, chunks=chunks, **kwargs)


def _raw_r16(root: Path) -> Oracle:
    """zarr-python has no `r16` writer: write raw_bytes (V2), then rename the type to r16."""
    oracle = write_zarr(root, sample((9,), "V2", 7), zarr_format=3, chunks=(4,), compressors=None)
    doc_path = oracle.store / oracle.node / "zarr.json"
    doc = json.loads(doc_path.read_text())
    doc["data_type"] = "r16"
    doc["fill_value"] = [0, 0]
    doc_path.write_text(json.dumps(doc))
    return oracle


# ----------------------------------------------------------------- tensorstore


def write_tensorstore(root: Path, data: np.ndarray, driver: str, metadata: dict[str, Any]) -> Oracle:
    """Write `data` with tensorstore as a root array; read it back with tensorstore."""
    store = root / "ts.zarr"
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(store)}, "metadata": metadata,
            "create": True}
    array = ts.open(spec).result()
    array.write(data).result()
    return Oracle(store, "", np.asarray(array.read().result()))


def _ts3(data: np.ndarray, chunks: Sequence[int], codecs: list[Any], fill_value: Any = 0,
         key_encoding: dict[str, Any] | None = None, data_type: str | None = None) -> Builder:
    metadata = {
        "shape": list(data.shape),
        "data_type": data_type or data.dtype.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": key_encoding or {"name": "default"},
        "fill_value": fill_value,
        "codecs": codecs,
    }
    return partial(write_tensorstore, data=data, driver="zarr3", metadata=metadata)


def _ts2(data: np.ndarray, chunks: Sequence[int], compressor: dict[str, Any] | None, *, order: str = "C",
         separator: str = ".", fill_value: Any = None, filters: list[Any] | None = None) -> Builder:
    metadata = {
        "shape": list(data.shape),
        "chunks": list(chunks),
        "dtype": data.dtype.str,
        "compressor": compressor,
        "order": order,
        "dimension_separator": separator,
        "fill_value": fill_value,
        "filters": filters,
    }
    return partial(write_tensorstore, data=data, driver="zarr", metadata=metadata)


def _sharding(inner: tuple[int, ...], codecs: list[Any], location: str = "end") -> dict[str, Any]:
    return {"name": "sharding_indexed", "configuration": {
        "chunk_shape": list(inner), "codecs": codecs, "index_location": location,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}


_LE = {"name": "bytes", "configuration": {"endian": "little"}}
_BE = {"name": "bytes", "configuration": {"endian": "big"}}


# ----------------------------------------------------------------- the cases

SHAPE = (11, 13)
CHUNKS = (4, 5)  # edge chunks in both dimensions

# Every fixed-size dtype zarr-python writes in both formats.
DTYPES = [
    "bool", "i1", "<i2", "<i4", "<i8", "u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "<c8", "<c16",
    "<M8[ns]", "<M8[D]", "<M8[10s]", "<m8[us]", "<m8[h]", "S7", "<U5", "V3",
    "[('x', '<i2'), ('y', '<f8'), ('tag', 'S3')]",
]
# Big-endian element types: in v2 the dtype says so; v3 keeps it in the bytes codec.
BIG_ENDIAN = [">i2", ">u4", ">i8", ">f4", ">f8", ">c16", ">M8[ms]", ">U3"]


def _dtype_id(spec: str) -> str:
    if spec.startswith("["):
        return "struct"
    return spec.replace("<", "le-").replace(">", "be-").replace("[", "-").rstrip("]")


def _parse_dtype(spec: str) -> np.dtype:
    return np.dtype(eval(spec)) if spec.startswith("[") else np.dtype(spec)  # noqa: S307 (literal list above)


def _cases() -> Iterator[tuple[str, Builder]]:
    yield from _dtype_cases()
    yield from _v3_codec_cases()
    yield from _v2_codec_cases()
    yield from _layout_cases()
    yield from _fill_cases()
    yield from _tensorstore_cases()


def _dtype_cases() -> Iterator[tuple[str, Builder]]:
    for spec in DTYPES:
        data = sample(SHAPE, _parse_dtype(spec), seed=len(spec))
        yield f"zp3-dtype-{_dtype_id(spec)}", _v3(data, CHUNKS)
        yield f"zp2-dtype-{_dtype_id(spec)}", _v2(data, CHUNKS)
    for spec in BIG_ENDIAN:
        data = sample(SHAPE, spec, seed=len(spec))
        yield f"zp2-dtype-{_dtype_id(spec)}", _v2(data, CHUNKS)
        yield f"zp3-bytes-big-{_dtype_id(spec)}", _v3(data, CHUNKS, serializer=BytesCodec(endian="big"))
    mixed = np.dtype([("a", "<i2"), ("b", ">f8"), ("c", "|b1"), ("d", "<U2")])
    yield "zp2-dtype-struct-mixed-endian", _v2(sample(SHAPE, mixed, 3), CHUNKS)
    yield "zp3-dtype-r16", _raw_r16


def _v3_codec_cases() -> Iterator[tuple[str, Builder]]:
    f4 = sample(SHAPE, "<f4", 11)
    i4 = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE) * 7 - 300
    f8 = sample(SHAPE, "<f8", 12)
    finite = np.nan_to_num(f8, nan=1.5, posinf=-2.25)
    compressors: dict[str, tuple[np.ndarray, Any]] = {
        "blosc-lz4-shuffle": (f4, BloscCodec(cname="lz4", shuffle="shuffle")),
        "blosc-zstd-bitshuffle": (f4, BloscCodec(cname="zstd", shuffle="bitshuffle")),
        "blosc-lz4-noshuffle": (f4, BloscCodec(cname="lz4", shuffle="noshuffle")),
        "blosc-blosclz": (i4, BloscCodec(cname="blosclz", clevel=9, shuffle="shuffle")),
        "blosc-zlib": (i4, BloscCodec(cname="zlib", shuffle="bitshuffle")),
        "blosc-lz4hc": (i4, BloscCodec(cname="lz4hc", shuffle="shuffle")),
        "zstd": (f4, ZstdCodec(level=5)),
        "zstd-checksum": (f4, ZstdCodec(level=1, checksum=True)),
        "gzip": (f4, GzipCodec(level=6)),
        "crc32c": (i4, Crc32cCodec()),
        "gzip-crc32c": (i4, [GzipCodec(level=1), Crc32cCodec()]),
        "none": (i4, None),
        "numcodecs.zlib": (f4, zn.Zlib(level=4)),
        "numcodecs.gzip": (f4, zn.GZip(level=4)),
        "numcodecs.bz2": (f4, zn.BZ2(level=9)),
        "numcodecs.lzma": (f4, zn.LZMA(preset=1)),
        "numcodecs.lz4": (f4, zn.LZ4(acceleration=1)),
        "numcodecs.zstd": (f4, zn.Zstd(level=3)),
        "numcodecs.blosc": (f4, zn.Blosc(cname="zstd", clevel=3, shuffle=2)),
        "numcodecs.shuffle": (i4, zn.Shuffle(elementsize=4)),
        "numcodecs.crc32": (i4, zn.CRC32()),
        "numcodecs.crc32c": (i4, zn.CRC32C()),
        "numcodecs.adler32": (i4, zn.Adler32()),
        "numcodecs.fletcher32": (i4, zn.Fletcher32()),
        "numcodecs.jenkins_lookup3": (i4, zn.JenkinsLookup3()),
        "numcodecs.shuffle-zlib": (f4, [zn.Shuffle(elementsize=4), zn.Zlib(level=1)]),
    }
    for name, (data, compressor) in compressors.items():
        yield f"zp3-codec-{name}", _v3(data, CHUNKS, compressors=compressor)
    filters: dict[str, tuple[np.ndarray, Any]] = {
        "numcodecs.delta": (i4, zn.Delta(dtype="<i4")),
        "numcodecs.delta-astype": (np.arange(143, dtype="<i8").reshape(SHAPE), zn.Delta(dtype="<i8", astype="<i2")),
        "numcodecs.fixedscaleoffset": (finite, zn.FixedScaleOffset(offset=10, scale=100, dtype="<f8", astype="<i4")),
        "numcodecs.quantize": (finite, zn.Quantize(digits=3, dtype="<f8")),
        "numcodecs.bitround": (f4, zn.BitRound(keepbits=6)),
        "numcodecs.astype": (i4, zn.AsType(encode_dtype="<i8", decode_dtype="<i4")),
        "numcodecs.packbits": (sample(SHAPE, "bool", 5), zn.PackBits()),
        "transpose-2d": (f4, TransposeCodec(order=(1, 0))),
    }
    for name, (data, filt) in filters.items():
        yield f"zp3-filter-{name}", _v3(data, CHUNKS, filters=[filt])
    cube = sample((5, 6, 7), "<i2", 13)
    yield "zp3-filter-transpose-3d", _v3(cube, (2, 4, 3), filters=[TransposeCodec(order=(2, 0, 1))])
    yield "zp3-filter-transpose-bigendian", _v3(cube.astype(">i2"), (2, 4, 3),
                                                filters=[TransposeCodec(order=(1, 2, 0))],
                                                serializer=BytesCodec(endian="big"))


def _v2_codec_cases() -> Iterator[tuple[str, Builder]]:
    f4 = sample(SHAPE, "<f4", 21)
    i4 = np.arange(np.prod(SHAPE), dtype="<i4").reshape(SHAPE) * 5 - 100
    finite = np.nan_to_num(sample(SHAPE, "<f8", 22), nan=0.5, posinf=3.0)
    compressors: dict[str, tuple[np.ndarray, Any]] = {
        "blosc-lz4-shuffle": (f4, numcodecs.Blosc(cname="lz4", shuffle=1)),
        "blosc-zstd-bitshuffle": (f4, numcodecs.Blosc(cname="zstd", shuffle=2)),
        "blosc-lz4-noshuffle": (f4, numcodecs.Blosc(cname="lz4", shuffle=0)),
        "blosc-autoshuffle": (i4, numcodecs.Blosc(cname="blosclz", shuffle=-1)),
        "zstd": (f4, numcodecs.Zstd(level=3)),
        "gzip": (f4, numcodecs.GZip(level=5)),
        "zlib": (f4, numcodecs.Zlib(level=5)),
        "bz2": (f4, numcodecs.BZ2(level=1)),
        "lzma": (f4, numcodecs.LZMA(preset=2)),
        "lz4": (f4, numcodecs.LZ4()),
        "crc32": (i4, numcodecs.CRC32()),
        "adler32": (i4, numcodecs.Adler32()),
        "none": (i4, None),
    }
    for name, (data, compressor) in compressors.items():
        yield f"zp2-compressor-{name}", _v2(data, CHUNKS, compressors=compressor)
    filters: dict[str, tuple[np.ndarray, list[Any]]] = {
        "delta": (i4, [numcodecs.Delta(dtype="<i4")]),
        "delta-astype": (np.arange(143, dtype="<i8").reshape(SHAPE), [numcodecs.Delta(dtype="<i8", astype="<i2")]),
        "fixedscaleoffset": (finite, [numcodecs.FixedScaleOffset(offset=1, scale=1000, dtype="<f8", astype="<i8")]),
        "quantize": (finite, [numcodecs.Quantize(digits=2, dtype="<f8")]),
        "bitround": (f4, [numcodecs.BitRound(keepbits=4)]),
        "shuffle": (i4, [numcodecs.Shuffle(elementsize=4)]),
        "crc32": (i4, [numcodecs.CRC32()]),
        "adler32": (i4, [numcodecs.Adler32(location="end")]),
        "fletcher32": (i4, [numcodecs.Fletcher32()]),
        "crc32c": (i4, [numcodecs.CRC32C()]),
        "astype": (i4, [numcodecs.AsType(encode_dtype="<i8", decode_dtype="<i4")]),
        "delta-shuffle-crc32": (i4, [numcodecs.Delta(dtype="<i4"), numcodecs.Shuffle(elementsize=4),
                                     numcodecs.CRC32()]),
    }
    for name, (data, filts) in filters.items():
        yield f"zp2-filter-{name}", _v2(data, CHUNKS, filters=filts, compressors=numcodecs.Zlib(level=1))


def _layout_cases() -> Iterator[tuple[str, Builder]]:
    data = sample((10, 12), "<i4", 31)
    cube = sample((6, 7, 8), "<u2", 32)
    yield "zp2-order-F", _v2(data, (4, 5), order="F")
    yield "zp2-order-F-3d-bigendian", _v2(cube.astype(">u2"), (4, 3, 5), order="F")
    yield "zp2-separator-slash", _v2(cube, (4, 3, 5), chunk_key_encoding={"name": "v2", "separator": "/"})
    yield "zp2-consolidated", _v2(data, (4, 5), consolidate=True)
    yield "zp3-consolidated", _v3(data, (4, 5), consolidate=True)
    yield "zp3-key-v2-dot", _v3(cube, (4, 3, 5), chunk_key_encoding={"name": "v2", "separator": "."})
    yield "zp3-key-v2-slash", _v3(cube, (4, 3, 5), chunk_key_encoding={"name": "v2", "separator": "/"})
    yield "zp3-key-default-dot", _v3(cube, (4, 3, 5), chunk_key_encoding={"name": "default", "separator": "."})
    yield "zp3-root-array", _v3(data, (4, 5), node="")
    yield "zp2-root-array", _v2(data, (4, 5), node="")
    yield "zp3-nested-node", _v3(data, (4, 5), node="a/b/c")
    yield "zp2-nested-node", _v2(data, (4, 5), node="a/b/c")
    # sharding: 2x2 inner chunks per shard, edge shards, blank inner chunks omitted
    sharded = blank_chunks(sample((13, 17), "<f8", 33), (3, 4), 0.0)
    yield "zp3-sharding-end", _v3(sharded, (3, 4), shards=(6, 8))
    # with an explicit sharding serializer, `chunks` is the shard shape
    yield "zp3-sharding-start", _v3(sharded, (6, 8), serializer=ShardingCodec(
        chunk_shape=(3, 4), codecs=[BytesCodec(), ZstdCodec()], index_location=ShardingCodecIndexLocation.start))
    yield "zp3-sharding-nested", _v3(sharded, (12, 16), serializer=ShardingCodec(
        chunk_shape=(6, 8), codecs=[ShardingCodec(chunk_shape=(3, 4), codecs=[BytesCodec(), GzipCodec()])]))
    yield "zp3-sharding-transpose-inner", _v3(sharded, (6, 8), serializer=ShardingCodec(
        chunk_shape=(3, 4), codecs=[TransposeCodec(order=(1, 0)), BytesCodec(endian="big"), Crc32cCodec()]))
    yield "zp3-sharding-3d-drop", _v3(sample((8, 9, 10), "<u1", 34), (2, 3, 5), shards=(4, 3, 10), drop=0b100101)
    yield "zp3-0d", _v3(np.array(3.25, "<f8"), ())
    yield "zp2-0d", _v2(np.array(-7, "<i2"), ())
    yield "zp3-1d", _v3(sample((100,), "<i8", 35), (7,))
    yield "zp2-1d", _v2(sample((100,), ">u8", 36), (7,))
    yield "zp3-4d", _v3(sample((3, 4, 5, 6), "<f4", 37), (2, 3, 2, 4))
    yield "zp2-4d", _v2(sample((3, 4, 5, 6), "<f4", 37), (2, 3, 2, 4))
    yield "zp3-chunk-larger-than-array", _v3(data, (64, 64))
    yield "zp3-zero-length", _v3(np.zeros((0, 5), "<f4"), (3, 2))
    yield "zp2-zero-length", _v2(np.zeros((4, 0, 3), "<i2"), (2, 2, 2))
    yield "zp3-zero-length-1d", _v3(np.zeros((0,), "<u8"), (4,))


DROP = 0b1001_0110_1011  # chunks deleted in the fill-value cases


def _fill_cases() -> Iterator[tuple[str, Builder]]:
    floats = sample((9, 10), "<f8", 41)
    for label, fill in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf), ("42.5", 42.5)):
        for fmt, make in (("zp3", _v3), ("zp2", _v2)):
            yield f"{fmt}-fill-{label}-missing", make(floats, (3, 4), fill_value=fill, drop=DROP)
    ints = sample((9, 10), "<i8", 42)
    yield "zp3-fill-int-missing", _v3(ints, (3, 4), fill_value=-12345, drop=DROP)
    yield "zp2-fill-int-missing", _v2(ints, (3, 4), fill_value=-12345, drop=DROP)
    yield "zp2-fill-uint64-max", _v2(sample((9, 10), "<u8", 43), (3, 4), fill_value=2**64 - 1, drop=DROP)
    yield "zp3-fill-bool-true", _v3(sample((9, 10), "bool", 44), (3, 4), fill_value=True, drop=DROP)
    yield "zp3-fill-complex", _v3(sample((9, 10), "<c8", 45), (3, 4), fill_value=complex(1.5, -np.inf), drop=DROP)
    yield "zp2-fill-complex", _v2(sample((9, 10), "<c16", 45), (3, 4), fill_value=complex(np.nan, 2), drop=DROP)
    yield "zp3-fill-bytes", _v3(sample((9, 10), "S4", 46), (3, 4), fill_value=b"ab", drop=DROP)
    yield "zp2-fill-bytes", _v2(sample((9, 10), "S4", 46), (3, 4), fill_value=b"abcd", drop=DROP)
    yield "zp3-fill-unicode", _v3(sample((9, 10), "<U3", 47), (3, 4), fill_value="é€", drop=DROP)
    yield "zp2-fill-unicode", _v2(sample((9, 10), "<U3", 47), (3, 4), fill_value="zß", drop=DROP)
    times = sample((9, 10), "<M8[s]", 48)
    yield "zp3-fill-datetime-nat", _v3(times, (3, 4), fill_value=np.datetime64("NaT"), drop=DROP)
    yield "zp2-fill-datetime", _v2(times, (3, 4), fill_value=np.datetime64(12345, "s"), drop=DROP)
    yield "zp3-fill-f2-nan", _v3(sample((9, 10), "<f2", 49), (3, 4), fill_value=np.nan, drop=DROP)
    yield "zp3-fill-big-endian", _v3(sample((9, 10), ">i4", 50), (3, 4), fill_value=-2, drop=DROP,
                                     serializer=BytesCodec(endian="big"))
    yield "zp3-all-missing", _v3(np.full((9, 10), 7, "<i2"), (3, 4), fill_value=7)
    yield "zp2-none-fill-missing", _v2(sample((9, 10), "<i4", 51), (3, 4), fill_value=None, drop=DROP)


def _tensorstore_cases() -> Iterator[tuple[str, Builder]]:
    f4 = sample((13, 17), "<f4", 61)
    i2 = sample((13, 17), "<i2", 62)
    yield "ts3-sharding-start", _ts3(f4, (6, 8), [_sharding((3, 4), [_LE, {"name": "zstd"}], "start")])
    yield "ts3-sharding-end", _ts3(f4, (6, 8), [_sharding((3, 4), [_LE, {"name": "gzip"}], "end")])
    yield "ts3-sharding-start-blank", _ts3(blank_chunks(i2, (3, 4), 5), (6, 8),
                                           [_sharding((3, 4), [_BE, {"name": "crc32c"}], "start")], fill_value=5)
    yield "ts3-sharding-nested", _ts3(i2, (12, 16), [_sharding((6, 8), [_sharding((3, 4), [_LE], "start")], "end")])
    yield "ts3-transpose-blosc", _ts3(f4, (4, 5), [{"name": "transpose", "configuration": {"order": [1, 0]}}, _LE,
                                                   {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5,
                                                                                       "shuffle": "shuffle",
                                                                                       "typesize": 4}}])
    yield "ts3-big-endian", _ts3(i2.astype(">i2"), (4, 5), [_BE], data_type="int16")
    yield "ts3-key-v2", _ts3(i2, (4, 5), [_LE], key_encoding={"name": "v2", "configuration": {"separator": "."}})
    yield "ts3-fill-nan", _ts3(blank_chunks(f4, (4, 5), np.nan), (4, 5), [_LE, {"name": "gzip"}], fill_value="NaN")
    yield "ts3-bool", _ts3(sample((13, 17), "bool", 63), (4, 5), [{"name": "bytes"}], fill_value=False)
    yield "ts3-c16", _ts3(sample((7, 6), "<c16", 64), (4, 5), [_LE, {"name": "zstd"}], fill_value=[0, 0])
    yield "ts2-blosc", _ts2(f4, (4, 5), {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1})
    yield "ts2-zlib-F", _ts2(i2, (4, 5), {"id": "zlib", "level": 1}, order="F")
    yield "ts2-zstd-slash", _ts2(i2, (4, 5), {"id": "zstd", "level": 1}, separator="/")
    yield "ts2-bz2-bigendian", _ts2(i2.astype(">i2"), (4, 5), {"id": "bz2", "level": 9}, fill_value=-1)
    yield "ts2-none-fill-nan", _ts2(blank_chunks(f4, (4, 5), np.nan), (4, 5), None, fill_value="NaN")
    yield "ts2-u8", _ts2(sample((13, 17), "<u8", 65), (4, 5), {"id": "gzip", "level": 3})


with quiet():  # constructing zarr's numcodecs.* wrappers warns
    ORACLES: dict[str, Builder] = dict(_cases())


# --------------------------------------------------------------- hierarchies


@dataclass(frozen=True)
class NodeSpec:
    kind: str  # "array" or "group"
    attributes: dict[str, Any] = field(default_factory=dict)
    children: tuple[str, ...] = ()
    dimension_names: tuple[str | None, ...] | None = None
    expected: np.ndarray | None = None


@dataclass(frozen=True)
class HierarchyOracle:
    store: Path
    nodes: dict[str, NodeSpec]


def write_hierarchy(root: Path, zarr_format: int, *, consolidated: bool = False) -> HierarchyOracle:
    """A root group with attributes, nested groups, arrays with dimension names."""
    store = root / f"h{zarr_format}.zarr"
    nodes: dict[str, NodeSpec] = {}
    with quiet():
        top = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
        top.attrs.update({"title": "hier", "nested": {"k": [1, 2.5, None]}, "nan": float("nan")})
        temps = top.create_array("temperature", shape=(4, 6), chunks=(2, 3), dtype="<f4", fill_value=np.nan,
                                 **_dims(zarr_format, ("time", "x")))
        temps[...] = sample((4, 6), "<f4", 71)
        temps.attrs["units"] = "K"
        sub = top.create_group("obs", attributes={"level": 1})
        deeper = sub.create_group("deeper")
        counts = deeper.create_array("counts", shape=(5,), chunks=(2,), dtype="<u2", **_dims(zarr_format, ("n",)))
        counts[...] = np.arange(5, dtype="<u2") * 3
        sub.create_array("flags", shape=(3, 2), chunks=(3, 2), dtype="bool")[...] = [[1, 0], [0, 1], [1, 1]]
        top.create_group("empty")
        if consolidated:
            zarr.consolidate_metadata(str(store), zarr_format=zarr_format)
    nodes[""] = NodeSpec("group", {"title": "hier", "nested": {"k": [1, 2.5, None]}, "nan": float("nan")},
                         ("empty", "obs", "temperature"))
    nodes["temperature"] = NodeSpec("array", _dim_attrs(zarr_format, ("time", "x"), {"units": "K"}),
                                    dimension_names=("time", "x"), expected=zarr_read(store, "temperature"))
    nodes["obs"] = NodeSpec("group", {"level": 1}, ("deeper", "flags"))
    nodes["obs/deeper"] = NodeSpec("group", {}, ("counts",))
    nodes["obs/deeper/counts"] = NodeSpec("array", _dim_attrs(zarr_format, ("n",), {}), dimension_names=("n",),
                                          expected=zarr_read(store, "obs/deeper/counts"))
    nodes["obs/flags"] = NodeSpec("array", {}, expected=zarr_read(store, "obs/flags"))
    nodes["empty"] = NodeSpec("group")
    return HierarchyOracle(store, nodes)


def _dims(zarr_format: int, names: tuple[str, ...]) -> dict[str, Any]:
    """v3 stores dimension names in metadata; v2 (xarray) in the `_ARRAY_DIMENSIONS` attribute."""
    if zarr_format == 3:
        return {"dimension_names": names}
    return {"attributes": {"_ARRAY_DIMENSIONS": list(names)}}


def _dim_attrs(zarr_format: int, names: tuple[str, ...], attrs: dict[str, Any]) -> dict[str, Any]:
    return {**attrs, "_ARRAY_DIMENSIONS": list(names)} if zarr_format == 2 else attrs
