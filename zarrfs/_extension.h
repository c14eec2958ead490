/* What zarrfs's C extensions share: their module slots (multi-phase initialisation, PEP 489), and
 * the mark of a parameter a function's signature needs but its body does not.
 *
 * What each module supports beyond the one interpreter with a GIL:
 * - Free-threaded Python (3.13t, PEP 703): none of them needs the GIL. Their
 *   state is either guarded by their own mutexes (`_cached_reads`, `_fast_read`),
 *   set once at import (`_threadstate`'s pthread key), or none (`_gather` copies
 *   between buffers its caller exported). Without `Py_mod_gil` a free-threaded
 *   interpreter would turn the GIL back on for the whole process at import.
 * - Subinterpreters: not supported. `CachedReads` is a static type, and
 *   `_fast_read` and `_threadstate` keep process-wide state (one libfuse read
 *   callback, one pthread key), which a second interpreter would share
 *   (`_gather` alone could, but is never imported without the others).
 * Both slots are only declared where the Python building the module knows them.
 */
#ifndef ZARRFS_EXTENSION_H
#define ZARRFS_EXTENSION_H

#ifdef Py_mod_multiple_interpreters
#define ZARRFS_SLOT_INTERPRETERS {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#else
#define ZARRFS_SLOT_INTERPRETERS
#endif
#ifdef Py_mod_gil
#define ZARRFS_SLOT_GIL {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#else
#define ZARRFS_SLOT_GIL
#endif

/* A module's slots: the module's own (each followed by a comma: `{Py_mod_exec, f},`, or none), then
 * the ones above. */
#define ZARRFS_MODULE_SLOTS(name, ...) \
    static PyModuleDef_Slot name[] = {__VA_ARGS__ ZARRFS_SLOT_INTERPRETERS ZARRFS_SLOT_GIL {0, NULL}}

/* A parameter the signature needs (a method's `self` or its absent arguments). */
#define UNUSED __attribute__((unused))

/* The C contract between the two halves of the C path, declared here alone.
 *
 * What `zarrfs/fuse/_fast_read.c` calls, from the capsule `_cached_reads.c`'s `serve_capsule()`
 * returns (named "zarrfs.engine._cached_reads.serve"). */
typedef struct {
    long (*serve)(void *table, uint64_t fh, char *out, size_t size, int64_t offset, int *missed);
    long (*serve_loaded)(void *table, uint64_t fh, char *out, size_t size, int64_t offset, int64_t until,
                         int64_t began_ns);
    void *table;
} ServeEntry;

/* The loader's outcomes (zarrfs/fuse/ops.py `load_for_c`, which reads them from `_fast_read`'s
 * module constants); an errno is returned negated. */
enum { LOADED = 0, WRITTEN = 1 };

#endif
