"""The names of the files a mount shows: each format's suffixes and the `--formats` groups.

Kept apart from `formats/` (whose builders need numpy and the conventions) so
that the command line can offer and check `--formats` without importing them:
a background `zarrfs mount` parses its arguments before it starts the daemon,
and every import here is paid again in the daemon.
"""

from __future__ import annotations

# An OME-Zarr image group's pyramidal OME-TIFF (files/ome_images.py): not an array's file.
OME_TIFF_SUFFIX = ".ome.tif"
# A dataset group's NetCDF classic files (formats/netcdf.py): the 64-bit-offset file, and CDF-5 where
# the dataset needs 64-bit types.
NC_SUFFIX = ".nc"
CDF5_SUFFIX = ".cdf5.nc"
# `--formats tif` turns on every `N.tif` (tiled for maps) and the strip files beside it.
FORMAT_GROUPS = {"npy": (".npy",), "raw": (".raw",), "hdr": (".raw.hdr",), "mhd": (".mhd",), "nhdr": (".nrrd.nhdr",),
                 "tif": (".tif", ".strips.tif", ".bigtiff.tif"), "tiled": (".tiled.tif",), "json": (".json",),
                 "ometiff": (OME_TIFF_SUFFIX,), "nc": (NC_SUFFIX, CDF5_SUFFIX)}
DEFAULT_FORMATS = ("npy", "raw", "hdr", "mhd", "nhdr", "tif", "tiled", "json", "ometiff", "nc")
# A group's files rather than an array's.
GROUP_SUFFIXES = (OME_TIFF_SUFFIX, NC_SUFFIX, CDF5_SUFFIX)
# Headers of `N.raw`: without it they would point at nothing.
RAW_SIDECARS = ("hdr", "mhd", "nhdr")
