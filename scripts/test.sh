#!/usr/bin/env bash
# The README's test command: set up (including GDAL and stock ImageJ), check a non-editable
# install as root and as an unprivileged user (scripts/test_installed.sh), then run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --clients
bash scripts/test_installed.sh
exec .venv/bin/python -m pytest -q "$@"
