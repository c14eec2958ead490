"""What a reference set or a server fetched from a remote origin can make the daemon read (stores/trust.py).

Real mounts of reference sets served by the suite's HTTP server and by moto's
S3 server. Each array's one chunk is a reference to a target: the origin
itself (plain, through a `{{u}}` template, through a `gen` entry), a local
file only root may read (mode 600, as a bare path, as `file://` and in other
spellings), another port on 127.0.0.1, another bucket, a redirect from the
origin to another port. The bytes of every target are written by the test
(the oracle); what reaches the mount is either exactly them or EIO, and the
daemon's log names each refused prefix once, with the flag that allows it.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kerchunk.df import refs_to_dataframe

import zarrfs

from mountutil import Mount, mounted_many, run_zarrfs
from remoteutil import HttpServer, RangeHandler, S3Server, http_server, remote_mount, s3_server

CHUNK = 16
SECRET = b"root-only secret"  # 16 bytes: what the local file holds
ORIGIN_BYTES = bytes(range(100, 100 + 4 * CHUNK))
OTHER_BYTES = b"another origin!!" * 2


def zarray() -> str:
    return json.dumps({"zarr_format": 2, "shape": [CHUNK], "chunks": [CHUNK], "dtype": "|u1", "compressor": None,
                       "filters": None, "fill_value": 0, "order": "C"})


def array_refs(name: str, target: list[object]) -> dict[str, object]:
    """The references of one array `name` of CHUNK bytes whose one chunk is `target`."""
    return {f"{name}/.zarray": zarray(), f"{name}/0": target}


class RedirectingHandler(RangeHandler):
    """Static files, and the paths of `moved` answered 302 with the location they map to."""

    moved: dict[str, str] = {}  # set per server  # noqa: RUF012 - a class of its own per server

    def send_head(self):  # noqa: ANN201 - the stdlib's signature
        if self.path in self.moved:
            self.counter[self.path] += 1
            self.send_response(302)
            self.send_header("Location", self.moved[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return super().send_head()


@dataclass
class Servers:
    origin: HttpServer  # serves the reference set and origin.bin
    other: HttpServer  # another port on 127.0.0.1: other.bin
    served: Path
    secret: Path  # a local file, mode 600


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    served, elsewhere = tmp_path / "origin", tmp_path / "other"
    served.mkdir()
    elsewhere.mkdir()
    (served / "origin.bin").write_bytes(ORIGIN_BYTES)
    (elsewhere / "other.bin").write_bytes(OTHER_BYTES)
    (elsewhere / "chunk.bin").write_bytes(OTHER_BYTES[:CHUNK])
    secret = tmp_path / "private" / "secret.bin"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    with http_server(elsewhere) as other:
        # /away/other.bin (a reference target) and a chunk of plain.zarr lead to the other server.
        moved = {"/away/other.bin": f"{other.url}/other.bin", "/plain.zarr/b/0": f"{other.url}/chunk.bin"}
        handler = type("Redirecting", (RedirectingHandler,), {"moved": moved})
        with http_server(served, handler) as origin:
            yield Servers(origin, other, served, secret)


def v1_reference_set(s: Servers) -> dict[str, object]:
    """Version 1, with a template for the origin and a `gen` entry: every kind of target, one array each."""
    refs: dict[str, object] = {".zgroup": json.dumps({"zarr_format": 2})}
    refs |= array_refs("same", ["{{u}}/origin.bin", CHUNK, CHUNK])
    refs |= array_refs("dotted", [f"{s.origin.url}/sub/../origin.bin", 0, CHUNK])
    refs |= array_refs("leak", [str(s.secret), 0, CHUNK])
    refs |= array_refs("leak_url", [f"file://{s.secret}", 0, CHUNK])
    refs |= array_refs("leak_local", [f"local://{s.secret.parent}/./secret.bin", 0, CHUNK])
    refs |= array_refs("leak_upper", [f"FILE://{s.secret}", 0, CHUNK])
    refs |= array_refs("other", [f"{s.other.url}/other.bin", 0, CHUNK])
    # The origin's host:port as user info, the other server's as the host: another origin.
    userinfo = s.other.url.replace("http://", f"http://{s.origin.url.removeprefix('http://')}@")
    refs |= array_refs("other_userinfo", [f"{userinfo}/other.bin", 0, CHUNK])
    refs |= array_refs("redirect", [f"{s.origin.url}/away/other.bin", 0, CHUNK])
    refs["generated/.zarray"] = json.dumps({**json.loads(zarray()), "shape": [2 * CHUNK]})
    return {"version": 1, "templates": {"u": s.origin.url}, "refs": refs,
            "gen": [{"key": "generated/{{i}}", "url": "{{u}}/origin.bin", "offset": "{{(i + 2) * 16}}",
                     "length": "16", "dimensions": {"i": {"stop": 2}}}]}


def read_or_errno(path: Path) -> bytes | int:
    try:
        return path.read_bytes()
    except OSError as exc:
        return exc.errno or -1


def refused_lines(mount: Mount, prefix: str) -> list[str]:
    return [line for line in mount.log_lines() if " WARNING " in line and f"--virtual-chunks {prefix} allows" in line]


LOCAL_REFUSED = r"WARNING zarrfs\.stores\.trust: reference target \S+secret.bin: a local file, not read for a source from http://127\.0\.0\.1"
OTHER_REFUSED = r"WARNING zarrfs\.stores\.trust: reference target http://\S+/other.bin: another origin"
REDIRECT_REFUSED = r"WARNING zarrfs\.stores\.trust: redirect to http://127\.0\.0\.1:\d+/chunk.bin: another origin"
READ_FAILED = r"ERROR zarrfs\.fuse\.ops: read /\w+\.raw: .* refused: "


def test_remote_json_references_read_only_their_origin(servers: Servers, tmp_path: Path) -> None:
    (servers.served / "refs.json").write_text(json.dumps(v1_reference_set(servers)))
    mount = remote_mount(tmp_path, f"{servers.origin.url}/refs.json",
                         expected_log=(LOCAL_REFUSED, OTHER_REFUSED, READ_FAILED))
    with mounted_many([mount]):
        root = mount.root
        assert (root / "same.raw").read_bytes() == ORIGIN_BYTES[CHUNK:2 * CHUNK]
        assert (root / "dotted.raw").read_bytes() == ORIGIN_BYTES[:CHUNK]
        assert (root / "generated.raw").read_bytes() == ORIGIN_BYTES[2 * CHUNK:]
        before = dict(servers.other.counter)
        for name in ("leak", "leak_url", "leak_local", "leak_upper", "other", "other_userinfo", "redirect"):
            for _ in range(2):  # read twice: still one warning per prefix
                assert read_or_errno(root / f"{name}.raw") == errno.EIO, name
        # Nothing reached the other server (the redirect was stopped before its GET).
        assert dict(servers.other.counter) == before
        assert (root / "same.raw").read_bytes() == ORIGIN_BYTES[CHUNK:2 * CHUNK]  # the rest still works
        assert len(refused_lines(mount, f"file://{servers.secret.parent}/")) == 1
        assert len(refused_lines(mount, f"{servers.other.url}/")) == 1
        assert all(SECRET.decode() not in line for line in mount.log_lines())


def test_authorised_prefixes_are_read(servers: Servers, tmp_path: Path) -> None:
    """`--virtual-chunks` opens exactly the prefixes it names: another port, a local directory."""
    (servers.served / "refs.json").write_text(json.dumps(v1_reference_set(servers)))
    mount = remote_mount(tmp_path, f"{servers.origin.url}/refs.json",
                         "--virtual-chunks", servers.other.url, "--virtual-chunks", str(servers.secret.parent))
    with mounted_many([mount]):
        root = mount.root
        assert (root / "other.raw").read_bytes() == OTHER_BYTES[:CHUNK]
        assert (root / "other_userinfo.raw").read_bytes() == OTHER_BYTES[:CHUNK]
        assert (root / "redirect.raw").read_bytes() == OTHER_BYTES[:CHUNK]
        for name in ("leak", "leak_url", "leak_local", "leak_upper"):
            assert (root / f"{name}.raw").read_bytes() == SECRET, name


@pytest.mark.mount  # zarrfs.mounted() mounts out of the marking rules' sight
def test_the_python_api_authorises_the_same_way(servers: Servers, tmp_path: Path) -> None:
    """`zarrfs.mounted(..., virtual_chunks=[...])` is `--virtual-chunks`: the other server opens, the file not."""
    (servers.served / "refs.json").write_text(json.dumps(v1_reference_set(servers)))
    log = tmp_path / "api.log"
    with zarrfs.mounted(f"{servers.origin.url}/refs.json", virtual_chunks=[servers.other.url],
                        log_file=str(log)) as root:
        assert (root / "other.raw").read_bytes() == OTHER_BYTES[:CHUNK]
        assert read_or_errno(root / "leak.raw") == errno.EIO
    warnings = [line for line in log.read_text().splitlines() if " WARNING " in line]
    assert len(warnings) == 1 and f"--virtual-chunks file://{servers.secret.parent}/ allows it" in warnings[0]


def test_a_prefix_matches_on_segment_boundaries(servers: Servers, tmp_path: Path) -> None:
    """`--virtual-chunks DIR/priv` allows neither DIR/private/... nor DIR/priv/../private/..."""
    refs: dict[str, object] = {".zgroup": json.dumps({"zarr_format": 2})}
    refs |= array_refs("sibling", [str(servers.secret), 0, CHUNK])
    refs |= array_refs("climbing", [f"{servers.secret.parent.parent}/priv/../private/secret.bin", 0, CHUNK])
    (servers.served / "refs.json").write_text(json.dumps(refs))
    prefix = f"file://{servers.secret.parent.parent}/priv"
    mount = remote_mount(tmp_path, f"{servers.origin.url}/refs.json", "--virtual-chunks", prefix,
                         expected_log=(LOCAL_REFUSED, READ_FAILED))
    with mounted_many([mount]):
        assert read_or_errno(mount.root / "sibling.raw") == errno.EIO
        assert read_or_errno(mount.root / "climbing.raw") == errno.EIO
        assert len(refused_lines(mount, f"file://{servers.secret.parent}/")) == 1


def test_local_reference_sets_read_what_they_name(servers: Servers, tmp_path: Path) -> None:
    """A reference set on the user's own disk is the user's: local files and any host, as before."""
    local_files = {".zgroup": json.dumps({"zarr_format": 2}), **array_refs("leak", [str(servers.secret), 0, CHUNK]),
                   **array_refs("climbing", [f"{servers.secret.parent}/../private/secret.bin", 0, CHUNK])}
    (tmp_path / "files.json").write_text(json.dumps(local_files))
    elsewhere = {".zgroup": json.dumps({"zarr_format": 2}),
                 **array_refs("other", [f"{servers.other.url}/other.bin", 0, CHUNK])}
    (tmp_path / "hosts.json").write_text(json.dumps(elsewhere))
    files, hosts = remote_mount(tmp_path, str(tmp_path / "files.json"), name="files"), \
        remote_mount(tmp_path, str(tmp_path / "hosts.json"), name="hosts")
    with mounted_many([files, hosts]):
        assert (files.root / "leak.raw").read_bytes() == SECRET
        assert (files.root / "climbing.raw").read_bytes() == SECRET
        assert (hosts.root / "other.raw").read_bytes() == OTHER_BYTES[:CHUNK]


def test_tree_lists_refused_targets_once_per_prefix(servers: Servers) -> None:
    (servers.served / "refs.json").write_text(json.dumps(v1_reference_set(servers)))
    done = run_zarrfs("tree", f"{servers.origin.url}/refs.json")
    assert done.returncode == 0, done.stderr
    refused = [line for line in done.stdout.splitlines() if line.startswith("refused:")]
    # The four spellings of the local file; the other server, its user-info spelling (the redirect shows
    # only when followed).
    assert refused == [
        f"refused: 4 references to file://{servers.secret.parent}/ (such as {servers.secret}); "
        f"--virtual-chunks file://{servers.secret.parent}/ allows them",
        f"refused: 2 references to {servers.other.url}/ (such as {servers.other.url}/other.bin); "
        f"--virtual-chunks {servers.other.url}/ allows them"]
    as_json = run_zarrfs("tree", "--json", f"{servers.origin.url}/refs.json")
    listed = json.loads(as_json.stdout)["refused_references"]
    assert [(r["prefix"], r["references"]) for r in listed] == [
        (f"file://{servers.secret.parent}/", 4), (f"{servers.other.url}/", 2)]
    assert "refused" not in run_zarrfs("tree", "--virtual-chunks", servers.other.url, "--virtual-chunks",
                                       str(servers.secret.parent), f"{servers.origin.url}/refs.json").stdout


def test_plain_http_store_redirect_to_another_host(servers: Servers, tmp_path: Path) -> None:
    """A plain Zarr store over HTTP (zarrfs's own client): a chunk the server redirects to another port is EIO."""
    store = servers.served / "plain.zarr"
    store.mkdir()
    (store / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    for name in ("a", "b"):
        (store / name).mkdir(parents=True)
        (store / name / ".zarray").write_text(zarray())
    (store / "a" / "0").write_bytes(ORIGIN_BYTES[:CHUNK])  # b/0 is the server's redirect
    url = f"{servers.origin.url}/plain.zarr"
    before = dict(servers.other.counter)
    mount = remote_mount(tmp_path, url, expected_log=(REDIRECT_REFUSED, READ_FAILED))
    with mounted_many([mount]):
        assert read_or_errno(mount.root / "b.raw") == errno.EIO
        assert (mount.root / "a.raw").read_bytes() == ORIGIN_BYTES[:CHUNK]
        assert dict(servers.other.counter) == before
        assert len(refused_lines(mount, f"{servers.other.url}/")) == 1
    allowed = remote_mount(tmp_path, url, "--virtual-chunks", f"{servers.other.url}/chunk.bin", name="allowed")
    with mounted_many([allowed]):
        assert (allowed.root / "b.raw").read_bytes() == OTHER_BYTES[:CHUNK]


# ---------------------------------------------------------------------- S3

BUCKET, OTHER_BUCKET = "trust-refs", "trust-other"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        for bucket in (BUCKET, OTHER_BUCKET):
            server.client().create_bucket(Bucket=bucket)
        server.client().put_object(Bucket=BUCKET, Key="data/origin.bin", Body=ORIGIN_BYTES)
        server.client().put_object(Bucket=OTHER_BUCKET, Key="other.bin", Body=OTHER_BYTES)
        yield server


def s3_options(s3: S3Server) -> list[str]:
    """`-S` options reading the reference set and its targets from moto (credentials go by environment)."""
    options = json.dumps({"key": "testing", "secret": "testing", "endpoint_url": s3.endpoint,
                          "client_kwargs": {"region_name": "us-east-1"}})
    return ["-S", f"target_options={options}", "-S", "remote_protocol=s3", "-S", f"remote_options={options}"]


def s3_refs(secret: Path) -> dict[str, object]:
    """Version 0: the same bucket, another bucket, a local file, the same bucket spelled s3a:// with '..'."""
    return {".zgroup": json.dumps({"zarr_format": 2}),
            **array_refs("same", [f"s3://{BUCKET}/data/origin.bin", CHUNK, CHUNK]),
            **array_refs("spelled", [f"s3://{BUCKET}/x/../data/origin.bin", 0, CHUNK]),
            **array_refs("other", [f"s3://{OTHER_BUCKET}/other.bin", 0, CHUNK]),
            **array_refs("leak", [str(secret), 0, CHUNK])}


S3_OTHER_REFUSED = rf"WARNING zarrfs\.stores\.trust: reference target s3://{OTHER_BUCKET}/other.bin: another origin"
S3_LOCAL_REFUSED = r"WARNING zarrfs\.stores\.trust: reference target \S+secret.bin: a local file, not read for a source from s3://"


@pytest.mark.parametrize("kind", ["json", "parquet"])
def test_s3_references_read_only_their_bucket(kind: str, s3: S3Server, tmp_path: Path) -> None:
    """JSON v0 and kerchunk's Parquet (refs_to_dataframe) on S3: their bucket, not another, not a local file."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    refs = s3_refs(secret)
    if kind == "json":
        key = f"{tmp_path.name}/refs.json"
        s3.client().put_object(Bucket=BUCKET, Key=key, Body=json.dumps(refs).encode())
    else:
        key = f"{tmp_path.name}/refs.parq"
        refs_to_dataframe(refs, str(tmp_path / "refs.parq"))
        s3.upload(BUCKET, tmp_path / "refs.parq", key)
    source = f"reference://s3://{BUCKET}/{key}"
    mount = remote_mount(tmp_path, source, *s3_options(s3),
                         expected_log=(S3_OTHER_REFUSED, S3_LOCAL_REFUSED, READ_FAILED))
    with mounted_many([mount]):
        assert (mount.root / "same.raw").read_bytes() == ORIGIN_BYTES[CHUNK:2 * CHUNK]
        assert (mount.root / "spelled.raw").read_bytes() == ORIGIN_BYTES[:CHUNK]
        assert read_or_errno(mount.root / "other.raw") == errno.EIO
        assert read_or_errno(mount.root / "leak.raw") == errno.EIO
        assert len(refused_lines(mount, f"s3://{OTHER_BUCKET}/")) == 1
        assert len(refused_lines(mount, f"file://{tmp_path}/")) == 1
    allowed = remote_mount(tmp_path, source, *s3_options(s3), "--virtual-chunks", f"s3://{OTHER_BUCKET}",
                           name="allowed", expected_log=(S3_LOCAL_REFUSED, READ_FAILED))
    with mounted_many([allowed]):
        assert (allowed.root / "other.raw").read_bytes() == OTHER_BYTES[:CHUNK]
        assert read_or_errno(allowed.root / "leak.raw") == errno.EIO
    tree = run_zarrfs("tree", source, *s3_options(s3))
    # (in the order met: JSON's document order, Parquet's files by array name)
    assert sorted(line.split(" (")[0] for line in tree.stdout.splitlines() if line.startswith("refused:")) == [
        f"refused: 1 reference to file://{tmp_path}/", f"refused: 1 reference to s3://{OTHER_BUCKET}/"], tree.stderr


# ------------------------------------------------------- templates run nothing

# A jinja2 expression that runs a shell command if rendered unsandboxed, and one that reaches os.environ
# through str.format (fsspec's default rendering of `{{name}}` when a template itself holds `{{`).
JINJA_PAYLOAD = "{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}"
FORMAT_PAYLOAD = "{{u.__globals__[os].environ[HOME]}}"


@pytest.mark.parametrize("where", ["template", "refs", "gen-url", "gen-offset", "format"])
def test_a_template_expression_runs_nothing(where: str, servers: Servers, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = JINJA_PAYLOAD.replace("MARKER", str(marker))
    document: dict[str, object] = {"version": 1, "templates": {"u": servers.origin.url},
                                   "refs": {".zgroup": json.dumps({"zarr_format": 2}), **array_refs("a", [
                                       "{{u}}/origin.bin", 0, CHUNK])}}
    gen = {"key": "g/{{i}}", "url": "{{u}}/origin.bin", "offset": "0", "length": "16", "dimensions": {"i": [0]}}
    if where == "template":
        document["templates"] = {"u": servers.origin.url, "evil": payload}
        document["refs"]["a/0"] = ["{{evil}}", 0, CHUNK]  # type: ignore[index]
    elif where == "refs":
        document["refs"]["a/0"] = [payload, 0, CHUNK]  # type: ignore[index]
    elif where == "gen-url":
        document["gen"] = [{**gen, "url": payload}]
    elif where == "gen-offset":
        document["gen"] = [{**gen, "offset": payload}]
    else:
        document["templates"] = {"u": "{{x}}"}
        document["refs"]["a/0"] = [f"{servers.origin.url}/{FORMAT_PAYLOAD}", 0, CHUNK]  # type: ignore[index]
    (servers.served / "refs.json").write_text(json.dumps(document))
    for source in (f"{servers.origin.url}/refs.json", servers.served / "refs.json"):  # remote and local alike
        done = run_zarrfs("tree", source)
        assert done.returncode == 1
        assert "template expression" in done.stderr and "is not supported" in done.stderr, done.stderr
        assert not marker.exists()
        assert os.environ["HOME"] not in done.stderr.replace(str(tmp_path), "")
