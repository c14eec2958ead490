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


def default_workers() -> int:
    # Decoding releases the GIL, and fetches wait on I/O: a few threads per
    # core keep both cores busy and some requests in flight.
    return max(4, 4 * (os.cpu_count() or 1))


@dataclass(frozen=True)
class EngineOptions:
    cache_bytes: int = DEFAULT_CACHE_BYTES
    workers: int = field(default_factory=default_workers)
    read_timeout: float = 300.0  # seconds a read may wait for its chunks
    readahead: bool = True
