/* A Python thread state that lives as long as the libfuse worker thread it belongs to.
 *
 * libfuse's worker threads are not Python threads. Each time one of them
 * calls into Python (a ctypes callback: every FUSE request), ctypes takes
 * the GIL with PyGILState_Ensure, which finds no thread state for the
 * thread, creates one (with a freshly mmap'ed frame stack) and destroys it
 * again on the way out: an mmap, a munmap and a thread state's set-up and
 * tear-down per request, a large part of a small read's time.
 *
 * `keep()` takes one more PyGILState reference for the calling thread, the
 * first time that thread calls it, so the thread state outlives each
 * callback. A pthread key's destructor ends it when the thread exits
 * (libfuse ends idle threads beyond max_idle_threads, and all of them
 * before its loop returns, so none outlives the interpreter). The
 * destructor cannot use PyGILState_Release: glibc has already cleared
 * Python's own thread-specific slot by then; it restores the thread state
 * it stored itself, clears it and deletes it.
 *
 * A thread that `threading` started deletes its own thread state as it ends,
 * before that destructor runs, which would then restore a freed thread state:
 * `keep()` refuses such a thread (RuntimeError) rather than documenting it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>

#include "../_extension.h"

static pthread_key_t kept_key;
static int key_ready;

static void end_thread_state(void *kept) {
    PyEval_RestoreThread((PyThreadState *)kept);
    PyThreadState_Clear((PyThreadState *)kept);
    PyThreadState_DeleteCurrent();
}

/* 1 if `threading` started the calling thread (other than the main thread), 0 if not, -1 on an error.
 * `threading._active` holds its threads by ident, and the `_DummyThread` it makes for a thread it
 * did not start, once something asks for that thread's `current_thread()`. */
static int started_by_threading(void) {
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL)
        return -1;
    int started = -1;
    PyObject *active = PyObject_GetAttrString(threading, "_active");
    PyObject *main = PyObject_CallMethod(threading, "main_thread", NULL);
    PyObject *dummy = PyObject_GetAttrString(threading, "_DummyThread");
    PyObject *ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (active != NULL && main != NULL && dummy != NULL && ident != NULL) {
        PyObject *thread = PyObject_GetItem(active, ident);
        if (thread == NULL && PyErr_ExceptionMatches(PyExc_KeyError)) {
            PyErr_Clear();
            started = 0;
        } else if (thread != NULL) {
            int is_dummy = PyObject_IsInstance(thread, dummy);
            started = is_dummy < 0 ? -1 : thread != main && !is_dummy;
            Py_DECREF(thread);
        }
    }
    Py_XDECREF(ident);
    Py_XDECREF(dummy);
    Py_XDECREF(main);
    Py_XDECREF(active);
    Py_DECREF(threading);
    return started;
}

/* Keep the calling thread's state (the GIL held); 0, or -1 with an exception set. */
static int keep_current(void) {
    if (!key_ready || pthread_getspecific(kept_key) != NULL)
        return 0;
    int started = started_by_threading();
    if (started != 0) {
        if (started > 0)
            PyErr_SetString(PyExc_RuntimeError, "keep(): a thread that threading started ends its own thread state");
        return -1;
    }
    PyGILState_Ensure(); /* the GIL is held: this only counts one more reference */
    if (pthread_setspecific(kept_key, PyThreadState_Get()) != 0)
        PyGILState_Release(PyGILState_LOCKED);
    return 0;
}

static PyObject *keep(UNUSED PyObject *self, UNUSED PyObject *unused) {
    if (keep_current() < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(keep_doc,
"keep()\n--\n\n"
"Keep the calling thread's Python thread state until the thread exits.\n"
"Only for threads Python did not start (libfuse's workers) and the main\n"
"thread: a thread that `threading` started deletes its own thread state\n"
"as it ends, before the destructor here would (RuntimeError).");

static PyMethodDef threadstate_methods[] = {
    {"keep", keep, METH_NOARGS, keep_doc},
    {NULL, NULL, 0, NULL},
};

static int threadstate_exec(PyObject *module) {
    if (!key_ready) {
        if (pthread_key_create(&kept_key, end_thread_state) != 0) {
            PyErr_SetString(PyExc_OSError, "pthread_key_create failed");
            return -1;
        }
        key_ready = 1;
    }
    /* `keep` for C: zarrfs/fuse/_fast_read.c calls it on the threads it brings into Python itself. */
    PyObject *capsule = PyCapsule_New((void *)keep_current, "zarrfs.fuse._threadstate.keep_c", NULL);
    if (capsule == NULL || PyModule_AddObject(module, "keep_c", capsule) < 0) {
        Py_XDECREF(capsule);
        return -1;
    }
    return 0;
}

ZARRFS_MODULE_SLOTS(threadstate_slots, {Py_mod_exec, (void *)threadstate_exec},);

static struct PyModuleDef threadstate_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "zarrfs.fuse._threadstate",
    .m_doc = "Python thread states that live as long as libfuse's worker threads.",
    .m_methods = threadstate_methods,
    .m_slots = threadstate_slots,
};

PyMODINIT_FUNC PyInit__threadstate(void) {
    return PyModuleDef_Init(&threadstate_module);
}
