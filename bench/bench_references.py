"""A referenced HDF5 dataset over HTTP: the requests and time of a full read through zarrfs against h5py + fsspec.

Writes one HDF5 file (a float32 dataset, gzip + shuffle, 1 MiB chunks),
makes kerchunk references to it, and serves both from bench_remote.py's HTTP
server with LATENCY seconds before each answer. Then, in turns:

* zarrfs: `zarrfs mount http://…/refs.json` in the foreground, `dd bs=1M` of
  the dataset's `.raw` (a cold daemon each time);
* h5py: a fresh process opening the file with `fsspec.open(url)` (fsspec's
  HTTP file, its default block cache) and reading `dataset[()]`, which is how
  a Python user reads an HDF5 file on a web server without zarrfs.

Both read the same bytes from the same server; the table gives requests,
bytes sent and seconds (medians of --repeat).

python bench/bench_references.py [--repeat 3] [--latency 0.02] [--mib 256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_mount import dd_seconds, mounted  # noqa: E402
from bench_remote import Server  # noqa: E402

ROW = 4096  # float32 columns: 16 KiB rows; chunks of 64 rows = 1 MiB


def write_hdf5(path: Path, mib: int) -> None:
    rows = mib * 1024 * 1024 // (ROW * 4)
    data = np.random.default_rng(0).standard_normal((rows, ROW), dtype=np.float32).round(2)
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=data, chunks=(64, ROW), compression="gzip", shuffle=True)


def write_references(h5: Path, url: str, out: Path) -> None:
    from kerchunk.hdf import SingleHdf5ToZarr

    with open(h5, "rb") as handle:
        out.write_text(json.dumps(SingleHdf5ToZarr(handle, url).translate()))


H5PY_READ = """
import sys, time, fsspec, h5py
started = time.perf_counter()
with fsspec.open(sys.argv[1], "rb") as raw, h5py.File(raw, "r") as f:
    data = f["data"][()]
print(time.perf_counter() - started, data.nbytes)
"""


def zarrfs_read(server: Server, work: Path) -> float:
    mountpoint = work / "mnt"
    command = [sys.executable, "-P", "-m", "zarrfs", "mount", "--foreground", f"{server.url}/refs.json",
               str(mountpoint)]
    with mounted(command, mountpoint):
        return dd_seconds(mountpoint / "data.raw")


def h5py_read(server: Server) -> float:
    out = subprocess.run([sys.executable, "-c", H5PY_READ, f"{server.url}/data.h5"], capture_output=True,
                         text=True, check=True)
    return float(out.stdout.split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.02, help="seconds before each answer (default 0.02)")
    parser.add_argument("--mib", type=int, default=256, help="dataset size (default 256)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-refs-") as tmp:
        work = Path(tmp)
        served = work / "served"
        served.mkdir()
        write_hdf5(served / "data.h5", args.mib)
        server = Server(served, args.latency, 3600, work)
        try:
            write_references(served / "data.h5", f"{server.url}/data.h5", served / "refs.json")
            results: dict[str, list[tuple[float, dict]]] = {"zarrfs": [], "h5py+fsspec": []}
            for _ in range(args.repeat):
                for name, read in (("zarrfs", lambda: zarrfs_read(server, work)),
                                   ("h5py+fsspec", lambda: h5py_read(server))):
                    server.counts(reset=True)
                    seconds = read()
                    results[name].append((seconds, server.counts()))
        finally:
            server.stop()
    nbytes = args.mib * 1024 * 1024
    print(f"{args.mib} MiB float32, gzip+shuffle, 1 MiB chunks; {args.latency * 1000:.0f} ms per request; "
          f"medians of {args.repeat}")
    print(f"{'reader':12s} {'GB/s':>6s} {'requests':>9s} {'MiB sent':>9s} {'max in flight':>14s}")
    for name, runs in results.items():
        seconds = statistics.median(s for s, _ in runs)
        requests = statistics.median(c["requests"] for _, c in runs)
        sent = statistics.median(c["bytes_sent"] for _, c in runs) / 2**20
        in_flight = max(c["max_in_flight"] for _, c in runs)
        print(f"{name:12s} {nbytes / seconds / 1e9:6.2f} {requests:9.0f} {sent:9.1f} {in_flight:14d}")
    zarrfs_s = statistics.median(s for s, _ in results["zarrfs"])
    print(f"zarrfs / h5py+fsspec speed: {statistics.median(s for s, _ in results['h5py+fsspec']) / zarrfs_s:.2f}x")


if __name__ == "__main__":
    main()
