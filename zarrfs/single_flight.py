"""One load per key: whoever asks for a key while its load is under way waits for that load.

`SingleFlight` is the table of loads under way, by key; `Once` is one value
built the first time it is needed (a lazy layout, a deferred file). A failed load is not remembered: its waiters get
its error, and the next caller loads again (a store may fail only for a while).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K]):
    """The loads under way, by key, each a future its waiters share.

    `join` is the low-level half for a load that runs elsewhere (a pool's
    task resolves the future, then calls `land`); `run` loads in the calling
    thread. Its lock is a leaf: callers may hold their own around `join`
    (the chunk cache joins and lands under its lock, so that a key is always
    either cached or under way, never between the two).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[K, Future] = {}

    def join(self, key: K) -> tuple[Future, bool]:
        """(the load of `key`, whether the caller is the one to run it: a new load)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight, False
            flight = self._flights[key] = Future()
            return flight, True

    def land(self, key: K, flight: Future) -> None:
        """The load of `key` ended (its future resolved or about to be): later callers start anew."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]

    def under_way(self, key: K) -> bool:
        """Whether a load of `key` is under way now."""
        with self._lock:
            return key in self._flights

    def abandon(self) -> list[Future]:
        """Every load under way, forgotten (the owner is closing: it settles them); later callers start anew."""
        with self._lock:
            flights, self._flights = list(self._flights.values()), {}
            return flights

    def run(self, key: K, load: Callable[[], V]) -> V:
        """`load()`'s value, run once however many ask for `key` at once."""
        flight, new = self.join(key)
        if not new:
            return flight.result()
        return self._fly(key, flight, load)

    def run_unless_under_way(self, key: K, load: Callable[[], V]) -> None:
        """Run `load()` for `key` unless a load of it is under way, and never wait: work ahead of
        demand, which leaves a key being loaded to its loader. A failure goes to the load's waiters
        (and is raised here)."""
        flight, new = self.join(key)
        if new:
            self._fly(key, flight, load)

    def _fly(self, key: K, flight: Future, load: Callable[[], V]) -> V:
        try:
            value = load()
        except BaseException as exc:
            flight.set_exception(exc)
            raise
        else:
            flight.set_result(value)
            return value
        finally:
            self.land(key, flight)


class Once(Generic[V]):
    """A value built by `build` the first time it is asked for, then kept (a failure is not).

    A wide group holds several per array, most never asked for: the flight that serialises the build
    is made at the first ask (under one lock for all), and the object has slots."""

    __slots__ = ("_build", "_flight", "_value", "_built")
    _making_flights = threading.Lock()

    def __init__(self, build: Callable[[], V]) -> None:
        self._build = build
        self._flight: SingleFlight[None] | None = None
        self._value: V | None = None
        self._built = False

    def value(self) -> V:
        if not self._built:
            if self._flight is None:
                with Once._making_flights:
                    if self._flight is None:
                        self._flight = SingleFlight()
            return self._flight.run(None, self._build_and_keep)
        return self._value  # type: ignore[return-value]  # built: set before `_built`

    def _build_and_keep(self) -> V:
        if not self._built:  # a caller that found the flight ended just now: no second build
            self._value = self._build()
            self._built = True
        return self._value  # type: ignore[return-value]
