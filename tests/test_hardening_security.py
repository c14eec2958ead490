"""Security: read-only everywhere, other users kept out unless asked, hostile metadata bounded.

Extends test_mount_behaviour.py's EROFS tests with the write-like calls it
does not make (through descriptors, renameat2 flags, directories), and checks
every write-like FUSE operation of the binding one by one.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import stat
import subprocess
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import mfusepy
import numpy as np
import pytest
import zarr

from mountutil import Mount, mount_in, mounted, mounted_many, run_zarrfs
from zarrfs.engine.engine import Engine
from zarrfs.errors import MetadataError
from zarrfs.fuse.ops import ZarrOperations
from zarrfs.model.limits import DEFAULT_MAX_DOCUMENT_BYTES, HELD_VARIABLE, LISTED_NODE_BYTES, SIZE_VARIABLE


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("small") / "small.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=3)
    group.create_array("img", shape=(40, 50), chunks=(16, 16), dtype="<u2")[...] = np.arange(2000).reshape(40, 50)
    group.create_group("sub")
    return store


# ------------------------------------------------------------ read-only


@pytest.fixture(scope="module")
def targets(small: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Mount]]:
    """The default mount (the kernel refuses writes) and `-o rw` (zarrfs's handlers must refuse them)."""
    tmp = tmp_path_factory.mktemp("ro")
    mounts = [mount_in(tmp, small, name="ro"), mount_in(tmp, small, "-o", "rw", name="rw")]
    with mounted_many(mounts):
        yield {"ro": mounts[0], "rw": mounts[1]}


_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


def renameat2(old: Path, new: Path, flags: int) -> None:
    if _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def through_fd(path: Path, call: Callable[[int], object]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        call(fd)
    finally:
        os.close(fd)


# Write-like calls test_mount_behaviour.py does not make.
MORE_WRITE_CALLS: dict[str, Callable[[Path], object]] = {
    "utime-now": lambda m: os.utime(m / "img.npy"),
    "fchmod": lambda m: through_fd(m / "img.npy", lambda fd: os.fchmod(fd, 0o666)),
    "fchown": lambda m: through_fd(m / "img.npy", lambda fd: os.fchown(fd, 1, 1)),
    "futimens": lambda m: through_fd(m / "img.npy", lambda fd: os.utime(fd, (0, 0))),
    "fsetxattr": lambda m: through_fd(m / "img.npy", lambda fd: os.setxattr(fd, "user.a", b"1")),
    "fremovexattr": lambda m: through_fd(m / "img.npy", lambda fd: os.removexattr(fd, "user.a")),
    "lsetxattr": lambda m: os.setxattr(m / "img.npy", "user.a", b"1", follow_symlinks=False),
    "rename-noreplace": lambda m: renameat2(m / "img.npy", m / "x.npy", RENAME_NOREPLACE),
    "rename-exchange": lambda m: renameat2(m / "img.npy", m / "img.raw", RENAME_EXCHANGE),
    "rename-into-dir": lambda m: os.rename(m / "img.npy", m / "sub" / "img.npy"),
    "link-into-dir": lambda m: os.link(m / "img.npy", m / "sub" / "img.npy"),
    "create-in-dir": lambda m: os.open(m / "sub" / "new", os.O_WRONLY | os.O_CREAT, 0o644),
    "chmod-dir": lambda m: os.chmod(m / "sub", 0o777),
    "utime-dir": lambda m: os.utime(m / "sub", (0, 0)),
    "setxattr-dir": lambda m: os.setxattr(m / "sub", "user.a", b"1"),
    "rmdir-root-child": lambda m: os.rmdir(m / "sub"),
    "unlink-stats-file": lambda m: os.unlink(m / ".zarrfs-stats.json"),
    "open-stats-for-write": lambda m: os.open(m / ".zarrfs-stats.json", os.O_WRONLY),
}


@pytest.mark.parametrize("mode", ["ro", "rw"])
@pytest.mark.parametrize("call", sorted(MORE_WRITE_CALLS))
def test_more_write_like_calls_get_erofs(call: str, mode: str, targets: dict[str, Mount]) -> None:
    mount = targets[mode]
    with pytest.raises(OSError) as caught:
        result = MORE_WRITE_CALLS[call](mount.root)
        if isinstance(result, int):
            os.close(result)
    assert caught.value.errno == errno.EROFS, f"{call} on the {mode} mount: {caught.value}"
    assert stat.S_IMODE(os.stat(mount / "img.npy").st_mode) == 0o444


# Every operation of libfuse's table that changes something. The ones zarrfs
# leaves out need a writable handle, which `open` never gives.
WRITE_OPERATIONS = ["write", "truncate", "create", "mkdir", "rmdir", "unlink", "rename", "chmod", "chown",
                    "setxattr", "removexattr", "symlink", "link", "utimens", "mknod"]
NEED_WRITABLE_HANDLE = ["write_buf", "fallocate", "copy_file_range"]


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_extended_attributes_are_not_supported(mode: str, targets: dict[str, Mount]) -> None:
    """No extended attributes: ENOTSUP (the kernel's answer once the daemon said ENOSYS, after which it asks
    no more: `ls -l` of a wide directory would otherwise pay two round trips per entry for them)."""
    for path in (targets[mode] / "img.npy", targets[mode].root):
        for name in ("user.a", "security.selinux", None):
            with pytest.raises(OSError) as raised:
                os.listxattr(path) if name is None else os.getxattr(path, name, follow_symlinks=False)
            assert raised.value.errno == errno.ENOTSUP


def test_every_write_like_fuse_operation_is_refused() -> None:
    table = {name for name, *_ in mfusepy.fuse_operations._fields_}
    assert set(WRITE_OPERATIONS) <= table and {"write_buf", "fallocate"} <= table
    operations = ZarrOperations.__new__(ZarrOperations)  # the handlers need no state to refuse
    for name in WRITE_OPERATIONS:
        with pytest.raises(mfusepy.FuseOSError) as raised:
            getattr(operations, name)("/img.npy", 0, 0, 0)
        assert raised.value.errno == errno.EROFS, name
    for name in NEED_WRITABLE_HANDLE:
        assert getattr(ZarrOperations, name, None) is getattr(mfusepy.Operations, name, None), name


# ------------------------------------------------------------ allow_other


def as_nobody(*command: str) -> subprocess.CompletedProcess[str]:
    def drop() -> None:
        os.setgid(65534)
        os.setuid(65534)

    return subprocess.run(command, capture_output=True, text=True, preexec_fn=drop, timeout=30, check=False)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may enter (pytest's are 0700): other users' access is up to the mount."""
    path = Path(tempfile.mkdtemp(prefix="zarrfs-shared-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)  # the mount helper has unmounted by now


@pytest.mark.parametrize("allow_other", [False, True], ids=["default", "allow-other"])
@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_other_users_are_kept_out_unless_asked(allow_other: bool, small: Path, shared_dir: Path) -> None:
    args = ["--allow-other"] if allow_other else []
    with mounted(small, shared_dir / "mnt", shared_dir / "log", *args) as mount:
        options = next(line for line in open("/proc/self/mountinfo") if f" {mount.root} " in line).split()[-1]
        assert ("allow_other" in options.split(",")) is allow_other
        listing = as_nobody("ls", str(mount.root))
        if allow_other:
            assert listing.returncode == 0 and "img.npy" in listing.stdout.split()
        else:
            assert listing.returncode != 0 and "Permission denied" in listing.stderr


# ------------------------------------------------------- hostile metadata


def write_json(path: Path, doc: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def huge_zmetadata(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A v2 store whose .zmetadata is 100 MB (one enormous attribute)."""
    store = tmp_path_factory.mktemp("huge") / "huge.zarr"
    write_json(store / ".zgroup", {"zarr_format": 2})
    doc = {"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2},
                                                       ".zattrs": {"blob": "x" * 100_000_000}}}
    write_json(store / ".zmetadata", doc)
    return store


def test_100mb_zmetadata_is_refused_with_what_to_do(huge_zmetadata: Path, tmp_path: Path) -> None:
    """The refusal comes before the document is read whole (test_100mb_zmetadata_memory: what it reads)."""
    (tmp_path / "mnt").mkdir()
    result = run_zarrfs("mount", huge_zmetadata, tmp_path / "mnt", "--log-file", tmp_path / "log")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"zarrfs: error: {huge_zmetadata}: .zmetadata: metadata document over the "
        f"{DEFAULT_MAX_DOCUMENT_BYTES >> 20} MiB limit; if the store is trusted, raise it with the environment "
        f"variable {SIZE_VARIABLE} (e.g. {SIZE_VARIABLE}={2 * DEFAULT_MAX_DOCUMENT_BYTES >> 20}M)"]


def test_100mb_zmetadata_memory(huge_zmetadata: Path) -> None:
    """Refused before parsing, having read at most the limit + 1 bytes of it: memory is bounded by the
    limit, not by the document (100 MB here) nor ten times that in Python objects."""
    tracemalloc.start()
    try:
        with pytest.raises(MetadataError):
            Engine.open(str(huge_zmetadata))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"100 MB .zmetadata: peak {peak >> 20} MiB while refusing")
    assert peak < DEFAULT_MAX_DOCUMENT_BYTES * 2 + (8 << 20)  # the limit + 1 bytes read, and one copy of them


def test_the_size_limit_can_be_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "s.zarr"
    write_json(store / "zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": {"note": "y" * 4000}})
    monkeypatch.setenv(SIZE_VARIABLE, "2K")
    with pytest.raises(MetadataError, match="over the 0 MiB limit"):
        Engine.open(str(store))
    monkeypatch.setenv(SIZE_VARIABLE, "8K")
    assert Engine.open(str(store)).hierarchy.root().attributes["note"] == "y" * 4000


@pytest.mark.parametrize("depth", [200, 100_000, 10_000_000])
def test_deeply_nested_json_is_refused_by_its_depth(depth: int, tmp_path: Path) -> None:
    """By the depth check (iterative: no RecursionError, no parse of ten million levels into objects)."""
    store = tmp_path / "s.zarr"
    store.mkdir()
    (store / "zarr.json").write_bytes(b'{"zarr_format": 3, "node_type": "group", "attributes": {"a": '
                                      + b"[" * depth + b"]" * depth + b"}}")
    with pytest.raises(MetadataError, match="nested more than 128 levels deep"):
        Engine.open(str(store))


def test_two_million_consolidated_nodes_are_refused(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    group = {"zarr_format": 3, "node_type": "group"}
    # The document's text is put together from its parts: json.dumps of a million dicts would be
    # most of this test's time. It is what json.dumps would write.
    shell = json.dumps({**group, "consolidated_metadata": {"kind": "inline", "must_understand": False,
                                                           "metadata": {}}})
    node = json.dumps(group)
    nodes = ", ".join(f'"g{i}": {node}' for i in range(2_000_000))
    store.mkdir()
    (store / "zarr.json").write_text(shell.replace('"metadata": {}', f'"metadata": {{{nodes}}}'))
    with pytest.raises(MetadataError,  # by size, unparsed
                       match=f"over the {DEFAULT_MAX_DOCUMENT_BYTES >> 20} MiB limit.*{SIZE_VARIABLE}"):
        Engine.open(str(store))


def _wide_group(store: Path, count: int) -> None:
    """A consolidated v2 group of `count` small arrays."""
    array = {"zarr_format": 2, "shape": [10], "chunks": [10], "dtype": "<u2", "compressor": None,
             "fill_value": 0, "order": "C", "filters": None}
    metadata: dict[str, object] = {".zgroup": {"zarr_format": 2}}
    metadata |= {f"a{i:05d}/.zarray": array for i in range(count)}
    write_json(store / ".zmetadata", {"zarr_consolidated_format": 1, "metadata": metadata})
    write_json(store / ".zgroup", {"zarr_format": 2})


def test_a_wide_group_lists_every_child(tmp_path: Path) -> None:
    """30,000 arrays in one group (consolidated, 5 MB): every one is listed, and each opens by name."""
    store = tmp_path / "many.zarr"
    _wide_group(store, 30_000)
    with mounted(store, tmp_path / "mnt", tmp_path / "log", "--formats", "raw") as mount:
        names = set(os.listdir(mount.root))
        assert names == {f"a{i:05d}.raw" for i in range(30_000)} | {".group.json", ".zarrfs-stats.json"}
        assert (mount / "a29999.raw").read_bytes() == bytes(20)  # fill value 0, ten uint16


def test_a_group_past_the_metadata_bound_is_refused_whole_and_said(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is memory, not a count: past it the group's listing fails (EFBIG) with the reason and the
    setting that raises it; nothing is listed in part."""
    store = tmp_path / "many.zarr"
    _wide_group(store, 2_000)
    bound = 2_000 * LISTED_NODE_BYTES // 2 >> 20  # MiB: half what 2,000 listed children hold
    monkeypatch.setenv(HELD_VARIABLE, f"{bound}M")
    with mounted(store, tmp_path / "mnt", tmp_path / "log", "--formats", "raw",
                 expected_log=[rf"ERROR .*2000 children.*over the {bound} MiB bound.*{HELD_VARIABLE}"]) as mount:
        with pytest.raises(OSError) as raised:
            os.listdir(mount.root)
        assert raised.value.errno == errno.EFBIG

