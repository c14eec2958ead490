#!/usr/bin/env bash
# The README's test command: set up (GDAL, stock ImageJ and the other clients, and .venv-oldest), check
# the wheel and the non-editable installs on every supported Python here (scripts/test_installed.sh),
# then the whole suite on the newest Python (.venv) and on the oldest supported one (.venv-oldest, when
# it differs). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --clients --oldest-too
bash scripts/test_installed.sh
status=0
for venv in .venv .venv-oldest; do
    [ -x "$venv/bin/python" ] || continue
    echo "== the suite on Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())') ($venv)"
    start=$SECONDS
    "$venv/bin/python" -m pytest -q "$@" || status=$?
    echo "== $venv: $((SECONDS - start)) s"
done
exit "$status"
