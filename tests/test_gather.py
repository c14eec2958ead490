"""zarrfs.engine.gather: strided copies and preadv2 into strided blocks, checked against numpy.

Both implementations are held to the same checks: the compiled `_gather` and
the Python path that takes its place without the extensions (a run with
ZARRFS_NO_EXTENSIONS set, of the Python path, checks that one alone).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from zarrfs import extensions
from zarrfs.engine import gather

IMPLEMENTATIONS = ["compiled", "python"] if extensions.wanted() else ["python"]


def functions(implementation: str) -> tuple[Callable[..., None], Callable[..., int]]:
    """(copy_into, preadv_into) of `implementation`."""
    if implementation == "compiled":
        from zarrfs.engine import _gather
        return _gather.copy_into, _gather.preadv_into
    return gather.python_copy_into, gather.python_preadv_into

DTYPES = ["u1", "<u2", ">i4", "<f8", "M8[s]", "S3", "c16"]


@st.composite
def strided_views(draw: st.DrawFn) -> tuple[np.ndarray, tuple[slice, ...]]:
    """A base array and slices of it with steps, negative ones and size-1 axes included."""
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.integers(1, 7)) for _ in range(ndim))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    slices = []
    for n in shape:
        start = draw(st.integers(0, n - 1))
        stop = draw(st.integers(start + 1, n))
        step = draw(st.sampled_from([1, 1, 2, -1]))
        slices.append(slice(start, stop, step) if step > 0 else slice(stop - 1, start - 1 if start else None, -1))
    return np.zeros(shape, dtype), tuple(slices)


def _filled(shape: tuple[int, ...], dtype: np.dtype, seed: int) -> np.ndarray:
    raw = np.random.default_rng(seed).integers(0, 256, int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=examples(300), deadline=None)
@given(strided_views(), st.integers(0, 2**32 - 1), st.booleans())
def test_copy_into_equals_numpy_assignment(implementation: str, case: tuple[np.ndarray, tuple[slice, ...]],
                                           seed: int, transposed_source: bool) -> None:
    copy_into = functions(implementation)[0]
    base, index = case
    destination = base[(*index, ...)]  # a view even when 0-d (base[()] is a scalar)
    wanted_shape = destination.shape
    source = _filled(wanted_shape[::-1], base.dtype, seed).T if transposed_source else _filled(wanted_shape, base.dtype, seed)
    expected = base.copy()
    expected[index] = source
    copy_into(destination, source)
    assert base.tobytes() == expected.tobytes()  # the block written, nothing around it


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@settings(max_examples=examples(200), deadline=None)
@given(strided_views(), st.integers(0, 64))
def test_preadv_into_equals_file_bytes(implementation: str, tmp_path_factory: pytest.TempPathFactory,
                                       case: tuple[np.ndarray, tuple[slice, ...]], offset: int) -> None:
    preadv_into = functions(implementation)[1]
    base, index = case
    destination = base[(*index, ...)]  # a view even when 0-d (base[()] is a scalar)
    content = np.random.default_rng(offset).integers(0, 256, destination.nbytes + offset + 7, dtype=np.uint8)
    path = tmp_path_factory.mktemp("gather") / "chunk"
    path.write_bytes(content.tobytes())
    expected = base.copy()
    expected[index] = content[offset:offset + destination.nbytes].view(base.dtype).reshape(destination.shape)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert preadv_into(fd, destination, offset, 0) == destination.nbytes
    finally:
        os.close(fd)
    assert base.tobytes() == expected.tobytes()


@pytest.fixture
def chunk_file(tmp_path: Path) -> tuple[Path, bytes]:
    data = np.arange(1 << 16, dtype=np.uint8).tobytes() * 2
    path = tmp_path / "chunk"
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_preadv_into_batches_more_runs_than_one_call_takes(implementation: str,
                                                           chunk_file: tuple[Path, bytes]) -> None:
    preadv_into = functions(implementation)[1]
    path, data = chunk_file
    out = np.zeros((3000, 4), np.uint8)
    destination = out[:, :2]  # 3,000 runs of 2 bytes: more than IOV_MAX (1024) buffers
    fd = os.open(path, os.O_RDONLY)
    try:
        assert preadv_into(fd, destination, 10, 0) == 6000
    finally:
        os.close(fd)
    assert destination.tobytes() == data[10:6010]
    assert not out[:, 2:].any()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_preadv_into_reports_a_short_file(implementation: str, chunk_file: tuple[Path, bytes]) -> None:
    preadv_into = functions(implementation)[1]
    path, data = chunk_file
    out = np.zeros((4, 100), np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert preadv_into(fd, out[:, ::2], len(data) - 30, 0) == 30
    finally:
        os.close(fd)
    assert out[:, ::2].tobytes()[:30] == data[-30:]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_preadv_into_raises_oserror_for_a_bad_descriptor(implementation: str, tmp_path: Path) -> None:
    preadv_into = functions(implementation)[1]
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: read(2) says EISDIR
    try:
        with pytest.raises(OSError) as raised:
            preadv_into(fd, np.zeros(8, np.uint8), 0, 0)
    finally:
        os.close(fd)
    assert raised.value.errno == errno.EISDIR
    with pytest.raises(OSError) as raised:
        preadv_into(fd, np.zeros(8, np.uint8), 0, 0)  # closed now
    assert raised.value.errno == errno.EBADF


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_preadv_into_with_nowait_never_waits_for_the_disk(implementation: str,
                                                          chunk_file: tuple[Path, bytes]) -> None:
    """Evicted pages: EAGAIN (BlockingIOError) or a short read, never a wait; cached pages: the bytes."""
    preadv_into = functions(implementation)[1]
    path, data = chunk_file
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        out = np.zeros(len(data), np.uint8)
        try:
            got = preadv_into(fd, out, 0, os.RWF_NOWAIT)
        except BlockingIOError:
            got = 0
        except OSError as exc:  # a file system without RWF_NOWAIT support
            assert exc.errno in (errno.EOPNOTSUPP, errno.EINVAL)
            return
        assert out.tobytes()[:got] == data[:got]
        assert preadv_into(fd, out, 0, 0) == len(data)  # may wait: reads it in
        assert preadv_into(fd, out, 0, os.RWF_NOWAIT) == len(data)
    finally:
        os.close(fd)
    assert out.tobytes() == data


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_copy_into_refuses_blocks_that_differ(implementation: str) -> None:
    copy_into = functions(implementation)[0]
    with pytest.raises(ValueError, match="shape or element size"):
        copy_into(np.zeros((2, 3), "u2"), np.zeros((3, 2), "u2"))
    with pytest.raises(ValueError, match="shape or element size"):
        copy_into(np.zeros(4, "u2"), np.zeros(4, "u4"))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_read_only_destinations_are_refused(implementation: str, chunk_file: tuple[Path, bytes]) -> None:
    copy_into, preadv_into = functions(implementation)
    frozen = np.zeros(8, np.uint8)
    frozen.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        copy_into(frozen, np.ones(8, np.uint8))
    fd = os.open(chunk_file[0], os.O_RDONLY)
    try:
        with pytest.raises((BufferError, ValueError)):
            preadv_into(fd, frozen, 0, 0)
    finally:
        os.close(fd)
    assert not frozen.any()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_copy_into_a_long_block_releases_the_gil_and_copies_it(implementation: str) -> None:
    copy_into = functions(implementation)[0]
    source = np.arange(3 << 20, dtype=np.uint32).reshape(-1, 1024)  # 12 MiB: past the 8 MiB hold limit
    destination = np.zeros((source.shape[0], 2048), np.uint32)[:, ::2]
    copy_into(destination, source)
    assert np.array_equal(destination, source)
