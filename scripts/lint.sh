#!/usr/bin/env bash
# The linter and the type checker over zarrfs/ (docs/testing.md#lint-and-types), from .venv (the test
# command's setup installs them: the `lint` extra). Any finding fails. Run by scripts/test.sh after its
# setup and before the tests, so CI fails in seconds, not after the suite.
#   ruff check: pyflakes, pycodestyle and bugbear rules ([tool.ruff] in pyproject.toml)
#   mypy: every module and the four C extensions' stubs ([tool.mypy])
#   mypy.stubtest: the stubs (zarrfs/*/_*.pyi) against the built extensions: names, kinds, signatures
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
started=$SECONDS
echo "== ruff check zarrfs"
"$PY" -m ruff check zarrfs
echo "== mypy"
"$PY" -m mypy
echo "== mypy.stubtest (the C extensions' stubs)"
stubs=$(cd zarrfs && ls */_*.pyi | sed 's/\.pyi$//; s|/|.|g; s/^/zarrfs./')
# shellcheck disable=SC2086 # one module name per word
"$PY" -m mypy.stubtest --mypy-config-file pyproject.toml $stubs
echo "== lint: $((SECONDS - started)) s"
