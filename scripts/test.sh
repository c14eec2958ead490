#!/usr/bin/env bash
# The README's test command: set up (GDAL, stock ImageJ and the other clients, and .venv-oldest), lint
# (scripts/lint.sh: ruff and mypy, seconds, before half an hour of tests), check the wheel and the
# non-editable installs on every supported Python here (scripts/test_installed.sh), then the whole suite
# on the newest Python (.venv) and on the oldest supported one (.venv-oldest, when it differs), then the
# fast subset without the compiled extensions (ZARRFS_NO_EXTENSIONS=1: the Python path that macOS,
# FreeBSD and failed builds run). Arguments go to pytest (the suites).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --clients --oldest-too
bash scripts/lint.sh
bash scripts/test_installed.sh
status=0
for venv in .venv .venv-oldest; do
    [ -x "$venv/bin/python" ] || continue
    echo "== the suite on Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())') ($venv)"
    start=$SECONDS
    "$venv/bin/python" -m pytest -q "$@" || status=$?
    echo "== $venv: $((SECONDS - start)) s"
done
echo "== the fast subset without the compiled extensions (ZARRFS_NO_EXTENSIONS=1, .venv)"
start=$SECONDS
ZARRFS_NO_EXTENSIONS=1 .venv/bin/python -m pytest -q -n 2 -m "not mount and not clients and not soak" || status=$?
echo "== without the extensions: $((SECONDS - start)) s"
exit "$status"
