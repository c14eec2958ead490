"""Remote benchmark: the engine benchmark's stores over HTTP with 20 ms added to every request.

One HTTP server (a child process on 127.0.0.1: threaded, Range support,
sendfile, a sleep before every answer; it stops by itself after --max-seconds
or when this script exits) serves the stores. In the same run, interleaved,
medians of --repeat runs:
  zarrfs       `dd bs=1M` of the mounted `.raw` (fresh mount: cold daemon cache)
  zarr-python  `z[:]` over fsspec HTTP (fresh process)
  tensorstore  `read()` over its HTTP kvstore (fresh process)
and, to show the HTTP client's share, an HTTP client alone fetching every
stored object 32 at a time with nothing decoded: zarrfs's own (stores/http.py,
what its plain http(s) reads use) and fsspec's (what zarr-python uses, and
zarrfs for every other remote source).
The server counts what each peer asked for: requests, most in flight at once,
bytes sent (against the store's bytes on disk). CPU seconds of each read: the
zarrfs daemon's plus dd's, the peer process's (the server's are not counted).
Every timed run starts on recently used memory (bench_data.recent_memory), so a
peer that allocates its 1 GiB result is not handicapped by this VM's slow
first touch of fresh memory.

    python bench/bench_remote.py [--repeat 3] [--stores blosc-lz4,sharded-zstd] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import SHAPE, ensure_store, recent_memory, stored_bytes, warm_page_cache  # noqa: E402
from bench_mount import dd_with_cpu, mounted, stats  # noqa: E402

HERE = Path(__file__).resolve().parent
NBYTES = math.prod(SHAPE) * 4
PEERS = ("zarrfs", "zarr-python", "tensorstore")
FETCH_CLIENTS = ("zarrfs", "fsspec")  # HTTP clients timed alone, nothing decoded
STATS_PATH = "/__bench_stats__"


# ------------------------------------------------------------------ server


class LatencyHandler(SimpleHTTPRequestHandler):
    """Static files, single ranges, `latency` seconds before each answer; counts in `server.counts`."""

    protocol_version = "HTTP/1.1"  # keep-alive, as object stores

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path.startswith(STATS_PATH):
            self._stats()
            return
        self._serve(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(body=False)

    def _stats(self) -> None:
        counts = self.server.counts  # type: ignore[attr-defined]
        with counts["lock"]:
            payload = json.dumps({k: v for k, v in counts.items() if k != "lock"}).encode()
            if self.path.endswith("reset"):
                counts.update(requests=0, max_in_flight=0, bytes_sent=0)
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _serve(self, body: bool) -> None:
        counts = self.server.counts  # type: ignore[attr-defined]
        with counts["lock"]:
            counts["requests"] += 1
            counts["in_flight"] += 1
            counts["max_in_flight"] = max(counts["max_in_flight"], counts["in_flight"])
        try:
            time.sleep(self.server.latency)  # type: ignore[attr-defined]
            sent = self._send_file(body)
            with counts["lock"]:
                counts["bytes_sent"] += sent
        finally:
            with counts["lock"]:
                counts["in_flight"] -= 1

    def _send_file(self, body: bool) -> int:
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return 0
        size = path.stat().st_size
        start, stop, status = 0, size, HTTPStatus.OK
        spec = self.headers.get("Range")
        if spec:
            first, _, last = spec.removeprefix("bytes=").partition("-")
            if first:
                start, stop = int(first), min(size, int(last) + 1 if last else size)
            else:
                start = max(0, size - int(last))
            if start >= size:
                self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                return 0
            status = HTTPStatus.PARTIAL_CONTENT
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(stop - start))
        if status == HTTPStatus.PARTIAL_CONTENT:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.end_headers()
        if not body:
            return 0
        self.wfile.flush()
        with open(path, "rb") as f:
            sent = 0
            while sent < stop - start:  # zero-copy from the page cache
                sent += os.sendfile(self.connection.fileno(), f.fileno(), start + sent, stop - start - sent)
        return sent

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


class BackloggedHTTPServer(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: a peer opening 30 connections at
    # once had SYNs dropped (TcpExtListenOverflows rose) and those requests
    # stalled for the 1 s SYN retransmit timeout. Servers in the field queue
    # hundreds (nginx: 511).
    request_queue_size = 1024


def serve(root: Path, port_file: Path, latency: float, max_seconds: float, parent: int) -> None:
    server = BackloggedHTTPServer(("127.0.0.1", 0), lambda *a: LatencyHandler(*a, directory=str(root)))
    server.daemon_threads = True
    server.latency = latency  # type: ignore[attr-defined]
    server.counts = {"lock": threading.Lock(), "requests": 0, "in_flight": 0,  # type: ignore[attr-defined]
                     "max_in_flight": 0, "bytes_sent": 0}

    def watchdog() -> None:  # bounded: stop after max_seconds or once the benchmark is gone
        deadline = time.monotonic() + max_seconds
        while time.monotonic() < deadline and os.getppid() == parent:
            time.sleep(0.5)
        server.shutdown()

    threading.Thread(target=watchdog, daemon=True).start()
    port_file.write_text(str(server.server_address[1]))
    server.serve_forever()
    server.server_close()


class Server:
    """The server child process: started, queried for counts, stopped."""

    def __init__(self, root: Path, latency: float, max_seconds: float, work: Path, script: str = __file__) -> None:
        # `script`: the benchmark whose `--serve` runs the server (one that serves with its own handler).
        port_file = work / "port"
        self.process = subprocess.Popen(
            [sys.executable, script, "--serve", str(root), str(port_file), str(latency), str(max_seconds),
             str(os.getpid())], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark HTTP server did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text()}"

    def counts(self, reset: bool = False) -> dict:
        with urllib.request.urlopen(self.url + STATS_PATH + ("/reset" if reset else ""), timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ------------------------------------------------------------------- peers


def run_zarr_python(url: str) -> dict:
    import zarr

    array = zarr.open_array(url, mode="r")
    start, cpu = time.perf_counter(), time.process_time()
    data = array[:]
    return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
            "checksum": float(data[::4096, 0].sum())}


def run_tensorstore(url: str) -> dict:
    import tensorstore as ts

    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "http", "base_url": url}}).result()
    start, cpu = time.perf_counter(), time.process_time()
    data = store.read().result()
    return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
            "checksum": float(data[::4096, 0].sum())}


def run_fetch_only(url: str, client: str) -> dict:
    """An HTTP client alone fetching every object of the store, 32 at a time, nothing decoded."""
    local = ensure_store(url.rstrip("/").rsplit("/", 1)[1].removesuffix(".zarr"))
    urls = [f"{url}/{p.relative_to(local)}" for p in sorted(local.rglob("*")) if p.is_file()]
    start, cpu = time.perf_counter(), time.process_time()
    if client == "fsspec":
        import fsspec

        bodies = list(fsspec.filesystem("http").cat(urls, batch_size=32).values())  # zarrfs's default --max-concurrency
    else:
        from concurrent.futures import ThreadPoolExecutor

        from zarrfs.stores.http import HttpReader

        reader = HttpReader(timeout=60)
        with ThreadPoolExecutor(32) as pool:
            bodies = list(pool.map(reader.cat_file, urls))
    return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
            "bytes": sum(len(body) for body in bodies)}


def measure_process(peer: str, url: str) -> tuple[float, float]:
    """Seconds and CPU seconds of the peer's read, in a fresh process on recently used memory."""
    recent_memory()
    out = subprocess.run([sys.executable, __file__, "--one", peer, url], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["seconds"], result["cpu"]


def measure_zarrfs(url: str, store: str, work: Path, cache_size: str) -> tuple[float, float, dict]:
    """Seconds and CPU seconds (daemon and dd) of a cold `dd`, and the mount's store counters."""
    mountpoint = work / "mnt"
    command = [sys.executable, "-m", "zarrfs", "mount", "--foreground", "--cache-size", cache_size, url,
               str(mountpoint)]
    with mounted(command, mountpoint) as pid:
        recent_memory()
        seconds, cpu = dd_with_cpu(mountpoint / f"{store}.raw", pid)
        return seconds, cpu, stats(mountpoint)["store"]


def run_store(store: str, server: Server, work: Path, repeat: int, cache_size: str) -> dict:
    path = ensure_store(store)
    url = f"{server.url}/{path.name}"
    stored = stored_bytes(path)
    seconds: dict[str, list[float]] = {p: [] for p in PEERS}
    cpu: dict[str, list[float]] = {p: [] for p in PEERS}
    seen: dict[str, list[dict]] = {p: [] for p in PEERS}
    ours: list[dict] = []
    for _ in range(repeat):
        for peer in PEERS:
            warm_page_cache(path)
            server.counts(reset=True)
            if peer == "zarrfs":
                took, spent, store_stats = measure_zarrfs(url, store, work, cache_size)
                ours.append(store_stats)
            else:
                took, spent = measure_process(peer, url)
            seconds[peer].append(took)
            cpu[peer].append(spent)
            seen[peer].append(server.counts())
    fetch_only = {client: [measure_process(f"fetch-{client}", url) for _ in range(repeat)]
                  for client in FETCH_CLIENTS}
    gbps = {p: NBYTES / 1e9 / statistics.median(v) for p, v in seconds.items()}
    # The median of each round's own ratio (its peers ran within a minute of each other) follows the
    # host's drift less than the ratio of medians; both are printed.
    paired = {p: statistics.median(theirs / mine for theirs, mine in zip(seconds[p], seconds["zarrfs"], strict=True))
              for p in PEERS if p != "zarrfs"}
    med = {p: {k: statistics.median(c[k] for c in seen[p]) for k in ("requests", "max_in_flight", "bytes_sent")}
           for p in PEERS}
    return {"gbps": gbps, "paired": paired, "server": med, "stored": stored, "cpu": {p: statistics.median(v) for p, v in cpu.items()},
            "fetch_only": {client: tuple(statistics.median(run[i] for run in runs) for i in (0, 1))
                           for client, runs in fetch_only.items()},
            "zarrfs_max_in_flight": statistics.median(s["max_in_flight"] for s in ours),
            "zarrfs_bytes_fetched": statistics.median(s["bytes_fetched"] for s in ours)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="blosc-lz4,sharded-zstd")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--cache-size", default="512M")
    parser.add_argument("--max-seconds", type=float, default=3600, help="the server stops by itself after this")
    parser.add_argument("--one", nargs=2, metavar=("PEER", "URL"), help=argparse.SUPPRESS)
    parser.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        root, port_file, latency, max_seconds, parent = args.serve
        serve(Path(root), Path(port_file), float(latency), float(max_seconds), int(parent))
        return
    if args.one:
        peer, url = args.one
        runs = {"zarr-python": run_zarr_python, "tensorstore": run_tensorstore,
                **{f"fetch-{client}": functools.partial(run_fetch_only, client=client) for client in FETCH_CLIENTS}}
        print(json.dumps(runs[peer](url)))
        return
    stores = args.stores.split(",")
    root = ensure_store(stores[0]).parent
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-remote-") as tmp:
        server = Server(root, args.latency_ms / 1000, args.max_seconds, Path(tmp))
        try:
            print(f"HTTP, {args.latency_ms:g} ms per request; GB/s of the 1 GiB array, medians of {args.repeat}; "
                  "requests / max in flight / bytes sent as the server counted them; vs a peer: the ratio of medians, "
                  "then the median of each round's ratio")
            print("| store | zarrfs | zarr-python | tensorstore | vs zarr-python | vs tensorstore | "
                  "requests zarrfs / zp3 / ts | max in flight zarrfs / zp3 / ts | fetched/stored zarrfs / zp3 / ts | "
                  "CPU-s zarrfs / zp3 / ts |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for store in stores:
                r = run_store(store, server, Path(tmp), args.repeat, args.cache_size)
                g, s = r["gbps"], r["server"]
                requests = " / ".join(f"{s[p]['requests']:.0f}" for p in PEERS)
                in_flight = " / ".join(f"{s[p]['max_in_flight']:.0f}" for p in PEERS)
                ratio = " / ".join(f"{s[p]['bytes_sent'] / r['stored']:.3f}" for p in PEERS)
                spent = " / ".join(f"{r['cpu'][p]:.2f}" for p in PEERS)
                print(f"| {store} | {g['zarrfs']:.2f} | {g['zarr-python']:.2f} | {g['tensorstore']:.2f} | "
                      f"{g['zarrfs'] / g['zarr-python']:.2f}x ({r['paired']['zarr-python']:.2f}x) | "
                      f"{g['zarrfs'] / g['tensorstore']:.2f}x ({r['paired']['tensorstore']:.2f}x) | "
                      f"{requests} | {in_flight} | {ratio} | {spent} |", flush=True)
                print(f"  zarrfs's own counters: max in flight {r['zarrfs_max_in_flight']:.0f}, "
                      f"bytes fetched / stored {r['zarrfs_bytes_fetched'] / r['stored']:.3f}", flush=True)
                for client, (took, spent) in r["fetch_only"].items():
                    print(f"  {client}'s HTTP client alone, every stored object 32 at a time, nothing decoded: "
                          f"{took:.2f} s, {spent:.2f} CPU-s", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
