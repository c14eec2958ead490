# Sourced by scripts/setup.sh and scripts/test_installed.sh: the CPythons on this machine that zarrfs supports.
#
# python_candidates prints "MAJOR.MINOR PATH" for each usable CPython >= 3.11, one per minor version,
# oldest first: $PYTHON if set, python3, /usr/bin/python3, python3.11 ... python3.14 on PATH (pyenv's
# shims among them) and pyenv's installed versions. Usable: built with the GIL (zarrfs's dependencies
# have no free-threaded wheels yet), with venv and ensurepip, and with its headers (for building from
# source). PATH is the interpreter itself, not a shim.

_PYTHON_PROBE='
import os, sys, sysconfig, ensurepip, venv
assert sys.implementation.name == "cpython" and sys.version_info >= (3, 11)
assert not sysconfig.get_config_var("Py_GIL_DISABLED")
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
print("%d.%d %s" % (sys.version_info[0], sys.version_info[1], os.path.realpath(sys.executable)))
'

python_candidates() {
    local candidate pyenv_root
    pyenv_root=$(pyenv root 2>/dev/null || true)
    for candidate in ${PYTHON:-} python3 /usr/bin/python3 python3.11 python3.12 python3.13 python3.14 \
            ${pyenv_root:+"$pyenv_root"/versions/3.*/bin/python3}; do
        "$candidate" -c "$_PYTHON_PROBE" 2>/dev/null || true
    done | awk '!seen[$1]++' | sort -V
}

# The Python of a venv as MAJOR.MINOR.
venv_version() {
    "$1/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])'
}
