"""Disk cache benchmark (`--disk-cache DIR`): remote stores read at local speed after a remount.

The 1 GiB anchor stores (bench_data.py) served over HTTP with 20 ms before
every answer (bench_remote.py's server, its sockets with TCP_NODELAY as an
object store's are). Paired, alternating runs, medians and spread:
  cold   `dd bs=1M` of the mounted `.raw`, fresh mount, empty DIR
  warm   the same after a remount on the DIR the cold run filled
  local  the same store mounted from local disk (its files page-cached, as
         the warm run's DIR is)
and the requests the server answered for data (not metadata documents).
Then:
  peek   the first bytes of 50 `.npy` files of a consolidated v2 hierarchy of
         200 small arrays, one after another, on a fresh mount, against
         zarr-python reading the first element of the same 50 arrays
         (fresh process); requests per peer;
  remount  --runs times: a cold `dd` of the whole `.raw` on an empty DIR, unmount, then two
         remounts, one reading with `dd` again, one every MiB once in a random order: every
         request each warm mount made (metadata included), against the bound of
         REMOUNT_REQUESTS, with temporary files left in DIR after the cold unmount;
  kill   kill -9 of the daemon 1 s into a cold read, a remount on the same
         DIR, the whole file read and compared; every entry left in DIR checked;
  share  two daemons (two mounts of the store) sharing one DIR capped at
         --share-cap, both reading the file twice at once with random preads
         between; wrong bytes against the local mount; DIR's size sampled
         every 50 ms against the cap.

    python bench/bench_disk_cache.py [--repeat 3] [--runs 10] [--stores blosc-lz4,sharded-zstd]
                                     [--parts speed,remount,peek,kill,share]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_remote  # noqa: E402
from bench_data import DEFAULT_ROOT, ensure_store, recent_memory, warm_page_cache  # noqa: E402
from bench_mount import dd_with_cpu, mounted, stats  # noqa: E402

ZARRFS = [sys.executable, "-m", "zarrfs", "mount", "--foreground"]
METADATA_NAMES = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")
PEEK_STORE = "peek-v2-200.zarr"
PEEKS = 50
MAX_ASKED = 100  # requests the server lists by path (`remount` prints those of each warm run)
REMOUNT_REQUESTS = 5  # the most store requests a remount after a full cold read may make (issue 41)


# ------------------------------------------------------------------ server


class Handler(bench_remote.LatencyHandler):
    """bench_remote's handler with TCP_NODELAY, and data requests counted apart from metadata ones.

    Without TCP_NODELAY the stdlib server's two writes per answer (headers, then the body) wait
    for the client's delayed ACK: ~40 ms more per request on a kept-alive connection, which no
    object store adds.
    """

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _serve(self, body: bool) -> None:
        counts = self.server.counts  # type: ignore[attr-defined]
        with counts["lock"]:
            if not self.path.rstrip("/").endswith(METADATA_NAMES):
                counts["data_requests"] = counts.get("data_requests", 0) + 1
            asked = counts.setdefault("asked", [])
            if len(asked) < MAX_ASKED:
                asked.append(f"{self.command} {self.path} {self.headers.get('Range') or ''}".strip())
        super()._serve(body)

    def _stats(self) -> None:
        counts = self.server.counts  # type: ignore[attr-defined]
        if self.path.endswith("reset"):
            with counts["lock"]:
                counts["data_requests"] = 0
                counts["asked"] = []
        super()._stats()


def serve(root: Path, port_file: Path, latency: float, max_seconds: float, parent: int) -> None:
    bench_remote.LatencyHandler = Handler  # the handler bench_remote.serve builds
    bench_remote.serve(root, port_file, latency, max_seconds, parent)


# ----------------------------------------------------------------- helpers


def dir_bytes(directory: Path) -> int:
    """Bytes the files under `directory` occupy on disk (blocks)."""
    total = 0
    for folder, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def check_entries(directory: Path) -> tuple[int, int, int]:
    """(entries, entries failing their checks, temporary files) in a disk cache DIR."""
    from zarrfs.stores.disk_cache import entry_is_whole

    entries = bad = temporary = 0
    for folder, _, files in os.walk(directory / "v1"):
        for name in files:
            if folder.endswith("/tmp"):
                temporary += 1
            elif name != "evict.lock":
                entries += 1
                bad += not entry_is_whole(Path(folder) / name)
    return entries, bad, temporary


def md5_of(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


# ------------------------------------------------------------- the parts


def run_cold_warm(store: str, server: bench_remote.Server, work: Path, repeat: int) -> None:
    path = ensure_store(store)
    url = f"{server.url}/{path.name}"
    runs: dict[str, list[float]] = {"cold": [], "warm": [], "local": []}
    data_requests: dict[str, list[int]] = {"cold": [], "warm": []}
    ratios: list[float] = []
    cache_stats = {}
    for index in range(repeat):
        cache = work / f"dc-{store}-{index}"
        order = ["cold", "warm", "local"] if index % 2 == 0 else ["local", "cold", "warm"]
        for kind in order:
            warm_page_cache(path)
            source = str(path) if kind == "local" else url
            extra = [] if kind == "local" else ["--disk-cache", str(cache), "--disk-cache-size", "4G"]
            mountpoint = work / "mnt"
            server.counts(reset=True)
            with mounted([*ZARRFS, *extra, source, str(mountpoint)], mountpoint) as pid:
                recent_memory()
                seconds, _ = dd_with_cpu(mountpoint / f"{store}.raw", pid)
                if kind == "warm":
                    cache_stats = stats(mountpoint)["store"]["disk_cache"]
            runs[kind].append(1.0737 / seconds)
            if kind != "local":
                data_requests[kind].append(server.counts().get("data_requests", 0))
        ratios.append(runs["warm"][-1] / runs["local"][-1])
    print(f"| {store} | {spread(runs['cold'])} | {spread(runs['warm'])} | {spread(runs['local'])} | "
          f"{spread(ratios)}x | {statistics.median(data_requests['cold']):.0f} / "
          f"{max(data_requests['warm'])} | {dir_bytes(work / f'dc-{store}-0') / 2**20:.0f} MiB |", flush=True)
    print(f"  warm disk cache counters: {json.dumps(cache_stats)}", flush=True)


def read_shuffled(path: Path, block: int = 1 << 20, seed: int = 0) -> None:
    """Every `block` of `path` once, in a random order (loads batched unlike a sequential read's)."""
    offsets = list(range(0, path.stat().st_size, block))
    random.Random(seed).shuffle(offsets)
    with open(path, "rb", buffering=0) as f:
        for offset in offsets:
            os.pread(f.fileno(), block, offset)


def run_remount(store: str, server: bench_remote.Server, work: Path, runs: int) -> None:
    path = ensure_store(store)
    url = f"{server.url}/{path.name}"
    mountpoint = work / "mnt"
    totals: dict[str, list[int]] = {"dd": [], "shuffled": []}
    for index in range(runs):
        cache = work / f"dc-remount-{store}-{index}"
        command = [*ZARRFS, "--disk-cache", str(cache), "--disk-cache-size", "4G", url, str(mountpoint)]
        raw = mountpoint / f"{store}.raw"
        with mounted(command, mountpoint):
            subprocess.run(["dd", f"if={raw}", "of=/dev/null", "bs=1M"], capture_output=True, check=True)
            cold = stats(mountpoint)["store"]["disk_cache"]
        entries, bad, temporary = check_entries(cache)
        print(f"  {store} run {index + 1}: cold dd: not stored {cold['not_stored']}, write errors "
              f"{cold['write_errors']}, {entries} entries ({bad} failing), {temporary} temporary files after "
              "unmount", flush=True)
        for pattern in totals:
            server.counts(reset=True)
            with mounted(command, mountpoint):
                if pattern == "dd":
                    subprocess.run(["dd", f"if={raw}", "of=/dev/null", "bs=1M"], capture_output=True, check=True)
                else:
                    read_shuffled(raw, seed=index)
                warm = stats(mountpoint)["store"]["disk_cache"]
            counts = server.counts()
            totals[pattern].append(counts["requests"])
            print(f"    remount, {pattern} read: {counts['requests']} requests ({counts['data_requests']} data); "
                  f"hits {warm['hits']}, misses {warm['misses']}, revalidated {warm['revalidated']}, refetched "
                  f"{warm['refetched']}" + (f"; asked {counts['asked']}" if counts["requests"] > REMOUNT_REQUESTS
                                            else ""), flush=True)
    for pattern, values in totals.items():
        print(f"remount after a full cold dd of {store}, then a {pattern} read: requests per run {values}, max "
              f"{max(values)} (bound {REMOUNT_REQUESTS}: {'met' if max(values) <= REMOUNT_REQUESTS else 'NOT MET'})",
              flush=True)


def ensure_peek_store(root: Path = DEFAULT_ROOT) -> Path:
    import numpy as np
    import zarr

    path = root / PEEK_STORE
    if (path / ".complete").exists():
        return path
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    for i in range(200):
        array = group.create_array(f"a{i:03d}", shape=(64, 64), chunks=(32, 32), dtype="f4")
        array[:] = np.arange(64 * 64, dtype="f4").reshape(64, 64) + i
    zarr.consolidate_metadata(str(path))
    (path / ".complete").write_text("ok\n")
    return path


def peek_zarr_python(url: str) -> dict:
    import zarr

    group = zarr.open_consolidated(url, mode="r", zarr_format=2)
    start = time.perf_counter()
    first = [float(group[f"a{i:03d}"][0, 0]) for i in range(PEEKS)]
    return {"seconds": time.perf_counter() - start, "sum": sum(first)}


def run_peek(server: bench_remote.Server, work: Path, repeat: int) -> None:
    ensure_peek_store()
    url = f"{server.url}/{PEEK_STORE}"
    seconds: dict[str, list[float]] = {"zarrfs": [], "zarr-python": []}
    requests: dict[str, list[int]] = {"zarrfs": [], "zarr-python": []}
    for index in range(repeat):
        for peer in (["zarrfs", "zarr-python"] if index % 2 == 0 else ["zarr-python", "zarrfs"]):
            server.counts(reset=True)
            if peer == "zarr-python":
                out = subprocess.run([sys.executable, __file__, "--peek", url], capture_output=True, text=True,
                                     check=True)
                took = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
            else:
                mountpoint = work / "mnt"
                with mounted([*ZARRFS, url, str(mountpoint)], mountpoint):
                    start = time.perf_counter()
                    for i in range(PEEKS):
                        with open(mountpoint / f"a{i:03d}.npy", "rb") as f:
                            f.read(256)
                    took = time.perf_counter() - start
            seconds[peer].append(took)
            requests[peer].append(server.counts()["requests"])
    ratios = [z / p for z, p in zip(seconds["zarrfs"], seconds["zarr-python"])]
    print(f"peek {PEEKS} arrays one after another (20 ms per request), seconds after opening the hierarchy "
          f"(the mount / zarr.open_consolidated): zarrfs "
          f"{spread(seconds['zarrfs'])}, zarr-python {spread(seconds['zarr-python'])}, ratio {spread(ratios)}x; "
          f"requests incl. opening: zarrfs {statistics.median(requests['zarrfs']):.0f}, "
          f"zarr-python {statistics.median(requests['zarr-python']):.0f}", flush=True)


def run_kill(store: str, server: bench_remote.Server, work: Path) -> None:
    path = ensure_store(store)
    local_mount = work / "local"
    with mounted([*ZARRFS, str(path), str(local_mount)], local_mount):
        expected = md5_of(local_mount / f"{store}.raw")
    cache = work / f"dc-kill-{store}"
    mountpoint = work / "mnt"
    url = f"{server.url}/{path.name}"
    command = [*ZARRFS, "--disk-cache", str(cache), url, str(mountpoint)]
    with mounted(command, mountpoint) as pid:
        reader = subprocess.Popen(["dd", f"if={mountpoint / f'{store}.raw'}", "of=/dev/null", "bs=1M"],
                                  stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)
        reader.wait(timeout=60)
    entries, bad, temporary = check_entries(cache)
    with mounted(command, mountpoint):
        got = md5_of(mountpoint / f"{store}.raw")
        counters = stats(mountpoint)["store"]["disk_cache"]
    print(f"kill -9 1 s into a cold read of {store}: {entries} entries left, {bad} failing their checks, "
          f"{temporary} temporary files; remount read {'identical' if got == expected else 'DIFFERENT'} "
          f"(hits {counters['hits']}, misses {counters['misses']}, dropped {counters['dropped_corrupt']})",
          flush=True)


def _random_preads(path: Path, expected: Path, count: int, seed: int) -> int:
    """Wrong bytes among `count` random 64 KiB preads of `path` against the same of `expected`."""
    rng = random.Random(seed)
    size = path.stat().st_size
    wrong = 0
    with open(path, "rb", buffering=0) as got, open(expected, "rb", buffering=0) as want:
        for _ in range(count):
            offset = rng.randrange(0, size - 65536)
            a, b = os.pread(got.fileno(), 65536, offset), os.pread(want.fileno(), 65536, offset)
            wrong += sum(x != y for x, y in zip(a, b)) if a != b else 0
    return wrong


def _wrong_bytes(path: Path, expected: Path) -> int:
    wrong = 0
    with open(path, "rb") as got, open(expected, "rb") as want:
        while block := want.read(1 << 22):
            other = got.read(len(block))
            if other != block:
                wrong += sum(x != y for x, y in zip(other, block)) + len(block) - len(other)
    return wrong


def run_share(store: str, server: bench_remote.Server, work: Path, cap: str) -> None:
    from zarrfs.options import parse_size

    path = ensure_store(store)
    cache = work / f"dc-share-{store}"
    url = f"{server.url}/{path.name}"
    local_mount, first, second = work / "local", work / "m1", work / "m2"
    sizes: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            sizes.append(dir_bytes(cache))
            time.sleep(0.05)

    wrong: list[int] = []
    with mounted([*ZARRFS, str(path), str(local_mount)], local_mount), \
            mounted([*ZARRFS, "--disk-cache", str(cache), "--disk-cache-size", cap, url, str(first)], first), \
            mounted([*ZARRFS, "--disk-cache", str(cache), "--disk-cache-size", cap, url, str(second)], second):
        expected = local_mount / f"{store}.raw"
        sampler = threading.Thread(target=sample)
        sampler.start()
        start = time.perf_counter()

        def load(mountpoint: Path, seed: int) -> None:
            for _ in range(2):
                wrong.append(_wrong_bytes(mountpoint / f"{store}.raw", expected))
                wrong.append(_random_preads(mountpoint / f"{store}.raw", expected, 300, seed))

        workers = [threading.Thread(target=load, args=(m, n)) for n, m in enumerate((first, second))]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        took = time.perf_counter() - start
        done.set()
        sampler.join()
        counters = [stats(m)["store"]["disk_cache"] for m in (first, second)]
    limit = parse_size(cap)
    print(f"two daemons sharing DIR (cap {cap}), 2 x (whole file + 300 random 64 KiB preads) each, {took:.1f} s: "
          f"wrong bytes {sum(wrong)}; DIR size max {max(sizes) / 2**20:.1f} MiB of {limit / 2**20:.0f} MiB "
          f"({len(sizes)} samples, cap {'held' if max(sizes) <= limit else 'EXCEEDED'}); evictions "
          f"{sum(c['evictions'] for c in counters)}, hits {sum(c['hits'] for c in counters)}, "
          f"misses {sum(c['misses'] for c in counters)}, not stored {sum(c['not_stored'] for c in counters)}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10, help="cold read + remount pairs of the remount part")
    parser.add_argument("--stores", default="blosc-lz4,sharded-zstd")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--parts", default="speed,remount,peek,kill,share")
    parser.add_argument("--share-cap", default="256M")
    parser.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--peek", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        root, port_file, latency, max_seconds, parent = args.serve
        serve(Path(root), Path(port_file), float(latency), float(max_seconds), int(parent))
        return
    if args.peek:
        print(json.dumps(peek_zarr_python(args.peek)))
        return
    stores = args.stores.split(",")
    parts = args.parts.split(",")
    root = ensure_store(stores[0]).parent
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-dc-", dir=os.environ.get("ZARRFS_BENCH_TMP")) as tmp:
        work = Path(tmp)
        server = bench_remote.Server(root, args.latency_ms / 1000, 7200, work, script=__file__)
        try:
            if "speed" in parts:
                print(f"HTTP, {args.latency_ms:g} ms per request; GB/s of `dd` of the 1 GiB .raw, median (min-max) "
                      f"of {args.repeat} paired runs; warm/local is per pair")
                print("| store | cold, empty DIR | warm remount | local disk | warm / local | data requests "
                      "cold / warm (max) | DIR after cold |")
                print("|---|---|---|---|---|---|---|")
                for store in stores:
                    run_cold_warm(store, server, work, args.repeat)
            if "remount" in parts:
                for store in stores:
                    run_remount(store, server, work, args.runs)
            if "peek" in parts:
                run_peek(server, work, args.repeat)
            if "kill" in parts:
                for store in stores:
                    run_kill(store, server, work)
            if "share" in parts:
                run_share(stores[0], server, work, args.share_cap)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
