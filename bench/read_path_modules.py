"""Which zarrfs modules one cold read passes, step by step: lookup, open, the first read.

    .venv/bin/python bench/read_path_modules.py SOURCE FILE [--size 4096]
    e.g. SOURCE = the README sample (scripts/make_sample.py DIR), FILE = image.tif

In process, without a mount: the FUSE front's own methods are called as libfuse would call them, so
the read takes the Python path (the one a read the C path leaves to Python takes). Every thread is
profiled, so the pool worker's fetch and decode count too. docs/architecture.md quotes the figures.
"""

from __future__ import annotations

import argparse
import os
import threading
import types
from collections.abc import Callable
from typing import Any

import zarrfs
from zarrfs.cli.mount_command import _suffixes
from zarrfs.files.tree import VirtualTree
from zarrfs.fuse.ops import ZarrOperations
from zarrfs.options import EngineOptions

PACKAGE = os.path.dirname(zarrfs.__file__)
EVERY_FORMAT = "npy,raw,hdr,mhd,nhdr,tif,tiled,json,ometiff,nc"


def modules_passed(step: Callable[[], object]) -> list[str]:
    """The zarrfs modules (Python files, and C extension functions) `step` calls into, in first-call order."""
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            name = os.path.relpath(frame.f_code.co_filename, PACKAGE)
        elif event == "c_call" and (getattr(arg, "__module__", None) or "").startswith("zarrfs"):
            name = f"{arg.__module__} (C)"
        else:
            return
        if name not in seen:
            seen.append(name)

    threading.setprofile_all_threads(profile)
    try:
        step()
    finally:
        threading.setprofile_all_threads(None)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("file", help="a path inside the mount, such as image.tif")
    parser.add_argument("--size", type=int, default=4096, help="bytes of the first read")
    args = parser.parse_args()
    tree = VirtualTree.of_source(args.source, None, EngineOptions(), _suffixes(EVERY_FORMAT))
    operations = ZarrOperations(tree, attr_timeout=1.0)
    path = "/" + args.file.lstrip("/")
    handle = types.SimpleNamespace(flags=os.O_RDONLY, fh=0, direct_io=0, keep_cache=0)
    try:
        for label, step in (("lookup", lambda: operations.getattr(path)),
                            ("open", lambda: operations.open(path, handle)),
                            (f"read {args.size} B at 0", lambda: operations.read(path, args.size, 0, handle))):
            passed = modules_passed(step)
            print(f"{label}: {len(passed)} modules\n    {' '.join(passed)}")
    finally:
        operations.release(path, handle)
        tree.close()


if __name__ == "__main__":
    main()
