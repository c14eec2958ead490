#!/usr/bin/env bash
# Set up everything zarrfs needs on a Debian/Ubuntu machine, idempotently:
#   system packages: fuse3 (libfuse 3 + fusermount3), python3-venv if venv is missing,
#   gcc and python3-dev if missing (zarrfs builds two small C extensions, zarrfs/engine/_gather.c and zarrfs/fuse/_threadstate.c)
#   a virtual environment in .venv with zarrfs installed (editable) with its remote, geo, icechunk and
#   references extras and (not with --product) its test and lint extras, made with the newest Python >= 3.12
#   found (scripts/pythons.sh: python3.1x on PATH, pyenv), else 3.11 (then icechunk stays at 1.1: no
#   Icechunk format 2; zarr-python 3.1)
#   with --oldest-too: .venv-oldest, the same with the oldest supported Python (CI runs the suite in both)
#   .venv-zp34 with zarr-python 3.4.2 (needs Python >= 3.12): the out-of-process oracle of tests/zp3x.py
#   .venv-geozarr with zarr-python 3.4.2 and the GeoZarr writers of tests/geozarr_writers.py
# Usage: bash scripts/setup.sh [--product | [--clients] [--oldest-too]]
#   --product: the product alone (the demo's setup): .venv with the runtime extras, no test tooling, no
#              writers' venvs; --clients also installs GDAL and stock ImageJ for the tests
set -euo pipefail
cd "$(dirname "$0")/.."

product=0 clients=0 oldest_too=0
for arg in "$@"; do
    case $arg in
    --product) product=1 ;;
    --clients) clients=1 ;;
    --oldest-too) oldest_too=1 ;;
    *) echo "setup: unknown argument $arg (usage: bash scripts/setup.sh [--product | [--clients] [--oldest-too]])" >&2
       exit 2 ;;
    esac
done
if [ "$product" = 1 ] && [ "$clients$oldest_too" != 00 ]; then
    echo "setup: --product installs the product alone: not with --clients or --oldest-too" >&2
    exit 2
fi
# The runtime extras; the test command's setup adds what the tests and the linters need.
extras=remote,icechunk,references,geo
[ "$product" = 1 ] || extras=test,lint,$extras

sudo=()
[ "$(id -u)" -ne 0 ] && sudo=(sudo)
apt_install() {
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

source scripts/pythons.sh
pythons=$(python_candidates)
# $PYTHON if given, else the newest usable one; python3 when none is usable yet (its venv and headers come from apt below).
PYTHON=${PYTHON:-$(echo "$pythons" | tail -n 1 | cut -d' ' -f2)}
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    echo "setup: zarrfs needs Python 3.11 or newer as \$PYTHON or python3" >&2
    exit 1
fi

missing=()
# grep without -q reads all of ldconfig's output: with -q it can exit first and,
# under pipefail, ldconfig's SIGPIPE would count as "missing".
ldconfig -p 2>/dev/null | grep 'libfuse3\.so\.3' >/dev/null || missing+=(fuse3)
command -v fusermount3 >/dev/null || missing+=(fuse3)
"$PYTHON" -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
command -v cc >/dev/null || missing+=(gcc)
"$PYTHON" -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    2>/dev/null || missing+=(python3-dev)
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    apt_install "${missing[@]}"
fi

make_venv() {  # make_venv DIR PYTHON: zarrfs editable with $extras (an existing DIR is kept as it is)
    [ -x "$1/bin/python" ] || "$2" -m venv "$1"
    "$1/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
    "$1/bin/python" -m pip install -q -e ".[$extras]" 2>&1 | grep -v "^WARNING: Location" || true
    "$1/bin/python" -c "import zarrfs, mfusepy" >/dev/null
}
make_venv .venv "$PYTHON"
newest=$(echo "$pythons" | tail -n 1 | cut -d' ' -f1)
if [ "$(printf '%s\n' "$(venv_version .venv)" 3.12 | sort -V | head -n 1)" != 3.12 ]; then
    echo "setup: .venv has Python $(venv_version .venv) (newest usable here: ${newest:-none}): icechunk stays at 1.1," \
         "which cannot read Icechunk format 2 repositories, and the tests use zarr-python 3.1; with Python" \
         ">= 3.12 installed, remove .venv and run setup again" >&2
fi
if [ "$product" = 1 ]; then
    echo "setup: ready (.venv/bin/zarrfs; the test command's setup adds the test tooling and the writers' venvs)"
    exit 0
fi
if [ "$oldest_too" = 1 ]; then
    oldest=$(echo "$pythons" | head -n 1)
    if [ -n "$oldest" ] && [ "${oldest%% *}" != "$(venv_version .venv)" ]; then
        make_venv .venv-oldest "${oldest#* }"
    fi
fi

python312() {  # a Python >= 3.12 that runs (a pyenv shim of a version not selected does not), or nothing
    for candidate in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
        if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
}

# zarr-python 3.4 needs Python >= 3.12; the tests use it out of process (tests/zp3x.py).
ZP3X_ZARR=3.4.2
ZP3X_CAST_VALUE_RS=0.5.1  # zarr-python's cast_value codec computes with it
# OME-Zarr writers that need zarr-python 3.2+ (tests/ome_writers.py): levels in sub-groups, HCS plates.
ZP3X_OME_WRITERS=("ngff-zarr==0.50.0" "iohub==0.3.11")
ZP3X_ICECHUNK=2.3.0  # tests/icechunk2_writer.py: format 1 and 2 repositories with virtual chunks
if ! .venv-zp34/bin/python -c "import zarr, cast_value_rs, ngff_zarr, iohub, icechunk
assert zarr.__version__ == '$ZP3X_ZARR' and icechunk.__version__ == '$ZP3X_ICECHUNK'" 2>/dev/null; then
    py312=$(python312)
    if [ -z "$py312" ]; then
        echo "setup: no python3.12 found: tests/test_engine_zp34.py will fail until .venv-zp34 exists" >&2
    else
        rm -rf .venv-zp34
        "$py312" -m venv .venv-zp34
        .venv-zp34/bin/python -m pip install -q "zarr==$ZP3X_ZARR" "cast-value-rs==$ZP3X_CAST_VALUE_RS" \
            "${ZP3X_OME_WRITERS[@]}" "icechunk==$ZP3X_ICECHUNK" 2>&1 | grep -v "^WARNING: Location" || true
        .venv-zp34/bin/python -c "import zarr, cast_value_rs, ngff_zarr, iohub, icechunk" >/dev/null
    fi
fi

# The GeoZarr writers of tests/geozarr_writers.py, beside zarr-python 3.4: geozarr-toolkit, rioxarray 0.23, and
# eopf-geozarr 0.12 with --no-deps (it pins zarr < 3.4) plus the few of its dependencies its writer imports.
GEOZARR_WRITERS=("zarr==$ZP3X_ZARR" "geozarr-toolkit==0.1.2" "rioxarray==0.23.0" "zarr-cm==0.5.0" "pydantic-zarr"
                 "cf-xarray" "dask[array]" "s3fs" "pystac")
if ! .venv-geozarr/bin/python -c "import zarr, geozarr_toolkit, rioxarray, eopf_geozarr
assert zarr.__version__ == '$ZP3X_ZARR' and rioxarray.__version__ == '0.23.0'" 2>/dev/null; then
    py312=$(python312)
    if [ -n "$py312" ]; then
        rm -rf .venv-geozarr
        "$py312" -m venv .venv-geozarr
        printf 'zarr==%s\n' "$ZP3X_ZARR" > .venv-geozarr/constraints.txt
        .venv-geozarr/bin/python -m pip install -q -c .venv-geozarr/constraints.txt "${GEOZARR_WRITERS[@]}" 2>&1 \
            | grep -v "^WARNING: Location" || true
        .venv-geozarr/bin/python -m pip install -q --no-deps "eopf-geozarr==0.12.0" 2>&1 | grep -v "^WARNING: Location" || true
        .venv-geozarr/bin/python -c "import zarr, geozarr_toolkit, rioxarray, eopf_geozarr" >/dev/null
    else
        echo "setup: no python3.12 found: tests/test_geozarr.py's writers will fail until .venv-geozarr exists" >&2
    fi
fi

if [ "$clients" = 1 ]; then
    bash scripts/install_clients.sh
fi
echo "setup: ready (.venv/bin/zarrfs)"
