"""The zarr-python 3.4 oracle: a session fixture that writes stores through `zp3x_writer.py`.

zarr-python 3.4.2 needs Python >= 3.12, so it lives in its own venv,
`.venv-zp34`, which `scripts/setup.sh` creates. Without it the tests that
use the fixture fail (not skip): they are the only check that zarrfs reads
what zarr-python 3.2+ writes.

    from zp3x import zp3x  # noqa: F401  (the fixture)

    def test_x(zp3x, tmp_path):
        result = zp3x.write(tmp_path / "s.zarr", "a", {"shape": [4], "dtype": "float32", ...}, data=values)
        assert result.ok, result.error
        result.expected  # zarr-python 3.4.2's own read of the array
"""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

VENV_PYTHON = Path(__file__).resolve().parents[1] / ".venv-zp34" / "bin" / "python"
ZARR_VERSION = "3.4.2"
WRITER = Path(__file__).with_name("zp3x_writer.py")


@dataclass
class Written:
    ok: bool
    stage: str | None  # "write" or "read" when zarr-python refused
    error: str | None
    expected: np.ndarray | None  # zarr-python's read of the whole array (an object array for str/bytes)


def save_objects(path: str, array: np.ndarray) -> None:
    """An object array of str or bytes as the writer's JSON (bytes as base64)."""
    flat = array.reshape(-1).tolist()
    kind = "bytes" if flat and isinstance(flat[0], bytes) else "str"
    values = [base64.b64encode(v).decode("ascii") for v in flat] if kind == "bytes" else flat
    Path(path).write_text(json.dumps({"kind": kind, "shape": list(array.shape), "values": values}))


def load_objects(path: Path) -> np.ndarray:
    doc = json.loads(path.read_text())
    values = doc["values"] if doc["kind"] == "str" else [base64.b64decode(v) for v in doc["values"]]
    out = np.empty(len(values), object)
    out[:] = values
    return out.reshape(doc["shape"])


class Writer:
    """One writer process; jobs go one at a time (a lock would be needed for threads)."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self._names = itertools.count()
        self.process = subprocess.Popen([str(VENV_PYTHON), "-I", str(WRITER)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        hello = json.loads(self._line())
        if hello.get("zarr") != ZARR_VERSION:
            self.close()
            pytest.fail(f"{VENV_PYTHON} has zarr {hello.get('zarr')}, the oracle needs {ZARR_VERSION}: "
                        f"run bash scripts/setup.sh")

    def write(self, store: Path, name: str, create: dict[str, Any], *, data: np.ndarray | None = None,
              values: np.ndarray | None = None,
              region: list[tuple[int, int]] | None = None, metadata: dict[str, Any] | None = None,
              config: dict[str, Any] | None = None) -> Written:
        n = next(self._names)
        job: dict[str, Any] = {"store": str(store), "name": name, "create": create, "metadata": metadata,
                               "config": config, "expected": str(self.scratch / f"expected-{n}.npy")}
        if data is not None:
            job["data"] = str(self.scratch / f"data-{n}.npy")
            np.save(job["data"], data, allow_pickle=False)
            job["region"] = [list(r) for r in region] if region else None
        if values is not None:  # strings or bytes (an object array)
            job["values"] = str(self.scratch / f"values-{n}.json")
            save_objects(job["values"], values)
            job["region"] = [list(r) for r in region] if region else None
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self._line())
        expected = None
        if answer["ok"]:
            objects_file = Path(job["expected"] + ".json")
            expected = load_objects(objects_file) if objects_file.exists() else np.load(job["expected"])
        return Written(answer["ok"], answer.get("stage"), answer.get("error"), expected)

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zarr-python oracle ({WRITER.name}) exited with {self.process.wait()}")
        return line

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="session")
def zp3x(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Writer]:
    if not VENV_PYTHON.exists():
        pytest.fail(f"{VENV_PYTHON} is missing: run bash scripts/setup.sh (it needs python3.12, which this "
                    f"machine image provides through pyenv)")
    writer = Writer(tmp_path_factory.mktemp("zp3x"))
    try:
        yield writer
    finally:
        writer.close()
