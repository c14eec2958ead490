"""Typed errors. Each carries the errno that a FUSE call reports for it.

Every error raised on purpose inside zarrfs is a `ZarrfsError`; the FUSE layer
maps `err.errno` straight to the reply, so nothing falls through to a default.
"""

from __future__ import annotations

import errno as _errno


class ZarrfsError(Exception):
    """Base class. `errno` is what a FUSE call answers; the message is for humans."""

    errno: int = _errno.EIO


class NotFoundError(ZarrfsError):
    """No node, key or virtual file of that name."""

    errno = _errno.ENOENT


class IsDirectoryError(ZarrfsError):
    """A file operation on a directory."""

    errno = _errno.EISDIR


class NotZarrError(ZarrfsError):
    """The source exists but holds no Zarr hierarchy at that path."""

    errno = _errno.ENOENT
    # What the source's root listed on the way to this error (stores/store.py's `Listed` entries), when it
    # was listed: a mount that goes on to serve the source as a share takes it rather than listing again.
    root_listing: list | None = None


class MetadataError(ZarrfsError):
    """A metadata document is invalid: bad JSON, wrong types, absurd shapes."""

    errno = _errno.EIO


class UnsupportedError(ZarrfsError):
    """Valid Zarr that zarrfs cannot serve: unknown codec, variable-length dtype..."""

    errno = _errno.ENOTSUP


class TooLargeError(UnsupportedError):
    """A file would be larger than a configured bound allows (a variable-length array at its width)."""

    errno = _errno.EFBIG


class StoreError(ZarrfsError):
    """The store failed to answer (I/O error, timeout, refused connection)."""

    errno = _errno.EIO


class StoreTimeoutError(StoreError):
    """The store did not answer within the configured timeout."""

    errno = _errno.ETIMEDOUT


class ChunkError(ZarrfsError):
    """A chunk was fetched but cannot be turned into the right elements."""

    errno = _errno.EIO


class OptionsError(ZarrfsError):
    """A command-line or mount option is invalid."""

    errno = _errno.EINVAL


class ConventionError(ZarrfsError):
    """Convention metadata that is broken or contradicts itself: the convention is ignored, the array served."""


class IcechunkReadError(ZarrfsError):
    """An error icechunk raised while reading a key, in one line. `permanent` when reading again
    cannot change it: a file of the repository that does not parse (icechunk's FormatError)."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class StaleFileError(ZarrfsError):
    """A variable's array changed its type or shape since the NetCDF file was listed (EIO: reopen it)."""


class StaleChunkError(ZarrfsError):
    """A chunk changed in the store since the open files reading it first saw it, or since their
    layout was read; or an ordinary file changed between two GETs of one open file's reads (ESTALE:
    reopen the file to see the store as it is now)."""

    errno = _errno.ESTALE


class InexactValueError(ZarrfsError):
    """An int64 value of a CDF-2 file's double variable that a double cannot hold exactly (EIO)."""
