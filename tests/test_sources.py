"""SOURCEs that are not a directory of keys: kerchunk reference sets and Icechunk repositories; `zarrfs.mounted()`.

Oracles are independent writers: h5py writes the HDF5 file and reads it back,
kerchunk makes the references (JSON and Parquet), xarray writes a NetCDF-4
file, icechunk + zarr-python write and commit a repository. References are
read from disk, from the test HTTP server and from moto's S3 server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import h5py
import icechunk
import numpy as np
import pytest
import xarray as xr
import zarr
from kerchunk.df import refs_to_dataframe
from kerchunk.hdf import SingleHdf5ToZarr

import zarrfs
from engineutil import read_all, read_array
from mountutil import is_mounted, mounted, run_zarrfs
from remoteutil import S3Server, http_server, s3_server
from zarrfs.engine.engine import Engine
from zarrfs.errors import StoreError, ZarrfsError
from zarrfs.options import EngineOptions, StoreOptions

BUCKET = "zarrfs-sources"


# ------------------------------------------------------------- kerchunk references


@dataclass(frozen=True)
class ReferenceSet:
    h5: Path  # the HDF5 file the references point into
    json: Path  # references as JSON (version 1)
    parquet: Path  # the same as a Parquet reference directory
    expected: dict[str, np.ndarray]  # dataset path -> what h5py reads


def h5_datasets(path: Path) -> dict[str, np.ndarray]:
    found: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: found.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
    return found


def write_hdf5(path: Path) -> None:
    rng = np.random.default_rng(7)
    with h5py.File(path, "w") as f:
        f.create_dataset("plain", data=rng.standard_normal((40, 30)).astype("f4"), chunks=(16, 16))
        f.create_dataset("gzip_shuffle", data=rng.integers(-1000, 1000, (50, 60)).astype("<i2"), chunks=(20, 25),
                         compression="gzip", shuffle=True)
        f.create_dataset("contiguous", data=np.linspace(0, 1, 123))
        f.create_group("grp").create_dataset("inner", data=rng.integers(0, 255, (7, 9, 11)).astype("u1"),
                                             chunks=(3, 4, 5), compression="gzip")


def make_references(h5: Path, url: str, out: Path) -> tuple[Path, Path]:
    """kerchunk's references to `h5` (whose chunks are read at `url`) as JSON and as Parquet."""
    with open(h5, "rb") as handle:
        refs = SingleHdf5ToZarr(handle, url).translate()
    json_path = out.with_suffix(".json")
    json_path.write_text(json.dumps(refs))
    parquet = out.with_suffix(".parq")
    refs_to_dataframe(refs, str(parquet))
    return json_path, parquet


@pytest.fixture(scope="module")
def hdf5_refs(tmp_path_factory: pytest.TempPathFactory) -> ReferenceSet:
    root = tmp_path_factory.mktemp("h5")
    write_hdf5(root / "data.h5")
    json_path, parquet = make_references(root / "data.h5", str(root / "data.h5"), root / "refs")
    return ReferenceSet(root / "data.h5", json_path, parquet, h5_datasets(root / "data.h5"))


def assert_same(found: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(found) == sorted(expected)
    for name, values in expected.items():
        np.testing.assert_array_equal(found[name], values, err_msg=name)


@pytest.mark.parametrize("spelling", ["json-path", "parquet-path", "reference-url", "reference-fo"])
def test_hdf5_references_every_dataset(spelling: str, hdf5_refs: ReferenceSet, open_engine: Callable[..., Engine]
                                       ) -> None:
    if spelling == "reference-fo":
        engine = Engine.open("reference://", {"fo": str(hdf5_refs.parquet)})
        try:
            assert_same(read_all(engine), hdf5_refs.expected)
        finally:
            engine.close()
        return
    source = {"json-path": hdf5_refs.json, "parquet-path": hdf5_refs.parquet,
              "reference-url": f"reference://{hdf5_refs.json}"}[spelling]
    assert_same(read_all(open_engine(source)), hdf5_refs.expected)


def test_netcdf4_written_by_xarray(tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    data = xr.Dataset({"temperature": (("time", "y", "x"), np.arange(2 * 5 * 6, dtype="f4").reshape(2, 5, 6)),
                       "mask": (("y", "x"), np.eye(5, 6, dtype="i1"))},
                      coords={"x": np.arange(6.0), "y": np.arange(5.0) * 10, "time": [1, 2]})
    data.to_netcdf(tmp_path / "data.nc", engine="h5netcdf",
                   encoding={"temperature": {"zlib": True, "chunksizes": (1, 5, 3)}})
    json_path, _ = make_references(tmp_path / "data.nc", str(tmp_path / "data.nc"), tmp_path / "refs")
    found = read_all(open_engine(json_path))
    with xr.open_dataset(tmp_path / "data.nc", engine="h5netcdf") as back:
        for name in ("temperature", "mask", "x", "y", "time"):
            np.testing.assert_array_equal(found[name], back[name].values, err_msg=name)


def test_virtualizarr_kerchunk_output(tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    """VirtualiZarr's references (inline values as base64:, chunks by file:// URL) to a NetCDF-4 file."""
    from obstore.store import LocalStore
    from virtualizarr import open_virtual_dataset
    from virtualizarr.parsers import HDFParser
    from obspec_utils.registry import ObjectStoreRegistry

    data = xr.Dataset({"t": (("y", "x"), np.arange(20, dtype="f4").reshape(4, 5))},
                      coords={"x": np.arange(5.0), "y": np.arange(4.0) * 2})
    data.to_netcdf(tmp_path / "v.nc", engine="h5netcdf", encoding={"t": {"zlib": True, "chunksizes": (2, 5)}})
    virtual = open_virtual_dataset(f"file://{tmp_path / 'v.nc'}", parser=HDFParser(),
                                   registry=ObjectStoreRegistry({"file://": LocalStore()}))
    virtual.vz.to_kerchunk(str(tmp_path / "refs.json"), format="json")
    assert "base64:" in (tmp_path / "refs.json").read_text()  # the coordinates are inline
    found = read_all(open_engine(tmp_path / "refs.json"))
    for name in ("t", "x", "y"):
        np.testing.assert_array_equal(found[name], data[name].values, err_msg=name)


def test_references_through_a_mount(hdf5_refs: ReferenceSet, tmp_path: Path) -> None:
    with mounted(hdf5_refs.json, tmp_path / "mnt", tmp_path / "log") as mount:
        np.testing.assert_array_equal(np.load(mount / "gzip_shuffle.npy", mmap_mode="r"),
                                      hdf5_refs.expected["gzip_shuffle"])
        np.testing.assert_array_equal(np.load(mount / "grp" / "inner.npy"), hdf5_refs.expected["grp/inner"])


def test_references_and_target_over_http(hdf5_refs: ReferenceSet, tmp_path: Path,
                                         open_engine: Callable[..., Engine]) -> None:
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(hdf5_refs.h5, served / "data.h5")
    with http_server(served) as server:
        json_path, parquet = make_references(served / "data.h5", f"{server.url}/data.h5", served / "refs")
        for source in (f"{server.url}/refs.json", parquet):
            assert_same(read_all(open_engine(source)), hdf5_refs.expected)
        assert server.requests > 0


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """moto's S3 server with the bucket BUCKET, once per module: the tests write under keys of their own."""
    with s3_server() as server:
        server.client().create_bucket(Bucket=BUCKET)
        yield server


def test_references_and_target_on_s3(hdf5_refs: ReferenceSet, tmp_path: Path, s3: S3Server) -> None:
    s3.client().put_object(Bucket=BUCKET, Key="data.h5", Body=hdf5_refs.h5.read_bytes())
    json_path, _ = make_references(hdf5_refs.h5, f"s3://{BUCKET}/data.h5", tmp_path / "refs")
    s3.client().put_object(Bucket=BUCKET, Key="refs.json", Body=json_path.read_bytes())
    options = {"key": "testing", "secret": "testing", "endpoint_url": s3.endpoint,
               "client_kwargs": {"region_name": "us-east-1"}}
    engine = Engine.open(f"reference://s3://{BUCKET}/refs.json",
                         {"target_options": options, "remote_protocol": "s3", "remote_options": options})
    try:
        assert_same(read_all(engine), hdf5_refs.expected)
    finally:
        engine.close()


def test_broken_references(hdf5_refs: ReferenceSet, tmp_path: Path, open_engine: Callable[..., Engine]) -> None:
    """Targets missing or shorter than a referenced range, and an unknown codec: EIO-worthy errors, never data."""
    refs = json.loads(hdf5_refs.json.read_text())
    truncated = tmp_path / "short.h5"
    truncated.write_bytes(hdf5_refs.h5.read_bytes()[:4096])
    broken = dict(refs["refs"])
    broken["plain/0.0"] = [str(tmp_path / "gone.h5"), 0, 100]
    for key, value in broken.items():
        if key.startswith("gzip_shuffle/") and isinstance(value, list):
            broken[key] = [str(truncated), *value[1:]]
    zarray = json.loads(broken["contiguous/.zarray"])
    zarray["compressor"] = {"id": "no-such-codec"}
    broken["contiguous/.zarray"] = json.dumps(zarray)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"version": 1, "refs": broken}))
    engine = open_engine(path, store=StoreOptions(retries=0))
    with pytest.raises(ZarrfsError, match="plain"):
        engine.reader("plain").read(0, 4)
    with pytest.raises(ZarrfsError, match="gzip_shuffle"):
        engine.reader("gzip_shuffle").read(0, engine.hierarchy.node("gzip_shuffle").nbytes)
    children = {child.name: child for child in engine.hierarchy.children("")}
    assert children["contiguous"].error is not None and "no-such-codec" in str(children["contiguous"].error)
    # The rest of the reference set is untouched.
    np.testing.assert_array_equal(read_array(engine, "grp/inner"), hdf5_refs.expected["grp/inner"])


# ------------------------------------------------------------------ Icechunk


@dataclass(frozen=True)
class Repository:
    path: Path
    first: np.ndarray  # main's first commit (tag v1)
    second: np.ndarray  # main's second commit
    branch: np.ndarray  # branch dev, from the first commit
    first_snapshot: str


def write_repository(storage: icechunk.Storage) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    repo = icechunk.Repository.create(storage)
    first = np.arange(6 * 8, dtype="<f4").reshape(6, 8)
    session = repo.writable_session("main")
    group = zarr.group(store=session.store, zarr_format=3)
    group.create_array("img", shape=first.shape, chunks=(4, 4), dtype=first.dtype)[...] = first
    snapshot = session.commit("first")
    repo.create_tag("v1", snapshot)
    second = first * 2
    session = repo.writable_session("main")
    zarr.open_array(session.store, path="img")[...] = second
    session.commit("second")
    repo.create_branch("dev", snapshot)
    branch = first + 100
    session = repo.writable_session("dev")
    zarr.open_array(session.store, path="img")[...] = branch
    session.commit("on dev")
    return first, second, branch, snapshot


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Repository:
    path = tmp_path_factory.mktemp("icechunk") / "repo"
    first, second, branch, snapshot = write_repository(icechunk.local_filesystem_storage(str(path)))
    return Repository(path, first, second, branch, snapshot)


@pytest.mark.parametrize("ref", [None, "main", "v1", "dev", "first-snapshot"])
def test_icechunk_refs(ref: str | None, repository: Repository, open_engine: Callable[..., Engine]) -> None:
    name = repository.first_snapshot if ref == "first-snapshot" else ref
    engine = open_engine(repository.path, store=StoreOptions(ref=name))
    expected = {None: repository.second, "main": repository.second, "v1": repository.first,
                "dev": repository.branch, "first-snapshot": repository.first}[ref]
    np.testing.assert_array_equal(read_array(engine, "img"), expected)


def test_icechunk_through_a_mount_at_a_tag(repository: Repository, tmp_path: Path) -> None:
    with mounted(repository.path, tmp_path / "mnt", tmp_path / "log", "--ref", "v1") as mount:
        np.testing.assert_array_equal(np.load(mount / "img.npy"), repository.first)
        assert (mount / "img.raw").read_bytes() == repository.first.tobytes()


def test_icechunk_on_s3(tmp_path: Path, s3: S3Server) -> None:
    storage = icechunk.s3_storage(bucket=BUCKET, prefix="repo", endpoint_url=s3.endpoint, allow_http=True,
                                  access_key_id="testing", secret_access_key="testing", region="us-east-1",
                                  force_path_style=True)
    first, second, _, _ = write_repository(storage)
    options = {"key": "testing", "secret": "testing", "endpoint_url": s3.endpoint,
               "client_kwargs": {"region_name": "us-east-1"}}
    for ref, expected in ((None, second), ("v1", first)):
        engine = Engine.open(f"s3://{BUCKET}/repo", options, EngineOptions(store=StoreOptions(ref=ref)))
        try:
            np.testing.assert_array_equal(read_array(engine, "img"), expected)
        finally:
            engine.close()


def run_at_once(commands: Sequence[tuple[str | os.PathLike, ...]],
                together: int = 3) -> list[subprocess.CompletedProcess[str]]:
    """`zarrfs` COMMAND for each command, `together` processes at a time (each waits on little but its imports)."""
    with ThreadPoolExecutor(together) as pool:
        return list(pool.map(lambda command: run_zarrfs(*command), commands))


def damage(repository: Path, into: Path) -> Path:
    """A copy of the repository whose snapshot files hold garbage."""
    shutil.copytree(repository, into)
    for snapshot in (into / "snapshots").iterdir():
        snapshot.write_bytes(b"garbage")
    return into


def test_icechunk_bad_input(repository: Repository, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    damaged = damage(repository.path, tmp_path / "damaged")
    wrong_ref, not_icechunk, result = run_at_once(
        [("tree", repository.path, "--ref", "nope"), ("tree", plain, "--ref", "main"), ("tree", damaged)])
    assert wrong_ref.returncode == 1
    assert "--ref 'nope' names no branch, tag or snapshot" in wrong_ref.stderr
    assert "branches: dev, main" in wrong_ref.stderr
    assert not_icechunk.returncode == 1 and "not an Icechunk repository" in not_icechunk.stderr
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("zarrfs: error:") and result.stderr.count("\n") == 1, result.stderr
    # Said as what it is, never "not Zarr" (icechunk 1's store answers "absent" for every key of an
    # unreadable snapshot, which zarrfs catches when it opens the session; icechunk 2 fails the read itself).
    assert "not a Zarr hierarchy" not in result.stderr, result.stderr
    # ... and at once: reading the same damaged file again cannot change the answer.
    assert "the repository is damaged or incomplete" in result.stderr and "tries" not in result.stderr, \
        result.stderr


def test_an_icechunk_format_error_is_not_retried() -> None:
    """A key icechunk cannot parse (icechunk 2's FormatError, a damaged repository file) fails after
    one request, saying so; any other icechunk error is retried as transient."""
    import asyncio

    from zarrfs.errors import StoreError
    from zarrfs.options import StoreOptions
    from zarrfs.stores.icechunk import IcechunkFileSystem
    from zarrfs.stores.store import Store

    class FormatError(Exception):  # the name icechunk 2 raises it under
        pass

    class Failing:
        def __init__(self, error: Exception) -> None:
            self.error = error

        async def get(self, *_: object) -> None:
            await asyncio.sleep(0)
            raise self.error

    for error, requests in ((FormatError("invalid icechunk header size\n\ncontext: ..."), 1),
                            (RuntimeError("connection reset"), 3)):
        store = Store(IcechunkFileSystem(Failing(error)), "", "repo@main", StoreOptions(retries=2, retry_backoff=0.001))
        with pytest.raises(StoreError) as raised:
            store.get("zarr.json")
        assert store.stats.as_dict()["requests"] == requests, error
        message = str(raised.value)
        if requests == 1:
            assert message == ("repo@main: reading 'zarr.json' failed: IcechunkReadError: FormatError: invalid "
                               "icechunk header size: the repository is damaged or incomplete"), message
        else:
            assert "failed after 3 tries" in message, message


def test_icechunk_commands_end_without_a_signal(repository: Repository, tmp_path: Path) -> None:
    """icechunk's Rust threads hand each read's result to Python; one still taking the GIL back as the
    interpreter finalizes aborts the process (SIGABRT) after its output, a race that processes running
    at once make likely: every run here ends with its own status, healthy or damaged, tree or mount."""
    damaged = damage(repository.path, tmp_path / "damaged")
    mountpoints = [tmp_path / f"mnt{i}" for i in range(4)]
    for mountpoint in mountpoints:
        mountpoint.mkdir()
    commands = [("tree", damaged)] * 10 + [("tree", repository.path)] * 6 + [("mount", damaged, m) for m in mountpoints]
    try:
        results = run_at_once(commands)
    finally:
        for mountpoint in mountpoints:
            if is_mounted(mountpoint):
                run_zarrfs("unmount", mountpoint)
    for command, result in zip(commands, results, strict=True):
        if command[1] == repository.path:
            assert result.returncode == 0 and result.stdout.splitlines()[1].startswith("  img  array  shape=(6, 8)"), \
                (command, result)
        else:  # refused in one line, the mount point left as it was
            assert result.returncode == 1, (command, result)
            assert result.stderr.startswith("zarrfs: error:") and result.stderr.count("\n") == 1, (command, result)
    assert not any(is_mounted(m) for m in mountpoints)


# ------------------------------------------------------------ zarrfs.mounted()


def test_mounted_yields_a_temporary_mount_point_and_unmounts(repository: Repository) -> None:
    with zarrfs.mounted(repository.path, ref="v1", cache_size="64M", formats=["npy", "json"]) as root:
        assert isinstance(root, Path) and is_mounted(root)
        assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["img.json", "img.npy"]
        np.testing.assert_array_equal(np.load(root / "img.npy"), repository.first)
    assert not is_mounted(root) and not root.exists()


def test_mounted_unmounts_when_the_block_raises(hdf5_refs: ReferenceSet, tmp_path: Path) -> None:
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    with pytest.raises(RuntimeError, match="the caller's own error"):
        with zarrfs.mounted(hdf5_refs.json, mountpoint, storage_options={}) as root:
            assert root == mountpoint and (root / "plain.npy").exists()
            raise RuntimeError("the caller's own error")
    assert not is_mounted(mountpoint) and mountpoint.is_dir()


def test_mounted_with_a_file_held_open_detaches_lazily(hdf5_refs: ReferenceSet) -> None:
    with zarrfs.mounted(hdf5_refs.json) as root:
        held = open(root / "plain.raw", "rb")  # noqa: SIM115 - held across the unmount on purpose
    try:
        assert not is_mounted(root)
        assert held.read(8) == hdf5_refs.expected["plain"].tobytes()[:8]
    finally:
        held.close()


def test_mounted_detaches_even_when_its_unmount_fails_otherwise(hdf5_refs: ReferenceSet,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An unmount stopped by anything but a busy mount (an interrupt while fusermount runs) still
    detaches the mount lazily, and the error goes on to the caller: the mount never outlives the block."""
    import zarrfs.fuse.mount as mount_module

    real_unmount = mount_module.unmount

    def stopped(mountpoint: str, lazy: bool = False) -> None:
        if not lazy:
            raise RuntimeError("stopped while unmounting")
        real_unmount(mountpoint, lazy=True)

    monkeypatch.setattr(mount_module, "unmount", stopped)
    with pytest.raises(RuntimeError, match="stopped while unmounting"):
        with zarrfs.mounted(hdf5_refs.json) as root:
            assert (root / "plain.npy").exists()
    assert not is_mounted(root)


def test_mounted_reports_what_the_command_would(tmp_path: Path) -> None:
    with pytest.raises(ZarrfsError, match="does not exist"):
        with zarrfs.mounted(tmp_path / "missing.zarr"):
            pass
    with pytest.raises(ZarrfsError, match="unknown option"):
        with zarrfs.mounted(tmp_path, cache="1G"):
            pass
    assert not [p for p in Path("/tmp").glob("zarrfs-*") if p.is_dir() and is_mounted(p)]


def test_storage_error_type_is_public() -> None:
    assert issubclass(StoreError, ZarrfsError)
    assert os.environ.get("ZARRFS_STORAGE_OPTION_0") is None  # mounted() never leaks credentials into our env
