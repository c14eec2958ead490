"""A mount of many stores: a share (a folder or bucket prefix of stores among ordinary files) and a catalog.

The share is written by real writers: zarr-python 3 (v3 and v2), ome-zarr-py,
xarray, kerchunk (references into an HDF5 file h5py wrote), icechunk, Python's
zipfile, plus ordinary files and a broken store. Each store's directory must
hold what mounting that store alone shows, its arrays must read as the writer
wrote them, every other file must be itself byte for byte with its size and
time, and a broken or stalled store must not touch its siblings.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import h5py
import icechunk
import numpy as np
import pytest
import xarray as xr
import zarr
from kerchunk.hdf import SingleHdf5ToZarr
from ome_zarr.format import FormatV04
from ome_zarr.writer import write_image

from mountutil import mounted, mounted_many, run_zarrfs, wait_until
from remoteutil import http_server, remote_mount, s3_server, stalling_server
from zarrfs.files.share import ShareTree, open_mount_tree
from zarrfs.files.tree import DirEntry, VirtualTree
from zarrfs.options import EngineOptions
from zarrfs.stores.store import Store
from zarrfs.suffixes import DEFAULT_FORMATS, FORMAT_GROUPS

# The files a mount shows by default (`--formats`'s default).
MOUNT_SUFFIXES = tuple(suffix for name in DEFAULT_FORMATS for suffix in FORMAT_GROUPS[name])
BROKEN_LOG = (r"broken\.zarr: cannot be opened: .*zarr\.json: invalid JSON",)


@dataclass(frozen=True)
class Share:
    root: Path
    arrays: dict[str, np.ndarray]  # mount path of an .npy -> what the writer wrote
    plain: list[str]  # ordinary files, relative to the root
    stores: list[str]  # store directories, relative to the root


def _write_share(root: Path) -> Share:
    rng = np.random.default_rng(3)
    arrays: dict[str, np.ndarray] = {}
    lab = root / "lab" / "project-a"
    lab.mkdir(parents=True)
    v3 = rng.integers(0, 60000, (40, 50), dtype=np.uint16)
    zarr.create_array(str(lab / "scan.zarr"), shape=v3.shape, chunks=(16, 16), dtype=v3.dtype)[...] = v3
    arrays["lab/project-a/scan.zarr/scan.npy"] = v3
    group = zarr.open_group(str(lab / "old.zarr"), mode="w", zarr_format=2)
    v2 = rng.standard_normal((30, 20)).astype("<f8")
    group.create_array("values", shape=v2.shape, chunks=(10, 10), dtype=v2.dtype)[...] = v2
    zarr.consolidate_metadata(str(lab / "old.zarr"))
    arrays["lab/project-a/old.zarr/values.npy"] = v2
    image = (np.arange(2 * 32 * 32, dtype=np.uint16) % 777).reshape(2, 32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_image(image, zarr.open_group(str(lab / "cells.ome.zarr"), mode="w", zarr_format=2), axes="cyx",
                    fmt=FormatV04(), scale_factors=(2,))
    arrays["lab/project-a/cells.ome.zarr/s0.npy"] = image
    temperature = rng.standard_normal((4, 6)).astype("f4")
    xr.Dataset({"t": (("y", "x"), temperature)}).to_zarr(str(lab / "climate.zarr"), zarr_format=3, consolidated=True)
    arrays["lab/project-a/climate.zarr/t.npy"] = temperature

    other = root / "lab" / "project-b"
    other.mkdir()
    zipped = rng.integers(-5, 5, (12,), dtype=np.int32)
    source = root.parent / "zip-source.zarr"
    zarr.create_array(str(source), shape=zipped.shape, chunks=(5,), dtype=zipped.dtype)[...] = zipped
    with zipfile.ZipFile(other / "archive.zip", "w") as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(source).as_posix())
    arrays["lab/project-b/archive.zip/archive.npy"] = zipped
    with zipfile.ZipFile(other / "photos.zip", "w") as archive:  # an ordinary zip: a file
        archive.writestr("photo.txt", "not a store")
    h5_data = rng.integers(0, 255, (9, 7), dtype=np.uint8)
    with h5py.File(other / "raw.h5", "w") as h5:
        h5.create_dataset("frame", data=h5_data, chunks=(3, 7))
    with open(other / "raw.h5", "rb") as handle:
        refs = SingleHdf5ToZarr(handle, str(other / "raw.h5")).translate()
    (other / "refs.json").write_text(json.dumps(refs))
    arrays["lab/project-b/refs.json/frame.npy"] = h5_data
    (other / "settings.json").write_text(json.dumps({"exposure": 10}))  # ordinary JSON: a file
    repository = icechunk.Repository.create(icechunk.local_filesystem_storage(str(other / "timeline.icechunk")))
    session = repository.writable_session("main")
    frames = rng.integers(0, 9, (3, 4), dtype=np.int16)
    zarr.create_array(session.store, name="frames", shape=frames.shape, chunks=(2, 2), dtype=frames.dtype)[...] = frames
    session.commit("frames")
    arrays["lab/project-b/timeline.icechunk/frames.npy"] = frames

    docs = root / "docs"
    (docs / "empty").mkdir(parents=True)
    (docs / "report.pdf").write_bytes(rng.bytes(300_000))
    (docs / "stack.tif").write_bytes(rng.bytes(20_000_000))  # blocks enough for a remote read to stream
    (docs / "notes.txt").write_text("plain text\n")
    broken = root / "lab" / "broken.zarr"
    broken.mkdir()
    (broken / "zarr.json").write_text("{not json")
    os.utime(docs / "notes.txt", ns=(1_700_000_000_123_456_789, 1_700_000_000_123_456_789))
    plain = ["docs/report.pdf", "docs/stack.tif", "docs/notes.txt", "lab/project-b/photos.zip", "lab/project-b/settings.json",
             "lab/project-b/raw.h5"]
    stores = ["lab/project-a/scan.zarr", "lab/project-a/old.zarr", "lab/project-a/cells.ome.zarr",
              "lab/project-a/climate.zarr", "lab/project-b/archive.zip", "lab/project-b/refs.json",
              "lab/project-b/timeline.icechunk"]
    return Share(root, arrays, plain, stores)


@pytest.fixture(scope="module")
def share(tmp_path_factory: pytest.TempPathFactory) -> Share:
    return _write_share(tmp_path_factory.mktemp("share") / "share")


def _names_below(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def _alone(source: str) -> set[str]:
    """The names a mount of the store alone shows (its tree, built in this process), recursively."""
    tree = VirtualTree.of_source(source, {}, EngineOptions(), MOUNT_SUFFIXES)
    try:
        found: set[str] = set()

        def walk(path: str) -> None:
            for name, entry in tree.listdir(tree.lookup(path)).items():
                child = f"{path}/{name}" if path else name
                found.add(child)
                if isinstance(entry, DirEntry):
                    walk(child)

        walk("")
        return found
    finally:
        tree.close()


@pytest.mark.mount
def test_a_share_is_one_tree_of_its_stores_and_files(share: Share, tmp_path: Path) -> None:
    with mounted(share.root, tmp_path / "mnt", tmp_path / "log", expected_log=BROKEN_LOG) as mount:
        root = mount.root
        assert sorted(os.listdir(root)) == [".zarrfs-stats.json", "docs", "lab"]
        assert sorted(os.listdir(root / "lab")) == ["broken.zarr", "project-a", "project-b"]
        # Every store's directory holds what mounting it alone shows; a file store adds its own bytes.
        for store in share.stores:
            source = str(share.root / store)
            if store.endswith(".zip"):
                source = f"zip::{source}"
            shown = _names_below(root / store) - {".zarrfs-source.zip", ".zarrfs-source.json"}
            assert shown == _alone(source), store
        for path, expected in share.arrays.items():
            got = np.load(root / path)
            assert got.dtype == expected.dtype and np.array_equal(got, expected), path
        # Ordinary files are themselves: bytes, size, time.
        for relative in share.plain:
            original, shown = share.root / relative, root / relative
            assert shown.read_bytes() == original.read_bytes(), relative
            assert os.stat(shown).st_size == os.stat(original).st_size
            assert os.stat(shown).st_mtime_ns == os.stat(original).st_mtime_ns, relative
        assert os.listdir(root / "docs" / "empty") == []
        # A store that is a file keeps its bytes inside its directory.
        for store, suffix in (("lab/project-b/archive.zip", ".zip"), ("lab/project-b/refs.json", ".json")):
            assert (root / store / f".zarrfs-source{suffix}").read_bytes() == (share.root / store).read_bytes()
        # The broken store is a directory that says why; its siblings are unaffected.
        assert os.listdir(root / "lab" / "broken.zarr") == ["ZARRFS-ERROR.txt"]
        note = (root / "lab" / "broken.zarr" / "ZARRFS-ERROR.txt").read_text()
        assert "invalid JSON" in note and "zarr.json" in note
        with pytest.raises(FileNotFoundError):
            os.stat(root / "lab" / "broken.zarr" / "anything.npy")
        stats = json.loads((root / ".zarrfs-stats.json").read_text())
        assert stats["share"]["stores_opened"] == len(share.stores)


@pytest.mark.mount
def test_the_share_mounts_without_opening_a_store(share: Share, tmp_path: Path) -> None:
    with mounted(share.root, tmp_path / "mnt", tmp_path / "log") as mount:
        assert sorted(os.listdir(mount / "lab" / "project-a")) == ["cells.ome.zarr", "climate.zarr", "old.zarr",
                                                                 "scan.zarr"]
        stats = json.loads((mount / ".zarrfs-stats.json").read_text())
        assert stats["share"]["stores_opened"] == 0  # listed, not opened
        assert np.array_equal(np.load(mount / "lab/project-a/scan.zarr/scan.npy"),
                              share.arrays["lab/project-a/scan.zarr/scan.npy"])
        stats = json.loads((mount / ".zarrfs-stats.json").read_text())
        assert stats["share"]["stores_opened"] == 1


def test_the_share_root_is_listed_once_from_mount_to_first_ls(share: Share, monkeypatch: pytest.MonkeyPatch) -> None:
    """Telling that the root is no store lists it (stores/store.py's `list_entries`); the share and its first
    listing take that listing rather than asking again (one LIST of a bucket prefix, not three)."""
    listed: list[str] = []
    original = Store.list_entries

    def counted(self: Store, prefix: str) -> list:
        listed.append(prefix)
        return original(self, prefix)

    monkeypatch.setattr(Store, "list_entries", counted)
    tree = open_mount_tree(str(share.root), {}, EngineOptions(), DEFAULT_FORMATS)
    try:
        names = set(tree.listdir(tree.lookup("/")))  # type: ignore[arg-type]
        assert listed.count("") == 1, listed
        tree.listdir(tree.lookup("/lab"))  # type: ignore[arg-type]
    finally:
        tree.close()
    assert {"docs", "lab"} <= names
    assert listed.count("") == 1 and listed.count("lab") == 1, listed


@pytest.mark.mount
def test_idle_stores_are_closed_past_the_bound_but_never_under_an_open_file(share: Share, tmp_path: Path) -> None:
    with mounted(share.root, tmp_path / "mnt", tmp_path / "log", "--max-open-stores", "2",
                 expected_log=BROKEN_LOG) as mount:
        held_path = "lab/project-a/scan.zarr/scan.raw"
        expected = share.arrays["lab/project-a/scan.zarr/scan.npy"]
        with open(mount / held_path, "rb") as held:
            first = held.read(100)
            for path, values in share.arrays.items():  # every other store opened, most of them closed again
                assert np.array_equal(np.load(mount / path), values), path
            stats = json.loads((mount / ".zarrfs-stats.json").read_text())
            assert stats["share"]["stores_closed"] >= len(share.stores) - 3
            assert stats["share"]["stores_open"] <= 3  # the bound, plus the one the open file holds
            held.seek(0)
            assert first + held.read()[100:] == expected.tobytes()
        # A closed store opens again when looked into.
        for path, values in share.arrays.items():
            assert np.array_equal(np.load(mount / path), values), path


def _read_whole(tree: ShareTree, path: str) -> bytes:
    opened = tree.open(path)
    try:
        out = np.empty(opened.size, np.uint8)
        assert opened.read_into(0, out) == opened.size
        return out.tobytes()
    finally:
        opened.close()


def test_a_store_closed_past_the_bound_is_reopened_after_its_resolved_prefix_went(share: Share) -> None:
    tree = open_mount_tree(str(share.root), {}, EngineOptions(), MOUNT_SUFFIXES, max_open_stores=1)
    assert isinstance(tree, ShareTree)
    try:
        first, second = "lab/project-a/scan.zarr/scan.npy", "lab/project-a/old.zarr/values.npy"
        before = _read_whole(tree, first)
        assert tree.stats()["share"]["prefixes_resolved"] == 1  # scan.zarr's top, resolved once
        assert np.array_equal(np.load(io.BytesIO(_read_whole(tree, second))), share.arrays[second])
        figures = tree.stats()["share"]
        # scan.zarr closed past the bound, and what was resolved below it let go with it.
        assert (figures["stores_opened"], figures["stores_closed"], figures["prefixes_resolved"]) == (2, 1, 1)
        again = _read_whole(tree, first)
        figures = tree.stats()["share"]
        assert (figures["stores_opened"], figures["stores_closed"]) == (3, 2)
        assert again == before and np.array_equal(np.load(io.BytesIO(again)), share.arrays[first])
    finally:
        tree.close()


@pytest.mark.mount
def test_zarrfs_tree_of_a_share_lists_its_stores_without_opening_them(share: Share) -> None:
    result = run_zarrfs("tree", share.root)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name, kind in (("scan.zarr/", "Zarr v3 store"), ("old.zarr/", "Zarr v2 store (consolidated)"),
                       ("archive.zip/", "zipped store"), ("refs.json/", "kerchunk reference set (JSON)"),
                       ("timeline.icechunk/", "Icechunk repository"), ("broken.zarr/", "Zarr v3 store")):
        assert any(line.strip() == f"{name}  {kind}" for line in lines), (name, lines)
    assert any("3 other files" in line for line in lines)  # project-b's photos.zip, settings.json, raw.h5
    shallow = run_zarrfs("tree", share.root, "--depth", "1").stdout
    assert "scan.zarr" not in shallow and "project-a/  (not walked: --depth 1)" in shallow


@pytest.mark.mount
def test_a_share_in_a_bucket_prefix(share: Share, tmp_path: Path) -> None:
    with s3_server() as s3:
        s3.client().create_bucket(Bucket="lab-share")
        s3.upload("lab-share", share.root, "prefix/share")
        options = ("-S", "key=testing", "-S", "secret=testing", "-S", f"endpoint_url={s3.endpoint}",
                   "-S", 'client_kwargs={"region_name": "us-east-1"}')
        mount = remote_mount(tmp_path, "s3://lab-share/prefix/share", *options, "--log-level", "debug",
                             expected_log=BROKEN_LOG + (r"timeline\.icechunk: cannot be opened",))
        with mounted_many([mount]):
            root = mount.root
            assert sorted(os.listdir(root)) == [".zarrfs-stats.json", "docs", "lab"]
            for path, expected in share.arrays.items():
                if "icechunk" in path or "refs.json" in path:
                    continue  # (a repository and references in a bucket need their own options: see below)
                assert np.array_equal(np.load(root / path), expected), path
            for relative in share.plain:
                assert (root / relative).read_bytes() == (share.root / relative).read_bytes(), relative
            assert "invalid JSON" in (root / "lab/broken.zarr/ZARRFS-ERROR.txt").read_text()
        # The big file streamed by one presigned GET, logged (at DEBUG) without the URL's signature.
        log = mount.log.read_text()
        assert re.search(r"docs/stack\.tif \[0:20000000\]: streamed by a presigned GET", log), log
        assert "Signature" not in log


@pytest.mark.mount
def test_a_catalog_of_http_stores_that_cannot_list(share: Share, tmp_path: Path) -> None:
    with http_server(share.root / "lab") as server:
        catalog = tmp_path / "catalog.toml"
        catalog.write_text(f'scan = "{server.url}/project-a/scan.zarr"\n'
                           f'missing = "{server.url}/nothing-here.zarr"\n'
                           f'[old]\nsource = "{server.url}/project-a/old.zarr"\n')
        mount = remote_mount(tmp_path, f"--catalog={catalog}", expected_log=(r"nothing-here\.zarr.*cannot be opened",))
        with mounted_many([mount]):
            root = mount.root
            assert sorted(os.listdir(root)) == [".zarrfs-stats.json", "missing", "old", "scan"]
            assert np.array_equal(np.load(root / "scan/scan.npy"), share.arrays["lab/project-a/scan.zarr/scan.npy"])
            assert np.array_equal(np.load(root / "old/values.npy"), share.arrays["lab/project-a/old.zarr/values.npy"])
            assert os.listdir(root / "missing") == ["ZARRFS-ERROR.txt"]
        result = run_zarrfs("tree", "--catalog", catalog)
        assert result.returncode == 0 and "scan/" in result.stdout and "nothing-here.zarr" in result.stdout


@pytest.mark.mount
def test_a_stalled_store_does_not_hold_up_its_siblings(share: Share, tmp_path: Path) -> None:
    with http_server(share.root / "lab") as good, stalling_server(share.root / "lab", "stalled") as bad:
        catalog = tmp_path / "catalog.toml"
        catalog.write_text(f'scan = "{good.url}/project-a/scan.zarr"\n'
                           f'stalled = "{bad.url}/stalled/scan.zarr"\n')
        mount = remote_mount(tmp_path, f"--catalog={catalog}", "--timeout", "5", "--retries", "0",
                             expected_log=(r"stalled.*cannot be opened",))
        with mounted_many([mount]):
            listing: list[str] = []
            looker = threading.Thread(target=lambda: listing.extend(os.listdir(mount / "stalled")))
            looker.start()
            assert wait_until(lambda: bool(bad.stalled), 30)  # the stalled store's first request is held
            # Meanwhile its sibling answers.
            assert np.array_equal(np.load(mount / "scan/scan.npy"), share.arrays["lab/project-a/scan.zarr/scan.npy"])
            assert looker.is_alive() or listing  # (the stall is still on, or just gave up)
            bad.released.set()
            looker.join(60)
            assert not looker.is_alive()
            assert listing == ["ZARRFS-ERROR.txt"]


@pytest.mark.mount
def test_reads_across_stores_at_once(share: Share, tmp_path: Path) -> None:
    with mounted(share.root, tmp_path / "mnt", tmp_path / "log", expected_log=BROKEN_LOG) as mount:
        failures: list[str] = []

        def read(path: str, expected: np.ndarray) -> None:
            for _ in range(3):
                if not np.array_equal(np.load(mount / path), expected):
                    failures.append(path)

        threads = [threading.Thread(target=read, args=item) for item in share.arrays.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not failures and not any(thread.is_alive() for thread in threads)


def test_a_catalog_with_mistakes_is_refused_with_what_to_fix(tmp_path: Path) -> None:
    for text, said in (("x = 3\n", "must be a URL string"), ('"a/b" = "http://h/x.zarr"\n', "one directory name"),
                       ('[x]\nsorce = "http://h"\n', "unknown key(s) sorce"), ("= broken", "not valid TOML"),
                       ("", "names no source")):
        catalog = tmp_path / "catalog.toml"
        catalog.write_text(text)
        result = run_zarrfs("tree", "--catalog", catalog)
        assert result.returncode == 1 and said in result.stderr, (text, result.stderr)
    result = run_zarrfs("tree", "--catalog", tmp_path / "catalog.toml", tmp_path)
    assert result.returncode == 2 and "not both" in result.stderr


@pytest.mark.mount
def test_zarrfs_mounted_takes_a_catalog(share: Share, tmp_path: Path) -> None:
    import zarrfs

    catalog = tmp_path / "catalog.toml"
    catalog.write_text(f'scan = "{share.root / "lab/project-a/scan.zarr"}"\n'
                       f'lab = "{share.root / "lab/project-b"}"\n')  # a share, as a catalog's entry
    with zarrfs.mounted(None, catalog=str(catalog), log_file=str(tmp_path / "log")) as root:
        assert np.array_equal(np.load(root / "scan/scan.npy"), share.arrays["lab/project-a/scan.zarr/scan.npy"])
        assert np.array_equal(np.load(root / "lab/archive.zip/archive.npy"),
                              share.arrays["lab/project-b/archive.zip/archive.npy"])
        assert (root / "lab/settings.json").read_bytes() == (share.root / "lab/project-b/settings.json").read_bytes()


def test_like_stores_plan_their_files_once_and_each_serves_its_own_bytes(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A share's stores of the same shape, dtype and conventions (a plate's wells, a series of products)
    share one layout per file kind: a `find` plans and sizes them once, and each store still reads its
    own chunks (written by zarr-python; read back with tifffile and numpy)."""
    import tifffile

    from zarrfs.formats import FORMATS

    values = {}
    for index in range(3):
        name = f"well-{index}.zarr"
        values[name] = np.arange(48 * 40, dtype=np.uint16).reshape(48, 40) * (index + 1)
        zarr.create_array(str(tmp_path / "plate" / name), shape=(48, 40), chunks=(16, 16), dtype="uint16",
                          compressors=None)[...] = values[name]
    planned: list[str] = []
    plan_tif = FORMATS[".tif"]

    def counting(*args: object) -> object:
        planned.append("tif")
        return plan_tif(*args)  # type: ignore[arg-type]

    monkeypatch.setitem(FORMATS, ".tif", counting)
    tree = open_mount_tree(str(tmp_path), {}, EngineOptions(), MOUNT_SUFFIXES)
    assert isinstance(tree, ShareTree)
    try:
        for name, expected in values.items():
            stem = name.removesuffix(".zarr")
            assert np.array_equal(np.load(io.BytesIO(_read_whole(tree, f"plate/{name}/{stem}.npy"))), expected)
            assert np.array_equal(tifffile.imread(io.BytesIO(_read_whole(tree, f"plate/{name}/{stem}.tif"))),
                                  expected)
        assert planned == ["tif"]
    finally:
        tree.close()
