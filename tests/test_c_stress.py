"""A real mount's C read path under load (issue 33): what scripts/test_sanitizers.sh runs with the
extensions built under AddressSanitizer, UndefinedBehaviorSanitizer and ThreadSanitizer.

Threads read one open file together (random and sequential reads on one descriptor) and several
files each, of a compressed array (decoded chunks, answered from memory) and an uncompressed one
(chunk files, answered with preadv), while a cache four times smaller than the data evicts chunks,
a writer replaces chunk files under the readers (with the same bytes: a new identity, so a read
of a replaced file by a reader older than it is ESTALE, docs/live-stores.md, and never wrong
bytes), and a one-second metadata TTL drops the readers (files opened after it get new readers,
the old ones' chunks leave C). Every byte read is checked, and each read first drops its pages from the kernel's page cache, so that it reaches
the daemon; the mount's log must hold nothing but the TTL's own lines (a sanitizer's report, which
goes to the daemon's stderr, fails the test)."""

from __future__ import annotations

import errno
import os
import random
import re
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from mountutil import mount_in, mounted_many
from zarr.codecs import ZstdCodec

SECONDS = float(os.environ.get("ZARRFS_STRESS_SECONDS", "20"))
SHAPE, CHUNKS = (32, 256, 256), (4, 64, 64)  # 4 MiB of uint16 per array, 128 chunks of 32 KiB


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("stress") / "s.zarr"
    group = zarr.open_group(str(root), mode="w")
    truths = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, compressors in (("z", [ZstdCodec(level=1)]), ("u", None)):
            truth = np.random.default_rng(len(name)).integers(0, 1 << 16, SHAPE, dtype="<u2")
            group.create_array(name, shape=SHAPE, chunks=CHUNKS, dtype="<u2", compressors=compressors)[...] = truth
            truths[name] = truth
    return root, truths


def test_reads_through_c_under_evictions_file_replacements_and_a_metadata_ttl(
        tmp_path: Path, source: tuple[Path, dict[str, np.ndarray]]) -> None:
    root, truths = source
    mount = mount_in(tmp_path, root, "--cache-size", "1M", "--metadata-ttl", "1", foreground=True,
                     expected_log=[r" ERROR .*array /u: chunk .*(written after|changed since)"])
    wrong: list[str] = []
    reads = {"random": 0, "sequential": 0, "stale": 0}
    stop = threading.Event()
    failures: list[BaseException] = []

    def expected(name: str, size: int) -> bytes:
        data = truths[name].tobytes()
        return (mount.root / f"{name}.npy").read_bytes()[:size - len(data)] + data

    with mounted_many([mount]):
        files = {name: expected(name, (mount.root / f"{name}.npy").stat().st_size) for name in truths}

        def pread(fd: int, size: int, offset: int) -> bytes:
            """A read that reaches the daemon: the pages it covers leave the kernel's page cache first."""
            os.posix_fadvise(fd, offset, size, os.POSIX_FADV_DONTNEED)
            return os.pread(fd, size, offset)

        def check(name: str, offset: int, fd: int, size: int) -> None:
            """Read and check; a read of the rewritten array may be ESTALE, never wrong bytes."""
            try:
                got = pread(fd, size, offset)
            except OSError as error:
                if name != "u" or error.errno != errno.ESTALE:
                    raise
                reads["stale"] += 1
                return
            if got != files[name][offset:offset + len(got)]:
                wrong.append(f"{name} @{offset}+{len(got)}")

        def random_reads(fd: int, name: str, seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set():
                size = rng.choice([1, 4096, 5000, 65536, 1 << 20])
                check(name, rng.randrange(len(files[name])), fd, size)
                reads["random"] += 1

        def sequential_reads(fd: int, name: str, size: int) -> None:
            while not stop.is_set():
                for offset in range(0, len(files[name]), size):
                    check(name, offset, fd, size)
                    reads["sequential"] += 1
                    if stop.is_set():
                        return

        def reopening(name: str, seed: int) -> None:  # new opens: new readers once the TTL passed
            rng = random.Random(seed)
            while not stop.is_set():
                fd = os.open(mount.root / f"{name}.npy", os.O_RDONLY)
                try:
                    for _ in range(20):
                        check(name, rng.randrange(len(files[name])), fd, 1 << 16)
                        reads["random"] += 1
                finally:
                    os.close(fd)

        def replace_chunk_files(seed: int) -> None:  # a writer rewriting "u" with the same values
            rng = random.Random(seed)
            chunk_files = [p for p in (root / "u").rglob("*") if p.is_file() and p.name != "zarr.json"]
            while not stop.is_set():
                target = rng.choice(chunk_files)
                fresh = target.with_name(target.name + ".new")
                fresh.write_bytes(target.read_bytes())
                os.replace(fresh, target)
                time.sleep(0.002)

        def guarded(work, *args) -> None:  # noqa: ANN001
            try:
                work(*args)
            except BaseException as error:  # noqa: BLE001 - reported by the test
                failures.append(error)
                stop.set()

        shared = {name: os.open(mount.root / f"{name}.npy", os.O_RDONLY) for name in truths}
        workers = [(random_reads, shared["z"], "z", 1), (random_reads, shared["z"], "z", 2),
                   (sequential_reads, shared["z"], "z", 1 << 17),  # one open file, random and sequential
                   (random_reads, shared["u"], "u", 3), (sequential_reads, shared["u"], "u", 1 << 20),
                   (reopening, "z", 4), (reopening, "u", 5), (replace_chunk_files, 6)]
        threads = [threading.Thread(target=guarded, args=worker) for worker in workers]
        try:
            for thread in threads:
                thread.start()
            stop.wait(SECONDS)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
            for fd in shared.values():
                os.close(fd)
        stats = (mount.root / ".zarrfs-stats.json").read_text()
    assert not failures, failures
    assert not wrong, f"{len(wrong)} reads gave wrong bytes: {wrong[:5]}"
    assert reads["random"] > 100 and reads["sequential"] > 20, reads
    answered_in_c = re.search(r'"answered_in_c": (\d+)', stats)
    assert answered_in_c is not None and int(answered_in_c.group(1)) > 100, stats  # C did serve under load
