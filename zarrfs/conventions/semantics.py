"""What an array's values mean, as one frozen description handed to the file builders.

Conventions (OME-Zarr, GDAL's `_CRS`, CF `grid_mapping` and packing, GeoZarr) are read
once per array into a `Semantics`; the format builders (`formats/`) only read
it. Every field is optional: an array with no recognised convention gets
`Semantics()` and is served exactly as before.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Axis kinds, as OME-Zarr names them; "other" for anything unrecognised.
AXIS_KINDS = ("time", "channel", "space", "other")


@dataclass(frozen=True)
class Axis:
    """One dimension of the array, in the array's own dimension order."""

    name: str
    kind: str = "other"  # one of AXIS_KINDS
    unit: str | None = None  # as the metadata spells it (UDUNITS-2 for OME: "micrometer", "second")
    scale: float | None = None  # physical units per index step
    # Physical coordinate of index 0: the centre of the first pixel (OME-Zarr 0.6 says so; NRRD, MetaImage and
    # ITK put their origin there too).
    origin: float | None = None
    orientation: str | None = None  # RFC-4 anatomical orientation: "left-to-right" (values increase to the right)


@dataclass(frozen=True)
class Channel:
    """Display hints of one channel (OME `omero.channels`)."""

    label: str | None = None
    color: str | None = None  # "RRGGBB"
    window: tuple[float, float] | None = None  # display range (start, end)


@dataclass(frozen=True)
class LabelColor:
    """The display colour of one value of a label image (OME `image-label.colors`)."""

    value: float  # the label value (an integer in practice)
    rgba: tuple[int, int, int, int]  # 0-255 each


@dataclass(frozen=True)
class GeoReference:
    """Where the last two axes (y, x) lie on the map.

    `geotransform` is GDAL's order: x = gt[0] + col*gt[1] + row*gt[2],
    y = gt[3] + col*gt[4] + row*gt[5], for the outer corner of pixel (0, 0)
    (pixel-is-area). `point`: the values are samples at the cells' centres
    (GeoZarr `spatial:registration: node`, GeoTIFF PixelIsPoint); the
    geotransform is still the corner's.
    """

    geotransform: tuple[float, float, float, float, float, float]
    crs_wkt: str | None = None
    epsg: int | None = None
    point: bool = False


@dataclass(frozen=True)
class Quantity:
    """What the stored numbers stand for (CF): value = stored * scale_factor + add_offset, in `units`.

    The files keep the stored numbers; readers that apply packing (GDAL,
    QGIS) are told the scale and offset. See `conventions.cf`.
    """

    scale_factor: float | None = None
    add_offset: float | None = None
    units: str | None = None
    long_name: str | None = None

    @property
    def packed(self) -> bool:
        return self.scale_factor is not None or self.add_offset is not None


@dataclass(frozen=True)
class Placement:
    """Where an image sits in an OME-Zarr 0.6 scene: its axes as the scene's coordinate system measures them."""

    scene: str  # "/path" of the scene group
    system: str  # the scene's coordinate system ("world")
    axes: tuple[Axis, ...]  # per array dimension: the scene's axis, its step, the coordinate of index 0


@dataclass(frozen=True)
class Semantics:
    axes: tuple[Axis, ...] | None = None  # one per array dimension when known
    channels: tuple[Channel, ...] = ()
    geo: GeoReference | None = None
    nodata: float | None = None
    # What was recognised ("OME-Zarr 0.4 multiscales level 0", "GDAL _CRS"), for `zarrfs tree` and `.json`.
    sources: tuple[str, ...] = field(default=())
    quantity: Quantity | None = None  # CF packing, units and long name of the values
    label_colors: tuple[LabelColor, ...] = ()  # a label image's colour per label value
    label_of: str | None = None  # "/path" of the image a label image belongs to (`conventions.labels`)
    band_names: tuple[str, ...] = ()  # one per index of a (band, y, x) raster's leading axis (`conventions.bands`)
    placement: Placement | None = None  # the image's place in an OME-Zarr scene (`conventions.scene`)
    # What a known convention says that the files cannot (a rotation, another coordinate system), each with why:
    # shown by `zarrfs tree` and in `N.json`, not only logged.
    unused: tuple[str, ...] = ()
    # Paths of the arrays that are the map's overviews in a GeoZarr multiscales layout (`conventions.geo_pyramid`).
    overviews: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return (self.axes is None and not self.channels and self.geo is None and self.nodata is None
                and self.quantity is None and not self.label_colors and self.label_of is None
                and not self.band_names and self.placement is None and not self.unused and not self.overviews)

    def describe(self) -> dict[str, Any]:
        """JSON-able form: the `semantics` member of the `.json` file and of `zarrfs tree --json`."""
        return {
            "axes": [asdict(axis) for axis in self.axes] if self.axes is not None else None,
            "channels": [asdict(channel) for channel in self.channels],
            "geo": asdict(self.geo) if self.geo is not None else None,
            "nodata": self.nodata,
            "quantity": asdict(self.quantity) if self.quantity is not None else None,
            "label_colors": [asdict(color) for color in self.label_colors],
            "label_of": self.label_of,
            "band_names": list(self.band_names),
            "placement": asdict(self.placement) if self.placement is not None else None,
            "unused": list(self.unused),
            "overviews": ["/" + path for path in self.overviews],
            "sources": list(self.sources),
        }
