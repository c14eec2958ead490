"""Discovery benchmark: mounting and walking whole hierarchies, over HTTP without listings and on local disk.

For each store of discovery_stores.py (plates, a 1,000-series collection, a
flat group of 10,000 arrays), sides taking turns, medians of --repeat runs:

  zarrfs over HTTP  `zarrfs mount URL` until it returns (the mount usable), the first `ls` of its root,
                    `find` of the whole tree; the server's requests and most in flight; the daemon's RSS
                    after `find`
  peer over HTTP    discovery_peer.py (zarr-python 3 asyncio opening every node the metadata names), its
                    walk alone and its whole process
  zarrfs local      mount, `ls`, `find` of the same store on local disk

The server (metadata_server.py, a child process) adds --latency-ms to every
request and answers directory URLs 404, as public object stores do. The
stores are written once into --data (default /tmp/zarrfs-bench-discovery)
by discovery_stores.py run with --writer (a Python with ome-zarr-py >= 0.21).

    python bench/bench_discovery.py [--repeat 3] [--stores plate-96,...] [--latency-ms 20] [--writer PYTHON]

The 96-well plate alone against the peer (issue 51's target: mount + `ls` + `find` <= 1.0x the peer's walk,
`ratio_mount_ls_find_over_peer_walk`):

    python bench/bench_discovery.py --repeat 3 --stores plate-96 --no-local
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ZARRFS = [sys.executable, "-m", "zarrfs"]


@contextmanager
def serving(root: Path, latency_ms: float) -> Iterator[str]:
    server = subprocess.Popen([sys.executable, str(HERE / "metadata_server.py"), str(root), "--latency-ms",
                               str(latency_ms)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        yield f"http://127.0.0.1:{server.stdout.readline().strip()}"
    finally:
        server.kill()
        server.wait()


def server_stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/__stats__") as answer:
        return json.loads(answer.read())


def _daemon_pid(mountpoint: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(mountpoint).encode() in command and b"--foreground" in command:
                return int(entry.name)
    return None


def _rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def timed(command: list[str], **kwargs: object) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    return time.perf_counter() - start, done


def zarrfs_run(source: str, mountpoint: Path, log: Path, extra: list[str]) -> dict[str, float | int | None]:
    """One mount (with `extra` arguments), `ls`, `find`, and unmount (always)."""
    mountpoint.mkdir(exist_ok=True)
    try:
        mount_s, mounted = timed([*ZARRFS, "mount", source, str(mountpoint), "--log-file", str(log), *extra])
        if mounted.returncode != 0:
            raise RuntimeError(f"zarrfs mount failed: {mounted.stderr.strip()}")
        ls_s, _ = timed(["ls", str(mountpoint)])
        find_s, found = timed(["find", str(mountpoint)])
        return {"mount_s": mount_s, "ls_s": ls_s, "find_s": find_s, "entries": len(found.stdout.splitlines()),
                "rss_mib": _rss_mib(_daemon_pid(mountpoint))}
    finally:
        subprocess.run([*ZARRFS, "unmount", str(mountpoint)], capture_output=True, check=False, timeout=120)


def peer_run(url: str) -> dict[str, float | int]:
    wall, done = timed([sys.executable, str(HERE / "discovery_peer.py"), url])
    if done.returncode != 0:
        raise RuntimeError(f"the peer failed: {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    return {"walk_s": result["seconds"], "process_s": wall, "nodes": result["nodes"]}


def median(runs: list[dict], key: str) -> float | None:
    values = [run[key] for run in runs if run.get(key) is not None]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stores", default="plate-96,plate-384,collection,flat")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--data", type=Path, default=Path("/tmp/zarrfs-bench-discovery"))
    parser.add_argument("--writer", default=sys.executable)
    parser.add_argument("--no-local", action="store_true", help="skip the local-disk runs")
    parser.add_argument("--mount-args", default="", help="more arguments for `zarrfs mount`: '--max-concurrency 64'")
    args = parser.parse_args()
    names = args.stores.split(",")
    extra = args.mount_args.split()
    subprocess.run([args.writer, str(HERE / "discovery_stores.py"), str(args.data), *names], check=True)
    report = {}
    with tempfile.TemporaryDirectory(prefix="zarrfs-bench-discovery-") as scratch:
        for name in names:
            store = args.data / f"{name}.zarr"
            runs: dict[str, list[dict]] = {"zarrfs_http": [], "peer_http": [], "zarrfs_local": []}
            with serving(args.data, args.latency_ms) as base:
                url = f"{base}/{store.name}"
                for _ in range(args.repeat):
                    server_stats(base)
                    run = zarrfs_run(url, Path(scratch) / "mnt", Path(scratch) / f"{name}.log", extra)
                    runs["zarrfs_http"].append({**run, **server_stats(base)})
                    run = peer_run(url)
                    runs["peer_http"].append({**run, **server_stats(base)})
                    if not args.no_local:
                        runs["zarrfs_local"].append(zarrfs_run(str(store), Path(scratch) / "mnt",
                                                               Path(scratch) / f"{name}.local.log", extra))
            summary = {side: {key: median(side_runs, key) for key in side_runs[0]} for side, side_runs in runs.items()
                       if side_runs}
            # The whole walk: the mount returns before its root is listed, so the first `ls` counts too.
            walk = [r["mount_s"] + r["ls_s"] + r["find_s"] for r in runs["zarrfs_http"]]
            summary["ratio_mount_ls_find_over_peer_walk"] = statistics.median(walk) / summary["peer_http"]["walk_s"]
            report[name] = summary
            print(json.dumps({name: summary}), flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
