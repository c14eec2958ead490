"""Mount benchmark: the engine benchmark's 1 GiB arrays read through a real zarrfs mount.

In one run, interleaved, medians of --repeat runs:
  (a) `dd bs=1M` of the mounted `.raw` with a cold daemon (fresh mount), against
      zarr-python 3 `z[:]` (fresh process) and against bench/memfs_ceiling.py
      (1 GiB served from memory by mfusepy with zarrfs's FUSE settings) and against
      TensorStore's `read()` (fresh process; skipped when it is not installed). Every
      timed run, peer or mount, starts right after a helper process touched and
      freed 2.5 GiB (bench_data.recent_memory): on this VM a fresh process's
      first touch of memory is up to ~10x slower than on an ordinary machine,
      which handicaps a peer that allocates its result and not a daemon that
      reuses its cache;
  (b) the second `dd` of the same file (kernel page cache), against the ceiling's
      second read and a plain file's second read;
  (c) for each store, 20,000 random 4 KiB preads with a warm daemon cache and the file's pages
      dropped, p50/p99, against the ceiling (both mounted, taking turns), and the share of the
      daemon's reads its C path answered (the rest crossed into Python);
  (d) peak daemon RSS (VmHWM) streaming a 1 GiB array with --cache-size 256M;
  and decodes per chunk from the mount's .zarrfs-stats.json (with the decodes that wrote into
  memory fresh from the kernel, which it zeroes first: "fresh buffers"; uncompressed local
  chunks are not decoded but read from their files: bytes read per array byte),
  and the CPU seconds each cold read cost (the FUSE daemon's plus dd's): on 2
  vCPUs a read cannot take less than half of that.

    python bench/bench_mount.py [--repeat 3] [--stores blosc-lz4,zstd-3,uncompressed,sharded-zstd]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import CHUNKS, SHAPE, STORES, ensure_store, recent_memory, warm_page_cache  # noqa: E402

HERE = Path(__file__).resolve().parent
ZARRFS = [sys.executable, "-m", "zarrfs"]
NBYTES = math.prod(SHAPE) * 4
PREADS = 20_000


def _wait_mounted(mountpoint: Path, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daemon exited with {process.returncode}")
        if os.path.ismount(mountpoint):
            os.listdir(mountpoint)
            return
        time.sleep(0.05)
    raise RuntimeError(f"{mountpoint} not mounted after {timeout} s")


@contextmanager
def mounted(command: list[str], mountpoint: Path, env: dict[str, str] | None = None) -> Iterator[int]:
    """Run a foreground FUSE daemon (with `env` added to its environment); yield its PID; always
    unmount and reap it."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, **env} if env else None)
    try:
        _wait_mounted(mountpoint, process)
        yield process.pid
    finally:
        subprocess.run(["fusermount3", "-u", str(mountpoint)], capture_output=True, check=False)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if os.path.ismount(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True, check=False)


def zarrfs_mount(store: Path, mountpoint: Path, cache_size: str) -> list[str]:
    return [*ZARRFS, "mount", "--foreground", "--cache-size", cache_size, str(store), str(mountpoint)]


def ceiling_mount(mountpoint: Path) -> list[str]:
    return [sys.executable, str(HERE / "memfs_ceiling.py"), str(mountpoint), "--size", str(NBYTES), "--foreground"]


def dd_seconds(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M"], capture_output=True, check=True)
    return time.perf_counter() - start


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process `pid` has used so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dd_with_cpu(path: Path, daemon: int) -> tuple[float, float]:
    """`dd_seconds(path)`, and the CPU seconds the read cost: the FUSE daemon's plus dd's."""
    def spent() -> float:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # dd, once reaped
        return cpu_seconds(daemon) + children.ru_utime + children.ru_stime

    before = spent()
    seconds = dd_seconds(path)
    return seconds, spent() - before


def drop_pages(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def pread_latencies(paths: list[Path], seed: int, block: int = 500) -> list[list[float]]:
    """Microseconds for PREADS random 4 KiB preads on each file, readahead off, pages dropped first.

    The files (all the same size) take turns, `block` preads at a time, at the
    same offsets: a noisy neighbour on this shared machine slows them alike.
    """
    rng = random.Random(seed)
    size = os.path.getsize(paths[0])
    offsets = [rng.randrange(0, size - 4096) for _ in range(PREADS)]
    fds = []
    try:
        for path in paths:
            drop_pages(path)
            fds.append(os.open(path, os.O_RDONLY))
            os.posix_fadvise(fds[-1], 0, 0, os.POSIX_FADV_RANDOM)
        latencies: list[list[float]] = [[] for _ in paths]
        for begin in range(0, PREADS, block):
            for fd, into in zip(fds, latencies, strict=True):
                for offset in offsets[begin:begin + block]:
                    start = time.perf_counter_ns()
                    os.pread(fd, 4096, offset)
                    into.append((time.perf_counter_ns() - start) / 1000)
    finally:
        for fd in fds:
            os.close(fd)
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def stats(mountpoint: Path) -> dict:
    return json.loads((mountpoint / ".zarrfs-stats.json").read_text())


def peer_seconds(peer: str, store: str) -> float:
    """Seconds a fresh process of `peer` (bench_engine.py's zarr-python or tensorstore) takes to read the array."""
    out = subprocess.run([sys.executable, str(HERE / "bench_engine.py"), "--one", peer, store],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def has_tensorstore() -> bool:
    found = subprocess.run([sys.executable, "-c", "import tensorstore"], capture_output=True, check=False)
    return found.returncode == 0


def run_store(store: str, work: Path, repeat: int, cache_size: str, tensorstore: bool) -> dict:
    path = ensure_store(store)
    raw = work / "z" / f"{store}.raw"
    ceiling_file = work / "c" / "file"
    chunks = math.prod(-(-s // c) for s, c in zip(SHAPE, CHUNKS, strict=True))
    results: dict[str, list[float]] = {k: [] for k in (
        "cold", "zp3", *(("ts",) if tensorstore else ()), "ceiling_cold", "second", "ceiling_second", "plain_second")}
    cpu: dict[str, list[float]] = {"zarrfs": [], "ceiling": []}  # CPU seconds of the cold read
    decodes: list[float] = []
    fresh: list[float] = []
    raw_bytes: list[float] = []  # uncompressed local chunks are read from their files, not decoded
    for _ in range(repeat):
        # Every timed process starts on recently used memory (bench_data.recent_memory), peers and mounts alike.
        warm_page_cache(path)
        recent_memory()
        results["zp3"].append(peer_seconds("zarr-python", store))
        if tensorstore:
            warm_page_cache(path)
            recent_memory()
            results["ts"].append(peer_seconds("tensorstore", store))
        warm_page_cache(path)
        with mounted(zarrfs_mount(path, work / "z", cache_size), work / "z") as pid:
            recent_memory()
            took, spent = dd_with_cpu(raw, pid)
            results["cold"].append(took)
            cpu["zarrfs"].append(spent)
            results["second"].append(dd_seconds(raw))
            counters = stats(work / "z")
            decodes.append(counters["cache"]["loads"] / chunks)
            # Decodes into memory fresh from the kernel, which zeroes it first (the rest reuse an
            # evicted chunk's memory, engine/buffers.py): a count, steady on a loaded machine.
            fresh.append(counters["cache"]["loads"] - counters["cache"]["spares_reused"])
            raw_bytes.append(counters["raw_chunk_reads"]["bytes"] / NBYTES)
        with mounted(ceiling_mount(work / "c"), work / "c") as pid:
            recent_memory()
            took, spent = dd_with_cpu(ceiling_file, pid)
            results["ceiling_cold"].append(took)
            cpu["ceiling"].append(spent)
            results["ceiling_second"].append(dd_seconds(ceiling_file))
        plain = work / "plain.bin"
        dd_seconds(plain)
        results["plain_second"].append(dd_seconds(plain))
    gbps = {k: NBYTES / 1e9 / statistics.median(v) for k, v in results.items()}
    # Each round's peers ran minutes apart at most, so the median of the rounds' own ratios follows the
    # host's drift less than a ratio of medians; both are printed.
    paired = {peer: statistics.median(p / z for p, z in zip(results[peer], results["cold"], strict=True))
              for peer in ("zp3", "ts") if peer in results}
    return {"gbps": gbps, "paired": paired, "decodes_per_chunk": statistics.median(decodes),
            "fresh_buffers": statistics.median(fresh),
            "cpu": {k: statistics.median(v) for k, v in cpu.items()},
            "raw_bytes_per_byte": statistics.median(raw_bytes)}


def run_preads(store: str, work: Path) -> dict:
    path = ensure_store(store)
    with mounted(zarrfs_mount(path, work / "z", "2G"), work / "z"), \
            mounted(ceiling_mount(work / "c"), work / "c"):
        raw = work / "z" / f"{store}.raw"
        dd_seconds(raw)  # warm the daemon cache with the whole array
        before = stats(work / "z")["reads"]
        ours, theirs = pread_latencies([raw, work / "c" / "file"], 1)
        after = stats(work / "z")["reads"]
    in_c = (after["answered_in_c"] - before["answered_in_c"]) / max(1, after["count"] - before["count"])
    return {"p50": percentile(ours, 0.5), "p99": percentile(ours, 0.99), "in_c": in_c,
            "ceiling_p50": percentile(theirs, 0.5), "ceiling_p99": percentile(theirs, 0.99)}


def run_rss(store: str, work: Path, cache_size: str) -> int:
    path = ensure_store(store)
    with mounted(zarrfs_mount(path, work / "z", cache_size), work / "z") as pid:
        dd_seconds(work / "z" / f"{store}.raw")
        return peak_rss(pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--cache-size", default="512M")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-mount-") as tmp:
        work = Path(tmp)
        with open(work / "plain.bin", "wb") as plain:  # the page-cache peer for (b)
            for _ in range(NBYTES >> 24):
                plain.write(os.urandom(1 << 24))
        tensorstore = has_tensorstore()
        print("(a) cold sequential dd bs=1M, (b) second read; GB/s, medians of", args.repeat,
              "(vs a peer: the ratio of medians, then the median of each round's ratio)")
        print("| store | zarrfs cold | zarr-python z[:] | TensorStore read() | ceiling cold | vs zp3 | vs ts | "
              "vs ceiling | "
              "zarrfs 2nd | ceiling 2nd | plain 2nd | 2nd vs ceiling 2nd | decodes/chunk | fresh buffers | "
              "cold CPU-s zarrfs / ceiling |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for store in args.stores.split(","):
            r = run_store(store, work, args.repeat, args.cache_size, tensorstore)
            g = r["gbps"]
            paired = r["paired"]
            ts, vs_ts = (f"{g['ts']:.2f}", f"{g['cold'] / g['ts']:.2f}x ({paired['ts']:.2f}x)") if tensorstore \
                else ("not installed", "")
            print(f"| {store} | {g['cold']:.2f} | {g['zp3']:.2f} | {ts} | {g['ceiling_cold']:.2f} | "
                  f"{g['cold'] / g['zp3']:.2f}x ({paired['zp3']:.2f}x) | {vs_ts} | "
                  f"{g['cold'] / g['ceiling_cold']:.2f}x | {g['second']:.2f} | "
                  f"{g['ceiling_second']:.2f} | {g['plain_second']:.2f} | "
                  f"{g['second'] / g['ceiling_second']:.2f}x | {r['decodes_per_chunk']:.2f}"
                  + (f" (read raw: {r['raw_bytes_per_byte']:.2f} B/B)" if r["raw_bytes_per_byte"] else "")
                  + f" | {r['fresh_buffers']:.0f} | {r['cpu']['zarrfs']:.2f} / {r['cpu']['ceiling']:.2f} |", flush=True)
        print()
        for store in args.stores.split(","):
            p = run_preads(store, work)
            print(f"(c) {PREADS} random 4 KiB preads, warm daemon cache, {store}: p50 {p['p50']:.0f} us "
                  f"(ceiling {p['ceiling_p50']:.0f} us, {p['p50'] / p['ceiling_p50']:.2f}x), p99 {p['p99']:.0f} us "
                  f"(ceiling {p['ceiling_p99']:.0f} us); {p['in_c']:.0%} of the daemon's reads answered in C",
                  flush=True)
        store = args.stores.split(",")[0]
        rss = run_rss(store, work, "256M")
        print(f"(d) peak daemon RSS streaming 1 GiB with --cache-size 256M: {rss / 2**20:.0f} MiB "
              f"(target <= {256 + 100} MiB)")


if __name__ == "__main__":
    main()
