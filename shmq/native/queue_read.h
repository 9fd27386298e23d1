/*
 * shmq/native/queue_read.h -- one queue's state as a QueueReader (store/reader.py) keeps it, and
 * the unfiltered read of a pull's answer over it: which records get_messages would answer FOUND
 * with. Header-only (static inline): hot.c (``read_queue``, ``read_raw``) and remoting_pull.c (the
 * worker's C path for PULL_MESSAGE, which writes the records straight into its answer frame)
 * each compile it in; the read's rules are here, once.
 *
 * The state ``st`` is one list in the Q_* order: the ConsumeQueue file index and mapping read
 * last, the first commit-log offset and mapping of the CommitLog file read last, entries per
 * ConsumeQueue file, the addresses of the queue's min_offset and next_offset and of the store's
 * shmq_positions, topic, its UTF-8 and the broker. The reader alone changes the first four
 * (it maps another file); a read here never does.
 */
#ifndef SHMQ_QUEUE_READ_H
#define SHMQ_QUEUE_READ_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include "core.h"

enum { Q_CI, Q_CQ, Q_LOGBASE, Q_LOG, Q_PER, Q_MIN, Q_NEXT, Q_POS, Q_TOPIC, Q_UTF8, Q_BROKER, Q_N };

/* a QueueReader state's numbers */
typedef struct { long long ci, per, log_base; const int64_t *minp, *next; const shmq_positions *P; } qstate;

/* st's numbers into *q: 0, or -1 with an exception set */
static inline int queue_state(PyObject *st, qstate *q) {
    if (!PyList_CheckExact(st) || PyList_GET_SIZE(st) != Q_N || !PyUnicode_CheckExact(PyList_GET_ITEM(st, Q_TOPIC)) ||
        !PyBytes_CheckExact(PyList_GET_ITEM(st, Q_UTF8)) || !PyUnicode_CheckExact(PyList_GET_ITEM(st, Q_BROKER))) {
        PyErr_SetString(PyExc_TypeError, "read_queue: not a QueueReader state");
        return -1;
    }
    q->ci = PyLong_AsLongLong(PyList_GET_ITEM(st, Q_CI));
    q->per = PyLong_AsLongLong(PyList_GET_ITEM(st, Q_PER));
    q->log_base = PyLong_AsLongLong(PyList_GET_ITEM(st, Q_LOGBASE));
    q->minp = (const int64_t *)PyLong_AsVoidPtr(PyList_GET_ITEM(st, Q_MIN));
    q->next = (const int64_t *)PyLong_AsVoidPtr(PyList_GET_ITEM(st, Q_NEXT));
    q->P = (const shmq_positions *)PyLong_AsVoidPtr(PyList_GET_ITEM(st, Q_POS));
    if (PyErr_Occurred()) return -1;
    if (!q->minp || !q->next || !q->P || q->per <= 0) {
        PyErr_SetString(PyExc_ValueError, "read_queue: null position");
        return -1;
    }
    return 0;
}

static inline uint64_t qr_be64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v); }
static inline uint32_t qr_be32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v); }

#define QR_MAX 1024  /* entries one read may take (a pull takes at most 32) */

/* A found read: the records (in the mappings, which stay exported until qr_release), their
 * sizes and total, the next offset and the queue's max and min offsets as loaded for the read. */
typedef struct {
    Py_buffer cq, lg;
    const uint8_t *recs[QR_MAX];
    uint32_t sizes[QR_MAX];
    Py_ssize_t n;
    long long total, next, mx, mn;
} qr_read;

static inline void qr_release(qr_read *r) {
    PyBuffer_Release(&r->lg);
    PyBuffer_Release(&r->cq);
}

/* The unfiltered pull answer of st's queue from ``offset``, as get_messages gives it FOUND: from
 * min <= offset < max, up to max_count entries and max_bytes (at least one), stopping at the
 * queue's published end or at a record past the commit position, the visibility invariant of
 * store/reader.py (acquire loads). 1: r holds n >= 1 records (qr_release it after copying them);
 * 0: nothing is found this way and *why says why (nothing held): -1 get_messages decides (an
 * offset out of range, an expired or empty entry, the end of the ConsumeQueue file in the middle
 * of the read, nothing readable yet), -2 the ConsumeQueue file of ``offset`` is not mapped in st,
 * >= 0 the commit-log offset of a record outside st's CommitLog mapping (the reader maps either
 * and asks again); -1 with an exception set. Records are not checked: the pull hands on the
 * stored bytes, as get_messages does. */
static inline int qr_raw(PyObject *st, long long offset, Py_ssize_t max_count, long long max_bytes, qr_read *r,
                         long long *why) {
    qstate q;
    if (queue_state(st, &q)) return -1;
    int64_t mn = __atomic_load_n(q.minp, __ATOMIC_ACQUIRE), mx = __atomic_load_n(q.next, __ATOMIC_ACQUIRE);
    int64_t commit = __atomic_load_n(&q.P->commit_pos, __ATOMIC_ACQUIRE);
    int64_t min_pos = __atomic_load_n(&q.P->min_pos, __ATOMIC_ACQUIRE);
    *why = -1;
    if (offset < mn || offset >= mx || max_count < 1 || max_count > QR_MAX) return 0;
    if (offset / q.per != q.ci) { *why = -2; return 0; }
    if (PyObject_GetBuffer(PyList_GET_ITEM(st, Q_CQ), &r->cq, PyBUF_SIMPLE)) return -1;
    if (PyObject_GetBuffer(PyList_GET_ITEM(st, Q_LOG), &r->lg, PyBUF_SIMPLE)) { PyBuffer_Release(&r->cq); return -1; }
    long long at = offset % q.per, total = 0;
    int undecided = 0;
    Py_ssize_t n = 0;
    while (n < max_count && offset + n < mx) {
        Py_ssize_t e = (Py_ssize_t)(at + n) * SHMQ_CQ_ENTRY_SIZE;
        if (at + n >= q.per || e + SHMQ_CQ_ENTRY_SIZE > r->cq.len) { undecided = 1; break; }
        const uint8_t *ent = (const uint8_t *)r->cq.buf + e;
        int64_t phys = (int64_t)qr_be64(ent + SHMQ_CQ_PHYS);
        int32_t size = (int32_t)qr_be32(ent + SHMQ_CQ_SIZE);
        if (size <= 0 || phys < min_pos) { undecided = 1; break; }
        if (phys + size > commit) break;                     /* published entry, unpublished record */
        if (n && total + size > max_bytes) break;
        if (phys < q.log_base || phys - q.log_base + size > r->lg.len) { undecided = 1; *why = phys; break; }
        r->recs[n] = (const uint8_t *)r->lg.buf + (phys - q.log_base);
        r->sizes[n++] = (uint32_t)size;
        total += size;
    }
    if (undecided || !n) { qr_release(r); return 0; }
    r->n = n;
    r->total = total;
    r->next = offset + (long long)n;
    r->mx = mx;
    r->mn = mn;
    return 1;
}

/* the records of a found read, one after another, at d (r->total bytes) */
static inline void qr_copy(const qr_read *r, uint8_t *d) {
    for (Py_ssize_t i = 0; i < r->n; d += r->sizes[i++]) memcpy(d, r->recs[i], r->sizes[i]);
}

#endif
