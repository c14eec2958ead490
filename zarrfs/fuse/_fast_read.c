/* libfuse's read callback: the engine's C path first, Python once on a miss, Python's path last.
 *
 * `install` returns the address of `fast_read`, which `ReplyBufferFUSE`
 * puts in place of the read callback mfusepy made. Each read goes to the
 * engine's `serve` (zarrfs/engine/_cached_reads.c: a read of cached chunks or
 * uncompressed chunk files, random or within a stream's allowed stretch).
 * A read `serve` misses only because chunks are not cached yet (or the
 * stream ran past its stretch) goes to the front's loader (`load_for_c` in
 * zarrfs/fuse/ops.py), with the GIL, once: it has the open file track the read
 * and load what it lacks, and answers
 *   (LOADED, until): C copies the read now (`serve_loaded`), the stream's stretch ends at `until`;
 *   (WRITTEN, 0): it wrote the read's bytes itself (a chunk C does not hold: fill values, raw files);
 *   (-errno, 0): the read fails with that errno (the front logged why).
 * If the copy still finds a chunk missing (evicted meanwhile), the loader is
 * asked once more, to write the bytes itself. Everything else, and a loader
 * that raises, goes on to mfusepy's callback, the Python path, unchanged. So
 * a read is answered the same way on every path; only its cost differs.
 *
 * One mount at a time per process: `install` refuses a second while the
 * first is installed (the daemon mounts once; a second mount in the same
 * process would keep the Python path), and `uninstall` ends it once
 * libfuse's loop has returned and can call nothing more.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "../_extension.h"

typedef int (*read_callback)(const char *path, char *buf, size_t size, off_t offset, void *fi);

/* `load_then_serve`'s answer when the read goes on to mfusepy's callback. */
#define TO_PYTHON_PATH LONG_MIN

/* Set by `install` before libfuse has the callback and cleared by `uninstall` after it let go of
 * it; the mutex orders two `install`s (free-threaded Python runs them side by side). */
static pthread_mutex_t installing = PTHREAD_MUTEX_INITIALIZER;
static ServeEntry *entry;
static PyObject *kept; /* the capsule, alive while libfuse may call fast_read */
static PyObject *loader; /* the front's `load_for_c` */
static int (*keep_thread_state)(void); /* zarrfs/fuse/_threadstate.c, for libfuse's threads */
static read_callback python_read;
static size_t fh_offset; /* of `fh` in struct fuse_file_info, as mfusepy lays it out */

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* One call of the loader, with the GIL taken for it alone: its outcome, `*until` set for LOADED,
 * or TO_PYTHON_PATH if it raised or answered something else. */
static long ask_loader(const char *path, uint64_t fh, char *buf, size_t size, int64_t offset, int write,
                       int64_t *until) {
    long long outcome = TO_PYTHON_PATH, stretch = 0;
    PyGILState_STATE gil = PyGILState_Ensure();
    if (keep_thread_state() < 0) /* not a libfuse thread: its state is made and ended per call, as ctypes does */
        PyErr_Clear();
    PyObject *out = PyMemoryView_FromMemory(buf, (Py_ssize_t)size, PyBUF_WRITE);
    PyObject *name = path != NULL ? PyUnicode_DecodeFSDefault(path) : Py_NewRef(Py_None);
    PyObject *result = out == NULL || name == NULL ? NULL :
        PyObject_CallFunction(loader, "KOLOi", (unsigned long long)fh, name, (long long)offset, out, write);
    if (result == NULL || !PyArg_ParseTuple(result, "LL", &outcome, &stretch)
            || !(outcome == LOADED || outcome == WRITTEN || (outcome < 0 && outcome >= -4095))) {
        if (PyErr_Occurred())
            PyErr_WriteUnraisable(loader);
        outcome = TO_PYTHON_PATH;
    }
    Py_XDECREF(result);
    if (out != NULL) { /* libfuse reuses `buf`: nothing may write to it through this view after the call */
        PyObject *released = PyObject_CallMethod(out, "release", NULL);
        if (released == NULL)
            PyErr_WriteUnraisable(out);
        Py_XDECREF(released);
    }
    Py_XDECREF(out);
    Py_XDECREF(name);
    PyGILState_Release(gil);
    *until = stretch;
    return (long)outcome;
}

/* A miss: the loader loads what the read lacks, then the engine copies it with no GIL held (see
 * the top); TO_PYTHON_PATH if the loader could not answer. */
static long load_then_serve(const char *path, uint64_t fh, char *buf, size_t size, int64_t offset) {
    int64_t began = now_ns(), until = 0;
    long outcome = ask_loader(path, fh, buf, size, offset, 0, &until);
    if (outcome == LOADED) {
        long answer = entry->serve_loaded(entry->table, fh, buf, size, offset, until, began);
        if (answer >= 0)
            return answer;
        /* a chunk left the cache meanwhile, or C does not hold it: the loader writes the bytes */
        outcome = ask_loader(path, fh, buf, size, offset, 1, &until);
    }
    if (outcome == WRITTEN)
        return (long)size;
    return outcome < 0 ? outcome : TO_PYTHON_PATH;
}

static int fast_read(const char *path, char *buf, size_t size, off_t offset, void *fi) {
    if (fi != NULL) {
        uint64_t fh;
        memcpy(&fh, (const char *)fi + fh_offset, sizeof fh);
        int missed = 0;
        long served = entry->serve(entry->table, fh, buf, size, (int64_t)offset, &missed);
        if (served >= 0)
            return (int)served;
        if (missed) {
            served = load_then_serve(path, fh, buf, size, (int64_t)offset);
            if (served != TO_PYTHON_PATH)
                return (int)served;
        }
    }
    return python_read(path, buf, size, offset, fi);
}

PyDoc_STRVAR(install_doc,
"install(capsule, python_read_address, fh_offset, load_for_c) -> int\n--\n\n"
"The address of a read callback that asks the engine's `serve` (from\n"
"`CachedReads.serve_capsule()`) first, `load_for_c(fh, path, offset, out, write)`\n"
"once on a miss, and the callback at `python_read_address` for everything\n"
"else. `fh_offset` is the byte offset of `fh` in libfuse's struct\n"
"fuse_file_info. Once per process.");

static PyObject *install(UNUSED PyObject *module, PyObject *args) {
    PyObject *capsule, *load;
    unsigned long long python_address;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "OKnO:install", &capsule, &python_address, &offset, &load))
        return NULL;
    ServeEntry *found = PyCapsule_GetPointer(capsule, "zarrfs.engine._cached_reads.serve");
    if (found == NULL)
        return NULL;
    if (python_address == 0 || offset < 0 || !PyCallable_Check(load)) {
        PyErr_SetString(PyExc_ValueError, "install: a callback address, the offset of fh and a loader");
        return NULL;
    }
    PyObject *threadstate = PyImport_ImportModule("zarrfs.fuse._threadstate");
    if (threadstate == NULL)
        return NULL;
    Py_DECREF(threadstate); /* imported: PyCapsule_Import walks attributes from `zarrfs` on */
    int (*keep)(void) = PyCapsule_Import("zarrfs.fuse._threadstate.keep_c", 0);
    if (keep == NULL)
        return NULL;
    pthread_mutex_lock(&installing);
    int taken = kept != NULL;
    if (!taken) {
        Py_INCREF(capsule);
        kept = capsule;
        Py_INCREF(load);
        loader = load;
        keep_thread_state = keep;
        entry = found;
        python_read = (read_callback)(uintptr_t)python_address;
        fh_offset = (size_t)offset;
    }
    pthread_mutex_unlock(&installing);
    if (taken) {
        PyErr_SetString(PyExc_RuntimeError, "the fast read path is installed already (one mount per process)");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)fast_read);
}

PyDoc_STRVAR(uninstall_doc,
"uninstall()\n--\n\n"
"Let go of what `install` kept. Only once libfuse can no longer call the callback.");

static PyObject *uninstall(UNUSED PyObject *module, UNUSED PyObject *unused) {
    pthread_mutex_lock(&installing);
    PyObject *capsule = kept, *load = loader;
    kept = NULL;
    loader = NULL;
    entry = NULL;
    python_read = NULL;
    pthread_mutex_unlock(&installing);
    Py_XDECREF(capsule);
    Py_XDECREF(load);
    Py_RETURN_NONE;
}

static PyMethodDef fast_read_methods[] = {
    {"install", install, METH_VARARGS, install_doc},
    {"uninstall", uninstall, METH_NOARGS, uninstall_doc},
    {NULL, NULL, 0, NULL},
};

/* The loader's outcomes, for Python to answer with (fuse/ops.py): declared once, in _extension.h. */
static int fast_read_exec(PyObject *module) {
    if (PyModule_AddIntConstant(module, "LOADED", LOADED) < 0 || PyModule_AddIntConstant(module, "WRITTEN", WRITTEN) < 0)
        return -1;
    return 0;
}

ZARRFS_MODULE_SLOTS(fast_read_slots, {Py_mod_exec, (void *)fast_read_exec},);

static struct PyModuleDef fast_read_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "zarrfs.fuse._fast_read",
    .m_doc = "libfuse's read callback: the engine's C path first, Python once on a miss, Python's path last.",
    .m_methods = fast_read_methods,
    .m_slots = fast_read_slots,
};

PyMODINIT_FUNC PyInit__fast_read(void) {
    return PyModuleDef_Init(&fast_read_module);
}
