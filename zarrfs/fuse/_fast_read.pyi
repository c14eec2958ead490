# The signatures of fuse/_fast_read.c, for the type checker (checked against the built module by mypy's
# stubtest in scripts/lint.sh).
from collections.abc import Callable
from typing import Any

# The loader's outcomes (zarrfs/_extension.h): the bytes are loaded for C to copy, or written already.
LOADED: int
WRITTEN: int

def install(capsule: Any, python_read_address: int, fh_offset: int, load_for_c: Callable[..., Any], /) -> int: ...
def uninstall() -> None: ...
