"""Fixtures shared by the test modules, and the markers that say what a test starts.

Markers (registered in pyproject.toml; `--strict-markers` refuses others):

* `mount`: the test makes a real FUSE mount (or runs `zarrfs mount`, even one expected to be refused,
  or fusermount3);
* `clients`: the test starts a program from outside this venv: ImageJ, GDAL's tools, Bio-Formats
  (java), vips, openslide, VTK/pvpython under another Python, systemd-analyze, coreutils run on a
  mount (`ls`, `dd`), the writers in `.venv-zp34`, another Python. This venv's own Python (`zarrfs
  tree`, moto's server, a fresh interpreter for a check that might crash) and `cc` (building zarrfs
  needs it already) are not clients;
* `soak`: the long soak run (tests/test_soak.py);
* `root`: the test needs root (another user, setgid/chown, settings only root gets); CI runs as root.

With ZARRFS_NO_EXTENSIONS set zarrfs runs without its compiled extensions (zarrfs/extensions.py): the
modules that test the C path itself (`C_PATH_TESTS`) are not collected, and the rest test the Python
path (scripts/test.sh runs the fast subset so).

The fast subset needs nothing but this venv and mounts nothing:
`pytest -m "not mount and not clients and not soak"`; it draws a third of each hypothesis property's
examples (tests/budget.py). A plain `pytest` runs everything, with the full counts.

Marking is automatic (`pytest_collection_modifyitems`): a test gets `mount`, `clients` or `root` from
what its code reaches: the test function, its fixtures, and every function or class of tests/ that
they name, followed through. `mount`: that code runs a process with the word "mount" or
"fusermount3" in it. `clients`: it reaches a function of clients.py, readers.py or zp3x.py that
starts a process, or names a program of `CLIENT_PROGRAMS` or a path into another `bin/` while
running a process. `root`: it asks `os` for the effective user or changes user, group or owner, or
a skipif says it needs root. Module-level `pytestmark` covers what is out of sight (a child
Python that mounts: the soak).

The guard (`_police_spawn`, an audit hook) holds the marks to the truth: a test that, during its
setup or call, starts `zarrfs mount` or fusermount3 without `mount`, or a program from outside this
venv (but `cc`) without `clients`, fails. Only processes the pytest process starts itself are seen.
"""

from __future__ import annotations

import functools
import gc
import inspect
import os
import re
import shutil
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import budget
from zarrfs import extensions
from zarrfs.engine.engine import Engine
from zarrfs.options import EngineOptions

TESTS = Path(__file__).resolve().parent
# The modules of the C path's own tests (docs/testing.md): without the extensions there is nothing for them to test.
C_PATH_TESTS = ["test_c_safety.py", "test_c_hypothesis.py", "test_c_stress.py", "test_cached_reads.py",
                "test_streams_in_c.py", "test_loads_for_c.py", "test_fuse_threadstate.py"]
collect_ignore = [] if extensions.wanted() else C_PATH_TESTS
OUR_BIN = os.path.dirname(os.path.abspath(sys.executable))
INTERPRETER = os.path.realpath(sys.executable)
CLIENT_MODULES = {"clients", "readers", "zp3x"}
# Programs the tests run by name with subprocess (clients.py and readers.py are followed instead).
CLIENT_PROGRAMS = {"gdal_translate", "gdalinfo", "gdalsrsinfo", "tiffinfo", "tiffcp", "dd", "ls",
                   "systemd-analyze", "python3.13"}
MOUNT_WORDS = {"mount", "fusermount3"}
SPAWNERS = {"Popen", "check_output", "run_zarrfs", "zarrfs_command"}  # and subprocess.run
ROOT_CALLS = {"geteuid", "setuid", "setgid", "seteuid", "setegid", "chown"}
NOT_CLIENTS = {"cc"}


@pytest.fixture
def open_engine() -> Iterator[Callable[..., Engine]]:
    """`open_engine(path_or_url, **EngineOptions fields)`; every engine opened is closed after the test."""
    opened: list[Engine] = []

    def open_one(source: Path | str, **options: Any) -> Engine:
        opened.append(Engine.open(str(source), options=EngineOptions(**options)))
        return opened[-1]

    yield open_one
    for engine in opened:
        engine.close()


# ------------------------------------------------------------- marking by what the code reaches


class _Reach:
    """What code reaches: names, string constants, objects, followed through functions and classes of tests/."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.strings: set[str] = set()
        self.client_code = False
        self.root_call = False
        self._seen: set[int] = set()

    def absorb(self, other: _Reach) -> None:
        self.names |= other.names
        self.strings |= other.strings
        self.client_code |= other.client_code
        self.root_call |= other.root_call

    def follow(self, obj: Any) -> None:
        obj = inspect.unwrap(getattr(getattr(obj, "hypothesis", None), "inner_test", obj))  # @given, @contextmanager
        if id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        if isinstance(obj, type):
            if _in_tests(obj):
                for member in vars(obj).values():
                    self.follow(getattr(member, "__func__", getattr(member, "fget", member)))
            return
        code = getattr(obj, "__code__", None)
        if code is None or not _in_tests(obj):
            return
        self._code(code, obj.__globals__)
        if obj.__module__ in CLIENT_MODULES and _spawns(code):
            self.client_code = True

    def _code(self, code: types.CodeType, namespace: dict[str, Any]) -> None:
        self.names.update(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._code(const, namespace)
            elif isinstance(const, str):
                self.strings.add(const)
        for name in code.co_names:
            if name not in namespace:
                continue
            value = namespace[name]
            if value is os and ROOT_CALLS & set(code.co_names):
                self.root_call = True
            elif isinstance(value, types.ModuleType):
                if _in_tests(value):
                    for attribute in code.co_names:
                        self.follow(getattr(value, attribute, None))
            elif isinstance(value, (str, Path)):
                self.strings.add(str(value))
            else:
                self.follow(value)

    def markers(self) -> set[str]:
        found = set()
        spawns = _starts_process(self.names)
        if spawns and self.strings & MOUNT_WORDS:
            found.add("mount")
        if self.client_code or (spawns and any(_names_a_client(s) for s in self.strings)):
            found.add("clients")
        if self.root_call:
            found.add("root")
        return found


@functools.cache
def _reach_of(function: Callable[..., Any]) -> _Reach:
    """Once per test function or fixture: parametrized tests share it."""
    reach = _Reach()
    reach.follow(function)
    return reach


def _in_tests(obj: Any) -> bool:
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    return isinstance(name, str) and _module_in_tests(name)


@functools.cache
def _module_in_tests(name: str) -> bool:
    file = getattr(sys.modules.get(name), "__file__", None)
    return file is not None and Path(file).resolve().parent == TESTS


def _starts_process(names: set[str]) -> bool:
    return bool(names & SPAWNERS) or {"subprocess", "run"} <= names


def _spawns(code: types.CodeType) -> bool:
    return _starts_process(set(code.co_names)) or any(
        _spawns(c) for c in code.co_consts if isinstance(c, types.CodeType))


@functools.cache
def _names_a_client(text: str) -> bool:
    """A program of CLIENT_PROGRAMS, or a path to a program in a bin/ other than this venv's."""
    if text in CLIENT_PROGRAMS:
        return True
    path = Path(text)
    return path.is_absolute() and path.parent.name == "bin" and str(path.parent) != OUR_BIN \
        and path.name not in NOT_CLIENTS


def pytest_collection_finish(session: pytest.Session) -> None:
    """What exists once collection ends (modules, libraries, the items) lives until the session ends: frozen, the
    garbage collector's full passes skip it instead of walking it again in every test."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        reach = _Reach()
        reach.absorb(_reach_of(item.obj))
        fixtures = set(item._fixtureinfo.name2fixturedefs)
        followed: set[str] = set()
        while fixtures:
            for name in fixtures:
                for definition in item.session._fixturemanager.getfixturedefs(name, item) or ():
                    reach.absorb(_reach_of(definition.func))
            followed |= fixtures
            # Fixtures asked for by name at run time (request.getfixturevalue("name")).
            asked = {s for s in reach.strings if s.isidentifier()} if "getfixturevalue" in reach.names else set()
            fixtures = asked - followed
        found = reach.markers()
        if any("root" in str(mark.kwargs.get("reason", "")) for mark in item.iter_markers("skipif")):
            found.add("root")
        for name in sorted(found - {mark.name for mark in item.iter_markers()}):
            item.add_marker(name)


# ------------------------------------------------------------- the guard


# The test whose setup or call runs now. Not its teardown: a module's fixtures are torn down in
# whichever test of the module runs last, which may not use them.
_running: list[pytest.Item] = []
_violations: dict[str, list[str]] = {}


def _needed_marker(argv: list[str]) -> str | None:
    """`mount`, `clients` or None for a process started with `argv`."""
    program = argv[0] if os.sep in argv[0] else (shutil.which(argv[0]) or argv[0])
    name = os.path.basename(program)
    ours = os.path.dirname(os.path.abspath(program)) == OUR_BIN or _this_interpreter(program)
    if name == "fusermount3" or (("zarrfs" in argv or name == "zarrfs") and "mount" in argv
                                 and "--help" not in argv):
        return "mount"
    if ours or name in NOT_CLIENTS:
        return None
    return "clients"


def _this_interpreter(program: str) -> bool:
    """This venv's Python, or a copy of its binary (a test may run one setgid)."""
    try:
        found, ours = os.stat(program), os.stat(INTERPRETER)
    except OSError:
        return False
    return (found.st_size, found.st_mtime_ns) == (ours.st_size, ours.st_mtime_ns)  # shutil.copy2 keeps both


def _police_spawn(event: str, args: tuple[Any, ...]) -> None:
    if not _running or event not in ("subprocess.Popen", "os.posix_spawn", "os.system"):
        return
    if event == "os.system":
        argv = str(args[0]).split()
    else:
        command = args[1]
        argv = [os.fsdecode(command)] if isinstance(command, (str, bytes)) else [os.fsdecode(a) for a in command]
    if not argv:
        return
    item = _running[-1]
    needed = _needed_marker(argv)
    if needed is None or item.get_closest_marker(needed) is not None:
        return
    message = (f"{item.nodeid} started `{' '.join(argv[:6])}` but is not marked `{needed}` "
               f"(see tests/conftest.py: the marking rules)")
    _violations.setdefault(item.nodeid, []).append(message)
    raise RuntimeError(message)


def pytest_configure(config: pytest.Config) -> None:
    sys.addaudithook(_police_spawn)
    # The fast subset draws fewer hypothesis examples (tests/budget.py); it is the run that leaves out `mount`.
    budget.fast = re.search(r"\bnot\s+mount\b", config.option.markexpr or "") is not None


def _watch(item: pytest.Item) -> Iterator[None]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()
        _fail_on_violations(item)


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_watch)
pytest_runtest_call = pytest.hookimpl(wrapper=True)(_watch)


def _fail_on_violations(item: pytest.Item) -> None:
    """Fail the test even if it caught the guard's exception."""
    if item.nodeid in _violations:
        pytest.fail("\n".join(_violations.pop(item.nodeid)), pytrace=False)
