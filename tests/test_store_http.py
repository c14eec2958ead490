"""zarrfs's own HTTP client (stores/http.py) answers as fsspec's HTTP file system does, and keeps
its connections: a plain http(s) source reads its objects with it, anything else with fsspec.

Engine- and mount-level behaviour over HTTP (every array, faults, retries, recovery) is in
test_engine_http.py, test_remote_faults.py and test_remote_http.py, which go through it too.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from remoteutil import BackloggedHTTPServer, RangeHandler, serving

from zarrfs.byte_ranges import OffsetRequest, RangeRequest, SuffixRequest
from zarrfs.errors import StoreError
from zarrfs.options import StoreOptions
from zarrfs.stores.http import HttpReader, HttpStatusError
from zarrfs.stores.store import Store

BODY = bytes(range(256)) * 1000  # 256,000 bytes


class KeepAliveHandler(RangeHandler):
    """HTTP/1.1 with keep-alive, a redirect (/moved/x -> /x), one that says not where (/nowhere/x), a
    stalled body (/stall) and a cut one (/cut)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.startswith(("/moved/", "/nowhere/")):
            self.send_response(302 if self.path.startswith("/moved/") else 301)
            if self.path.startswith("/moved/"):
                self.send_header("Location", self.path.removeprefix("/moved"))
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path in ("/stall", "/cut"):
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[:1000])
            self.wfile.flush()
            if self.path == "/stall":
                time.sleep(3)
            self.close_connection = True
        else:
            super().do_GET()


class CountingServer(BackloggedHTTPServer):
    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.accepted = 0
        self.open: list[socket.socket] = []

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        self.accepted += 1
        self.open.append(request)
        super().process_request(request, client_address)

    def close_idle(self) -> None:
        """Close every connection from the server's side, as a server's keep-alive timeout does."""
        for connection in self.open:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def server(root: Path) -> Iterator[tuple[str, CountingServer]]:
    handler = type("Handler", (KeepAliveHandler,), {"counter": __import__("collections").Counter()})
    httpd = CountingServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(root)))
    with serving(httpd):
        yield f"http://127.0.0.1:{httpd.server_address[1]}", httpd


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, CountingServer]]:
    (tmp_path / "data").write_bytes(BODY)
    with server(tmp_path) as (url, httpd):
        yield url, httpd


def test_plain_http_reads_with_zarrfs_client_and_answers_as_fsspec(served: tuple[str, CountingServer]) -> None:
    url, _ = served
    ours = Store.open(url)
    assert ours._http is not None
    theirs = Store.open(url, {"headers": {"X-Test": "1"}})  # storage options: fsspec does it all
    assert theirs._http is None
    for store in (ours, theirs):
        assert bytes(store.get("data")) == BODY
        assert bytes(store.get_range("data", RangeRequest(1000, 5000))) == BODY[1000:5000]
        assert bytes(store.get_range("data", SuffixRequest(300))) == BODY[-300:]
        assert bytes(store.get_range("data", OffsetRequest(len(BODY) - 200))) == BODY[-200:]
        assert store.get("absent") is None
        assert store.get_range("absent", RangeRequest(0, 10)) is None
    assert bytes(ours.get("moved/data")) == BODY  # a redirect is followed
    assert ours.stats.as_dict()["retries"] == 0


def test_a_redirect_without_a_location_is_an_error_status(served: tuple[str, CountingServer]) -> None:
    """A 301 that names no Location (S3's answer to a request sent to the wrong region) is an error
    status, as a 4xx would be: never followed to the URL it came from."""
    url, _ = served
    with pytest.raises(HttpStatusError) as raised:
        HttpReader(5).cat_file(f"{url}/nowhere/data")
    assert raised.value.status == 301 and "without a Location" in str(raised.value)


def test_listings_and_existence_come_from_zarrfs_client_as_fsspec_answers_them(tmp_path: Path) -> None:
    """A plain http(s) source lists index pages and checks existence with zarrfs's client; fsspec's
    HTTP file system (aiohttp, ~9 MiB) is never made, and the answers are fsspec's."""
    root = tmp_path / "store.zarr"
    for path in ("zarr.json", "a/zarr.json", "a/c/0/0", "a/c/0/1", "a/c/1/0", "sub dir/zarr.json"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"{}")
    with server(tmp_path) as (url, _):
        ours = Store.open(f"{url}/store.zarr")
        theirs = Store.open(f"{url}/store.zarr", {"headers": {"X-Test": "1"}})  # fsspec does it all
        for prefix in ("", "a", "a/c", "a/c/0", "sub dir", "absent"):
            mine, fsspecs = ours.listdir(prefix), theirs.listdir(prefix)
            assert (sorted(mine[0]), sorted(mine[1])) == (sorted(fsspecs[0]), sorted(fsspecs[1])), prefix
        assert sorted(ours.listdir("")[0]) == ["a", "sub%20dir"]
        assert ours.exists() and theirs.exists()
        assert not Store.open(f"{url}/absent.zarr").exists()
        assert not Store.open(f"{url}/absent.zarr", {"headers": {"X-Test": "1"}}).exists()
        assert bytes(ours.get("a/c/0/1")) == b"{}"
        assert ours.remote and ours.local_path("zarr.json") is None
        assert ours._fs is None


def test_a_keep_alive_connection_is_reused_and_survives_the_server_closing_it(
        served: tuple[str, CountingServer]) -> None:
    url, httpd = served
    store = Store.open(url)
    for start in range(0, 20_000, 1000):
        assert bytes(store.get_range("data", RangeRequest(start, start + 1000))) == BODY[start:start + 1000]
    assert httpd.accepted == 1  # twenty requests, one keep-alive connection
    httpd.close_idle()
    time.sleep(0.1)
    assert bytes(store.get_range("data", RangeRequest(0, 10))) == BODY[:10]  # reconnects: not a failed try
    assert httpd.accepted == 2
    assert store.stats.as_dict()["retries"] == 0


def test_connections_are_pooled_across_threads_never_more_than_requests_in_flight(
        served: tuple[str, CountingServer]) -> None:
    """Threads share idle connections: eight threads, at most two requests at once, two connections."""
    url, httpd = served
    store = Store.open(url, options=StoreOptions(max_concurrency=2))

    def reads(first: int) -> None:
        for start in range(first, 20_000, 8000):
            assert bytes(store.get_range("data", RangeRequest(start, start + 1000))) == BODY[start:start + 1000]

    threads = [threading.Thread(target=reads, args=(i * 1000,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 1 <= httpd.accepted <= 2
    assert store.stats.as_dict()["max_in_flight"] <= 2


@pytest.mark.parametrize("path", ["stall", "cut"])
def test_a_stalled_or_cut_body_is_an_error_within_the_timeout_never_data(
        served: tuple[str, CountingServer], path: str) -> None:
    url, _ = served
    timeout = 0.25  # a local answer takes milliseconds; the stall waits this long per try
    store = Store.open(url, options=StoreOptions(timeout=timeout, retries=1, retry_backoff=0.01))
    with pytest.raises(StoreError) as raised:
        store.get(path)
    # The stall is ended by the timeout, not by the server, which closes its stalled body only after 3 s
    # (the cut body's error, without "within").
    assert (f"within {timeout:g} s" in str(raised.value)) == (path == "stall"), raised.value
    assert store.stats.as_dict()["retries"] == 1



def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (the certificate is its own CA)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_https_verifies_the_server_against_the_trusted_certificates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").write_bytes(BODY)
    cert, key = self_signed_certificate(tmp_path)
    with server(tmp_path) as (url, httpd):
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        https = url.replace("http://", "https://")
        untrusted = Store.open(https, options=StoreOptions(timeout=5, retries=0))
        with pytest.raises(StoreError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.get("data")
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # what the system trusts, for this test
        trusted = Store.open(https)
        assert trusted._http is not None
        assert bytes(trusted.get_range("data", RangeRequest(5, 50))) == BODY[5:50]
