"""How long the daemon takes to answer reads, as a histogram cheap enough to keep on every read.

A read's latency as a program sees it is the daemon's service time plus what the kernel and the
program add (queueing for a FUSE thread, page faults, the program's own threads). The daemon's
part, reported in `.zarrfs-stats.json`, tells the two apart when a slow read is looked into.

Buckets are powers of two of microseconds (1 µs .. ~36 min); a percentile is the upper edge of
the bucket it falls in, so it is exact to within a factor of two, and recording is one lock-free
list increment (a lost increment under a race costs one count, never a wrong bucket).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

BUCKETS = 32


class ServiceTimes:
    def __init__(self, counters_in_c: Callable[[], dict[str, Any]] | None = None) -> None:
        self._counts = [0] * BUCKETS
        # The C path's own counters and histogram of the reads it answered (engine/_cached_reads.c).
        self._counters_in_c = counters_in_c

    def record(self, start_ns: int) -> None:
        """Count one read that began at `start_ns` (`time.perf_counter_ns()`) and ends now."""
        micros = (time.perf_counter_ns() - start_ns) // 1000
        self._counts[min(BUCKETS - 1, micros.bit_length())] += 1

    def summary(self) -> dict[str, Any]:
        """Count, and p50 / p99 / max as the upper edges of their buckets in milliseconds."""
        counts = list(self._counts)
        served: dict[str, Any] = self._counters_in_c() if self._counters_in_c is not None else \
            {"reads": 0, "reads_in_streams": 0, "reads_after_loading": 0, "latency_buckets": []}
        for bucket, count in enumerate(served["latency_buckets"]):
            counts[bucket] += count
        total = sum(counts)
        return {"count": total, "answered_in_c": served["reads"],
                "answered_in_c_in_streams": served["reads_in_streams"],
                "answered_in_c_after_loading": served["reads_after_loading"],
                "p50_ms_at_most": self._edge(counts, total, 0.50),
                "p99_ms_at_most": self._edge(counts, total, 0.99), "max_ms_at_most": self._edge(counts, total, 1.0)}

    @staticmethod
    def _edge(counts: list[int], total: int, fraction: float) -> float:
        if not total:
            return 0.0
        seen = 0
        for bucket, count in enumerate(counts):
            seen += count
            if seen >= fraction * total:
                return (1 << bucket) / 1000
        return (1 << (BUCKETS - 1)) / 1000
