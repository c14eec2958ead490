#!/usr/bin/env python3
"""Decode-only bound: how fast numcodecs alone decodes a benchmark store's chunks on this machine.

    python bench/bench_decode.py [--stores zstd-3,blosc-lz4] [--repeat 3]

Reads every chunk file of the (unsharded) store into memory first, then decodes
them all with 1 and with 2 threads (best of --repeat). No FUSE, no cache, no
assembly: a cold read through the mount cannot beat this, which is what caps a
zstd store's cold read against the in-memory FUSE ceiling in bench_mount.py.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numcodecs

from bench_data import ensure_store


def decoded_gbps(codec: numcodecs.abc.Codec, blobs: list[bytes], threads: int, repeat: int) -> float:
    best = float("inf")
    nbytes = 0
    for _ in range(repeat):
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            nbytes = sum(memoryview(chunk).nbytes for chunk in pool.map(codec.decode, blobs))
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="zstd-3,blosc-lz4")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for store in args.stores.split(","):
        path = ensure_store(store)
        meta = json.loads((path / "zarr.json").read_text())
        compressor = meta["codecs"][-1]  # bytes -> compressor: the benchmark stores have one
        codec = numcodecs.get_codec({"id": compressor["name"], **compressor["configuration"]})
        blobs = [chunk.read_bytes() for chunk in sorted((path / "c").glob("*/*"))]
        rates = {threads: decoded_gbps(codec, blobs, threads, args.repeat) for threads in (1, 2)}
        print(f"{store}: {len(blobs)} chunks, decode only: 1 thread {rates[1]:.2f} GB/s, "
              f"2 threads {rates[2]:.2f} GB/s")


if __name__ == "__main__":
    main()
