"""A store that changes while mounted (docs/live-stores.md): zarr-python 3 writes, a mount with
`--metadata-ttl 1` follows.

The writer appends 4 planes to a (4, 256, 256) uint16 stack (a resize to 8), rewrites the first 4
and appends to a 1-D series. Files opened afresh after each change show it (`.npy` shape and
values, `.raw` size, `.tif` page count); a `.raw` held open across the append reads the version
it opened, whole; one held open across the rewrite fails with ESTALE, never a mix of versions.
Locally (compressed chunks through the cache, uncompressed ones read from their files, in C and
in Python) and over HTTP with ETags. Every wait is on an event (a stat showing the new size, a
fresh open showing the new values), with a generous bound.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

from mountutil import Mount, mount_in, mounted_many
from remoteutil import EtagHandler, http_server, http_server_process, remote_mount, s3_server
from zarrfs.engine.chunk_versions import ChunkVersions
from zarrfs.errors import StaleChunkError
from zarrfs.stores.store import ABSENT, Store, Versioned

PLANE = (256, 256)
PLANE_BYTES = 256 * 256 * 2
# Generous: the refresh comes a TTL (1 s) after the change, on a loaded machine.
WAIT_S = 60.0
# The daemon's line for the read that found a chunk changed under its open file.
STALE_LOG = (r"chunk .* (was written after the files reading it were opened|changed since the files reading "
             r"it first read it|is of an array removed from the store)",)


def planes(first: int, count: int, offset: int = 0) -> np.ndarray:
    """Planes `first`.. of the stack as a version of the writer writes them (`offset` tells versions apart)."""
    values = np.arange(first * PLANE_BYTES // 2, (first + count) * PLANE_BYTES // 2, dtype=np.uint64)
    return ((values * 7 + offset) % 65521).astype(np.uint16).reshape(count, *PLANE)


def write_store(root: Path, compressors: object, shards: tuple[int, ...] | None = None) -> zarr.Group:
    group = zarr.open_group(str(root), mode="w", zarr_format=3)
    stack = group.create_array("stack", shape=(4, *PLANE), chunks=(2, 128, 128), shards=shards, dtype="<u2",
                               compressors=compressors)
    stack[:] = planes(0, 4)
    series = group.create_array("series", shape=(10,), chunks=(4,), dtype="<f8", compressors=compressors)
    series[:] = np.arange(10.0)
    return group


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds. A failed read counts as not yet: a file opened before the
    refresh reads chunks rewritten since with ESTALE (numpy's `fromfile` says ValueError for it)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            if condition():
                return
        except (OSError, ValueError):
            pass
        assert time.monotonic() < deadline, f"{what} within {WAIT_S:.0f} s of a 1 s TTL"
        time.sleep(0.1)


def tif_pages(path: Path) -> int:
    with tifffile.TiffFile(path) as tif:
        return len(tif.pages)


def follow_the_writer(mount: Path, root: Path, compressors: object) -> None:
    """The scenario of issue 50 against a mount of `root` (written by `write_store`)."""
    old = planes(0, 4).tobytes()
    np.testing.assert_array_equal(np.load(mount / "stack.npy"), planes(0, 4))
    assert tif_pages(mount / "stack.tif") == 4

    # A .raw held open across an append reads the version it opened, whole.
    with open(mount / "stack.raw", "rb", buffering=0) as held:
        head = held.read(64 << 10)
        group = zarr.open_group(str(root), mode="a")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            group["stack"].resize((8, *PLANE))
            group["stack"][4:] = planes(4, 4)
            group["series"].append(np.arange(10.0, 15.0))
        wait_for(lambda: os.stat(mount / "stack.raw").st_size == 8 * PLANE_BYTES, "the .raw did not grow")
        rest = held.read()
    assert head + rest == old

    # Files opened afresh show the new store. (The kernel keeps a file's size for the attribute
    # timeout, the TTL: the held file's read to its old end told it the old size once more.)
    wait_for(lambda: np.load(mount / "stack.npy").shape == (8, *PLANE), "the .npy did not grow")
    np.testing.assert_array_equal(np.load(mount / "stack.npy"), np.concatenate([planes(0, 4), planes(4, 4)]))
    wait_for(lambda: tif_pages(mount / "stack.tif") == 8, "the .tif did not get 8 pages")
    wait_for(lambda: np.load(mount / "series.npy").shape == (15,), "the series did not grow")
    np.testing.assert_array_equal(np.load(mount / "series.npy"), np.arange(15.0))

    # A .raw held open across a rewrite of chunks it has yet to read fails: never a mix.
    wait_for(lambda: os.stat(mount / "stack.raw").st_size == 8 * PLANE_BYTES, "the .raw size did not settle")
    with open(mount / "stack.raw", "rb", buffering=0) as held:
        first = held.read(64 << 10)  # one chunk: (2, 128, 128) uint16 is 64 KiB
        # Pages the kernel cached for earlier opens of this version would serve it whole, as they
        # should: dropped, as memory pressure drops them, the reads come to the daemon.
        os.posix_fadvise(held.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        assert first == planes(0, 4).tobytes()[:64 << 10]
        time.sleep(0.02)  # the rewrite's mtimes after the open's reader began (a coarse clock's tick)
        group["stack"][:4] = planes(0, 4, offset=1)
        with pytest.raises(OSError) as failed:
            while held.read(1 << 20):
                pass
        assert failed.value.errno == errno.ESTALE

    # Opened afresh after the refresh: the rewritten planes, every page of the .tif too.
    new = np.concatenate([planes(0, 4, offset=1), planes(4, 4)])
    wait_for(lambda: np.array_equal(np.load(mount / "stack.npy"), new), "the rewrite did not show")
    wait_for(lambda: (mount / "stack.raw").read_bytes() == new.tobytes(), "the .raw did not show the rewrite")
    wait_for(lambda: np.array_equal(tifffile.imread(mount / "stack.tif"), new), "the .tif did not show the rewrite")

    # The stack removed: a file held open fails its next load, never reads fill value; chunk files
    # it holds open (read raw) still hold their version: served whole. The name goes.
    with open(mount / "stack.raw", "rb", buffering=0) as held:
        head = held.read(64 << 10)
        assert head == new.tobytes()[:64 << 10]
        shutil.rmtree(root / "stack")
        os.posix_fadvise(held.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        try:
            rest = held.read()
        except OSError as exc:
            assert exc.errno == errno.ESTALE
        else:
            assert compressors is None and head + rest == new.tobytes()
    wait_for(lambda: not (mount / "stack.npy").exists(), "the removed stack did not vanish")
    assert (mount / "series.npy").exists()


@pytest.mark.parametrize(("compressors", "shards"), [("auto", None), (None, None), ("auto", (2, 256, 256))],
                         ids=["zstd", "uncompressed", "sharded"])
def test_a_local_store_followed_while_written(tmp_path: Path, compressors: object,
                                              shards: tuple[int, ...] | None) -> None:
    root = tmp_path / "live.zarr"
    write_store(root, compressors, shards)
    # A cache of a few chunks: the held file's later chunks are loaded after the rewrite, not kept
    # from the reads before it (which would serve its version whole, as it should, and test nothing).
    with mounted_many([mount_in(tmp_path, root, "--metadata-ttl", "1", "--cache-size", "256K",
                                expected_log=STALE_LOG)]) as (mount,):
        follow_the_writer(mount.root, root, compressors)


@contextmanager
def http_mount(tmp_path: Path, root: Path) -> Iterator[Mount]:
    # The server answers from its own process. In the test's process it stopped answering for
    # minutes in two clean-clone runs (chunk reads, then the metadata refresh of zarr.json, timed
    # out 4 x 30 s while the server's thread sat idle): most likely a call this process makes with
    # the GIL held (an open's fstat, say) waited on the daemon, whose refresh waited on the server.
    with http_server_process(root.parent, "EtagHandler") as url, mounted_many([
            remote_mount(tmp_path, f"{url}/{root.name}", "--metadata-ttl", "1", "--cache-size", "256K",
                         expected_log=STALE_LOG)]) as (mount,):
        yield mount


def test_an_http_store_followed_while_written(tmp_path: Path) -> None:
    """Over HTTP a chunk's version is the ETag of the answer that carried it: a held file whose
    chunks were evicted, reloaded after a rewrite with another ETag, fails the read."""
    root = tmp_path / "served" / "live.zarr"
    write_store(root, "auto")
    with http_mount(tmp_path, root) as mount:
        mnt = mount.root
        np.testing.assert_array_equal(np.load(mnt / "stack.npy"), planes(0, 4))
        with open(mnt / "stack.raw", "rb", buffering=0) as held:
            assert held.read() == planes(0, 4).tobytes()  # 8 chunks through a cache of 3: the first evicted
            group = zarr.open_group(str(root), mode="a")
            group["stack"][:4] = planes(0, 4, offset=1)
            os.posix_fadvise(held.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # the reads come to the daemon
            held.seek(0)
            with pytest.raises(OSError) as failed:
                while held.read(1 << 20):
                    pass
            assert failed.value.errno == errno.ESTALE
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                group["stack"].resize((8, *PLANE))
                group["stack"][4:] = planes(4, 4)
        new = np.concatenate([planes(0, 4, offset=1), planes(4, 4)])
        wait_for(lambda: np.array_equal(np.load(mnt / "stack.npy"), new), "the change did not show")
        wait_for(lambda: tif_pages(mnt / "stack.tif") == 8, "the .tif did not get 8 pages")
        # Chunks a held file had yet to read, rewritten: their Last-Modified, by the server's clock,
        # is after the reader began.
        with open(mnt / "stack.raw", "rb", buffering=0) as held:
            assert held.read(64 << 10) == new.tobytes()[:64 << 10]
            time.sleep(3)  # past the second resolution of Last-Modified and Date (REMOTE_SLACK_NS)
            group["stack"][:4] = planes(0, 4, offset=2)
            os.posix_fadvise(held.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            with pytest.raises(OSError) as failed:
                while held.read(1 << 20):
                    pass
            assert failed.value.errno == errno.ESTALE


def test_a_chunk_version_comes_with_its_bytes(tmp_path: Path) -> None:
    """Local: the file's identity from the descriptor read; HTTP: the answer's ETag, one request
    per chunk (no HEAD); absent keys are ABSENT."""
    root = tmp_path / "served" / "live.zarr"
    write_store(root, "auto")
    local = Store.open(str(root))
    got = local.get_versioned("stack/c/0/0/0")
    status = os.stat(root / "stack/c/0/0/0")
    assert got.data == (root / "stack/c/0/0/0").read_bytes()
    assert got.version == (status.st_ino, status.st_size, status.st_mtime_ns) and got.modified_ns == status.st_mtime_ns
    assert local.get_versioned("stack/c/9/0/0") == Versioned(None, ABSENT)
    with http_server(root.parent, EtagHandler) as server:
        remote = Store.open(f"{server.url}/{root.name}")
        got = remote.get_versioned("stack/c/0/0/0")
        assert got.data == (root / "stack/c/0/0/0").read_bytes()
        assert isinstance(got.version, str) and got.version.startswith('"')
        assert got.modified_ns == int(status.st_mtime) * 1_000_000_000  # Last-Modified: whole seconds
        assert isinstance(got.clock_offset_ns, int)  # the server's Date against our clock
        assert server.counter[f"/{root.name}/stack/c/0/0/0"] == 1
        assert remote.get_versioned("stack/c/9/0/0").version == ABSENT


def test_a_reader_serves_one_version_of_each_chunk() -> None:
    versions = ChunkVersions("store: array /a")
    versions.check((0,), "c/0", Versioned(b"x", '"1"'))
    versions.check((0,), "c/0", Versioned(b"x", '"1"'))  # the same version again
    versions.check((1,), "c/1", Versioned(b"x", None))  # a store that tells none: nothing to check
    with pytest.raises(StaleChunkError, match=r"array /a: chunk 'c/0' changed") as changed:
        versions.check((0,), "c/0", Versioned(b"y", '"2"'))
    assert changed.value.errno == errno.ESTALE
    versions.check((2,), "c/2", Versioned(None, ABSENT))
    with pytest.raises(StaleChunkError):  # absent (fill value) first, present now: a change
        versions.check((2,), "c/2", Versioned(b"z", '"3"'))
    with pytest.raises(StaleChunkError, match="written after"):  # a local file modified since the reader began
        versions.check((3,), "c/3", Versioned(b"w", (1, 1, versions.began_ns + 1), versions.began_ns + 1))
    # A remote Last-Modified by a server clock an hour ahead: a second after the reader began is within
    # the headers' resolution; three seconds after is a change.
    ahead = 3600 * 10**9
    versions.check((4,), "c/4", Versioned(b"v", '"4"', versions.began_ns + ahead + 10**9, ahead))
    with pytest.raises(StaleChunkError, match="written after"):
        versions.check((5,), "c/5", Versioned(b"v", '"5"', versions.began_ns + ahead + 3 * 10**9, ahead))


def test_an_s3_store_followed_while_written(tmp_path: Path) -> None:
    """S3 (moto): a chunk's version is the ETag of the GET that carried it; a held file whose chunks
    were evicted, reloaded after the writer put them anew with other bytes, fails the read."""
    root = tmp_path / "live.zarr"
    write_store(root, "auto")
    with s3_server() as server:
        server.client().create_bucket(Bucket="live")
        server.upload("live", root, "live.zarr")
        args = ("-S", "key=testing", "-S", "secret=testing", "-S", f"endpoint_url={server.endpoint}",
                "-S", 'client_kwargs={"region_name": "us-east-1"}')
        with mounted_many([remote_mount(tmp_path, "s3://live/live.zarr", *args, "--metadata-ttl", "1",
                                        "--cache-size", "256K", expected_log=STALE_LOG)]) as (mount,):
            mnt = mount.root
            with open(mnt / "stack.raw", "rb", buffering=0) as held:
                assert held.read() == planes(0, 4).tobytes()  # 8 chunks through a cache of 3
                zarr.open_group(str(root), mode="a")["stack"][:4] = planes(0, 4, offset=1)
                server.upload("live", root, "live.zarr")
                os.posix_fadvise(held.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                held.seek(0)
                with pytest.raises(OSError) as failed:
                    while held.read(1 << 20):
                        pass
                assert failed.value.errno == errno.ESTALE
            wait_for(lambda: np.array_equal(np.load(mnt / "stack.npy"), planes(0, 4, offset=1)),
                     "the rewrite did not show")


def test_an_s3_share_shows_the_stores_a_pipeline_adds(tmp_path: Path) -> None:
    """A bucket prefix of stores mounted whole with `--metadata-ttl 1`: a store put there after the
    mount's first listing appears within a TTL, its data right. fsspec's S3 client keeps every
    listing until told otherwise; the mount is what decides when to list again."""
    first, second = tmp_path / "share" / "day-1.zarr", tmp_path / "later" / "day-2.zarr"
    zarr.create_array(str(first), shape=(8, 8), chunks=(4, 4), dtype="<u2")[...] = planes(0, 1)[0, :8, :8]
    zarr.create_array(str(second), shape=(8, 8), chunks=(4, 4), dtype="<u2")[...] = planes(1, 1)[0, :8, :8]
    with s3_server() as server:
        server.client().create_bucket(Bucket="products")
        server.upload("products", first, "share/day-1.zarr")
        args = ("-S", "key=testing", "-S", "secret=testing", "-S", f"endpoint_url={server.endpoint}",
                "-S", 'client_kwargs={"region_name": "us-east-1"}')
        with mounted_many([remote_mount(tmp_path, "s3://products/share", *args, "--metadata-ttl", "1")]) as (mount,):
            assert "day-1.zarr" in os.listdir(mount.root)
            server.upload("products", second, "share/day-2.zarr")
            wait_for(lambda: "day-2.zarr" in os.listdir(mount.root), "the added store did not show")
            np.testing.assert_array_equal(np.load(mount.root / "day-2.zarr/day-2.npy"), planes(1, 1)[0, :8, :8])
