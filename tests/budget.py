"""How many examples a hypothesis property (or a randomized stress loop) draws.

The full run (CI, `scripts/test.sh`, a plain `pytest`, the sanitizer runs) draws each property's full
count. The fast subset (`pytest -m "not mount and not clients and not soak"`: conftest sets `fast` when
the marker expression leaves out `mount`) draws a third of it, so that it stays under a minute on two
vCPUs; every property still runs, on the same strategies and with the same assertions, and the
examples hypothesis saved from earlier failures (.hypothesis/) are replayed first in either run.
"""

from __future__ import annotations

FAST_SHARE = 3  # the fast subset draws 1/FAST_SHARE of each count
FAST_FLOOR = 20  # and never fewer than this
fast = False


def examples(full: int) -> int:
    """`full` in the full run; in the fast subset a third of it (at least FAST_FLOOR, at most `full`)."""
    return min(full, max(FAST_FLOOR, full // FAST_SHARE)) if fast else full
