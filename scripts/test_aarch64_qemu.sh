#!/usr/bin/env bash
# The aarch64 wheel on an x86_64 machine, under qemu-user (a manual run, not CI: pip alone takes
# about 20 minutes emulated):
#
#     bash scripts/test_aarch64_qemu.sh WHEEL_DIR [WORK_DIR]
#
# WHEEL_DIR holds the wheels of scripts/build_wheels.sh; the cp311 aarch64 one is tested with
# Debian 12's own arm64 Python 3.11. WORK_DIR (default /tmp/zarrfs-aarch64) keeps the arm64 root
# and venv between runs. As root: Debian's debootstrap and qemu-user-static are installed if missing.
#
# No binfmt_misc registration (it is the host kernel's, shared by every container): every arm64
# program is started as `qemu-aarch64-static -L ROOT PROGRAM`, so nothing may exec an arm64
# program itself. Hence: the root is debootstrap's first stage with every package it downloaded
# unpacked (no second stage, which would run arm64 maintainer scripts), the venv is made
# --without-pip and pip runs from Debian's pip wheel, the daemon runs in the foreground with
# GLIBC_TUNABLES already set (else it restarts itself), and fusermount3 is the host's (an
# x86_64 program the kernel runs natively, as qemu passes execve through).
#
# Checks: the four extensions import from the wheel, `zarrfs --version` says they are in use, a
# mount of the sample hierarchy (scripts/make_sample.py) by the emulated daemon serves every file
# byte for byte as a mount by this machine's .venv does, its .npy equal zarr-python's arrays,
# random O_DIRECT preads match, and the stats file shows reads answered in C.
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
[ $# -ge 1 ] || { echo "usage: $0 WHEEL_DIR [WORK_DIR]" >&2; exit 2; }
wheel=$(ls "$1"/zarrfs-*-cp311-cp311-manylinux_*_aarch64.whl)
work=$(realpath -m "${2:-/tmp/zarrfs-aarch64}")
root=$work/root
venv=$work/venv
[ -x .venv/bin/python ] || { echo "test_aarch64_qemu: needs .venv (scripts/setup.sh) for the reference mount" >&2; exit 1; }

command -v debootstrap >/dev/null && command -v qemu-aarch64-static >/dev/null \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap qemu-user-static
arm() { env GLIBC_TUNABLES=glibc.malloc.tcache_count=1 FUSE_LIBRARY_PATH=/lib/aarch64-linux-gnu/libfuse3.so.3 \
    qemu-aarch64-static -L "$root" "$@"; }

if [ ! -x "$root/usr/bin/python3.11" ]; then
    echo "== an arm64 Debian 12 root with Python 3.11 and libfuse 3 ($root)"
    debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,python3-venv,libfuse3-3 \
        bookworm "$root" http://deb.debian.org/debian >"$work.debootstrap.log" 2>&1 \
        || { cat "$work.debootstrap.log" >&2; exit 1; }
    for deb in "$root"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$root"; done
fi
# The host's fusermount3, not an arm64 one qemu would find first under the root.
rm -f "$root"/bin/fusermount3 "$root"/usr/bin/fusermount3

echo "== $(basename "$wheel") into an arm64 venv (pip emulated: slow)"
[ -x "$venv/bin/python" ] || arm "$root/usr/bin/python3.11" -m venv --without-pip "$venv"
pip_wheel=$(ls "$root"/usr/share/python-wheels/pip-*.whl)
arm_pip() { arm "$venv/bin/python" "$pip_wheel/pip" install -q "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
arm_pip "$wheel" "zarr>=3.1,<3.2"  # its dependencies (kept from an earlier run)
arm_pip --force-reinstall --no-deps "$wheel"  # this wheel, even over one of the same version

echo "== imports and --version"
( cd / && arm "$venv/bin/python" -P -c '
import platform
import zarrfs.engine._gather, zarrfs.engine._cached_reads, zarrfs.fuse._fast_read, zarrfs.fuse._threadstate
assert platform.machine() == "aarch64", platform.machine()
print(zarrfs.engine._gather.__file__)' )
( cd / && arm "$venv/bin/python" -P -m zarrfs --version ) | tail -n 1 | grep -x "compiled extensions: in use"

echo "== a mount by the arm64 daemon against one by this machine's .venv"
data=$(mktemp -d /tmp/zarrfs-aarch64-mount.XXXXXX)
mkdir -p "$data/arm" "$data/host"
daemon=
cleanup() {
    for mountpoint in "$data/arm" "$data/host"; do
        ! grep -q " $mountpoint " /proc/mounts || fusermount3 -u "$mountpoint" || fusermount3 -uz "$mountpoint"
    done
    [ -z "$daemon" ] || { kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; }
    rm -rf "$data"
}
trap cleanup EXIT
.venv/bin/python scripts/make_sample.py "$data" >/dev/null
( cd / && arm "$venv/bin/python" -P -m zarrfs mount "$data/sample.zarr" "$data/arm" --foreground \
    >"$data/daemon.log" 2>&1 ) &
daemon=$!
for _ in $(seq 120); do grep -q " $data/arm " /proc/mounts && break; sleep 1; done
grep -q " $data/arm " /proc/mounts || { cat "$data/daemon.log" >&2; exit 1; }
.venv/bin/python -m zarrfs mount "$data/sample.zarr" "$data/host"
.venv/bin/python - "$data" <<'EOF'
import json, os, random, sys

import numpy as np
import zarr

data = sys.argv[1]
arm, host = f"{data}/arm", f"{data}/host"
files = 0
for directory, _, names in os.walk(host):
    for name in names:
        if name == ".zarrfs-stats.json":
            continue
        relative = os.path.relpath(os.path.join(directory, name), host)
        with open(os.path.join(arm, relative), "rb") as a, open(os.path.join(host, relative), "rb") as h:
            assert a.read() == h.read(), relative
        files += 1
group = zarr.open_group(f"{data}/sample.zarr", mode="r")
rng = random.Random(44)
for path in ("image", "stack", "cells/labels"):
    expected = group[path][...]
    assert np.array_equal(np.load(f"{arm}/{path}.npy"), expected), path
    raw = expected.tobytes()
    fd = os.open(f"{arm}/{path}.raw", os.O_RDONLY | os.O_DIRECT)
    try:
        for _ in range(300):
            offset, size = rng.randrange(len(raw)), rng.randint(1, 200_000)
            assert os.pread(fd, size, offset) == raw[offset:offset + size], (path, offset, size)
    finally:
        os.close(fd)
with open(f"{arm}/.zarrfs-stats.json") as stats:
    reads = json.load(stats)["reads"]
assert reads["answered_in_c"] > 0, reads
print(f"{files} files byte-identical to the x86_64 mount; .npy = zarr-python; 900 preads exact; "
      f"{reads['answered_in_c']} of {reads['count']} reads answered in C")
EOF
echo "== test_aarch64_qemu: passed ($checkout)"
