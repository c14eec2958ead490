"""How `Store` sends one request: bounded in number, in time, and in tries.

At most `max_concurrency` requests are in flight (a semaphore), and beside
them at most `document_concurrency` reads of metadata documents; each try is
bounded in time by its backend (backends.py); a failed try is tried again up
to `retries` times with jittered exponential backoff, unless it cannot
succeed (no such key, refused, marked permanent by its backend).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Generator
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
        self._document_slots = threading.BoundedSemaphore(options.document_concurrency)

    def call(self, what: str, operation: Callable[[], T], document: bool = False) -> T:
        """`operation()`, one store operation, with retries; the errors of MISSING pass through.
        `document`: it reads a metadata document (bounded in size), in flight beside the chunk
        requests rather than in their slots (`StoreOptions.document_concurrency`)."""
        tries, attempt = self.options.retries + 1, 0
        slots = self._document_slots if document else self._slots
        while True:
            with slots:
                self.stats.started()
                nbytes = 0
                try:
                    result = operation()
                    nbytes = _body_nbytes(result)
                    return result
                except MISSING:
                    raise
                except Exception as exc:  # noqa: BLE001 - backends raise aiohttp, botocore and OS errors alike
                    error = self._transient(what, exc)
                finally:
                    self.stats.finished(nbytes)
            self._back_off(what, error, attempt, tries)
            attempt += 1

    def stream(self, what: str, open_at: Callable[[int], Generator[bytes | bytearray | memoryview, None, None]],
               start: int) -> Generator[bytes | bytearray | memoryview, None, None]:
        """The pieces that `open_at(offset)` yields (one request for the bytes from `offset` to the stream's
        end), from `start`. A slot is held while a piece arrives, not between pieces: a stream its reader
        has not finished (a file read part-way) keeps its connection, never a slot other reads wait
        for. A try that fails part-way is tried again from the byte it got to, as `call` tries again
        (the tries are the stream's, not each piece's); a body that ends early ends the stream (the
        object is shorter than asked)."""
        tries, attempt, at = self.options.retries + 1, 0, start
        while True:
            self.stats.started()
            nbytes = 0
            try:
                pieces = open_at(at)
                try:
                    while True:
                        with self._slots:
                            piece = next(pieces, None)
                        if piece is None:
                            return
                        nbytes += len(piece)
                        at += len(piece)
                        yield piece
                finally:
                    pieces.close()
            except MISSING:
                raise
            except Exception as exc:  # noqa: BLE001 - as in `call`
                error = self._transient(what, exc)
            finally:
                self.stats.finished(nbytes)
            self._back_off(what, error, attempt, tries)
            attempt += 1

    def _transient(self, what: str, exc: Exception) -> str:
        """What a failed try says, when another try may succeed; else the StoreError that ends it."""
        if isinstance(exc, TimeoutError):
            return f"no complete answer within {self.options.timeout:g} s"
        error = redact_url(f"{type(exc).__name__}: {exc}".strip().rstrip(":"))
        # Transient until proven otherwise: 5xx answers, resets, truncated bodies, refused connections
        # while a server restarts. A backend marks what no retry changes `permanent` (a damaged
        # Icechunk file); a refusal (_PERMANENT) is final too.
        if isinstance(exc, _PERMANENT):
            self.stats.count("failures")
            raise StoreError(f"{self.display_name}: {what} refused: {exc}") from exc
        if getattr(exc, "permanent", False) is True:
            self.stats.count("failures")
            raise StoreError(f"{self.display_name}: {what} failed: {error}") from exc
        return error

    def _back_off(self, what: str, error: str, attempt: int, tries: int) -> None:
        """Wait before try `attempt + 2`, or raise the StoreError of the last try."""
        if attempt + 1 >= tries:
            self.stats.count("failures")
            raise StoreError(f"{self.display_name}: {what} failed after {tries} tries: {error}")
        self.stats.count("retries")
        delay = min(MAX_BACKOFF, self.options.retry_backoff * 2**attempt) * random.uniform(0.5, 1.0)
        log.debug("%s: %s: %s; retrying in %.2f s", self.display_name, what, error, delay)
        time.sleep(delay)


def _body_nbytes(result: object) -> int:
    """The bytes an answer carried: a body, a (body, validators) pair (HttpReader.fetch's), a `Versioned`."""
    body = result[0] if isinstance(result, tuple) else result.data if isinstance(result, Versioned) else result
    return len(body) if isinstance(body, bytes | bytearray) else 0
