"""Oracle writer: zarr-python 3.2+ writes a store and reads it back, out of process.

Runs in its own interpreter (`.venv-zp34`, Python >= 3.12: zarr-python 3.4.2
needs it; the test venv keeps zarr 3.1 for the in-process oracles). It serves
jobs as JSON lines on stdin and answers one JSON line per job on stdout, so a
test session pays for starting Python and importing zarr once.

A job (every key but `store`, `name` and `create` optional):

    {"store": "/tmp/.../s.zarr", "name": "a",
     "create": {keyword arguments of zarr.create_array; codecs as their JSON dicts},
     "data": "/tmp/.../in.npy",            # written with a[...] = data (or a[region])
     "region": [[start, stop], ...],       # where `data` goes (default: everywhere)
     "values": "/tmp/.../in.json",         # instead of `data`: strings or bytes, see `objects`
     "metadata": {key: value, ...},        # then overwrite these fields of the array's zarr.json
     "config": {"array.rectilinear_chunks": true, ...},   # zarr.config for this job
     "expected": "/tmp/.../out.npy"}       # where to save zarr-python's read of the whole array

A `create` dtype of "vlen-bytes" means zarr-python's VariableLengthBytes. The read
of a string or bytes array is saved as JSON (`save_objects`) at `expected` + ".json".

The answer is {"ok": true} or {"ok": false, "stage": "write"|"read", "error": "..."}:
a store zarr-python refuses to write or read is an answer, not a crash.
"""

from __future__ import annotations

import base64
import json
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import zarr


def run(job: dict[str, Any]) -> dict[str, Any]:
    store = Path(job["store"])
    with zarr.config.set(job.get("config") or {}):
        try:
            array = zarr.create_array(str(store), name=job["name"], overwrite=True, **_create_args(job["create"]))
            if job.get("data") or job.get("values"):
                data = objects(job["values"]) if job.get("values") else np.load(job["data"])
                region = tuple(slice(a, b) for a, b in job["region"]) if job.get("region") else ...
                array[region] = data
            if job.get("metadata"):
                _patch(store / job["name"] / "zarr.json", job["metadata"])
        except Exception as exc:  # noqa: BLE001  (the test decides what a refusal means)
            return {"ok": False, "stage": "write", "error": f"{type(exc).__name__}: {exc}"}
        try:
            read = zarr.open_array(str(store / job["name"]), mode="r")[...]
            if job.get("expected"):
                if np.asarray(read).dtype.kind in "OT":  # variable-length: numpy cannot save it without pickle
                    save_objects(job["expected"] + ".json", np.asarray(read))
                else:
                    np.save(job["expected"], np.asarray(read), allow_pickle=False)
        except Exception as exc:  # noqa: BLE001
            return {"ok": False, "stage": "read", "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True}


def objects(path: str) -> np.ndarray:
    """{"kind": "str"|"bytes", "shape": [...], "values": [flat, C order; bytes as base64]} -> object array."""
    doc = json.loads(Path(path).read_text())
    values = doc["values"] if doc["kind"] == "str" else [base64.b64decode(v) for v in doc["values"]]
    out = np.empty(len(values), object)
    out[:] = values
    return out.reshape(doc["shape"])


def save_objects(path: str, array: np.ndarray) -> None:
    flat = array.astype(object).reshape(-1).tolist()
    kind = "bytes" if flat and isinstance(flat[0], bytes) else "str"
    values = [base64.b64encode(v).decode("ascii") for v in flat] if kind == "bytes" else [str(v) for v in flat]
    Path(path).write_text(json.dumps({"kind": kind, "shape": list(array.shape), "values": values}))


def _create_args(create: dict[str, Any]) -> dict[str, Any]:
    args = dict(create)
    if args.get("dtype") == "vlen-bytes":
        from zarr.core.dtype import VariableLengthBytes

        args["dtype"] = VariableLengthBytes()
    if "dtype" in args and isinstance(args["dtype"], list):  # a structured dtype as numpy's descr
        args["dtype"] = np.dtype([tuple(field) for field in args["dtype"]])
    for key in ("shape", "chunks", "shards"):
        if isinstance(args.get(key), list):
            args[key] = tuple(args[key])
    return args


def _patch(path: Path, fields: dict[str, Any]) -> None:
    doc = json.loads(path.read_text())
    doc.update(fields)
    path.write_text(json.dumps(doc))


def main() -> None:
    print(json.dumps({"ok": True, "zarr": zarr.__version__}), flush=True)  # ready
    for line in sys.stdin:
        try:
            answer = run(json.loads(line))
        except Exception:  # noqa: BLE001  (a bad job must not end the session)
            answer = {"ok": False, "stage": "job", "error": traceback.format_exc()}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
