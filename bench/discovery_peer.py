"""The peer of bench_discovery.py: zarr-python 3's asyncio API opening every node a hierarchy's metadata names.

What an OME-Zarr reader built on zarr-python does over a store that cannot
list: open the root, then follow plate -> wells -> fields -> levels (or a
collection's `OME/series` -> images -> levels, or a consolidated group's
members), each step's nodes opened side by side with `asyncio.gather` (zarr's
own concurrency limit applies). Prints one JSON line: nodes opened, seconds
(the walk alone, the interpreter's start and imports not counted).

    python bench/discovery_peer.py URL
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import zarr
import zarr.api.asynchronous as zarr_async


def _ome(attributes: Any) -> dict[str, Any]:
    attributes = dict(attributes)  # an async group's attributes are a plain dict, a sync one's a mapping
    ome = attributes.get("ome")
    return ome if isinstance(ome, dict) else attributes


async def _open(url: str, path: str) -> Any:
    return await zarr_async.open(store=url, path=path, mode="r")


async def _image(url: str, path: str, group: Any) -> int:
    datasets = [d["path"] for m in _ome(group.attrs).get("multiscales", []) for d in m["datasets"]]
    await asyncio.gather(*(_open(url, f"{path}/{d}") for d in datasets))
    return 1 + len(datasets)


async def walk(url: str) -> int:
    root = await zarr_async.open_group(store=url, mode="r")
    attributes = _ome(root.attrs)
    if "plate" in attributes:
        wells = [w["path"] for w in attributes["plate"]["wells"]]
        rows = {w.split("/")[0] for w in wells}
        opened = await asyncio.gather(*(_open(url, p) for p in [*rows, *wells]))
        well_groups = opened[len(rows):]
        fields = [f"{w}/{image['path']}" for w, g in zip(wells, well_groups)
                  for image in _ome(g.attrs)["well"]["images"]]
        images = await asyncio.gather(*(_open(url, f) for f in fields))
        counts = await asyncio.gather(*(_image(url, f, g) for f, g in zip(fields, images)))
        return 1 + len(rows) + len(wells) + sum(counts)
    if "bioformats2raw.layout" in attributes:
        ome = await _open(url, "OME")
        series = _ome(ome.attrs)["series"]
        images = await asyncio.gather(*(_open(url, s) for s in series))
        counts = await asyncio.gather(*(_image(url, s, g) for s, g in zip(series, images)))
        return 2 + sum(counts)
    members = [member async for member in root.members()]  # consolidated metadata, or a listing
    return 1 + len(members)


def main() -> None:
    zarr.config.set({"async.concurrency": 100})  # zarr-python's default as the issue measured it
    start = time.perf_counter()
    nodes = asyncio.run(walk(sys.argv[1]))
    print(json.dumps({"nodes": nodes, "seconds": round(time.perf_counter() - start, 3)}))


if __name__ == "__main__":
    main()
