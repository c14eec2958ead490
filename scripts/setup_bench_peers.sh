#!/usr/bin/env bash
# The peers the benchmarks compare with, beside the test setup (scripts/setup.sh): Debian's rclone (the
# mount users know for buckets and shares) and ratarmount 1.3 (a folder of archives as one tree) in its
# own venv, .venv-ratarmount, so that its pinned dependencies never meet zarrfs's.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
command -v rclone >/dev/null || { $SUDO apt-get update -q && $SUDO apt-get install -y -q rclone; }
if [ ! -x .venv-ratarmount/bin/ratarmount ]; then
    python3 -m venv .venv-ratarmount
    .venv-ratarmount/bin/python -m pip install -q ratarmount==1.3.0
fi
echo "bench peers: $(rclone version | head -1); ratarmount $(.venv-ratarmount/bin/ratarmount --version 2>&1 | head -1)"
