#!/usr/bin/env python3
"""Soak test: many concurrent readers on a real zarrfs mount, every byte checked against an oracle.

    python bench/soak.py --minutes 0.5 --json soak.json     # CI: about a minute in all
    python bench/soak.py --minutes 60                       # on demand

Writes a v3 and a v2 store with zarr-python (about 40 MiB of arrays: zstd,
sharded gzip, big-endian blosc, missing chunks, uncompressed v2 (read straight
from its chunk files), zlib in F order), reads
each back with zarr-python as the oracle, mounts both with `zarrfs mount`, and
runs `--readers` threads that mix three kinds of work on .raw, .npy and .tif
files: sequential streams (after dropping the file's page cache, so the
daemon serves them), random O_DIRECT preads, and slices of
`np.load(mmap_mode="r")`. A warm-up phase runs the same load first; the
daemons' descriptors and threads are counted after it and after the run.

With `--http` the stores are served by an HTTP server on 127.0.0.1 behind
the tests' fault proxy: every request waits 20 ms, and every few seconds the
next requests get 503s, connection resets, stalls or cut bodies, never more
in a row than zarrfs retries. Errors are then allowed only as EIO, each with
a line in the daemon's log; a wrong byte never is.

Prints the figures and writes them as JSON: reads, bytes, errors, wrong
bytes, latency percentiles, each daemon's RSS when idle after mounting and
its peak (VmHWM), its memory series and slope, descriptors and threads.
Exits 1 if a target is missed: any error or wrong byte (over HTTP: an error
that is not EIO with a log line), peak RSS over the cache budget + 100 MiB,
RSS rising 1 MiB per 10 minutes or more (runs of 30 minutes and longer) or
ending more than 16 MiB above its start, or more open files or threads at
the end than after the warm-up (over HTTP: more sockets than the idle
connection pool can hold, and the resolver threads asyncio keeps).

The rise is measured at quiet points: the run is cut into segments (at most
two minutes, about fifteen of them), and after each the readers pause for
`QUIET_SETTLE_S` while every daemon's memory is sampled. Under load a
daemon's memory in use moves by several MiB with what is in flight (loads,
read windows, libfuse's reply buffers: bounded by the budget, and the peak
check covers them), and a slope fitted through such points mixes that with
growth (run 18 in docs/soak-2026-11-24.md: 0.81 MiB per 10 minutes through
one daemon's loaded points, 1.53 through its quiet ones).
"""

from __future__ import annotations

import argparse
import errno
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RSS_SLACK_MIB = 100
# Resident memory after the warm-up must stay flat: over a long run (an hour: its last 50 minutes)
# the slope stays under 1 MiB per 10 minutes; over any run it may not end higher than it began by
# more than the free heap a daemon may keep (zarrfs/memory.py: TRIM_SLACK).
SLOPE_LIMIT_MIB_PER_10MIN = 1.0
SLOPE_MIN_MINUTES = 30
GROWTH_LIMIT_MIB = 16
# Quiet points: segments of the run between them, and how long the readers pause before one (loads
# in flight end, and the daemon's heap trimmer runs once a second).
QUIET_SEGMENTS = 15
QUIET_EVERY_MIN_S = 10.0
QUIET_EVERY_MAX_S = 120.0
QUIET_SETTLE_S = 3.0
# A remote daemon's idle connections at most: the store's default bound on requests in flight
# (zarrfs/options.py: StoreOptions.max_concurrency) and asyncio's self-pipe, a socket pair.
POOL_SOCKETS = 32 + 2
KINDS = ("stream", "preads", "mmap")


# ------------------------------------------------------------------ stores


def _data(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Smooth values plus noise: compressible, but every element matters."""
    rng = np.random.default_rng(seed)
    ramp = np.indices(shape).sum(axis=0) % 251
    return (ramp + rng.integers(0, 5, shape)).astype(dtype)


def write_stores(root: Path) -> dict[str, dict[str, np.ndarray]]:
    """{store directory: {array name: oracle}}, the oracle as zarr-python reads the array back."""
    import numcodecs
    import zarr
    from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ZstdCodec

    v3 = root / "soak_v3.zarr"
    group = zarr.open_group(str(v3), mode="w", zarr_format=3)
    group.create_array("zstd_f4", shape=(1024, 2048), chunks=(128, 256), dtype="<f4",
                       compressors=ZstdCodec(level=1))[...] = _data((1024, 2048), "<f4", 1)
    group.create_array("shard_u2", shape=(64, 256, 256), dtype="<u2", chunks=(8, 64, 64), shards=(16, 128, 128),
                       compressors=GzipCodec(level=1))[...] = _data((64, 256, 256), "<u2", 2)
    group.create_array("blosc_i8_be", shape=(512, 1024), chunks=(64, 128), dtype=">i8",
                       serializer=BytesCodec(endian="big"),
                       compressors=BloscCodec(cname="lz4", shuffle="shuffle"))[...] = _data((512, 1024), "<i8", 3)
    missing = group.create_array("missing_u1", shape=(2048, 2048), chunks=(256, 256), dtype="u1", fill_value=7)
    missing[...] = _data((2048, 2048), "u1", 4)
    for i in range(0, 8, 3):  # leave some chunks out: those read as the fill value
        shutil.rmtree(v3 / "missing_u1" / "c" / str(i))
    v2 = root / "soak_v2.zarr"
    group2 = zarr.open_group(str(v2), mode="w", zarr_format=2)
    group2.create_array("plain_u2", shape=(64, 256, 250), chunks=(16, 64, 128), dtype="<u2",
                        compressors=None)[...] = _data((64, 256, 250), "<u2", 5)
    group2.create_array("zlib_f8_F", shape=(512, 1024), chunks=(100, 300), dtype="<f8", order="F",
                        compressors=numcodecs.Zlib(level=1))[...] = _data((512, 1024), "<f8", 6)
    stores: dict[str, dict[str, np.ndarray]] = {}
    for store, names in ((v3, ("zstd_f4", "shard_u2", "blosc_i8_be", "missing_u1")), (v2, ("plain_u2", "zlib_f8_F"))):
        stores[str(store)] = {name: np.asarray(zarr.open_array(str(store), path=name, mode="r")[...])
                              for name in names}
    return stores


# ------------------------------------------------------------------ oracle


@dataclass
class OracleFile:
    path: Path
    data: bytes  # the whole file as it must read
    array: np.ndarray  # the array, in the dtype the file exposes


def oracle_files(mountpoint: Path, store: Path, arrays: dict[str, np.ndarray]) -> list[OracleFile]:
    """Expected bytes of each file: numpy's own .npy; the .tif checked by tifffile before use."""
    import tifffile

    from zarrfs.engine.engine import Engine
    from zarrfs.formats import FORMATS
    from zarrfs.files.tree import VirtualTree

    engine = Engine.open(str(store))
    tree = VirtualTree(engine)
    files = []
    try:
        for name, array in arrays.items():
            meta = engine.hierarchy.node(name)
            exposed = np.ascontiguousarray(array.astype(meta.dtype))
            raw = exposed.tobytes()
            npy = io.BytesIO()
            np.save(npy, exposed)
            planned = FORMATS[".tif"](meta, tree.semantics(meta), name)  # header and trailer from metadata; the region is the oracle's
            assert planned is not None
            tif_layout = planned.layout  # built (a LazyLayout waits for the first stat)
            tif = tif_layout.header + raw + tif_layout.trailer
            np.testing.assert_array_equal(tifffile.imread(io.BytesIO(tif)).reshape(array.shape), array)
            files += [OracleFile(mountpoint / f"{name}.raw", raw, exposed),
                      OracleFile(mountpoint / f"{name}.npy", npy.getvalue(), exposed),
                      OracleFile(mountpoint / f"{name}.tif", tif, exposed)]
    finally:
        engine.close()
    return files


# ----------------------------------------------------------------- readers


@dataclass
class Tally:
    reads: int = 0
    bytes: int = 0
    errors: int = 0
    eio: int = 0  # errors that were OSError EIO
    wrong_bytes: int = 0
    latencies: list[float] = field(default_factory=list)
    by_kind: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)

    def merge(self, other: Tally) -> None:
        self.reads += other.reads
        self.bytes += other.bytes
        self.errors += other.errors
        self.eio += other.eio
        self.wrong_bytes += other.wrong_bytes
        self.latencies += other.latencies
        for kind, n in other.by_kind.items():
            self.by_kind[kind] = self.by_kind.get(kind, 0) + n
        self.error_samples += other.error_samples[:5]


class Reader:
    def __init__(self, files: list[OracleFile], seed: int, tally: Tally) -> None:
        self.files = files
        self.rng = random.Random(seed)
        self.tally = tally

    def _timed_read(self, read: Callable[[], bytes], expected: bytes) -> None:
        start = time.perf_counter()
        data = read()
        self.tally.latencies.append(time.perf_counter() - start)
        self.tally.reads += 1
        self.tally.bytes += len(data)
        self._compare(data, expected)

    def _compare(self, data: bytes | np.ndarray, expected: bytes | np.ndarray) -> None:
        if isinstance(data, bytes):
            if data == expected:
                return
            a = np.frombuffer(data, np.uint8)
            b = np.frombuffer(expected, np.uint8)
            n = min(len(a), len(b))
            self.tally.wrong_bytes += int(np.count_nonzero(a[:n] != b[:n])) + abs(len(a) - len(b))
        else:
            diff = data.view(np.uint8) != np.ascontiguousarray(expected).view(np.uint8)
            if not diff.any():
                return
            self.tally.wrong_bytes += int(np.count_nonzero(diff))

    def stream(self, file: OracleFile) -> None:
        """A sequential read (cat, cp): from the daemon, not the page cache."""
        size = len(file.data)
        start = self.rng.randrange(0, size)
        stop = min(size, start + self.rng.randrange(1 << 20, 8 << 20))
        with open(file.path, "rb", buffering=0) as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            f.seek(start)
            position = start
            while position < stop:
                n = min(stop - position, self.rng.choice([4096, 65536, 131072, 1 << 20]))
                self._timed_read(lambda n=n: f.read(n), file.data[position:position + n])
                position += n

    def preads(self, file: OracleFile) -> None:
        """Random small reads straight to the daemon (O_DIRECT: no page cache, no kernel readahead)."""
        fd = os.open(file.path, os.O_RDONLY | os.O_DIRECT)
        try:
            for _ in range(20):
                offset = self.rng.randrange(0, len(file.data))
                n = self.rng.choice([1, 7, 512, 4096, 65536, 262144])
                self._timed_read(lambda o=offset, n=n: os.pread(fd, n, o), file.data[offset:offset + n])
        finally:
            os.close(fd)

    def mmap_slices(self, file: OracleFile) -> None:
        """np.load(mmap_mode="r") and a few random hyperrectangles of it."""
        mapped = np.load(file.path, mmap_mode="r")
        try:
            for _ in range(5):
                region = tuple(slice(a, a + self.rng.randrange(1, s - a + 1))
                               for a, s in ((self.rng.randrange(0, s), s) for s in file.array.shape))
                start = time.perf_counter()
                data = np.array(mapped[region])
                self.tally.latencies.append(time.perf_counter() - start)
                self.tally.reads += 1
                self.tally.bytes += data.nbytes
                self._compare(data, file.array[region])
        finally:
            del mapped

    def run(self, deadline: float, kinds: tuple[str, ...], stop: threading.Event) -> None:
        while time.monotonic() < deadline and not stop.is_set():
            kind = self.rng.choice(kinds)
            pool = [f for f in self.files if f.path.suffix == ".npy"] if kind == "mmap" else self.files
            file = self.rng.choice(pool)
            try:
                {"stream": self.stream, "preads": self.preads, "mmap": self.mmap_slices}[kind](file)
            except Exception as exc:  # noqa: BLE001 - every failure is a figure
                self.tally.errors += 1
                if isinstance(exc, OSError) and exc.errno == errno.EIO:
                    self.tally.eio += 1
                if len(self.tally.error_samples) < 5:
                    self.tally.error_samples.append(f"{kind} {file.path.name}: {type(exc).__name__}: {exc}")
            self.tally.by_kind[kind] = self.tally.by_kind.get(kind, 0) + 1


def run_readers(files: list[OracleFile], readers: int, seconds: float, seed: int, kinds: tuple[str, ...]) -> Tally:
    tallies = [Tally() for _ in range(readers)]
    deadline = time.monotonic() + seconds
    stop = threading.Event()  # set when the run is cut short, so that the mounts can be unmounted
    threads = [threading.Thread(target=Reader(files, seed + i, tallies[i]).run, args=(deadline, kinds, stop))
               for i in range(readers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        for thread in threads:
            if thread.is_alive():
                thread.join()
    total = Tally()
    for tally in tallies:
        total.merge(tally)
    return total


# ----------------------------------------------------------------- daemons


@dataclass
class DaemonSample:
    fds: int
    sockets: int  # of the descriptors, sockets (a remote daemon's connections)
    threads: int
    peak_rss_mib: float


def sample(pid: int) -> DaemonSample:
    status = Path(f"/proc/{pid}/status").read_text()
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:  # closed since listed
            pass
    return DaemonSample(fds=len(links), sockets=sum(link.startswith("socket:") for link in links),
                        threads=len(os.listdir(f"/proc/{pid}/task")),
                        peak_rss_mib=int(status.split("VmHWM:")[1].split()[0]) / 1024)


class Sampler:
    """Every second while the load runs: each daemon's threads and descriptors; every
    `series_every` seconds also its memory figures from `.zarrfs-stats.json` (the series)."""

    def __init__(self, pids: list[int], mountpoints: list[Path], series_every: float = 10.0) -> None:
        self.pids = pids
        self.mountpoints = mountpoints
        self.series_every = series_every
        self.samples: list[list[DaemonSample]] = [[] for _ in pids]
        self.series: list[list[dict[str, float]]] = [[] for _ in pids]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        next_series = started
        while not self._stop.wait(1.0):
            now = time.monotonic()
            for samples, pid in zip(self.samples, self.pids, strict=True):
                samples.append(sample(pid))
            if now >= next_series:
                next_series += self.series_every
                for series, mountpoint in zip(self.series, self.mountpoints, strict=True):
                    series.append(memory_point(mountpoint, now - started))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def peaks(self, index: int) -> dict[str, int]:
        """Most threads and descriptors seen while the load ran (workers and open chunk files come and
        go), in its first half and in its second: a leak shows as a second half above the first."""
        samples = self.samples[index] or [DaemonSample(0, 0, 0.0)]
        first, second = samples[:max(1, len(samples) // 2)], samples[len(samples) // 2:]
        return {"threads_max": max(s.threads for s in first), "fds_max": max(s.fds for s in first),
                "threads_max_late": max(s.threads for s in second), "fds_max_late": max(s.fds for s in second)}


def memory_point(mountpoint: Path, seconds: float) -> dict[str, float]:
    """One point of the memory series, in MiB: resident (of it anonymous, pages of mapped files, and
    the resident part of the allocator's heap),
    the allocator's heap (in use and free, its size, the number of free blocks),
    blocks mapped on their own, the cache's chunks and the bytes held outside it (read windows)."""
    stats = json.loads((mountpoint / ".zarrfs-stats.json").read_text())
    memory, cache = stats["memory"], stats["cache"]
    mib = 1 << 20
    return {"s": round(seconds), "rss": round(memory["rss_bytes"] / mib, 1),
            "rss_anon": round(memory.get("rss_anon_bytes", 0) / mib, 1),
            "rss_file": round(memory.get("rss_file_bytes", 0) / mib, 1),
            "rss_heap": round(memory.get("rss_heap_bytes", 0) / mib, 1),
            "heap_in_use": round(memory.get("heap_in_use_bytes", 0) / mib, 1),
            "heap_free": round(memory.get("heap_free_bytes", 0) / mib, 1),
            "heap_arena": round(memory.get("heap_bytes", 0) / mib, 1),
            "free_blocks": memory.get("heap_free_blocks", 0),
            "mapped": round(memory.get("mapped_bytes", 0) / mib, 1),
            "cached": round(cache["cached_bytes"] / mib, 1), "held": round(cache.get("held_bytes", 0) / mib, 1),
            "python_blocks": memory["python_blocks"]}


def daemon_pid(mountpoint: Path) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--foreground" in argv and os.fsencode(mountpoint) in argv:
                return int(entry.name)
    raise RuntimeError(f"no zarrfs daemon serves {mountpoint}")


def zarrfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zarrfs", *args], capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL, timeout=120)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000 if values else 0.0


# -------------------------------------------------------------------- main


# Each daemon's budget, at most --cache-size: below what it decodes into its cache, so that its
# chunks churn (read windows live outside the cache). The v3 daemon caches about 23 MiB+; the v2
# daemon only its 4 MiB zlib array (the uncompressed one is read from its files), but not less than
# the 2 MiB band of the uncompressed array, which would be warned about.
DAEMON_CACHE_SIZES = {"soak_v3.zarr": "16M", "soak_v2.zarr": "3M"}


def _daemon_cache_size(store: Path, cache_size: str) -> str:
    from zarrfs.options import parse_size

    own = DAEMON_CACHE_SIZES.get(store.name, cache_size)
    return own if parse_size(own) < parse_size(cache_size) else cache_size


def rss_trend(quiet: list[dict[str, float]]) -> dict[str, float | None]:
    """How resident memory moved over the run, at its quiet points: the least-squares slope over
    the points after the first sixth of them (the last 50 minutes of an hour), in MiB per 10
    minutes (None with fewer than 6 points), and the last point less the first."""
    growth = round(quiet[-1]["rss"] - quiet[0]["rss"], 1) if len(quiet) >= 2 else 0.0
    if len(quiet) < 6:
        return {"rss_slope_mib_per_10min": None, "rss_anon_slope_mib_per_10min": None, "rss_growth_mib": growth}
    tail = quiet[len(quiet) // 6:]
    seconds = np.array([p["s"] for p in tail], float)

    def slope(kind: str) -> float:
        return round(float(np.polyfit(seconds, np.array([p[kind] for p in tail], float), 1)[0]) * 600, 2)

    # The anonymous part is the daemon's own memory; the rest is pages of mapped libraries.
    return {"rss_slope_mib_per_10min": slope("rss"), "rss_anon_slope_mib_per_10min": slope("rss_anon"),
            "rss_growth_mib": growth}


def run_with_quiet_points(files: list[OracleFile], readers: int, seconds: float, seed: int,
                          kinds: tuple[str, ...], mountpoints: list[Path],
                          ) -> tuple[Tally, list[list[dict[str, float]]]]:
    """The readers' load for `seconds` of reading, paused for a quiet point of every daemon's
    memory at the start and after each segment; the tally and each daemon's quiet points."""
    every = min(QUIET_EVERY_MAX_S, max(QUIET_EVERY_MIN_S, seconds / QUIET_SEGMENTS))
    started = time.monotonic()
    quiet: list[list[dict[str, float]]] = [[memory_point(m, 0.0)] for m in mountpoints]
    total = Tally()
    left, segment = seconds, 0
    while left > 0:
        length = min(every, left)
        total.merge(run_readers(files, readers, length, seed + 100 * segment, kinds))
        left -= length
        segment += 1
        time.sleep(QUIET_SETTLE_S)
        for points, mountpoint in zip(quiet, mountpoints, strict=True):
            points.append(memory_point(mountpoint, time.monotonic() - started))
    return total, quiet


# --http: each request waits this long, and every FAULT_EVERY seconds one fault is set on the next
# requests, at most FAULT_TIMES_MAX of them: fewer than zarrfs's 3 retries, so a read fails only
# if one request draws faults set by several ticks in a row.
HTTP_LATENCY_S = 0.02
FAULT_EVERY_S = 5.0
FAULT_TIMES_MAX = 3
HTTP_FAULTS = ("503", "reset", "stall", "truncate")
STALL_S = 2.0


@dataclass
class FaultyServer:
    """The HTTP server and fault proxy, running in a process of their own (`--serve-http`): in this
    one they would share the GIL with 16 readers comparing bytes and answer late."""

    url: str
    process: subprocess.Popen
    faults_applied: dict[str, int] = field(default_factory=dict)


@contextmanager
def http_faults(root: Path, seed: int) -> Iterator[FaultyServer]:
    process = subprocess.Popen([sys.executable, __file__, "--serve-http", str(root), "--seed", str(seed)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdin is not None
        server = FaultyServer(process.stdout.readline().strip(), process)
        if not server.url.startswith("http://"):
            raise RuntimeError(f"the HTTP server did not start: {server.url!r}")
        yield server
        process.stdin.close()  # the server's signal to stop and report
        server.faults_applied = json.loads(process.stdout.readline() or "{}")
    finally:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def serve_http(root: Path, seed: int) -> None:
    """The tests' static HTTP server for `root` behind their fault proxy (tests/remoteutil.py); prints
    the proxy's URL, sets faults every FAULT_EVERY_S seconds until stdin closes, then prints the
    faults applied as JSON."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from remoteutil import fault_proxy, http_server

    rng = random.Random(seed)
    stop = threading.Event()

    def inject_faults(proxy: Any) -> None:
        while not stop.wait(FAULT_EVERY_S):
            fault = rng.choice(HTTP_FAULTS)
            proxy.inject(fault, times=rng.randint(1, FAULT_TIMES_MAX), seconds=STALL_S, first=True)

    with http_server(root) as server, fault_proxy(server.url) as proxy:
        proxy.inject("latency", seconds=HTTP_LATENCY_S)
        injector = threading.Thread(target=inject_faults, args=(proxy,), daemon=True)
        injector.start()
        print(proxy.url, flush=True)
        sys.stdin.read()
        stop.set()
        injector.join()
        print(json.dumps(dict(proxy.faults_applied)), flush=True)


def soak(workdir: Path, minutes: float, readers: int, cache_size: str, warmup_seconds: float,
         seed: int, kinds: tuple[str, ...] = KINDS, series_every: float = 10.0, http: bool = False,
         ) -> dict[str, Any]:
    stores = write_stores(workdir)
    with http_faults(workdir, seed) if http else nullcontext() as proxy:
        figures = _soak(stores, proxy, workdir, minutes, readers, cache_size, warmup_seconds, seed, kinds,
                        series_every)
    if proxy is not None:
        figures["faults_applied"] = proxy.faults_applied
    return figures


def _soak(stores: dict[str, dict[str, np.ndarray]], proxy: Any, workdir: Path, minutes: float, readers: int,
          cache_size: str, warmup_seconds: float, seed: int, kinds: tuple[str, ...], series_every: float,
          ) -> dict[str, Any]:
    from zarrfs.fuse.mount import fuse_concurrency
    from zarrfs.options import parse_size

    mounts: list[tuple[Path, Path, Path]] = []
    files: list[OracleFile] = []
    try:
        for i, (store, arrays) in enumerate(stores.items()):
            mountpoint, log = workdir / f"mnt{i}", workdir / f"daemon{i}.log"
            mountpoint.mkdir()
            source = store if proxy is None else f"{proxy.url}/{Path(store).name}"
            # A SIGTERM while mounting waits until the mount is on the list the finally unmounts.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            try:
                result = zarrfs("--log-level", "info", "mount", source, str(mountpoint), "--cache-size",
                                _daemon_cache_size(Path(store), cache_size), "--log-file", str(log))
                if result.returncode == 0:
                    mounts.append((mountpoint, log, Path(store)))
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            if result.returncode != 0:
                raise RuntimeError(f"zarrfs mount failed: {result.stderr}")
            files += oracle_files(mountpoint, Path(store), arrays)
        pids = [daemon_pid(m) for m, _, _ in mounts]
        idle = [sample(pid) for pid in pids]
        warm = run_readers(files, readers, warmup_seconds, seed, kinds)
        time.sleep(1.0)  # idle worker threads settle
        before = [sample(pid) for pid in pids]
        started = time.monotonic()
        with Sampler(pids, [m for m, _, _ in mounts], series_every) as sampler:
            main, quiet = run_with_quiet_points(files, readers, minutes * 60, seed + 1000, kinds,
                                                [m for m, _, _ in mounts])
        elapsed = time.monotonic() - started - QUIET_SETTLE_S * (len(quiet[0]) - 1)  # reading time
        time.sleep(1.0)
        after = [sample(pid) for pid in pids]
        stats = [json.loads((m / ".zarrfs-stats.json").read_text()) for m, _, _ in mounts]
    finally:
        for mountpoint, _, _ in mounts:
            zarrfs("unmount", str(mountpoint))
    log_lines = [line for _, log, _ in mounts for line in log.read_text(errors="replace").splitlines()
                 if " INFO " not in line and " DEBUG " not in line and line.strip()]
    # A read that failed is logged at ERROR (once per distinct message: ops.py report_once).
    # Anything else (a traceback, a warning) is a problem in any mode.
    read_failures = [line for line in log_lines if " ERROR " in line and "unexpected error" not in line]
    log_problems = [line for line in log_lines if line not in read_failures]
    tally_errors = main.errors + warm.errors
    tally_eio = main.eio + warm.eio
    budgets = [parse_size(_daemon_cache_size(Path(store), cache_size)) / (1 << 20) for store in stores]
    figures = {
        "minutes": round(elapsed / 60, 2), "readers": readers, "http": proxy is not None,
        "arrays": sum(len(a) for a in stores.values()), "files": len(files),
        "oracle_mib": round(sum(len(f.data) for f in files) / (1 << 20), 1),
        "reads": main.reads, "bytes": main.bytes, "mib_per_s": round(main.bytes / (1 << 20) / elapsed, 1),
        "operations": main.by_kind, "errors": tally_errors, "eio_errors": tally_eio,
        "error_log_lines": len(read_failures), "log_problems": len(log_problems),
        "wrong_bytes": main.wrong_bytes + warm.wrong_bytes,
        "latency_ms": {"p50": round(percentile(main.latencies, 50), 3), "p99": round(percentile(main.latencies, 99), 3),
                       "max": round(max(main.latencies, default=0) * 1000, 3)},
        "daemons": [{"store": Path(store).name, "cache_budget_mib": budget, "idle_rss_mib": round(i.peak_rss_mib, 1),
                     "peak_rss_mib": round(a.peak_rss_mib, 1),
                     "fds_start": b.fds, "fds_end": a.fds, "sockets_start": b.sockets, "sockets_end": a.sockets,
                     "threads_start": b.threads, "threads_end": a.threads,
                     **sampler.peaks(k), "cache": s["cache"], "store_requests": s["store"]["requests"],
                     # the daemon's own time per FUSE read, to tell its latency from the readers' queueing
                     "daemon_read_times": s.get("reads"),
                     "memory_series": sampler.series[k], "quiet_series": quiet[k]}
                    for k, (store, budget, i, b, a, s)
                    in enumerate(zip(stores, budgets, idle, before, after, stats, strict=True))],
        "error_samples": (warm.error_samples + main.error_samples)[:5] + (log_problems + read_failures)[:5],
    }
    for daemon in figures["daemons"]:
        daemon.update(rss_trend(daemon["quiet_series"]))
    failures = []
    if figures["wrong_bytes"] or log_problems:
        failures.append(f"{figures['wrong_bytes']} wrong bytes, {len(log_problems)} unexpected log lines")
    if proxy is None and (tally_errors or read_failures):
        failures.append(f"{tally_errors} errors, {len(read_failures)} logged read failures")
    # Over a faulty network a read may fail when faults outlast the retries: as EIO, and logged.
    if proxy is not None and (tally_errors != tally_eio or (tally_errors and not read_failures)):
        failures.append(f"{tally_errors} errors of which {tally_eio} EIO, {len(read_failures)} logged")
    for daemon in figures["daemons"]:
        if daemon["peak_rss_mib"] > daemon["cache_budget_mib"] + RSS_SLACK_MIB:
            failures.append(f"{daemon['store']}: peak RSS {daemon['peak_rss_mib']} MiB over its budget "
                            f"{daemon['cache_budget_mib']} MiB + {RSS_SLACK_MIB}")
        if daemon["rss_slope_mib_per_10min"] is not None and minutes >= SLOPE_MIN_MINUTES \
                and daemon["rss_slope_mib_per_10min"] >= SLOPE_LIMIT_MIB_PER_10MIN:
            failures.append(f"{daemon['store']}: RSS grew {daemon['rss_slope_mib_per_10min']} MiB per 10 minutes")
        if daemon["rss_growth_mib"] > GROWTH_LIMIT_MIB:
            failures.append(f"{daemon['store']}: RSS grew {daemon['rss_growth_mib']} MiB over the run")
        # Worker threads and open chunk files come and go with the load; what must not grow is what
        # stays behind: counted idle after the warm-up and after the run. A remote daemon may still
        # add threads after the warm-up up to a cap: its HTTP client resolves names on asyncio's
        # default executor, which starts threads on demand up to min(32, CPUs + 4) and keeps them.
        # (The maxima under load in each half of the run are figures, not checked: a burst late in
        # the run may start a FUSE thread more than any burst before it, within libfuse's cap.)
        # Its idle connections are a pool: as many as requests were last in flight at once (the
        # store lets at most `max_concurrency` run), plus asyncio's self-pipe (a socket pair);
        # faults close some and later requests open others, so only the pool's bound is checked.
        # FUSE threads stay once started (fuse/mount.py), up to the cap for the daemon's budget: a
        # burst in the run may start some that the warm-up did not.
        allowed = fuse_concurrency(int(daemon["cache_budget_mib"]) << 20)[1]
        allowed += 0 if proxy is None else min(32, (os.cpu_count() or 1) + 4)
        sockets = daemon["sockets_start"] if proxy is None else max(daemon["sockets_start"], POOL_SOCKETS)
        files_start, files_end = (daemon[f"fds_{w}"] - daemon[f"sockets_{w}"] for w in ("start", "end"))
        if files_end > files_start or daemon["sockets_end"] > sockets or \
                daemon["threads_end"] > daemon["threads_start"] + allowed:
            failures.append(f"{daemon['store']}: descriptors or threads grew")
    figures["failures"] = failures
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=0.5, help="length of the measured run (default 0.5)")
    parser.add_argument("--readers", type=int, default=16, help="concurrent reader threads (default 16)")
    parser.add_argument("--cache-size", default="32M",
                        help="the largest --cache-size of a daemon (default 32M; see DAEMON_CACHE_SIZES)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds of load before the first count")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kinds", default=",".join(KINDS), help="reader work to mix (default: %(default)s)")
    parser.add_argument("--series-every", type=float, default=10.0,
                        help="seconds between points of each daemon's memory series (default 10)")
    parser.add_argument("--http", action="store_true",
                        help="serve the stores over HTTP on 127.0.0.1 behind a fault proxy (see above)")
    parser.add_argument("--serve-http", type=Path, help=argparse.SUPPRESS)  # the child of --http
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--workdir", type=Path, help="where stores and mounts go (default: a temporary directory)")
    args = parser.parse_args(argv)
    if args.serve_http:
        serve_http(args.serve_http, args.seed)
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="zarrfs-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # Stopped with SIGTERM (kill, a CI timeout), still unmount and stop the daemons and the server.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        figures = soak(workdir, args.minutes, args.readers, args.cache_size, args.warmup, args.seed,
                       tuple(args.kinds.split(",")), args.series_every, args.http)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 1 if figures["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
