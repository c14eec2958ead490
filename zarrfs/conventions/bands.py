"""Band names of a multi-band raster (band, y, x): what GDAL and QGIS show as each band's description.

Two writers state them:

* xarray: a 1-D coordinate array of strings named after the leading
  dimension (`band = ["red", "green", "nir"]`), read through the cache;
* rioxarray, reading a GeoTIFF whose bands have descriptions: a `long_name`
  list with one name per band, which `to_zarr` writes as it is.

Numbers are indexes, not names: rioxarray's `band = [1, 2, 3]` names
nothing. Only arrays of 3 dimensions have bands (GDAL and the tiled TIFF
see a (n, y, x) array as n bands).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..model.meta import ArrayMeta
from .geo import ReadArray
from ..errors import ConventionError

# A coordinate array longer than this is no list of band names (and is not read).
MAX_NAMED_BANDS = 4096


def band_names(meta: ArrayMeta, siblings: Mapping[str, ArrayMeta],
               read_array: ReadArray) -> tuple[tuple[str, ...], str]:
    """(one name per band, where they came from), or ((), "") when nothing names the bands.

    Raises ConventionError for names that do not fit the bands (a count
    other than the bands', a name that is not one line of text).
    """
    if meta.ndim != 3:
        return (), ""
    count = meta.shape[0]
    listed = meta.attributes.get("long_name")
    if isinstance(listed, list):
        return _checked(listed, count, "long_name"), "CF long_name per band"
    dimension = meta.dimension_names[0] if meta.dimension_names else None
    coordinate = siblings.get(dimension) if dimension else None
    if coordinate is None or coordinate is meta or coordinate.ndim != 1 or coordinate.dtype.kind not in "USOT":
        return (), ""
    if coordinate.shape[0] != count or count > MAX_NAMED_BANDS:
        raise ConventionError(f"coordinate array {dimension!r} has {coordinate.shape[0]} values for {count} bands")
    values = [v.decode(errors="replace") if isinstance(v, bytes) else v for v in read_array(coordinate).tolist()]
    return _checked(values, count, f"coordinate array {dimension!r}"), f"band names from {dimension!r}"


def _checked(names: list[object], count: int, where: str) -> tuple[str, ...]:
    if len(names) != count:
        raise ConventionError(f"{where} has {len(names)} names for {count} bands")
    lines = [n for n in names if isinstance(n, str) and n.strip() and n.isprintable()]
    if len(lines) != len(names):
        raise ConventionError(f"{where} {names!r:.80} holds names that are not one line of text")
    return tuple(n.strip() for n in lines)
