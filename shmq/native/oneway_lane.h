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
    PyObject *waiters;  /* the async sends' waiters by opaque (a Run, pending_table.h), or NULL */
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
    /* the caller-thread write (lane_direct.c): ClientInstance._direct_conn and
     * DirectWrites.after (NULL: off), the least gap since the last put, that put's time, whether
     * the last put went direct, how many did; the frame's scratch buffer */
    PyObject *direct_conn, *direct_after;
    long long gap_ns, last_ns;
    int quiet;  /* the last put came gap_ns or more after the one before it */
    int last_direct;
    /* a segment's marker was appended to the deque and no C put has since asked for its drain
     * (async_plain.c's plan_drain clears it once it has: a put into a segment already open
     * needs no look at _drain_scheduled, the drain that takes its marker takes it) */
    int marker_unseen;
    /* the owning ClientInstance's rpc_hook is set (its setter writes it, ``Lane.hooked``): the
     * C sends of async_plain.c leave a signed request to the Python path; one load a send where
     * the attribute read was ~190 instructions */
    char hooked;
    unsigned long long direct_frames;
    char *scratch;
    size_t scap;
    char *spare;  /* a taken segment's buffer, for the next segment (lane_take) */
    size_t spare_cap;
    Py_ssize_t wait_hint;  /* the last taken segment's waiter count: the next one's dict made that size */
    struct sf_head *heads;  /* the frames' last header heads (send_frame.h sf_write_kept), made at the first put */
    PyObject *spare_run;   /* an empty Run made before a put's lane_seg, not used by it (lane_async) */
} Lane;

extern PyTypeObject shmq_lane_type;

/* Lane.put's work: a[0..5] = addr, pieces, sysflag, flag, tags, body (bytes); the status bits
 * (NEW; LOOK / FULL / EMONTH / UNSUPPORTED: nothing written), or NULL with an exception */
PyObject *lane_oneway(Lane *self, PyObject *const *a);

/* Lane.put_async's work: a[0..10] = addr, pieces, flag, tags, body (bytes), msg, producer,
 * callback, mq, timeout, left; the AsyncSend (new reference), a status int (FULL / EMONTH /
 * UNSUPPORTED, nothing written), or NULL with an exception (nothing written) */
PyObject *lane_async(Lane *self, PyObject *const *a);

/* lane_direct.c: the put may try the socket (the direct write on, no segment in the lane, the put
 * before this one at least gap_ns ago); now: this put's wall clock (ns), which it records */
int lane_direct_gate(Lane *self, long long now);
/* the wall clock in ns (CLOCK_REALTIME: a put's born ms is now / 1e6; the gap is measured on it
 * too, a clock step costing one put's choice at worst) */
long long lane_now_ns(void);
/* addr's connection when nothing submitted waits before this put (new reference; None: the lane
 * takes it; NULL: an exception). Runs Python code: called before the frame is written */
PyObject *lane_direct_conn(Lane *self, PyObject *addr);
/* write frame[0..n) on conn from this thread (frame written right before, with no Python code
 * since): 1 (on its way; w, an async send's waiter, registered under key with its timer asked
 * for), 0 (not written: the lane takes it), -1 (an exception, nothing written) */
int lane_direct_send(Lane *self, PyObject *conn, const char *frame, Py_ssize_t n, int64_t key, PyObject *w,
                     PyObject *timeout);
/* _answer's Pending and Run (pending_table.h), bound at import (hot_oneway.c bind_pending) */
extern PyTypeObject *lane_pending_type, *lane_run_type;
PyObject *lane_set_direct(Lane *self, PyObject *args);
int lane_direct_init(void);
PyObject *lane_write_held(PyObject *mod, PyObject *const *a, Py_ssize_t na);

/* the module's AsyncPlain type, added by PyInit__oneway: 0, or -1 with an exception */
int shmq_async_plain_add(PyObject *m);

#endif
