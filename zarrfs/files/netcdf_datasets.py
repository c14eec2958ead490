"""NetCDF classic files in the virtual tree, bound to the arrays serving their variables.

A group whose arrays name their dimensions (every xarray dataset) has
`NAME.nc`, its CDF-2 file, NAME the group's name (the store's for the root
group); and `NAME.cdf5.nc` beside it when some array is exact only in CDF-5
(int64, uint64) or CDF-2 cannot place it (a second variable over 4 GiB).
Arrays left out of a file are logged (INFO) once per listing and shown by `zarrfs tree`.
An OME-Zarr image group is no dataset: its arrays are the levels of one image.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Hashable

import numpy as np

from ..conventions.image import images_of_group
from ..engine.engine import Engine
from ..engine.readahead import ReadStream
from ..engine.reader import ArrayReader
from ..errors import StaleFileError
from ..formats.netcdf import NetcdfLayout, is_dataset_group, netcdf_plan
from ..hierarchy import Hierarchy
from ..model.meta import ArrayMeta, GroupMeta
from ..suffixes import CDF5_SUFFIX, NC_SUFFIX
from .array_region import ArrayRegion
from .contract import OpenedFile, VirtualFile

log = logging.getLogger(__name__)

# The conversions whose block is the array's bytes as they are, or byte-swapped: what C copies.
C_CONVERSIONS = ("copy", "swap")


class NetcdfFile(VirtualFile):
    """A NetCDF layout bound to the engine: the array of `layout.variables[i]` serves its block.

    Each open gets its own read streams, one per variable, so a tool reading
    a variable from its start gets readahead as it would on `N.raw`.
    """

    def __init__(self, layout: NetcdfLayout, engine: Engine) -> None:
        self.layout, self.engine = layout, engine

    @property
    def size(self) -> int:
        return self.layout.size

    def open(self) -> OpenNetcdf:
        return OpenNetcdf(self)


class OpenNetcdf(OpenedFile):
    """One open NetCDF file: a read stream per variable; page-cached like any file (scipy maps it
    into memory, which direct_io forbids).

    C answers reads that lie within one variable whose block is its array's
    bytes (`copy`) or those bytes byte-swapped (`swap`, the usual little-endian
    array), from cached chunks, swapping as it copies (engine/_cached_reads.c:
    one region per variable); the header, the padding, converted variables
    (casts, int64 as double, strings) and reads across blocks come here.
    """

    def __init__(self, file: NetcdfFile) -> None:
        self.file = file
        # The variables' readers, taken at the open: one version of the store per open file
        # (docs/live-stores.md); a metadata refresh gives the files opened after it new ones.
        self._readers = [self._current_reader(index) for index in range(len(file.layout.variables))]
        self._streams = [ReadStream() for _ in file.layout.variables]
        self._in_c: list[ArrayRegion] = []  # the variables C answers, in file order
        self._begins: list[int] = []  # their blocks' begins

    @property
    def size(self) -> int:
        return self.file.size

    def read_into(self, offset: int, out: np.ndarray) -> int:
        return self.file.layout.read_into(offset, out, self._read_array)

    def attach(self, handle: int) -> bool:
        """Give C the variables it can answer; whether it took any."""
        attached: list[tuple[int, ArrayRegion]] = []
        for index, variable in enumerate(self.file.layout.variables):
            if variable.conversion not in C_CONVERSIONS or not variable.nbytes:
                continue
            opened = ArrayRegion(self._reader(index), (variable.begin, variable.nbytes),
                              swap=variable.conversion == "swap", stream=self._streams[index])
            if opened.attach(handle):
                attached.append((variable.begin, opened))
        attached.sort(key=lambda pair: pair[0])
        self._begins = [begin for begin, _ in attached]
        self._in_c = [opened for _, opened in attached]
        return bool(attached)

    def load_for_c(self, offset: int, out: np.ndarray, write: bool) -> int | None:
        """A read C missed, within one variable it answers (`ArrayRegion.load_for_c`)."""
        found = bisect.bisect_right(self._begins, offset) - 1
        assert found >= 0, f"C missed a read at {offset}, before every variable it answers"
        return self._in_c[found].load_for_c(offset, out, write)

    def close(self) -> None:
        for opened in self._in_c:
            opened.close()
        self._in_c, self._begins = [], []

    def _read_array(self, index: int, start: int, stop: int, target: np.ndarray) -> None:
        self._reader(index).read_into(start, stop, target, self._streams[index])

    def version(self) -> Hashable:
        return self.size, tuple(reader.token for reader in self._readers)

    def _reader(self, index: int) -> ArrayReader:
        return self._readers[index]

    def _current_reader(self, index: int) -> ArrayReader:
        variable = self.file.layout.variables[index]
        reader = self.file.engine.reader(variable.array_path)
        if reader.meta.dtype != variable.source or reader.meta.shape != variable.shape:
            raise StaleFileError(f"/{variable.array_path} changed under an open NetCDF file (a metadata "
                                 "refresh): open the file again")
        return reader


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
