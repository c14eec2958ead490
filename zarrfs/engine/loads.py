"""Load tasks for the cache's misses: one key per task, or one batch group per task.

Every future a task was given ends resolved, whatever the loader does: a
value, or an exception for the keys it failed (a loader that skips a key is
a bug, not fill value). `finish(key, future, outcome, size_hint)` is the
cache's: it caches values, counts, and settles the future.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from .pool import Task

# The keys are the caller's (a reader's `(prefix, coords)`): the cache only hashes and hands them back.
Loader = Callable[[Any], Any]
Finish = Callable[..., None]


@dataclass(frozen=True)
class Batch:
    """How to load several missing keys together.

    `group(key)`: keys with the same non-None group may load in one call;
    `load(keys)`: yields (key, value) for each key, where a value that is an
    exception is that key's failure (the others still succeed).
    """

    group: Callable[[Any], Hashable | None]
    load: Callable[[list[Any]], Iterable[tuple[Any, Any]]]


def load_groups(started: list[tuple[Hashable, Future]], batch: Batch | None) -> list[list[tuple[Hashable, Future]]]:
    """New misses split into load tasks: one per key, or one per batch group."""
    if batch is None:
        return [[item] for item in started]
    groups: dict[Hashable, list[tuple[Hashable, Future]]] = {}
    singles: list[list[tuple[Hashable, Future]]] = []
    for key, future in started:
        group = batch.group(key)
        if group is None:
            singles.append([(key, future)])
        else:
            groups.setdefault(group, []).append((key, future))
    return [*groups.values(), *singles]


def load_task(finish: Finish, group: list[tuple[Hashable, Future]], loader: Loader, batch: Batch | None,
              size_hint: int) -> Task:
    """One load task: a single key, or a batch group loaded by one call."""
    if len(group) == 1 or batch is None:
        [(key, future)] = group if len(group) == 1 else [group[0]]
        return Task(run_one, finish, key, loader, future, size_hint)
    return Task(_run_batch, finish, dict(group), batch, size_hint)


def run_one(finish: Finish, key: Hashable, loader: Loader, future: Future, size_hint: int,
            side: bool = False) -> None:
    try:
        value = loader(key)
    except BaseException as exc:  # delivered to every waiter, not cached
        finish(key, future, exc, size_hint)
        return
    finish(key, future, value, size_hint, side)


def _run_batch(finish: Finish, futures: dict[Hashable, Future], batch: Batch, size_hint: int) -> None:
    try:
        for key, outcome in batch.load(list(futures)):
            future = futures.pop(key, None)
            if future is not None:
                finish(key, future, outcome, size_hint)
    except BaseException as exc:  # the whole batch failed: every key not yet answered gets it
        for key, future in futures.items():
            finish(key, future, exc, size_hint)
        return
    for key, future in futures.items():
        finish(key, future, RuntimeError(f"batch load gave no value for {key!r}"), size_hint)


def resolve(future: Future, outcome: Any) -> None:
    """Settle a future once; a load that finishes after shutdown settled it finds it done."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except InvalidStateError:
        pass
