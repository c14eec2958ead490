"""A real mount of what zarr-python 3.4.2 writes: scale_offset + cast_value inside sharding (EOPF style)."""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest

from mountutil import mounted
from test_mount_behaviour import read_direct
from test_engine_zp34 import NAN_AS_ZERO, ZSTD_CHECKSUM, assert_same, cast_value, scale_offset
from zp3x import Writer, zp3x  # noqa: F401  (zp3x is the fixture)

BAD_CHUNK = "bad/c/1"


def test_numpy_reads_eopf_style_array_from_the_mount(zp3x: Writer, tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    data = np.round(np.random.default_rng(7).uniform(0, 1.5, (40, 60)), 4)
    data[3, 5] = np.nan
    eopf = zp3x.write(store, "eopf", {
        "shape": [64, 60], "chunks": [8, 10], "shards": [32, 30], "dtype": "float64", "fill_value": "NaN",
        "dimension_names": ["y", "x"],
        "filters": [scale_offset(-0.1, 10000), cast_value("uint16", scalar_map=NAN_AS_ZERO)],
        "compressors": [ZSTD_CHECKSUM]}, data=data, region=[(0, 40), (0, 60)])
    assert eopf.ok, eopf.error
    # int16 300 where a uint8 array with no out_of_range rule is declared: its second chunk cannot decode.
    bad = zp3x.write(store, "bad", {"shape": [6], "chunks": [3], "dtype": "<i2", "fill_value": 0, "compressors": None},
                     data=np.array([1, 2, 3, 4, 300, 6], "<i2"), metadata={
                         "data_type": "uint8",
                         "codecs": [cast_value("int16"), {"name": "bytes", "configuration": {"endian": "little"}}]})
    assert not bad.ok and bad.stage == "read"
    with mounted(store, tmp_path / "mnt", tmp_path / "log", expected_log=[rf"ERROR .*{BAD_CHUNK}"]) as mount:
        assert_same(np.load(mount / "eopf.npy"), eopf.expected)
        assert read_direct(mount / "bad.raw", 3, 0) == bytes([1, 2, 3])
        for _ in range(2):  # the retry fails the same way and does not log again
            with pytest.raises(OSError) as caught:
                read_direct(mount / "bad.raw", 3, 3)
            assert caught.value.errno == errno.EIO
        lines = [line for line in mount.log_lines() if BAD_CHUNK in line]
    assert len(lines) == 1 and "out_of_range" in lines[0], lines
