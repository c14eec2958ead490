# The signatures of fuse/_fast_read.c, for the type checker (checked against the built module by mypy's
# stubtest in tests/test_lint.py).
from collections.abc import Callable
from typing import Any

def install(capsule: Any, python_read_address: int, fh_offset: int, load_for_c: Callable[..., Any], /) -> int: ...
def uninstall() -> None: ...
