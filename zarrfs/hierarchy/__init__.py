"""A Zarr hierarchy walked over a store: which dialect wrote it, and its nodes.

One floor above `stores/` and `model/`: the parsers of `model/` take bytes and
never a store; this package fetches the metadata documents (consolidated when
there are some, else listing the store and following what the metadata
names) and hands them to the parsers.

    documents.py  bounded reads of metadata documents; listings (a store that cannot list: learnt, said once)
    named.py      the nodes a group's conventions name below it (how a store that cannot list is walked)
    dialects.py   Dialect: node(path), child_names(path) for v1, v2 and v3 layouts
    drafts.py     the 2022 v3 drafts' layouts (zarr-python 2.12-2.18, the seed's draft)
    detect.py     the dialect of the hierarchy at a store's root
    nodes.py      Hierarchy: the nodes of one store, found lazily (listings and names), fetched side by side,
                  each once, refreshed by TTL
    ahead.py      FetchAhead: the nodes metadata names, fetched before their lookups, in walk order
    learnt.py     what one reading of the metadata taught (nodes, absent ones too, names, children); Child
    source.py     open_hierarchy: a Zarr store, a reference set, or an Icechunk repository
"""

from .dialects import Node
from .learnt import Child
from .nodes import Hierarchy
from .source import open_hierarchy

__all__ = ["Child", "Hierarchy", "Node", "open_hierarchy"]
