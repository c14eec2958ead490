"""A catalog of HTTP stores that cannot list (+20 ms per request), mounted as one tree, against zarr-python 3.

STORES small stores written by zarr-python 3 (each a group of two 64 x 64 uint16 arrays, consolidated;
even ones v3, odd ones v2), served by bench_remote's HTTP server: no listings
(a folder is 404, as on most public HTTPS hosts), `--latency-ms` before every answer. The catalog
(`--catalog FILE`) names every store's URL. In the same run, medians of --repeat:

  mount       `zarrfs mount --catalog` until it returns (no store is opened)
  last read   mount, then read the last store's first array: from the mount's return to the bytes
  find        `find` of the whole mount after a fresh mount (every store opened, its arrays listed)
  peer        zarr-python 3 opening every store and listing its arrays, all at once with asyncio, in
              one process
and the requests the server answered for each.

Usage: .venv/bin/python bench/bench_catalog_http.py [--stores 200] [--repeat 3] [--latency-ms 20]
Run it on an idle machine; it prints the load average with the figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import DEFAULT_ROOT, recent_memory  # noqa: E402
from bench_remote import Server  # noqa: E402
from bench_share import ZARRFS, find, median, run  # noqa: E402

PEER = """
import asyncio, sys, zarr.api.asynchronous as za
async def arrays(url):
    group = await za.open_group(store=url, mode="r")
    return len([name async for name in group.array_keys()])
async def main(urls):
    return sum(await asyncio.gather(*(arrays(url) for url in urls)))
print(asyncio.run(main(sys.argv[1:])))
"""


def make_stores(root: Path, count: int) -> Path:
    import zarr

    folder = root / f"catalog-{count}"
    if (folder / ".complete").exists():
        return folder
    values = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    for index in range(count):
        path = str(folder / f"c{index:04d}.zarr")
        version = 3 if index % 2 == 0 else 2
        group = zarr.open_group(path, mode="w", zarr_format=version)
        for name in ("a", "b"):
            group.create_array(name, shape=values.shape, chunks=(64, 64), dtype=values.dtype)[...] = values + index
        zarr.consolidate_metadata(path)  # without it, a store that cannot list shows no array to anyone
    (folder / ".complete").write_text("ok\n")
    return folder


def write_catalog(path: Path, base_url: str, count: int) -> None:
    path.write_text("".join(f'[c{index:04d}]\nsource = "{base_url}/c{index:04d}.zarr"\n\n' for index in range(count)))


def zarrfs_mount(catalog: Path, mountpoint: Path) -> float:
    mountpoint.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    run(*ZARRFS, "mount", "--catalog", catalog, "", mountpoint)
    return time.perf_counter() - start


def zarrfs_unmount(mountpoint: Path) -> None:
    run(*ZARRFS, "unmount", mountpoint)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    folder = make_stores(DEFAULT_ROOT, args.stores)
    rows: dict[str, list[float]] = {}
    requests: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        server = Server(folder, args.latency_ms / 1000, 3600, work)
        try:
            catalog = work / "catalog.toml"
            write_catalog(catalog, server.url, args.stores)
            mp = work / "mnt"
            last = f"c{args.stores - 1:04d}"
            print(f"load average {os.getloadavg()}")
            for _ in range(args.repeat):
                recent_memory()
                server.counts(reset=True)
                rows.setdefault("zarrfs mount", []).append(zarrfs_mount(catalog, mp))
                requests["zarrfs mount"] = server.counts()["requests"]
                try:
                    start = time.perf_counter()
                    np.load(mp / last / "a.npy")
                    rows.setdefault("zarrfs read in the last store", []).append(time.perf_counter() - start)
                finally:
                    zarrfs_unmount(mp)
                recent_memory()
                zarrfs_mount(catalog, mp)
                try:
                    server.counts(reset=True)
                    start = time.perf_counter()
                    found = find(mp)
                    rows.setdefault("zarrfs find", []).append(time.perf_counter() - start)
                    requests["zarrfs find"] = server.counts()["requests"]
                finally:
                    zarrfs_unmount(mp)
                recent_memory()
                server.counts(reset=True)
                urls = [f"{server.url}/c{index:04d}.zarr" for index in range(args.stores)]
                start = time.perf_counter()
                listed = int(subprocess.run([sys.executable, "-c", PEER, *urls], check=True, capture_output=True,
                                            text=True).stdout)
                rows.setdefault("zarr-python asyncio open + list", []).append(time.perf_counter() - start)
                requests["zarr-python"] = server.counts()["requests"]
                assert listed == 2 * args.stores, listed
        finally:
            server.stop()
    print(f"catalog of {args.stores} HTTP stores, no listings, +{args.latency_ms:g} ms; medians of {args.repeat}")
    for name, values in rows.items():
        print(f"  {name:40s} {median(values):8.3f} s   ({min(values):.3f}-{max(values):.3f})")
    print(f"  {'find: zarrfs / zarr-python':40s} "
          f"{median(rows['zarrfs find']) / median(rows['zarr-python asyncio open + list']):8.2f}x"
          f"   ({found} paths)")
    print("requests (last run): " + ", ".join(f"{name} {count}" for name, count in requests.items()))
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
