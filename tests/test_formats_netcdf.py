"""formats/netcdf.py without a mount: files built from zarr-python stores, parsed by scipy and netCDF4.

Every type the mapping names (bool, float16, uint16 with `_Unsigned`, big-endian
sources, fixed-width bytes and text, zero-length dimensions, scalars), read
whole and in odd-sized pieces (reads that start and end inside elements).
Expected values come from zarr-python, never from zarrfs.
"""

from __future__ import annotations

import io
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import zarr
from scipy.io import netcdf_file

from zarrfs.errors import InexactValueError
from zarrfs.formats.netcdf import (CDF2_VSIZE_LIMIT, NetcdfLayout, Variable, is_dataset_group,
                                   netcdf_plan, read_variable)
from zarrfs.model.meta import ArrayMeta

ARRAYS = {
    "flag": (np.array([True, False, True]), ["n"]),
    "half": (np.array([0.5, -1.25, 3.0], "float16"), ["n"]),
    "level": (np.array([1, 60000, 65535], "uint16"), ["n"]),
    "big": (np.arange(6, dtype=">i4").reshape(2, 3) - 3, ["m", "n"]),
    "code": (np.array([b"ab", b"cde", b""], "S3"), ["n"]),
    "label": (np.array(["x", "yz", "é"], "U2"), ["n"]),
    "empty": (np.zeros((0, 3), "float64"), ["k", "n"]),
    "scalar": (np.array(7, "int16"), []),
    "odd": (np.arange(5, dtype="<f8"), ["p"]),
}


def _store(path: Path, zarr_format: int) -> Path:
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format, attributes={"title": "t", "n_list": [1, 2]})
    for name, (values, dims) in ARRAYS.items():
        attributes = {"units": "m"} if name == "big" else {}
        if zarr_format == 2:
            attributes["_ARRAY_DIMENSIONS"] = dims
            array = group.create_array(name, shape=values.shape, dtype=values.dtype, attributes=attributes,
                                       fill_value=None)
        else:
            array = group.create_array(name, shape=values.shape, dtype=values.dtype, attributes=attributes,
                                       dimension_names=dims or None)
        if values.size:
            array[...] = values
    return path


def _file_bytes(layout: NetcdfLayout, arrays: dict[str, np.ndarray], piece: int) -> bytes:
    def read_array(index: int, start: int, stop: int, target: np.ndarray) -> None:
        data = np.ascontiguousarray(arrays[layout.variables[index].array_path]).view(np.uint8).reshape(-1)
        target[:] = data[start:stop]

    out = np.zeros(layout.size, np.uint8)
    for offset in range(0, layout.size, piece):
        chunk = out[offset:offset + piece]
        assert layout.read_into(offset, chunk, read_array) == len(chunk)
    return out.tobytes()


def _plan(open_engine, path: Path, version: int):
    engine = open_engine(path)
    arrays = [(child.name, child.node) for child in engine.hierarchy.children("")
              if isinstance(child.node, ArrayMeta)]
    assert is_dataset_group(arrays)
    values = {meta.path: zarr.open_array(path / meta.path, mode="r")[...] for _, meta in arrays}
    return netcdf_plan(engine.hierarchy.root(), arrays, version), values


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("piece", [7, 4096])
def test_scipy_reads_every_mapped_type(open_engine, tmp_path: Path, zarr_format: int, piece: int) -> None:
    plan, values = _plan(open_engine, _store(tmp_path / "s.zarr", zarr_format), 2)
    assert plan.left_out == (("empty", "a dimension of length 0"),) and not plan.needs_cdf5
    data = _file_bytes(plan.layout, values, piece)
    with netcdf_file(io.BytesIO(data), "r", mmap=False, maskandscale=False) as nc:
        assert nc.version_byte == 2
        assert nc.title == b"t" and list(nc.n_list) == [1, 2]
        got = {name: nc.variables[name] for name in ARRAYS if name != "empty"}
        np.testing.assert_array_equal(got["flag"][:], [1, 0, 1])
        assert got["flag"].typecode() == "b" and got["flag"]._attributes["dtype"] == b"bool"
        np.testing.assert_array_equal(got["half"][:], ARRAYS["half"][0].astype("float32"))
        np.testing.assert_array_equal(got["level"][:].view(">u2"), ARRAYS["level"][0])
        assert got["level"]._attributes["_Unsigned"] == b"true"
        np.testing.assert_array_equal(got["big"][:], ARRAYS["big"][0])
        assert got["big"].units == b"m" and got["big"].dimensions == ("m", "n")
        np.testing.assert_array_equal(got["code"][:], np.array([list(b"ab\0"), list(b"cde"), [0, 0, 0]],
                                                               "u1").view("S1"))
        labels = [bytes(row).rstrip(b"\0").decode() for row in got["label"][:].view("u1")]
        assert labels == ["x", "yz", "é"] and got["label"].dimensions == ("n", "string2")
        assert "empty" not in nc.variables and "k" not in nc.dimensions
        assert got["scalar"].getValue() == 7
        np.testing.assert_array_equal(got["odd"][:], np.arange(5.0))


def test_netcdf4_reads_the_cdf5_file(open_engine, tmp_path: Path) -> None:
    plan, values = _plan(open_engine, _store(tmp_path / "s.zarr", 3), 5)
    (tmp_path / "f.nc").write_bytes(_file_bytes(plan.layout, values, 4096))
    with netCDF4.Dataset(tmp_path / "f.nc") as nc:
        assert nc.data_model == "NETCDF3_64BIT_DATA"
        assert nc["level"].dtype == np.uint16
        np.testing.assert_array_equal(nc["level"][:], ARRAYS["level"][0])
        np.testing.assert_array_equal(nc["big"][:], ARRAYS["big"][0])


def test_int64_is_double_when_exact_and_refused_when_not() -> None:
    variable = Variable("t", "t", 0, 24, (3,), np.dtype("<i8"), np.dtype(">f8"), "exact")
    source = np.array([0, -2**63, 2**53], "<i8")
    out = np.empty(24, np.uint8)
    read_variable(variable, 0, 24, out, lambda a, b, t: t.__setitem__(slice(None), source.view(np.uint8)[a:b]))
    np.testing.assert_array_equal(out.view(">f8"), source.astype("float64"))
    source[2] = 2**53 + 1
    with pytest.raises(InexactValueError):
        read_variable(variable, 0, 24, out, lambda a, b, t: t.__setitem__(slice(None), source.view(np.uint8)[a:b]))


def test_dimension_conflict_and_vlen_are_left_out(open_engine, tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "c.zarr", mode="w", zarr_format=3)
    group.create_array("a", shape=(3,), dtype="int8", dimension_names=["n"])
    group.create_array("b", shape=(4,), dtype="int8", dimension_names=["n"])
    group.create_array("s", shape=(2,), dtype=str, dimension_names=["n"])
    engine = open_engine(tmp_path / "c.zarr")
    arrays = [(c.name, c.node) for c in engine.hierarchy.children("") if isinstance(c.node, ArrayMeta)]
    plan = netcdf_plan(engine.hierarchy.root(), arrays)
    reasons = dict(plan.left_out)
    assert [v.name for v in plan.layout.variables] == ["a"]
    assert "length 4 here and 3 in /a" in reasons["b"] and "variable-length" in reasons["s"]


def test_cdf2_holds_one_large_variable_last(open_engine, tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "l.zarr", mode="w", zarr_format=3)
    for name in ("huge1", "huge2"):  # 8 GiB each, no chunk written: the plan reads metadata alone
        group.create_array(name, shape=(2**31 - 1,), dtype="int32", chunks=(2**24,), dimension_names=["n"])
    group.create_array("small", shape=(3,), dtype="int32", dimension_names=["m"])
    engine = open_engine(tmp_path / "l.zarr")
    arrays = [(c.name, c.node) for c in engine.hierarchy.children("") if isinstance(c.node, ArrayMeta)]
    plan = netcdf_plan(engine.hierarchy.root(), arrays, 2)
    assert [v.name for v in plan.layout.variables] == ["small", "huge1"] and plan.needs_cdf5
    assert [path for path, _ in plan.left_out] == ["huge2"]
    assert plan.layout.size == plan.layout.variables[-1].begin + (2**31 - 1) * 4
    with open(tmp_path / "l.nc", "wb") as sparse:  # the header, then a hole as long as the variables
        sparse.write(plan.layout.header)
        sparse.truncate(plan.layout.size)
    with netCDF4.Dataset(tmp_path / "l.nc") as nc:  # netCDF-C takes the vsize of the last variable
        assert nc["huge1"].shape == (2**31 - 1,) and nc["small"][:].tolist() == [0, 0, 0]
    cdf5 = netcdf_plan(engine.hierarchy.root(), arrays, 5)
    assert [v.name for v in cdf5.layout.variables] == ["small", "huge1", "huge2"] and cdf5.left_out == ()
