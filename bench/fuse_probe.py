#!/usr/bin/env python3
"""Probe mfusepy + libfuse 3 behaviour and performance on this machine.

Two parts:

* ``serve``: a configurable in-memory file system (one data file ``/file``
  plus ``/.stats``, a direct_io file whose read returns, and resets, a JSON
  histogram of the request sizes that reached ``read()``).
* ``bench``: mounts ``serve`` variants (VARIANTS: threading, keep_cache,
  direct_io, bdi read_ahead_kb, simulated decode/latency per request; and
  ``--read-mode``: what read() returns) interleaved across repetitions, always
  unmounting, and reports medians of: ``dd bs=1M`` first read and reread after
  reopen, the daemon's CPU seconds for the first read, the request sizes that
  reached read(), and 4 KiB random ``pread`` p50/p99, warm and with the file's
  page cache dropped (posix_fadvise DONTNEED).

Example::

    python bench/fuse_probe.py bench --size 1G --repeat 5 --out /tmp/probe.json
    python bench/fuse_probe.py bench --npread 0 --read-mode ctypes slice fresh \
        --variants "st keep_cache ra1024" "mt direct_io"
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import hashlib
import json
import os
import random
import re
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

DATA = "/file"
STATS = "/.stats"
READ_MODES = ("slice", "ctypes", "memoryview", "bytearray", "fresh", "slice-mallopt", "fresh-mallopt", "ctypes-mallopt")


def parse_size(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    m = re.fullmatch(r"(\d+)([KMG]?)i?B?", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size: {text!r}")
    return int(m.group(1)) * units[m.group(2)]


# --------------------------------------------------------------------------- serve


def serve(args: argparse.Namespace) -> None:
    import mfusepy

    size: int = args.size
    if args.read_mode.endswith("-mallopt"):
        # Keep freed memory in the heap: no per-read mmap/munmap, no trimming back to the host.
        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        libc.mallopt(M_MMAP_THRESHOLD, 64 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
        args.read_mode = args.read_mode.removesuffix("-mallopt")
    # Deterministic content; bytearray so ctypes.from_buffer can alias it.
    data = bytearray(np.arange(size // 8 + 1, dtype="<u8").tobytes()[:size])
    if args.npy:  # serve a valid .npy (header + uint64 arange) instead of raw bytes
        import io
        hdr = io.BytesIO()
        np.lib.format.write_array_header_1_0(hdr, {"descr": "<u8", "fortran_order": False, "shape": (size // 8,)})
        data = bytearray(hdr.getvalue()) + data[: size // 8 * 8]
        size = len(data)
    frozen = bytes(data) if args.read_mode in ("slice", "memoryview") else b""
    view = memoryview(frozen) if args.read_mode == "memoryview" else None
    counts: Counter[int] = Counter()
    lock = threading.Lock()
    now = time.time()
    init_report: dict[str, Any] = {}

    class Probe(mfusepy.Operations):
        use_ns = True

        def init_with_config(self, conn: Any, config: Any) -> None:
            for name, _ in conn._fields_[:12]:
                init_report["conn_before." + name] = getattr(conn, name)
            if config is not None:
                for f in config._fields_:
                    v = getattr(config, f[0])
                    init_report["config_before." + f[0]] = v.decode() if isinstance(v, bytes) else v
            if args.init_max_read is not None:
                conn.max_read = args.init_max_read
            if args.init_max_readahead is not None:
                conn.max_readahead = args.init_max_readahead
            if args.init_max_background is not None:
                conn.max_background = args.init_max_background
                conn.congestion_threshold = args.init_max_background * 3 // 4
            if args.init_want_clear:
                conn.want &= ~args.init_want_clear
            if args.init_want_set:
                conn.want |= args.init_want_set & conn.capable
            if config is not None:
                if args.kernel_cache:
                    config.kernel_cache = 1
                config.attr_timeout = args.timeout
                config.entry_timeout = args.timeout
                config.negative_timeout = args.timeout
            for name, _ in conn._fields_[:12]:
                init_report["conn_after." + name] = getattr(conn, name)
            if args.ready_fd is not None:
                os.write(args.ready_fd, b"1")
                os.close(args.ready_fd)

        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            ns = time.time_ns() if args.unstable_mtime else int(now * 1e9)
            if path == "/":
                mode, n, nlink = stat.S_IFDIR | 0o555, 0, 2
            elif path == DATA:
                mode, n, nlink = stat.S_IFREG | 0o444, size, 1
            elif path == STATS:
                mode, n, nlink = stat.S_IFREG | 0o444, 0, 1
            else:
                raise mfusepy.FuseOSError(errno.ENOENT)
            return {"st_mode": mode, "st_size": n, "st_nlink": nlink, "st_ino": 2 if path == DATA else 3,
                    "st_mtime": ns, "st_ctime": ns, "st_atime": ns}

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", DATA[1:], STATS[1:]]

        def open(self, path: str, fi: Any) -> int:
            if path not in (DATA, STATS):
                raise mfusepy.FuseOSError(errno.ENOENT)
            if fi.flags & (os.O_WRONLY | os.O_RDWR):
                raise mfusepy.FuseOSError(errno.EROFS)
            if path == STATS:
                fi.direct_io = 1
                fi.fh = 1
                return 0
            fi.fh = 0
            if args.keep_cache:
                fi.keep_cache = 1
            if args.direct_io:
                fi.direct_io = 1
            return 0

        def read(self, path: str, n: int, offset: int, fi: Any) -> Any:
            if fi.fh == 1:
                with lock:
                    text = json.dumps({"sizes": counts, "init": init_report}, default=str).encode()
                    counts.clear()
                return text[offset:offset + n]
            if args.log_sizes:
                with lock:
                    counts[n] += 1
            end = min(offset + n, size)
            if offset >= end:
                return b""
            if args.sim_decode:  # GIL-releasing CPU work per request (~decode), ~1-2 GB/s per core
                hashlib.sha256(memoryview(data)[offset:end]).digest()
            if args.sim_latency_ms:  # blocking wait per request (~remote fetch)
                time.sleep(args.sim_latency_ms / 1000)
            mode = args.read_mode
            if mode == "ctypes":  # zero-copy alias of the preallocated buffer
                return (ctypes.c_char * (end - offset)).from_buffer(data, offset)
            if mode == "slice":  # bytes slice: new bytes object, one copy
                return frozen[offset:end]
            if mode == "memoryview":  # returned as-is to test what mfusepy accepts
                return view[offset:end]  # type: ignore[index]
            if mode == "bytearray":
                return data[offset:end]
            # "fresh": allocate and fill a new buffer per call (the costly pattern)
            return np.arange(offset // 8, (offset // 8) + (end - offset + 7) // 8, dtype="<u8").tobytes()[:end - offset]

    kwargs: dict[str, Any] = dict(foreground=True, nothreads=args.nothreads, ro=True,
                                  fsname="fuseprobe", subtype="fuseprobe")
    for opt in args.opt or []:
        k, _, v = opt.partition("=")
        kwargs[k] = v if v else True
    mfusepy.FUSE(Probe(), args.mountpoint, raw_fi=True, **kwargs)


# --------------------------------------------------------------------------- helpers


def is_mounted(mnt: str) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mnt for line in f)


def bdi_path(mnt: str) -> Path:
    dev = os.stat(mnt).st_dev
    return Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb")


class Mount:
    """Run ``serve`` in a foreground subprocess; always unmount on exit."""

    def __init__(self, mnt: str, size: int, serve_args: list[str], ra_kb: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.mnt, self.size, self.serve_args, self.ra_kb, self.env = mnt, size, serve_args, ra_kb, env
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> "Mount":
        os.makedirs(self.mnt, exist_ok=True)
        cmd = [sys.executable, __file__, "serve", self.mnt, "--size", str(self.size), *self.serve_args]
        self.proc = subprocess.Popen(cmd, env={**os.environ, **(self.env or {})}, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not is_mounted(self.mnt):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"serve exited {self.proc.returncode}: {self.proc.stderr.read().decode()}")
                if time.monotonic() > deadline:
                    raise RuntimeError("mount timeout")
                time.sleep(0.02)
            os.stat(os.path.join(self.mnt, "file"))  # waits for INIT
            if self.ra_kb is not None:
                bdi_path(self.mnt).write_text(str(self.ra_kb))
        except BaseException:
            self.__exit__()
            raise
        return self

    def cpu(self) -> float:
        """CPU seconds (user+sys, all threads) used by the daemon so far."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stats(self) -> dict[str, Any]:
        with open(os.path.join(self.mnt, ".stats"), "rb") as f:
            return json.loads(f.read(1 << 20))

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt])


def dd(path: str) -> float:
    """Sequential read with dd bs=1M; returns bytes/s."""
    t = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M"], check=True, stderr=subprocess.DEVNULL)
    dt = time.perf_counter() - t
    return os.stat(path).st_size / dt


def prand(path: str, n: int, drop: bool, seed: int = 0) -> list[float]:
    """n random 4 KiB preads (distinct pages); returns latencies in seconds."""
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = os.fstat(fd).st_size // 4096
        offs = [p * 4096 for p in random.Random(seed).sample(range(pages), n)]
        if drop:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        else:
            while os.read(fd, 1 << 20):  # warm the page cache through this fd
                pass
        lat = []
        pc = time.perf_counter
        for off in offs:
            t = pc()
            os.pread(fd, 4096, off)
            lat.append(pc() - t)
        return lat
    finally:
        os.close(fd)


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


# --------------------------------------------------------------------------- bench

VARIANTS: dict[str, tuple[list[str], int | None]] = {
    # name: (serve args, bdi read_ahead_kb or None)
    "mt default": ([], None),
    "mt keep_cache+kernel_cache": (["--keep-cache", "--kernel-cache"], None),
    "mt ra1024": ([], 1024),
    "mt keep_cache ra1024": (["--keep-cache", "--kernel-cache"], 1024),
    "mt keep_cache ra4096": (["--keep-cache", "--kernel-cache"], 4096),
    "mt keep_cache ra1024 bg64": (["--keep-cache", "--kernel-cache", "--init-max-background", "64"], 1024),
    "mt direct_io": (["--direct-io"], None),
    "mt direct_io splice": (["--direct-io", "--init-want-set", "0x180"], None),
    "st default": (["--nothreads"], None),
    "st keep_cache+kernel_cache": (["--nothreads", "--keep-cache", "--kernel-cache"], None),
    "st ra1024": (["--nothreads"], 1024),
    "st keep_cache ra1024": (["--nothreads", "--keep-cache", "--kernel-cache"], 1024),
    "st keep_cache ra4096": (["--nothreads", "--keep-cache", "--kernel-cache"], 4096),
    "st direct_io": (["--nothreads", "--direct-io"], None),
    "mt keep_cache ra1024 +decode": (["--keep-cache", "--kernel-cache", "--sim-decode"], 1024),
    "st keep_cache ra1024 +decode": (["--nothreads", "--keep-cache", "--kernel-cache", "--sim-decode"], 1024),
    "mt keep_cache ra4096 +decode": (["--keep-cache", "--kernel-cache", "--sim-decode"], 4096),
    "mt keep_cache ra1024 +2ms": (["--keep-cache", "--kernel-cache", "--sim-latency-ms", "2"], 1024),
    "st keep_cache ra1024 +2ms": (["--nothreads", "--keep-cache", "--kernel-cache", "--sim-latency-ms", "2"], 1024),
    "mt keep_cache ra4096 +2ms": (["--keep-cache", "--kernel-cache", "--sim-latency-ms", "2"], 4096),
    "mt keep_cache ra16384 +2ms": (["--keep-cache", "--kernel-cache", "--sim-latency-ms", "2"], 16384),
    "mt keep_cache ra16384 bg64 +2ms": (["--keep-cache", "--kernel-cache", "--sim-latency-ms", "2",
                                         "--init-max-background", "64"], 16384),
}


def bench(args: argparse.Namespace) -> None:
    results: dict[str, Any] = {}
    mnt = args.mountpoint
    names = args.variants or list(VARIANTS)
    modes = args.read_mode
    for rep in range(args.repeat):
        for name, mode in [(n, m) for n in names for m in modes]:  # interleave variants across repetitions
            sargs, ra = VARIANTS[name]
            sargs = [*sargs, "--log-sizes", "--read-mode", mode]
            key = name if len(modes) == 1 else f"{name} [{mode}]"
            r = results.setdefault(key, {"dd1": [], "dd2": [], "sizes1": None, "sizes2": None,
                                          "warm_p50": [], "warm_p99": [], "cold_p50": [], "cold_p99": [],
                                          "cold_sizes": None, "cpu1": [], "cpu2": []})
            with Mount(mnt, args.size, sargs, ra) as m:
                f = os.path.join(mnt, "file")
                m.stats()
                c0 = m.cpu()
                r["dd1"].append(dd(f))
                c1 = m.cpu()
                r["sizes1"] = m.stats()["sizes"]
                c2 = m.cpu()
                r["dd2"].append(dd(f))
                c3 = m.cpu()
                r["sizes2"] = m.stats()["sizes"]
                r["cpu1"].append(c1 - c0)
                r["cpu2"].append(c3 - c2)
                if args.npread:
                    w = prand(f, args.npread, drop=False, seed=rep)
                    m.stats()
                    c = prand(f, args.npread, drop=True, seed=rep + 100)
                    r["cold_sizes"] = m.stats()["sizes"]
                    r["warm_p50"].append(pct(w, 50))
                    r["warm_p99"].append(pct(w, 99))
                    r["cold_p50"].append(pct(c, 50))
                    r["cold_p99"].append(pct(c, 99))
            print(rep, key, {k: (v[-1] if isinstance(v, list) and v else v) for k, v in r.items()},
                  file=sys.stderr, flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    med = lambda xs: float(np.median(xs)) if xs else float("nan")  # noqa: E731
    print(f"read_mode={' '.join(modes)} size={args.size} repeat={args.repeat}")
    print("| variant | dd 1st GB/s | dd 2nd GB/s | daemon CPU s 1st/2nd | req sizes 1st (KiB:count) | reqs 2nd |"
          " warm p50/p99 µs | cold p50/p99 µs | cold req sizes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        def hist(h: dict[str, int] | None) -> str:
            if not h:
                return "0"
            top = sorted(h.items(), key=lambda kv: -kv[1])[:3]
            return ", ".join(f"{int(k) // 1024}:{v}" for k, v in top)
        print(f"| {name} | {med(r['dd1']) / 1e9:.2f} | {med(r['dd2']) / 1e9:.2f} |"
              f" {med(r['cpu1']):.2f} / {med(r['cpu2']):.2f} | {hist(r['sizes1'])} |"
              f" {hist(r['sizes2'])} | {med(r['warm_p50']) * 1e6:.1f} / {med(r['warm_p99']) * 1e6:.1f} |"
              f" {med(r['cold_p50']) * 1e6:.1f} / {med(r['cold_p99']) * 1e6:.1f} | {hist(r['cold_sizes'])} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("mountpoint")
    s.add_argument("--size", type=parse_size, default=1 << 30)
    s.add_argument("--nothreads", action="store_true")
    s.add_argument("--keep-cache", action="store_true", help="fi.keep_cache=1 in open")
    s.add_argument("--kernel-cache", action="store_true", help="config.kernel_cache=1 in init")
    s.add_argument("--direct-io", action="store_true", help="fi.direct_io=1 in open")
    s.add_argument("--timeout", type=float, default=1.0, help="attr/entry/negative timeout")
    s.add_argument("--read-mode", choices=READ_MODES, default="ctypes")
    s.add_argument("--log-sizes", action="store_true")
    s.add_argument("--sim-decode", action="store_true", help="sha256 the requested range (GIL released)")
    s.add_argument("--sim-latency-ms", type=float, default=0.0, help="sleep per request")
    s.add_argument("--unstable-mtime", action="store_true", help="getattr reports mtime=now (cache killer)")
    s.add_argument("--npy", action="store_true", help="serve /file as a .npy of uint64 arange")
    s.add_argument("--init-max-read", type=int)
    s.add_argument("--init-max-readahead", type=int)
    s.add_argument("--init-max-background", type=int)
    s.add_argument("--init-want-set", type=lambda x: int(x, 0), default=0)
    s.add_argument("--init-want-clear", type=lambda x: int(x, 0), default=0)
    s.add_argument("--ready-fd", type=int)
    s.add_argument("-o", "--opt", action="append", help="extra FUSE(...) kwarg: key[=value]")
    b = sub.add_parser("bench")
    b.add_argument("--mountpoint", default="/tmp/fuseprobe_mnt")
    b.add_argument("--size", type=parse_size, default=1 << 30)
    b.add_argument("--repeat", type=int, default=3)
    b.add_argument("--npread", type=int, default=20000)
    b.add_argument("--read-mode", choices=READ_MODES, nargs="+", default=["ctypes"])
    b.add_argument("--variants", nargs="*", choices=list(VARIANTS))
    b.add_argument("--out")
    args = p.parse_args()
    serve(args) if args.cmd == "serve" else bench(args)


if __name__ == "__main__":
    main()
