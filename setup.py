"""The one build step pyproject.toml cannot declare stably: zarrfs's C extension."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("zarrfs._gather", ["zarrfs/_gather.c"], extra_compile_args=["-O2", "-Wall"])])
