"""NAME.nc end to end: xarray datasets written to Zarr v2 and v3, read through a real mount by NetCDF programs.

Writers: xarray `to_zarr` (v2 and v3; int16 packed with scale_factor/add_offset,
float with a NaN fill, int64 and int32 time, uint8, a fixed-width text
coordinate and a fixed-width bytes variable, 2-D auxiliary lat/lon, a second
dataset in a group with `to_zarr(group=...)`, a variable-length string
variable that NetCDF classic cannot hold), zarr-python for an int64 beyond
a double's exact range. Oracle: the same dataset written by xarray (netCDF4)
as a NetCDF-3 64-bit-offset file. Readers: ncdump, xarray (`netcdf4` and
`scipy` engines), netCDF4-python with mask and scale off, CDO, NCO, GDAL.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import warnings
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from mountutil import mounted, run_zarrfs

pytestmark = [pytest.mark.mount, pytest.mark.clients]

# The one documented difference from the oracle: int64 (xarray's time encoding) is a double in
# CDF-2, where xarray's own NetCDF-3 writer narrows it to int when the values fit.
INT64_AS_DOUBLE = {"time"}
LEFT_OUT = r"INFO zarrfs.files.netcdf_datasets: .*/notes is not a variable of climate\.nc: variable-length str"


def climate(notes: bool = True) -> xr.Dataset:
    """time x lat x lon, with every kind of variable the file maps (see the module docstring)."""
    rng = np.random.default_rng(7)
    time = pd.date_range("2000-01-01", periods=6, freq="D")
    lat = np.linspace(50.0, 40.0, 11)
    lon = np.linspace(-10.0, 10.0, 21)
    t2m = (280 + 10 * rng.standard_normal((6, 11, 21))).astype("float32")
    t2m[0, 0, 0] = np.nan
    precip = rng.random((6, 11, 21)).astype("float32")
    precip[1, 2, 3] = np.nan
    y, x = np.meshgrid(np.arange(4.0), np.arange(5.0), indexing="ij")
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "2 m temperature",
                                                  "standard_name": "air_temperature", "grid_mapping": "crs"}),
            "precip": (("time", "lat", "lon"), precip, {"units": "m", "valid_range": [0.0, 1.0]}),
            "count": (("time", "lat", "lon"), rng.integers(0, 255, (6, 11, 21), dtype="uint8")),
            "crs": ((), np.int32(0), {"grid_mapping_name": "latitude_longitude", "semi_major_axis": 6378137.0}),
            "code": (("station",), np.array([b"alpha", b"beta", b"gamma"], "S5")),
            "sst": (("time", "y", "x"), rng.random((6, 4, 5)).astype("float64"), {"units": "degC"}),
        },
        coords={
            "time": ("time", time, {"axis": "T", "standard_name": "time"}),
            "valid_time": ("time", time + pd.Timedelta(hours=6)),
            "lat": ("lat", lat, {"units": "degrees_north", "axis": "Y"}),
            "lon": ("lon", lon, {"units": "degrees_east", "axis": "X"}),
            "station": ("station", np.array(["a1", "b22", "c333"])),
            "lat2d": (("y", "x"), 40 + y + 0.1 * x, {"units": "degrees_north"}),
            "lon2d": (("y", "x"), -5 + x + 0.1 * y, {"units": "degrees_east"}),
        },
        attrs={"title": "zarrfs NetCDF test", "Conventions": "CF-1.8", "history": "written by xarray",
               "version": 3, "bounds": [1.5, 2.5]},
    )
    ds["t2m"].encoding = {"dtype": "int16", "scale_factor": 0.01, "add_offset": 273.15, "_FillValue": -32768,
                          "chunks": (2, 11, 21)}
    ds["valid_time"].encoding = {"dtype": "int32", "units": "hours since 2000-01-01"}
    if notes:
        ds["notes"] = (("station",), np.array(["north", "east", "south"], dtype=object))
    return ds


def write_oracle(store: Path, zarr_format: int, path: Path) -> None:
    """The store's dataset (as xarray opens it: its variables in the store's order, with their
    encoding) written by xarray as NetCDF-3 (64-bit offset); uint8 as byte + `_Unsigned`, as CDF-2 holds it."""
    ds = xr.open_zarr(store, zarr_format=zarr_format, consolidated=False, decode_times=False).drop_vars("notes")
    # In name order, as zarrfs lists a group (zarr-python's listing order varies): CDO takes a grid's
    # mapping from the first variable on the grid that names one.
    ds = ds[sorted(ds.data_vars)].load()
    ds["count"] = ds["count"].copy(data=ds["count"].values.view("i1"))
    ds["count"].attrs["_Unsigned"] = "true"
    ds["count"].encoding = {}
    ds.to_netcdf(path, format="NETCDF3_64BIT", engine="netcdf4")


@pytest.fixture(scope="module", params=[2, 3])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    """(the Zarr store, the oracle NetCDF-3 file, zarr_format)."""
    tmp = tmp_path_factory.mktemp(f"nc{request.param}")
    ds = climate()
    path = tmp / "climate.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr-python on v3 strings, consolidation
        ds.to_zarr(path, zarr_format=request.param, mode="w", consolidated=False)
        ocean = xr.Dataset({"temp": (("depth",), np.array([15.0, 10.0, 4.0]), {"units": "degC"})},
                           coords={"depth": ("depth", np.array([0, 100, 1000], "int32"), {"positive": "down"})},
                           attrs={"title": "ocean"})
        ocean.to_zarr(path, group="ocean", zarr_format=request.param, mode="w", consolidated=False)
        write_oracle(path, request.param, tmp / "oracle.nc")
    ocean.to_netcdf(tmp / "ocean_oracle.nc", format="NETCDF3_64BIT", engine="netcdf4")
    return path, tmp, request.param


@pytest.fixture(scope="module")
def mount(store: tuple[Path, Path, int]) -> Any:
    path, tmp, _ = store
    with mounted(path, tmp / "mnt", tmp / "log", "--log-level", "info") as mount:
        yield mount
    assert re.search(LEFT_OUT, (tmp / "log").read_text()), "the array left out is named in the log"


def _run(*args: str | Path) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{args}: {done.stderr}"
    return done.stdout


def parse_cdl(text: str) -> dict[str, Any]:
    """`ncdump -h` as data: dimensions, variables (type, dimensions, attributes) and global attributes."""
    dims: dict[str, str] = {}
    variables: dict[str, dict[str, Any]] = {}
    globals_: dict[str, str] = {}
    section = None
    for line in text.splitlines():
        if line in ("dimensions:", "variables:"):
            section = line[:-1]
            continue
        if section == "dimensions" and (m := re.match(r"\t(\S+) = (\d+) ;", line)):
            dims[m[1]] = m[2]
        elif m := re.match(r"\t(\w+) (\w+)(?:\((.*)\))? ;$", line):
            variables[m[2]] = {"type": m[1], "dims": m[3], "attributes": {}}
        elif m := re.match(r"\t\t(\w*):(\w+) = (.*) ;$", line):
            (variables[m[1]]["attributes"] if m[1] else globals_)[m[2]] = m[3]
    return {"dimensions": dims, "variables": variables, "global": globals_}


# ---------------------------------------------------------------- the header


def test_ncdump_header_equals_the_oracle(mount: Any, store: tuple[Path, Path, int]) -> None:
    _, tmp, _ = store
    served = parse_cdl(_run("ncdump", "-h", mount.root / "climate.nc"))
    oracle = parse_cdl(_run("ncdump", "-h", tmp / "oracle.nc"))
    for name in INT64_AS_DOUBLE:
        assert (served["variables"][name]["type"], oracle["variables"][name]["type"]) == ("double", "int")
        served["variables"][name]["type"] = "int"
    assert served == oracle
    assert "notes" not in served["variables"]  # a vlen string array: left out, and logged (LEFT_OUT)


def test_size_from_metadata_and_format(mount: Any) -> None:
    before = json.loads((mount.root / ".zarrfs-stats.json").read_text())["cache"]["loads"]
    size = (mount.root / "climate.nc").stat().st_size
    assert json.loads((mount.root / ".zarrfs-stats.json").read_text())["cache"]["loads"] == before
    data = (mount.root / "climate.nc").read_bytes()
    assert len(data) == size and data[:4] == b"CDF\x02"
    assert (mount.root / "climate.cdf5.nc").read_bytes()[:4] == b"CDF\x05"  # int64 time: exact in CDF-5
    assert "CDF-5" in _run("ncdump", "-k", mount.root / "climate.cdf5.nc") or \
        "cdf5" in _run("ncdump", "-k", mount.root / "climate.cdf5.nc")


def test_nested_group_has_its_own_file(mount: Any, store: tuple[Path, Path, int]) -> None:
    _, tmp, _ = store
    served = parse_cdl(_run("ncdump", "-h", mount.root / "ocean" / "ocean.nc"))
    assert served == parse_cdl(_run("ncdump", "-h", tmp / "ocean_oracle.nc"))
    assert "temp" not in parse_cdl(_run("ncdump", "-h", mount.root / "climate.nc"))["variables"]


# ---------------------------------------------------------------- the values


@pytest.mark.parametrize("engine", ["netcdf4", "scipy"])
def test_xarray_decodes_as_open_zarr(mount: Any, store: tuple[Path, Path, int], engine: str) -> None:
    path, _, zarr_format = store
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = xr.open_zarr(path, zarr_format=zarr_format, consolidated=False).drop_vars("notes").load()
        with xr.open_dataset(mount.root / "climate.nc", engine=engine) as served:
            xr.testing.assert_identical(served.load(), expected)
        with xr.open_dataset(mount.root / "ocean" / "ocean.nc", engine=engine) as served:
            xr.testing.assert_identical(served.load(), xr.open_zarr(path, group="ocean", consolidated=False).load())


def test_netcdf4_raw_values_equal_the_stored_values(mount: Any, store: tuple[Path, Path, int]) -> None:
    path, _, _ = store
    group = zarr.open_group(path, mode="r")
    for name in ("climate.nc", "climate.cdf5.nc"):
        with netCDF4.Dataset(mount.root / name) as nc:
            nc.set_auto_maskandscale(False)
            nc.set_auto_chartostring(False)
            for variable in nc.variables.values():
                stored = group[variable.name][...]
                values = variable[...]
                if stored.dtype.kind == "U":
                    stored = np.char.encode(stored, "utf-8").astype(f"S{stored.dtype.itemsize // 4}")
                if stored.dtype.kind in "SU":
                    stored = stored.view("S1").reshape(values.shape)
                elif stored.dtype.kind == "u" and name == "climate.nc":
                    stored = stored.view(f"i{stored.dtype.itemsize}")  # `_Unsigned`: the signed bit pattern
                assert values.dtype.kind == stored.dtype.kind or variable.name in INT64_AS_DOUBLE, variable.name
                np.testing.assert_array_equal(values, stored, err_msg=f"{name} {variable.name}")


# ---------------------------------------------------------------- NetCDF programs


def test_cdo_sees_the_oracles_grid_and_time_steps(mount: Any, store: tuple[Path, Path, int], tmp_path: Path) -> None:
    _, tmp, _ = store

    def sinfon(path: Path) -> list[str]:
        """CDO's lines without the numbers of variables and grids, sorted: the files may list the
        variables in other orders (zarrfs the store's, xarray's writer its own)."""
        lines = _run("cdo", "-s", "sinfon", path).splitlines()
        return sorted(re.sub(r"^\s+\d+ : ", "", line) for line in lines if "File format" not in line)

    assert sinfon(mount.root / "climate.nc") == sinfon(tmp / "oracle.nc")
    _run("cdo", "-s", "-seltimestep,3", mount.root / "climate.nc", tmp_path / "served.nc")
    _run("cdo", "-s", "-seltimestep,3", tmp / "oracle.nc", tmp_path / "oracle.nc")
    with netCDF4.Dataset(tmp_path / "served.nc") as served, netCDF4.Dataset(tmp_path / "oracle.nc") as oracle:
        for name in ("t2m", "precip"):
            np.testing.assert_array_equal(served[name][...], oracle[name][...])
        assert served["t2m"].shape[0] == 1


def test_ncks_slab_equals_the_oracles(mount: Any, store: tuple[Path, Path, int], tmp_path: Path) -> None:
    _, tmp, _ = store
    for k in (0, 3, 5):
        _run("ncks", "-O", "-v", "t2m", "-d", f"time,{k}", mount.root / "climate.nc", tmp_path / "served.nc")
        _run("ncks", "-O", "-v", "t2m", "-d", f"time,{k}", tmp / "oracle.nc", tmp_path / "oracle.nc")
        with netCDF4.Dataset(tmp_path / "served.nc") as served, netCDF4.Dataset(tmp_path / "oracle.nc") as oracle:
            served.set_auto_maskandscale(False)
            oracle.set_auto_maskandscale(False)
            np.testing.assert_array_equal(served["t2m"][...], oracle["t2m"][...])
            assert served["t2m"].shape == (1, 11, 21)


def test_gdal_band_as_on_the_oracle(mount: Any, store: tuple[Path, Path, int]) -> None:
    _, tmp, _ = store

    def info(path: Path) -> dict[str, Any]:
        doc = json.loads(_run("gdalinfo", "-json", f'NETCDF:"{path}":t2m'))
        bands = [(b.get("noDataValue"), b.get("scale"), b.get("offset"), b.get("unit")) for b in doc["bands"]]
        return {"size": doc["size"], "geoTransform": doc.get("geoTransform"), "bands": bands}

    served = info(mount.root / "climate.nc")
    assert served == info(tmp / "oracle.nc")
    assert len(served["bands"]) == 6 and served["bands"][0] == (-32768.0, 0.01, 273.15, "K")


# ------------------------------------------------------------- what cannot be a variable


def test_tree_names_what_is_left_out(store: tuple[Path, Path, int]) -> None:
    path, _, _ = store
    done = run_zarrfs("tree", path)
    assert done.returncode == 0, done.stderr
    assert re.search(r"climate\.nc: .*/notes .*variable-length", done.stdout), done.stdout
    listed = json.loads(run_zarrfs("tree", "--json", path).stdout)["netcdf"]
    assert listed[0] == "NetCDF dataset: climate.nc: 13 variables" and "/notes left out" in listed[1]


def test_int64_beyond_double_fails_in_cdf2_and_is_exact_in_cdf5(tmp_path: Path) -> None:
    path = tmp_path / "big.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("large", shape=(3,), dtype="int64", dimension_names=["n"])[...] = [1, 2**60 + 1, 3]
    group.create_array("field", shape=(6, 512, 512), dtype="float32", dimension_names=["t", "y", "x"])[...] = 1.5
    # `field` (6 MiB) first: netCDF-C reads a file's first 4 MiB at open, which must not reach `large`.
    with mounted(path, tmp_path / "mnt", tmp_path / "log", expected_log=[r".*is not exact as a double.*"]) as mount:
        with netCDF4.Dataset(mount.root / "big.cdf5.nc") as nc:
            assert nc["large"].dtype == np.int64
            np.testing.assert_array_equal(nc["large"][...], [1, 2**60 + 1, 3])
        with netCDF4.Dataset(mount.root / "big.nc") as nc:
            assert nc["large"].dtype == np.float64
            begin = nc["field"].size * 4  # placed after `field`, on pages of its own
            np.testing.assert_array_equal(nc["field"][0], np.full((512, 512), 1.5, "float32"))
        fd = os.open(mount.root / "big.nc", os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            with pytest.raises(OSError) as failed:
                os.pread(fd, 8, size - 8)  # a value no double holds: EIO, never a rounded value
            assert failed.value.errno == errno.EIO
            assert os.pread(fd, 4096, 0)[:4] == b"CDF\x02"
        finally:
            os.close(fd)
        assert begin < size


def test_hyperslab_loads_only_the_chunks_near_it(tmp_path: Path) -> None:
    """`ncks -d time,K` of a 12-step variable, one 2 MiB chunk per step, loads on demand that step's
    chunk and those the kernel's readahead (4 MiB) asks for beside the header and past the slab;
    the rest of what is loaded is zarrfs's own readahead (`prefetches`), never the whole variable."""
    steps, chunk = 12, (1, 720, 1440)  # 2 MiB a chunk (int16)
    data = np.random.default_rng(3).integers(-3000, 3000, (steps, 720, 1440), dtype="int16")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), data)},
                    coords={"time": np.arange(steps, dtype="int32"), "lat": np.linspace(90, -90, 720),
                            "lon": np.linspace(-180, 180, 1440, endpoint=False)})
    ds["t2m"].encoding = {"chunks": chunk}
    ds.to_zarr(tmp_path / "slab.zarr", zarr_format=3, mode="w", consolidated=False)
    with mounted(tmp_path / "slab.zarr", tmp_path / "mnt", tmp_path / "log") as mount:
        _run("ncks", "-O", "-v", "t2m", "-d", "time,6", mount.root / "slab.nc", tmp_path / "out.nc")
        cache = json.loads((mount.root / ".zarrfs-stats.json").read_text())["cache"]
        with netCDF4.Dataset(tmp_path / "out.nc") as out:
            np.testing.assert_array_equal(out["t2m"][0], data[6])
    coordinate_chunks = 3
    # Chunks asked for (`misses`, counted when asked, as `prefetches` is): `loads` counts finished
    # loads, and readahead's may still be running when the counters are read.
    demand = cache["misses"] - cache["prefetches"] - coordinate_chunks
    assert 1 <= demand <= 1 + 2 + 2, cache  # step 6; 4 MiB of kernel readahead at the header and after the slab
    assert cache["misses"] - coordinate_chunks < steps, cache
    # zarrfs's readahead reaches no further than the stream has read (the slab and the kernel's 4 MiB).
    assert cache["prefetches"] <= steps // 2, cache


def test_gdal_multidimensional_zarr_writer_round_trips(tmp_path: Path) -> None:
    """A NetCDF-3 file turned into Zarr v2 by GDAL's multidimensional writer (`gdalmdimtranslate`)
    comes back as the same NetCDF file: ncdump's header equal to the source's (but GDAL's own `_CRS`
    attribute, its way of keeping a CRS), the same pixels in GDAL."""
    source = tmp_path / "source.nc"
    rng = np.random.default_rng(11)
    with netCDF4.Dataset(source, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        nc.setncatts({"title": "gdal round trip", "Conventions": "CF-1.8"})
        for name, length in (("time", 4), ("lat", 10), ("lon", 16)):
            nc.createDimension(name, length)
        for name, values, units in (("lat", np.linspace(45, 36, 10), "degrees_north"),
                                    ("lon", np.linspace(0, 15, 16), "degrees_east")):
            variable = nc.createVariable(name, "f8", (name,))
            variable.units = units
            variable[:] = values
        time = nc.createVariable("time", "i4", ("time",))
        time.units, time.calendar = "hours since 2000-01-01", "standard"
        time[:] = [0, 6, 12, 18]
        t2m = nc.createVariable("t2m", "i2", ("time", "lat", "lon"), fill_value=-32768)
        t2m.set_auto_maskandscale(False)
        t2m.setncatts({"units": "K", "scale_factor": 0.01, "add_offset": 273.15})
        t2m[:] = rng.integers(-3000, 3000, (4, 10, 16), dtype="int16")
    _run("gdalmdimtranslate", "-q", "-of", "ZARR", source, tmp_path / "gdal.zarr")
    with mounted(tmp_path / "gdal.zarr", tmp_path / "mnt", tmp_path / "log") as mount:
        served = parse_cdl(_run("ncdump", "-h", mount.root / "gdal.nc"))
        for variable in served["variables"].values():
            variable["attributes"].pop("_CRS", None)
        assert served == parse_cdl(_run("ncdump", "-h", source))
        checksums = [re.findall(r"Checksum=(\d+)", _run("gdalinfo", "-checksum", f'NETCDF:"{path}":t2m'))
                     for path in (mount.root / "gdal.nc", source)]
        assert checksums[0] == checksums[1] and len(checksums[0]) == 4


def test_random_reads_equal_one_sequential_read(mount: Any) -> None:
    """Reads at odd offsets and sizes (inside elements, across the header, gaps and variables), each
    answered by the daemon, give the bytes one sequential read gives (whose values netCDF4 and xarray
    read as the store's, tests above)."""
    path = mount.root / "climate.nc"
    whole = path.read_bytes()
    rng = np.random.default_rng(5)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)  # past the page cache: every read reaches the daemon
    try:
        for _ in range(300):
            offset = int(rng.integers(0, len(whole)))
            size = int(rng.integers(1, 9000))
            assert os.pread(fd, size, offset) == whole[offset:offset + size], (offset, size)
    finally:
        os.close(fd)


def test_a_variable_is_answered_in_c_swapped(tmp_path: Path) -> None:
    """`dd` of a dataset whose float32 variable spans many chunks, every read reaching the daemon:
    the reads inside the variable are answered in C (swapped to big-endian as they are copied), and
    the copy is a NetCDF file whose values are the store's."""
    values = np.random.default_rng(3).standard_normal((16, 181, 360)).astype("<f4")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values, {"units": "K"})},
                    coords={"lat": ("lat", np.linspace(90, -90, 181)), "lon": ("lon", np.arange(360.0))})
    store = tmp_path / "era.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(store, zarr_format=3, mode="w", consolidated=False,
                   encoding={"t2m": {"chunks": (2, 91, 180)}})
    copied = tmp_path / "copy.nc"
    with mounted(store, tmp_path / "mnt", tmp_path / "log") as mount:
        subprocess.run(["dd", f"if={mount / 'era.nc'}", f"of={copied}", "bs=128k", "iflag=direct", "status=none"],
                       check=True)
        stats = json.loads((mount / ".zarrfs-stats.json").read_text())
    with netCDF4.Dataset(copied) as nc:
        nc.set_auto_maskandscale(False)
        assert np.array_equal(nc["t2m"][:], values)
        assert np.array_equal(nc["lat"][:], ds["lat"].values)
    # 64 reads of 128 KiB: t2m's block is the file's last 4 MiB, and 31 reads lie wholly inside it.
    assert stats["reads"]["answered_in_c"] >= 30, stats["reads"]
