"""The worker pool (engine/pool.py): demand before readahead, each task once, threads as work needs them."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from zarrfs.engine.pool import DEMAND, PREFETCH, PriorityPool, Task


@contextmanager
def running(workers: int) -> Iterator[PriorityPool]:
    pool = PriorityPool(workers, "test-pool")
    try:
        yield pool
    finally:
        pool.shutdown()


def settled(done: list, count: int) -> list:
    """`done` once it holds `count` items (or after 5 s), and a moment more for any extra."""
    deadline = time.monotonic() + 5
    while len(done) < count and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    return done


def test_one_task_at_a_time_keeps_one_thread() -> None:
    with running(8) as pool:
        for _ in range(50):
            done = threading.Event()
            pool.submit(Task(done.set), DEMAND)
            assert done.wait(5)
            time.sleep(0.001)  # the worker is idle again before the next task
        assert pool.threads == 1


def test_a_burst_starts_threads_up_to_the_limit_and_runs_every_task_once() -> None:
    release = threading.Event()
    ran: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        release.wait(5)
        with lock:
            ran.append(i)

    with running(4) as pool:
        tasks = [Task(work, i) for i in range(12)]
        for task in tasks:
            pool.submit(task, PREFETCH)
        for task in tasks[:3]:
            pool.submit(task, DEMAND)  # promoted: queued twice, runs once
        assert pool.threads == 4  # every submit found no idle worker: as many as allowed
        release.set()
        assert sorted(settled(ran, 12)) == list(range(12))
        assert pool.threads == 4


def test_demand_goes_before_readahead() -> None:
    gate = threading.Event()
    order: list[str] = []
    with running(1) as pool:
        pool.submit(Task(gate.wait, 5), DEMAND)  # occupies the one worker
        for i in range(3):
            pool.submit(Task(order.append, f"prefetch-{i}"), PREFETCH)
        pool.submit(Task(order.append, "demand"), DEMAND)
        gate.set()
        assert settled(order, 4) == ["demand", "prefetch-0", "prefetch-1", "prefetch-2"]


def test_no_thread_before_the_first_task_and_none_after_shutdown() -> None:
    pool = PriorityPool(4, "test-pool")
    assert pool.threads == 0
    pool.shutdown()
    pool.submit(Task(lambda: None), DEMAND)
    assert pool.threads == 0
