"""What a source may make zarrfs read: the one trust rule, for reference targets and HTTP redirects.

A kerchunk reference set names the files its chunks are read from, and an
HTTP server names where a redirect leads: both are data from whoever
published the source. The rule:

- A source on the user's own disk is the user's: everything it names may be
  read (a local reference set reads what it names, as it always has).
- A source fetched from a remote origin may make zarrfs read from that same
  origin (the same scheme and host[:port] for http(s); the same bucket or
  container for s3, gs, az...; the same scheme and authority for any other
  protocol) and from the prefixes the user authorised (`--virtual-chunks
  PREFIX`, repeatable; a plain path means `file://` + its absolute path).
  Nothing else: not a local file (a bare path, `file://`, `local://`),
  not another host, port or bucket, not a chained URL (`a::b`), whose last
  link fsspec would open in ways this rule cannot see.

URLs are compared after normalisation, so that a spelling cannot slip past:
scheme and host in lower case, default ports dropped, `..` and `.`
segments resolved (also percent-encoded dots), and a URL with characters
URL parsers disagree about (backslashes, whitespace, control characters)
refused outright. A prefix covers a URL on path-segment boundaries
(`s3://b/data/` covers `s3://b/data/x`, not `s3://b/database`). The read
then goes to the normalised URL, so what is read is what was checked.

A refused target is a `TargetRefused` (a PermissionError: `Store` makes it
EIO at once, without retries), logged once per refused prefix with the flag
that would allow it. The same rule judges every hop of an HTTP redirect
(zarrfs's own client, http.py, asks `check`; fsspec's aiohttp sessions get
`redirect_guard`), so a remote server cannot point a read elsewhere either.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from .redact import redact_url

log = logging.getLogger(__name__)

ALLOW_FLAG = "--virtual-chunks"
LOCAL_SCHEMES = {"file", "local"}  # fsspec's LocalFileSystem answers both
# Spellings of one protocol, as fsspec registers them.
SCHEME_ALIASES = {"local": "file", "s3a": "s3", "gcs": "gs", "abfs": "az", "adl": "az"}
DEFAULT_PORTS = {"http": 80, "https": 443}
HTTP_SCHEMES = ("http", "https")
# Anything URL parsers read differently (urllib strips tabs and newlines, some clients treat '\' as '/').
_AMBIGUOUS = re.compile(r"[\x00-\x20\x7f\\]")
# An authority zarrfs can compare: host names, IPv4/IPv6 literals, a port, user info.
_AUTHORITY = re.compile(r"^[A-Za-z0-9._~%!$&'()*+,;=:@\[\]-]*$")
_IPV6_LITERAL = re.compile(r"\[[0-9A-Fa-f:.]*\]")
_ENCODED_DOT = re.compile(r"%2e", re.IGNORECASE)
# A path separator in disguise: servers decode these differently, so no path prefix is judged across one.
_ENCODED_SEPARATOR = re.compile(r"%(2f|5c)", re.IGNORECASE)
# Distinct refused prefixes remembered for logging each once; beyond it each is logged at DEBUG.
_MAX_LOGGED = 1000


class TargetRefused(PermissionError):
    """A read the source asked for lies outside what it may make zarrfs read (EIO, never retried)."""


@dataclass(frozen=True)
class Place:
    """A URL as the rule compares it: normalised scheme, authority and path."""

    scheme: str  # lower case, aliases folded ('s3a' -> 's3'); 'file' for every local path
    authority: str  # host[:port] in lower case without a default port, or the bucket; '' for local
    path: str  # absolute, '.' and '..' resolved; ends in '/' only for a prefix
    ambiguous_path: bool = False  # holds an encoded '/' or '\\': no path prefix is judged across it

    @property
    def local(self) -> bool:
        return self.scheme == "file"

    @property
    def origin(self) -> str:
        """What 'the same origin' means: `http://host:port/`, `s3://bucket/`; `file:///` for local."""
        return f"{self.scheme}://{self.authority}/"

    def text(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"

    def directory(self) -> Place:
        """The prefix a refused target suggests: its directory for a local file, else its origin."""
        if self.local:
            return Place("file", "", posixpath.dirname(self.path).rstrip("/") + "/")
        return Place(self.scheme, self.authority, "/")

    def covers(self, other: Place) -> bool:
        """Whether this prefix holds `other`, on path-segment boundaries."""
        if (self.scheme, self.authority) != (other.scheme, other.authority):
            return False
        if self.path == "/":
            return True
        if other.ambiguous_path:
            return False
        directory = self.path.rstrip("/") + "/"
        return other.path == directory.rstrip("/") or other.path.startswith(directory)


def parse(url: str) -> Place:
    """The place `url` names (a bare path is a local one); ValueError when it cannot be judged."""
    if not isinstance(url, str) or not url:
        raise ValueError("a missing target")
    if _AMBIGUOUS.search(url):
        raise ValueError("characters URL parsers disagree about (whitespace, control characters, '\\')")
    if "::" in _IPV6_LITERAL.sub("", url):
        raise ValueError("a chained URL")
    scheme, sep, rest = url.partition("://")
    if not sep or len(scheme) < 2:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", url) and not url.startswith("/"):
            raise ValueError("a URL without '//'")  # file:/x, data:..., mailto:
        return _local(url)
    scheme = SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
    if scheme == "file":
        return _local(rest)
    parts = urlsplit(f"{scheme}://{rest}")
    netloc = parts.netloc
    if not _AUTHORITY.match(netloc) or netloc.count("@") > 1:
        raise ValueError("an authority that cannot be compared")
    host_port = netloc.rpartition("@")[2]
    if scheme in DEFAULT_PORTS:
        host = (parts.hostname or "").rstrip(".")
        if not host:
            raise ValueError("no host")
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError("a port that is not a number") from exc
        host = f"[{host}]" if ":" in host else host
        authority = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    else:
        authority = host_port  # a bucket or container: compared exactly, as the store reads it
        if not authority:
            raise ValueError("no bucket or host")
    path, ambiguous = _normalised_path(parts.path)
    return Place(scheme, authority, path, ambiguous)


def _local(path: str) -> Place:
    """A local path (after `file://`): absolute, or not judged (relative to whatever directory the daemon is in)."""
    if not path.startswith("/"):
        raise ValueError("a relative local path")
    normal, ambiguous = _normalised_path(path)
    return Place("file", "", normal, ambiguous)


def _normalised_path(path: str) -> tuple[str, bool]:
    path = _ENCODED_DOT.sub(".", path or "/")
    ambiguous = bool(_ENCODED_SEPARATOR.search(path))
    normal = posixpath.normpath("/" + path.lstrip("/"))
    normal = "/" + normal.lstrip("/")  # normpath keeps a leading '//'
    return normal + ("/" if path.endswith("/") and normal != "/" else ""), ambiguous


def allowed_prefix(text: str) -> Place:
    """A `--virtual-chunks` value as a prefix: a plain path is `file://` + its absolute path."""
    if "://" not in text:
        text = "file://" + os.path.abspath(os.path.expanduser(text))
    place = parse(text)
    return Place(place.scheme, place.authority, place.path.rstrip("/") + "/", place.ambiguous_path)


def rebuilt(url: str, place: Place) -> str:
    """`url` with its path normalised as checked (scheme spelling, user info and query kept as given)."""
    if place.local:
        return "file://" + place.path
    scheme, _, rest = url.partition("://")
    parts = urlsplit(f"{scheme}://{rest}")
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{parts.netloc}{place.path}{query}"


def shown(url: str) -> str:
    """A URL fit for a log line: no user:password, no query (it may carry a signature)."""
    return redact_url(url).partition("?")[0]


class Refusal(NamedTuple):
    """One refused prefix of a source, for `zarrfs tree`: the prefix, one target under it, how many."""

    prefix: str
    target: str
    references: int

    def describe(self) -> str:
        count = f"{self.references} reference{'s' if self.references != 1 else ''}"
        allow = f"{ALLOW_FLAG} {self.prefix} allows them" if "://" in self.prefix else "no option allows them"
        return f"refused: {count} to {self.prefix} (such as {self.target}); {allow}"


class TrustRule:
    """The rule for one source: its origin (None: a local source, trusted) and the authorised prefixes."""

    def __init__(self, origin: str | None, allowed: Iterable[str] = ()) -> None:
        self.origin = _origin_place(origin) if origin is not None else None
        self.allowed = tuple(allowed_prefix(a) for a in allowed)
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    @property
    def trusted(self) -> bool:
        """Everything may be read: the source is on the user's own disk."""
        return self.origin is None

    def authorises_prefix(self, url: str) -> bool:
        """Whether the prefix `url` (an Icechunk virtual chunk container) lies wholly under an allowed prefix."""
        try:
            place = parse(url.rstrip("/") + "/")
        except ValueError:
            return False
        return any(prefix.covers(place) for prefix in self.allowed)

    def schemes(self) -> set[str]:
        """The protocols (normalised) a read may use at all: the origin's and those of the allowed prefixes."""
        places = [*self.allowed, *([self.origin] if self.origin is not None else [])]
        return {place.scheme for place in places}

    def check(self, url: Any, what: str = "reference target") -> str:
        """The URL to read for `url` (normalised), or TargetRefused: before any I/O.

        `what` says in the error what named `url`: a reference's target, or a redirect.
        """
        if self.origin is None:
            return url
        place, refused = self._judged(url)
        if refused is None:
            assert place is not None
            return rebuilt(url, place)
        prefix, reason = refused
        message = self._message(what, url, prefix, reason)
        key = prefix or reason  # what no prefix allows: one warning per kind
        with self._lock:
            first = key not in self._logged and len(self._logged) < _MAX_LOGGED
            if first:
                self._logged.add(key)
        log.log(logging.WARNING if first else logging.DEBUG, "%s", message)
        raise TargetRefused(message)

    def _message(self, what: str, url: Any, prefix: str, reason: str) -> str:
        assert self.origin is not None
        allow = f"{ALLOW_FLAG} {prefix} allows it" if prefix else "no option allows it"
        return f"{what} {shown(str(url))}: {reason}, not read for a source from {shown(self.origin.origin)}; {allow}"

    def refusal(self, url: Any) -> tuple[str, str] | None:
        """None when `url` may be read, else (the prefix that would allow it, or '', and why not)."""
        return self._judged(url)[1]

    def _judged(self, url: Any) -> tuple[Place | None, tuple[str, str] | None]:
        """(the place `url` names, None when it may be read, else (the prefix that would allow it or '', why not))."""
        assert self.origin is not None
        try:
            place = parse(url)
        except ValueError as exc:
            return None, ("", f"{exc}, which zarrfs cannot judge")
        if any(prefix.covers(place) for prefix in self.allowed):
            return place, None
        if not place.local and self.origin.covers(place):
            return place, None
        return place, (place.directory().text(), "a local file" if place.local else "another origin")

    def refusals(self, targets: Iterable[Any]) -> list[Refusal]:
        """The refused prefixes among `targets` (each counted), in the order first met: no I/O."""
        if self.origin is None:
            return []
        found: dict[str, Refusal] = {}
        for target in targets:
            refused = self.refusal(target)
            if refused is None:
                continue
            prefix = refused[0] or shown(str(target))
            seen = found.get(prefix)
            found[prefix] = Refusal(prefix, shown(str(target)), 1) if seen is None else seen._replace(
                references=seen.references + 1)
        return list(found.values())


def _origin_place(origin: str) -> Place:
    """The origin a remote source was fetched from (the last link of a chained URL): its whole host or bucket."""
    place = parse(origin.split("::")[-1])
    return Place(place.scheme, place.authority, "/")


def is_local_source(url: str) -> bool:
    """Whether SOURCE (its last link, when chained) is on this machine's disk."""
    last = url.split("::")[-1]
    scheme, sep, _ = last.partition("://")
    return not sep or len(scheme) < 2 or scheme.lower() in LOCAL_SCHEMES


def trust_rule(source: str, allowed: Iterable[str] = ()) -> TrustRule:
    """SOURCE's rule: everything passes for a source on local disk; else its origin and `allowed`.
    ValueError for a remote SOURCE whose URL cannot be judged."""
    return TrustRule(None if is_local_source(source) else source, allowed)


def redirect_guard(rule: TrustRule) -> Any:
    """An aiohttp trace config that refuses (TargetRefused) a redirect the rule does not let through."""
    import aiohttp  # the remote extra's; only http(s) sources and targets get here

    async def on_redirect(_session: Any, _context: Any, params: Any) -> None:
        location = params.response.headers.get("Location", "")
        rule.check(str(params.url.join(type(params.url)(location))), what="redirect to")

    config = aiohttp.TraceConfig()
    config.on_request_redirect.append(on_redirect)
    return config


def guarded_options(protocol: str | None, options: dict[str, Any] | None, rule: TrustRule) -> dict[str, Any]:
    """fsspec options for `protocol` with the redirect guard added when it is http(s) and the rule checks."""
    options = dict(options or {})
    if rule.trusted or protocol not in HTTP_SCHEMES:
        return options
    client = dict(options.get("client_kwargs") or {})
    client["trace_configs"] = [*client.get("trace_configs", ()), redirect_guard(rule)]
    options["client_kwargs"] = client
    return options
