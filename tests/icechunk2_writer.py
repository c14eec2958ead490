"""Oracle writer: icechunk 2 + zarr-python 3.4 write an Icechunk repository and read it back, out of process.

Runs in `.venv-zp34` (Python >= 3.12: icechunk 2 needs it; the test venv may
have icechunk 1.1, which cannot write or read format 2). One job per run, as
JSON on stdin; the answer is one JSON line on stdout.

    {"spec": 1 or 2,                        # the repository's format
     "storage": {"path": "/tmp/.../repo"} or {"bucket": "b", "prefix": "repo", "endpoint": "http://..."},
     "container": {"prefix": "file:///tmp/.../data/"} or {"prefix": "s3://b/data/", "endpoint": "http://..."},
     "virtual": {"shape": [20, 10], "chunks": [8, 10], "dtype": "<f4",
                 "refs": [["virt/c/0/0", "file:///tmp/.../data/t.nc", offset, length], ...]},
     "expected": "/tmp/.../expected"}        # where icechunk + zarr-python's reads go, REF/NAME.npy

The repository: on main, commit 1 has `native` (chunks too large to inline:
chunk objects), `inline` (chunks small enough that icechunk keeps them in
the manifest), `grp/deep` and `virt` (virtual chunks in the container);
tag v1 and branch dev start at commit 1; commit 2 on main rewrites `native`
and `inline`; dev rewrites `inline`. Every array is read back at main, v1,
dev and commit 1's snapshot id (REF "snapshot") with the container authorized.
The answer: {"snapshot": commit 1's id, "icechunk": version}.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import icechunk
import numpy as np
import zarr

S3_REGION = "us-east-1"
S3_KEY = "testing"  # moto's


def storage(spec: dict[str, Any]) -> icechunk.Storage:
    if "path" in spec:
        return icechunk.local_filesystem_storage(spec["path"])
    return icechunk.s3_storage(bucket=spec["bucket"], prefix=spec["prefix"], endpoint_url=spec["endpoint"],
                               allow_http=True, region=S3_REGION, access_key_id=S3_KEY, secret_access_key=S3_KEY,
                               force_path_style=True)


def container(spec: dict[str, Any]) -> tuple[icechunk.VirtualChunkContainer, dict[str, Any]]:
    """The container and the credentials that authorize it."""
    prefix = spec["prefix"]
    if prefix.startswith("file://"):
        store = icechunk.local_filesystem_store(prefix.removeprefix("file://"))
        credentials: Any = icechunk.credentials.LocalFileSystemAccess
    else:
        store = icechunk.s3_store(region=S3_REGION, endpoint_url=spec["endpoint"], allow_http=True,
                                  s3_compatible=True, force_path_style=True)
        credentials = icechunk.s3_credentials(access_key_id=S3_KEY, secret_access_key=S3_KEY)
    return icechunk.VirtualChunkContainer(prefix, store), icechunk.containers_credentials({prefix: credentials})


def write(job: dict[str, Any]) -> dict[str, Any]:
    vcc, access = container(job["container"])
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(vcc)
    repo = icechunk.Repository.create(storage(job["storage"]), config=config, spec_version=job["spec"],
                                      authorize_virtual_chunk_access=access)
    rng = np.random.default_rng(32)
    native = rng.random(3000)  # float64 noise: 8000-byte chunks that do not compress below the inline limit
    inline = np.arange(40, dtype="u1")
    deep = np.arange(30, dtype="<i2").reshape(6, 5)

    session = repo.writable_session("main")
    root = zarr.group(store=session.store, zarr_format=3)
    root.create_array("native", shape=native.shape, chunks=(1000,), dtype=native.dtype)[...] = native
    root.create_array("inline", shape=inline.shape, chunks=(8,), dtype=inline.dtype)[...] = inline
    root.create_group("grp").create_array("deep", shape=deep.shape, chunks=(3, 5), dtype=deep.dtype)[...] = deep
    virtual = job["virtual"]
    root.create_array("virt", shape=virtual["shape"], chunks=virtual["chunks"], dtype=virtual["dtype"],
                      compressors=None, filters=None, fill_value=0)
    for key, url, offset, length in virtual["refs"]:
        session.store.set_virtual_ref(key, url, offset=offset, length=length)
    snapshot = session.commit("first")
    repo.create_tag("v1", snapshot)
    repo.create_branch("dev", snapshot)

    session = repo.writable_session("main")
    zarr.open_array(session.store, path="native")[...] = native * 2
    zarr.open_array(session.store, path="inline")[...] = inline + 1
    session.commit("second")
    session = repo.writable_session("dev")
    zarr.open_array(session.store, path="inline")[...] = inline + 100
    session.commit("on dev")

    reader = icechunk.Repository.open(storage(job["storage"]), authorize_virtual_chunk_access=access)
    sessions = {"main": reader.readonly_session(branch="main"), "v1": reader.readonly_session(tag="v1"),
                "dev": reader.readonly_session(branch="dev"), "snapshot": reader.readonly_session(snapshot_id=snapshot)}
    for ref, read in sessions.items():
        out = Path(job["expected"]) / ref
        out.mkdir(parents=True, exist_ok=True)
        for name in ("native", "inline", "grp/deep", "virt"):
            np.save(out / f"{name.replace('/', '.')}.npy", zarr.open_array(read.store, path=name, mode="r")[...])
    return {"snapshot": snapshot, "icechunk": icechunk.__version__}


if __name__ == "__main__":
    icechunk.set_logs_filter("error")
    print(json.dumps(write(json.loads(sys.stdin.read()))), flush=True)
    # icechunk's runtime threads can abort the interpreter's finalization (SIGABRT, "PyGILState_Release:
    # thread state must be current"), as zarrfs's own processes found (fuse.stopper.end_process): the
    # answer is out, so end without it.
    sys.stderr.flush()
    os._exit(0)
