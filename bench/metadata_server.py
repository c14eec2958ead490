"""A static HTTP server as public Zarr data is served: no directory listings, a delay before every answer.

Run as a child process by the benchmarks (so its threads do not share the
benchmark's GIL). It serves ROOT on 127.0.0.1 at a free port, prints the port,
answers every directory URL 404 (as object stores and most HTTPS hosts do),
sleeps --latency-ms before each answer, supports single byte ranges, and
counts requests and the most in flight at once; `GET /__stats__` returns and
resets them. It stops by itself after --max-seconds.

    python bench/metadata_server.py ROOT [--latency-ms 20] [--max-seconds 3600]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STATS_PATH = "/__stats__"


class Counters:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = self.in_flight = self.max_in_flight = 0

    def enter(self) -> None:
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def take(self) -> dict[str, int]:
        with self.lock:
            taken = {"requests": self.requests, "max_in_flight": self.max_in_flight}
            self.requests = self.max_in_flight = 0
            return taken


def handler_class(root: Path, latency: float, counters: Counters) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers
        disable_nagle_algorithm = True

        def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
            self.answer(body=False)

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            if self.path == STATS_PATH:
                self.send_bytes(json.dumps(counters.take()).encode())
                return
            self.answer(body=True)

        def answer(self, body: bool) -> None:
            counters.enter()
            try:
                time.sleep(latency)
                path = root / self.path.split("?")[0].lstrip("/")
                if not path.is_file() or root not in path.resolve().parents:
                    self.send_response(HTTPStatus.NOT_FOUND)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = path.read_bytes()
                spec = self.headers.get("Range")
                if spec:
                    first, _, last = spec.removeprefix("bytes=").partition("-")
                    start = int(first) if first else max(0, len(data) - int(last))
                    stop = min(len(data), int(last) + 1) if first and last else len(data)
                    self.send_response(HTTPStatus.PARTIAL_CONTENT)
                    self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
                    data = data[start:stop]
                else:
                    self.send_response(HTTPStatus.OK)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)
            finally:
                counters.leave()

        def send_bytes(self, data: bytes) -> None:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
            return

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    args = parser.parse_args()

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    server = Server(("127.0.0.1", 0), handler_class(args.root.resolve(), args.latency_ms / 1000, Counters()))
    print(server.server_address[1], flush=True)
    threading.Timer(args.max_seconds, lambda: os._exit(0)).start()
    server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
