"""A worker pool where reads go before readahead.

Loads that a read waits for (demand) and loads started by readahead
(prefetch) share the workers, but a worker always takes the oldest demand
task first. A prefetch task that a read comes to need is promoted: it is
queued again as demand, and whichever copy a worker takes first runs it; the
other finds it claimed and does nothing.

Threads start as work needs them: a task submitted while no worker is idle
starts one more, up to `workers`. A daemon serving one reader at a time
(GDAL opening a window after another) keeps one or two, not the full
number, and none exists before the first load (the daemon forks first).
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from typing import Any

DEMAND = 0
PREFETCH = 1


class Task:
    """One unit of work that runs at most once, however often it is queued."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._fn = fn
        self._args = args
        self._claimed = False
        self._lock = threading.Lock()

    def claim(self) -> bool:
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    @property
    def claimed(self) -> bool:
        return self._claimed

    def run(self) -> None:
        self._fn(*self._args)


class PriorityPool:
    def __init__(self, workers: int, name: str) -> None:
        self._workers = workers
        self._name = name
        self._queue: queue.PriorityQueue[tuple[int, int, Task | None]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        # Released by a worker each time it finishes a task: a submit that can take it leaves the
        # task to that worker. It may count a worker that has taken a queued task since, so a task
        # can wait for a worker to finish while the pool is below `workers`, never be lost.
        self._idle = threading.Semaphore(0)
        self._closed = False

    @property
    def threads(self) -> int:
        """Worker threads started so far."""
        with self._lock:
            return len(self._threads)

    def submit(self, task: Task, priority: int) -> None:
        with self._lock:
            if self._closed:
                return
            self._queue.put((priority, next(self._order), task))
            if self._idle.acquire(blocking=False) or len(self._threads) >= self._workers:
                return
            thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def shutdown(self) -> None:
        """Stop the workers after their current task; queued tasks never run."""
        with self._lock:
            self._closed = True
            threads = len(self._threads)
        while True:
            try:
                _, _, task = self._queue.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task.claim()
        for _ in range(threads):
            self._queue.put((DEMAND - 1, next(self._order), None))

    def _work(self) -> None:
        while True:
            _, _, task = self._queue.get()
            if task is None:
                return
            if task.claim():
                task.run()
            self._idle.release()
