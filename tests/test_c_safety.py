"""The C fast path's edges, each shown safe (issue 33): a `CachedReads` without `__init__`,
offsets and shapes whose byte arithmetic cannot hold, chunks of a forgotten array, chunk files
removed while C reads them, `_threadstate.keep()` in a `threading` thread, the modules' init
slots, one open file's `ReadStream` updated by many threads, and the daemon's allocator restart
where glibc strips GLIBC_TUNABLES.

Checks whose failure would crash the interpreter run in a subprocess, so that the failure is a
test's, not pytest's."""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from mountutil import mount_in, mounted_many
from zarr.codecs import ZstdCodec

import zarrfs
from zarrfs.engine._cached_reads import CachedReads
from zarrfs.engine.engine import Engine
from zarrfs.engine.served import ServedChunks
from zarrfs.fuse.mount import ALLOCATOR_RESTARTED
from zarrfs.memory import ALLOCATOR_SETTING
from zarrfs.options import EngineOptions
from zarrfs.files.tree import VirtualTree

PACKAGE_ROOT = str(Path(zarrfs.__file__).resolve().parent.parent)
FH = 5


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter importing this same zarrfs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def one_chunk_table(data: np.ndarray, token: int = 1) -> CachedReads:
    """A table with open file FH over `data` (1-d uint8), stored as one cached chunk."""
    table = CachedReads(1 << 20)
    table.register_array(token)
    table.open_file(FH, token, 0, data.size, 1, data.shape, data.shape)
    assert table.add_chunk(token, 0, data) is True
    return table


def c_serve(table: CachedReads) -> ctypes._CFuncPtr:
    """The C entry point `_fast_read.c` calls first (`serve(table, fh, out, size, offset, &missed)`),
    bound to `table`."""
    capsule = table.serve_capsule()
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    entry = ctypes.cast(get_pointer(capsule, b"zarrfs.engine._cached_reads.serve"),
                        ctypes.POINTER(ctypes.c_void_p * 3)).contents  # serve, serve_loaded, table
    serve = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.c_int64, ctypes.POINTER(ctypes.c_int))(entry[0])
    missed = ctypes.c_int(0)
    return lambda fh, out, size, offset: serve(entry[2], fh, out.ctypes.data, size, offset,
                                               ctypes.byref(missed)), capsule


# ------------------------------------------------------------------ item 1


def test_a_table_made_without_init_works() -> None:
    """`CachedReads.__new__` alone gives working tables (they were NULL, with a bucket mask of
    SIZE_MAX: `remove_chunk` dereferenced NULL)."""
    done = run_python("""
        import numpy as np
        from zarrfs.engine._cached_reads import CachedReads
        table = CachedReads.__new__(CachedReads)
        assert table.remove_chunk(1, 0) is False
        assert table.take_touched(1, 0) is False
        table.remove_array(1)
        table.clear_chunks()
        out = np.zeros(8, np.uint8)
        assert table.serve_into(1, out, 0) == -1
        table.register_array(1)
        table.open_file(1, 1, 0, 8, 1, (8,), (8,))
        assert table.add_chunk(1, 0, np.arange(8, dtype=np.uint8)) is True
        assert table.serve_into(1, out, 0) == 8 and list(out) == list(range(8))
        print(table.counters()["chunks"])
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


# ------------------------------------------------------------------ item 2


@pytest.mark.parametrize("offset", [-1, -(2**63), 2**63 - 10, 2**63 - 1])
def test_serve_into_refuses_a_range_past_int64(offset: int) -> None:
    """An offset whose range cannot be summed in 64 bits is an error, never "served" (with an offset
    near 2**63 `stop` wrapped, the copy loop was skipped, and `serve_into` answered `size` without
    writing a byte)."""
    table = one_chunk_table(np.arange(64, dtype=np.uint8))
    with pytest.raises(OverflowError):
        table.serve_into(FH, np.zeros(100, np.uint8), offset)


@pytest.mark.parametrize(("size", "offset"), [(100, 2**63 - 10), (100, -5), (2**63, 0), (2**64 - 1, 1),
                                              (1 << 41, 0)])
def test_the_c_entry_point_leaves_impossible_ranges_to_python(size: int, offset: int) -> None:
    """`_fast_read.c` calls `serve` directly: for a range it cannot hold it answers -1 (the
    Python path's), and writes nothing."""
    table = one_chunk_table(np.arange(64, dtype=np.uint8))
    serve, _capsule = c_serve(table)
    out = np.full(128, 0xAB, np.uint8)
    assert serve(FH, out, size, offset) == -1
    assert (out == 0xAB).all()
    assert serve(FH, out, 64, 0) == 64 and (out[:64] == np.arange(64)).all()  # and it still serves


# ------------------------------------------------------------------ item 3


@pytest.mark.parametrize(("shape", "itemsize"), [((2**62, 4), 8), ((2**63 - 1,), 2), ((2**32, 2**32), 1)])
def test_open_file_refuses_a_shape_whose_bytes_overflow(shape: tuple[int, ...], itemsize: int) -> None:
    table = CachedReads(1 << 20)
    with pytest.raises(ValueError, match="overflows"):
        table.open_file(FH, 1, 0, 64, itemsize, shape, shape)


def test_open_file_refuses_a_region_its_array_does_not_cover() -> None:
    table = CachedReads(1 << 20)
    with pytest.raises(ValueError, match="region"):
        table.open_file(FH, 1, 0, 65, 1, (8, 8), (4, 4))  # 64 bytes of elements
    with pytest.raises(ValueError, match="region"):
        table.open_file(FH, 1, 2**63 - 10, 64, 1, (8, 8), (4, 4))  # past int64
    table.open_file(FH, 1, 0, 64, 1, (8, 8), (4, 4))


def test_add_file_refuses_a_chunk_shape_whose_bytes_overflow(tmp_path: Path) -> None:
    """8 * 2**61 * 4 bytes wrap to 0 in 64 bits: an empty file matched them."""
    empty = tmp_path / "0.0"
    empty.write_bytes(b"")
    table = CachedReads(1 << 20)
    table.register_array(1)
    with pytest.raises(ValueError, match="overflows"):
        table.add_file(1, 0, str(empty), (2**61, 4), 8)
    assert table.counters()["chunks"] == 0


def test_chunk_edges_far_wider_than_the_array_serve_as_the_array() -> None:
    """Edges near 2**63 (allowed by the metadata checks) made `shape + edges - 1` and `edges *
    itemsize` overflow: a division by zero (SIGFPE) when the edge's bytes wrapped to 0."""
    done = run_python("""
        import numpy as np
        from zarrfs.engine._cached_reads import CachedReads
        table = CachedReads(1 << 20)
        table.register_array(1)
        data = np.arange(40, dtype="<u8").reshape(4, 10)
        table.open_file(5, 1, 0, data.nbytes, 8, data.shape, (2**62, 2**63 - 1))
        table.add_chunk(1, 0, data)
        out = np.zeros(data.nbytes - 12, np.uint8)
        assert table.serve_into(5, out, 12) == out.size
        assert out.tobytes() == data.tobytes()[12:]
        print("ok")
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ------------------------------------------------------------------ item 4


def test_chunks_of_a_forgotten_array_are_refused(tmp_path: Path) -> None:
    """A chunk whose place `served.py` found before the reader's finalizer forgot the array
    reaches C after `remove_array`: C refuses it (it pinned a dead array's chunk until unmount)."""
    chunk = np.arange(16, dtype=np.uint8)
    raw = tmp_path / "0"
    raw.write_bytes(chunk.tobytes())
    table = CachedReads(1 << 20)
    table.register_array(7)
    assert table.add_chunk(7, 0, chunk) is True
    table.remove_array(7)
    assert table.counters()["chunks"] == 0
    baseline = sys.getrefcount(chunk)
    assert table.add_chunk(7, 1, chunk) is False
    assert table.add_file(7, 2, str(raw), (16,), 1) is False
    assert table.counters()["chunks"] == 0
    assert sys.getrefcount(chunk) == baseline  # nothing kept


def test_served_chunks_refuses_a_chunk_resolved_before_its_array_was_forgotten(tmp_path: Path) -> None:
    """The race of `ServedChunks.cached` with the finalizer, played in order: the place resolved,
    the array forgotten, then the add."""
    served = ServedChunks()
    served.register_array("p", 11, (2,), np.dtype(np.uint8))
    place = served._place(("p", (1,)))
    assert place == (11, 1, np.dtype(np.uint8))
    served.forget_array("p", 11)
    assert served.table.add_chunk(place[0], place[1], np.zeros(4, np.uint8)) is False
    raw = tmp_path / "1"
    raw.write_bytes(bytes(4))
    served.register_array("q", 12, (2,), np.dtype(np.uint8))
    served.forget_array("q", 12)
    served._arrays["q"] = (12, (2,), np.dtype(np.uint8))  # `_place` resolved before the forget
    served.open_raw_file(("q", (1,)), str(raw), (4,))
    assert ("q", 1) not in served._raw_files and (12, 1) not in served._raw_files
    assert served.table.counters()["chunks"] == 0


# ------------------------------------------------------------------ item 5


def test_chunk_files_removed_and_replaced_while_c_reads_them(tmp_path: Path) -> None:
    """Threads read chunk files through C (`read_file_pieces`, the lock let go) while another
    takes the files out of C, unlinks and rewrites them and gives them back, or replaces them under
    C's descriptor: every answer C gives holds the right bytes, a file cut short is -1, and no
    descriptor leaks."""
    token, chunks, edge = 3, 8, 1 << 16
    truth = np.frombuffer(np.random.default_rng(5).bytes(chunks * edge), np.uint8)
    paths = [tmp_path / str(i) for i in range(chunks)]
    for i, path in enumerate(paths):
        path.write_bytes(truth[i * edge:(i + 1) * edge].tobytes())
    fds_before = len(os.listdir("/proc/self/fd"))
    table = CachedReads(1)
    table.register_array(token)
    table.open_file(FH, token, 0, truth.size, 1, truth.shape, (edge,))
    table.allow_stream(FH, truth.size)
    for i, path in enumerate(paths):
        assert table.add_file(token, i, str(path), (edge,), 1) is True
    stop = threading.Event()
    answered: list[int] = []
    wrong: list[int] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            size = rng.choice([1, 4096, 3 * edge // 2, 1 << 18])
            offset = rng.randrange(truth.size - size)
            out = np.empty(size, np.uint8)
            if table.serve_into(FH, out, offset) == size:
                answered.append(offset)
                if not np.array_equal(out, truth[offset:offset + size]):
                    wrong.append(offset)

    readers = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for thread in readers:
        thread.start()
    rng = random.Random(1)
    deadline = time.monotonic() + 60
    changes = 0
    try:
        while (changes < 400 or len(answered) < 400) and time.monotonic() < deadline:
            i = rng.randrange(chunks)
            path, piece = paths[i], truth[i * edge:(i + 1) * edge].tobytes()
            if changes % 3 == 0:  # replaced by a new file under C's descriptor, without telling C
                whole = path.with_suffix(".new")
                whole.write_bytes(piece)
                os.replace(whole, path)
            else:  # taken out, replaced by a new file, given back
                assert table.remove_chunk(token, i) is True
                path.unlink()
                path.write_bytes(piece)
                assert table.add_file(token, i, str(path), (edge,), 1) is True
            changes += 1
    finally:
        stop.set()
        for thread in readers:
            thread.join()
    assert not wrong, f"{len(wrong)} of {len(answered)} answers held wrong bytes"
    assert len(answered) >= 400
    # A file cut under C's descriptor: reads of what it lost come short and are refused (-1, Python
    # redoes them). Cut while a read is in flight, the kernel may hand that read the lost pages as
    # zeros with a full count (seen 2 in ~5,000 under ASan): a writer racing the reads tears any
    # reader's read, so stores are read as immutable and the cut is made here with no read in flight.
    assert table.remove_chunk(token, 0) is True
    assert table.add_file(token, 0, str(paths[0]), (edge,), 1) is True  # C's descriptor is this file's
    out = np.empty(4096, np.uint8)
    assert table.serve_into(FH, out, 0) == out.size and np.array_equal(out, truth[:4096])
    os.truncate(paths[0], edge // 2)
    out = np.empty(4096, np.uint8)
    assert table.serve_into(FH, out, edge - 4096) != out.size
    # What it kept is refused too: a file whose size or mtime changed since C opened it was written
    # under its reads, and Python checks the chunk's version (docs/live-stores.md).
    assert table.serve_into(FH, out, 0) == -1
    table.remove_array(token)
    assert len(os.listdir("/proc/self/fd")) == fds_before


# ------------------------------------------------------------------ item 6


def test_keep_refuses_a_thread_that_threading_started() -> None:
    """Such a thread deletes its own thread state as it ends; the key's destructor would then
    restore the freed one."""
    done = run_python("""
        import threading
        from zarrfs.fuse._threadstate import keep
        seen = []
        def run():
            try:
                keep()
                seen.append("kept")
            except RuntimeError as error:
                seen.append(str(error))
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        keep()  # the main thread may
        print(seen[0])
    """)
    assert done.returncode == 0, done.stderr
    assert "threading started" in done.stdout


# ------------------------------------------------------------------ item 7

EXTENSIONS = {"zarrfs/engine/_cached_reads.c": "_cached_reads", "zarrfs/engine/_gather.c": "_gather",
              "zarrfs/fuse/_fast_read.c": "_fast_read", "zarrfs/fuse/_threadstate.c": "_threadstate"}


@pytest.mark.parametrize("module", ["zarrfs.engine._cached_reads", "zarrfs.engine._gather",
                                    "zarrfs.fuse._fast_read", "zarrfs.fuse._threadstate"])
def test_modules_use_multi_phase_init(module: str) -> None:
    """PyInit returns the module's definition (PEP 489), not a module: what carries the slots."""
    imported = __import__(module, fromlist=["_"])
    init = getattr(ctypes.PyDLL(imported.__file__), "PyInit_" + module.rsplit(".", 1)[1])
    init.restype = ctypes.c_void_p  # a borrowed reference to a static object: not a py_object
    definition = init()
    module_def_type = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "PyModuleDef_Type"))
    assert ctypes.c_void_p.from_address(definition + 8).value == module_def_type  # its ob_type


def python_313() -> str:
    """An interpreter whose headers know Py_mod_gil (3.13+)."""
    candidates = [*sorted(Path("/root/.pyenv/versions").glob("3.1[3-9]*/bin/python3")), shutil.which("python3.13")]
    for candidate in filter(None, candidates):
        probe = subprocess.run([str(candidate), "-c", "import sys; assert sys.version_info >= (3, 13)"],
                               capture_output=True, check=False)
        if probe.returncode == 0:
            return str(candidate)
    raise AssertionError("no Python 3.13+ here to build the extensions with")


def test_modules_declare_no_gil_and_no_subinterpreters_to_python_313(tmp_path: Path) -> None:
    """Built with 3.13's headers, every module's slots say Py_MOD_GIL_NOT_USED (a free-threaded
    interpreter would otherwise turn the GIL back on at import) and that a subinterpreter cannot
    load it."""
    python = python_313()
    include = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    checks = []
    for source, name in EXTENSIONS.items():
        library = tmp_path / f"{name}.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{include}", "-o",
                        str(library), os.path.join(PACKAGE_ROOT, source)], check=True)
        checks.append((str(library), name))
    probe = textwrap.dedent(f"""
        import ctypes
        PY_MOD_MULTIPLE_INTERPRETERS, PY_MOD_GIL = 3, 4
        for path, name in {checks!r}:
            init = getattr(ctypes.PyDLL(path), "PyInit_" + name)
            init.restype = ctypes.c_void_p
            definition = init()
            slots = ctypes.cast(ctypes.c_void_p.from_address(definition + 72).value,
                                ctypes.POINTER(ctypes.c_void_p * 2))
            found, i = {{}}, 0
            while True:
                slot_id = ctypes.c_int.from_address(ctypes.addressof(slots[i])).value
                if slot_id == 0:
                    break
                found[slot_id] = slots[i][1] or 0
                i += 1
            print(name, found.get(PY_MOD_GIL), found.get(PY_MOD_MULTIPLE_INTERPRETERS))
    """)
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    # Py_MOD_GIL_NOT_USED is (void *)1, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED (void *)0.
    assert sorted(done.stdout.split("\n")[:-1]) == sorted(f"{name} 1 0" for name in EXTENSIONS.values())


# ------------------------------------------------------------------ item 8


def test_reads_of_one_open_file_update_its_stream_one_at_a_time(tmp_path: Path) -> None:
    """Eight threads read one open file (the kernel keeps several readahead requests of a file in
    flight): no two are inside readahead's bookkeeping of the stream at once, the stream's band
    claim is one band's, and every byte is right."""
    path = tmp_path / "a.zarr"
    truth = np.arange(64 * 512 * 256, dtype="<u2").reshape(64, 512, 256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array = zarr.create_array(str(path), shape=truth.shape, chunks=(4, 128, 128), dtype="<u2",
                                  compressors=[ZstdCodec(level=1)])
        array[...] = truth
    engine = Engine.open(str(path), options=EngineOptions(cache_bytes=64 << 20))
    try:
        handle = VirtualTree(engine, root_name="a").open("/a.raw")
        reader, stream = handle.region.reader, handle.region.stream
        inside: list[int] = []
        overlaps: list[int] = []
        claims: list[int] = []
        track = reader.readahead.track

        def watched_track(s, start, stop):  # noqa: ANN001, ANN202 - the method's own signature
            if s is stream:
                if inside:
                    overlaps.append(start)
                inside.append(start)
                time.sleep(0.0002)  # widen the window another thread would need
                try:
                    return track(s, start, stop)
                finally:
                    inside.pop()
                    claims.append(engine.cache.budget_figures()["claimed_bytes"])
            return track(s, start, stop)

        reader.readahead.track = watched_track
        expected = truth.tobytes()
        wrong: list[int] = []
        size = 1 << 17

        def read(first: int) -> None:
            out = np.empty(size, np.uint8)
            for offset in range(first * size, len(expected), 8 * size):  # together, one sequential stream
                got = handle.read_into(offset, out)
                if out[:got].tobytes() != expected[offset:offset + got]:
                    wrong.append(offset)

        threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not wrong
        assert not overlaps, f"{len(overlaps)} reads updated the stream while another did"
        band = reader.readahead.band_bytes
        assert len(claims) == len(expected) // size
        assert max(claims) <= band  # one stream, one band claimed, never two
    finally:
        engine.close()


# ------------------------------------------------------------------ item 9


def setgid_interpreter(tmp_path: Path) -> Path:
    """A copy of this interpreter, setgid to nogroup, in a venv-like directory seeing this venv's
    packages. Run by root, glibc runs it in secure mode (AT_SECURE: the effective group differs
    from the real one) and strips GLIBC_TUNABLES from its environment, as it does for setuid
    programs and programs with file capabilities."""
    real = Path(os.path.realpath(sys.executable))
    home = tmp_path / "secure-python"
    (home / "bin").mkdir(parents=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (home / "lib" / version).mkdir(parents=True)
    (home / "lib" / version / "site-packages").symlink_to(sysconfig.get_paths()["purelib"])
    (home / "pyvenv.cfg").write_text(f"home = {real.parent}\ninclude-system-site-packages = false\n")
    copy = home / "bin" / version
    shutil.copy2(real, copy)
    os.chown(copy, 0, 65534)
    os.chmod(copy, 0o2755)
    os.chmod(tmp_path, 0o755)
    return copy


def test_the_daemon_starts_where_glibc_strips_the_allocator_tunable(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The foreground daemon restarts itself once to set GLIBC_TUNABLES; where glibc strips it
    again, it serves without the setting (and says so) instead of restarting forever."""
    python = setgid_interpreter(tmp_path)
    stripped = subprocess.run([str(python), "-c", "import os; print(repr(os.environ.get('GLIBC_TUNABLES')))"],
                              env={**os.environ, "GLIBC_TUNABLES": ALLOCATOR_SETTING}, capture_output=True,
                              text=True, check=True, cwd=tmp_path)
    assert ALLOCATOR_SETTING not in stripped.stdout  # glibc did strip it: the case under test
    source = tmp_path / "a.zarr"
    data = np.arange(1000, dtype="<i4")
    zarr.create_array(str(source), shape=data.shape, chunks=(100,), dtype="<i4")[...] = data
    monkeypatch.setattr(sys, "executable", str(python))  # what the test's zarrfs command runs
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv(ALLOCATOR_RESTARTED, raising=False)
    assert os.geteuid() == 0, "making a setgid interpreter needs root (CI runs as root)"
    mount = mount_in(tmp_path, source, foreground=True, expected_log=["kept glibc's default allocator settings"])
    with mounted_many([mount]) as (m,):
        assert (m.root / "a.npy").read_bytes()[-data.nbytes:] == data.tobytes()
        environ = Path(f"/proc/{m.pid}/environ").read_bytes().split(b"\0")
        assert f"{ALLOCATOR_RESTARTED}=1".encode() in environ  # restarted once, and then served
    assert mount.log.read_text().count("GLIBC_TUNABLES was dropped") == 1
