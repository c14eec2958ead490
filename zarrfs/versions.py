"""`zarrfs --version`: this package and what it runs on, for bug reports."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from importlib import metadata

from . import extensions

# The packages whose behaviour a bug report depends on, in the order shown.
RUNTIME_PACKAGES = ("numpy", "numcodecs", "fsspec", "tifffile", "mfusepy")


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def libfuse_version() -> str:
    """libfuse's own version as the loaded library reports it (fuse_version(): 314 is 3.14)."""
    name = ctypes.util.find_library("fuse3")
    if name is None:
        return "not found (install the fuse3 package)"
    try:
        number = ctypes.CDLL(name).fuse_version()
    except (OSError, AttributeError) as exc:
        return f"unusable ({exc})"
    return f"{number // 100}.{number % 100}"


def version_text() -> str:
    lines = [f"zarrfs {package_version('zarrfs')}",
             f"Python {platform.python_version()}",
             *(f"{name} {package_version(name)}" for name in RUNTIME_PACKAGES),
             f"libfuse {libfuse_version()}",
             extensions.summary()]
    return "\n".join(lines)
