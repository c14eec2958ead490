"""zarrfs: mount Zarr hierarchies as read-only directories of plain files.

`zarrfs.mounted(source)` mounts from Python for the length of a `with` block;
the `zarrfs` command does the same from a shell.
"""

from .api import mounted

__all__ = ["mounted"]
