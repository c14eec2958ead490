"""The sequential-stream rule is C's (engine/_cached_reads.c): engine/served.py hands C's own
functions to readahead, and its Python fallback (for a build without the extension) gives the same
answer on a table of reads, edges and overflow-sized values included."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from zarrfs import extensions
from zarrfs.engine import served

c_side = pytest.importorskip("zarrfs.engine._cached_reads")

REACH = served.SEQUENTIAL_REACH
BIG = 2**63 - 1
# (last_end, start, stop): no stream yet, exact continuation, within and just past the floor on
# either side, small and large reads whose 4 x size passes the floor, offsets near 2**63.
READS = [
    (-1, 0, 1), (-1, 0, 0), (0, 0, 0), (0, 0, 1 << 20), (100, 100, 101),
    (0, REACH, REACH + 1), (0, REACH + 1, REACH + 2), (REACH, 0, 1), (REACH + 1, 0, 1),
    (10 << 20, (10 << 20) + REACH, (10 << 20) + REACH + 4096), (10 << 20, (10 << 20) - REACH - 1, 10 << 20),
    (0, 4 << 20, 5 << 20), (0, (4 << 20) + 1, (5 << 20) + 1), (8 << 20, 0, 2 << 20), ((8 << 20) + 1, 0, 2 << 20),
    (0, 16 << 20, 20 << 20), (0, (16 << 20) + 1, (20 << 20) + 1),
    (BIG, 0, 1), (BIG, 0, BIG), (BIG, BIG, BIG), (BIG - REACH, BIG, BIG), (0, BIG - 1, BIG),
    (5, 2**62, 2**62 + 1), (2**62, 0, 2**62 // 4), (2**62, 0, 2**62 // 4 - 1),
]


def test_served_hands_readahead_cs_rule() -> None:
    """C's rule while the C path is in use; the Python fallback under ZARRFS_NO_EXTENSIONS (the
    fast subset's second run), which the table below holds to C's."""
    if extensions.wanted():
        assert served.continues_stream is c_side.continues_stream
        assert served.stream_reach is c_side.stream_reach
    else:
        assert served.continues_stream is served.python_continues_stream
        assert served.stream_reach is served.python_stream_reach
    assert served.SEQUENTIAL_REACH == c_side.SEQUENTIAL_REACH == 1 << 20


@pytest.mark.parametrize("last_end, start, stop", READS)
def test_python_fallback_agrees_with_c(last_end: int, start: int, stop: int) -> None:
    assert served.python_continues_stream(last_end, start, stop) == c_side.continues_stream(last_end, start, stop)
    assert served.python_stream_reach(stop - start) == c_side.stream_reach(stop - start)


def test_the_table_tells_both_answers() -> None:
    answers = {c_side.continues_stream(*read) for read in READS}
    assert answers == {True, False}


@pytest.mark.parametrize("args", [(-2, 0, 1), (0, -1, 0), (0, 5, 4)])
def test_c_refuses_what_no_read_is(args: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        c_side.continues_stream(*args)


def test_c_stream_reach_refuses_a_negative_size() -> None:
    with pytest.raises(ValueError):
        c_side.stream_reach(-1)



def test_without_the_extension_readahead_goes_by_the_python_rule() -> None:
    script = ("from zarrfs.engine import served; "
              "assert served.CachedReads is None; "
              "assert served.continues_stream is served.python_continues_stream; "
              "assert served.stream_reach is served.python_stream_reach")
    subprocess.run([sys.executable, "-c", script], env={**os.environ, "ZARRFS_NO_EXTENSIONS": "1"}, check=True)
