"""The virtual files: the tree a mount shows and the files it opens.

`tree.py` (`VirtualTree`: names, entries, `open(path) -> Handle`, the stats
file), and the file kinds bound to the engine's readers beside it:
`tiled.py` (an array's `.tiled.tif` with its overviews), `ome_images.py`
(an image's, plate's or collection's `.ome.tif`), `netcdf_datasets.py` (a
dataset group's `.nc`). The FUSE front (`fuse/`) reads through this wing
alone; the formats it serves are built by `formats/`, the bytes read by `engine/`.
"""
