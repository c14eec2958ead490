#!/usr/bin/env bash
# The C fast path (zarrfs/engine/_cached_reads.c, _gather.c, zarrfs/fuse/_fast_read.c,
# _threadstate.c) under sanitizers: the extensions built with AddressSanitizer and
# UndefinedBehaviorSanitizer, then with ThreadSanitizer, each running the tests of the C path and
# the real-mount stress (tests/test_c_stress.py). Any sanitizer report fails the job.
#
# Python itself is not instrumented, so the sanitizer's runtime is preloaded into it
# (LD_PRELOAD), and Python's own allocator is turned off (PYTHONMALLOC=malloc) so that ASan sees
# every block the extensions get from PyMem_Malloc. The mount's daemon inherits all of it: the
# environment reaches it through `zarrfs mount` and its one restart (zarrfs/fuse/mount.py).
# Reports go to files ($reports), whoever wrote them: pytest, the daemon, or a helper process.
#
# Called by .ci/run after scripts/test.sh; the build copies the checkout's tracked files, so it
# never touches the extensions of the checkout itself (the files git tracks or would: a new test counts). Usage: scripts/test_sanitizers.sh [asan|tsan]...
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
PY=${ZARRFS_PYTHON:-$checkout/.venv/bin/python}
STRESS_SECONDS=${ZARRFS_STRESS_SECONDS:-60}
TESTS=(tests/test_c_safety.py tests/test_c_hypothesis.py tests/test_cached_reads.py tests/test_streams_in_c.py
       tests/test_fuse_threadstate.py tests/test_gather.py tests/test_c_stress.py tests/test_loads_for_c.py)
# Not under a sanitizer: a setgid interpreter runs in secure mode, where glibc ignores LD_PRELOAD
# (the instrumented extensions would then load without their runtime), and the build check for
# Python 3.13's module slots compiles the sources without sanitizers anyway.
DESELECT="not glibc_strips and not python_313"
SANITIZERS=("${@:-asan}")
[ $# -eq 0 ] && SANITIZERS=(asan tsan)

work=$(mktemp -d /tmp/zarrfs-sanitizers.XXXXXX)
trap 'rm -rf "$work"' EXIT
reports="$work/reports"
mkdir -p "$reports"

build() {  # build DIR FLAGS: the tracked files copied to DIR, with the extensions built there with FLAGS
    mkdir -p "$1"
    git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$1"
    ( cd "$1" && ZARRFS_C_FLAGS="$2" "$PY" -m pip wheel -q --no-deps -w "$1/wheel" . 2>&1 \
        | grep -v "^WARNING: Location" || true )
    "$PY" - "$1" <<'EOF'
import sys, zipfile, pathlib
root = pathlib.Path(sys.argv[1])
(wheel,) = (root / "wheel").glob("*.whl")
with zipfile.ZipFile(wheel) as archive:
    built = [name for name in archive.namelist() if name.endswith(".so")]
    assert len(built) == 4, built
    archive.extractall(root, built)
EOF
}

run() {  # run NAME DIR RUNTIME ENV...: the C path's tests against DIR's extensions
    local name=$1 dir=$2 runtime=$3
    shift 3
    local started=$SECONDS
    echo "== $name: ${TESTS[*]}"
    local status=0
    ( cd "$dir" && env "$@" LD_PRELOAD="$runtime" PYTHONMALLOC=malloc PYTHONPATH="$dir" \
        ZARRFS_STRESS_SECONDS="$STRESS_SECONDS" PYTHONFAULTHANDLER=1 \
        "$PY" -m pytest -q -p no:cacheprovider -k "$DESELECT" "${TESTS[@]}" ) || status=$?
    echo "== $name: $((SECONDS - started)) s, pytest exit $status"
    if compgen -G "$reports/*" >/dev/null; then
        echo "test_sanitizers: $name reported:" >&2
        cat "$reports"/* >&2
        exit 1
    fi
    [ "$status" -eq 0 ]
}

for sanitizer in "${SANITIZERS[@]}"; do
    case $sanitizer in
    asan)
        build "$work/asan" "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -fno-wrapv -O1 -g"
        run "ASan+UBSan" "$work/asan" "$(gcc -print-file-name=libasan.so)" \
            ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$reports/asan" \
            UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
        ;;
    tsan)
        build "$work/tsan" "-fsanitize=thread -O1 -g"
        # Python is not instrumented, but its threads synchronise through the GIL, a pthread mutex
        # and condition variable whose calls TSan intercepts: it sees the GIL's ordering too.
        # Under TSan the copy-versus-removal test of test_cached_reads.py serves too few reads in its
        # time (270 of 300 in 240 s on 2 busy vCPUs); ASan runs it, and the stress covers the race here.
        DESELECT="$DESELECT and not waits_for_the_copy" run "TSan" "$work/tsan" "$(gcc -print-file-name=libtsan.so)" \
            TSAN_OPTIONS="halt_on_error=0:report_signal_unsafe=0:log_path=$reports/tsan"
        ;;
    *) echo "test_sanitizers: asan or tsan, not $sanitizer" >&2; exit 2 ;;
    esac
done
