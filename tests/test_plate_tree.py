"""A plate's tree fetched ahead at the store's concurrency, each node once (issue 51, item 3).

An OME-Zarr 0.5 plate written by ome-zarr-py is served over HTTP without
listings, a delay before every answer, every request counted per path: the
tree is found through what metadata names (plate -> rows and wells -> fields
-> levels and labels), each node's document asked for once (an absent
`labels` group too), never more documents in flight than their bound (three
times `--max-concurrency`) beside `--max-concurrency` other requests,
and a well that stalls or is missing holds back no other part of the tree.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import zarr
from ome_zarr.format import FormatV05
from ome_zarr.writer import write_image, write_labels, write_plate_metadata, write_well_metadata

from mountutil import mounted_many, wait_until
from remoteutil import STALL_LIMIT_S, http_server, remote_mount
from test_discovery import InFlight, SlowUnlistedHandler, nodes_on_disk, walk
from zarrfs.hierarchy import Hierarchy, nodes
from zarrfs.options import DOCUMENTS_PER_REQUEST_SLOT, StoreOptions
from zarrfs.stores.store import Store

ROWS, COLUMNS, FIELDS = ("A", "B", "C"), ("1", "2", "3", "4"), ("0", "1")
LABELLED_FIELD = "A/1/0"
CONCURRENCY = 8
WAIT_S = 60.0  # what a wait on the server may take at most on a loaded machine (never expected)


def write_plate(store: Path) -> None:
    """A 3 x 4 plate of 2 fields each, 3 levels per field, labels on one field: ome-zarr-py 0.5 writes one
    field, and the others are copies of its bytes (what it would write for each)."""
    template = store.with_name("field.zarr")
    fmt = FormatV05()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(np.arange(2 * 32 * 32, dtype=np.uint16).reshape(2, 32, 32),
                    zarr.open_group(str(template), mode="w"), axes="cyx", fmt=fmt, scale_factors=(2, 4))
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    wells = [f"{row}/{column}" for row in ROWS for column in COLUMNS]
    write_plate_metadata(root, list(ROWS), list(COLUMNS), wells, fmt=fmt, name="plate")
    for well in wells:
        write_well_metadata(root.require_group(well), list(FIELDS), fmt=fmt)
        for field in FIELDS:
            shutil.copytree(template, store / well / field)
    shutil.rmtree(template)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_labels(np.zeros((32, 32), np.uint8), zarr.open_group(str(store / LABELLED_FIELD), mode="a"),
                     name="cells", axes="yx", fmt=fmt, scale_factors=())


def documents_asked(store: Path) -> set[str]:
    """The metadata documents a walk through the conventions asks for: every node's `zarr.json`, and the
    `labels/zarr.json` of every image that has none (OME-Zarr names no labels group: it is looked for)."""
    asked = {f"/{store.name}/{path}/zarr.json".replace("//", "/") for path in nodes_on_disk(store)}
    for path in nodes_on_disk(store):
        attributes = json.loads((store / path / "zarr.json").read_text()).get("attributes", {})
        if "multiscales" in attributes.get("ome", {}) and not (store / path / "labels").exists():
            asked.add(f"/{store.name}/{path}/labels/zarr.json")
    return asked


class StallingUnlistedHandler(SlowUnlistedHandler):
    """As `SlowUnlistedHandler`; a request whose path matches `stall` gets no answer until `released`
    (STALL_LIMIT_S at most)."""

    stall: re.Pattern[str]
    stalled: threading.Event
    released: threading.Event

    def send_head(self):  # type: ignore[no-untyped-def]
        if self.stall.search(self.path):
            self.stalled.set()
            self.released.wait(STALL_LIMIT_S)
        return super().send_head()


@contextmanager
def plate_server(root: Path, stall: str = "^$") -> Iterator[tuple[object, InFlight, threading.Event,
                                                                 threading.Event]]:
    """`root` served without listings: (the server, requests in flight, stalled, released)."""
    in_flight, stalled, released = InFlight(), threading.Event(), threading.Event()
    handler = type("Handler", (StallingUnlistedHandler,), {"in_flight": in_flight, "stall": re.compile(stall),
                                                           "stalled": stalled, "released": released})
    with http_server(root, handler) as server:
        try:
            yield server, in_flight, stalled, released
        finally:
            released.set()


def found_by_find(mountpoint: Path, below: str = "") -> set[str]:
    """Every path `find` lists below the mount point (relative to it)."""
    done = subprocess.run(["find", str(mountpoint / below)], capture_output=True, text=True, check=True,
                          timeout=WAIT_S)
    return {str(Path(line).relative_to(mountpoint)) for line in done.stdout.splitlines()}


def shown(paths: set[str], store: Path) -> set[str]:
    """The mount paths that show the nodes at `paths`: a group's directory, an array's `.npy`."""
    def one(path: str) -> str:
        group = json.loads((store / path / "zarr.json").read_text())["node_type"] == "group"
        return path if group else f"{path}.npy"

    return {one(path) for path in paths if path}


@pytest.mark.mount
@pytest.mark.clients
def test_find_lists_the_whole_plate_asking_for_each_document_once(tmp_path: Path) -> None:
    store = tmp_path / "served" / "plate.zarr"
    write_plate(store)
    expected = nodes_on_disk(store)
    # The root, rows, wells, fields and their levels, a labels group with its label image and levels.
    assert len(expected) > 1 + 3 + 12 + 24 * 4 and f"{LABELLED_FIELD}/labels/cells/s0" in expected
    with plate_server(tmp_path / "served") as (server, in_flight, _, _), \
            mounted_many([remote_mount(tmp_path, f"{server.url}/plate.zarr",  # type: ignore[attr-defined]
                                       "--max-concurrency", str(CONCURRENCY),
                                       expected_log=("cannot be listed",))]) as (mount,):
        listed = found_by_find(mount.root)
        counts = dict(server.counter)  # type: ignore[attr-defined]
    assert shown(expected, store) <= listed
    documents = {path: n for path, n in counts.items() if path.endswith("zarr.json")}
    assert documents.keys() == documents_asked(store)
    assert max(documents.values()) == 1, {path: n for path, n in documents.items() if n > 1}
    # Beside the documents, only the store's root, once per form (what tells it is there and cannot list).
    others = {path: n for path, n in counts.items() if path not in documents}
    assert {path.rstrip("/") for path in others} <= {"/plate.zarr"} and max(others.values()) == 1, others
    # Side by side, and never past the documents' bound (DOCUMENTS_PER_REQUEST_SLOT x --max-concurrency)
    # with --max-concurrency other requests beside them.
    assert 2 <= in_flight.most <= CONCURRENCY * (DOCUMENTS_PER_REQUEST_SLOT + 1), in_flight.most


@pytest.mark.mount
@pytest.mark.clients
def test_a_stalled_well_holds_back_no_other_well(tmp_path: Path) -> None:
    """While one well's document gets no answer, every other well is fetched ahead and listed whole;
    once it answers, its row lists whole too."""
    store = tmp_path / "served" / "plate.zarr"
    write_plate(store)
    expected = nodes_on_disk(store)
    with plate_server(tmp_path / "served", stall=r"^/plate\.zarr/B/2/zarr\.json$") as \
            (server, _, stalled, released), \
            mounted_many([remote_mount(tmp_path, f"{server.url}/plate.zarr",  # type: ignore[attr-defined]
                                       expected_log=("cannot be listed",))]) as (mount,):
        assert stalled.wait(WAIT_S)
        others = {path for path in expected if path.startswith(("A/", "C/", "B/1/", "B/3/", "B/4/"))}
        counter = server.counter  # type: ignore[attr-defined]
        # The other wells' whole subtrees are fetched ahead while B/2 stalls...
        assert wait_until(lambda: all(counter[f"/plate.zarr/{path}/zarr.json"] for path in others), WAIT_S)
        # ...and rows A and C list whole without waiting for it.
        assert shown({p for p in others if p.startswith(("A/", "C/"))}, store) <= \
            found_by_find(mount.root, "A") | found_by_find(mount.root, "C")
        assert not released.is_set()
        released.set()
        assert shown({p for p in expected if p.startswith("B/")}, store) <= found_by_find(mount.root, "B")
        assert counter["/plate.zarr/B/2/zarr.json"] == 1


def test_a_missing_well_is_asked_for_once_and_the_rest_found(tmp_path: Path) -> None:
    store = tmp_path / "plate.zarr"
    write_plate(store)
    document = json.loads((store / "zarr.json").read_text())
    document["attributes"]["ome"]["plate"]["wells"].append({"path": "C/5", "rowIndex": 2, "columnIndex": 4})
    (store / "zarr.json").write_text(json.dumps(document))
    expected = nodes_on_disk(store)
    with plate_server(tmp_path) as (server, _, _, _):
        hierarchy = Hierarchy(Store.open(f"{server.url}/plate.zarr", {}, StoreOptions(max_concurrency=16)))  # type: ignore[attr-defined]
        try:
            assert walk(hierarchy) == expected
            assert server.counter["/plate.zarr/C/5/zarr.json"] == 1  # type: ignore[attr-defined]
            assert max(n for path, n in server.counter.items() if path.endswith("zarr.json")) == 1  # type: ignore[attr-defined]
        finally:
            hierarchy.close()


def test_the_root_alone_sets_the_whole_tree_fetching(tmp_path: Path) -> None:
    """From the plate's metadata, with no lookup below the root, every document is fetched (rows above
    wells too, as a walk will ask for them); a walk afterwards asks for nothing."""
    store = tmp_path / "plate.zarr"
    write_plate(store)
    asked = documents_asked(store)
    with plate_server(tmp_path) as (server, _, _, _):
        hierarchy = Hierarchy(Store.open(f"{server.url}/plate.zarr", {}, StoreOptions(max_concurrency=16)))  # type: ignore[attr-defined]
        try:
            hierarchy.root()
            counter = server.counter  # type: ignore[attr-defined]
            assert wait_until(lambda: all(counter[path] for path in asked), WAIT_S), asked - set(counter)
            assert wait_until(lambda: hierarchy.stats()["nodes"] + hierarchy.stats()["absent"] == len(asked),
                              WAIT_S), hierarchy.stats()
            fetched = dict(counter)
            assert walk(hierarchy) == nodes_on_disk(store)
            assert {path: n for path, n in counter.items() if path.endswith("zarr.json")} == fetched
        finally:
            hierarchy.close()


def test_walks_at_once_load_each_node_once(tmp_path: Path) -> None:
    """Eight walks of the tree at the same time, racing the fetches ahead: each document asked for once."""
    store = tmp_path / "plate.zarr"
    write_plate(store)
    expected = nodes_on_disk(store)
    with plate_server(tmp_path) as (server, _, _, _):
        hierarchy = Hierarchy(Store.open(f"{server.url}/plate.zarr", {}, StoreOptions(max_concurrency=16)))  # type: ignore[attr-defined]
        try:
            results: list[set[str]] = []
            walkers = [threading.Thread(target=lambda: results.append(walk(hierarchy))) for _ in range(8)]
            for walker in walkers:
                walker.start()
            for walker in walkers:
                walker.join(WAIT_S)
            assert results == [expected] * 8
            documents = {path: n for path, n in server.counter.items() if path.endswith("zarr.json")}  # type: ignore[attr-defined]
            assert documents.keys() == documents_asked(store)
            assert max(documents.values()) == 1
        finally:
            hierarchy.close()


def test_fetching_ahead_is_bounded_and_the_rest_found_on_demand(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "plate.zarr"
    write_plate(store)
    monkeypatch.setattr(nodes, "MAX_FETCHED_AHEAD", 10)
    with plate_server(tmp_path) as (server, _, _, _):
        hierarchy = Hierarchy(Store.open(f"{server.url}/plate.zarr", {}, StoreOptions(max_concurrency=16)))  # type: ignore[attr-defined]
        try:
            assert walk(hierarchy) == nodes_on_disk(store)
            assert hierarchy.stats()["fetched_ahead"] == 10
        finally:
            hierarchy.close()


def test_closing_ends_the_threads_that_fetch_ahead(tmp_path: Path) -> None:
    store = tmp_path / "plate.zarr"
    write_plate(store)
    with plate_server(tmp_path) as (server, _, _, _):
        before = set(threading.enumerate())
        hierarchy = Hierarchy(Store.open(f"{server.url}/plate.zarr", {}, StoreOptions(max_concurrency=4)))  # type: ignore[attr-defined]
        hierarchy.root()  # names the wells: the threads start
        fetching = [t for t in set(threading.enumerate()) - before if t.name.startswith("zarrfs-discovery")]
        assert fetching
        hierarchy.close()
        for thread in fetching:
            thread.join(WAIT_S)
            assert not thread.is_alive(), thread.name
