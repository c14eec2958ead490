"""How `Store` sends one request: bounded in number, in time, and in tries.

At most `max_concurrency` requests are in flight (a semaphore); each try is
bounded in time by its backend (backends.py); a failed try is tried again up
to `retries` times with jittered exponential backoff, unless it cannot
succeed (no such key, refused, marked permanent by its backend).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import StoreError
from ..options import MAX_BACKOFF, StoreOptions
from .disk_cache import DiskCache
from .redact import redact_url
from .versioned import Versioned

log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors that mean "this key is not there" across fsspec backends.
MISSING = (FileNotFoundError, KeyError, IsADirectoryError, NotADirectoryError)
# Errors that another try cannot fix: fail at once instead of after the backoff.
_PERMANENT = (PermissionError,)


class StoreStats:
    """Request counters, updated from many loader threads at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0  # attempts sent, retries included
        self.retries = 0
        self.failures = 0  # requests that failed after every try
        self.bytes_fetched = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.disk_cache: DiskCache | None = None  # its figures are reported with these

    def started(self) -> None:
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def finished(self, nbytes: int = 0) -> None:
        with self._lock:
            self.in_flight -= 1
            self.bytes_fetched += nbytes

    def count(self, field: str) -> None:
        with self._lock:
            setattr(self, field, getattr(self, field) + 1)

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            figures: dict[str, Any] = {
                "requests": self.requests, "retries": self.retries, "failures": self.failures,
                "bytes_fetched": self.bytes_fetched, "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight}
        if self.disk_cache is not None:
            figures["disk_cache"] = self.disk_cache.describe()
        return figures


class Requests:
    """The requests of one store: its slots, its counters and its retry policy."""

    def __init__(self, display_name: str, options: StoreOptions, stats: StoreStats) -> None:
        self.display_name = display_name
        self.options = options
        self.stats = stats
        self._slots = threading.BoundedSemaphore(options.max_concurrency)

    def call(self, what: str, operation: Callable[[], T]) -> T:
        """`operation()`, one store operation, with retries; the errors of MISSING pass through."""
        tries = self.options.retries + 1
        for attempt in range(tries):
            with self._slots:
                self.stats.started()
                nbytes = 0
                try:
                    result = operation()
                    nbytes = _body_nbytes(result)
                    return result
                except MISSING:
                    raise
                except TimeoutError:
                    error = f"no complete answer within {self.options.timeout:g} s"
                except _PERMANENT as exc:
                    self.stats.count("failures")
                    raise StoreError(f"{self.display_name}: {what} refused: {exc}") from exc
                except Exception as exc:  # noqa: BLE001 - backends raise aiohttp, botocore and OS errors alike
                    # Transient until proven otherwise: 5xx answers, resets,
                    # truncated bodies, refused connections while a server restarts. A backend
                    # marks what no retry changes `permanent` (a damaged Icechunk file).
                    error = redact_url(f"{type(exc).__name__}: {exc}".strip().rstrip(":"))
                    if getattr(exc, "permanent", False) is True:
                        self.stats.count("failures")
                        raise StoreError(f"{self.display_name}: {what} failed: {error}") from exc
                finally:
                    self.stats.finished(nbytes)
            if attempt + 1 < tries:
                self.stats.count("retries")
                delay = min(MAX_BACKOFF, self.options.retry_backoff * 2**attempt) * random.uniform(0.5, 1.0)
                log.debug("%s: %s: %s; retrying in %.2f s", self.display_name, what, error, delay)
                time.sleep(delay)
        self.stats.count("failures")
        raise StoreError(f"{self.display_name}: {what} failed after {tries} tries: {error}")


def _body_nbytes(result: object) -> int:
    """The bytes an answer carried: a body, a (body, validators) pair (HttpReader.fetch's), a `Versioned`."""
    body = result[0] if isinstance(result, tuple) else result.data if isinstance(result, Versioned) else result
    return len(body) if isinstance(body, bytes | bytearray) else 0
