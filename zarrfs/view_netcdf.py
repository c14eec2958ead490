"""NetCDF classic files in the virtual tree, bound to the arrays serving their variables.

A group whose arrays name their dimensions (every xarray dataset) has
`NAME.nc`, its CDF-2 file, NAME the group's name (the store's for the root
group); and `NAME.cdf5.nc` beside it when some array is exact only in CDF-5
(int64, uint64) or CDF-2 cannot place it (a second variable over 4 GiB).
Arrays left out of a file are logged (INFO) once per listing and shown by `zarrfs tree`.
An OME-Zarr image group is no dataset: its arrays are the levels of one image.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from .conventions.image import images_of_group
from .engine.engine import Engine
from .engine.readahead import ReadStream
from .errors import ZarrfsError
from .formats.netcdf import CDF5_SUFFIX, NC_SUFFIX, NetcdfLayout, is_dataset_group, netcdf_plan
from .hierarchy import Hierarchy
from .model.meta import ArrayMeta, GroupMeta

log = logging.getLogger(__name__)


class StaleFileError(ZarrfsError):
    """A variable's array changed its type or shape since the file was listed (EIO: reopen it)."""


@dataclass(frozen=True)
class NetcdfFile:
    """A NetCDF layout bound to the engine: `paths[i]` is the array of `layout.variables[i]`.

    It stands where a `Layout` stands in a `view.FileEntry`; each open gets
    its own read streams (`opened`), one per variable, so a tool reading a
    variable from its start gets readahead as it would on `N.raw`.
    """

    layout: NetcdfLayout
    engine: Engine

    @property
    def size(self) -> int:
        return self.layout.size

    def opened(self) -> OpenNetcdf:
        return OpenNetcdf(self)

    def read_into(self, offset: int, out: np.ndarray, read_region: object = None) -> int:
        return self.opened().read_into(offset, out)


class OpenNetcdf:
    """One open NetCDF file: a read stream per variable."""

    def __init__(self, file: NetcdfFile) -> None:
        self.file = file
        self._streams = [ReadStream() for _ in file.layout.variables]

    @property
    def size(self) -> int:
        return self.file.size

    def read_into(self, offset: int, out: np.ndarray, read_region: object = None) -> int:
        return self.file.layout.read_into(offset, out, self._read_array)

    def _read_array(self, index: int, start: int, stop: int, target: np.ndarray) -> None:
        variable = self.file.layout.variables[index]
        reader = self.file.engine.reader(variable.array_path)
        if reader.meta.dtype != variable.source or reader.meta.shape != variable.shape:
            raise StaleFileError(f"/{variable.array_path} changed under an open NetCDF file (a metadata "
                                 "refresh): open the file again")
        reader.read_into(start, stop, target, self._streams[index])


def dataset_arrays(hierarchy: Hierarchy, group: GroupMeta) -> list[tuple[str, ArrayMeta]] | None:
    """(name, metadata) of the arrays of a dataset group; None when the group is no NetCDF dataset:
    none of its arrays names its dimensions, or it is an OME-Zarr image, whose arrays are the
    levels of one image (its file is `NAME.ome.tif`)."""
    if images_of_group(group):
        return None
    arrays = [(child.name, child.node) for child in hierarchy.children(group.path)
              if isinstance(child.node, ArrayMeta)]
    return arrays if is_dataset_group(arrays) else None


def netcdf_files(engine: Engine, group: GroupMeta, directory_name: str) -> dict[str, NetcdfFile]:
    """File name -> NetCDF file of the group, when it is a dataset ({} otherwise)."""
    arrays = dataset_arrays(engine.hierarchy, group)
    if arrays is None:
        return {}
    files: dict[str, NetcdfFile] = {}
    plan = netcdf_plan(group, arrays, 2)
    files[directory_name + NC_SUFFIX] = NetcdfFile(plan.layout, engine)
    # At INFO: a group of arrays that merely name their dimensions (not written as one dataset)
    # may hold many that cannot share them; `zarrfs tree` lists them all the same.
    for path, reason in plan.left_out:
        log.info("%s: /%s is not a variable of %s%s: %s", engine.hierarchy.store.display_name, path,
                 directory_name, NC_SUFFIX, reason)
    if plan.needs_cdf5:
        files[directory_name + CDF5_SUFFIX] = NetcdfFile(netcdf_plan(group, arrays, 5).layout, engine)
    return files
