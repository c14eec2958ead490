"""The build steps pyproject.toml cannot declare: zarrfs's C extensions, and a build from a read-only checkout."""

import atexit
import os
import shutil
import sys
import tempfile

from setuptools import Extension, setup

# setuptools writes zarrfs.egg-info and build/ into the source tree. A user who
# installs from a checkout they cannot write to (`pip install /opt/src/zarrfs`)
# would get "could not create 'zarrfs.egg-info': Permission denied": build in a
# temporary directory instead.
options = {}
if not os.access(os.path.dirname(os.path.abspath(__file__)), os.W_OK):
    scratch = tempfile.mkdtemp(prefix="zarrfs-build-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    options = {"egg_info": {"egg_base": scratch}, "build": {"build_base": os.path.join(scratch, "build")}}

# Warnings are errors: the C path answers most reads, and a warning there is a bug until shown not
# to be. ZARRFS_C_FLAGS adds flags (scripts/test_sanitizers.sh builds with the sanitizers).
C_FLAGS = ["-O2", "-Wall", "-Wextra", "-Werror", *os.environ.get("ZARRFS_C_FLAGS", "").split()]
LINK_FLAGS = [flag for flag in C_FLAGS if flag.startswith("-fsanitize")]
HEADERS = ["zarrfs/_extension.h"]


def extension(name: str, source: str) -> Extension:
    # optional: an extension that does not compile (no compiler, or a platform without preadv2 or
    # pthreads as they are used here) is left out with a warning, and zarrfs takes its Python path
    # (zarrfs/extensions.py). The wheels this project builds are checked to hold all four.
    return Extension(name, [source], depends=HEADERS, extra_compile_args=C_FLAGS, extra_link_args=LINK_FLAGS,
                     optional=True)


# None are built off Linux (they call preadv2 and replace libfuse 3's read callback as laid out there),
# nor with ZARRFS_NO_EXTENSIONS=1 (not "" or "0"): a pure-Python install (docs/running.md).
SKIP_EXTENSIONS = not sys.platform.startswith("linux") or os.environ.get("ZARRFS_NO_EXTENSIONS", "") not in ("", "0")
EXTENSIONS = [extension("zarrfs.engine._gather", "zarrfs/engine/_gather.c"),
              extension("zarrfs.engine._cached_reads", "zarrfs/engine/_cached_reads.c"),
              extension("zarrfs.fuse._fast_read", "zarrfs/fuse/_fast_read.c"),
              extension("zarrfs.fuse._threadstate", "zarrfs/fuse/_threadstate.c")]
setup(ext_modules=[] if SKIP_EXTENSIONS else EXTENSIONS, options=options)
