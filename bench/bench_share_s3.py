"""A share of many stores in an S3 bucket (moto on 127.0.0.1), mounted whole, against rclone and zarr-python.

The share: `--stores` small v3 stores (a 64 x 64 uint16 array each, written by zarr-python 3 on local
disk, then uploaded) under `share/many/`, and ordinary files under `share/mixed/` (a 2 MiB report, a
text file, a 256 MiB `blob.bin`). Every request moto answers is logged and counted, so the figures say
how the mount talks to the bucket:

  mount       `zarrfs mount s3://bench/share` until it returns
  ls          the first `ls` of many/ after a fresh mount (zarrfs, rclone)
  last read   mount, then read the last store's .npy: from the mount's return to the bytes
  find        `find` of the whole mount after a fresh mount, against zarr-python 3 listing many/ with s3fs
              and opening every store in one process, and rclone's `find` of the raw tree
  blob        the 256 MiB ordinary file read sequentially (1 MiB reads), zarrfs and rclone
  requests    per step: list requests by prefix (each prefix should be listed once) and object GETs
              (per store for find)

Usage: .venv/bin/python bench/bench_share_s3.py [--stores 2000] [--repeat 3] [--skip rclone]
Run it on an idle machine; it prints the load average with the figures.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_data import DEFAULT_ROOT, recent_memory  # noqa: E402
from bench_share import (  # noqa: E402
    ZARRFS, daemon_rss_mib, find, median, rclone_mount, read_sequentially, run, timed,
)

BUCKET = "bench"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
REQUEST_LINE = re.compile(r'"(GET|HEAD|PUT|POST) (\S+) HTTP/1\.[01]"')
COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # werkzeug colours the request lines of errors


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Moto:
    """moto_server with its request log in a file, so that each step's requests can be counted."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log_file = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=self._log_file,
                                        env={**os.environ, **CREDENTIALS})
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)

    def client(self):  # noqa: ANN201 - boto3 has no public type here
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def mark(self) -> int:
        """Where the log stands now; `requests_since(mark)` counts what came after."""
        self._log_file.flush()
        return self.log.stat().st_size

    def requests_since(self, mark: int) -> list[tuple[str, str]]:
        time.sleep(0.2)  # moto writes its log line after the response
        with open(self.log, "rb") as log:
            log.seek(mark)
            text = COLOUR.sub("", log.read().decode(errors="replace"))
        return [(found.group(1), found.group(2)) for found in REQUEST_LINE.finditer(text)]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log_file.close()


def upload_share(moto: Moto, stores: int, local: Path) -> None:
    import zarr

    local.mkdir(parents=True, exist_ok=True)
    values = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    client = moto.client()
    client.create_bucket(Bucket=BUCKET)
    for index in range(stores):
        name = f"s{index:05d}.zarr"
        zarr.create_array(str(local / name), shape=values.shape, chunks=(64, 64), dtype=values.dtype,
                          compressors=None, overwrite=True)[...] = values + index
        for path in (local / name).rglob("*"):
            if path.is_file():
                client.put_object(Bucket=BUCKET, Key=f"share/many/{name}/{path.relative_to(local / name).as_posix()}",
                                  Body=path.read_bytes())
    client.put_object(Bucket=BUCKET, Key="share/mixed/docs/report.pdf", Body=np.random.default_rng(1).bytes(2 << 20))
    client.put_object(Bucket=BUCKET, Key="share/mixed/docs/notes.txt", Body=b"notes\n")
    client.put_object(Bucket=BUCKET, Key="share/mixed/blob.bin", Body=np.random.default_rng(2).bytes(256 << 20))


def summarise(requests: list[tuple[str, str]]) -> str:
    """Lists by prefix (how many prefixes, the most any one was listed) and object GETs."""
    lists: Counter[str] = Counter()
    gets = heads = 0
    for method, target in requests:
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        if method == "GET" and ("list-type" in query or "delimiter" in query or "prefix" in query):
            lists[unquote(query.get("prefix", [""])[0])] += 1
        elif method == "GET":
            gets += 1
        elif method == "HEAD":
            heads += 1
    most = max(lists.values(), default=0)
    return (f"{sum(lists.values())} lists of {len(lists)} prefixes (at most {most} per prefix), "
            f"{gets} GETs, {heads} HEADs")


@contextmanager
def zarrfs_s3_mount(moto: Moto, mountpoint: Path, log: Path) -> Iterator[float]:
    mountpoint.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    # credentials through the environment, as a user keeps them out of `ps`
    subprocess.run([*ZARRFS, "mount", f"s3://{BUCKET}/share", str(mountpoint), "-S", f"endpoint_url={moto.endpoint}",
                    "--log-file", str(log)], check=True, capture_output=True, env={**os.environ, **CREDENTIALS})
    took = time.perf_counter() - start
    try:
        yield took
    finally:
        run(*ZARRFS, "unmount", mountpoint)


def rclone_s3_mount(moto: Moto, mountpoint: Path) -> AbstractContextManager[float]:
    return rclone_mount(f"moto:{BUCKET}/share", mountpoint, {
        "RCLONE_CONFIG_MOTO_TYPE": "s3", "RCLONE_CONFIG_MOTO_PROVIDER": "Other",
        "RCLONE_CONFIG_MOTO_ENDPOINT": moto.endpoint, "RCLONE_CONFIG_MOTO_ACCESS_KEY_ID": "testing",
        "RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY": "testing", "RCLONE_CONFIG_MOTO_REGION": "us-east-1",
        "AWS_CA_BUNDLE": None})  # rclone's S3 client refuses a custom CA bundle over plain HTTP


def zarr_python_open_all(moto: Moto) -> int:
    """zarr-python 3 listing many/ with s3fs and opening every store, in one process."""
    code = """
import sys, zarr, s3fs
options = {"key": "testing", "secret": "testing", "endpoint_url": sys.argv[1]}
fs = s3fs.S3FileSystem(**options)
count = 0
for prefix in fs.ls(sys.argv[2], detail=False):
    node = zarr.open(f"s3://{prefix}", mode="r", storage_options=options)
    count += 1 if isinstance(node, zarr.Array) else len(list(node.array_keys()))
print(count)
"""
    return int(run(sys.executable, "-c", code, moto.endpoint, f"{BUCKET}/share/many"))


def figures(moto: Moto, scratch: Path, stores: int, repeat: int, skip: set[str]) -> None:
    mp = scratch / "mnt"
    last = f"s{stores - 1:05d}"
    rows: dict[str, list[float]] = {}
    counts: dict[str, str] = {}

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    def counted(name: str, step: object) -> float:
        mark = moto.mark()
        took = timed(step)  # type: ignore[arg-type]
        counts[name] = summarise(moto.requests_since(mark))
        return took

    for _ in range(repeat):
        recent_memory()
        mark = moto.mark()
        with zarrfs_s3_mount(moto, mp, scratch / "zarrfs.log") as took:
            counts["zarrfs mount"] = summarise(moto.requests_since(mark))
            add("zarrfs mount", took)
            add("zarrfs ls many/", counted("zarrfs ls many/", lambda: run("ls", mp / "many")))
        recent_memory()
        start = time.perf_counter()
        with zarrfs_s3_mount(moto, mp, scratch / "zarrfs.log"):
            np.load(mp / "many" / f"{last}.zarr" / f"{last}.npy")
            add("zarrfs mount + read in the last store", time.perf_counter() - start)
        with zarrfs_s3_mount(moto, mp, scratch / "zarrfs.log"):
            add("zarrfs find", counted("zarrfs find", lambda: find(mp)))
            add("zarrfs RSS after find (MiB)", daemon_rss_mib(mp))
            add("zarrfs blob.bin (256 MiB)", counted("zarrfs blob.bin",
                                                     lambda: read_sequentially(mp / "mixed" / "blob.bin")))
        add("zarr-python opens every store", counted("zarr-python", lambda: zarr_python_open_all(moto)))
        if "rclone" not in skip:
            with rclone_s3_mount(moto, mp):
                add("rclone ls many/", counted("rclone ls many/", lambda: run("ls", mp / "many")))
                add("rclone find", counted("rclone find", lambda: find(mp)))
                add("rclone blob.bin (256 MiB)", counted("rclone blob.bin",
                                                         lambda: read_sequentially(mp / "mixed" / "blob.bin")))
    print(f"share of {stores} stores in s3://{BUCKET}/share (moto on 127.0.0.1); medians of {repeat}, min-max")
    for name, values in rows.items():
        print(f"  {name:45s} {median(values):9.3f}   ({min(values):.3f}-{max(values):.3f})")
    ratios = [("ls many/: zarrfs / rclone", "zarrfs ls many/", "rclone ls many/"),
              ("find: zarrfs / zarr-python", "zarrfs find", "zarr-python opens every store"),
              ("find: zarrfs / rclone", "zarrfs find", "rclone find"),
              ("blob: rclone / zarrfs (speed-up)", "rclone blob.bin (256 MiB)", "zarrfs blob.bin (256 MiB)")]
    for label, top, bottom in ratios:
        if top in rows and bottom in rows:
            print(f"  {label:45s} {median(rows[top]) / median(rows[bottom]):9.2f}x")
    print("requests moto answered (last run)")
    for name, summary in counts.items():
        print(f"  {name:30s} {summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated: rclone")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory() as scratch:
        moto = Moto(Path(scratch) / "moto.log")
        try:
            upload_share(moto, args.stores, DEFAULT_ROOT / f"s3-share-{args.stores}")
            print(f"load average {os.getloadavg()}")
            figures(moto, Path(scratch), args.stores, args.repeat, skip)
            print(f"load average {os.getloadavg()}")
        finally:
            moto.stop()


if __name__ == "__main__":
    main()
