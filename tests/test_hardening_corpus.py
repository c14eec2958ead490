"""The broken-store corpus (tests/make_broken_corpus.py), case by case, in the engine and through a mount.

For every case: the exact error type and errno, a message naming store, node
(and chunk key), the healthy sibling still readable; through a mount, the
errno a reader sees, exactly one daemon log line for the case, the daemon
alive. Bit flips in codecs without a checksum may decode to other bytes of
the right size (no reader can tell); everything else must fail or be exact.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mountutil import Mount, mount_in, mounted_many, pid_alive, run_zarrfs
from zarrfs.codecs import UnknownCodecError
from zarrfs.engine.engine import Engine
from zarrfs.errors import ChunkError, MetadataError, UnsupportedError, ZarrfsError

import make_broken_corpus as corpus_builder

ERRORS: dict[str, type[ZarrfsError]] = {"MetadataError": MetadataError, "UnsupportedError": UnsupportedError,
                                        "UnknownCodecError": UnknownCodecError, "ChunkError": ChunkError}
ERRNO = {"MetadataError": errno.EIO, "UnsupportedError": errno.ENOTSUP, "UnknownCodecError": errno.ENOTSUP,
         "ChunkError": errno.EIO}

# Built once at collection (about a second, 14 MB): the cases parametrize the tests.
_ROOT = Path(tempfile.mkdtemp(prefix="zarrfs-corpus-"))
atexit.register(shutil.rmtree, _ROOT, True)
CORPUS = corpus_builder.build(_ROOT / "c")


@pytest.fixture(scope="module")
def corpus() -> corpus_builder.Corpus:
    return CORPUS


def case_ids() -> list[str]:
    return [c.id for c in CORPUS.cases]


def find(corpus: corpus_builder.Corpus, case_id: str) -> corpus_builder.Case:
    return next(c for c in corpus.cases if c.id == case_id)


def good_bytes() -> bytes:
    return corpus_builder.GOOD.tobytes()


# ------------------------------------------------------------------- engine


@pytest.fixture(scope="module")
def engines(corpus: corpus_builder.Corpus) -> Iterator[dict[str, Engine]]:
    opened: dict[str, Engine] = {}
    yield opened
    for engine in opened.values():
        engine.close()


def engine_for(corpus: corpus_builder.Corpus, engines: dict[str, Engine], store: str) -> Engine:
    if store not in engines:
        engines[store] = Engine.open(str(corpus.root / store))
    return engines[store]


def outcome_allows(case: corpus_builder.Case, data: bytes) -> bool:
    """A read that did not fail: allowed for bit flips (and appended bytes) only, as the case says."""
    assert case.read is not None
    if len(data) != case.read[1] - case.read[0]:
        return False
    if case.outcome == "error-or-size":
        return True
    return case.outcome == "error-or-exact" and hashlib.sha256(data).hexdigest() == case.expected_sha


@pytest.mark.parametrize("case_id", case_ids())
def test_engine(case_id: str, corpus: corpus_builder.Corpus, engines: dict[str, Engine]) -> None:
    case = find(corpus, case_id)
    store = str(corpus.root / case.store)
    if case.stage != "name" and case.node == "":  # a broken root: the store does not open
        with pytest.raises(ZarrfsError) as raised:
            Engine.open(store).hierarchy.root()
        assert_error(raised.value, case, store)
        return
    engine = engine_for(corpus, engines, case.store)
    if case.stage == "name":
        names = [child.name for child in engine.hierarchy.children("")]
        assert case.node not in names and "good" in names
    elif case.stage == "metadata":
        with pytest.raises(ZarrfsError) as raised:
            engine.hierarchy.node(case.node)
        assert_error(raised.value, case, store)
        broken = {c.name: c for c in engine.hierarchy.children("") if c.error is not None}
        assert type(broken[case.node].error) is ERRORS[case.error or ""]
    else:
        assert case.read is not None
        try:
            data = engine.reader(case.node).read(*case.read)
        except ZarrfsError as exc:
            assert_error(exc, case, store)
            assert case.chunk_key is not None and case.chunk_key in str(exc)
        else:
            assert outcome_allows(case, data), f"{case.id}: read {len(data)} bytes that are not allowed"
    reader = engine.reader("good")
    assert reader.read(0, reader.nbytes) == good_bytes()


def assert_error(exc: ZarrfsError, case: corpus_builder.Case, store: str) -> None:
    assert type(exc).__name__ == case.error, f"{case.id}: {type(exc).__name__}: {exc}"
    assert exc.errno == ERRNO[case.error or ""]
    message = str(exc)
    assert store in message
    rest = message.replace(store, "")
    if case.node:
        assert case.node in rest  # as "/node" or as the key "node/.zarray"
        rest = rest.replace(case.node, "")  # the node names its field: the message must do so itself
    for word in case.words:
        assert word in rest, f"{case.id}: {word!r} not in {message}"


# -------------------------------------------------------------------- mount

MULTI_CASE_STORES = ["v2.zarr", "v3.zarr", "zp2.zarr", "seed.zarr", "names-v3.zarr", "names-v2.zarr",
                     "names-zp2.zarr", "names-v2-local.zarr"]
EXPECTED_LOG = [r" WARNING .*not a valid node name", r" WARNING .*[ /](v2|v3|zp2|seed)-",
                r" ERROR .*array /(v2|v3)-(chunk|bomb|shard)-"]


@pytest.fixture(scope="module")
def mounts(corpus: corpus_builder.Corpus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Mount]]:
    tmp = tmp_path_factory.mktemp("corpus-mounts")
    started = {store: mount_in(tmp, corpus.root / store, name=store.removesuffix(".zarr"),
                               expected_log=EXPECTED_LOG) for store in MULTI_CASE_STORES}
    with mounted_many(list(started.values())):
        yield started


def log_lines_naming(mount: Mount, text: str) -> list[str]:
    return [line for line in mount.log_lines() if text in line]


@pytest.mark.parametrize("case_id", [c for c in case_ids() if not c.startswith(("v1-", "root-"))])
def test_mount(case_id: str, corpus: corpus_builder.Corpus, mounts: dict[str, Mount]) -> None:
    case = find(corpus, case_id)
    mount = mounts[case.store]
    listing = os.listdir(mount.root)
    if case.stage == "name":
        assert all(name.isprintable() and "/" not in name and len(name.encode()) <= 255 for name in listing)
        assert not any(name == case.node or name.startswith(case.node + ".") for name in listing)
    elif case.stage == "metadata":
        assert case.node + ".raw" not in listing
        with pytest.raises(OSError) as raised:
            os.open(mount / (case.node + ".raw"), os.O_RDONLY)
        assert raised.value.errno == errno.ENOENT
        # "store: /node: ..." or, for a document that is not valid JSON, its key: "store: node/.zarray: ..."
        named = re.compile(rf"[ /]{re.escape(case.node)}(: |/|\.array\.json)")
        lines = [line for line in mount.log_lines() if named.search(line)]
        assert len(lines) == 1 and " WARNING " in lines[0], lines
    else:
        assert case.read is not None and case.chunk_key is not None
        fd = os.open(mount / (case.node + ".raw"), os.O_RDONLY | os.O_DIRECT)
        try:
            data = os.pread(fd, case.read[1] - case.read[0], case.read[0])
        except OSError as exc:
            assert exc.errno == errno.EIO, exc
            lines = log_lines_naming(mount, case.chunk_key)
            assert len(lines) == 1 and " ERROR " in lines[0] and f"array /{case.node}" in lines[0], lines
            assert str(corpus.root / case.store) in lines[0]
        else:
            assert outcome_allows(case, data)
            assert log_lines_naming(mount, case.chunk_key) == []
        finally:
            os.close(fd)
    np.testing.assert_array_equal(np.load(mount / "good.npy"), corpus_builder.GOOD)
    assert mount.pid is not None and pid_alive(mount.pid)


@pytest.mark.parametrize("case_id", [c for c in case_ids() if c.startswith(("v1-", "root-"))])
def test_mount_refuses_a_broken_root(case_id: str, corpus: corpus_builder.Corpus, tmp_path: Path) -> None:
    case = find(corpus, case_id)
    (tmp_path / "mnt").mkdir()
    result = run_zarrfs("mount", corpus.root / case.store, tmp_path / "mnt", "--log-file", tmp_path / "log")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("zarrfs: error: "), result.stderr
    assert all(word in lines[0] for word in case.words), lines[0]
    assert not os.path.ismount(tmp_path / "mnt")


def test_corpus_figures(corpus: corpus_builder.Corpus) -> None:
    """The size of the corpus, for the record; a shrinking corpus would be a regression."""
    stages: dict[str, int] = {}
    for case in corpus.cases:
        stages[case.stage] = stages.get(case.stage, 0) + 1
    print(f"corpus: {len(corpus.cases)} cases {stages}")
    assert len(corpus.cases) >= 580 and stages["chunk"] >= 200 and stages["metadata"] >= 350


def test_bombs_leave_daemon_memory_flat(corpus: corpus_builder.Corpus, mounts: dict[str, Mount]) -> None:
    """Every decompression bomb (up to 1 GiB decoded) read through the mount: the daemon's peak stays small."""
    mount = mounts["v2.zarr"]
    bombs = [c for c in corpus.cases if "-bomb-" in c.id]
    assert len(bombs) == len(corpus_builder.BOMBS)
    for case in bombs:
        fd = os.open(mount / (case.node + ".raw"), os.O_RDONLY | os.O_DIRECT)
        try:
            assert case.read is not None
            with pytest.raises(OSError) as raised:
                os.pread(fd, case.read[1] - case.read[0], case.read[0])
            assert raised.value.errno == errno.EIO
        finally:
            os.close(fd)
    assert mount.pid is not None
    status = Path(f"/proc/{mount.pid}/status").read_text()
    peak_mib = int(status.split("VmHWM:")[1].split()[0]) >> 10
    print(f"daemon peak RSS after {len(bombs)} bombs: {peak_mib} MiB")
    assert peak_mib < 200
