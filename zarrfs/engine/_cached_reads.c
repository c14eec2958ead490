/* Reads served from cached chunks without Python.
 *
 * Answering a read in Python costs the ctypes callback, the FUSE operations,
 * the layout, the plan and the cache lookup: for a random 4 KiB pread a large
 * part of its latency, for a sequential stream's 1 MiB reads a noticeable
 * part of the daemon's CPU. Most reads lie in chunks the cache already
 * holds. `CachedReads` keeps, beside the
 * cache, what a read of such chunks needs: for each open file its layout and
 * its array's regular chunk grid, for each cached chunk a buffer onto its
 * elements. `serve` answers a read from those alone, with no GIL, or
 * answers -1, and the caller takes the ordinary path (`zarrfs/fuse/
 * _fast_read.c` hands libfuse's read requests to it first).
 *
 * The rules it keeps:
 * - It only reads memory it holds a buffer export of: a chunk is added with
 *   a reference and a buffer, and removed (both released) by the cache when
 *   the chunk leaves it, before its memory can be given to another decode.
 *   One mutex covers the tables. A read plans its pieces under it and pins
 *   their chunks, then copies (or reads chunk files) with the mutex let go, so
 *   the FUSE threads copy side by side (a 1 MiB reply is ~0.1 ms of copying)
 *   and none waits for another's disk; a chunk removed while pinned is
 *   released only when its last read is done (`wait_unpinned`).
 * - A read that continues the file's sequential stream (by the rule
 *   `Readahead.track` uses) is answered here only up to the offset Python
 *   last allowed (`allow_stream`): the point where readahead next has work
 *   (loading ahead, or handing on a band the stream has left). The read past
 *   it reaches Python, which does that work and allows the next stretch; so
 *   readahead sees its streams as it would if every read reached it, once per
 *   stretch instead of once per read. It sees every read of a file, so its
 *   view of where the file's reads run is exact; Python's stream state misses
 *   the random reads answered here, which only delays by one read the moment
 *   a stream that turns sequential is noticed.
 * - Anything unusual (a read outside the element region, a chunk not cached
 *   or not laid out as expected, too many pieces) is -1. Of those, a read that
 *   only lacks chunks (or runs past its stretch) is a *miss*: the caller may
 *   have Python load them (the front asks the open file once) and call
 *   `serve_loaded`, which sets the stretch Python returned and answers the read
 *   without checking the stream again, so that a cold read crosses into Python
 *   once and its bytes are still copied here.
 * - Uncompressed chunks of local arrays are not cached: their files hold the
 *   elements as the reply wants them (engine/direct.py). Python registers the
 *   files it has read that way (`add_file`, a bounded number); C keeps its
 *   own descriptor and reads the wanted rows with `preadv`, outside the lock,
 *   like any copy.
 * - An open file may have several element regions (a NetCDF file: one per variable, each an
 *   array's C-order bytes), each its own entry with its own stream; a read is answered only
 *   within one region. A region may ask for its elements byte-swapped (NetCDF is big-endian):
 *   the copy is swapped in place, and a read not made of whole elements takes the Python path.
 * - A region may instead be bytes held in memory (`open_bytes`): the head of a tiled TIFF, where
 *   all of its IFDs lie (formats/tiff_head.py), which a reader opening it reads in thousands of
 *   small reads. A read within it is a copy; it is no stream and never a miss.
 * - Chunks it served are marked touched; the cache gives a touched chunk a
 *   second chance before evicting it, as if the read had moved it to the
 *   end of its LRU order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../_extension.h"

#define MAX_DIMS 32
/* Pieces (a run of one row in one chunk) one read may copy; a read needing more takes the Python
 * path, where the copy costs more than Python anyway. */
#define MAX_PIECES_PER_READ 1024
#define LATENCY_BUCKETS 32
/* The largest read served here (FUSE reads are at most a few MiB): its size times 4 (the reach of
 * a stream, `continues_stream`) cannot overflow. */
#define MAX_READ_BYTES ((size_t)1 << 40)
/* The floor of a stream's reach (`stream_reach_of`): a read within max(4 x its size, this) of where
 * the file's last read ended continues its stream. Exported as the module's SEQUENTIAL_REACH. */
#define SEQUENTIAL_REACH (1 << 20)

/* Chunks come and go with every cache load and eviction, interleaved with the decoded chunks'
 * own megabyte blocks: allocated from Python's small-object allocator (`PyMem_Malloc`, always
 * with the GIL), not from the heap those blocks share, where small blocks left between them
 * would keep freed pages resident. */
/* An uncompressed chunk's file: its elements in C order, the array's dtype. */
typedef struct RawFile {
    int fd;
    int ndim;
    /* The file as opened: a read after which fstat tells otherwise read a file being written. */
    off_t size;
    struct timespec mtime;
    int64_t itemsize;
    int64_t shape[MAX_DIMS], strides[MAX_DIMS]; /* the stored chunk's, strides in bytes */
} RawFile;

typedef struct Chunk {
    struct Chunk *next;
    uint64_t token;
    int64_t index; /* flat, C order over the chunk grid */
    Py_buffer view; /* a decoded chunk: holds the array and its memory while the chunk is here */
    RawFile *file; /* or an uncompressed chunk's file (view unused) */
    int touched;
    int pins; /* reads copying from it now, outside the lock */
    int dead; /* removed while pinned: its remover waits for the last read (`wait_unpinned`) */
} Chunk;

/* A run of one row in a cached chunk, copied after the lock is let go (the chunk pinned). */
typedef struct {
    const char *from;
    char *to;
    int64_t bytes;
} MemoryPiece;

/* A run of one row in a chunk file, read after the lock is let go. */
typedef struct {
    RawFile *file;
    int64_t at; /* byte offset in the file */
    char *to;
    int64_t bytes;
} FilePiece;

typedef struct File {
    struct File *next;
    uint64_t fh;
    uint64_t token;
    int64_t region_start, region_bytes; /* the element region's bytes in the file */
    int64_t itemsize;
    int swap; /* byte-swap each element of this size in the reply (0: as stored) */
    int ndim;
    int64_t shape[MAX_DIMS], edges[MAX_DIMS], counts[MAX_DIMS];
    int64_t next_offset; /* -1 before the first read */
    int64_t stream_until; /* sequential reads ending here or before (in the region) need no Python */
    /* Or a region of bytes held in memory (`open_bytes`: a tiled TIFF's head of IFDs), copied from
     * `bytes` (buf NULL for an element region). `pins`: reads copying from it outside the lock. */
    Py_buffer bytes;
    int pins;
} File;

typedef struct Array {
    struct Array *next;
    uint64_t token;
} Array;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t unpinned; /* a removed chunk's last copy is done */
    Chunk **chunks;
    size_t chunk_buckets, chunk_count;
    File *files[64];
    /* Tokens of the arrays whose chunks may be added (`register_array`, until `remove_array`): a
     * chunk of an array already forgotten would stay pinned here, unreachable, until unmount. */
    struct Array *arrays[64];
    int64_t sequential_bytes; /* reads within max(4 x size, this) of the last one are sequential */
    /* Counters, under the lock. */
    uint64_t served, served_in_streams, served_after_loading, chunk_hits, latency[LATENCY_BUCKETS];
} CachedReads;

static size_t chunk_slot(const CachedReads *self, uint64_t token, int64_t index) {
    uint64_t h = token * 0x9E3779B97F4A7C15ULL ^ (uint64_t)index * 0xC2B2AE3D27D4EB4FULL;
    return (size_t)(h ^ (h >> 29)) & (self->chunk_buckets - 1);
}

static Chunk *find_chunk(const CachedReads *self, uint64_t token, int64_t index) {
    for (Chunk *c = self->chunks[chunk_slot(self, token, index)]; c != NULL; c = c->next)
        if (c->token == token && c->index == index)
            return c;
    return NULL;
}

/* The region of open file `fh` that holds byte `offset` of the file; else the first region after
 * it (where a read of a header is heading), else any: the region whose stream the read belongs to.
 * (A file of one region, every `.raw`, has all its reads in that region's stream.) */
static File *find_file(const CachedReads *self, uint64_t fh, int64_t offset) {
    File *after = NULL, *any = NULL;
    for (File *f = self->files[fh & 63]; f != NULL; f = f->next) {
        if (f->fh != fh)
            continue;
        if (offset >= f->region_start && offset - f->region_start < f->region_bytes)
            return f;
        if (f->region_start > offset && (after == NULL || f->region_start < after->region_start))
            after = f;
        any = f;
    }
    return after != NULL ? after : any;
}

static int grow_chunks(CachedReads *self) {
    size_t buckets = self->chunk_buckets * 2;
    Chunk **table = PyMem_RawCalloc(buckets, sizeof(Chunk *));
    if (table == NULL)
        return -1;
    Chunk **old = self->chunks;
    size_t old_buckets = self->chunk_buckets;
    self->chunks = table;
    self->chunk_buckets = buckets;
    for (size_t i = 0; i < old_buckets; i++) {
        for (Chunk *c = old[i], *next; c != NULL; c = next) {
            next = c->next;
            size_t slot = chunk_slot(self, c->token, c->index);
            c->next = table[slot];
            table[slot] = c;
        }
    }
    PyMem_RawFree(old);
    return 0;
}

/* Unlink a chunk (the caller frees it, outside the lock), or NULL. */
static Chunk *unlink_chunk(CachedReads *self, uint64_t token, int64_t index) {
    Chunk **link = &self->chunks[chunk_slot(self, token, index)];
    for (; *link != NULL; link = &(*link)->next) {
        Chunk *c = *link;
        if (c->token == token && c->index == index) {
            *link = c->next;
            self->chunk_count--;
            return c;
        }
    }
    return NULL;
}

/* Wait until no read uses an unlinked chunk (none can start: it is not in the table). The
 * GIL is let go before the mutex is taken: a thread holding the GIL may be waiting for the mutex. */
static void wait_unpinned(CachedReads *self, Chunk *chunk) {
    pthread_mutex_lock(&self->lock);
    int pinned = chunk->pins > 0;
    pthread_mutex_unlock(&self->lock);
    if (!pinned)
        return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    chunk->dead = 1;
    while (chunk->pins > 0)
        pthread_cond_wait(&self->unpinned, &self->lock);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
}

/* Release what a chunk held (with the GIL), after it was unlinked. */
static void free_chunk(CachedReads *self, Chunk *chunk) {
    if (chunk == NULL)
        return;
    wait_unpinned(self, chunk);
    if (chunk->file != NULL) {
        close(chunk->file->fd);
        PyMem_RawFree(chunk->file);
    } else {
        PyBuffer_Release(&chunk->view);
    }
    PyMem_Free(chunk);
}

/* Unlink the file `fh` (the caller frees it), or NULL. */
/* The region of `fh` that begins at `region_start` (any of its regions for -1), taken out. */
static File *unlink_file(CachedReads *self, uint64_t fh, int64_t region_start) {
    for (File **link = &self->files[fh & 63]; *link != NULL; link = &(*link)->next) {
        File *f = *link;
        if (f->fh == fh && (region_start < 0 || f->region_start == region_start)) {
            *link = f->next;
            return f;
        }
    }
    return NULL;
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int bit_length(uint64_t v) {
    return v == 0 ? 0 : 64 - __builtin_clzll(v);
}

/* The sequential-stream rule, the one both paths go by (engine/served.py calls the module
 * functions below, `Readahead.track` through them): a read of `size` bytes continues a stream
 * whose last read ended at `last_end` (-1: none) when it starts within max(4 x size, `floor`) of
 * it. Total over sizes from 0 and offsets from 0: the reach saturates, the distance is unsigned. */
static int64_t stream_reach_of(int64_t size, int64_t floor) {
    if (size > INT64_MAX / 4)
        return INT64_MAX;
    return 4 * size > floor ? 4 * size : floor;
}

static int stream_continues(int64_t last_end, int64_t start, int64_t size, int64_t floor) {
    if (last_end < 0)
        return 0;
    uint64_t distance = start >= last_end ? (uint64_t)start - (uint64_t)last_end
                                          : (uint64_t)last_end - (uint64_t)start;
    return distance <= (uint64_t)stream_reach_of(size, floor);
}

/* Whether a read of [offset, offset + size) continues the file's reads (and note it), by the rule
 * above with this table's floor. */
static int continues_stream(const CachedReads *self, File *f, int64_t offset, int64_t size) {
    int64_t stop = offset + size; /* `serve` checked that it holds, and that 4 x size does */
    int sequential = stream_continues(f->next_offset, offset, size, self->sequential_bytes);
    f->next_offset = sequential && f->next_offset > stop ? f->next_offset : stop;
    return sequential;
}

/* preadv [at, at + bytes) of `fd` into `count` buffers; 0 if it all came. */
static int read_run(int fd, const struct iovec *iov, int count, int64_t at, int64_t bytes) {
    ssize_t got;
    do
        got = preadv(fd, iov, count, at);
    while (got < 0 && errno == EINTR);
    return got == bytes ? 0 : -1;
}

/* Whether `file` is as it was when C opened it (size, mtime): checked after reading it, so that a
 * write under the read makes the read Python's, which checks the chunk's version. */
static int file_unchanged(const RawFile *file) {
    struct stat now;
    return fstat(file->fd, &now) == 0 && now.st_size == file->size && now.st_mtim.tv_sec == file->mtime.tv_sec
           && now.st_mtim.tv_nsec == file->mtime.tv_nsec;
}

/* Read the pieces, one preadv per run of adjacent bytes of one file (the rows of a block of a
 * chunk are adjacent in its file); -1 if any came short (a file cut or failing: Python redoes it). */
static int read_file_pieces(const FilePiece *pieces, int n) {
    struct iovec iov[MAX_PIECES_PER_READ];
    char taken[MAX_PIECES_PER_READ] = {0};
    for (int i = 0; i < n; i++) {
        if (taken[i])
            continue;
        RawFile *file = pieces[i].file;
        int count = 0;
        int64_t start = pieces[i].at, end = pieces[i].at;
        for (int j = i; j < n; j++) {
            if (taken[j] || pieces[j].file != file)
                continue;
            if (count > 0 && (pieces[j].at != end || count == IOV_MAX)) {
                if (read_run(file->fd, iov, count, start, end - start) < 0)
                    return -1;
                count = 0;
                start = pieces[j].at;
            }
            iov[count].iov_base = pieces[j].to;
            iov[count].iov_len = (size_t)pieces[j].bytes;
            count++;
            end = pieces[j].at + pieces[j].bytes;
            taken[j] = 1;
        }
        if (count > 0 && read_run(file->fd, iov, count, start, end - start) < 0)
            return -1;
        if (!file_unchanged(file))
            return -1;
    }
    return 0;
}

/* Under the lock: the read is done with these chunks (one entry per piece); wake the remover of
 * any removed meanwhile. */
static void unpin_chunks(CachedReads *self, Chunk *const *chunks, int n) {
    int woken = 0;
    for (int i = 0; i < n; i++) {
        Chunk *chunk = chunks[i];
        if (--chunk->pins == 0 && chunk->dead && !woken) {
            pthread_cond_broadcast(&self->unpinned);
            woken = 1;
        }
    }
}

/* Copy [offset, offset + size) of file `fh` into `out` if every byte comes from cached chunks;
 * the bytes copied, or -1 (`out` may then hold some of them: the Python path writes it all).
 * `*missed` is set when the -1 is a miss Python can mend by loading (see the top of this file).
 *
 * Bytes, not elements: the element region is the array's C-order bytes and a chunk holds its
 * elements in the same dtype and byte order, contiguous along the last axis, so a run of one
 * row inside one chunk is a run of the chunk's bytes, whatever the read's alignment. */
static long answer_read(CachedReads *self, uint64_t fh, char *out, size_t size, int64_t offset, int64_t until,
                        int64_t began, int *missed);

/* Reverse the bytes of each `itemsize`-byte element of `data` (`bytes` a multiple of it). */
#define SWAP_EACH(type, bswap)                      \
    for (int64_t i = 0; i < bytes; i += (int64_t)sizeof(type)) { \
        type v;                                     \
        memcpy(&v, data + i, sizeof v);             \
        v = bswap(v);                               \
        memcpy(data + i, &v, sizeof v);             \
    }
static void swap_elements(char *data, int64_t bytes, int itemsize) {
    if (itemsize == 2)
        SWAP_EACH(uint16_t, __builtin_bswap16)
    else if (itemsize == 4)
        SWAP_EACH(uint32_t, __builtin_bswap32)
    else if (itemsize == 8)
        SWAP_EACH(uint64_t, __builtin_bswap64)
}
#undef SWAP_EACH

static long serve(void *table, uint64_t fh, char *out, size_t size, int64_t offset, int *missed) {
    return answer_read(table, fh, out, size, offset, -1, now_ns(), missed);
}

/* `serve` once Python has loaded what a miss lacked: the file's stretch becomes `until` and the
 * read is answered whether or not it continues the stream (`serve` counted it already); -1 if a
 * chunk is still not here (a fill-value chunk, or one evicted since). `began_ns` (CLOCK_MONOTONIC)
 * is when the read arrived, for its latency. */
static long serve_loaded(void *table, uint64_t fh, char *out, size_t size, int64_t offset, int64_t until,
                         int64_t began_ns) {
    int missed;
    return answer_read(table, fh, out, size, offset, until < 0 ? 0 : until, began_ns, &missed);
}

/* The body of both: `until` < 0 for a read arriving (`serve`), else the stretch Python allowed
 * after loading for it (`serve_loaded`). */
static long answer_read(CachedReads *self, uint64_t fh, char *out, size_t size, int64_t offset, int64_t until,
                        int64_t began, int *missed) {
    long answer = -1;
    Chunk *used[MAX_PIECES_PER_READ];
    FilePiece from_files[MAX_PIECES_PER_READ];
    MemoryPiece from_memory[MAX_PIECES_PER_READ];
    int pieces = 0, file_pieces = 0, memory_pieces = 0, in_stream = 0, loaded = until >= 0, swap = 0;
    File *held = NULL; /* a bytes region the read copies from, pinned */
    *missed = 0;
    /* Every sum below stays within int64 only for offsets and sizes whose bytes an int64 can
     * address: anything else is not served here. */
    if (offset < 0 || size == 0 || size > MAX_READ_BYTES || offset > INT64_MAX - (int64_t)size)
        return -1;
    pthread_mutex_lock(&self->lock);
    File *f = find_file(self, fh, offset);
    if (f == NULL)
        goto done;
    int64_t start = offset - f->region_start, stop = start + (int64_t)size;
    if (f->bytes.buf != NULL) { /* copied after the lock is let go, like chunks */
        if (start >= 0 && stop <= f->region_bytes) {
            held = f;
            held->pins++;
        }
        goto done;
    }
    swap = f->swap;
    if (swap > 1 && (start % swap != 0 || (int64_t)size % swap != 0)) /* part of an element: Python's */
        goto done;
    if (loaded)
        f->stream_until = until;
    else
        in_stream = continues_stream(self, f, offset, (int64_t)size);
    if (start < 0 || stop > f->region_bytes)
        goto done;
    if (in_stream && stop > f->stream_until) {
        *missed = 1;
        goto done;
    }
    int last = f->ndim - 1;
    int64_t item = f->itemsize, row_bytes = f->shape[last] * item, edge_bytes = f->edges[last] * item;
    char *to = out;
    for (int64_t at = start; at < stop;) {
        int64_t row = at / row_bytes, from = at % row_bytes;
        int64_t until_byte = stop - at < row_bytes - from ? from + (stop - at) : row_bytes; /* bytes of this row */
        int64_t within[MAX_DIMS], lead = 0, place = 1;
        for (int axis = last - 1; axis >= 0; axis--) {
            int64_t index = row % f->shape[axis];
            row /= f->shape[axis];
            within[axis] = index % f->edges[axis];
            lead += index / f->edges[axis] * place;
            place *= f->counts[axis];
        }
        if (row != 0) /* past the array's last row */
            goto done;
        for (int64_t b = from; b < until_byte;) {
            int64_t c = b / edge_bytes, chunk_start = c * edge_bytes;
            int64_t piece_end = until_byte < chunk_start + edge_bytes ? until_byte : chunk_start + edge_bytes;
            if (pieces == MAX_PIECES_PER_READ)
                goto done;
            Chunk *chunk = find_chunk(self, f->token, lead * f->counts[last] + c);
            if (chunk == NULL) {
                *missed = 1;
                goto done;
            }
            int64_t at_chunk = b - chunk_start;
            RawFile *file = chunk->file;
            if (file != NULL) { /* read after the lock is let go (`read_file_pieces`) */
                if (file->ndim != f->ndim || file->itemsize != item || piece_end - chunk_start > file->shape[last] * item)
                    goto done;
                for (int axis = 0; axis < last; axis++) {
                    if (within[axis] >= file->shape[axis])
                        goto done;
                    at_chunk += within[axis] * file->strides[axis];
                }
                from_files[file_pieces++] = (FilePiece){file, at_chunk, to, piece_end - b};
            } else {
                const Py_buffer *v = &chunk->view;
                if (v->ndim != f->ndim || v->itemsize != item || piece_end - chunk_start > v->shape[last] * item
                        || (v->strides[last] != item && v->shape[last] > 1))
                    goto done;
                for (int axis = 0; axis < last; axis++) {
                    if (within[axis] >= v->shape[axis])
                        goto done;
                    at_chunk += within[axis] * v->strides[axis];
                }
                from_memory[memory_pieces++] = (MemoryPiece){(const char *)v->buf + at_chunk, to, piece_end - b};
            }
            chunk->pins++;
            used[pieces++] = chunk;
            to += piece_end - b;
            b = piece_end;
        }
        at = (at / row_bytes) * row_bytes + until_byte;
    }
    for (int i = 0; i < pieces; i++)
        used[i]->touched = 1;
    answer = (long)size;
done:
    if (held != NULL) {
        pthread_mutex_unlock(&self->lock);
        memcpy(out, (const char *)held->bytes.buf + (offset - held->region_start), size);
        pthread_mutex_lock(&self->lock);
        if (--held->pins == 0)
            pthread_cond_broadcast(&self->unpinned);
        answer = (long)size;
    }
    if (pieces > 0) { /* copies and chunk files' reads with the lock let go */
        pthread_mutex_unlock(&self->lock);
        if (answer >= 0) {
            for (int i = 0; i < memory_pieces; i++)
                memcpy(from_memory[i].to, from_memory[i].from, (size_t)from_memory[i].bytes);
            if (read_file_pieces(from_files, file_pieces) < 0)
                answer = -1;
            else if (swap > 1)
                swap_elements(out, (int64_t)size, swap);
        }
        pthread_mutex_lock(&self->lock);
        unpin_chunks(self, used, pieces);
    }
    if (answer >= 0) {
        self->chunk_hits += (uint64_t)pieces;
        self->served++;
        self->served_in_streams += (uint64_t)in_stream;
        self->served_after_loading += (uint64_t)loaded;
        int64_t micros = (now_ns() - began) / 1000;
        int bucket = bit_length((uint64_t)(micros > 0 ? micros : 0));
        self->latency[bucket < LATENCY_BUCKETS ? bucket : LATENCY_BUCKETS - 1]++;
    }
    pthread_mutex_unlock(&self->lock);
    return answer;
}

/* ------------------------------------------------------------------ Python */

static int parse_key(PyObject *args, unsigned long long *token, long long *index) {
    return PyArg_ParseTuple(args, "KL", token, index);
}

static int read_dims(PyObject *seq, int64_t *into, int ndim, const char *what) {
    PyObject *items = PySequence_Fast(seq, what);
    if (items == NULL)
        return -1;
    int ok = PySequence_Fast_GET_SIZE(items) == ndim;
    for (int i = 0; ok && i < ndim; i++) {
        into[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(items, i));
        ok = into[i] > 0;
    }
    Py_DECREF(items);
    if (!ok && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "%s must be %d positive ints", what, ndim);
    return ok ? 0 : -1;
}

/* `itemsize` times the product of `dims` in `*bytes`; -1 (ValueError) if that overflows int64. */
static int byte_count(const int64_t *dims, int ndim, int64_t itemsize, int64_t *bytes, const char *what) {
    int64_t n = itemsize;
    for (int axis = 0; axis < ndim; axis++) {
        if (__builtin_mul_overflow(n, dims[axis], &n)) {
            PyErr_Format(PyExc_ValueError, "%s: the byte count overflows 64 bits", what);
            return -1;
        }
    }
    *bytes = n;
    return 0;
}

static Array *find_array(const CachedReads *self, uint64_t token) {
    for (Array *a = self->arrays[token & 63]; a != NULL; a = a->next)
        if (a->token == token)
            return a;
    return NULL;
}

static PyObject *link_chunk(CachedReads *self, Chunk *chunk);

static PyObject *add_chunk(CachedReads *self, PyObject *args) {
    unsigned long long token;
    long long index;
    PyObject *array;
    if (!PyArg_ParseTuple(args, "KLO:add_chunk", &token, &index, &array))
        return NULL;
    Chunk *chunk = PyMem_Calloc(1, sizeof(Chunk));
    if (chunk == NULL)
        return PyErr_NoMemory();
    if (PyObject_GetBuffer(array, &chunk->view, PyBUF_STRIDES) < 0) {
        PyMem_Free(chunk);
        return NULL;
    }
    if (chunk->view.ndim < 1 || chunk->view.ndim > MAX_DIMS) {
        PyBuffer_Release(&chunk->view);
        PyMem_Free(chunk);
        PyErr_SetString(PyExc_ValueError, "add_chunk: a chunk has 1 to 32 dimensions");
        return NULL;
    }
    chunk->token = token;
    chunk->index = index;
    return link_chunk(self, chunk);
}

/* Put `chunk` in the table in place of any with its key; takes it over, even on failure. */
static PyObject *link_chunk(CachedReads *self, Chunk *chunk) {
    pthread_mutex_lock(&self->lock);
    if (find_array(self, chunk->token) == NULL) { /* forgotten (or never registered): nothing reads it */
        pthread_mutex_unlock(&self->lock);
        free_chunk(self, chunk);
        Py_RETURN_FALSE;
    }
    Chunk *old = unlink_chunk(self, chunk->token, chunk->index);
    if (self->chunk_count >= self->chunk_buckets && grow_chunks(self) < 0) {
        pthread_mutex_unlock(&self->lock);
        free_chunk(self, old);
        free_chunk(self, chunk);
        return PyErr_NoMemory();
    }
    size_t slot = chunk_slot(self, chunk->token, chunk->index);
    chunk->next = self->chunks[slot];
    self->chunks[slot] = chunk;
    self->chunk_count++;
    pthread_mutex_unlock(&self->lock);
    free_chunk(self, old);
    Py_RETURN_TRUE;
}

static PyObject *add_file(CachedReads *self, PyObject *args) {
    unsigned long long token;
    long long index, itemsize, not_after_ns = -1;
    PyObject *path, *shape;
    if (!PyArg_ParseTuple(args, "KLO&OL|L:add_file", &token, &index, PyUnicode_FSConverter, &path, &shape, &itemsize,
                          &not_after_ns))
        return NULL;
    RawFile *file = PyMem_RawCalloc(1, sizeof(RawFile));
    Py_ssize_t ndim = PySequence_Size(shape);
    if (file == NULL || ndim < 1 || ndim > MAX_DIMS || itemsize < 1) {
        Py_DECREF(path);
        PyMem_RawFree(file);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "add_file: 1 to 32 dimensions and an item size");
        return NULL;
    }
    file->ndim = (int)ndim;
    file->itemsize = itemsize;
    if (read_dims(shape, file->shape, file->ndim, "shape") < 0) {
        Py_DECREF(path);
        PyMem_RawFree(file);
        return NULL;
    }
    int64_t stride = itemsize, chunk_bytes;
    if (byte_count(file->shape, file->ndim, itemsize, &chunk_bytes, "add_file") < 0) {
        Py_DECREF(path);
        PyMem_RawFree(file);
        return NULL;
    }
    for (int axis = file->ndim - 1; axis >= 0; axis--) { /* each a factor of chunk_bytes: no overflow */
        file->strides[axis] = stride;
        stride *= file->shape[axis];
    }
    struct stat info;
    int fd, failed;
    Py_BEGIN_ALLOW_THREADS
    fd = open(PyBytes_AS_STRING(path), O_RDONLY | O_CLOEXEC);
    failed = fd < 0 || fstat(fd, &info) < 0;
    Py_END_ALLOW_THREADS
    /* A file modified after `not_after_ns` is not the version its reader serves (chunk_versions.py). */
    int later = !failed && not_after_ns >= 0
                && (info.st_mtim.tv_sec > not_after_ns / 1000000000
                    || (info.st_mtim.tv_sec == not_after_ns / 1000000000
                        && info.st_mtim.tv_nsec > not_after_ns % 1000000000));
    if (failed || info.st_size != stride || later) {
        if (failed)
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
        else if (later)
            PyErr_SetString(PyExc_ValueError, "add_file: modified after its reader began");
        else
            PyErr_Format(PyExc_ValueError, "add_file: %lld bytes, not one chunk's %lld", (long long)info.st_size,
                         (long long)stride);
        if (fd >= 0)
            close(fd);
        Py_DECREF(path);
        PyMem_RawFree(file);
        return NULL;
    }
    Py_DECREF(path);
    file->fd = fd;
    file->size = info.st_size;
    file->mtime = info.st_mtim;
    Chunk *chunk = PyMem_Calloc(1, sizeof(Chunk));
    if (chunk == NULL) {
        close(fd);
        PyMem_RawFree(file);
        return PyErr_NoMemory();
    }
    chunk->token = token;
    chunk->index = index;
    chunk->file = file;
    return link_chunk(self, chunk);
}

static PyObject *remove_chunk(CachedReads *self, PyObject *args) {
    unsigned long long token;
    long long index;
    if (!parse_key(args, &token, &index))
        return NULL;
    pthread_mutex_lock(&self->lock);
    Chunk *chunk = unlink_chunk(self, token, index);
    pthread_mutex_unlock(&self->lock);
    if (chunk == NULL)
        Py_RETURN_FALSE;
    free_chunk(self, chunk);
    Py_RETURN_TRUE;
}

static PyObject *take_touched(CachedReads *self, PyObject *args) {
    unsigned long long token;
    long long index;
    if (!parse_key(args, &token, &index))
        return NULL;
    pthread_mutex_lock(&self->lock);
    Chunk *chunk = find_chunk(self, token, index);
    int touched = chunk != NULL && chunk->touched;
    if (touched)
        chunk->touched = 0;
    pthread_mutex_unlock(&self->lock);
    return PyBool_FromLong(touched);
}

static void drop_all_chunks(CachedReads *self) {
    for (;;) {
        pthread_mutex_lock(&self->lock);
        Chunk *chunk = NULL;
        for (size_t i = 0; i < self->chunk_buckets && chunk == NULL; i++) {
            if (self->chunks[i] != NULL) {
                chunk = self->chunks[i];
                self->chunks[i] = chunk->next;
                self->chunk_count--;
            }
        }
        pthread_mutex_unlock(&self->lock);
        if (chunk == NULL)
            return;
        free_chunk(self, chunk);
    }
}

static PyObject *remove_array(CachedReads *self, PyObject *args) {
    unsigned long long token;
    if (!PyArg_ParseTuple(args, "K:remove_array", &token))
        return NULL;
    Chunk *gone = NULL;
    pthread_mutex_lock(&self->lock);
    Array *array = NULL;
    for (Array **link = &self->arrays[token & 63]; *link != NULL; link = &(*link)->next) {
        if ((*link)->token == token) {
            array = *link;
            *link = array->next;
            break;
        }
    }
    for (size_t i = 0; i < self->chunk_buckets; i++) {
        for (Chunk **link = &self->chunks[i]; *link != NULL;) {
            Chunk *c = *link;
            if (c->token != token) {
                link = &c->next;
                continue;
            }
            *link = c->next;
            self->chunk_count--;
            c->next = gone;
            gone = c;
        }
    }
    pthread_mutex_unlock(&self->lock);
    PyMem_RawFree(array);
    while (gone != NULL) {
        Chunk *next = gone->next;
        free_chunk(self, gone);
        gone = next;
    }
    Py_RETURN_NONE;
}

static PyObject *register_array(CachedReads *self, PyObject *args) {
    unsigned long long token;
    if (!PyArg_ParseTuple(args, "K:register_array", &token))
        return NULL;
    Array *array = PyMem_RawCalloc(1, sizeof(Array));
    if (array == NULL)
        return PyErr_NoMemory();
    array->token = token;
    pthread_mutex_lock(&self->lock);
    if (find_array(self, token) == NULL) {
        array->next = self->arrays[token & 63];
        self->arrays[token & 63] = array;
        array = NULL;
    }
    pthread_mutex_unlock(&self->lock);
    PyMem_RawFree(array); /* registered already */
    Py_RETURN_NONE;
}

static PyObject *clear_chunks(CachedReads *self, UNUSED PyObject *unused) {
    drop_all_chunks(self);
    Py_RETURN_NONE;
}

static PyObject *link_file(CachedReads *self, File *f);

static PyObject *open_file(CachedReads *self, PyObject *args) {
    unsigned long long fh, token;
    long long region_start, region_bytes, itemsize;
    PyObject *shape, *edges;
    int swap = 0;
    if (!PyArg_ParseTuple(args, "KKLLLOO|i:open_file", &fh, &token, &region_start, &region_bytes, &itemsize,
                          &shape, &edges, &swap))
        return NULL;
    Py_ssize_t ndim = PySequence_Size(shape);
    if (ndim < 0)
        return NULL;
    if (ndim < 1 || ndim > MAX_DIMS || region_start < 0 || region_bytes < 0 || itemsize < 1) {
        PyErr_SetString(PyExc_ValueError, "open_file: 1 to 32 dimensions, a region and an item size");
        return NULL;
    }
    if (swap != 0 && swap != 1 && !((swap == 2 || swap == 4 || swap == 8) && swap == itemsize)) {
        PyErr_SetString(PyExc_ValueError, "open_file: swap is 0, or the item size (2, 4 or 8)");
        return NULL;
    }
    File *f = PyMem_RawCalloc(1, sizeof(File));
    if (f == NULL)
        return PyErr_NoMemory();
    f->fh = fh;
    f->token = token;
    f->region_start = region_start;
    f->region_bytes = region_bytes;
    f->itemsize = itemsize;
    f->swap = swap;
    f->ndim = (int)ndim;
    f->next_offset = -1;
    int64_t array_bytes;
    if (read_dims(shape, f->shape, f->ndim, "shape") < 0 || read_dims(edges, f->edges, f->ndim, "edges") < 0
            || byte_count(f->shape, f->ndim, itemsize, &array_bytes, "open_file") < 0) {
        PyMem_RawFree(f);
        return NULL;
    }
    if (region_bytes > array_bytes || region_start > INT64_MAX - region_bytes) {
        PyMem_RawFree(f);
        return PyErr_Format(PyExc_ValueError, "open_file: a region of %lld bytes at %lld, the array has %lld",
                            region_bytes, region_start, (long long)array_bytes);
    }
    for (int axis = 0; axis < f->ndim; axis++) {
        /* A chunk wider than the array serves as one as wide: every product of edges and item size
         * (`serve`) is then within the array's byte count. */
        if (f->edges[axis] > f->shape[axis])
            f->edges[axis] = f->shape[axis];
        f->counts[axis] = f->shape[axis] / f->edges[axis] + (f->shape[axis] % f->edges[axis] != 0);
    }
    return link_file(self, f);
}

/* Release a region taken out of the table (with the GIL): a bytes region once no read copies
 * from it (the GIL let go while waiting: a thread holding it may be waiting for the mutex). */
static void free_file(CachedReads *self, File *f) {
    if (f == NULL)
        return;
    if (f->bytes.buf != NULL) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->lock);
        while (f->pins > 0)
            pthread_cond_wait(&self->unpinned, &self->lock);
        pthread_mutex_unlock(&self->lock);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&f->bytes);
    }
    PyMem_RawFree(f);
}

/* Put region `f` in the table, in place of the file's region that begins where it does; a
 * ValueError (and `f` freed) if it overlaps another of the file's regions. */
static PyObject *link_file(CachedReads *self, File *f) {
    pthread_mutex_lock(&self->lock);
    File *old = unlink_file(self, f->fh, f->region_start);
    for (File *other = self->files[f->fh & 63]; other != NULL; other = other->next) {
        if (other->fh == f->fh && f->region_start < other->region_start + other->region_bytes
                && other->region_start < f->region_start + f->region_bytes) {
            pthread_mutex_unlock(&self->lock);
            PyErr_Format(PyExc_ValueError, "the region at %lld overlaps the file's region at %lld",
                         (long long)f->region_start, (long long)other->region_start);
            free_file(self, old);
            free_file(self, f);
            return NULL;
        }
    }
    f->next = self->files[f->fh & 63];
    self->files[f->fh & 63] = f;
    pthread_mutex_unlock(&self->lock);
    free_file(self, old);
    Py_RETURN_NONE;
}

static PyObject *open_bytes(CachedReads *self, PyObject *args) {
    unsigned long long fh;
    long long region_start;
    PyObject *data;
    if (!PyArg_ParseTuple(args, "KLO:open_bytes", &fh, &region_start, &data))
        return NULL;
    File *f = PyMem_RawCalloc(1, sizeof(File));
    if (f == NULL)
        return PyErr_NoMemory();
    if (PyObject_GetBuffer(data, &f->bytes, PyBUF_SIMPLE) < 0) {
        PyMem_RawFree(f);
        return NULL;
    }
    if (region_start < 0 || f->bytes.len == 0 || region_start > INT64_MAX - f->bytes.len) {
        PyBuffer_Release(&f->bytes);
        PyMem_RawFree(f);
        PyErr_SetString(PyExc_ValueError, "open_bytes: some bytes, at an offset from 0");
        return NULL;
    }
    f->fh = fh;
    f->region_start = region_start;
    f->region_bytes = f->bytes.len;
    f->next_offset = -1;
    return link_file(self, f);
}

static PyObject *close_file(CachedReads *self, PyObject *args) {
    unsigned long long fh;
    if (!PyArg_ParseTuple(args, "K:close_file", &fh))
        return NULL;
    for (;;) { /* every region of the file */
        pthread_mutex_lock(&self->lock);
        File *gone = unlink_file(self, fh, -1);
        pthread_mutex_unlock(&self->lock);
        if (gone == NULL)
            break;
        free_file(self, gone);
    }
    Py_RETURN_NONE;
}

static PyObject *allow_stream(CachedReads *self, PyObject *args) {
    unsigned long long fh;
    long long until, region_start = -1;
    if (!PyArg_ParseTuple(args, "KL|L:allow_stream", &fh, &until, &region_start))
        return NULL;
    pthread_mutex_lock(&self->lock);
    for (File *f = self->files[fh & 63]; f != NULL; f = f->next)
        if (f->fh == fh && (region_start < 0 || f->region_start == region_start))
            f->stream_until = until;
    pthread_mutex_unlock(&self->lock);
    Py_RETURN_NONE;
}

static PyObject *serve_into(CachedReads *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"fh", "out", "offset", "loaded_until", NULL};
    unsigned long long fh;
    long long offset, loaded_until = -1;
    PyObject *target;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KOL|$L:serve_into", names, &fh, &target, &offset, &loaded_until))
        return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (offset < 0 || (uint64_t)out.len > MAX_READ_BYTES || offset > INT64_MAX - (long long)out.len) {
        PyBuffer_Release(&out);
        return PyErr_Format(PyExc_OverflowError, "serve_into: %zd bytes at offset %lld are past any file",
                            out.len, offset);
    }
    long n;
    int missed;
    Py_BEGIN_ALLOW_THREADS
    n = loaded_until < 0 ? serve(self, fh, out.buf, (size_t)out.len, offset, &missed)
                         : serve_loaded(self, fh, out.buf, (size_t)out.len, offset, loaded_until, now_ns());
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    return PyLong_FromLong(n < 0 && loaded_until < 0 && missed ? -2 : n);
}

static PyObject *counters(CachedReads *self, UNUSED PyObject *unused) {
    pthread_mutex_lock(&self->lock);
    uint64_t served = self->served, in_streams = self->served_in_streams, hits = self->chunk_hits;
    uint64_t after_loading = self->served_after_loading;
    uint64_t latency[LATENCY_BUCKETS];
    memcpy(latency, self->latency, sizeof latency);
    size_t chunks = self->chunk_count;
    pthread_mutex_unlock(&self->lock);
    PyObject *buckets = PyList_New(LATENCY_BUCKETS);
    if (buckets == NULL)
        return NULL;
    for (int i = 0; i < LATENCY_BUCKETS; i++)
        PyList_SET_ITEM(buckets, i, PyLong_FromUnsignedLongLong(latency[i]));
    return Py_BuildValue("{sKsKsKsKsnsN}", "reads", (unsigned long long)served, "reads_in_streams",
                         (unsigned long long)in_streams, "reads_after_loading", (unsigned long long)after_loading,
                         "chunk_hits", (unsigned long long)hits, "chunks", (Py_ssize_t)chunks,
                         "latency_buckets", buckets);
}

static void free_serve_entry(PyObject *capsule) {
    ServeEntry *entry = PyCapsule_GetPointer(capsule, "zarrfs.engine._cached_reads.serve");
    if (entry == NULL)
        return;
    Py_DECREF((PyObject *)entry->table);
    PyMem_RawFree(entry);
}

static PyObject *serve_capsule(CachedReads *self, UNUSED PyObject *unused) {
    ServeEntry *entry = PyMem_RawMalloc(sizeof(ServeEntry));
    if (entry == NULL)
        return PyErr_NoMemory();
    entry->serve = serve;
    entry->serve_loaded = serve_loaded;
    entry->table = self;
    PyObject *capsule = PyCapsule_New(entry, "zarrfs.engine._cached_reads.serve", free_serve_entry);
    if (capsule == NULL) {
        PyMem_RawFree(entry);
        return NULL;
    }
    Py_INCREF(self); /* the capsule keeps the tables alive for as long as C may call `serve` */
    return capsule;
}

/* The tables exist from allocation on, so that every method works on an object whose __init__
 * never ran (`CachedReads.__new__(CachedReads)`). */
static PyObject *cached_reads_new(PyTypeObject *type, UNUSED PyObject *args, UNUSED PyObject *kwargs) {
    CachedReads *self = (CachedReads *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->chunks = PyMem_RawCalloc(1024, sizeof(Chunk *));
    if (self->chunks == NULL) {
        Py_TYPE(self)->tp_free((PyObject *)self);
        return PyErr_NoMemory();
    }
    self->chunk_buckets = 1024;
    self->sequential_bytes = 0;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->unpinned, NULL);
    return (PyObject *)self;
}

static int cached_reads_init(CachedReads *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"sequential_bytes", NULL};
    long long sequential_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "L:CachedReads", names, &sequential_bytes))
        return -1;
    if (sequential_bytes < 0 || (uint64_t)sequential_bytes > 4 * MAX_READ_BYTES) {
        PyErr_SetString(PyExc_ValueError, "CachedReads: sequential_bytes from 0 to 4 TiB");
        return -1;
    }
    pthread_mutex_lock(&self->lock);
    self->sequential_bytes = sequential_bytes;
    pthread_mutex_unlock(&self->lock);
    return 0;
}

static void cached_reads_dealloc(CachedReads *self) {
    if (self->chunks != NULL) { /* NULL only if `cached_reads_new` failed */
        drop_all_chunks(self);
        PyMem_RawFree(self->chunks);
        for (int i = 0; i < 64; i++) {
            for (File *f = self->files[i], *next; f != NULL; f = next) {
                next = f->next;
                free_file(self, f); /* no read is under way: the table is going */
            }
            for (Array *a = self->arrays[i], *next; a != NULL; a = next) {
                next = a->next;
                PyMem_RawFree(a);
            }
        }
        pthread_cond_destroy(&self->unpinned);
        pthread_mutex_destroy(&self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef cached_reads_methods[] = {
    {"register_array", (PyCFunction)register_array, METH_VARARGS,
     "register_array(token): chunks of the array `token` may be added (until `remove_array(token)`)."},
    {"add_chunk", (PyCFunction)add_chunk, METH_VARARGS,
     "add_chunk(token, index, array) -> bool: chunk `index` (flat, C order) of the array `token` is cached "
     "(False: the array is not registered, and nothing was kept)."},
    {"add_file", (PyCFunction)add_file, METH_VARARGS,
     "add_file(token, index, path, shape, itemsize, not_after_ns=-1) -> bool: chunk `index` of the array `token` "
     "is the file at `path`, its C-order elements uncompressed (a chunk of `shape`: ValueError if the size differs "
     "or overflows, or the file was modified after `not_after_ns`; False: the array is not registered). C reads "
     "it while it stays as opened (size, mtime)."},
    {"remove_chunk", (PyCFunction)remove_chunk, METH_VARARGS,
     "remove_chunk(token, index) -> bool: it left the cache (False if it was not here)."},
    {"take_touched", (PyCFunction)take_touched, METH_VARARGS,
     "take_touched(token, index) -> bool: whether a read was served from it since it was last asked."},
    {"remove_array", (PyCFunction)remove_array, METH_VARARGS,
     "remove_array(token): forget every chunk of it, and the array (see `register_array`)."},
    {"clear_chunks", (PyCFunction)clear_chunks, METH_NOARGS, "Forget every chunk."},
    {"open_file", (PyCFunction)open_file, METH_VARARGS,
     "open_file(fh, token, region_start, region_bytes, itemsize, shape, chunk_edges, swap=0): a region of "
     "open file fh (replacing its region at region_start) holds the array's C-order bytes, each element "
     "byte-swapped when swap is the item size"},
    {"open_bytes", (PyCFunction)open_bytes, METH_VARARGS,
     "open_bytes(fh, region_start, data): a region of open file fh (replacing its region at region_start) "
     "holds `data` (a bytes-like object, held until the region goes)"},
    {"close_file", (PyCFunction)close_file, METH_VARARGS, "close_file(fh)"},
    {"allow_stream", (PyCFunction)allow_stream, METH_VARARGS,
     "allow_stream(fh, until, region_start=-1): reads continuing the sequential stream of the file's region "
     "at region_start (every region: -1) may be answered here while they end at or before byte `until` of "
     "that region (0: none)."},
    {"serve_into", (PyCFunction)(void (*)(void))serve_into, METH_VARARGS | METH_KEYWORDS,
     "serve_into(fh, out, offset, *, loaded_until=-1) -> int: `serve` for a writable buffer (len(out) "
     "bytes): bytes, -2 for a miss loading can mend, -1 for anything else (OverflowError for an offset "
     "below 0 or a range past 2**63). With `loaded_until` >= 0, `serve_loaded` with that stretch."},
    {"counters", (PyCFunction)counters, METH_NOARGS,
     "{'reads', 'reads_in_streams', 'reads_after_loading', 'chunk_hits', 'chunks', 'latency_buckets'}: "
     "reads served here (of them, in sequential streams, and after Python loaded their chunks), their latency in power-of-two microsecond buckets "
     "(as zarrfs.fuse.service_times)."},
    {"serve_capsule", (PyCFunction)serve_capsule, METH_NOARGS,
     "A capsule with the C entry point, for zarrfs.fuse._fast_read (it keeps this object alive)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CachedReadsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "zarrfs.engine._cached_reads.CachedReads",
    .tp_basicsize = sizeof(CachedReads),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "CachedReads(sequential_bytes): open files, cached chunks and chunk files that reads are "
              "served from without Python.",
    .tp_new = cached_reads_new,
    .tp_init = (initproc)cached_reads_init,
    .tp_dealloc = (destructor)cached_reads_dealloc,
    .tp_methods = cached_reads_methods,
};

static int cached_reads_exec(PyObject *module) {
    if (PyType_Ready(&CachedReadsType) < 0)
        return -1;
    Py_INCREF(&CachedReadsType);
    if (PyModule_AddObject(module, "CachedReads", (PyObject *)&CachedReadsType) < 0) {
        Py_DECREF(&CachedReadsType);
        return -1;
    }
    return PyModule_AddIntConstant(module, "SEQUENTIAL_REACH", SEQUENTIAL_REACH);
}

static PyObject *module_stream_reach(UNUSED PyObject *module, PyObject *args) {
    long long size;
    if (!PyArg_ParseTuple(args, "L:stream_reach", &size))
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "stream_reach: a size below 0");
        return NULL;
    }
    return PyLong_FromLongLong(stream_reach_of(size, SEQUENTIAL_REACH));
}

static PyObject *module_continues_stream(UNUSED PyObject *module, PyObject *args) {
    long long last_end, start, stop;
    if (!PyArg_ParseTuple(args, "LLL:continues_stream", &last_end, &start, &stop))
        return NULL;
    if (last_end < -1 || start < 0 || stop < start) {
        PyErr_SetString(PyExc_ValueError, "continues_stream: last_end from -1, start from 0, stop from start");
        return NULL;
    }
    return PyBool_FromLong(stream_continues(last_end, start, stop - start, SEQUENTIAL_REACH));
}

static PyMethodDef module_methods[] = {
    {"stream_reach", (PyCFunction)module_stream_reach, METH_VARARGS,
     "stream_reach(size) -> int: how far from the last read's end a read of `size` bytes may start and still "
     "continue a sequential stream: max(4 x size, SEQUENTIAL_REACH)."},
    {"continues_stream", (PyCFunction)module_continues_stream, METH_VARARGS,
     "continues_stream(last_end, start, stop) -> bool: whether a read of [start, stop) continues reads that last "
     "ended at `last_end` (-1: none), the rule `CachedReads(SEQUENTIAL_REACH)` answers streams by."},
    {NULL, NULL, 0, NULL},
};

ZARRFS_MODULE_SLOTS(cached_reads_slots, {Py_mod_exec, (void *)cached_reads_exec},);

static struct PyModuleDef cached_reads_module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "zarrfs.engine._cached_reads",
    .m_doc = "Reads served from cached chunks without Python.",
    .m_slots = cached_reads_slots,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__cached_reads(void) {
    return PyModuleDef_Init(&cached_reads_module);
}
