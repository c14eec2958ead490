"""A ranged S3 GET read piece by piece as its body arrives (s3fs's client, its event loop).

s3fs's `cat_file` reads a body whole before it answers; a long ranged GET
read that way holds its bytes back until the last one came. Here each piece
is handed on as soon as it is in, so that the first blocks of a long stream
are served while the rest arrive, from one request (not one per block).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from .backends import AsyncFsBackend


def s3_pieces(backend: AsyncFsBackend, path: str, start: int, stop: int,
              piece: int) -> Generator[bytes, None, None]:
    """Bytes [start, stop) of the object at `path` from one GET, in pieces of `piece` bytes (the last one
    shorter, and fewer bytes if the object ends first); each piece gets the backend's timeout. A
    missing object raises FileNotFoundError, as s3fs says it."""
    response = backend.run(_get_object, backend.async_fs, path, start, stop)
    body = response["Body"]
    try:
        at = start
        while at < stop:
            nbytes = min(piece, stop - at)
            data = backend.run(_read_piece, body, nbytes)
            if data:
                yield data
            at += len(data)
            if len(data) < nbytes:  # the object ended first
                break
    finally:
        backend.run(_close, body)  # (aiohttp's objects are the loop's: closed on it)


async def _get_object(fs: Any, path: str, start: int, stop: int) -> dict[str, Any]:
    bucket, key, version_id = fs.split_path(path)
    return await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{stop - 1}",
                             **({"VersionId": version_id} if version_id else {}))


async def _read_piece(body: Any, nbytes: int) -> bytes:
    """The next `nbytes` of the body (fewer where it ends); aiohttp hands over what it has buffered."""
    parts: list[bytes] = []
    got = 0
    while got < nbytes:
        chunk = await body.read(nbytes - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def _close(body: Any) -> None:
    body.close()
