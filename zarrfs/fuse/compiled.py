"""The FUSE front's compiled extensions, when there are any (zarrfs/extensions.py).

`fast_read`: fuse/_fast_read.c, the read callback put in place of mfusepy's
(`ReplyBufferFUSE`), or None: libfuse then calls mfusepy's own callback, the
Python path, for every read. `keep_thread_state`: fuse/_threadstate.c's `keep`,
or nothing: each request from a libfuse thread then makes and ends a Python
thread state, as plain mfusepy does (slower, the same answers).

Importing this needs neither libfuse nor mfusepy (`zarrfs --version` does).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from .. import extensions


def _keep_nothing() -> None:
    """Without `_threadstate`: Python makes the calling thread's state per request."""


__all__ = ["fast_read", "keep_thread_state"]

fast_read: ModuleType | None = None
keep_thread_state: Callable[[], None] = _keep_nothing
if extensions.wanted():
    try:
        from ._threadstate import keep as keep_thread_state
    except ImportError as error:
        extensions.unavailable("zarrfs.fuse._threadstate", error)
    try:
        fast_read = importlib.import_module("._fast_read", __package__)
    except ImportError as error:
        extensions.unavailable("zarrfs.fuse._fast_read", error)
else:
    extensions.unavailable("zarrfs.fuse._threadstate")
    extensions.unavailable("zarrfs.fuse._fast_read")
