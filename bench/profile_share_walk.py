"""CPU time per store of a `find`-like walk of a share, in one process, under cProfile.

Builds the share's tree as a mount does (open_mount_tree) and walks it as `find` does through the FUSE
front: every directory listed with its entries' types (readdir), only the directories looked up (GNU
`find` stats no file: the listing's types tell it what to descend into); below `many/` only the first
STORES stores. The
folder of stores is listed once before the profile starts, so the figure is what each store costs.
CPU time (not wall-clock): on a shared machine it is the steadier figure.

Usage: .venv/bin/python bench/profile_share_walk.py [--stores 1000] [--top 40] [--sort tottime]
(the share: bench_share.py's, built by `bench_share.py --stores N` with N >= STORES, or built here).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_data import DEFAULT_ROOT  # noqa: E402
from bench_share import make_share  # noqa: E402

from zarrfs.files.directory import typed_names  # noqa: E402
from zarrfs.files.share import ShareTree, open_mount_tree  # noqa: E402
from zarrfs.files.tree import DirEntry  # noqa: E402
from zarrfs.formats import DEFAULT_FORMATS, FORMAT_GROUPS  # noqa: E402
from zarrfs.options import EngineOptions  # noqa: E402

SUFFIXES = tuple(suffix for name in DEFAULT_FORMATS for suffix in FORMAT_GROUPS[name])


def walk(tree: ShareTree, path: str, stores: int) -> None:
    folders = [name for name, is_directory in typed_names(tree.listdir(DirEntry(path))) if is_directory]
    for name in sorted(folders)[:stores] if path == "many" else folders:
        child = f"{path}/{name}" if path else name
        tree.lookup(child)
        walk(tree, child, stores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=int, default=1000)
    parser.add_argument("--share-stores", type=int, default=10_000, help="the share to walk: share-N")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--sort", default="tottime")
    args = parser.parse_args()
    share = make_share(DEFAULT_ROOT, args.share_stores)
    tree = open_mount_tree(str(share), {}, EngineOptions(), SUFFIXES)
    assert isinstance(tree, ShareTree), f"{share} is not a share"
    try:
        tree.listdir(DirEntry("many"))
        profile = cProfile.Profile()
        started = time.process_time()
        profile.enable()
        walk(tree, "many", args.stores)
        profile.disable()
        cpu = time.process_time() - started
        print(f"{args.stores} stores: CPU {cpu:.3f} s under cProfile, {cpu / args.stores * 1000:.2f} ms per store")
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)
    finally:
        tree.close()


if __name__ == "__main__":
    main()
