"""`NAME.ome.tif` in an image group's directory: its pyramidal OME-TIFF, bound to the level arrays serving it.

NAME is the multiscale's `name` when it can stand as a file name, else the
directory's own name (the group's, or the store's for a root image); a
group with several multiscales adds `-1`, `-2`... after the first.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from .conventions.image import OmeImage, images_of_group, level_arrays
from .conventions.pyramid import overview_levels
from .conventions.semantics import Semantics
from .engine.engine import Engine
from .engine.tiles import TiledFile
from .formats import OME_TIFF_SUFFIX
from .formats.ome_tiff import ome_tiff_layout, safe_file_stem
from .model.meta import ArrayMeta, GroupMeta

log = logging.getLogger(__name__)


def ome_tiff_files(engine: Engine, group: GroupMeta, directory_name: str,
                   semantics_of: Callable[[ArrayMeta], Semantics]) -> dict[str, TiledFile]:
    """File name -> OME-TIFF of each multiscale image the group declares (none when it declares none)."""
    files: dict[str, TiledFile] = {}
    for number, image in enumerate(images_of_group(group)):
        stem = safe_file_stem(image.name) or directory_name
        name = f"{stem}{f'-{number}' if number else ''}{OME_TIFF_SUFFIX}"
        try:
            served = _ome_tiff_file(engine, image, name, semantics_of)
        except Exception:  # one image that cannot be expressed must not hide the directory
            log.exception("image /%s: cannot build its %s", image.group_path, name)
            continue
        if served is not None:
            files[name] = served
    return files


def _ome_tiff_file(engine: Engine, image: OmeImage, name: str,
                   semantics_of: Callable[[ArrayMeta], Semantics]) -> TiledFile | None:
    arrays = level_arrays(engine.hierarchy, image)
    full = arrays[0]
    if full is None or full.vlen or full.opaque_type:
        return None
    levels = (full, *overview_levels(full, arrays[1:]))
    # The same UUID for the same image at every mount: readers may remember files by it.
    identity = uuid.uuid5(uuid.NAMESPACE_URL, f"zarrfs:{engine.hierarchy.store.display_name}/{image.group_path}"
                                              f"#{image.index}")
    layout = ome_tiff_layout(levels, semantics_of(full), image.name, f"urn:uuid:{identity}", name)
    if layout is None:
        return None
    return TiledFile(layout, engine, tuple(level.path for level in levels[:len(layout.grids)]))
