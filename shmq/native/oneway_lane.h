/*
 * shmq/native/oneway_lane.h -- the oneway lane's state (hot_oneway.c: what a segment is, the
 * order and bound it keeps) shared with async_plain.c, the C send_async of a plain message, which
 * puts into the same lane through ``lane_async`` so its frames keep their place among the
 * oneways and the other requests. Both files are one extension module (shmq.native._oneway).
 */
#ifndef SHMQ_ONEWAY_LANE_H
#define SHMQ_ONEWAY_LANE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum { ST_NEW = 1, ST_LOOK = 2, ST_FULL = 4, ST_EMONTH = 8, ST_UNSUPPORTED = 16 };

typedef struct seg {
    struct seg *next;
    PyObject *addr;
    char *buf;
    size_t len, cap;
    Py_ssize_t frames;
    PyObject *waiters;  /* the async sends' waiters by opaque (a dict), or NULL */
    PyObject *timeout;  /* their timeout (s), with waiters */
} seg;

typedef struct {
    PyObject_HEAD
    seg *head, *tail;
    int tail_open;
    Py_ssize_t bytes, frames, max_bytes, max_frames;
    uint32_t opaque, aopaque;  /* the last oneway opaque; the last async one, negated */
    uint32_t puts;
    PyObject *append, *mark;
} Lane;

extern PyTypeObject shmq_lane_type;

/* Lane.put_async's work: a[0..10] = addr, pieces, flag, tags, body (bytes), msg, producer,
 * callback, mq, timeout, left; the AsyncSend (new reference), a status int (FULL / EMONTH /
 * UNSUPPORTED, nothing written), or NULL with an exception (nothing written) */
PyObject *lane_async(Lane *self, PyObject *const *a);

/* the module's AsyncPlain type, added by PyInit__oneway: 0, or -1 with an exception */
int shmq_async_plain_add(PyObject *m);

#endif
