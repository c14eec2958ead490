/* libfuse's read callback, answering first from cached chunks without Python.
 *
 * `install` returns the address of `fast_read`, which `ReplyBufferFUSE`
 * puts in place of the read callback mfusepy made. Each read goes to the
 * engine's `serve` (zarrfs/engine/_cached_reads.c: a read of cached chunks or
 * uncompressed chunk files, random or within a stream's allowed stretch); whatever it does not
 * answer goes on to mfusepy's callback, the Python path, unchanged. So a
 * read is answered the same way on either path; only its cost differs.
 *
 * One mount at a time per process: `install` refuses a second while the
 * first is installed (the daemon mounts once; a second mount in the same
 * process would keep the Python path), and `uninstall` ends it once
 * libfuse's loop has returned and can call nothing more.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "../_extension.h"

typedef struct {
    long (*serve)(void *table, uint64_t fh, char *out, size_t size, int64_t offset);
    void *table;
} ServeEntry;

typedef int (*read_callback)(const char *path, char *buf, size_t size, off_t offset, void *fi);

/* Set by `install` before libfuse has the callback and cleared by `uninstall` after it let go of
 * it; the mutex orders two `install`s (free-threaded Python runs them side by side). */
static pthread_mutex_t installing = PTHREAD_MUTEX_INITIALIZER;
static ServeEntry *entry;
static PyObject *kept; /* the capsule, alive while libfuse may call fast_read */
static read_callback python_read;
static size_t fh_offset; /* of `fh` in struct fuse_file_info, as mfusepy lays it out */

static int fast_read(const char *path, char *buf, size_t size, off_t offset, void *fi) {
    if (fi != NULL) {
        uint64_t fh;
        memcpy(&fh, (const char *)fi + fh_offset, sizeof fh);
        long served = entry->serve(entry->table, fh, buf, size, (int64_t)offset);
        if (served >= 0)
            return (int)served;
    }
    return python_read(path, buf, size, offset, fi);
}

PyDoc_STRVAR(install_doc,
"install(capsule, python_read_address, fh_offset) -> int\n--\n\n"
"The address of a read callback that asks the engine's `serve` (from\n"
"`CachedReads.serve_capsule()`) first and the callback at\n"
"`python_read_address` for everything else. `fh_offset` is the byte offset\n"
"of `fh` in libfuse's struct fuse_file_info. Once per process.");

static PyObject *install(UNUSED PyObject *module, PyObject *args) {
    PyObject *capsule;
    unsigned long long python_address;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "OKn:install", &capsule, &python_address, &offset))
        return NULL;
    ServeEntry *found = PyCapsule_GetPointer(capsule, "zarrfs.engine._cached_reads.serve");
    if (found == NULL)
        return NULL;
    if (python_address == 0 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "install: a callback address and the offset of fh");
        return NULL;
    }
    pthread_mutex_lock(&installing);
    int taken = kept != NULL;
    if (!taken) {
        Py_INCREF(capsule);
        kept = capsule;
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
    PyObject *capsule = kept;
    kept = NULL;
    entry = NULL;
    python_read = NULL;
    pthread_mutex_unlock(&installing);
    Py_XDECREF(capsule);
    Py_RETURN_NONE;
}

static PyMethodDef fast_read_methods[] = {
    {"install", install, METH_VARARGS, install_doc},
    {"uninstall", uninstall, METH_NOARGS, uninstall_doc},
    {NULL, NULL, 0, NULL},
};

ZARRFS_MODULE_SLOTS(fast_read_slots, );

static struct PyModuleDef fast_read_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "zarrfs.fuse._fast_read",
    .m_doc = "libfuse's read callback, answering first from cached chunks without Python.",
    .m_methods = fast_read_methods,
    .m_slots = fast_read_slots,
};

PyMODINIT_FUNC PyInit__fast_read(void) {
    return PyModuleDef_Init(&fast_read_module);
}
