"""ArrayReader details that the oracle tests do not single out."""

from __future__ import annotations

import gc
import random
import weakref

import numpy as np
import pytest
import zarr

from zarrfs.engine.engine import Engine
from zarrfs.options import EngineOptions
from zarrfs.engine.geometry import linear_boxes
from zarrfs.engine.readahead import ReadStream


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (2, 1, 3, 2)])
def test_linear_boxes_cover_every_range_in_order(shape: tuple[int, ...]) -> None:
    total = int(np.prod(shape))
    for first in range(total):
        for last in range(first + 1, total + 1):
            boxes = linear_boxes(first, last, shape)
            assert len(boxes) <= 2 * len(shape)
            covered = [int(np.ravel_multi_index(idx, shape))
                       for lo, hi in boxes for idx in np.ndindex(*(b - a for a, b in zip(lo, hi)))
                       for idx in [tuple(i + a for i, a in zip(idx, lo))]]
            assert covered == list(range(first, last))


def test_streams_of_closed_files_never_serve_other_arrays(tmp_path) -> None:
    """Regression: windows were keyed by id(stream); a new stream could reuse a dead one's id."""
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    arrays = {name: np.full((512, 512), value, dtype="<i4") for name, value in (("a", 1), ("b", 2), ("c", 3))}
    for name, data in arrays.items():
        group.create_array(name, data=data, chunks=(128, 128))
    engine = Engine.open(str(tmp_path / "s.zarr"), options=EngineOptions(cache_bytes=64 << 20))
    rng = random.Random(0)
    for _ in range(30):
        name = rng.choice(sorted(arrays))
        reader = engine.reader(name)
        stream = ReadStream()
        expected = arrays[name].tobytes()
        for offset in range(0, 256 << 10, 64 << 10):
            assert reader.read(offset, offset + (64 << 10), stream) == expected[offset:offset + (64 << 10)]
        gone = weakref.ref(stream)
        del stream
        if gone() is not None:  # held in a cycle: a full collection (slow in a big test process) frees it
            gc.collect()
        assert gone() is None  # so that the next stream may be given its id
    engine.close()
