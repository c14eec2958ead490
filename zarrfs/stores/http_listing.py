"""Listings and existence checks of plain HTTP(S) stores, answered as fsspec's HTTP file system
answers them, through zarrfs's own client (http.py).

A plain HTTP server lists a directory only as an index page: the links in
it below the page's own URL are its entries, a trailing '/' marking a
directory. fsspec reads them the same way (its `ls` with `simple_links`, the
default); answering alike keeps every store's hierarchy as it was, while a
plain http(s) mount needs neither fsspec's HTTP file system nor aiohttp and
its event loop (about 9 MiB resident, and a thread).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from .http import HttpReader

# Links of an index page: <a href="...">, and bare http(s) URLs in its text.
_ANCHOR = re.compile(r"""<(a|A)\s+(?:[^>]*?\s+)?(href|HREF)=["'](?P<url>[^"']+)""")
_BARE_URL = re.compile(r"""(?P<url>http[s]?://[-a-zA-Z0-9@:%_+.~#?&/=]+)""")


def listing(reader: HttpReader, url: str) -> list[dict[str, Any]]:
    """The entries of the index page at `url`: {"name": full URL, "size": None, "type":
    "directory" or "file"}; none for a page that is not HTML. FileNotFoundError if it is absent."""
    body, media_type = reader.page(url)
    links: list[str] = []
    if media_type in ("text/html", None):
        text = bytes(body).decode("utf-8", errors="ignore")
        links = _BARE_URL.findall(text) + [match[2] for match in _ANCHOR.findall(text)]
    below = url.rstrip("/") + "/"
    parts = urlsplit(url)
    found: set[str] = set()
    for link in links:
        if link.startswith("/") and len(link) > 1:  # absolute path on this server
            link = f"{parts.scheme}://{parts.netloc}{link}"
        if link.startswith("http"):
            # http and https of one place count as one (as fsspec lets them)
            if link.replace("https", "http").startswith(below.replace("https", "http")):
                found.add(link)
        elif link not in ("..", "../"):
            found.add(below + link.lstrip("/"))
    if not found and url.endswith("/"):
        return listing(reader, url.rstrip("/"))
    return [{"name": name, "size": None, "type": "directory" if name.endswith("/") else "file"}
            for name in found]


def exists(reader: HttpReader, url: str) -> bool:
    """Whether a GET of `url` succeeds (fsspec's answer: any status below 400)."""
    try:
        reader.page(url)
    except FileNotFoundError:
        return False
    return True
