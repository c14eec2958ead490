"""Write the built-in sample hierarchy (with zarr-python 3) that the README demo mounts.

    python scripts/make_sample.py DIR      # writes DIR/sample.zarr (v3) and DIR/legacy-v2.zarr

zarr-python is the writer: zarrfs's `icechunk` extra brings it, so the demo's product-only install
has it. `sample_arrays()` are the arrays handed to it, which the demo compares the mount with.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def sample_arrays() -> dict[str, np.ndarray]:
    """The arrays of sample.zarr by path, computed the same way on every call."""
    y, x = np.mgrid[0:512, 0:640]
    image = ((np.sin(x / 40.0) + np.cos(y / 30.0) + 2) * 16000).astype("uint16")
    stack = np.random.default_rng(42).integers(0, 255, size=(4, 8, 96, 128), dtype="uint8")
    labels = (np.arange(1024 * 1024, dtype="int32") // 4096).reshape(1024, 1024)
    return {"image": image, "stack": stack, "cells/labels": labels}


def write_sample(root: Path) -> Path:
    import zarr

    path = root / "sample.zarr"
    arrays = sample_arrays()
    group = zarr.open_group(str(path), mode="w", zarr_format=3, attributes={"description": "zarrfs sample"})
    group.create_array("image", data=arrays["image"], chunks=(128, 128), dimension_names=["y", "x"])
    group.create_array("stack", data=arrays["stack"], chunks=(1, 4, 64, 64), dimension_names=["t", "z", "y", "x"])
    cells = group.create_group("cells")
    cells.create_array("labels", data=arrays["cells/labels"], chunks=(128, 128), shards=(512, 512))
    legacy = zarr.open_group(str(root / "legacy-v2.zarr"), mode="w", zarr_format=2)
    temperature = np.random.default_rng(43).normal(15, 5, size=(365, 90, 180)).astype("float32")
    legacy.create_array("temperature", data=temperature, chunks=(30, 90, 180), attributes={"units": "degC"})
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(write_sample(Path(sys.argv[1])))
