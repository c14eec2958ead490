"""Chunk reads over plain HTTP(S) without fsspec's event loop.

fsspec's HTTP file system runs every request on one asyncio thread through
aiohttp: each GET crosses to that thread and back, and the loop's Python
(headers, body assembly) is paid on one thread for all requests. Over HTTP
it was most of what zarrfs spent above reading local chunks. Here each
request runs in the thread that asks (http.client, which releases the GIL
while it waits) on a keep-alive connection taken from a shared pool of idle
ones, and reads its body into one buffer. A connection goes back to the pool
only when its answer was read to the end; so there are never more
connections than requests were in flight at once (`Store` bounds that by
`max_concurrency`), whichever threads made them.

Only GETs go through here: `Store` uses it for `cat_file` on a plain http(s)
URL given without storage options, and http_listing.py for that source's
listings and existence checks; every other backend stays with fsspec. The
disk cache (disk_cache.py) asks for validators and revalidates its copies
with conditional GETs (`fetch`): a 304 costs a round trip and no body.

Answers mean what they mean for fsspec's HTTP file system, so `Store`'s
retries treat them alike: 404 and 410 are a missing key
(FileNotFoundError); redirects are followed (up to `MAX_REDIRECTS`), each
one only where the source's trust rule lets it lead (trust.py: the same
origin, or a prefix `--virtual-chunks` authorised; else TargetRefused); any
other status, a reset, a body shorter than its Content-Length
(http.client's IncompleteRead) is an OSError worth another try. A request
gets `timeout` seconds from its first byte sent to its last byte read: each
wait on the socket gets what is left of them.
"""

from __future__ import annotations

import http.client
import mmap
import threading
import time
from collections.abc import Callable, Generator
from typing import NamedTuple
from urllib.parse import quote, urljoin, urlsplit

from ..versions import package_version
from .trust import TrustRule
from .versioned import http_version

MAX_REDIRECTS = 5
# The body is read this much at a time, the deadline checked between pieces.
PIECE = 1 << 20
_HUGE_PAGE = 2 << 20
_MISSING_STATUS = (404, 410)
_REDIRECT_STATUS = (301, 302, 303, 307, 308)
# What tells one version of an object from another, and the request header that asks "changed since?".
VALIDATORS = ("ETag", "Last-Modified")
CONDITIONS = {"ETag": "If-None-Match", "Last-Modified": "If-Modified-Since"}
# Percent-escapes in the URL stay as they are; what would not survive a request line is escaped.
_SAFE = "/%:@!$&'()*+,;=-._~"


class HttpStatusError(OSError):
    """An answer with an error status, other than a missing object's (FileNotFoundError)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class _Opened(NamedTuple):
    """A GET's answer whose body is still to be read, and the pooled connection it came on."""

    key: tuple[str, str]  # (scheme, host:port): the pool it goes back to
    connection: http.client.HTTPConnection
    response: http.client.HTTPResponse


class HttpReader:
    """GETs of whole objects or byte ranges of http(s) URLs on pooled keep-alive connections."""

    def __init__(self, timeout: float, rule: TrustRule | None = None) -> None:
        self.timeout = timeout
        self._rule = rule  # where a redirect may lead (None: anywhere, for tests of the client alone)
        self._user_agent = f"zarrfs/{package_version('zarrfs')}"
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str], list[http.client.HTTPConnection]] = {}  # by (scheme, host:port)

    def cat_file(self, url: str, start: int | None = None, end: int | None = None) -> bytes | bytearray:
        """The object at `url`, or bytes [start, end) of it (a negative `start` with no `end`:
        the last -start bytes), as fsspec's `cat_file` answers."""
        if start is not None and start == end:
            return b""
        return self.page(url, _range(start, end))[0]

    def page(self, url: str, byte_range: str | None = None) -> tuple[bytes | bytearray, str | None]:
        """The body at `url` (redirects followed) and its media type, if the answer named one."""
        body, media_type, _ = self._answer(url, byte_range, {})
        assert body is not None  # (only a conditional GET is answered 304)
        return body, media_type

    def fetch(self, url: str, start: int | None = None, end: int | None = None,
              validators: dict[str, str] | None = None) -> tuple[bytes | bytearray | None, dict[str, str]]:
        """`cat_file`'s bytes and the object's validators (ETag, Last-Modified, as the server sent them).

        With `validators` (of a copy kept earlier) the GET is conditional: a body of None means
        the server answered 304, the copy is still the object's current version.
        """
        conditions = {CONDITIONS[name]: value for name, value in (validators or {}).items() if name in CONDITIONS}
        if start is not None and start == end and not conditions:
            return b"", {}
        body, _, got = self._answer(url, _range(start, end), conditions)
        return body, got

    def pieces(self, url: str, start: int, stop: int, piece: int,
               on_version: Callable[[str | None], None] | None = None) -> Generator[bytearray | memoryview, None, None]:
        """Bytes [start, stop) of `url` from one GET, in pieces of `piece` bytes (the last one shorter, and
        fewer bytes if the object ends first) as its body arrives; each piece gets `timeout` seconds.
        From a server that ignores Range, the whole body comes and the bytes before `start` are dropped.
        `on_version` is told the answer's version (`http_version`) before any of its bytes are read."""
        deadline = time.monotonic() + self.timeout
        opened = self._open(url, _range(start, stop), deadline, {})
        connection, response = opened.connection, opened.response
        try:
            if response.status == 304:  # (asked for no condition: a broken server)
                raise OSError(f"HTTP 304 for an unconditional GET of {url}")
            if on_version is not None:
                on_version(http_version({name: value for name in VALIDATORS if (value := response.getheader(name))}))
            # 206 is the range asked for; 200 the whole object, read from its start.
            at, wanted = (0, start) if response.status == 200 else (start, start)
            while at < stop:
                nbytes = min(piece, stop - at, wanted - at) if at < wanted else min(piece, stop - at)
                body = _read_kept_piece(connection, response, nbytes, time.monotonic() + self.timeout)
                if at >= wanted and body:
                    yield body
                at += len(body)
                if len(body) < nbytes:  # the object ended first
                    break
        except BaseException:  # a failure or a reader that stopped early: the connection has unread bytes
            connection.close()
            raise
        if not response.isclosed():  # the rest of a whole object, not read
            connection.close()
            return
        self._give_back(opened.key, connection, response)

    def _answer(self, url: str, byte_range: str | None, conditions: dict[str, str],
                ) -> tuple[bytes | bytearray | None, str | None, dict[str, str]]:
        """(the body of one GET (None: 304), its media type, its validators)."""
        deadline = time.monotonic() + self.timeout
        opened = self._open(url, byte_range, deadline, conditions)
        connection, response = opened.connection, opened.response
        validators = {name: value for name in VALIDATORS if (value := response.getheader(name))}
        if (date := response.getheader("Date")) and validators:  # the server's clock, for Last-Modified
            validators["Date"] = date
        try:
            if response.status == 304:
                response.read()  # no body to keep
                answer: tuple[bytes | bytearray | None, str | None, dict[str, str]] = None, None, validators
            else:
                media_type = response.getheader("Content-Type")
                answer = _read_body(connection, response, deadline), \
                    media_type.partition(";")[0].strip() if media_type else None, validators
        except BaseException:
            # A connection that failed half-way has unread bytes or none: never reuse it.
            connection.close()
            raise
        self._give_back(opened.key, connection, response)
        return answer

    def _open(self, url: str, byte_range: str | None, deadline: float, conditions: dict[str, str]) -> _Opened:
        """A GET of `url` whose answer (redirects followed) is a success or 304, its body not yet read."""
        for _ in range(MAX_REDIRECTS + 1):
            answer = self._send_get(url, byte_range, deadline, conditions)
            if isinstance(answer, _Opened):
                return answer
            url = urljoin(url, answer)
            if self._rule is not None:
                url = self._rule.check(url, what="redirect to")
        raise OSError(f"more than {MAX_REDIRECTS} redirects from {url}")

    def _send_get(self, url: str, byte_range: str | None, deadline: float, conditions: dict[str, str],
                  ) -> _Opened | str:
        """One GET: its answer with the body unread (a success or 304), or where a redirect points. A
        missing object raises FileNotFoundError, any other error status OSError."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise OSError(f"a redirect to {parts.scheme}: is not followed")
        target = quote(parts.path or "/", safe=_SAFE) + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rpartition("@")[2]  # http.client sends it as the Host header
        headers = {"Accept-Encoding": "identity", "User-Agent": self._user_agent, **conditions}
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
                connection.close()
                connection, _ = self._connection(key, deadline, fresh=True)
                response = _send(connection, target, headers, deadline)
            if response.status not in _REDIRECT_STATUS and response.status < 400:
                return _Opened(key, connection, response)
            response.read()  # no body to keep
            answer: str | Exception
            location = response.getheader("Location")
            if response.status in _REDIRECT_STATUS and location:
                answer = location
            elif response.status in _REDIRECT_STATUS:  # (S3's answer to a request for the wrong region)
                answer = HttpStatusError(f"HTTP {response.status} {response.reason} without a Location for {url}",
                                         response.status)
            elif response.status in _MISSING_STATUS:
                answer = FileNotFoundError(url)
            else:
                answer = HttpStatusError(f"HTTP {response.status} {response.reason} for {url}", response.status)
        except BaseException:
            connection.close()  # unread bytes or none: never reused
            raise
        self._give_back(key, connection, response)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def _connection(self, key: tuple[str, str], deadline: float,
                    fresh: bool = False) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection to (scheme, host) from the pool, else a new one; and whether it served
        an earlier request. The most recently used idle one: the least likely to have been closed."""
        connection = None
        if not fresh:
            with self._lock:
                idle = self._idle.get(key)
                if idle:
                    connection = idle.pop()
        reused = connection is not None
        if connection is None:
            scheme, host = key
            kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            connection = kind(host)
        connection.timeout = _left(deadline)  # connecting, when it has to (re)connect
        _wait_at_most(connection, deadline)
        return connection, reused

    def _give_back(self, key: tuple[str, str], connection: http.client.HTTPConnection,
                   response: http.client.HTTPResponse) -> None:
        """Pool a connection whose answer was read to the end, unless the server will close it."""
        if connection.sock is None or response.will_close:
            connection.close()
            return
        with self._lock:
            self._idle.setdefault(key, []).append(connection)


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


def _read_piece(connection: http.client.HTTPConnection, response: http.client.HTTPResponse, nbytes: int,
                deadline: float) -> bytearray:
    """The next `nbytes` of the body (fewer where the body ends first), by `deadline`."""
    piece = bytearray(nbytes)
    del piece[_read_into(connection, response, piece, deadline):]
    return piece


def _read_kept_piece(connection: http.client.HTTPConnection, response: http.client.HTTPResponse, nbytes: int,
                     deadline: float) -> bytearray | memoryview:
    """`_read_piece` for a piece the mount keeps (a block of an ordinary file, held by the cache), in
    memory of its own asked to be backed by huge pages. Such a piece is fresh memory: faulted in 4 KiB
    at a time, its first touch was about a fifth of the daemon's time reading a file over S3, and the
    kernel's pages come zeroed (no memset). Freed, it goes back to the system at once."""
    if nbytes < _HUGE_PAGE:
        return _read_piece(connection, response, nbytes, deadline)
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # (shared memory would not be huge)
    try:
        region.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # a kernel without transparent huge pages: 4 KiB pages, still no memset
        pass
    return memoryview(region)[:_read_into(connection, response, region, deadline)]


def _read_into(connection: http.client.HTTPConnection, response: http.client.HTTPResponse,
               buffer: bytearray | mmap.mmap, deadline: float) -> int:
    """Fill `buffer` with the body's next bytes (fewer where the body ends first), by `deadline`, read
    `PIECE` bytes at a time with the deadline checked between them; how many it got."""
    nbytes = len(buffer)
    view = memoryview(buffer)
    filled = 0
    try:
        while filled < nbytes:
            _wait_at_most(connection, deadline)
            got = response.readinto(view[filled:filled + PIECE])
            if not got:  # the body's end; before its Content-Length, the connection was lost
                if response.length:
                    raise http.client.IncompleteRead(b"", response.length)
                break
            filled += got
    except TimeoutError as exc:
        raise TimeoutError(f"the body stopped arriving ({filled} of {nbytes} bytes)") from exc
    finally:
        view.release()
    return filled


def _read_body(connection: http.client.HTTPConnection, response: http.client.HTTPResponse,
               deadline: float) -> bytes | bytearray:
    """The whole body, read into one buffer when its length is known; the deadline holds throughout."""
    if response.length is None:  # chunked, or until the connection closes
        _wait_at_most(connection, deadline)
        return response.read()
    return _read_piece(connection, response, response.length, deadline)
