"""Whether zarrfs runs with its compiled extensions, and saying so when it does not.

zarrfs has four C extensions (engine/_gather.c, engine/_cached_reads.c,
fuse/_fast_read.c, fuse/_threadstate.c). Each has a Python path that gives the
same bytes, slower. zarrfs imports, mounts and serves every file without them:
where a build could not compile them (no compiler), off Linux (setup.py builds
them there only: they call `preadv2` and replace libfuse 3's read callback;
macOS and FreeBSD run the Python path), or where `ZARRFS_NO_EXTENSIONS=1` asks
for the Python path (the CI run of the fast subset without them). The layer
that owns an extension imports it through `wanted` and
reports a failed import with `unavailable`; the daemon's log and
`zarrfs --version` say once which ones are not used and why (`summary`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

# Set (to anything but "" or "0") at run time: the compiled extensions are not imported even when
# built. Set when building (setup.py): they are not built.
NO_EXTENSIONS_VARIABLE = "ZARRFS_NO_EXTENSIONS"
ALL = ("zarrfs.engine._gather", "zarrfs.engine._cached_reads", "zarrfs.fuse._fast_read",
       "zarrfs.fuse._threadstate")

_missing: dict[str, str] = {}  # extension -> why it is not used
_lock = threading.Lock()
_logged = False


def wanted() -> bool:
    """Whether the compiled extensions are to be imported (the environment does not refuse them)."""
    return os.environ.get(NO_EXTENSIONS_VARIABLE, "") in ("", "0")


def unavailable(name: str, error: ImportError | None = None) -> None:
    """Extension `name` is not used: not `wanted`, or its import failed with `error`."""
    if error is None:
        why = f"{NO_EXTENSIONS_VARIABLE} is set"
    elif not sys.platform.startswith("linux") and isinstance(error, ModuleNotFoundError):
        why = f"built on Linux only, this is {sys.platform}"  # setup.py builds none elsewhere
    else:
        why = f"{type(error).__name__}: {error}"
    with _lock:
        _missing.setdefault(name, why)


def missing() -> dict[str, str]:
    """The extensions not used so far, with why; only those whose layer was imported are known."""
    with _lock:
        return dict(_missing)


def summary() -> str:
    """One line: all compiled extensions in use, or which are not and why."""
    absent = missing()
    if not absent:
        return "compiled extensions: in use"
    reasons = sorted(set(absent.values()))
    names = ", ".join(name.rpartition(".")[2] for name in ALL if name in absent)
    return f"compiled extensions: not used ({names}: {'; '.join(reasons)}); reads take the Python path, slower"


def log_once(log: logging.Logger) -> None:
    """Log `summary` once per process, if any extension is not used."""
    global _logged
    with _lock:
        if _logged or not _missing:
            return
        _logged = True
    log.warning("%s", summary())
