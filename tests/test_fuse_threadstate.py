"""The Python thread state of a thread Python did not start (as libfuse's workers are) lives from
one call into Python to the next once `keep` was called in it, and ends with the thread.

A small C helper (compiled here, as the package's own extensions are) starts a native thread that
calls a ctypes callback several times, the way libfuse calls the FUSE operations. A thread's
`threading.local` data lives exactly as long as its thread state.
"""

from __future__ import annotations

import ctypes
import gc
import subprocess
import threading
import weakref

import pytest
from zarrfs.fuse._threadstate import keep

CALLER = r"""
#include <pthread.h>
typedef void (*callback_t)(int);
struct job { callback_t callback; int times; };
static void *run(void *arg) {
    struct job *job = arg;
    for (int i = 0; i < job->times; i++)
        job->callback(i);
    return 0;
}
/* Call `callback` `times` times from one new native thread; return once that thread has ended. */
int call_from_native_thread(callback_t callback, int times) {
    pthread_t thread;
    struct job job = {callback, times};
    if (pthread_create(&thread, 0, run, &job))
        return -1;
    return pthread_join(thread, 0);
}
"""

Callback = ctypes.CFUNCTYPE(None, ctypes.c_int)


@pytest.fixture(scope="module")
def native_caller(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    work = tmp_path_factory.mktemp("caller")
    (work / "caller.c").write_text(CALLER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-pthread", "-o", str(work / "caller.so"),
                    str(work / "caller.c")], check=True)
    return ctypes.CDLL(str(work / "caller.so"))


class Marker:
    pass


@pytest.mark.parametrize("kept", [False, True])
def test_thread_state_lives_as_long_as_the_native_thread_once_kept(native_caller: ctypes.CDLL,
                                                                    kept: bool) -> None:
    local = threading.local()
    seen: list[bool] = []  # per call: whether the first call's thread-local value was still there
    ended: list[str] = []

    def callback(call: int) -> None:
        if kept:
            keep()
            keep()  # a second call in the same thread returns at once
        seen.append(hasattr(local, "marker"))
        if call == 0:
            local.marker = marker = Marker()
            weakref.finalize(marker, ended.append, "thread state cleared")

    function = Callback(callback)
    assert native_caller.call_from_native_thread(function, 3) == 0
    gc.collect()
    # Without keep: a new thread state for every call. With it: one for all three.
    assert seen == ([False, True, True] if kept else [False, False, False])
    # Either way the thread's state is gone once the thread has ended: nothing leaks.
    assert ended == ["thread state cleared"]


def test_keep_in_the_main_thread_changes_nothing() -> None:
    local = threading.local()
    local.marker = Marker()
    keep()
    keep()
    assert isinstance(local.marker, Marker)
