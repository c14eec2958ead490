"""The engine over HTTP: oracle stores served from 127.0.0.1, read through fsspec's HTTP file system.

Two servers: the handler of `python -m http.server` (directory index pages,
no Range support: the engine must still return the right bytes), and one
that honours Range requests as object stores do. Both answer from threads of
the test process, with a listen backlog that takes zarrfs's burst of
connections (the stdlib's backlog of 5 drops SYNs, a 1 s retransmit each).
"""

from __future__ import annotations

import errno
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest

from oracles import ORACLES, HierarchyOracle, Oracle, write_hierarchy
from remoteutil import BackloggedHTTPServer, serving
from zarrfs.engine.engine import Engine
from zarrfs.errors import ChunkError, NotFoundError
from zarrfs.model.meta import ArrayMeta, GroupMeta

CASES = [
    "zp3-dtype-le-f8", "zp2-dtype-struct-mixed-endian", "zp2-separator-slash", "zp3-key-v2-dot",
    "zp3-fill-nan-missing", "zp2-fill-int-missing", "zp3-sharding-end", "zp3-sharding-start",
    "zp3-sharding-nested", "zp3-sharding-3d-drop", "ts3-sharding-start-blank", "zp3-root-array", "zp3-0d",
    "zp3-codec-blosc-zstd-bitshuffle", "zp2-compressor-lzma",
]


@dataclass(frozen=True)
class ServedDir:
    root: Path
    oracles: dict[str, Oracle]
    hierarchies: dict[str, HierarchyOracle]


@dataclass(frozen=True)
class Served:
    root: Path  # the directory the server serves
    url: str  # http://127.0.0.1:PORT


@pytest.fixture(scope="module")
def served_dir(tmp_path_factory: pytest.TempPathFactory) -> ServedDir:
    root = tmp_path_factory.mktemp("www")
    oracles: dict[str, Oracle] = {}
    for name in CASES:
        (root / name).mkdir()
        oracles[name] = ORACLES[name](root / name)
    hierarchies: dict[str, HierarchyOracle] = {}
    for zarr_format in (2, 3):
        for consolidated in (False, True):
            label = f"h{zarr_format}{'c' if consolidated else ''}"
            (root / label).mkdir()
            hierarchies[label] = write_hierarchy(root / label, zarr_format, consolidated=consolidated)
    return ServedDir(root, oracles, hierarchies)


class StdlibHandler(SimpleHTTPRequestHandler):
    """`python -m http.server`'s handler (HTTP/1.0, whole files, index pages), without its request log."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        return


def _stdlib_server(root: Path) -> Iterator[str]:
    with serving(BackloggedHTTPServer(("127.0.0.1", 0), lambda *a: StdlibHandler(*a, directory=str(root)))) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


class RangeHandler(StdlibHandler):
    """Static files with single-range `Range: bytes=a-b`, `a-` and `-n` support (RFC 9110)."""

    partial_responses = 0  # across all instances: proves the engine asked for ranges

    def send_head(self) -> BinaryIO | None:
        spec = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if not spec or not path.is_file():
            return super().send_head()
        data = path.read_bytes()
        first, _, last = spec.removeprefix("bytes=").partition("-")
        if first:
            start, stop = int(first), min(len(data), int(last) + 1 if last else len(data))
        else:  # suffix: the last `last` bytes
            start, stop = max(0, len(data) - int(last)), len(data)
        if start >= len(data):
            self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            return None
        RangeHandler.partial_responses += 1
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        self.wfile.write(data[start:stop])
        return None


def _range_server(root: Path) -> Iterator[str]:
    with serving(BackloggedHTTPServer(("127.0.0.1", 0), lambda *a: RangeHandler(*a, directory=str(root)))) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="module", params=["stdlib-no-ranges", "threaded-ranges"])
def server(request: pytest.FixtureRequest, served_dir: ServedDir) -> Iterator[Served]:
    start = _stdlib_server if request.param == "stdlib-no-ranges" else _range_server
    for url in start(served_dir.root):
        yield Served(served_dir.root, url)


def url_of(served: Served, store: Path) -> str:
    return f"{served.url}/{store.relative_to(served.root).as_posix()}"


@pytest.mark.parametrize("name", CASES)
def test_array_over_http(name: str, server: Served, served_dir: ServedDir, open_engine: Callable[..., Engine]) -> None:
    oracle = served_dir.oracles[name]
    engine = open_engine(url_of(server, oracle.store))
    reader = engine.reader(oracle.node)
    want = np.ascontiguousarray(oracle.expected).astype(reader.meta.dtype).tobytes()
    assert reader.read(0, len(want)) == want
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for _ in range(50):
        start = int(rng.integers(0, len(want) + 1))
        stop = start + int(rng.integers(0, 200))
        assert reader.read(start, stop) == want[start:stop]


@pytest.mark.parametrize("label", ["h2", "h3", "h2c", "h3c"])
def test_hierarchy_over_http(label: str, server: Served, served_dir: ServedDir, open_engine: Callable[..., Engine]) -> None:
    """Listing comes from the server's directory index pages (or consolidated metadata)."""
    oracle = served_dir.hierarchies[label]
    engine = open_engine(url_of(server, oracle.store))
    for path, spec in oracle.nodes.items():
        node = engine.hierarchy.node(path)
        assert isinstance(node, GroupMeta if spec.kind == "group" else ArrayMeta)
        if spec.kind == "group":
            assert [c.name for c in engine.hierarchy.children(path)] == list(spec.children), path
        else:
            assert node.dimension_names == spec.dimension_names
            reader = engine.reader(path)
            assert reader.read(0, node.nbytes) == spec.expected.astype(node.dtype).tobytes()


def test_missing_store_over_http(server: Served, open_engine: Callable[..., Engine]) -> None:
    with pytest.raises(NotFoundError) as raised:
        open_engine(f"{server.url}/no/such/store.zarr")
    assert "127.0.0.1" in str(raised.value) and "does not exist" in str(raised.value)
    assert raised.value.errno == errno.ENOENT


def test_corrupt_chunk_over_http(server: Served, served_dir: ServedDir, open_engine: Callable[..., Engine]) -> None:
    """A chunk that fails to decode is EIO naming the URL and key, over HTTP too."""
    oracle = served_dir.oracles["zp2-compressor-lzma"]
    engine = open_engine(url_of(server, oracle.store))
    reader = engine.reader(oracle.node)
    chunk = oracle.store / oracle.node / "0.0"
    original = chunk.read_bytes()
    chunk.write_bytes(b"garbage")
    try:
        with pytest.raises(ChunkError) as raised:
            reader.read(0, 4)
    finally:
        chunk.write_bytes(original)
    assert url_of(server, oracle.store) in str(raised.value) and "arr/0.0" in str(raised.value)


def test_sharded_reads_use_range_requests(served_dir: ServedDir, open_engine: Callable[..., Engine]) -> None:
    oracle = served_dir.oracles["zp3-sharding-end"]
    for url in _range_server(served_dir.root):
        reader = open_engine(f"{url}/zp3-sharding-end/store.zarr").reader(oracle.node)
        before = RangeHandler.partial_responses  # metadata, read up to its size limit, is ranged too
        assert reader.read(32, 40) == oracle.expected[0, 4].tobytes()  # in inner chunk (0, 1): stored
        # One of the shard's 4 inner chunks is a quarter: the whole shard in one ranged request
        # (shard_spans.py; a load wanting less reads the index and its range: test_shard_spans.py)
        assert RangeHandler.partial_responses - before == 1
