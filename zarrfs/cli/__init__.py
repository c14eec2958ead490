"""The `zarrfs` command: `main.py` (the parser, `zarrfs tree`, exit codes), `mount_command.py`
(`zarrfs mount`/`unmount`: options to a mount, the daemon's logging), `tree_command.py` (what
`zarrfs tree` prints). Nothing below this wing imports it; `zarrfs.api` drives it.
"""

from .main import main

__all__ = ["main"]
