"""Servers for the remote-store tests, all on 127.0.0.1 and stopped by the test that starts them.

- `http_server(root)`: a threaded static file server with single-range support
  (as object stores answer), counting requests per path.
- `stalling_server(root, pattern)`: a static server (with listings) that holds
  back the requests whose path matches.
- `FaultProxy`: an HTTP proxy in front of an upstream that injects latency,
  503s, connection resets, truncated or corrupted bodies, stalls, and can
  disappear (refuse connections) and come back on the same port.
- `s3_server()`: moto's standalone S3 server in a subprocess (as s3fs's own
  tests do), with helpers to upload a directory into a bucket.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO

from oracles import ORACLES, HierarchyOracle, Oracle, write_hierarchy
from clients import end_process
from mountutil import Mount

STALL_LIMIT_S = 30.0  # a stalled answer never holds a server thread longer than this
# How often a serving thread looks for `shutdown()`: socketserver's default of 0.5 s is
# what stopping every test's server would cost, for nothing.
POLL_S = 0.01


class BackloggedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stalled handler must not keep the test process alive
    # socketserver's backlog of 5 drops SYNs when zarrfs opens many connections
    # at once, and each dropped one costs a 1 s retransmit: slow, and flaky
    # against the short timeouts the fault tests use.
    request_queue_size = 1024


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[socketserver.BaseServer]:
    """`server` answering from a daemon thread; stopped, closed and its thread joined on the way out."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Server(BackloggedHTTPServer):
    allow_reuse_address = True

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        with self._connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: socket.socket) -> None:  # type: ignore[override]
        with self._connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Cut every open (kept-alive) connection, as a server that goes away does."""
        with self._connections_lock:
            for connection in self.connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up (zarrfs cancelled a stalled request) is not an error worth a traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def remote_mount(tmp: Path, url: str, *args: str, expected_log: tuple[str, ...] = (), name: str = "mnt") -> Mount:
    """A not yet started mount of a URL (mountutil.mount_in would turn the URL into a Path, eating '//')."""
    return Mount(url, tmp / name, tmp / f"{name}.log", args, expected_log)  # type: ignore[arg-type]


# ------------------------------------------------------------ static server


class RangeHandler(SimpleHTTPRequestHandler):
    """Static files with `Range: bytes=a-b`, `a-` and `-n` (RFC 9110), requests counted per path."""

    counter: Counter  # set per server class
    disable_nagle_algorithm = True  # see _FaultHandler

    def send_head(self) -> BinaryIO | None:
        self.counter[self.path] += 1
        spec = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if not spec or not path.is_file():
            return super().send_head()
        size = path.stat().st_size
        first, _, last = spec.removeprefix("bytes=").partition("-")
        if first:
            start, stop = int(first), min(size, int(last) + 1 if last else size)
        else:
            start, stop = max(0, size - int(last)), size
        if start >= size:
            self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            return None
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(stop - start)
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        return None

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        return


@dataclass
class HttpServer:
    url: str
    counter: Counter

    @property
    def requests(self) -> int:
        return sum(self.counter.values())


@contextmanager
def http_server(root: Path, handler_class: type[RangeHandler] = RangeHandler) -> Iterator[HttpServer]:
    counter: Counter = Counter()
    handler = type("CountingHandler", (handler_class,), {"counter": counter})
    with serving(_Server(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(root)))) as server:
        yield HttpServer(f"http://127.0.0.1:{server.server_address[1]}", counter)


class EtagHandler(RangeHandler):
    """Static files with an ETag on every answer: the file's identity, which a rewrite changes."""

    def end_headers(self) -> None:
        path = Path(self.translate_path(self.path))
        if path.is_file():
            status = path.stat()
            self.send_header("ETag", f'"{status.st_ino:x}-{status.st_size:x}-{status.st_mtime_ns:x}"')
        super().end_headers()


@contextmanager
def http_server_process(root: Path, handler: str = "RangeHandler") -> Iterator[str]:
    """`root` served from another process by the handler class of this module named `handler`; its URL.
    For a test whose own process also writes the store or reads the mount: nothing the test process
    does (its threads, its locks, a read it waits on) can hold up the server's answers."""
    port_file = root.parent / f".http-port-{os.getpid()}-{threading.get_ident()}"
    port_file.unlink(missing_ok=True)
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(root), str(port_file), handler],
                               stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server process did not start (exit {process.poll()})")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port_file.read_text()}"
    finally:
        end_process(process)
        port_file.unlink(missing_ok=True)


def _serve_in_this_process(root: str, port_file: str, handler_name: str) -> None:
    handler_class = globals()[handler_name]
    handler = type("CountingHandler", (handler_class,), {"counter": Counter()})
    server = _Server(("127.0.0.1", 0), lambda *a: handler(*a, directory=root))
    written = Path(port_file + ".part")
    written.write_text(str(server.server_address[1]))
    written.rename(port_file)  # whole, or not there
    server.serve_forever(poll_interval=POLL_S)


# ---------------------------------------------------------- stalling server


class _StallingHandler(SimpleHTTPRequestHandler):
    """Static files with index-page listings; a request whose path matches `stall` gets no answer
    until the server is released (STALL_LIMIT_S at most), as a store that hangs on some objects."""

    server: StallingServer  # type: ignore[assignment]

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.server.stall.search(self.path):
            self.server.stalled.append(self.path)
            self.server.released.wait(STALL_LIMIT_S)
        try:
            super().do_GET()
        except ConnectionError:
            pass  # the daemon that asked is gone

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        return


class StallingServer(_Server):
    def __init__(self, root: Path, stall: str) -> None:
        super().__init__(("127.0.0.1", 0), lambda *a: _StallingHandler(*a, directory=str(root)))
        self.stall = re.compile(stall)
        self.stalled: list[str] = []  # paths held back so far
        self.released = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def stalling_server(root: Path, stall: str) -> Iterator[StallingServer]:
    """`root` served on 127.0.0.1, requests matching the regular expression `stall` held back."""
    server = StallingServer(root, stall)
    with serving(server):
        try:
            yield server
        finally:
            server.released.set()


# -------------------------------------------------------------- fault proxy


FAULTS = ("latency", "503", "403", "reset", "truncate", "short", "corrupt", "stall", "pause")


@dataclass
class Rule:
    fault: str
    match: re.Pattern[str]
    times: int | None  # None: every matching request
    seconds: float = 0.0  # latency / stall duration
    nbytes: int = 0  # pause: the body's bytes sent before it


@dataclass
class FaultProxy:
    """Forwards GET/HEAD to `upstream`, applying the first rule that matches each request's path.

    Faults: latency (sleep, then answer), 503 and 403 (no upstream call), reset (RST
    without an answer), truncate (full Content-Length, half the body, then
    close), short (half the body with a matching Content-Length: a body cut
    by a broken proxy, detectable only by length or codec), corrupt (bytes
    flipped, length kept), stall (headers, then nothing until `seconds` pass),
    pause (the first `nbytes` of the body, then the rest once `resume()`
    is called; `paused` is set while it waits). `down()` closes the listening socket (connections are refused), `up()`
    listens again on the same port. `targets` keeps each request's target (path and query), in order.
    """

    upstream: str  # host:port
    port: int = 0
    rules: list[Rule] = field(default_factory=list)
    faults_applied: Counter = field(default_factory=Counter)
    targets: list[str] = field(default_factory=list)
    _server: _Server | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)
    _resumed: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def resume(self) -> None:
        """Let a paused answer send the rest of its body."""
        self._resumed.set()

    def inject(self, fault: str, match: str = ".", times: int | None = None, seconds: float = 0.0,
               first: bool = False, nbytes: int = 0) -> None:
        """Add a rule after the others, or before them with `first` (ahead of a standing latency rule)."""
        assert fault in FAULTS, fault
        with self._lock:
            self.rules.insert(0 if first else len(self.rules),
                              Rule(fault, re.compile(match), times, seconds, nbytes))

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def pick(self, path: str) -> Rule | None:
        with self._lock:
            self.targets.append(path)
            for rule in self.rules:
                if rule.match.search(path) and (rule.times is None or rule.times > 0):
                    if rule.times is not None:
                        rule.times -= 1
                    self.faults_applied[rule.fault] += 1
                    return rule
        return None

    def up(self) -> None:
        proxy = self
        handler = type("FaultHandler", (_FaultHandler,), {"proxy": proxy})
        self._server = _Server(("127.0.0.1", self.port), handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": POLL_S},
                                        daemon=True)
        self._thread.start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.drop_connections()
            assert self._thread is not None
            self._thread.join(timeout=10)
            self._server = None

    def close(self) -> None:
        self._stop.set()  # releases stalled handlers
        self._resumed.set()  # and paused ones
        self.down()


class _FaultHandler(BaseHTTPRequestHandler):
    proxy: FaultProxy
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes: with Nagle's algorithm every answer on a kept-alive
    # connection would wait for the client's delayed ACK (40 ms), as object stores' answers do not.
    disable_nagle_algorithm = True

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib naming
        self._forward()

    def do_GET(self) -> None:  # noqa: N802
        self._forward()

    def _forward(self) -> None:
        rule = self.proxy.pick(self.path)
        fault = rule.fault if rule else None
        if fault == "latency":
            time.sleep(rule.seconds)
        if fault in ("503", "403"):
            self.send_response(HTTPStatus.SERVICE_UNAVAILABLE if fault == "503" else HTTPStatus.FORBIDDEN)
            self.send_header("Content-Length", "0")
            if fault == "503":
                self.send_header("Retry-After", "0")
            self.end_headers()
            return
        if fault == "reset":
            # SO_LINGER 0: close() sends RST instead of FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        status, headers, body = self._upstream()
        if fault == "stall":
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.flush()
            self.proxy._stop.wait(min(rule.seconds, STALL_LIMIT_S))
            self.close_connection = True
            return
        if fault == "short":
            body = body[: len(body) // 2]
            headers = [(k, str(len(body)) if k.lower() == "content-length" else v) for k, v in headers]
        if fault == "corrupt" and body:
            middle = len(body) // 2
            body = body[:middle] + bytes(b ^ 0x5A for b in body[middle:middle + 16]) + body[middle + 16:]
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        if fault == "pause":
            self.wfile.write(body[:rule.nbytes])
            self.wfile.flush()
            self.proxy.paused.set()
            self.proxy._resumed.wait(STALL_LIMIT_S)
            self.wfile.write(body[rule.nbytes:])
            return
        if fault == "truncate":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def _upstream(self) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.proxy.upstream, timeout=30)
        try:
            # An S3 client's signature and its x-amz- headers go on too: moto answers an unsigned GET of a
            # private bucket 403, as S3 does.
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() in ("range", "accept-encoding", "authorization") or k.lower().startswith("x-amz-")}
            conn.request(self.command, self.path, headers=headers)
            response = conn.getresponse()
            body = response.read()
            kept = [(k, v) for k, v in response.getheaders()
                    if k.lower() in ("content-type", "content-range", "content-length", "location")]
            if not any(k.lower() == "content-length" for k, _ in kept):
                kept.append(("Content-Length", str(len(body))))
            return response.status, kept, body
        finally:
            conn.close()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


@contextmanager
def fault_proxy(upstream_url: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream_url.removeprefix("http://"))
    proxy.up()
    try:
        yield proxy
    finally:
        proxy.close()


# ---------------------------------------------------------------- S3 (moto)


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    process: subprocess.Popen

    def client(self):  # noqa: ANN201 - boto3 has no public type here
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def upload(self, bucket: str, directory: Path, prefix: str) -> None:
        """Put every file under `directory` at `prefix/<relative path>` in `bucket`."""
        client = self.client()
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                client.put_object(Bucket=bucket, Key=f"{prefix}/{path.relative_to(directory).as_posix()}",
                                  Body=path.read_bytes())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """moto_server on 127.0.0.1 in a subprocess; terminated (and reaped) on the way out."""
    port = _free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        yield S3Server(endpoint, process)
    finally:
        end_process(process)


def write_sources(root: Path, arrays: list[str], hierarchies: list[str],
                  ) -> tuple[dict[str, Oracle], dict[str, HierarchyOracle]]:
    """Oracle arrays and hierarchies ('h2', 'h3c': version, c = consolidated) under `root`, one folder each."""
    written_arrays = {}
    for name in arrays:
        (root / name).mkdir()
        written_arrays[name] = ORACLES[name](root / name)
    written_hierarchies = {}
    for label in hierarchies:
        (root / label).mkdir()
        written_hierarchies[label] = write_hierarchy(root / label, int(label[1]), consolidated=label.endswith("c"))
    return written_arrays, written_hierarchies


if __name__ == "__main__":  # http_server_process's child: remoteutil.py --serve ROOT PORT_FILE HANDLER
    _serve_in_this_process(*sys.argv[2:5])
