"""A key's value with the version it is (`Versioned`), as the answer that carried it tells: a local
file's identity, an HTTP or S3 answer's validators and clocks."""

from __future__ import annotations

import datetime
import email.utils
import os
import stat
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any


# The version of a key the store does not have: a chunk of fill value.
ABSENT = "absent"


@dataclass(frozen=True)
class Versioned:
    """A key's value and the version it is, as told by the answer that carried the value (no
    request of its own): what an open file checks each chunk it reads against
    (engine/chunk_versions.py)."""

    data: bytes | bytearray | None  # None: no such key
    # (inode, size, mtime_ns) of a local file; the ETag (else Last-Modified) an HTTP answer carried;
    # ABSENT for no such key; None when the store tells none (fsspec's other backends).
    version: Hashable | None
    # When the value was last modified (a local file's mtime; an answer's Last-Modified), ns since the
    # epoch by the clock `clock_offset_ns` ahead of ours (None: ours): a change after a reader began is
    # a change under it.
    modified_ns: int | None = None
    clock_offset_ns: int | None = None  # the server's clock minus ours, from the answer's Date


def _http_moment(text: str | None) -> int | None:
    """An HTTP date (Last-Modified, Date) in ns since the epoch, None when absent or unreadable."""
    if not text:
        return None
    try:
        return int(email.utils.parsedate_to_datetime(text).timestamp()) * 1_000_000_000
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def remote_versioned(data: bytes | bytearray | None, version: str | None, modified: Any, date: Any,
                      received_ns: int) -> Versioned:
    """A remote answer's value and version, its Last-Modified told by the server's clock (its Date)."""
    modified_ns = modified if isinstance(modified, int) else _http_moment(modified) \
        if isinstance(modified, str) else None
    server_ns = _http_moment(date) if isinstance(date, str) else None
    if modified_ns is None or server_ns is None:
        return Versioned(data, version)
    return Versioned(data, version, modified_ns, server_ns - received_ns)


def read_local(path: str) -> Versioned:
    """A local file's bytes and its identity, both from one descriptor. A file written while it was
    read (its size or mtime differ after the read from before) is an OSError: the retry reads it again."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        before = os.fstat(fd)
        if stat.S_ISDIR(before.st_mode):
            raise IsADirectoryError(path)
        with open(fd, "rb", buffering=0, closefd=False) as file:  # the descriptor stays ours to fstat
            data = file.readall()
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or len(data) != after.st_size:
        raise OSError(f"{path} changed while it was read")
    return Versioned(data, (after.st_ino, after.st_size, after.st_mtime_ns), after.st_mtime_ns)


async def s3_get(fs: Any, path: str) -> Versioned:
    """A whole S3 object and the ETag of the GET that carried it, as s3fs's `cat_file` GETs it
    (which drops the answer's headers); a missing key is FileNotFoundError, as s3fs says it."""
    bucket, key, version_id = fs.split_path(path)
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key,
                                 **({"VersionId": version_id} if version_id else {}))
    try:
        data = await response["Body"].read()
    finally:
        response["Body"].close()
    etag = response.get("ETag")
    modified = response.get("LastModified")
    modified_ns = int(modified.timestamp()) * 1_000_000_000 if isinstance(modified, datetime.datetime) else None
    date = ((response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}).get("date")
    return remote_versioned(data, str(etag) if etag else None, modified_ns, date, time.time_ns())


class ChangedWhileRead(OSError):
    """An answer for an open file that carries another version than the answers before it did: its
    bytes are not mixed with theirs, and no retry changes that."""

    permanent = True  # (requests.py: not tried again)


class OneVersion:
    """The version of one object across the answers one open file gets (`check` each): the first
    answer's, which every later one must carry. An answer that tells no version passes."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._first: Hashable | None = None
        self._lock = threading.Lock()

    def check(self, version: Hashable | None) -> None:
        """Raise ChangedWhileRead if `version` is not the first answer's."""
        if version is None:
            return
        with self._lock:
            if self._first is None:
                self._first = version
            first = self._first
        if version != first:
            raise ChangedWhileRead(f"{self._name} changed while it was read (its first answer was version "
                                   f"{first}, this one {version})")


def http_version(validators: dict[str, str]) -> str | None:
    """What tells versions of an HTTP object apart: its ETag, else its Last-Modified (None: neither sent)."""
    return validators.get("ETag") or validators.get("Last-Modified")
