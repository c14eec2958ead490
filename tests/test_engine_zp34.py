"""What zarr-python 3.2+ writes, read by zarrfs and compared with zarr-python 3.4.2's own read.

scale_offset and cast_value (alone, chained, inside and outside sharding),
codecs given as bare names, zstd with checksums (v2 and v3), and the data
types zarr-python 3.2+ names differently (numpy.datetime64/timedelta64 with
a scale factor, `struct`). Stores come from `zp3x_writer.py` running in
`.venv-zp34` (the `zp3x` fixture).
"""

from __future__ import annotations

import errno
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zp3x import Writer, zp3x  # noqa: F401  (zp3x is the fixture)
from zarrfs.engine.engine import Engine
from zarrfs.errors import ChunkError, MetadataError, ZarrfsError

RNG = np.random.default_rng(34)


def read_all(engine: Engine, path: str) -> np.ndarray:
    reader = engine.reader(path)
    return np.frombuffer(reader.read(0, reader.nbytes), reader.meta.dtype).reshape(reader.meta.shape)


def assert_same(got: np.ndarray, expected: np.ndarray) -> None:
    """Equal values, NaN where NaN, and the sign of zeros kept; byte order may differ."""
    assert got.shape == expected.shape
    assert got.dtype.newbyteorder("=") == expected.dtype.newbyteorder("="), (got.dtype, expected.dtype)
    expected = expected.astype(got.dtype)
    if got.dtype.names:
        assert got.tobytes() == expected.tobytes()
        return
    np.testing.assert_array_equal(got, expected)
    if got.dtype.kind in "fc":
        np.testing.assert_array_equal(np.signbit(got.real), np.signbit(expected.real))


def scale_offset(offset: Any = None, scale: Any = None) -> dict[str, Any]:
    config = {k: v for k, v in (("offset", offset), ("scale", scale)) if v is not None}
    return {"name": "scale_offset", "configuration": config}


def cast_value(data_type: str, **options: Any) -> dict[str, Any]:
    return {"name": "cast_value", "configuration": {"data_type": data_type, **options}}


NAN_AS_ZERO = {"encode": [["NaN", 0]], "decode": [[0, "NaN"]]}
ZSTD_CHECKSUM = {"name": "zstd", "configuration": {"level": 3, "checksum": True}}

# id -> (create_array arguments, data written, region written or None for all)
CASES: dict[str, tuple[dict[str, Any], np.ndarray, list[tuple[int, int]] | None]] = {
    "scale_offset-float32": (
        {"shape": [12], "chunks": [5], "dtype": "float32", "filters": [scale_offset(5, 0.1)]},
        np.linspace(-3, 40, 12, dtype="float32"), None),
    "scale_offset-int16": (
        {"shape": [12], "chunks": [5], "dtype": "int16", "filters": [scale_offset(100, 2)]},
        np.arange(-6, 6, dtype="int16") * 7 + 100, None),
    "scale_offset-uint64": (
        {"shape": [6], "chunks": [4], "dtype": "uint64", "fill_value": 2**63, "filters": [scale_offset(2**63, 1)]},
        np.array([2**63, 2**64 - 1, 2**63 + 5, 2**63 + 7, 2**64 - 2, 2**63 + 1], "uint64"), None),
    "scale_offset-default-config": (
        {"shape": [6], "chunks": [4], "dtype": "float64", "filters": [scale_offset()]},
        np.linspace(0, 1, 6), None),
    "float64-as-uint8-nan-fill": (  # the spec's example: [0, 2540] -> [1, 255], NaN <-> 0
        {"shape": [40], "chunks": [8], "dtype": "float64", "fill_value": "NaN",
         "filters": [scale_offset(-10, 0.1), cast_value("uint8", rounding="nearest-even", scalar_map=NAN_AS_ZERO)],
         "compressors": [ZSTD_CHECKSUM]},
        np.where(np.arange(30) % 7 == 3, np.nan, np.linspace(0, 2540, 30)), [(0, 30)]),
    "float32-as-int16-towards-zero-clamp": (
        {"shape": [10], "chunks": [4], "dtype": "float32",
         "filters": [cast_value("int16", rounding="towards-zero", out_of_range="clamp")]},
        np.array([-1e6, -32768.9, -2.7, -0.5, 0, 0.5, 2.7, 32767.9, 1e6, 12.5], "float32"), None),
    "int32-as-int8-wrap": (
        {"shape": [8], "chunks": [3], "dtype": "int32", "filters": [cast_value("int8", out_of_range="wrap")]},
        np.array([-129, -128, 0, 127, 128, 255, 256, 1000], "int32"), None),
    "int32-as-float32-clamp": (  # 2**31 - 1 is stored as 2**31: decoding clamps it back
        {"shape": [5], "chunks": [5], "dtype": "int32", "filters": [cast_value("float32", out_of_range="clamp")]},
        np.array([2**31 - 1, -(2**31), 16777217, -5, 0], "int32"), None),
    "float64-as-float32": (
        {"shape": [6], "chunks": [4], "dtype": "float64", "filters": [cast_value("float32")]},
        np.array([0.1, -0.0, np.nan, np.inf, -1e30, 1e-40]), None),
    "float32-as-float16-clamp": (
        {"shape": [6], "chunks": [4], "dtype": "float32",
         "filters": [cast_value("float16", out_of_range="clamp")]},
        np.array([1e6, -1e6, 65504, 0.1, -0.0, np.nan], "float32"), None),
    "uint16-offset-then-uint8": (  # the spec's "range reduction" example
        {"shape": [8], "chunks": [3], "dtype": "uint16", "fill_value": 1000,
         "filters": [scale_offset(1000), cast_value("uint8")]},
        np.arange(1000, 1256, 32, dtype="uint16"), None),
    "sharded-eopf": (  # Sentinel-2 EOPF style: scale_offset + cast_value inside sharding, empty inner chunks
        {"shape": [20, 30], "chunks": [5, 5], "shards": [10, 15], "dtype": "float64", "fill_value": "NaN",
         "filters": [scale_offset(-0.1, 10000), cast_value("uint16", scalar_map=NAN_AS_ZERO)],
         "compressors": [ZSTD_CHECKSUM]},
        np.round(RNG.uniform(0, 1.5, (12, 30)), 4), [(0, 12), (0, 30)]),
    "scale-then-sharded": (  # the codecs before the shard: empty inner chunks hold the *encoded* fill
        {"shape": [16], "chunks": [16], "dtype": "float32", "fill_value": 7.5,
         "filters": [scale_offset(0.5, 2), cast_value("int8")],
         "serializer": {"name": "sharding_indexed", "configuration": {
             "chunk_shape": [4], "codecs": [{"name": "bytes"}], "index_codecs": [
                 {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}},
        np.array([1, 2, 3.5, -4], "float32"), [(4, 8)]),
    "zstd-checksum-v3": (
        {"shape": [100], "chunks": [30], "dtype": "int32", "compressors": [ZSTD_CHECKSUM]},
        np.arange(100, dtype="int32") % 13, None),
    "zstd-checksum-v2": (
        {"shape": [100], "chunks": [30], "dtype": "int32", "zarr_format": 2,
         "compressors": {"id": "zstd", "level": 3, "checksum": True}},
        np.arange(100, dtype="int32") % 13, None),
    "datetime64-10s": (
        {"shape": [5], "chunks": [2], "dtype": "M8[10s]", "fill_value": "NaT"},
        np.array(["2024-01-01T00:00:00", "NaT", "1969-12-31T23:59:50", "2000-02-29T12:00:00",
                  "2262-01-01T00:00:00"], "M8[10s]"), None),
    "timedelta64-ms": (
        {"shape": [4], "chunks": [3], "dtype": "m8[ms]"},
        np.array([0, -1, 2**40, "NaT"], "m8[ms]"), None),
    "struct": (
        {"shape": [5], "chunks": [2], "dtype": [["a", "<i2"], ["b", "<f4"], ["c", "|u1"]]},
        np.array([(1, 1.5, 3), (-2, np.nan, 255), (0, 0, 0), (7, -0.0, 1), (2, 2, 2)],
                 [("a", "<i2"), ("b", "<f4"), ("c", "u1")]), None),
}


@pytest.mark.parametrize("case", CASES)
def test_reads_what_zarr_python_34_writes(case: str, zp3x: Writer, open_engine, tmp_path: Path) -> None:
    create, data, region = CASES[case]
    store = tmp_path / "s.zarr"
    written = zp3x.write(store, "a", create, data=data, region=region)
    assert written.ok, written.error
    assert_same(read_all(open_engine(store), "a"), written.expected)


def test_bare_codec_names(zp3x: Writer, open_engine, tmp_path: Path) -> None:
    """Codecs named by a bare string mean no configuration, top level and inside a shard.

    zarr-python 3.4.2 itself refuses bare names ("Expected dict"), so it reads
    the store in the object form, and zarrfs must read the bare form the same.
    """
    store = tmp_path / "s.zarr"
    written = {
        "a": zp3x.write(store, "a", {"shape": [12], "chunks": [3], "shards": [6], "dtype": "uint8",
                                     "compressors": [{"name": "crc32c"}]}, data=np.arange(12, dtype="uint8")),
        "b": zp3x.write(store, "b", {"shape": [5], "chunks": [5], "dtype": "uint8", "filters": [scale_offset()],
                                     "compressors": [{"name": "crc32c"}]}, data=np.arange(5, dtype="uint8")),
    }
    assert all(w.ok for w in written.values()), [w.error for w in written.values()]
    bare = {"a": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [3], "codecs": ["bytes", "crc32c"], "index_codecs": ["bytes", "crc32c"]}}],
            "b": ["scale_offset", "bytes", "crc32c"]}
    for name, codecs in bare.items():
        doc = json.loads((store / name / "zarr.json").read_text())
        doc["codecs"] = codecs
        (store / name / "zarr.json").write_text(json.dumps(doc))
    engine = open_engine(store)
    for name, w in written.items():
        assert_same(read_all(engine, name), w.expected)


# ------------------------------------------------------- decoding arbitrary stored values


def declare(zp3x: Writer, store: Path, stored: np.ndarray, array_type: str, codec: dict[str, Any],
            fill: Any) -> Any:
    """Store `stored` as a plain array, then declare it `array_type` behind `codec` (zarr-python decodes it)."""
    create = {"shape": list(stored.shape), "chunks": list(stored.shape), "dtype": stored.dtype.str,
              "fill_value": 0, "compressors": None}
    metadata = {"data_type": array_type, "fill_value": fill,
                "codecs": [codec, {"name": "bytes", "configuration": {"endian": "little"}}]}
    return zp3x.write(store, "a", create, data=stored, metadata=metadata)


def zarrfs_read(store: Path) -> np.ndarray | ZarrfsError:
    """The array, or what refused it: MetadataError at open, ChunkError (EIO) at the read."""
    engine = Engine.open(str(store))
    try:
        return read_all(engine, "a")
    except (ChunkError, MetadataError) as exc:
        return exc
    finally:
        engine.close()


def assert_agrees(written: Any, got: np.ndarray | ZarrfsError) -> None:
    """The same numbers where zarr-python reads; an error (never numbers) where it refuses."""
    if written.ok:
        assert not isinstance(got, ZarrfsError), f"zarr-python read {written.expected}, zarrfs failed: {got}"
        assert_same(got, written.expected)
    else:
        assert isinstance(got, ZarrfsError), f"zarr-python failed ({written.error}), zarrfs read {got}"
        assert got.errno == errno.EIO


FLOAT_TYPES = {"float16": "<f2", "float32": "<f4", "float64": "<f8"}
INT_TYPES = {f"{k}{b}": f"<{k[0]}{b // 8}" for k in ("int", "uint") for b in (8, 16, 32, 64)}
NUMERIC = {**FLOAT_TYPES, **INT_TYPES}


@st.composite
def cast_cases(draw: st.DrawFn) -> tuple[np.ndarray, str, dict[str, Any]]:
    stored_type = draw(st.sampled_from(sorted(NUMERIC)))
    array_type = draw(st.sampled_from(sorted(NUMERIC)))
    dtype = np.dtype(NUMERIC[stored_type])
    if dtype.kind == "f":
        values = st.floats(width=dtype.itemsize * 8, allow_nan=True, allow_infinity=True)
    else:
        info = np.iinfo(dtype)
        values = st.integers(int(info.min), int(info.max))
    stored = np.array(draw(st.lists(values, min_size=1, max_size=8)), dtype)
    config: dict[str, Any] = {"data_type": stored_type}
    if draw(st.booleans()):
        config["rounding"] = draw(st.sampled_from(
            ["nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away"]))
    wrap_allowed = stored_type in INT_TYPES  # the spec permits wrap only for an integer data_type
    rule = draw(st.sampled_from([None, "clamp", "wrap"] if wrap_allowed else [None, "clamp"]))
    if rule:
        config["out_of_range"] = rule
    if draw(st.booleans()) and len(stored):
        key = stored[0].item()
        value = 0 if array_type in INT_TYPES else "NaN"
        config["scalar_map"] = {"decode": [["NaN" if isinstance(key, float) and math.isnan(key) else
                                            _json_number(key), value]]}
    return stored, array_type, {"name": "cast_value", "configuration": config}


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cast_cases())
def test_cast_value_decodes_as_zarr_python(case: tuple[np.ndarray, str, dict[str, Any]], zp3x: Writer,
                                           tmp_path: Path) -> None:
    """Any stored values, any pair of types and rules: the same numbers, or an error where zarr-python errs."""
    stored, array_type, codec = case
    store = tmp_path / f"cast-{RNG.integers(1 << 62)}.zarr"
    written = declare(zp3x, store, stored, array_type, codec, 0)
    if not written.ok and written.stage == "write":
        return  # zarr-python refuses the configuration itself (e.g. its fill value does not survive)
    assert_agrees(written, zarrfs_read(store))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_scale_offset_decodes_as_zarr_python(data: st.DataObject, zp3x: Writer, tmp_path: Path) -> None:
    array_type = data.draw(st.sampled_from(sorted(NUMERIC)))
    dtype = np.dtype(NUMERIC[array_type])
    if dtype.kind == "f":
        values = st.floats(width=dtype.itemsize * 8)
        offset, scale = data.draw(values), data.draw(values.filter(bool))
    else:
        info = np.iinfo(dtype)
        values = st.integers(int(info.min), int(info.max))
        offset, scale = data.draw(values), data.draw(st.integers(-5, 5).filter(bool) | values.filter(bool))
    stored = np.array(data.draw(st.lists(values, min_size=1, max_size=8)), dtype)
    if dtype == np.int64 and not all(-(2**63) <= v < 2**63 for v in
                                     [-offset * scale, *(int(x) // scale + offset for x in stored)]):
        return  # zarr-python 3.4.2 computes int64 in int64 and wraps silently; the spec (and zarrfs) make it an error
    store = tmp_path / f"so-{RNG.integers(1 << 62)}.zarr"
    codec = scale_offset(_json_number(offset) if not (isinstance(offset, float) and math.isnan(offset)) else "NaN",
                         _json_number(scale) if not (isinstance(scale, float) and math.isnan(scale)) else "NaN")
    written = declare(zp3x, store, stored, array_type, codec, 0)
    if not written.ok and written.stage == "write":
        return
    assert_agrees(written, zarrfs_read(store))


# ------------------------------------------------------------------ bad input

BAD_CONFIGS = [
    ("cast-unknown-key", cast_value("uint8", future=1), "future"),
    ("cast-bad-rounding", cast_value("uint8", rounding="half-up"), "half-up"),
    ("cast-bad-out-of-range", cast_value("uint8", out_of_range="saturate"), "saturate"),
    ("cast-wrap-float", cast_value("float16", out_of_range="wrap"), "wrap"),
    ("cast-no-data-type", {"name": "cast_value", "configuration": {}}, "data_type"),
    ("cast-bool", cast_value("bool"), "bool"),
    ("cast-scalar-map-key", cast_value("uint8", scalar_map={"encode": [], "sideways": []}), "sideways"),
    ("cast-scalar-map-pair", cast_value("uint8", scalar_map={"decode": [[0]]}), "pairs"),
    ("cast-scalar-map-value", cast_value("uint8", scalar_map={"decode": [[300, 0]]}), "300"),
    ("scale-unknown-key", {"name": "scale_offset", "configuration": {"scale": 2, "factor": 3}}, "factor"),
    ("scale-zero", scale_offset(0, 0), "zero"),
    ("scale-not-a-number", scale_offset("five", 1), "five"),
]


@pytest.mark.parametrize("codec,word", [(c, w) for _, c, w in BAD_CONFIGS], ids=[i for i, _, _ in BAD_CONFIGS])
def test_bad_configuration_is_reported_as_such(codec: dict[str, Any], word: str, tmp_path: Path,
                                               open_engine) -> None:
    store = tmp_path / "s.zarr"
    (store / "a").mkdir(parents=True)
    (store / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    (store / "a" / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [codec, {"name": "bytes", "configuration": {"endian": "little"}}]}))
    with pytest.raises(MetadataError) as raised:
        open_engine(store).hierarchy.node("a")
    assert type(raised.value) is MetadataError
    assert "bad configuration" in str(raised.value) and word in str(raised.value)
    assert "unknown codec" not in str(raised.value)


def test_out_of_range_without_rule_is_eio(zp3x: Writer, tmp_path: Path) -> None:
    """int16 300 stored for a uint8 array with no out_of_range: that chunk fails, the others read."""
    store = tmp_path / "s.zarr"
    create = {"shape": [6], "chunks": [3], "dtype": "<i2", "fill_value": 0, "compressors": None}
    metadata = {"data_type": "uint8", "codecs": [cast_value("int16"), {"name": "bytes", "configuration": {
        "endian": "little"}}]}
    written = zp3x.write(store, "a", create, data=np.array([1, 2, 3, 4, 300, 6], "<i2"), metadata=metadata)
    assert not written.ok and written.stage == "read"  # zarr-python refuses it too
    engine = Engine.open(str(store))
    try:
        reader = engine.reader("a")
        assert reader.read(0, 3) == bytes([1, 2, 3])
        with pytest.raises(ChunkError) as raised:
            reader.read(3, 6)
        assert raised.value.errno == errno.EIO
        assert "a/c/1" in str(raised.value) and "out_of_range" in str(raised.value)
    finally:
        engine.close()


# ------------------------------------------------------------------ GDAL's LZMA


@pytest.mark.parametrize("delta", [1, 2])
def test_gdal_lzma_with_delta(delta: int, tmp_path: Path, open_engine) -> None:
    """`gdal_translate -of Zarr -co COMPRESS=LZMA` writes {"id": "lzma", "preset": 6, "delta": d}: read as GDAL reads it."""
    import shutil
    import subprocess

    if shutil.which("gdal_translate") is None:
        pytest.skip("GDAL is not installed (bash scripts/setup.sh --clients)")
    data = (np.arange(64 * 48, dtype="<u2").reshape(64, 48) * 37) % 1009
    data.tofile(tmp_path / "in.raw")
    (tmp_path / "in.hdr").write_text("ENVI\nsamples = 48\nlines = 64\nbands = 1\nheader offset = 0\n"
                                     "file type = ENVI Standard\ndata type = 12\ninterleave = bsq\nbyte order = 0\n")
    store = tmp_path / "g.zarr"
    subprocess.run(["gdal_translate", "-q", "-of", "Zarr", "-co", "COMPRESS=LZMA", "-co", f"LZMA_DELTA={delta}",
                    "-co", "BLOCKSIZE=32,16", str(tmp_path / "in.raw"), str(store)], check=True)
    zarray = json.loads((store / "g" / ".zarray").read_text())
    assert zarray["compressor"] == {"id": "lzma", "preset": 6, "delta": delta}
    subprocess.run(["gdal_translate", "-q", "-of", "ENVI", str(store), str(tmp_path / "back.raw")], check=True)
    by_gdal = np.fromfile(tmp_path / "back.raw", "<u2").reshape(64, 48)
    np.testing.assert_array_equal(by_gdal, data)
    np.testing.assert_array_equal(read_all(open_engine(store), "g"), by_gdal)


# ------------------------------------------------- types numpy has no type for


OPAQUE = ["bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2", "float8_e5m2fnuz",
          "float8_e3m4", "float8_e8m0fnu", "float4_e2m1fn", "int4", "int2"]


@pytest.mark.parametrize("endian", ["little", "big"])
@pytest.mark.parametrize("data_type", OPAQUE)
def test_types_without_numpy_type_are_their_stored_bytes(data_type: str, endian: str, tmp_path: Path,
                                                         open_engine) -> None:
    """tensorstore writes them; zarrfs serves the stored bytes as .raw and .json, no .npy or .tif."""
    import ml_dtypes
    import tensorstore as ts

    from zarrfs.conventions.semantics import Semantics
    from zarrfs.formats import FORMATS

    dtype = np.dtype(getattr(ml_dtypes, data_type))
    integer = data_type.startswith("int")
    # e8m0 has no 1.5 and tensorstore (0.1.x) stores its fill 2.0 as 0x40, not 0x80 = 2**(128 - 127)
    # as the spec and ml_dtypes have it: "NaN" (0xff) is unambiguous.
    fill = 1 if integer else 1.5 if data_type != "float8_e8m0fnu" else "NaN"
    values = np.array([-1, 0, 1, -2, 1] if integer else [0.5, -1.25, 0.0, 2.0, 4.0], dtype)
    store = tmp_path / "s.zarr"
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(store)}, "metadata": {
        "shape": [9], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
        "data_type": data_type, "fill_value": fill,
        "codecs": [{"name": "bytes", "configuration": {"endian": endian}}] if dtype.itemsize > 1 else ["bytes"]}}
    array = ts.open(spec, create=True).result()
    array[0:5] = values  # chunk 2 (elements 6..8) stays fill value
    expected = np.asarray(array.read().result())
    stored = expected.view(np.uint8).reshape(9, dtype.itemsize)
    if endian == "big":
        stored = stored[:, ::-1]
    meta = open_engine(store).hierarchy.node("")
    got = np.frombuffer(read_all(open_engine(store), "").tobytes(), np.uint8).reshape(9, dtype.itemsize)
    if data_type in ("int4", "int2"):  # the spec leaves the unused upper bits to the writer
        bits = 4 if data_type == "int4" else 2
        got, stored = got & ((1 << bits) - 1), stored & ((1 << bits) - 1)
    np.testing.assert_array_equal(got, stored)
    assert meta.opaque_type == data_type and meta.describe()["data_type"] == data_type
    built = {suffix: FORMATS[suffix](meta, Semantics(), "a") for suffix in FORMATS}
    assert built[".npy"] is None and built[".tif"] is None
    assert built[".raw"] is not None and built[".json"] is not None
    assert built[".raw.hdr"] is None and built[".mhd"] is None and built[".nrrd.nhdr"] is None  # headers would lie


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.floats(-1e4, 7e4) | st.just(float("nan")), min_size=1, max_size=40),
       offset=st.integers(-100, 100), scale=st.sampled_from([0.5, 1, 4, 100]),
       rounding=st.sampled_from(["nearest-even", "towards-zero", "nearest-away"]))
def test_chained_inside_sharding_as_zarr_python(values: list[float], offset: int, scale: float, rounding: str,
                                                zp3x: Writer, tmp_path: Path) -> None:
    """Random values through zarr-python's encoder (scale_offset, cast_value to uint16 inside a shard) and back."""
    store = tmp_path / f"chain-{RNG.integers(1 << 62)}.zarr"
    create = {"shape": [48], "chunks": [4], "shards": [16], "dtype": "float64", "fill_value": "NaN",
              "filters": [scale_offset(offset, scale), cast_value("uint16", rounding=rounding, out_of_range="clamp",
                                                                  scalar_map=NAN_AS_ZERO)]}
    written = zp3x.write(store, "a", create, data=np.array(values), region=[(0, len(values))])
    if not written.ok and written.stage == "write":
        return
    assert_agrees(written, zarrfs_read(store))


@pytest.mark.parametrize("delta", ["1", 0, 300, True])
def test_gdal_lzma_bad_delta(delta: Any, tmp_path: Path, open_engine) -> None:
    store = tmp_path / "s.zarr"
    store.mkdir()
    (store / ".zgroup").write_text('{"zarr_format": 2}')
    (store / "a").mkdir()
    (store / "a" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<u2", "fill_value": None, "order": "C",
        "filters": None, "compressor": {"id": "lzma", "preset": 6, "delta": delta}}))
    with pytest.raises(MetadataError) as raised:
        open_engine(store).hierarchy.node("a")
    assert "bad configuration" in str(raised.value) and "delta" in str(raised.value)


@pytest.mark.parametrize("data_type,codec", [("float32", cast_value("bfloat16")), ("int4", cast_value("int8")),
                                             ("bfloat16", scale_offset(1, 2))])
def test_arithmetic_on_types_without_numpy_type_is_unsupported(data_type: str, codec: dict[str, Any],
                                                               tmp_path: Path, open_engine) -> None:
    from zarrfs.errors import UnsupportedError

    store = tmp_path / "s.zarr"
    (store / "a").mkdir(parents=True)
    (store / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    (store / "a" / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [codec, {"name": "bytes", "configuration": {"endian": "little"}}]}))
    with pytest.raises(UnsupportedError) as raised:
        open_engine(store).hierarchy.node("a")
    assert "not supported" in str(raised.value)
