"""EPSG codes out of the ways Zarr metadata spells a coordinate reference system.

No projection library: an EPSG code is read where the text states it (the
CRS's own top-level identifier), never guessed from parameters.
"""

from __future__ import annotations

import functools
import re
from typing import Any

_URL_EPSG = re.compile(r"/def/crs/EPSG/[^/]+/(\d+)/?$", re.IGNORECASE)
_CODE_EPSG = re.compile(r"^\s*EPSG\s*:\s*(\d+)\s*$", re.IGNORECASE)
_TOP_ID = re.compile(r'(?:ID|AUTHORITY)\s*\[\s*"EPSG"\s*,\s*"?(\d+)"?', re.IGNORECASE)


def epsg_from_wkt(wkt: str) -> int | None:
    """The last ID["EPSG",n] (WKT2) or AUTHORITY["EPSG","n"] (WKT1) at the top level of the CRS.

    Nested identifiers (the base CRS's, a parameter's) name something else:
    only those directly inside the outermost brackets count.
    """
    depth, found = 0, None
    in_quote = False
    for index, char in enumerate(wkt):
        if char == '"':
            in_quote = not in_quote  # a doubled "" inside a string toggles twice: still inside
        elif in_quote:
            continue
        elif char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        elif depth == 1 and char in "IAia" and (index == 0 or wkt[index - 1] in ", \n\t"):
            match = _TOP_ID.match(wkt, index)
            if match:
                found = int(match.group(1))
    return found


def epsg_from_projjson(doc: Any) -> int | None:
    """PROJJSON's top-level `id` (or the first of `ids`) when its authority is EPSG."""
    if not isinstance(doc, dict):
        return None
    ids = doc.get("ids")
    for ident in ids if isinstance(ids, list) else [doc.get("id")]:
        if isinstance(ident, dict) and str(ident.get("authority", "")).upper() == "EPSG":
            code = ident.get("code")
            if isinstance(code, int) or (isinstance(code, str) and code.isdigit()):
                return int(code)
    return None


def epsg_from_url(url: Any) -> int | None:
    """'http://www.opengis.net/def/crs/EPSG/0/32633' -> 32633."""
    match = _URL_EPSG.search(url) if isinstance(url, str) else None
    return int(match.group(1)) if match else None


def epsg_from_code(code: Any) -> int | None:
    """GeoZarr `proj:code` 'EPSG:32633' -> 32633 (other authorities: None)."""
    match = _CODE_EPSG.match(code) if isinstance(code, str) else None
    return int(match.group(1)) if match else None


_WKT1_ROOTS = ("PROJCS[", "GEOGCS[", "GEOCCS[", "COMPD_CS[", "VERT_CS[", "LOCAL_CS[")


@functools.lru_cache(maxsize=64)
def wkt1(wkt: str) -> str | None:
    """The CRS as WKT1 (GDAL flavour), for readers that know no WKT2 (GDAL's ENVI driver).

    WKT1 passes through; WKT2 is converted with pyproj when it is installed
    (the optional `geo` extra), else None: a CRS is better left out than
    written in a form the reader garbles.
    """
    if wkt.lstrip().upper().startswith(_WKT1_ROOTS):
        return wkt
    try:
        import pyproj
    except ImportError:
        return None
    try:
        return pyproj.CRS.from_wkt(wkt).to_wkt("WKT1_GDAL")
    except pyproj.exceptions.CRSError:
        return None
