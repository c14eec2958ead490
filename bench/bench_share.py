"""A share of many stores mounted whole, against rclone, ratarmount and zarr-python in the same run.

The share (made once under ZARRFS_BENCH_DIR, default /tmp/zarrfs-bench/share, by zarr-python 3):
  many/      STORES small v3 stores (a 64 x 64 uint16 array each), `s00000.zarr` ...
  mixed/     ordinary files (a PDF-sized file, text) and, for the pass-through read, `blob.bin`
             (1 GiB of the benchmark array's bytes) beside `array.zarr` (the same bytes as an
             uncompressed 1 GiB v3 array)
A flat group (`--flat N`, default 100,000 consolidated v3 arrays) is measured apart.

Figures, medians of `--repeat` runs, every timed step on recently used memory (bench_data):
  mount      `zarrfs mount` of the share until it returns; ratarmount's likewise
  ls         the first `ls` of many/ after a fresh mount (zarrfs, rclone, ratarmount)
  last read  mount, then read the last store's .npy: from the mount's return to the bytes
  find       `find` of the whole mount after a fresh mount, against zarr-python opening every store and
             listing its arrays in one process; the daemon's RSS after it
  blob       the 1 GiB ordinary file read sequentially (1 MiB reads) through zarrfs and rclone, and the
             mount's own array.zarr/array.raw of the same bytes
  flat       mount + `ls` of the flat group against zarr-python's open + list of its arrays; `ls -l`;
             the daemon's RSS after it

Usage: .venv/bin/python bench/bench_share.py [--stores 10000] [--flat 100000] [--repeat 3] [--skip PEERS]
Run it on an idle machine; it prints the load average with the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_data import DEFAULT_ROOT, band, recent_memory  # noqa: E402

ZARRFS = [sys.executable, "-P", "-m", "zarrfs"]
BLOB_ROWS = 16384  # 16384 x 16384 float32 = 1 GiB
# scripts/setup_bench_peers.sh installs rclone and ratarmount 1.3 (in .venv-ratarmount)
RATARMOUNT = os.environ.get("RATARMOUNT", shutil.which("ratarmount")
                            or str(Path(__file__).parent.parent / ".venv-ratarmount" / "bin" / "ratarmount"))


def make_share(root: Path, stores: int) -> Path:
    import zarr

    share = root / f"share-{stores}"
    if (share / ".complete").exists():
        return share
    shutil.rmtree(share, ignore_errors=True)
    many = share / "many"
    many.mkdir(parents=True)
    values = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    for index in range(stores):
        name = f"s{index:05d}"
        zarr.create_array(str(many / f"{name}.zarr"), shape=values.shape, chunks=(64, 64), dtype=values.dtype,
                          compressors=None)[...] = values + index
    mixed = share / "mixed"
    (mixed / "docs").mkdir(parents=True)
    (mixed / "docs" / "report.pdf").write_bytes(np.random.default_rng(1).bytes(2 << 20))
    (mixed / "docs" / "notes.txt").write_text("notes\n")
    array = zarr.create_array(str(mixed / "array.zarr"), shape=(BLOB_ROWS, 16384), chunks=(1024, 1024),
                              dtype="float32", compressors=None)
    with open(mixed / "blob.bin", "wb") as blob:
        for row in range(0, BLOB_ROWS, 1024):
            rows = band(row, 1024)
            array[row:row + 1024] = rows
            blob.write(rows.tobytes())
    (share / ".complete").write_text("ok\n")
    return share


def make_flat(root: Path, count: int) -> Path:
    """A consolidated v3 group of `count` arrays, its documents written as zarr-python writes them (written
    directly: creating 100,000 arrays through zarr-python takes minutes; zarr-python reads the result)."""
    import json

    flat = root / f"flat-{count}.zarr"
    if (flat / ".complete").exists():
        return flat
    shutil.rmtree(flat, ignore_errors=True)
    flat.mkdir(parents=True)
    array = {"zarr_format": 3, "node_type": "array", "shape": [16], "data_type": "uint8",
             "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16]}},
             "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
             "fill_value": 0, "codecs": [{"name": "bytes"}], "attributes": {}, "storage_transformers": []}
    for index in range(count):
        (flat / f"a{index:06d}").mkdir()
        (flat / f"a{index:06d}" / "zarr.json").write_text(json.dumps(array))
    consolidated = {"kind": "inline", "must_understand": False,
                    "metadata": {f"a{index:06d}": array for index in range(count)}}
    (flat / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {},
                                                "consolidated_metadata": consolidated}))
    (flat / ".complete").write_text("ok\n")
    return flat


def timed(step: Callable[[], object]) -> float:
    recent_memory()
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def run(*command: str | os.PathLike) -> str:
    return subprocess.run([str(c) for c in command], check=True, capture_output=True, text=True).stdout


def mounted_at(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines())


def wait_mounted(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not mounted_at(path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not mount")
        time.sleep(0.01)


def unmount(path: Path) -> None:
    if mounted_at(path):
        subprocess.run(["fusermount3", "-u", str(path)], check=False, capture_output=True)
    deadline = time.monotonic() + 30
    while mounted_at(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    if mounted_at(path):
        subprocess.run(["fusermount3", "-uz", str(path)], check=False, capture_output=True)


@contextmanager
def zarrfs_mount(source: Path, mountpoint: Path, *args: str) -> Iterator[float]:
    """Mount; yield how long `zarrfs mount` took; unmount on the way out."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    run(*ZARRFS, "mount", source, mountpoint, *args)
    took = time.perf_counter() - start
    try:
        yield took
    finally:
        run(*ZARRFS, "unmount", mountpoint)


@contextmanager
def rclone_mount(source: Path | str, mountpoint: Path, env: dict[str, str | None] | None = None) -> Iterator[float]:
    """`rclone mount --read-only` of a folder or a remote (`env`: its RCLONE_CONFIG_* settings; None
    removes a variable)."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, **(env or {})}
    start = time.perf_counter()
    process = subprocess.Popen(["rclone", "mount", str(source), str(mountpoint), "--read-only"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={name: value for name, value in environment.items() if value is not None})
    try:
        wait_mounted(mountpoint)
        yield time.perf_counter() - start
    finally:
        unmount(mountpoint)
        process.terminate()
        process.wait(30)


@contextmanager
def ratarmount_mount(source: Path, mountpoint: Path) -> Iterator[float]:
    mountpoint.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    run(RATARMOUNT, "--recursive", source, mountpoint)
    took = time.perf_counter() - start
    try:
        wait_mounted(mountpoint)
        yield took
    finally:
        unmount(mountpoint)


def daemon_rss_mib(mountpoint: Path) -> float:
    """The resident memory of the zarrfs daemon serving `mountpoint` (the largest process naming it)."""
    found = [0.0]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
            if b"zarrfs" in words and str(mountpoint).encode() in words:
                text = (cmdline.parent / "status").read_text()
                found.append(int(text.split("VmRSS:")[1].split()[0]) / 1024)
        except (OSError, IndexError):
            continue
    return max(found)


def read_sequentially(path: Path) -> None:
    with open(path, "rb", buffering=0) as handle:
        buffer = bytearray(1 << 20)
        while handle.readinto(buffer):
            pass


def find(path: Path) -> int:
    return len(run("find", path).splitlines())


def zarr_python_open_all(share: Path) -> int:
    """zarr-python 3 opening every store of the share and listing its arrays, in one process."""
    code = """
import sys, os, zarr
count = 0
for folder, dirs, files in os.walk(sys.argv[1]):
    if "zarr.json" in files:
        node = zarr.open(folder, mode="r")
        count += 1 if isinstance(node, zarr.Array) else len(list(node.array_keys()))
        dirs.clear()
print(count)
"""
    return int(run(sys.executable, "-c", code, share))


def zarr_python_list_flat(flat: Path) -> int:
    code = "import sys, zarr; print(len(list(zarr.open_group(sys.argv[1], mode='r').array_keys())))"
    return int(run(sys.executable, "-c", code, flat))


def median(values: list[float]) -> float:
    return statistics.median(values)


def share_figures(share: Path, scratch: Path, stores: int, repeat: int, skip: set[str]) -> None:
    mp = scratch / "mnt"
    last = f"s{stores - 1:05d}"
    rows: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    for _ in range(repeat):
        recent_memory()
        with zarrfs_mount(share, mp) as took:
            add("zarrfs mount", took)
            add("zarrfs ls many/", timed(lambda: run("ls", mp / "many")))
        recent_memory()
        start = time.perf_counter()
        with zarrfs_mount(share, mp):
            np.load(mp / "many" / f"{last}.zarr" / f"{last}.npy")
            add("zarrfs mount + read in the last store", time.perf_counter() - start)
        with zarrfs_mount(share, mp):
            add("zarrfs find", timed(lambda: find(mp)))
            add("zarrfs RSS after find (MiB)", daemon_rss_mib(mp))
            read_sequentially(mp / "mixed" / "docs" / "report.pdf")
            add("zarrfs blob.bin (1 GiB, 1 MiB reads)", timed(lambda: read_sequentially(mp / "mixed" / "blob.bin")))
            add("zarrfs array.zarr/array.raw (1 GiB)",
                timed(lambda: read_sequentially(mp / "mixed" / "array.zarr" / "array.raw")))
        add("zarr-python opens every store", timed(lambda: zarr_python_open_all(share)))
        if "rclone" not in skip:
            with rclone_mount(share, mp):
                add("rclone ls many/", timed(lambda: run("ls", mp / "many")))
                add("rclone find", timed(lambda: find(mp)))
                add("rclone blob.bin (1 GiB)", timed(lambda: read_sequentially(mp / "mixed" / "blob.bin")))
        if "ratarmount" not in skip:
            recent_memory()
            with ratarmount_mount(share, mp) as took:
                add("ratarmount mount", took)
                add("ratarmount ls many/", timed(lambda: run("ls", mp / "many")))
                add("ratarmount find", timed(lambda: find(mp)))
    print(f"share of {stores} stores ({share}); medians of {repeat}, min-max")
    for name, values in rows.items():
        print(f"  {name:45s} {median(values):9.3f}   ({min(values):.3f}-{max(values):.3f})")
    ratios = [("ls many/: zarrfs / rclone", "zarrfs ls many/", "rclone ls many/"),
              ("find: zarrfs / zarr-python", "zarrfs find", "zarr-python opens every store"),
              ("find: zarrfs / rclone", "zarrfs find", "rclone find"),
              ("blob: rclone / zarrfs (speed-up)", "rclone blob.bin (1 GiB)", "zarrfs blob.bin (1 GiB, 1 MiB reads)"),
              ("blob vs .raw: raw time / blob time", "zarrfs array.zarr/array.raw (1 GiB)",
               "zarrfs blob.bin (1 GiB, 1 MiB reads)")]
    for label, top, bottom in ratios:
        if top in rows and bottom in rows:
            print(f"  {label:45s} {median(rows[top]) / median(rows[bottom]):9.2f}x")


def flat_figures(flat: Path, scratch: Path, count: int, repeat: int) -> None:
    mp = scratch / "flat"
    rows: dict[str, list[float]] = {}
    for _ in range(repeat):
        recent_memory()
        start = time.perf_counter()
        with zarrfs_mount(flat, mp):
            names = run("ls", mp).split()
            rows.setdefault("zarrfs mount + ls", []).append(time.perf_counter() - start)
            present = {name for name in names if name.endswith(".npy")}
            assert len(present) == count, f"{len(present)} of {count} arrays listed"
            rows.setdefault("zarrfs ls -l (after ls)", []).append(timed(lambda: run("ls", "-l", mp)))
            rows.setdefault("zarrfs RSS after ls -l (MiB)", []).append(daemon_rss_mib(mp))
        rows.setdefault("zarr-python open + list", []).append(timed(lambda: zarr_python_list_flat(flat)))
    print(f"flat group of {count} arrays (consolidated v3); medians of {repeat}")
    for name, values in rows.items():
        print(f"  {name:45s} {median(values):9.3f}   ({min(values):.3f}-{max(values):.3f})")
    peer = median(rows["zarr-python open + list"])
    print(f"  {'mount + ls / zarr-python':45s} {median(rows['zarrfs mount + ls']) / peer:9.2f}x")
    print(f"  {'ls -l / zarr-python':45s} {median(rows['zarrfs ls -l (after ls)']) / peer:9.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, default=10_000)
    parser.add_argument("--flat", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated: rclone, ratarmount, share, flat")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as scratch:
        if "share" not in skip:
            share_figures(make_share(DEFAULT_ROOT, args.stores), Path(scratch), args.stores, args.repeat, skip)
        if "flat" not in skip:
            flat_figures(make_flat(DEFAULT_ROOT, args.flat), Path(scratch), args.flat, args.repeat)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
