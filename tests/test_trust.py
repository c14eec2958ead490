"""The trust rule (zarrfs/stores/trust.py) and the template expansion (reference_templates.py), without mounts.

Expected values are spelled out from the rule's statement (RFC 3986 for what a URL names), not taken from the code.
"""

from __future__ import annotations

import logging

import pytest

from zarrfs.stores.reference_templates import MAX_GENERATED, TemplateError, expand_references
from zarrfs.stores.trust import TargetRefused, TrustRule, parse

ORIGIN = "http://data.example:8000/sets/refs.json"


@pytest.mark.parametrize(("url", "scheme", "authority", "path"), [
    ("HTTP://Data.Example:80/a/../b", "http", "data.example", "/b"),
    ("https://h.example:443/x/./y", "https", "h.example", "/x/y"),
    ("http://user:pw@h.example:8080/%2e%2e/etc", "http", "h.example:8080", "/etc"),
    ("http://[::1]:9000/x", "http", "[::1]:9000", "/x"),
    ("s3a://bucket/k/../../other/x", "s3", "bucket", "/other/x"),
    ("gcs://bucket/k", "gs", "bucket", "/k"),
    ("/etc/passwd", "file", "", "/etc/passwd"),
    ("file:///etc/../etc/passwd", "file", "", "/etc/passwd"),
    ("FILE:///etc/passwd", "file", "", "/etc/passwd"),
    ("local:///root/.ssh/id_rsa", "file", "", "/root/.ssh/id_rsa"),
])
def test_urls_are_normalised(url: str, scheme: str, authority: str, path: str) -> None:
    place = parse(url)
    assert (place.scheme, place.authority, place.path) == (scheme, authority, path)


@pytest.mark.parametrize("url", ["relative/chunk.bin", "~/.aws/credentials", "file://localhost/etc/passwd",
                                 "file:/etc/passwd", "http://a.example\\@b.example/", "http://h.example/a b",
                                 "http://h.example:99999/", "simplecache::http://h.example/x", "", "http:///x"])
def test_urls_that_cannot_be_judged(url: str) -> None:
    with pytest.raises(ValueError):
        parse(url)


def test_a_remote_source_reads_its_origin_and_what_is_allowed(caplog: pytest.LogCaptureFixture) -> None:
    rule = TrustRule(ORIGIN, ["s3://pub/data", "/srv/nc"])
    assert rule.check("http://DATA.example:8000/other/place.bin") == "http://DATA.example:8000/other/place.bin"
    assert rule.check("http://data.example:8000/a/../b.bin") == "http://data.example:8000/b.bin"  # read as checked
    assert rule.check("s3://pub/data/x.nc") == "s3://pub/data/x.nc"
    assert rule.check("s3://pub/data") == "s3://pub/data"
    assert rule.check("/srv/nc/x.nc") == "file:///srv/nc/x.nc"
    with caplog.at_level(logging.DEBUG, logger="zarrfs.stores.trust"):
        for refused, prefix in [("http://data.example:8001/x", "http://data.example:8001/"),
                                ("https://data.example:8000/x", "https://data.example:8000/"),
                                ("http://data.example.evil:8000/x", "http://data.example.evil:8000/"),
                                ("s3://pub/database/x", "s3://pub/"), ("s3://pub/data/../private/x", "s3://pub/"),
                                ("s3://pub/data/%2f..%2fprivate", "s3://pub/"),
                                ("/srv/ncx/x.nc", "file:///srv/ncx/"), ("file:///root/.aws/credentials", "file:///root/.aws/"),
                                ("/srv/nc/../../etc/shadow", "file:///etc/")]:
            with pytest.raises(TargetRefused, match=f"--virtual-chunks {prefix} allows it"):
                rule.check(refused)
        with pytest.raises(TargetRefused, match="no option allows it"):
            rule.check("relative/x")
        with pytest.raises(TargetRefused):
            rule.check("http://data.example:8001/y")  # the same prefix again: no second warning
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 8  # one per distinct prefix (s3://pub/ three times), one for what no prefix allows
    assert all("pw" not in r.getMessage() for r in caplog.records)


def test_a_local_source_reads_everything() -> None:
    rule = TrustRule(None)
    for url in ("/etc/passwd", "file:///x", "http://anywhere.example/x", "relative"):
        assert rule.check(url) == url
    assert rule.refusals(["/etc/passwd"]) == []


def test_refusals_are_counted_per_prefix() -> None:
    rule = TrustRule(ORIGIN)
    found = rule.refusals(["/a/x", "file:///a/y", "http://data.example:8000/ok", "s3://b/1", "s3://b/2", "s3://b/3"])
    assert [(r.prefix, r.references) for r in found] == [("file:///a/", 2), ("s3://b/", 3)]


def test_icechunk_containers_must_lie_under_a_prefix() -> None:
    rule = TrustRule(None, ["s3://bucket/data/", "/srv/nc"])
    assert rule.authorises_prefix("s3://bucket/data/sub/")
    assert rule.authorises_prefix("file:///srv/nc/")
    assert not rule.authorises_prefix("s3://bucket/")  # wider than what was allowed
    assert not rule.authorises_prefix("file:///srv/nc/../")


# ------------------------------------------------------------------ templates


def test_templates_and_gen_expand() -> None:
    refs = expand_references({
        "version": 1, "templates": {"u": "https://h.example/p", "f": "part{{i}}.nc"},
        "refs": {"a/0": ["{{u}}/x.nc", 0, 10], "a/1": ["{{ u + '/y.nc' }}"], "meta": {"k": 1}, "raw": "base64:AAA="},
        "gen": [{"key": "g/{{i}}", "url": "{{u}}/{{f}}", "offset": "{{(i + 1) * 1000 - i % 2}}", "length": "{{100 // 3}}",
                 "dimensions": {"i": {"start": 0, "stop": 3}}},
                {"key": "w/{{name}}", "url": "{{u}}/{{name}}.bin", "dimensions": {"name": ["x", "y"]}}]})
    assert refs["a/0"] == ["https://h.example/p/x.nc", 0, 10]
    assert refs["a/1"] == ["https://h.example/p/y.nc"]
    assert refs["meta"] == '{"k": 1}' and refs["raw"] == "base64:AAA="
    assert refs["g/0"] == ["https://h.example/p/part0.nc", 1000, 33]
    assert refs["g/1"] == ["https://h.example/p/part1.nc", 1999, 33]
    assert refs["g/2"] == ["https://h.example/p/part2.nc", 3000, 33]
    assert refs["w/y"] == ["https://h.example/p/y.bin"]


@pytest.mark.parametrize("expression", [
    "u.__class__", "u.__globals__[os].environ", "cycler.__init__.__globals__.os.popen('id').read()",
    "u|attr('x')", "'a' * 1000000000", "'%999999999d' % 1", "[1, 2]", "f(1)", "2 ** 1000000", "1 / 2",
    "lipsum.__globals__", "u if u else u", "1 // 0",
])
def test_expressions_that_are_refused(expression: str) -> None:
    with pytest.raises(TemplateError):
        expand_references({"version": 1, "templates": {"u": "x"}, "refs": {"a/0": [f"{{{{{expression}}}}}", 0, 1]}})


def test_gen_is_bounded() -> None:
    gen = {"key": "a/{{i}}", "url": "s3://b/x", "dimensions": {"i": {"stop": MAX_GENERATED + 1}}}
    with pytest.raises(TemplateError, match="more than"):
        expand_references({"version": 1, "refs": {}, "gen": [gen]})
    with pytest.raises(TemplateError, match="both"):
        expand_references({"version": 1, "refs": {}, "gen": [{**gen, "offset": "0", "dimensions": {"i": [0]}}]})
