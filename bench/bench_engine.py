"""Engine benchmark: read each 1 GiB benchmark array through `ArrayReader` in 128 KiB
sequential pieces, against zarr-python 3 `z[:]` and TensorStore in the same run.

Each measurement runs in its own fresh process (so peak RSS is its own), the
store files are page-cached first for every peer alike, runs are interleaved,
and the table shows medians and ratios.

    python bench/bench_engine.py [--repeat 3] [--cache-size 512M] [--stores blosc-lz4,zstd-3]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import SHAPE, STORES, ensure_store, warm_page_cache  # noqa: E402

PIECE = 128 << 10
PEERS = ("zarrfs", "zarr-python", "tensorstore")


def run_zarrfs(path: Path, cache_size: str) -> dict:
    from zarrfs.engine.engine import Engine
    from zarrfs.memory import tune_process
    from zarrfs.options import EngineOptions, parse_size

    tune_process()  # as the daemon does

    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=parse_size(cache_size)))
    reader = engine.reader("")
    from zarrfs.engine.readahead import ReadStream

    stream = ReadStream()
    start = time.perf_counter()
    checksum = 0.0
    for offset in range(0, reader.nbytes, PIECE):
        piece = reader.read(offset, offset + PIECE, stream)
        if offset % (64 << 20) == 0:
            checksum += float(memoryview(piece).cast("f")[0])
    seconds = time.perf_counter() - start
    stats = engine.cache.stats()
    raw_bytes = engine.files.stats()["bytes"]  # uncompressed local chunks: copied from their files, not decoded
    units = math.prod(reader.grid.grid_shape)
    engine.close()
    return {"seconds": seconds, "loads": stats.loads, "units": units, "checksum": checksum,
            "raw_bytes_per_byte": raw_bytes / reader.nbytes}


def run_zarr_python(path: Path) -> dict:
    import zarr

    array = zarr.open_array(str(path), mode="r")
    start = time.perf_counter()
    data = array[:]
    return {"seconds": time.perf_counter() - start, "checksum": float(data[::4096, 0].sum())}


def run_tensorstore(path: Path) -> dict:
    import tensorstore as ts

    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()
    start = time.perf_counter()
    data = store.read().result()
    return {"seconds": time.perf_counter() - start, "checksum": float(data[::4096, 0].sum())}


def one(peer: str, store: str, cache_size: str) -> dict:
    path = ensure_store(store)
    if peer == "zarrfs":
        result = run_zarrfs(path, cache_size)
    elif peer == "zarr-python":
        result = run_zarr_python(path)
    else:
        result = run_tensorstore(path)
    result["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return result


def measure(peer: str, store: str, cache_size: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", peer, store, "--cache-size", cache_size],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache-size", default="512M")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--one", nargs=2, metavar=("PEER", "STORE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args.cache_size)))
        return
    gib = math.prod(SHAPE) * 4 / 2**30
    print("| store | zarrfs GB/s | zarr-python GB/s | tensorstore GB/s | zarrfs/zp3 | zarrfs/ts | decodes per chunk | zarrfs peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for store in args.stores.split(","):
        path = ensure_store(store)
        results: dict[str, list[dict]] = {p: [] for p in PEERS}
        for _ in range(args.repeat):
            for peer in PEERS:
                warm_page_cache(path)
                results[peer].append(measure(peer, store, args.cache_size))
        speed = {p: gib * 2**30 / 1e9 / statistics.median(r["seconds"] for r in results[p]) for p in PEERS}
        z = results["zarrfs"]
        decodes = statistics.median(r["loads"] / r["units"] for r in z)
        raw = statistics.median(r["raw_bytes_per_byte"] for r in z)
        rss = max(r["peak_rss"] for r in z) / 2**20
        print(f"| {store} | {speed['zarrfs']:.2f} | {speed['zarr-python']:.2f} | {speed['tensorstore']:.2f} | "
              f"{speed['zarrfs'] / speed['zarr-python']:.2f}x | {speed['zarrfs'] / speed['tensorstore']:.2f}x | "
              f"{decodes:.2f}{f' (read raw: {raw:.2f} B/B)' if raw else ''} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()
