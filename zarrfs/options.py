"""Typed, frozen options and the parsers for their command-line spellings."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import OptionsError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

# 512 MiB: holds several bands of large chunks (a band of 1024x1024 float32
# chunks across a 16384-wide array is 64 MiB), so sequential reads decode
# each chunk once with readahead running, and stays small beside the page
# cache, which holds the virtual files' bytes a second time.
DEFAULT_CACHE_BYTES = 512 << 20


def parse_size(text: str) -> int:
    """'512M', '512MiB', '2G', '1.5g', '1048576' -> bytes (binary units)."""
    match = _SIZE.match(text)
    if not match:
        raise OptionsError(f"invalid size {text!r}: use bytes or a number with K, M, G or T (e.g. 512M, 2GiB)")
    number, unit, _ = match.groups()
    return int(float(number) * _UNITS[unit.lower()])


def parse_storage_options(pairs: list[str]) -> dict[str, Any]:
    """['key=value', ...] -> dict; values are JSON when they parse as JSON.

    A value `@env:NAME` is read from the environment and `@file:PATH` from a
    file, so that secrets never need to appear on a command line.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise OptionsError(f"storage option {pair.split('=')[0]!r} must look like key=value")
        options[key] = _option_value(key, raw)
    return options


def _option_value(key: str, raw: str) -> Any:
    if raw.startswith("@env:"):
        name = raw[5:]
        if name not in os.environ:
            raise OptionsError(f"storage option {key}: environment variable {name} is not set")
        raw = os.environ[name]
    elif raw.startswith("@file:"):
        try:
            with open(raw[6:], encoding="utf-8") as f:
                raw = f.read().strip()
        except OSError as exc:
            raise OptionsError(f"storage option {key}: cannot read {raw[6:]}: {exc.strerror}") from exc
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


# Loader threads at most, however many CPUs: past this, threads only queue for the cache's lock.
MAX_DEFAULT_WORKERS = 64


def usable_cpus() -> int:
    """CPUs this process may run on (a `taskset` or container cpuset counts, not the host's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers() -> int:
    # Decoding releases the GIL, and fetches wait on I/O: a few threads per
    # CPU keep every CPU busy and some requests in flight.
    return min(MAX_DEFAULT_WORKERS, max(4, 4 * usable_cpus()))


def parse_duration(text: str) -> float | None:
    """'30', '1.5', '10s', '5m', '2h' -> seconds; 'forever' / 'inf' / 'never' -> None (no expiry)."""
    value = text.strip().lower()
    if value in ("forever", "inf", "never", "none"):
        return None
    match = _DURATION.match(value)
    if not match:
        raise OptionsError(f"invalid duration {text!r}: use seconds or a number with s, m or h (e.g. 30, 5m), "
                           "or 'forever'")
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if seconds <= 0:
        raise OptionsError(f"invalid duration {text!r}: must be positive")
    return seconds


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smh]?)$")
_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


# A mount of many stores (files/share.py): stores open at once. Each holds its metadata, readers and
# threads; past this the least recently used one that no open file reads is closed, to open again when
# looked into again.
DEFAULT_MAX_OPEN_STORES = 64

# Seconds `zarrfs mount` waits for its daemon's mount to become usable (--ready-timeout).
READY_TIMEOUT_SECONDS = 120.0

# A default that holds a few of the usual remote arrays, yet fits on any workstation's SSD.
DEFAULT_DISK_CACHE_BYTES = 10 << 30
MIN_DISK_CACHE_BYTES = 16 << 20


@dataclass(frozen=True)
class DiskCacheOptions:
    """`--disk-cache DIR` / `--disk-cache-size SIZE` (stores/disk_cache.py)."""

    directory: str
    max_bytes: int = DEFAULT_DISK_CACHE_BYTES
    # `--metadata-ttl`: copies validated longer ago than this are revalidated before use; None: copies
    # of chunks are kept as they are, and metadata documents are revalidated once per mount.
    ttl: float | None = None

    def __post_init__(self) -> None:
        if not self.directory:
            raise OptionsError("--disk-cache needs a directory")
        if self.max_bytes < MIN_DISK_CACHE_BYTES:
            raise OptionsError(f"--disk-cache-size must be at least {MIN_DISK_CACHE_BYTES >> 20} MiB")


@dataclass(frozen=True)
class StoreOptions:
    """How zarrfs talks to a (remote) store.

    A network hiccup should cost one retried request, not a failed read; a
    dead store should cost a bounded wait, then EIO: at most
    (retries + 1) x timeout plus the backoff sleeps per request.
    """

    timeout: float = 30.0  # seconds one request may take, first to last byte
    retries: int = 3  # further tries after a failed request
    retry_backoff: float = 0.2  # seconds before the first retry; doubles, with jitter
    # Requests in flight at once: at 20 ms latency and 4 MiB chunks, ~8 in
    # flight already carry 1.5 GB/s; more hide latency spikes and small chunks.
    # Metadata documents get `DOCUMENTS_PER_REQUEST_SLOT` times as many (`document_concurrency`).
    max_concurrency: int = 32
    # Icechunk repositories: the branch, tag or snapshot id to read (None: branch main).
    ref: str | None = None
    # Icechunk repositories: prefixes under which virtual chunk containers may be followed (none by default).
    virtual_chunks: tuple[str, ...] = ()
    # A persistent cache on local disk of what a remote store answered (None: off).
    disk_cache: DiskCacheOptions | None = None

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.retries < 0 or self.retry_backoff < 0 or self.max_concurrency < 1:
            raise OptionsError("store options: timeout must be > 0, retries >= 0, max concurrency >= 1")

    @property
    def document_concurrency(self) -> int:
        """Metadata documents in flight at once, beside the chunk requests `max_concurrency` bounds."""
        return self.max_concurrency * DOCUMENTS_PER_REQUEST_SLOT

    def worst_case_seconds(self) -> float:
        """The longest one request can take, retries and backoff included."""
        backoff = sum(min(MAX_BACKOFF, self.retry_backoff * 2**attempt) for attempt in range(self.retries))
        return (self.retries + 1) * self.timeout + backoff


MAX_BACKOFF = 5.0  # seconds: the cap on one backoff sleep
# Metadata documents in flight per chunk request slot. A document is a few KiB (at most
# `limits.max_document_bytes`): many in flight use little of the link or of memory, and a walk of a
# tree that cannot be listed (a plate over HTTP: thousands of documents, each named by the one above)
# waits on round trips, so it goes as fast as documents are in flight. zarr-python 3 keeps 100 of any
# kind in flight by default; with the default `max_concurrency` this gives 96 documents and 32 chunks.
DOCUMENTS_PER_REQUEST_SLOT = 3


@dataclass(frozen=True)
class EngineOptions:
    cache_bytes: int = DEFAULT_CACHE_BYTES
    workers: int = field(default_factory=default_workers)
    read_timeout: float = 300.0  # seconds a read may wait for its chunks
    store: StoreOptions = field(default_factory=StoreOptions)
    # Seconds that listings and metadata stay valid; None: while mounted
    # (stores are usually immutable, and every refresh costs requests).
    metadata_ttl: float | None = None
