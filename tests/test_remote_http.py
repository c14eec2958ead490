"""zarrfs mounted over HTTP from a threaded Range server on 127.0.0.1.

Every array of the served stores is read through a real mount and compared
with its oracle; the number of requests for listing a consolidated hierarchy
of 1,000 arrays is counted on the server; --metadata-ttl makes new arrays
appear; a server that cannot list is said to be so.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import numpy as np
import pytest
import zarr

from mountutil import Mount, mounted_many
from oracles import HierarchyOracle, Oracle
from remoteutil import HttpServer, RangeHandler, http_server, remote_mount, write_sources
from zarrfs.engine.engine import Engine
from zarrfs.fuse import mount as fuse_mount
from zarrfs.hierarchy import Hierarchy
from zarrfs.model.meta import ArrayMeta
from zarrfs.stores.store import Store
from zarrfs.files.tree import source_name

ARRAYS = ["zp3-sharding-end", "zp3-sharding-start", "ts3-sharding-start-blank", "zp3-codec-blosc-lz4-shuffle",
          "zp2-compressor-lzma", "zp3-fill-nan-missing", "zp3-root-array"]
HIERARCHIES = ["h2", "h3", "h2c", "h3c"]
MANY = 1000  # arrays in the big consolidated hierarchies


@dataclass(frozen=True)
class Served:
    root: Path
    arrays: dict[str, Oracle]
    hierarchies: dict[str, HierarchyOracle]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    root = tmp_path_factory.mktemp("www")
    arrays, hierarchies = write_sources(root, ARRAYS, HIERARCHIES)
    return Served(root, arrays, hierarchies)


@pytest.fixture(scope="module")
def server(served: Served) -> Iterator[HttpServer]:
    with http_server(served.root) as running:
        yield running


def url_of(server: HttpServer, root: Path, store: Path) -> str:
    return f"{server.url}/{store.relative_to(root).as_posix()}"


def npy_path(mount: Mount, oracle: Oracle) -> Path:
    """Where an oracle array appears: under its node path, or under the store's name for a root array."""
    return mount / f"{oracle.node or source_name(oracle.store.name)}.npy"


def test_every_array_through_an_http_mount(served: Served, server: HttpServer, tmp_path: Path) -> None:
    mounts = {name: remote_mount(tmp_path, url_of(server, served.root, oracle.store), name=name)
              for name, oracle in served.arrays.items()}
    mounts |= {label: remote_mount(tmp_path, url_of(server, served.root, h.store), name=label)
               for label, h in served.hierarchies.items()}
    with mounted_many(list(mounts.values())):
        for name, oracle in served.arrays.items():
            got = np.load(npy_path(mounts[name], oracle))
            want = np.ascontiguousarray(oracle.expected)
            np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=name)
            assert (got.dtype.kind, got.dtype.itemsize) == (want.dtype.kind, want.dtype.itemsize), name
        for label, hierarchy in served.hierarchies.items():
            for path, spec in hierarchy.nodes.items():
                if spec.kind == "array":
                    got = np.load(mounts[label] / f"{path}.npy")
                    np.testing.assert_array_equal(got, spec.expected, err_msg=f"{label}/{path}")
                else:
                    listing = sorted(p.name for p in (mounts[label] / path).iterdir())
                    for child in spec.children:
                        assert child in listing or f"{child}.npy" in listing, (label, path, child)


def read_ahead_kb(mountpoint: Path) -> int:
    """The kernel readahead of a mount, from its backing device's bdi knob."""
    device = os.stat(mountpoint).st_dev
    return int(Path(f"/sys/class/bdi/{os.major(device)}:{os.minor(device)}/read_ahead_kb").read_text())


@pytest.mark.skipif(os.geteuid() != 0, reason="zarrfs sets the readahead only as root")
def test_readahead_is_4_mib_for_a_local_store_and_1_mib_for_a_remote_one(
        served: Served, server: HttpServer, tmp_path: Path) -> None:
    """4 MiB keeps four 1 MiB requests in flight; a remote store keeps 1 MiB so that readers
    waiting on it hold few of the kernel's readahead slots (zarrfs/fuse/mount.py raise_readahead)."""
    store = served.arrays["zp3-root-array"].store
    local = Mount(store, tmp_path / "local", tmp_path / "local.log")
    remote = remote_mount(tmp_path, url_of(server, served.root, store), name="remote")
    with mounted_many([local, remote]):
        assert (read_ahead_kb(local.root), read_ahead_kb(remote.root)) == (4096, 1024)


def test_the_readahead_is_raised_only_after_the_kernel_applied_the_init_reply(tmp_path: Path) -> None:
    """The daemon raises the knob from its FUSE init, before the kernel applies the INIT reply,
    which sets the knob to the smaller of its value and the reply's: a value written before that
    would be undone (a remote mount kept 128 KiB once in CI). Here a thread plays the kernel,
    50 ms late; the knob must end at the raised value."""
    knob = tmp_path / "read_ahead_kb"
    knob.write_text("128")

    def kernel_applies_init_reply() -> None:
        time.sleep(0.05)
        knob.write_text(str(min(int(knob.read_text()), fuse_mount.INIT_READ_AHEAD_KB)))

    kernel = threading.Thread(target=kernel_applies_init_reply)
    kernel.start()
    fuse_mount.set_after_init(knob, 4096)
    kernel.join()
    assert knob.read_text() == "4096"


# --------------------------------------------------------------- metadata


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """v2 and v3 hierarchies of 10 groups x 100 arrays, consolidated, no chunks written."""
    root = tmp_path_factory.mktemp("many")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for zarr_format in (2, 3):
            top = zarr.open_group(str(root / f"m{zarr_format}.zarr"), mode="w", zarr_format=zarr_format)
            for i in range(10):
                group = top.create_group(f"g{i}")
                for j in range(MANY // 10):
                    group.create_array(f"a{j}", shape=(3, 5), chunks=(2, 2), dtype="<i2", fill_value=j)
            zarr.consolidate_metadata(str(root / f"m{zarr_format}.zarr"), zarr_format=zarr_format)
    return root


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_ls_lR_of_1000_consolidated_arrays_costs_at_most_3_requests(
        many: Path, zarr_format: int, tmp_path: Path) -> None:
    with http_server(many) as server:
        with mounted_many([remote_mount(tmp_path, f"{server.url}/m{zarr_format}.zarr")]) as (mount,):
            listing = subprocess.run(["ls", "-lR", str(mount.root)], capture_output=True, text=True, check=True)
            requests = server.requests
            counters = json.loads((mount / ".zarrfs-stats.json").read_text())["store"]
    assert listing.stdout.count(".npy") == MANY
    assert requests <= 3, server.counter
    assert counters["requests"] == requests  # zarrfs counts what the server saw


def test_metadata_ttl_shows_new_arrays(tmp_path: Path) -> None:
    root = tmp_path / "www"
    store = root / "grow.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        top = zarr.open_group(str(store), mode="w", zarr_format=3)
        top.create_array("first", shape=(2,), chunks=(2,), dtype="<u1")
        zarr.consolidate_metadata(str(store))
    (root / "same.zarr").symlink_to(store)  # the mount without a TTL: its requests counted apart
    with http_server(root) as server, mounted_many([
            remote_mount(tmp_path, f"{server.url}/grow.zarr", "--metadata-ttl", "1", name="ttl"),
            remote_mount(tmp_path, f"{server.url}/same.zarr", name="forever")]) as (with_ttl, forever):
        assert "first.npy" in {p.name for p in with_ttl.root.iterdir()}
        assert "first.npy" in {p.name for p in forever.root.iterdir()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.open_group(str(store), mode="a").create_array("second", shape=(3,), chunks=(3,), dtype="<u1",
                                                                 fill_value=7)
            zarr.consolidate_metadata(str(store))
        before = sum(n for path, n in server.counter.items() if path.startswith("/same.zarr"))
        time.sleep(1.5)
        assert "second.npy" not in {p.name for p in forever.root.iterdir()}
        after = sum(n for path, n in server.counter.items() if path.startswith("/same.zarr"))
        assert after == before  # without a TTL nothing is asked again
        deadline = time.monotonic() + 10
        while "second.npy" not in {p.name for p in with_ttl.root.iterdir()}:
            assert time.monotonic() < deadline, "the new array did not appear within 10 s of a 1 s TTL"
            time.sleep(0.2)
        np.testing.assert_array_equal(np.load(with_ttl / "second.npy"), np.full(3, 7, "<u1"))
        stats = json.loads((with_ttl / ".zarrfs-stats.json").read_text())
        assert stats["metadata"]["ttl"] == 1 and stats["metadata"]["refreshes"] >= 1


class NoIndexHandler(RangeHandler):
    """A server that serves files but never lists a directory (as most object-store HTTP front ends)."""

    def list_directory(self, path: str) -> None:  # type: ignore[override]
        self.send_error(HTTPStatus.NOT_FOUND)


def test_unlistable_server_says_what_it_cannot_discover(
        served: Served, caplog: pytest.LogCaptureFixture) -> None:
    with http_server(served.root, NoIndexHandler) as server:
        plain = served.hierarchies["h3"]
        with caplog.at_level(logging.WARNING, logger="zarrfs.hierarchy.documents"):
            hierarchy = Hierarchy(Store.open(url_of(server, served.root, plain.store)))
            assert hierarchy.children("") == []  # no metadata names anything below the root
            hierarchy.children("obs")
        said = [r.getMessage() for r in caplog.records if "cannot be listed" in r.getMessage()]
        assert len(said) == 1 and "consolidate" in said[0].lower() and "no metadata names is not shown" in said[0]
        assert hierarchy.root().path == ""
        consolidated = served.hierarchies["h3c"]
        engine = Engine.open(url_of(server, served.root, consolidated.store))
        try:  # consolidated metadata needs no listing
            assert [c.name for c in engine.hierarchy.children("")] == list(consolidated.nodes[""].children)
            node = engine.hierarchy.node("obs/deeper/counts")
            assert isinstance(node, ArrayMeta)
            assert engine.reader("obs/deeper/counts").read(0, node.nbytes) == \
                consolidated.nodes["obs/deeper/counts"].expected.tobytes()
        finally:
            engine.close()
