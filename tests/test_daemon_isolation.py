"""The background daemon runs the installed zarrfs, never a `zarrfs` found in the caller's directory.

`python -m zarrfs` puts the working directory first on sys.path. A planted
`zarrfs/` package or `zarrfs.py` there would run with the mounting user's
rights (root's, when root mounts): here each leaves a marker file if it ever
runs, and the mount must work without it appearing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from mountutil import Mount, mounted_many

PLANTED = "import pathlib\npathlib.Path({marker!r}).write_text('planted code ran')\nraise SystemExit(3)\n"


def plant(directory: Path, marker: Path, as_package: bool) -> None:
    code = PLANTED.format(marker=str(marker))
    if as_package:
        (directory / "zarrfs").mkdir(parents=True)
        for name in ("__init__.py", "__main__.py", "api.py"):
            (directory / "zarrfs" / name).write_text(code)
    else:
        directory.mkdir(parents=True)
        (directory / "zarrfs.py").write_text(code)


@pytest.mark.parametrize("as_package", [True, False], ids=["zarrfs-package", "zarrfs-module"])
def test_background_mount_from_a_directory_with_a_planted_zarrfs(as_package: bool, tmp_path: Path) -> None:
    store = tmp_path / "data.zarr"
    data = np.arange(12, dtype="<i4").reshape(3, 4)
    zarr.open_array(str(store), mode="w", shape=data.shape, chunks=(2, 2), dtype=data.dtype)[...] = data
    marker = tmp_path / "marker"
    workdir = tmp_path / "shared"
    plant(workdir, marker, as_package)
    mount = Mount(store, tmp_path / "mnt", tmp_path / "log", cwd=workdir)
    with mounted_many([mount]):
        assert (mount / "data.raw").read_bytes() == data.tobytes()
    assert not marker.exists(), "the daemon imported zarrfs from the caller's working directory"
