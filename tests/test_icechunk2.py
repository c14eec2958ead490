"""Icechunk repositories as icechunk 2 writes them: format 1 and 2, native, inline and virtual chunks, every ref.

The writer and oracle is icechunk 2.3 + zarr-python 3.4 in `.venv-zp34`
(tests/icechunk2_writer.py): it writes the repository and reads every array
back at every ref. Virtual chunks point into a NetCDF-4 file that xarray
writes (h5py gives its chunks' byte ranges), on disk (`file://`) and in
moto's S3 (`s3://`). zarrfs reads with the icechunk of the test's own
interpreter: on Python 3.11 that is icechunk 1.1, which reads format 1 and
must answer a format 2 repository with the one line saying what to install.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import icechunk
import numpy as np
import pytest
import xarray as xr

from engineutil import read_array
from mountutil import mounted, mounted_many, run_zarrfs
from remoteutil import http_server, remote_mount, s3_server
from zarrfs.engine.engine import Engine
from zarrfs.options import EngineOptions, StoreOptions
from zp3x import VENV_PYTHON

WRITER = Path(__file__).with_name("icechunk2_writer.py")
BUCKET = "zarrfs-icechunk2"
ARRAYS = ("native", "inline", "grp/deep", "virt")
REFS = (None, "main", "v1", "dev", "snapshot")
# What zarrfs's own icechunk reads: format 2 needs icechunk 2, which needs Python 3.12.
READS_FORMAT2 = int(icechunk.__version__.split(".")[0]) >= 2
S3_SECRET = "zarrfs-icechunk2-secret"  # moto takes any credentials: this one must not show in ps or the log


@dataclass(frozen=True)
class Repository:
    spec: int
    source: str  # path or s3:// URL
    data: Path  # the directory of the NetCDF file the virtual chunks point into
    container: str
    expected: Path  # icechunk + zarr-python's reads: REF/NAME.npy
    snapshot: str

    def expect(self, ref: str | None, name: str) -> np.ndarray:
        return np.load(self.expected / (ref or "main") / f"{name.replace('/', '.')}.npy")

    def ref_name(self, ref: str | None) -> str | None:
        return self.snapshot if ref == "snapshot" else ref


def write_netcdf(path: Path) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """A NetCDF-4 variable of three uncompressed chunks (the last one partial) and their byte ranges."""
    values = np.linspace(-5, 5, 20 * 10, dtype="<f4").reshape(20, 10)
    xr.Dataset({"t": (("y", "x"), values)}).to_netcdf(
        path, engine="h5netcdf", encoding={"t": {"chunksizes": (8, 10), "compression": None}})
    with h5py.File(path, "r") as f:
        dataset = f["t"].id
        chunks = [dataset.get_chunk_info(i) for i in range(dataset.get_num_chunks())]
    assert [c.chunk_offset for c in chunks] == [(0, 0), (8, 0), (16, 0)] and not any(c.filter_mask for c in chunks)
    return values, [(c.byte_offset, c.size) for c in chunks]


def write_repository(spec: int, storage: dict, container: dict, url: str, ranges: list[tuple[int, int]],
                     expected: Path) -> str:
    """Run the icechunk 2 writer; the snapshot id of main's first commit."""
    if not VENV_PYTHON.exists():
        pytest.fail(f"{VENV_PYTHON} is missing: run bash scripts/setup.sh")
    virtual = {"shape": [20, 10], "chunks": [8, 10], "dtype": "<f4",
               "refs": [[f"virt/c/{i}/0", url, offset, length] for i, (offset, length) in enumerate(ranges)]}
    job = {"spec": spec, "storage": storage, "container": container, "virtual": virtual, "expected": str(expected)}
    result = subprocess.run([str(VENV_PYTHON), "-I", str(WRITER)], input=json.dumps(job), capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["icechunk"].startswith("2."), answer
    return answer["snapshot"]


@pytest.fixture(scope="module", params=[1, 2], ids=["format1", "format2"])
def local_repository(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Repository:
    spec = request.param
    tmp = tmp_path_factory.mktemp(f"icechunk-format{spec}")
    data = tmp / "netcdf"
    data.mkdir()
    values, ranges = write_netcdf(data / "t.nc")
    container = f"file://{data}/"
    snapshot = write_repository(spec, {"path": str(tmp / "repo")}, {"prefix": container}, f"{container}t.nc",
                                ranges, tmp / "expected")
    repository = Repository(spec, str(tmp / "repo"), data, container, tmp / "expected", snapshot)
    np.testing.assert_array_equal(repository.expect("main", "virt"), values)  # the writer's own read of the file
    return repository


def layout(repository: Repository) -> set[str]:
    return set(os.listdir(repository.source))


def test_formats_on_disk(local_repository: Repository) -> None:
    """What the detection relies on: format 1 has refs/, format 2 a `repo` object and no refs/; native chunks
    are objects under chunks/ in both."""
    top = layout(local_repository)
    if local_repository.spec == 1:
        assert {"refs", "snapshots"} <= top and "repo" not in top, top
    else:
        assert "repo" in top and "refs" not in top and os.path.isfile(Path(local_repository.source) / "repo"), top
    assert len(os.listdir(Path(local_repository.source) / "chunks")) == 3 * 2  # native's chunks, two commits


@pytest.mark.parametrize("ref", REFS, ids=[str(r) for r in REFS])
def test_every_array_at_every_ref(local_repository: Repository, ref: str | None,
                                  open_engine: Callable[..., Engine]) -> None:
    store = StoreOptions(ref=local_repository.ref_name(ref), virtual_chunks=(str(local_repository.data),))
    if local_repository.spec == 2 and not READS_FORMAT2:
        assert_refused_as_format2("tree", local_repository.source, *(["--ref", store.ref] if store.ref else []))
        return
    engine = open_engine(local_repository.source, store=store)
    for name in ARRAYS:
        np.testing.assert_array_equal(read_array(engine, name), local_repository.expect(ref, name), err_msg=name)


def assert_refused_as_format2(*args: str | Path) -> None:
    """icechunk 1 and a format 2 repository: exit 1 with one line saying which icechunk and Python to install."""
    result = run_zarrfs(*args)
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "install icechunk 2" in result.stderr and "Python 3.12 or newer" in result.stderr, result.stderr


def test_mounted_with_and_without_virtual_chunks(local_repository: Repository, tmp_path: Path) -> None:
    if local_repository.spec == 2 and not READS_FORMAT2:
        (tmp_path / "mnt").mkdir()
        assert_refused_as_format2("mount", local_repository.source, tmp_path / "mnt")
        return
    # A parent of the container, given as a plain path, allows it.
    with mounted(Path(local_repository.source), tmp_path / "mnt", tmp_path / "log", "--ref", "dev",
                 "--virtual-chunks", str(local_repository.data.parent)) as mount:
        for name in ARRAYS:
            np.testing.assert_array_equal(np.load(mount / f"{name}.npy"), local_repository.expect("dev", name))
        assert (mount / "virt.raw").read_bytes() == local_repository.expect("dev", "virt").tobytes()

    # Not allowed (a sibling path is no parent): native and inline chunks read, virtual ones are EIO at once.
    sibling = local_repository.data.parent / "netcdf-other"
    with mounted(Path(local_repository.source), tmp_path / "mnt2", tmp_path / "log2",
                 "--virtual-chunks", str(sibling), expected_log=("virtual chunk container",)) as mount:
        np.testing.assert_array_equal(np.load(mount / "native.npy"), local_repository.expect("main", "native"))
        for _ in range(2):
            with pytest.raises(OSError) as failure:
                (mount / "virt.raw").read_bytes()
            assert failure.value.errno == errno.EIO
        lines = mount.log_lines()
    named = [line for line in lines if local_repository.container in line and " ERROR " in line]
    assert len(named) == 1 and "--virtual-chunks " + local_repository.container in named[0], named
    assert " refused: " in named[0] and "failed after" not in named[0], named  # no retries


def test_container_outside_the_allowed_prefix(local_repository: Repository, open_engine: Callable[..., Engine]) -> None:
    """`..` in an allowed path does not reach past it, and a prefix allows only what lies under it."""
    if local_repository.spec == 2 and not READS_FORMAT2:
        assert_refused_as_format2("tree", local_repository.source, "--virtual-chunks", local_repository.data)
        return
    for allowed in (f"{local_repository.data}/../netcdf-x", f"{local_repository.data}/sub", "s3://bucket/"):
        engine = open_engine(local_repository.source, store=StoreOptions(virtual_chunks=(allowed,), retries=3))
        with pytest.raises(Exception, match="is not authorized") as failure:
            read_array(engine, "virt")
        assert "failed after" not in str(failure.value), allowed  # refused once, not retried
        np.testing.assert_array_equal(read_array(engine, "inline"), local_repository.expect("main", "inline"))


def test_over_http(local_repository: Repository, open_engine: Callable[..., Engine]) -> None:
    """Served by an HTTP server that answers Range requests: recognised by its listing, read through icechunk 2's
    HTTP storage; icechunk 1.1 has none, and says so in one line."""
    source = Path(local_repository.source)
    with http_server(source.parent) as server:
        url = f"{server.url}/{source.name}"
        if not READS_FORMAT2:
            result = run_zarrfs("tree", url)
            assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
            assert "http(s):// with icechunk 2" in result.stderr, result.stderr
            return
        engine = open_engine(url, store=StoreOptions(virtual_chunks=(str(local_repository.data),)))
        for name in ARRAYS:
            np.testing.assert_array_equal(read_array(engine, name), local_repository.expect(None, name), err_msg=name)


def storage_argv(options: dict) -> list[str]:
    return [arg for key, value in options.items()
            for arg in ("-S", f"{key}={value if isinstance(value, str) else json.dumps(value)}")]


@pytest.mark.parametrize("spec", [1, 2], ids=["format1", "format2"])
def test_s3_repository_with_s3_virtual_chunks(spec: int, tmp_path: Path) -> None:
    """A repository in moto's S3 whose virtual chunks are in the same S3: found without --ref, read with the
    container allowed and its credentials as -S virtual.*; the secret shows neither in ps nor in the log."""
    with s3_server() as server:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        values, ranges = write_netcdf(tmp_path / "t.nc")
        client.upload_file(str(tmp_path / "t.nc"), BUCKET, "data/t.nc")
        container = f"s3://{BUCKET}/data/"
        snapshot = write_repository(spec, {"bucket": BUCKET, "prefix": "repo", "endpoint": server.endpoint},
                                    {"prefix": container, "endpoint": server.endpoint}, f"{container}t.nc", ranges,
                                    tmp_path / "expected")
        repository = Repository(spec, f"s3://{BUCKET}/repo", tmp_path, container, tmp_path / "expected", snapshot)
        options = {"key": "testing", "secret": "testing", "endpoint_url": server.endpoint,
                   "client_kwargs": {"region_name": "us-east-1"},
                   "virtual.key": "testing", "virtual.secret": S3_SECRET}
        if spec == 2 and not READS_FORMAT2:
            assert_refused_as_format2("tree", repository.source, *storage_argv(options))
            return
        np.testing.assert_array_equal(repository.expect("v1", "virt"), values)
        for ref in (None, "v1", "snapshot"):
            engine = Engine.open(repository.source, options, EngineOptions(store=StoreOptions(
                ref=repository.ref_name(ref), virtual_chunks=(f"s3://{BUCKET}/",))))
            try:
                for name in ARRAYS:
                    np.testing.assert_array_equal(read_array(engine, name), repository.expect(ref, name), err_msg=name)
            finally:
                engine.close()
        mount = remote_mount(tmp_path, repository.source, "--virtual-chunks", f"s3://{BUCKET}/data",
                             *storage_argv(options))
        with mounted_many([mount]):
            np.testing.assert_array_equal(np.load(mount / "virt.npy"), values)
            assert mount.pid is not None
            assert S3_SECRET not in Path(f"/proc/{mount.pid}/cmdline").read_text()
            log = "\n".join(mount.log_lines())
        assert S3_SECRET not in log


def test_newer_format_message_names_icechunk_and_python() -> None:
    """The one line a format 2 repository gets from an icechunk that cannot read it (this interpreter's, or
    icechunk 1.1's in the 3.11 CI run)."""
    from zarrfs.stores.icechunk import _newer_icechunk_needed

    class Old:
        __version__ = "1.1.21"

    line = _newer_icechunk_needed(Old)
    assert "\n" not in line and "icechunk 1.1.21" in line and "pip install 'icechunk>=2.1'" in line
    assert ("Python 3.12 or newer" in line) == (sys.version_info < (3, 12))

    class Current:  # and a format newer than icechunk 2's
        __version__ = "2.3.0"

    line = _newer_icechunk_needed(Current)
    assert "\n" not in line and "newer format than icechunk 2.3.0" in line and "pip install -U icechunk" in line
