"""Chunk reads over plain HTTP(S) without fsspec's event loop.

fsspec's HTTP file system runs every request on one asyncio thread through
aiohttp: each GET crosses to that thread and back, and the loop's Python
(headers, body assembly) is paid on one thread for all requests. Over HTTP
it was most of what zarrfs spent above reading local chunks. Here each
thread that reads keeps its own keep-alive connection (http.client, which
releases the GIL while it waits) and reads a body into one buffer.

Only whole and ranged GETs go through here (`Store` uses it for `cat_file`
on a plain http(s) URL given without storage options); listings, existence
checks and every other backend stay with fsspec.

Answers mean what they mean for fsspec's HTTP file system, so `Store`'s
retries treat them alike: 404 and 410 are a missing key
(FileNotFoundError); redirects are followed (up to `MAX_REDIRECTS`); any
other status, a reset, a body shorter than its Content-Length
(http.client's IncompleteRead) is an OSError worth another try. A request
gets `timeout` seconds from its first byte sent to its last byte read: each
wait on the socket gets what is left of them.
"""

from __future__ import annotations

import http.client
import threading
import time
from urllib.parse import quote, urljoin, urlsplit

from ..versions import package_version

MAX_REDIRECTS = 5
# The body is read this much at a time, the deadline checked between pieces.
PIECE = 1 << 20
_MISSING_STATUS = (404, 410)
_REDIRECT_STATUS = (301, 302, 303, 307, 308)
# Percent-escapes in the URL stay as they are; what would not survive a request line is escaped.
_SAFE = "/%:@!$&'()*+,;=-._~"


class HttpReader:
    """GETs of whole objects or byte ranges of http(s) URLs, one keep-alive connection per thread."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._user_agent = f"zarrfs/{package_version('zarrfs')}"
        self._local = threading.local()  # per thread: {(scheme, host:port): connection}

    def cat_file(self, url: str, start: int | None = None, end: int | None = None) -> bytes | bytearray:
        """The object at `url`, or bytes [start, end) of it (a negative `start` with no `end`:
        the last -start bytes), as fsspec's `cat_file` answers."""
        if start is not None and start == end:
            return b""
        deadline = time.monotonic() + self.timeout
        for _ in range(MAX_REDIRECTS + 1):
            location = self._get(url, _range(start, end), deadline)
            if isinstance(location, str):
                url = urljoin(url, location)
                continue
            return location
        raise OSError(f"more than {MAX_REDIRECTS} redirects from {url}")

    def _get(self, url: str, byte_range: str | None, deadline: float) -> bytes | bytearray | str:
        """The body of one GET, or where a redirect points."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise OSError(f"a redirect to {parts.scheme}: is not followed")
        target = quote(parts.path or "/", safe=_SAFE) + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]  # http.client sends it as the Host header
        headers = {"Accept-Encoding": "identity", "User-Agent": self._user_agent}
        if byte_range:
            headers["Range"] = byte_range
        key = (parts.scheme, host)
        connection, reused = self._connection(key, deadline)
        try:
            try:
                response = _send(connection, target, headers, deadline)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if not reused:
                    raise
                # The server closed the idle connection before this request reached it: not a
                # failure of the request, which goes again on a new connection.
                self._drop(key)
                connection, _ = self._connection(key, deadline)
                response = _send(connection, target, headers, deadline)
            if response.status in _REDIRECT_STATUS:
                response.read()
                return response.getheader("Location") or ""
            if response.status in _MISSING_STATUS:
                response.read()
                raise FileNotFoundError(url)
            if response.status >= 400:
                response.read()
                raise OSError(f"HTTP {response.status} {response.reason} for {url}")
            return _read_body(connection, response, deadline)  # (http.client closes what will not be kept)
        except FileNotFoundError:
            raise
        except BaseException:
            # A connection that failed half-way has unread bytes or none: never reuse it.
            self._drop(key)
            raise

    def _connection(self, key: tuple[str, str], deadline: float) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection for (scheme, host), and whether it served an earlier request."""
        pool = self._local.__dict__.setdefault("connections", {})
        connection = pool.get(key)
        reused = connection is not None and connection.sock is not None
        if connection is None:
            scheme, host = key
            kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            connection = pool[key] = kind(host)
        connection.timeout = _left(deadline)  # connecting, when it has to (re)connect
        _wait_at_most(connection, deadline)
        return connection, reused

    def _drop(self, key: tuple[str, str]) -> None:
        """Close and forget this thread's connection for (scheme, host)."""
        connection = self._local.__dict__.get("connections", {}).pop(key, None)
        if connection is not None:
            connection.close()


def _range(start: int | None, end: int | None) -> str | None:
    """The Range header for [start, end), as fsspec writes it; None for the whole object."""
    if start is None and end is None:
        return None
    if start is not None and start < 0 and end is None:
        return f"bytes=-{-start}"
    if (start is not None and start < 0) or (end is not None and end < 0):
        raise ValueError("a negative offset needs the object's size, which a GET does not know")
    return f"bytes={start or 0}-{'' if end is None else end - 1}"


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's time ran out")
    return left


def _wait_at_most(connection: http.client.HTTPConnection, deadline: float) -> None:
    if connection.sock is not None:
        connection.sock.settimeout(_left(deadline))


def _send(connection: http.client.HTTPConnection, target: str, headers: dict[str, str],
          deadline: float) -> http.client.HTTPResponse:
    connection.request("GET", target, headers=headers)
    _wait_at_most(connection, deadline)
    return connection.getresponse()


def _read_body(connection: http.client.HTTPConnection, response: http.client.HTTPResponse,
               deadline: float) -> bytes | bytearray:
    """The whole body, read into one buffer when its length is known; the deadline holds throughout."""
    if response.length is None:  # chunked, or until the connection closes
        _wait_at_most(connection, deadline)
        return response.read()
    body = bytearray(response.length)
    view = memoryview(body)
    filled = 0
    try:
        while filled < len(body):
            _wait_at_most(connection, deadline)
            got = response.readinto(view[filled:filled + PIECE])
            if not got:
                raise http.client.IncompleteRead(b"", len(body) - filled)
            filled += got
    except TimeoutError as exc:
        raise TimeoutError(f"the body stopped arriving ({filled} of {len(body)} bytes)") from exc
    finally:
        view.release()
    return body
