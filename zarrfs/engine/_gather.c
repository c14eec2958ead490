/* Copies into FUSE replies, without handing the GIL around.
 *
 * A 1 MiB read of a chunked array is a dozen or more pieces copied into the
 * reply. numpy's copies and os.preadv release the GIL for each piece, and on
 * 2 vCPUs the FUSE threads then pass the GIL back and forth at every piece,
 * which costs more than the copy. These functions copy a whole strided block
 * in one call and keep the GIL while the copy cannot sleep: a memory copy,
 * or a preadv2 with RWF_NOWAIT (page cache only). A preadv2 that may wait for
 * the disk releases it.
 *
 * Blocks are any buffers with strides (numpy views). The innermost axes that
 * are contiguous in both source and destination form one run; the outer axes
 * are walked in C order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/uio.h>

#include "../_extension.h"

#define MAX_DIMS 64
#define LONG_COPY_BYTES (8 << 20)

/* Number of innermost bytes contiguous in every view, and the last outer axis
 * (-1 when the whole block is one run). Axes of extent 1 never break a run. */
static Py_ssize_t contiguous_run(const Py_buffer *a, const Py_buffer *b, int *outer_last) {
    Py_ssize_t run = a->itemsize;
    int axis = a->ndim - 1;
    for (; axis >= 0; axis--) {
        if (a->shape[axis] == 1)
            continue;
        if (a->strides[axis] != run || (b != NULL && b->strides[axis] != run))
            break;
        run *= a->shape[axis];
    }
    *outer_last = axis;
    return run;
}

static Py_ssize_t outer_count(const Py_buffer *view, int outer_last) {
    Py_ssize_t count = 1;
    for (int axis = 0; axis <= outer_last; axis++)
        count *= view->shape[axis];
    return count;
}

static Py_ssize_t offset_of(const Py_buffer *view, const Py_ssize_t *index, int outer_last) {
    Py_ssize_t offset = 0;
    for (int axis = 0; axis <= outer_last; axis++)
        offset += index[axis] * view->strides[axis];
    return offset;
}

static void advance(const Py_buffer *view, Py_ssize_t *index, int outer_last) {
    for (int axis = outer_last; axis >= 0; axis--) {
        if (++index[axis] < view->shape[axis])
            return;
        index[axis] = 0;
    }
}

/* Without PyBUF_FORMAT: numpy refuses to describe some element types (datetime64)
 * in a format string. Callers pass blocks of one dtype; only sizes are checked. */
static int get_view(PyObject *obj, Py_buffer *view, int writable) {
    int flags = PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->ndim > MAX_DIMS) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "more than %d dimensions", MAX_DIMS);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(copy_into_doc,
"copy_into(dst, src)\n\n"
"Copy the block `src` into the writable block `dst` of the same shape and\n"
"element size, holding the GIL unless it is longer than 8 MiB. The bytes are\n"
"copied as they are: pass blocks of one dtype.");

static PyObject *copy_into(UNUSED PyObject *module, PyObject *args) {
    PyObject *dst_obj, *src_obj;
    if (!PyArg_ParseTuple(args, "OO:copy_into", &dst_obj, &src_obj))
        return NULL;
    Py_buffer dst, src;
    if (get_view(dst_obj, &dst, 1) < 0)
        return NULL;
    if (get_view(src_obj, &src, 0) < 0) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    int same = dst.ndim == src.ndim && dst.itemsize == src.itemsize;
    for (int axis = 0; same && axis < dst.ndim; axis++)
        same = dst.shape[axis] == src.shape[axis];
    if (!same) {
        PyBuffer_Release(&dst);
        PyBuffer_Release(&src);
        PyErr_SetString(PyExc_ValueError, "copy_into: blocks differ in shape or element size");
        return NULL;
    }
    if (dst.len > 0) {
        int outer_last;
        Py_ssize_t run = contiguous_run(&dst, &src, &outer_last);
        Py_ssize_t runs = outer_count(&dst, outer_last);
        Py_ssize_t index[MAX_DIMS] = {0};
        /* FUSE requests are at most 1 MiB; a caller copying more (a whole
         * array, say) must not stall every other thread for that long. */
        PyThreadState *released = dst.len > LONG_COPY_BYTES ? PyEval_SaveThread() : NULL;
        for (Py_ssize_t i = 0; i < runs; i++) {
            memmove((char *)dst.buf + offset_of(&dst, index, outer_last),
                    (const char *)src.buf + offset_of(&src, index, outer_last), run);
            advance(&dst, index, outer_last);
        }
        if (released != NULL)
            PyEval_RestoreThread(released);
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(preadv_into_doc,
"preadv_into(fd, dst, offset, flags) -> int\n\n"
"Read consecutive bytes of file `fd` from `offset` into the writable block\n"
"`dst` (C order), with preadv2 and `flags`. Returns the bytes read, fewer at\n"
"the end of the file or, with RWF_NOWAIT, where the page cache ran out.\n"
"Raises OSError as os.preadv does (BlockingIOError when RWF_NOWAIT found\n"
"nothing cached). Holds the GIL only with RWF_NOWAIT.");

static PyObject *preadv_into(UNUSED PyObject *module, PyObject *args) {
    int fd, flags;
    PyObject *dst_obj;
    long long offset;
    if (!PyArg_ParseTuple(args, "iOLi:preadv_into", &fd, &dst_obj, &offset, &flags))
        return NULL;
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "preadv_into: negative offset");
        return NULL;
    }
    Py_buffer dst;
    if (get_view(dst_obj, &dst, 1) < 0)
        return NULL;
    int outer_last;
    Py_ssize_t run = contiguous_run(&dst, NULL, &outer_last);
    Py_ssize_t runs = dst.len > 0 ? outer_count(&dst, outer_last) : 0;
    Py_ssize_t index[MAX_DIMS] = {0};
    struct iovec iov[IOV_MAX];
    Py_ssize_t queued = 0, total = 0;
    int error = 0;
    while (queued < runs) {
        int count = 0;
        Py_ssize_t want = 0;
        for (; count < IOV_MAX && queued < runs; count++, queued++) {
            iov[count].iov_base = (char *)dst.buf + offset_of(&dst, index, outer_last);
            iov[count].iov_len = run;
            want += run;
            advance(&dst, index, outer_last);
        }
        ssize_t got;
        do {
            if (flags & RWF_NOWAIT) {
                got = preadv2(fd, iov, count, offset + total, flags);
            } else {
                Py_BEGIN_ALLOW_THREADS
                got = preadv2(fd, iov, count, offset + total, flags);
                Py_END_ALLOW_THREADS
            }
        } while (got < 0 && errno == EINTR);
        if (got < 0) {
            error = errno;
            break;
        }
        total += got;
        if (got < want)
            break;
    }
    PyBuffer_Release(&dst);
    if (error) {
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(total);
}

static PyMethodDef gather_methods[] = {
    {"copy_into", copy_into, METH_VARARGS, copy_into_doc},
    {"preadv_into", preadv_into, METH_VARARGS, preadv_into_doc},
    {NULL, NULL, 0, NULL},
};

ZARRFS_MODULE_SLOTS(gather_slots, );

static struct PyModuleDef gather_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "zarrfs.engine._gather",
    .m_doc = "Strided copies into FUSE replies that keep the GIL while they cannot sleep.",
    .m_methods = gather_methods,
    .m_slots = gather_slots,
};

PyMODINIT_FUNC PyInit__gather(void) {
    return PyModuleDef_Init(&gather_module);
}
