#!/usr/bin/env bash
# The README's test command: set up (including GDAL and stock ImageJ), then run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --clients
exec .venv/bin/python -m pytest -q "$@"
