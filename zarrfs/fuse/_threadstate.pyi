# The signature of fuse/_threadstate.c's `keep`, for the type checker (checked against the built module
# by mypy's stubtest in tests/test_lint.py). Its C entry point `keep_c` is a capsule only C imports.
from typing import Any

keep_c: Any

def keep() -> None: ...
