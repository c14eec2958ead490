"""The daemon's open-file limit and the chunk files the C read path keeps open under it
(fuse/mount.py `raise_open_file_limit`, engine/served.py `raw_file_limit`), each in a process of
its own whose limits the test sets."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))
from zarrfs.engine.served import raw_file_limit
from zarrfs.fuse.mount import raise_open_file_limit
before = raw_file_limit()
raise_open_file_limit()
print(before, resource.getrlimit(resource.RLIMIT_NOFILE)[0], raw_file_limit())
"""


@pytest.mark.parametrize(("soft", "hard", "expected"), [
    (256, 20000, (64, 8192, 1024)),  # raised to what the daemon wants; C keeps a quarter, at most 1024
    (256, 2000, (64, 2000, 500)),  # raised to the hard limit only
    (40, 40, (16, 40, 16)),  # nothing to raise to; C still keeps a few
    (10000, 20000, (1024, 10000, 1024)),  # never lowered
])
def test_soft_limit_raised_to_the_hard_limit_and_c_keeps_a_quarter(soft: int, hard: int,
                                                                    expected: tuple[int, int, int]) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, str(soft), str(hard)], capture_output=True, text=True,
                         check=True, timeout=60)
    assert tuple(int(word) for word in out.stdout.split()) == expected
