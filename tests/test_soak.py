"""The short soak (bench/soak.py): 16 readers on two real mounts for half a minute, every byte checked.

Asserted, the figures issue 17 sets for the hour-long run: no error and no
wrong byte; the caches turned over; no more descriptors or threads when idle
after the run than when idle after the warm-up (but for FUSE threads, which stay once started, up to
a cap); each daemon's peak RSS within
its cache budget + 100 MiB (the idle daemon, interpreter and libraries, takes
about 50 MiB of that); resident memory at the end of the run no more than
16 MiB above its start (the free heap a daemon may keep), both taken at quiet
points (the readers pause before each). Memory is also sampled every 2 s
under load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from zarrfs.fuse.mount import fuse_concurrency

# bench/soak.py mounts from a child Python, out of the guard's sight.
pytestmark = [pytest.mark.soak, pytest.mark.mount]

SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"


def test_short_soak(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    result = subprocess.run([sys.executable, str(SOAK), "--minutes", "0.5", "--warmup", "5", "--series-every", "2",
                             "--json", str(out),
                             "--workdir", str(tmp_path / "work")], capture_output=True, text=True, timeout=600,
                            stdin=subprocess.DEVNULL, check=False)
    assert out.exists(), result.stderr[-3000:]
    figures = json.loads(out.read_text())
    print(json.dumps({k: v for k, v in figures.items() if k != "daemons"}),
          *(json.dumps(d) for d in figures["daemons"]), sep="\n")
    assert figures["errors"] == 0 and figures["wrong_bytes"] == 0, figures["error_samples"]
    assert figures["reads"] > 1000 and set(figures["operations"]) == {"stream", "preads", "mmap"}
    for daemon in figures["daemons"]:
        assert daemon["cache"]["evictions"] > 0, daemon  # the cache turned over: chunks were decoded again
        assert daemon["fds_end"] <= daemon["fds_start"], daemon
        # FUSE threads stay once started, up to the cap for the budget (12 for these two daemons)
        assert daemon["threads_end"] <= daemon["threads_start"] + fuse_concurrency(16 << 20)[1], daemon
        assert daemon["peak_rss_mib"] <= daemon["cache_budget_mib"] + 100, daemon
        assert len(daemon["memory_series"]) >= 10 and len(daemon["quiet_series"]) >= 3, daemon
        assert daemon["rss_growth_mib"] <= 16, daemon
    assert figures["failures"] == [], figures["failures"]
