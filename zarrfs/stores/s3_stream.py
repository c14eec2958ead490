"""A ranged S3 GET read piece by piece as its body arrives.

s3fs's `cat_file` reads a body whole before it answers; a long ranged GET
read that way holds its bytes back until the last one came. Here each piece
is handed on as soon as it is in, so that the first blocks of a long stream
(an ordinary file read in order) are served while the rest arrive, from one
request (not one per block).

The GET goes out on zarrfs's own HTTP client (http.py) to a URL that the
store's s3fs client presigns with its own credentials, endpoint and region:
the body then arrives in the reading thread, into the piece's buffer, where
aiohttp on s3fs's event loop would cost three times the CPU (256 MiB from
moto on 127.0.0.1: 0.08 against 0.26 CPU-s) and a crossing of threads per
piece. Three things send the read through s3fs's client instead:

- a per-request argument that a presigned URL does not carry (requester
  pays, SSE-C keys: s3fs's `req_kw` and `s3_additional_kwargs`);
- a client that botocore cannot presign for;
- a presigned GET answered with a 4xx status or a 301 without a Location
  (S3's answers for a region the URL was not signed for), a redirect
  elsewhere or a TLS failure (a client told to trust another certificate).

The last two send that store through s3fs from then on. A missing object is
missing either way; a 5xx answer, a timeout or a reset would be the same on
both: those go to `Requests`' retries (each try presigned again).

S3's checksum of the body is not asked for (a presigned URL cannot ask for
it unless the header is signed). What it would catch is checked otherwise:
TLS authenticates every byte over https, and a body shorter than its
Content-Length is an error; botocore's check, too, came only at a streamed
body's end, after the pieces before it had been served.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable, Generator
from typing import Any

from .backends import AsyncFsBackend
from .http import HttpReader, HttpStatusError
from .redact import redact_url
from .trust import TargetRefused, TrustRule

log = logging.getLogger(__name__)

# How long a presigned URL stays good: its GET is sent at once, so this only needs to cover the clocks'
# difference (S3 checks it when the request arrives, not while the body is read).
PRESIGNED_SECONDS = 900


class S3Streams:
    """Long ranged GETs of one s3fs file system's objects, each read as it arrives."""

    def __init__(self, backend: AsyncFsBackend) -> None:
        self._backend = backend
        fs = backend.async_fs
        self._presigned = not getattr(fs, "req_kw", None) and not getattr(fs, "s3_additional_kwargs", None)
        self._reader: HttpReader | None = None
        self._lock = threading.Lock()

    def pieces(self, path: str, start: int, stop: int, piece: int,
               on_version: Callable[[str | None], None] | None = None,
               ) -> Generator[bytes | bytearray | memoryview, None, None]:
        """Bytes [start, stop) of the object at `path` from one GET, in pieces of `piece` bytes (the last one
        shorter, and fewer bytes if the object ends first); each piece gets the backend's timeout. A
        missing object raises FileNotFoundError, as s3fs says it. `on_version` is told the answer's
        ETag before any of its bytes are read."""
        if self._presigned:
            try:
                url = self._backend.run(_presign, self._backend.async_fs, path)
            except Exception as exc:
                if isinstance(exc, OSError):  # (credentials fetched over a network: tried again)
                    raise
                self._presigned = False  # a client botocore cannot presign for (an anonymous one)
                log.info("s3://%s: no presigned GET (%s: %s); this store streams through s3fs's client",
                         path, type(exc).__name__, exc)
                yield from _s3fs_pieces(self._backend, path, start, stop, piece, on_version)
                return
            pieces = self._http_reader(url).pieces(url, start, stop, piece, on_version)
            try:
                first = next(pieces, None)
            except FileNotFoundError:
                raise FileNotFoundError(path) from None
            except (HttpStatusError, TargetRefused, ssl.SSLError) as exc:
                if isinstance(exc, HttpStatusError) and exc.status >= 500:  # the server's trouble: tried again
                    raise _hidden_error(exc, url) from None
                self._presigned = False
                log.info("s3://%s: a presigned GET failed (%s); this store streams through s3fs's client from now on",
                         path, _hidden(str(exc), url))
            except OSError as exc:  # a timeout, a reset: tried again
                raise _hidden_error(exc, url) from None
            else:
                log.debug("s3://%s [%d:%d]: streamed by a presigned GET of %s", path, start, stop, _hidden(url, url))
                try:
                    if first is not None:
                        yield first
                    yield from _url_hidden(pieces, url)
                finally:
                    pieces.close()  # a reader that stopped early: the connection, unread, is closed
                return
        yield from _s3fs_pieces(self._backend, path, start, stop, piece, on_version)

    def _http_reader(self, url: str) -> HttpReader:
        """The client for the presigned GETs, made on the first; a redirect may only lead to the same
        origin (one elsewhere would not match the URL's signature anyway)."""
        with self._lock:
            if self._reader is None:
                self._reader = HttpReader(self._backend.timeout, TrustRule(url.partition("?")[0]))
            return self._reader


def _hidden(text: str, url: str) -> str:
    """`text` with the presigned URL (a credential until it expires) shown without its query."""
    return redact_url(text.replace(url, url.partition("?")[0]))


def _hidden_error(exc: OSError, url: str) -> OSError:
    """`exc` again, of its kind, without the presigned URL in what it says."""
    if url not in str(exc):
        return exc
    text = _hidden(str(exc), url)
    return HttpStatusError(text, exc.status) if isinstance(exc, HttpStatusError) else type(exc)(text)


def _url_hidden(pieces: Generator[bytearray | memoryview, None, None], url: str,
                ) -> Generator[bytearray | memoryview, None, None]:
    """`pieces`, a failure part-way raised again without the presigned URL in what it says."""
    try:
        yield from pieces
    except OSError as exc:
        raise _hidden_error(exc, url) from None


async def _presign(fs: Any, path: str) -> str:
    bucket, key, version_id = fs.split_path(path)
    await fs.set_session()
    client = await fs.get_s3(bucket)
    client.meta.events.register_first("choose-signer.s3.GetObject", _as_the_client_signs,
                                      unique_id="zarrfs-presign-as-the-client-signs")
    params = {"Bucket": bucket, "Key": key, **({"VersionId": version_id} if version_id else {})}
    return str(await client.generate_presigned_url("get_object", Params=params, ExpiresIn=PRESIGNED_SECONDS))


def _as_the_client_signs(signature_version: Any, **_: Any) -> Any:
    """A presigned GET signed with the client's own signature version (S3's version 4, unless the user
    named another). Left to itself, botocore presigns with version 2 wherever a region still accepts
    it, and S3 refuses version 2 for every bucket made since June 2020."""
    version4 = isinstance(signature_version, str) and signature_version.startswith(("s3v4", "v4"))
    return signature_version if version4 and signature_version.endswith("-query") else None


def _s3fs_pieces(backend: AsyncFsBackend, path: str, start: int, stop: int, piece: int,
                 on_version: Callable[[str | None], None] | None) -> Generator[bytes, None, None]:
    """`S3Streams.pieces` through s3fs's client (aiohttp on its event loop)."""
    response = backend.run(_get_object, backend.async_fs, path, start, stop)
    body = response["Body"]
    try:
        if on_version is not None:
            on_version(response.get("ETag"))
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
