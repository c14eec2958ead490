"""What this machine allows: upper bounds on the cold-read ratios that bench_mount.py and
bench_remote.py report, from measured CPU seconds.

Any FUSE file system's cold read does at least two kinds of work, and on this
machine's 2 vCPUs they share the same two CPUs:
  - the FUSE transport: 1 GiB into the kernel's page cache through /dev/fuse and
    out to `dd`. The in-memory ceiling (memfs_ceiling.py) does only this; perf
    shows 86-95% of its daemon's time is the kernel's copy, which every FUSE
    daemon pays, whatever language it is written in;
  - the store's own work: read every chunk file once and decode it once with
    numcodecs into reused buffers (no assembly, no cache); uncompressed chunks
    are copied out of their files once; sharded stores decode every inner chunk.
So a cold read takes at least max(ceiling's wall time, work's wall time on 2
threads, (transport CPU-s + work CPU-s) / 2), and

    bound = ceiling's wall time / that

is the best "vs ceiling" any daemon can reach here, unless it does the store's
work in fewer cycles than numcodecs' C libraries or moves bytes through FUSE in
fewer than the kernel's copy. Running the two at once is not a bound: the
scheduler shares the CPUs less well than that (measured, 0.37x against TensorStore
where zarrfs itself reached 0.52x), so the script adds CPU seconds instead.

With --remote, the same against bench_remote.py's TensorStore target: the work
is TensorStore's own read over HTTP (20 ms per request; its CPU-s plus the HTTP
server's), and the bound caps a FUSE daemon that fetches and decodes as cheaply
as TensorStore's C++ and then pays the transport on top.

Medians of --repeat, interleaved:

    python bench/bench_bound.py [--repeat 3] [--stores blosc-lz4,zstd-3,uncompressed,sharded-zstd]
    python bench/bench_bound.py --remote [--stores blosc-lz4,sharded-zstd]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numcodecs
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import CHUNKS, ensure_store, warm_page_cache  # noqa: E402
from bench_mount import ceiling_mount, cpu_seconds, dd_with_cpu, mounted  # noqa: E402

CHUNK_BYTES = CHUNKS[0] * CHUNKS[1] * 4  # float32
THREADS = 2


# ----------------------------------------------------------- the store's work


ChunkWork = Callable[[Path, np.ndarray], None]


def _chunk_work(store: Path) -> tuple[ChunkWork, list[Path]]:
    """A function doing one stored file's minimum work into a reused buffer, and the files."""

    meta = json.loads((store / "zarr.json").read_text())
    outer = meta["codecs"][-1]
    files = sorted(p for p in (store / "c").rglob("*") if p.is_file())
    if outer["name"] == "bytes":  # uncompressed: copy each chunk out of its file once
        def copy_out(path: Path, out: np.ndarray) -> None:
            with open(path, "rb", buffering=0) as f:
                f.readinto(out)
        return copy_out, files
    if outer["name"] == "sharding_indexed":
        inner = outer["configuration"]["codecs"][-1]
        decode = _fastest_decode(numcodecs.get_codec({"id": inner["name"], **inner["configuration"]}))
        inner_count = _inner_per_shard(meta)

        def decode_shard(path: Path, out: np.ndarray) -> None:
            shard = path.read_bytes()
            # the index ends the shard: (offset, nbytes) per inner chunk, then a crc32c
            index = np.frombuffer(shard, "<u8", offset=len(shard) - 4 - 16 * inner_count, count=2 * inner_count)
            for offset, nbytes in index.reshape(-1, 2):
                if offset != 2**64 - 1:  # an empty inner chunk
                    decode(memoryview(shard)[offset:offset + nbytes], out)
        return decode_shard, files
    decode = _fastest_decode(numcodecs.get_codec({"id": outer["name"], **outer["configuration"]}))

    def decode_chunk(path: Path, out: np.ndarray) -> None:
        decode(path.read_bytes(), out)
    return decode_chunk, files


def _fastest_decode(codec: numcodecs.abc.Codec) -> ChunkWork:
    """codec.decode into `out` where that is zero-copy (blosc); numcodecs' Zstd decodes and then
    copies into `out` (1.47 against 1.23 s per GiB on one thread, measured), so it allocates."""
    if codec.codec_id == "blosc":
        return lambda blob, out: codec.decode(blob, out=out)
    return lambda blob, out: codec.decode(blob)


def _inner_per_shard(meta: dict) -> int:
    shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
    inner = meta["codecs"][-1]["configuration"]["chunk_shape"]
    return int(np.prod([s // i for s, i in zip(shard, inner)]))


def do_work(store: Path) -> None:
    """Child process: the store's work on THREADS threads; prints its seconds and CPU seconds."""
    work, files = _chunk_work(store)
    buffers = [np.empty(CHUNK_BYTES, np.uint8) for _ in range(THREADS)]
    for out in buffers:
        out.fill(0)  # fault the pages in now: a daemon reuses its decode buffers
    halves = [files[i::THREADS] for i in range(THREADS)]

    def run(i: int) -> None:
        for path in halves[i]:
            work(path, buffers[i])
    start, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(run, range(THREADS)))
    print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}))


def store_work(store: Path) -> tuple[float, float]:
    """Seconds and CPU seconds of the store's work (`do_work`), in a fresh process."""
    out = subprocess.run([sys.executable, __file__, "--work", str(store)], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["seconds"], result["cpu"]


def ceiling_read(work: Path) -> tuple[float, float]:
    """Seconds and CPU seconds (daemon and dd) of a cold `dd` of the ceiling's 1 GiB file."""
    mountpoint = work / "ceiling"
    with mounted(ceiling_mount(mountpoint), mountpoint) as pid:
        return dd_with_cpu(mountpoint / "file", pid)


def bound(ceiling: tuple[float, float], work: tuple[float, float], reference: float) -> float:
    """reference / the least time a daemon doing both the ceiling's and the work's share of 2 CPUs takes."""
    least = max(ceiling[0], work[0], (ceiling[1] + work[1]) / THREADS)
    return reference / least


def median_pairs(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default=None, help="default: all four (local) or blosc-lz4,sharded-zstd")
    parser.add_argument("--remote", action="store_true", help="bound against TensorStore over HTTP instead")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.work:
        do_work(Path(args.work))
        return
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-bound-") as tmp:
        work = Path(tmp)
        if args.remote:
            remote(args, work)
        else:
            local(args, work)


def local(args: argparse.Namespace, tmp: Path) -> None:
    stores = (args.stores or "blosc-lz4,zstd-3,uncompressed,sharded-zstd").split(",")
    print(f"1 GiB cold read, medians of {args.repeat}: seconds / CPU-seconds")
    print("| store | ceiling (daemon + dd) | store's work, 2 threads | least time for both on 2 CPUs | "
          "bound on zarrfs vs ceiling |")
    print("|---|---|---|---|---|")
    print_bounds(stores, args.repeat, tmp, store_work, against_work=False)


def remote(args: argparse.Namespace, tmp: Path) -> None:
    from bench_remote import Server, measure_process

    stores = (args.stores or "blosc-lz4,sharded-zstd").split(",")
    server = Server(ensure_store(stores[0]).parent, args.latency_ms / 1000, 3600, tmp)

    def tensorstore(store: Path) -> tuple[float, float]:
        served = cpu_seconds(server.process.pid)
        seconds, cpu = measure_process("tensorstore", f"{server.url}/{store.name}")
        return seconds, cpu + cpu_seconds(server.process.pid) - served

    try:
        print(f"1 GiB cold read, TensorStore over HTTP ({args.latency_ms:g} ms per request), medians of "
              f"{args.repeat}: seconds / CPU-seconds")
        print("| store | ceiling (daemon + dd) | TensorStore (its CPU + the server's) | "
              "least time for both on 2 CPUs | bound on zarrfs vs TensorStore |")
        print("|---|---|---|---|---|")
        print_bounds(stores, args.repeat, tmp, tensorstore, against_work=True)
    finally:
        server.stop()


def print_bounds(stores: list[str], repeat: int, tmp: Path, measure_work: Callable[[Path], tuple[float, float]],
                 against_work: bool) -> None:
    """A table row per store: the ceiling's and the work's medians, and the bound against the
    ceiling's wall time, or against the work's own (a peer such as TensorStore) if `against_work`."""
    for name in stores:
        store = ensure_store(name)
        ceiling, work = [], []
        for _ in range(repeat):
            warm_page_cache(store)
            ceiling.append(ceiling_read(tmp))
            work.append(measure_work(store))
        c, w = median_pairs(ceiling), median_pairs(work)
        reference = w[0] if against_work else c[0]
        ratio = bound(c, w, reference)
        print(f"| {name} | {c[0]:.2f} / {c[1]:.2f} | {w[0]:.2f} / {w[1]:.2f} | {reference / ratio:.2f} | "
              f"{ratio:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
