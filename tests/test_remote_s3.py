"""zarrfs mounted from an S3-compatible server (moto's standalone server on 127.0.0.1).

Every array of the uploaded stores is compared with its oracle through a real
mount; the credentials given as storage options (literally, from the
environment, from a file) never show in the daemon's command line (`ps`) or
its log, even at DEBUG.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from mountutil import mounted_many, run_zarrfs
from oracles import HierarchyOracle, Oracle
from remoteutil import S3Server, remote_mount, s3_server, write_sources
from zarrfs.files.tree import source_name

BUCKET = "zarrfs-test"
ARRAYS = ["zp3-sharding-end", "ts3-sharding-start-blank", "zp2-compressor-lzma", "zp3-fill-nan-missing"]
HIERARCHIES = ["h2", "h3c"]
KEY_ID = "AKIDZARRFSTESTKEY0042"
SECRET = "s3cr3t-Zarrfs-never-in-ps-or-logs"


@dataclass(frozen=True)
class Bucket:
    server: S3Server
    arrays: dict[str, Oracle]
    hierarchies: dict[str, HierarchyOracle]

    def url(self, label: str, store: Path) -> str:
        return f"s3://{BUCKET}/{label}/{store.name}"


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bucket]:
    root = tmp_path_factory.mktemp("s3src")
    arrays, hierarchies = write_sources(root, ARRAYS, HIERARCHIES)
    with s3_server() as server:
        server.client().create_bucket(Bucket=BUCKET)
        for label in [*ARRAYS, *HIERARCHIES]:
            server.upload(BUCKET, root / label, label)
        yield Bucket(server, arrays, hierarchies)


def s3_args(endpoint: str, key: str = KEY_ID, secret: str = SECRET) -> tuple[str, ...]:
    return ("-S", f"key={key}", "-S", f"secret={secret}", "-S", f"endpoint_url={endpoint}",
            "-S", 'client_kwargs={"region_name": "us-east-1"}')


def test_every_array_through_an_s3_mount(bucket: Bucket, tmp_path: Path) -> None:
    args = s3_args(bucket.server.endpoint)
    mounts = {name: remote_mount(tmp_path, bucket.url(name, oracle.store), *args, name=name)
              for name, oracle in bucket.arrays.items()}
    mounts |= {label: remote_mount(tmp_path, bucket.url(label, h.store), *args, name=label)
               for label, h in bucket.hierarchies.items()}
    with mounted_many(list(mounts.values())):
        for name, oracle in bucket.arrays.items():
            got = np.load(mounts[name] / f"{oracle.node or source_name(oracle.store.name)}.npy")
            np.testing.assert_array_equal(got, np.ascontiguousarray(oracle.expected).astype(got.dtype), name)
        for label, hierarchy in bucket.hierarchies.items():
            for path, spec in hierarchy.nodes.items():
                if spec.kind == "array":
                    np.testing.assert_array_equal(np.load(mounts[label] / f"{path}.npy"), spec.expected)
            stats = json.loads((mounts[label] / ".zarrfs-stats.json").read_text())["store"]
            assert stats["failures"] == 0 and stats["requests"] > 0


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.parametrize("how", ["literal", "env", "file"])
def test_credentials_stay_out_of_ps_and_logs(how: str, bucket: Bucket, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    secret_file.chmod(0o600)
    monkeypatch.setenv("ZARRFS_TEST_SECRET", SECRET)  # the mount command (and so its daemon) inherits it
    secret = {"literal": SECRET, "env": "@env:ZARRFS_TEST_SECRET", "file": f"@file:{secret_file}"}[how]
    oracle = bucket.arrays["zp3-sharding-end"]
    mount = remote_mount(tmp_path, bucket.url("zp3-sharding-end", oracle.store),
                         *s3_args(bucket.server.endpoint, secret=secret), "--log-level", "debug")
    with mounted_many([mount]):
        assert mount.pid is not None
        ps_line = _cmdline(mount.pid)
        np.testing.assert_array_equal(np.load(mount / f"{oracle.node}.npy"), oracle.expected)
    log = mount.log.read_text()
    assert "DEBUG" in log  # the log was verbose, and still:
    assert SECRET not in ps_line and SECRET not in log
    assert KEY_ID not in ps_line and KEY_ID not in log  # the access key id is hidden as well
    assert (secret if how != "literal" else "secret=@env:ZARRFS_STORAGE_OPTION_") in ps_line
    assert f"endpoint_url={bucket.server.endpoint}" in ps_line  # not a secret: ps still says what is mounted


def test_missing_bucket_fails_the_mount_clearly(bucket: Bucket, tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    log = tmp_path / "log"
    result = run_zarrfs("mount", f"s3://no-such-bucket-{os.getpid()}/x.zarr", tmp_path / "mnt",
                        *s3_args(bucket.server.endpoint), "--log-file", log)
    assert result.returncode == 1
    assert "does not exist" in result.stderr and SECRET not in result.stderr
    assert not log.exists() or SECRET not in log.read_text()
    assert not os.path.ismount(tmp_path / "mnt")
