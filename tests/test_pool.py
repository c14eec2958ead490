"""The worker pool (engine/pool.py): demand before readahead, each task once, threads as work needs them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from zarrfs.engine.pool import DEMAND, PREFETCH, PriorityPool, Task


class Finishes(threading.Semaphore):
    """The pool's `_idle` semaphore, which a worker releases each time it is done with a queued entry
    (run, or found claimed) and free again: counted, so a test waits for that event, not for time."""

    def __init__(self) -> None:
        super().__init__(0)
        self._count = 0
        self._counted = threading.Condition()

    def release(self, n: int = 1) -> None:
        super().release(n)
        with self._counted:
            self._count += n
            self._counted.notify_all()

    def wait_for(self, count: int) -> None:
        """Until workers have been done with `count` queued entries in all (10 s: a hang guard)."""
        with self._counted:
            assert self._counted.wait_for(lambda: self._count >= count, 10), f"{self._count} of {count} entries"


@contextmanager
def running(workers: int) -> Iterator[tuple[PriorityPool, Finishes]]:
    pool = PriorityPool(workers, "test-pool")
    pool._idle = finishes = Finishes()  # before the first submit: every release is counted
    try:
        yield pool, finishes
    finally:
        pool.shutdown()


def test_one_task_at_a_time_keeps_one_thread() -> None:
    with running(8) as (pool, finishes):
        for n in range(1, 51):
            pool.submit(Task(lambda: None), DEMAND)
            finishes.wait_for(n)  # the worker is idle again before the next task
        assert pool.threads == 1


def test_a_burst_starts_threads_up_to_the_limit_and_runs_every_task_once() -> None:
    release = threading.Event()
    ran: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        release.wait(5)
        with lock:
            ran.append(i)

    with running(4) as (pool, finishes):
        tasks = [Task(work, i) for i in range(12)]
        for task in tasks:
            pool.submit(task, PREFETCH)
        for task in tasks[:3]:
            pool.submit(task, DEMAND)  # promoted: queued twice, runs once
        assert pool.threads == 4  # every submit found no idle worker: as many as allowed
        release.set()
        finishes.wait_for(15)  # every entry taken: the 12 tasks, and the 3 copies found claimed
        assert sorted(ran) == list(range(12))
        assert pool.threads == 4


def test_demand_goes_before_readahead() -> None:
    gate = threading.Event()
    order: list[str] = []
    with running(1) as (pool, finishes):
        pool.submit(Task(gate.wait, 5), DEMAND)  # occupies the one worker
        for i in range(3):
            pool.submit(Task(order.append, f"prefetch-{i}"), PREFETCH)
        pool.submit(Task(order.append, "demand"), DEMAND)
        gate.set()
        finishes.wait_for(5)
        assert order == ["demand", "prefetch-0", "prefetch-1", "prefetch-2"]


def test_no_thread_before_the_first_task_and_none_after_shutdown() -> None:
    pool = PriorityPool(4, "test-pool")
    assert pool.threads == 0
    pool.shutdown()
    pool.submit(Task(lambda: None), DEMAND)
    assert pool.threads == 0
