"""Hierarchies found through their conventions where the store cannot list (issue 41), checked against the disk.

Stores written by ome-zarr-py (plates with labels, 0.4 and 0.5;
bioformats2raw collections with and without an `OME/series` list), ngff-zarr
(levels in sub-groups) and zarr-python are served over HTTP by a server that
answers every directory URL 404 and waits before each answer, as public data
is served. The oracle is the store on disk: every folder holding Zarr
metadata (`zarr.json`, `.zarray`, `.zgroup`) is a node. Over such a server
zarrfs must find every node some metadata names (here: all of them), at the
store's concurrency, asking for each document once.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from pathlib import Path

import numpy as np
import pytest
import zarr
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.writer import write_image

from readers import showinf
from mountutil import mount_in, mounted_many
from remoteutil import RangeHandler, http_server, remote_mount
from test_ome_layouts import write_ome_zarr_py_plate, write_out_of_process
from zarrfs.hierarchy import Hierarchy
from zarrfs.model.meta import GroupMeta
from zarrfs.options import StoreOptions
from zarrfs.stores.store import Store

LATENCY_S = 0.01
METADATA_FILES = ("zarr.json", ".zarray", ".zgroup")


class InFlight:
    """Requests in flight at once, as the server saw them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


class SlowUnlistedHandler(RangeHandler):
    """No directory listings; a delay before every answer; requests in flight counted."""

    in_flight: InFlight  # set per server

    def send_head(self):  # type: ignore[no-untyped-def]
        # Counted while the request waits here, not while its answer is written: a client that has
        # read the answer may ask again before this thread would have counted the request out.
        with self.in_flight:
            time.sleep(LATENCY_S)
        return super().send_head()

    def list_directory(self, path: str) -> None:  # type: ignore[override]
        self.send_error(HTTPStatus.NOT_FOUND)


@contextmanager
def unlisted_server(root: Path) -> Iterator[tuple[str, InFlight]]:
    in_flight = InFlight()
    with http_server(root, type("Handler", (SlowUnlistedHandler,), {"in_flight": in_flight})) as server:
        yield server.url, in_flight


def nodes_on_disk(store: Path) -> set[str]:
    """Every folder with Zarr metadata in it, as a node path ('' for the root)."""
    found = set()
    for name in METADATA_FILES:
        for metadata in store.rglob(name):
            relative = metadata.parent.relative_to(store).as_posix()
            found.add("" if relative == "." else relative)
    return found


def walk(hierarchy: Hierarchy, path: str = "") -> set[str]:
    """Every node below `path` (included) that `children` shows, depth first."""
    found = {path}
    if isinstance(hierarchy.node(path), GroupMeta):
        for child in hierarchy.children(path):
            assert child.error is None, child.error
            found |= walk(hierarchy, child.node.path)
    return found


def remote_hierarchy(url: str) -> Hierarchy:
    return Hierarchy(Store.open(url, {}, StoreOptions(max_concurrency=16)))


def write_collection(store: Path, version: str, series_list: bool, count: int = 3) -> None:
    """A bioformats2raw.layout 3 collection by ome-zarr-py's writer: `count` images `0`..; `OME/` lists
    them in `series` when `series_list`."""
    fmt = {"0.4": FormatV04, "0.5": FormatV05}[version]()
    root = zarr.open_group(str(store), mode="w", zarr_format=2 if version == "0.4" else 3)
    names = [str(number) for number in range(count)]

    def put(group: zarr.Group, attributes: dict) -> None:
        group.attrs.update(attributes if version == "0.4" else {"ome": {"version": version, **attributes}})

    put(root, {"bioformats2raw.layout": 3})
    ome = root.require_group("OME")
    if series_list:
        put(ome, {"series": names})
    (store / "OME" / "METADATA.ome.xml").write_text("<OME/>")
    for number, name in enumerate(names):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            write_image(np.full((2, 32, 32), number, np.uint8), root.require_group(name), axes="cyx", fmt=fmt,
                        scale_factors=(2,))


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_a_plate_with_labels_is_found_whole_without_listings(version: str, tmp_path: Path) -> None:
    store = tmp_path / "plate.zarr"
    write_ome_zarr_py_plate(store, version)
    expected = nodes_on_disk(store)
    assert "A/1/0/labels/cells" in expected and len(expected) > 15
    assert walk(Hierarchy(Store.open(str(store)))) == expected  # listing the disk: the same nodes
    with unlisted_server(tmp_path) as (url, in_flight):
        hierarchy = remote_hierarchy(f"{url}/plate.zarr")
        assert walk(hierarchy) == expected
        # (side by side at the store's concurrency, not one request after another)
        assert in_flight.most >= 4, in_flight.most
        requests = hierarchy.store.requests
        assert walk(hierarchy) == expected
        assert hierarchy.store.requests == requests  # every answer remembered, absent ones too


def test_metadata_documents_are_in_flight_beside_the_chunk_requests_bound(tmp_path: Path) -> None:
    """A tree's documents have their own bound, `document_concurrency` (three times `max_concurrency`):
    with room for 2 chunk requests, more than 3 requests are in flight at once (2 documents and the
    store's one listing would be 3), and never more than the two bounds together (6 and 2)."""
    store = tmp_path / "plate.zarr"
    write_ome_zarr_py_plate(store, "0.4")  # v2: each node's three documents asked for at once
    options = StoreOptions(max_concurrency=2)
    assert options.document_concurrency == 6
    with unlisted_server(tmp_path) as (url, in_flight):
        hierarchy = Hierarchy(Store.open(f"{url}/plate.zarr", {}, options))
        assert walk(hierarchy) == nodes_on_disk(store)
    assert options.max_concurrency + 1 < in_flight.most <= options.max_concurrency + options.document_concurrency, \
        in_flight.most


def test_levels_in_sub_groups_are_found_without_listings(tmp_path: Path) -> None:
    store = tmp_path / "image.zarr"
    write_out_of_process({"writer": "ngff-zarr", "store": str(store), "version": "0.5", "dims": "zyx"})
    expected = nodes_on_disk(store)
    assert any(path.count("/") == 1 for path in expected)  # ngff-zarr's `scale0/image`
    with unlisted_server(tmp_path) as (url, _):
        assert walk(remote_hierarchy(f"{url}/image.zarr")) == expected


@pytest.mark.parametrize(("version", "series_list"), [("0.4", True), ("0.5", True), ("0.5", False)],
                         ids=["0.4-series", "0.5-series", "0.5-consecutive"])
def test_a_bioformats2raw_collection_is_found_without_listings(version: str, series_list: bool,
                                                               tmp_path: Path) -> None:
    store = tmp_path / "collection.zarr"
    write_collection(store, version, series_list)
    expected = nodes_on_disk(store)
    assert {"0", "1", "2", "OME"} <= expected and len(expected) == 2 + 3 * 3  # root, OME, 3 images of 2 levels
    with unlisted_server(tmp_path) as (url, _):
        hierarchy = remote_hierarchy(f"{url}/collection.zarr")
        assert walk(hierarchy) == expected
        # The series are looked for together, up to the first missing one, not one round trip each.
        if not series_list:
            assert hierarchy.stats()["absent"] >= 1


def test_a_named_node_that_is_missing_is_left_out(tmp_path: Path) -> None:
    """A plate that names a well nobody wrote: the rest is found, the missing well asked for once."""
    store = tmp_path / "plate.zarr"
    write_ome_zarr_py_plate(store, "0.5")
    document = json.loads((store / "zarr.json").read_text())
    document["attributes"]["ome"]["plate"]["wells"].append({"path": "B/2", "rowIndex": 1, "columnIndex": 1})
    (store / "zarr.json").write_text(json.dumps(document))
    expected = nodes_on_disk(store)
    with unlisted_server(tmp_path) as (url, _):
        hierarchy = remote_hierarchy(f"{url}/plate.zarr")
        assert walk(hierarchy) == expected
        assert "B/2" not in {child.name for child in hierarchy.children("B")}


def test_discovery_follows_the_listing_too(tmp_path: Path) -> None:
    """Where the store lists, a node that no metadata names is shown as well (the union of both)."""
    store = tmp_path / "plate.zarr"
    write_ome_zarr_py_plate(store, "0.5")
    zarr.open_group(str(store / "A" / "1" / "0"), mode="a").create_array("extra", shape=(2,), dtype="u1")
    assert "A/1/0/extra" in walk(Hierarchy(Store.open(str(store))))


def tree_of(root: Path) -> dict[str, int | None]:
    """Every path below a mount point with its size (None for directories), as `find` and `ls -l` see them."""
    found: dict[str, int | None] = {}
    for directory, folders, files in os.walk(root):
        for name in folders:
            found[os.path.relpath(os.path.join(directory, name), root)] = None
        for name in files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = os.stat(path).st_size
    return found


@pytest.mark.mount
@pytest.mark.clients
def test_a_plate_over_http_without_listings_mounts_whole(tmp_path: Path) -> None:
    """The mount over a server that cannot list shows what the local mount shows, every size equal; the
    plate's OME-TIFF is read by Bio-Formats as one series per field, and a level's bytes are the store's."""
    store = tmp_path / "served" / "plate.zarr"
    written = write_ome_zarr_py_plate(store, "0.5")
    with unlisted_server(tmp_path / "served") as (url, _), \
            mounted_many([remote_mount(tmp_path, f"{url}/plate.zarr", expected_log=("cannot be listed",)),
                          mount_in(tmp_path, store, name="local")]) as (remote, local):
        remote_tree = tree_of(remote.root)
        assert remote_tree == tree_of(local.root)
        assert "A/1/0/labels/cells/s0.npy" in remote_tree and "screen.ome.tif" in remote_tree
        info = showinf(remote / "screen.ome.tif")
        assert info.reader == "OME-TIFF" and len(info.series) == 3
        # Opening it read its IFDs, which lie at its head, and no tile (formats/tiff_head.py): no
        # chunk was fetched. (With IFDs between the tiles, Bio-Formats' 1 MiB buffer fills at each
        # IFD made the daemon fetch and decode every chunk of the plate.)
        stats = json.loads((remote / ".zarrfs-stats.json").read_text())
        assert stats["cache"]["loads"] == 0, stats["cache"]
        # Its thousands of small reads of the head were copied in C (engine/_cached_reads.c `open_bytes`).
        assert stats["reads"]["answered_in_c"] >= 0.9 * stats["reads"]["count"] > 0, stats["reads"]
        np.testing.assert_array_equal(np.load(remote / "B/3/0/s0.npy"), written["B/3/0"])
