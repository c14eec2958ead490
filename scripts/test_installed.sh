#!/usr/bin/env bash
# The mount lifecycle tests again, the way packagers and most users install and mount:
#   - a wheel: the x86_64 manylinux_2_26 wheels of scripts/build_wheels.sh (zig cc against glibc
#     2.26, from the checkout's tracked files), installed into a fresh venv where no compiler can run
#     (CC=/bin/false, PATH without gcc): `pip install zarrfs` on a machine without gcc;
#   - run from the copied source directory (the installed package must not need its sources);
#   - as this user, and (when run as root) as an unprivileged user with /dev/fuse made
#     accessible as Debian does by default (mode 0666);
#   - `zarrfs tree` of a plain install (no extras) prints nothing on stderr;
#   - (as root) that user can `pip install` from a checkout it cannot write to (the sdist way: a
#     build from source);
#   - every other supported Python on the machine (scripts/pythons.sh) that no venv of the suite has
#     (.venv, .venv-oldest: scripts/test.sh runs the whole suite in those): its own wheel, installed the
#     same way, imports, mounts and reads (the lifecycle tests, as this user).
# Called by scripts/test.sh. WHEEL_DIR=DIR keeps all the wheels built (aarch64 too) there.
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
pip_quiet() {  # pip_quiet VENV ARGS...
    local venv=$1
    shift
    "$venv/bin/python" -m pip install -q "$@" 2>&1 | grep -v "^WARNING: Location" || true
}

# No compiler: a PATH of the venv's own commands only, and CC pointing at false.
mkdir -p "$work/no-compiler"
no_compiler() { env PATH="$work/no-compiler" CC=/bin/false CXX=/bin/false "$@"; }
if no_compiler bash -c 'command -v gcc || command -v cc' >/dev/null 2>&1; then
    echo "test_installed: gcc is still on the no-compiler PATH" >&2
    exit 1
fi

# The wheels of every supported Python here, x86_64 and aarch64 (scripts/build_wheels.sh).
source scripts/pythons.sh
versions=$(python_candidates | awk '{print $1}')
# shellcheck disable=SC2086 # one argument per version
bash scripts/build_wheels.sh "$work/wheels" $versions >"$work/wheels.log" 2>&1 || { cat "$work/wheels.log" >&2; exit 1; }
[ -z "${WHEEL_DIR:-}" ] || { mkdir -p "$WHEEL_DIR" && cp "$work"/wheels/*.whl "$WHEEL_DIR/"; }

wheel_for() {  # wheel_for PYTHON: the x86_64 wheel for PYTHON's version
    local tag
    tag=$("$1" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
    ls "$work/wheels"/zarrfs-*-"$tag"-"$tag"-manylinux_*_x86_64.whl
}

install_wheel() {  # install_wheel PYTHON VENV WHEEL: the wheel and the tests' needs, with no compiler
    "$1" -m venv "$2"
    pip_quiet "$2" --upgrade pip
    no_compiler "$2/bin/python" -m pip install -q "$3" pytest pytest-timeout "zarr>=3.1" 2>&1 | grep -v "^WARNING: Location" || true
    "$2/bin/python" -P -c 'import zarrfs.engine._gather, zarrfs.engine._cached_reads, zarrfs.fuse._fast_read, zarrfs.fuse._threadstate'
    ( cd / && env -u ZARRFS_NO_EXTENSIONS "$2/bin/zarrfs" --version ) | tail -n 1 | grep -qx "compiled extensions: in use"
}

run_tests() {  # run_tests VENV [runuser -u USER --]
    local venv=$1
    shift
    ( cd "$work/src" && "$@" env HOME="$work" PATH=/usr/bin:/bin:/usr/sbin:/sbin \
        "$venv/bin/python" -P -m pytest -q -p no:cacheprovider "${TESTS[@]}" )
}

wheel=$(wheel_for "$PY")
echo "== wheel: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB), installed without a compiler"
install_wheel "$PY" "$work/venv" "$wheel"
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

echo "== the wheel, mounting from the source directory, as $(id -un)"
run_tests "$work/venv"

if [ "$(id -u)" -eq 0 ]; then
    id "$USER_NAME" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$USER_NAME"
    chmod 0666 /dev/fuse  # Debian's default; some images ship 0600
    echo "== the same, as the unprivileged user $USER_NAME"
    run_tests "$work/venv" runuser -u "$USER_NAME" --

    echo "== pip install (from source) by $USER_NAME from a checkout it cannot write to"
    mkdir -p "$work/home" && chown "$USER_NAME" "$work/home"
    chmod -R a-w "$work/src"
    runuser -u "$USER_NAME" -- env HOME="$work/home" "$PY" -m venv "$work/home/venv"
    runuser -u "$USER_NAME" -- env HOME="$work/home" "$work/home/venv/bin/python" -m pip install -q --no-deps \
        "$work/src" 2>&1 | grep -v "^WARNING: Location" || true
    runuser -u "$USER_NAME" -- "$work/home/venv/bin/python" -P -c 'import zarrfs.engine._gather, zarrfs.fuse._threadstate'
    chmod -R u+w "$work/src"
fi

# Every other supported Python here: its wheel imports, mounts and reads.
covered=" $("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') "
for venv in .venv .venv-oldest; do
    [ -x "$venv/bin/python" ] && covered+="$(venv_version "$venv") "
done
python_candidates | while read -r version python; do
    [[ "$covered" == *" $version "* ]] && continue
    wheel=$(wheel_for "$python")
    echo "== Python $version: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB), installed without a compiler"
    install_wheel "$python" "$work/venv-$version" "$wheel"
    run_tests "$work/venv-$version"
done
