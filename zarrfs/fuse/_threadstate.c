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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>

static pthread_key_t kept_key;
static int key_ready;

static void end_thread_state(void *kept) {
    PyEval_RestoreThread((PyThreadState *)kept);
    PyThreadState_Clear((PyThreadState *)kept);
    PyThreadState_DeleteCurrent();
}

static PyObject *keep(PyObject *self, PyObject *unused) {
    if (!key_ready || pthread_getspecific(kept_key) != NULL)
        Py_RETURN_NONE;
    PyGILState_Ensure(); /* the GIL is held: this only counts one more reference */
    if (pthread_setspecific(kept_key, PyThreadState_Get()) != 0) {
        PyGILState_Release(PyGILState_LOCKED);
        Py_RETURN_NONE;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(keep_doc,
"keep()\n--\n\n"
"Keep the calling thread's Python thread state until the thread exits.\n"
"Only for threads Python did not start (libfuse's workers) and the main\n"
"thread: a thread that `threading` started deletes its own thread state\n"
"as it ends, before the destructor here would.");

static PyMethodDef threadstate_methods[] = {
    {"keep", keep, METH_NOARGS, keep_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef threadstate_module = {
    PyModuleDef_HEAD_INIT, "zarrfs.fuse._threadstate",
    "Python thread states that live as long as libfuse's worker threads.", -1, threadstate_methods,
};

PyMODINIT_FUNC PyInit__threadstate(void) {
    if (!key_ready) {
        if (pthread_key_create(&kept_key, end_thread_state) != 0) {
            PyErr_SetString(PyExc_OSError, "pthread_key_create failed");
            return NULL;
        }
        key_ready = 1;
    }
    return PyModule_Create(&threadstate_module);
}
