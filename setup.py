"""The build steps pyproject.toml cannot declare: zarrfs's C extensions, and a build from a read-only checkout."""

import atexit
import os
import shutil
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

C_FLAGS = ["-O2", "-Wall"]
setup(ext_modules=[Extension("zarrfs.engine._gather", ["zarrfs/engine/_gather.c"], extra_compile_args=C_FLAGS),
                   Extension("zarrfs.engine._cached_reads", ["zarrfs/engine/_cached_reads.c"],
                             extra_compile_args=C_FLAGS),
                   Extension("zarrfs.fuse._fast_read", ["zarrfs/fuse/_fast_read.c"], extra_compile_args=C_FLAGS),
                   Extension("zarrfs.fuse._threadstate", ["zarrfs/fuse/_threadstate.c"], extra_compile_args=C_FLAGS)],
      options=options)
