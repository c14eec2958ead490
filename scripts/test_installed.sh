#!/usr/bin/env bash
# The mount lifecycle tests again, the way packagers and most users install and mount:
#   - a NON-editable `pip install` into a fresh venv (an editable install hides a package that
#     does not work once installed), made from a copy of the checkout's tracked files (no
#     compiled extension beside the sources) and run from that directory;
#   - as this user, and (when run as root) as an unprivileged user with /dev/fuse made
#     accessible as Debian does by default (mode 0666);
#   - `zarrfs tree` of a plain install (no extras) prints nothing on stderr;
#   - (as root) that user can `pip install` from a checkout it cannot write to.
# Called by scripts/test.sh after the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
TESTS=(tests/test_user_lifecycle.py tests/test_daemon_isolation.py)
USER_NAME=zarrfs-ci

sudo=()
[ "$(id -u)" -ne 0 ] && sudo=(sudo)

# A Python every user can run (pyenv's lives under /root, which other users cannot enter).
PY=${INSTALL_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import sys, sysconfig, os; assert sys.version_info >= (3, 11); import venv, ensurepip
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; then
    echo "test_installed: installing python3, python3-venv and python3-dev for $PY"
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 python3-venv python3-dev
fi

work=$(mktemp -d /tmp/zarrfs-installed.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
git ls-files -z | xargs -0 cp --parents -t "$work/src"

"$PY" -m venv "$work/venv"
pip_quiet() { "$work/venv/bin/python" -m pip install -q "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
pip_quiet --upgrade pip
pip_quiet "$work/src"
"$work/venv/bin/python" -P -c 'import zarrfs.engine._gather, zarrfs.fuse._threadstate' # the installed package has its extensions
pip_quiet pytest "zarr>=3.1,<3.2"
chmod -R a+rX "$work"
chmod 755 "$work"

echo "== plain install: zarrfs tree prints no library warnings"
"$work/venv/bin/python" "$checkout/scripts/make_sample.py" "$work/sample" >/dev/null
( cd "$work/src" && "$work/venv/bin/zarrfs" tree "$work/sample/sample.zarr" >/dev/null 2>"$work/tree.err" )
if [ -s "$work/tree.err" ]; then
    echo "test_installed: zarrfs tree wrote to stderr:" >&2
    cat "$work/tree.err" >&2
    exit 1
fi

run_tests() {  # run_tests [runuser -u USER --]
    ( cd "$work/src" && "$@" env HOME="$work" PATH=/usr/bin:/bin:/usr/sbin:/sbin \
        "$work/venv/bin/python" -P -m pytest -q -p no:cacheprovider "${TESTS[@]}" )
}
echo "== non-editable install, mounting from the source directory, as $(id -un)"
run_tests

if [ "$(id -u)" -eq 0 ]; then
    id "$USER_NAME" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$USER_NAME"
    chmod 0666 /dev/fuse  # Debian's default; some images ship 0600
    echo "== the same, as the unprivileged user $USER_NAME"
    run_tests runuser -u "$USER_NAME" --

    echo "== pip install by $USER_NAME from a checkout it cannot write to"
    mkdir -p "$work/home" && chown "$USER_NAME" "$work/home"
    chmod -R a-w "$work/src"
    runuser -u "$USER_NAME" -- env HOME="$work/home" "$PY" -m venv "$work/home/venv"
    runuser -u "$USER_NAME" -- env HOME="$work/home" "$work/home/venv/bin/python" -m pip install -q --no-deps \
        "$work/src" 2>&1 | grep -v "^WARNING: Location" || true
    runuser -u "$USER_NAME" -- "$work/home/venv/bin/python" -P -c 'import zarrfs.engine._gather, zarrfs.fuse._threadstate'
    chmod -R u+w "$work/src"
fi
