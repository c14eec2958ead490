"""Bounds on metadata documents, so that a hostile store cannot exhaust the daemon.

A metadata document (`zarr.json`, `.zarray`, `.zmetadata`, ...) is refused
when it is larger than `max_document_bytes()` or nested deeper than
`MAX_JSON_DEPTH`. Parsed JSON takes about five times its size in Python
objects, and consolidated
metadata stays in memory for the whole mount: the size bound keeps both
bounded. The default holds consolidated metadata of ~180,000 arrays.

A group lists every child, with no count cap: the bound is the memory its
listed children hold. Each listed array costs about `LISTED_NODE_BYTES`
(its parsed metadata and the decisions about its files); a group whose
children would hold more than `max_metadata_held()` is refused with an error
that says so (EFBIG for whoever lists it), never listed in part, since a
partial listing would hide arrays that exist.

Both bounds can be raised for trusted stores with environment variables.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ..errors import MetadataError, TooLargeError, UnsupportedError

SIZE_VARIABLE = "ZARRFS_MAX_METADATA_SIZE"
# 64 MiB: consolidated metadata of ~180,000 arrays (a flat v3 group of 100,000 small arrays writes 35 MB).
DEFAULT_MAX_DOCUMENT_BYTES = 64 << 20
HELD_VARIABLE = "ZARRFS_MAX_METADATA_HELD"
# What one listed child node holds, with a margin: a flat v3 group of 100,000 like arrays listed and
# stated (`ls -l`) held about 1.7 KiB of the daemon's resident memory per array, libfuse's table of the
# 700,000 names it was asked about included (bench/bench_share.py), 0.5 KiB of it Python's heap; arrays
# each with its own attributes hold more, up to 3 KiB of heap (tests/test_wide_groups.py).
LISTED_NODE_BYTES = 6 << 10
# The default bound on one group's listed children: a quarter of the machine's memory.
HELD_SHARE_OF_MEMORY = 4
# Zarr metadata is a few levels deep (OME-Zarr attributes about ten); 128
# leaves room for any real attributes and stays far below Python's recursion
# limit, which json.dumps of the `.json` sidecar would otherwise hit.
MAX_JSON_DEPTH = 128


def max_document_bytes() -> int:
    """The size bound in force: `ZARRFS_MAX_METADATA_SIZE` (e.g. 256M) or the default."""
    return _size_from_env(SIZE_VARIABLE, DEFAULT_MAX_DOCUMENT_BYTES)


def check_document_size(nbytes: int, where: str) -> None:
    """Refuse a document over the limit. Stores read at most limit + 1 bytes of one, so the
    message can say only that it is over, not by how much."""
    limit = max_document_bytes()
    if nbytes > limit:
        raise MetadataError(
            f"{where}: metadata document over the {limit / (1 << 20):.0f} MiB limit; if the store is trusted, "
            f"raise it with the environment variable {SIZE_VARIABLE} (e.g. {SIZE_VARIABLE}={2 * limit >> 20}M)")


def check_depth(doc: Any, where: str) -> None:
    """Refuse JSON nested deeper than MAX_JSON_DEPTH (iteratively: no recursion to exhaust)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise MetadataError(f"{where}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def max_metadata_held() -> int:
    """The bound on what one group's listed children may hold: `ZARRFS_MAX_METADATA_HELD` (e.g. 8G), or a
    quarter of the machine's memory."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 8 << 30
    return _size_from_env(HELD_VARIABLE, max(1 << 30, memory // HELD_SHARE_OF_MEMORY))


def check_children(count: int, where: str) -> None:
    """Refuse a group whose `count` children would hold more memory than the bound."""
    limit = max_metadata_held()
    if count * LISTED_NODE_BYTES > limit:
        raise TooLargeError(
            f"{where}: the group has {count} children, which would hold about "
            f"{count * LISTED_NODE_BYTES >> 20} MiB of metadata, over the {limit >> 20} MiB bound; if this "
            f"machine has the memory, raise it with the environment variable {HELD_VARIABLE} "
            f"(e.g. {HELD_VARIABLE}={-(-count * LISTED_NODE_BYTES * 2 // (1 << 20))}M)")


# ------------------------------------------------ variable-length arrays
#
# A string or bytes array is served at a fixed width n (its longest element), which only
# reading the whole array can tell (engine/vlen_widths.py). Three bounds keep that affordable:
# the scan itself (elements decoded into Python objects, ~1 s per million), the fixed-width
# .npy it produces (one long element widens every element), and the values put into .json.

VLEN_ELEMENTS_VARIABLE = "ZARRFS_MAX_VLEN_ELEMENTS"
DEFAULT_MAX_VLEN_ELEMENTS = 10_000_000
VLEN_SIZE_VARIABLE = "ZARRFS_MAX_VLEN_SIZE"
DEFAULT_MAX_VLEN_BYTES = 4 << 30
VLEN_JSON_VARIABLE = "ZARRFS_MAX_VLEN_JSON_SIZE"
DEFAULT_MAX_VLEN_JSON_BYTES = 16 << 20


def _size_from_env(variable: str, default: int) -> int:
    text = os.environ.get(variable)
    if not text:
        return default
    from ..options import parse_size  # options imports nothing of ours but errors

    return parse_size(text)


def max_vlen_elements() -> int:
    """Most elements of a variable-length array that zarrfs scans: `ZARRFS_MAX_VLEN_ELEMENTS` or the default."""
    text = os.environ.get(VLEN_ELEMENTS_VARIABLE, "")
    return int(text) if text.isdigit() and int(text) > 0 else DEFAULT_MAX_VLEN_ELEMENTS


def max_vlen_bytes() -> int:
    """Largest fixed-width element region of a vlen array's .npy: `ZARRFS_MAX_VLEN_SIZE` (e.g. 8G) or the default."""
    return _size_from_env(VLEN_SIZE_VARIABLE, DEFAULT_MAX_VLEN_BYTES)


def max_vlen_json_bytes() -> int:
    """A vlen array's .json lists its values when its fixed-width size is at most this:
    `ZARRFS_MAX_VLEN_JSON_SIZE` or the default."""
    return _size_from_env(VLEN_JSON_VARIABLE, DEFAULT_MAX_VLEN_JSON_BYTES)


def check_vlen_elements(count: int, where: str) -> None:
    """Refuse (at metadata time, so the array is listed with this reason) a vlen array too large to scan."""
    limit = max_vlen_elements()
    if count > limit:
        raise UnsupportedError(
            f"{where}: variable-length array of {count} elements, more than the {limit} zarrfs reads to find its "
            f"width; if that is affordable, raise the bound with the environment variable {VLEN_ELEMENTS_VARIABLE} "
            f"(e.g. {VLEN_ELEMENTS_VARIABLE}={count})")
