/*
 * shmq/native/lane_direct.c -- a lane frame written to its socket by the caller's own thread
 * (module shmq.native._oneway, with hot_oneway.c's Lane; client/direct_write.py is its Python).
 *
 * Why: a plain send_async / send_oneway hands its frame to the client's loop thread (the lane,
 * a marker job, a self-pipe write), and that thread then waits for a CPU and for the GIL the
 * caller holds until it sleeps: 50-160 us per message at a paced 10,000/s on the 2-vCPU VM
 * (bench/RESULTS.md, "Session 8, tcpe2e"), where the frame could have left at once. So when
 * the lane has no segment and the connection has nothing queued and no write in progress, the
 * caller's thread writes the frame itself: one non-blocking send() with the GIL held.
 *
 * Order (frames put to one address leave in the order they were put, after every request
 * submitted before them; no two writes of one connection interleave): every write of a client
 * connection is made with the GIL held up to the system call -- the loop thread's in
 * Connection._flush (which marks ``_writing`` around its write: write_held below, whose send()
 * holds the GIL, then for a rest the transport's write, whose send() releases it) or the
 * transport's buffered ``_write_ready`` (its buffer is non-empty all along), this one holding
 * the GIL through its send(). The checks that nothing is queued or
 * being written and the send() are one stretch with no Python code in it, so no other thread
 * runs between them. What is queued and not yet on the connection: the lane's segments (none:
 * ``head`` is NULL), the jobs deque, a drain or a connect between taking jobs and writing them
 * (``ClientInstance._direct_conn`` answers None then), the connection's ``_out``, the
 * transport's buffer. A partial write puts the frame's rest first in ``_out`` in the same
 * stretch, so whatever the loop writes next goes after it, and asks the loop to flush it.
 *
 * Rate: at a high rate the loop's batching (one write per burst) is what makes the throughput,
 * and a send() per frame would cost more than the wake-up it saves. A put comes here only when
 * this put and the one before it each came at least ``gap_ns`` after the put before them: a
 * paced sender's puts do, a burst's do not (its first frame goes direct when the burst follows a
 * quiet stretch), and neither does the first put after a high-rate sender lost the CPU or the GIL
 * for a moment (the loop's drain, a preemption), which would otherwise add a send() and a
 * one-frame read of the broker to every drain.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include "oneway_lane.h"
#include "pending_table.h"

static PyObject *s_eof, *s_empty_waiter;
static PyObject *s_out, *s_writing, *s_write_paused, *s_closed, *s_transport, *s_buffer, *s_sock, *s_closing,
    *s_conn_lost, *s_pending, *s_fileno, *s_empty;

int lane_direct_init(void) {
    static const char *const names[] = {"_out", "_writing", "_write_paused", "closed", "_transport", "_buffer",
                                        "_sock", "_closing", "_conn_lost", "_pending", "fileno"};
    PyObject **strs[] = {&s_out, &s_writing, &s_write_paused, &s_closed, &s_transport, &s_buffer, &s_sock,
                         &s_closing, &s_conn_lost, &s_pending, &s_fileno};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!(*strs[i] = PyUnicode_InternFromString(names[i]))) return -1;
    if (!(s_eof = PyUnicode_InternFromString("_eof")) || !(s_empty_waiter = PyUnicode_InternFromString("_empty_waiter")))
        return -1;
    return (s_empty = PyBytes_FromStringAndSize(NULL, 0)) ? 0 : -1;
}

long long lane_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* o's attribute name is exactly False / 0 (1), anything else (0); no Python code runs for the
 * plain attributes read here (instance dicts, bools, ints) */
static int attr_false(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) return PyErr_Clear(), 0;
    int r = v == Py_False || (PyLong_CheckExact(v) && PyLong_AsLong(v) == 0);
    Py_DECREF(v);
    return r;
}

/* the socket fd of t (the standard loop's socket transport) when nothing of it is buffered and it
 * is not closing or lost: the transport's own write would begin with a send() then; else -1, no
 * exception. idle_fd's and write_held's one test of the transport. */
static int transport_fd(PyObject *t) {
    int fd = -1;
    PyObject *b = NULL, *s = NULL, *f = NULL;
    if (!attr_false(t, s_closing) || !attr_false(t, s_conn_lost)) return -1;
    /* the transport's buffer: a bytearray (3.11) or a deque (3.12+), empty */
    if (!(b = PyObject_GetAttr(t, s_buffer))) goto end;
    if (!PyByteArray_CheckExact(b) && strcmp(Py_TYPE(b)->tp_name, "collections.deque")) goto end;
    if (PyObject_Length(b) != 0) goto end;
    /* the socket's own fd: -1 once it is closed (socket.close marks it before the close(2), whose
     * GIL release is the only moment another thread could see it half closed) */
    if (!(s = PyObject_GetAttr(t, s_sock)) || !Py_TYPE(s)->tp_base) goto end;
    if (strcmp(Py_TYPE(s)->tp_base->tp_name, "_socket.socket")) goto end;  /* socket.socket: fileno is C */
    if (!(f = PyObject_CallMethodNoArgs(s, s_fileno))) goto end;  /* _socket.socket.fileno: C, no GIL release */
    fd = (int)PyLong_AsLong(f);
    if (fd < 0) fd = -1;
end:
    if (PyErr_Occurred()) PyErr_Clear(), fd = -1;
    Py_XDECREF(b), Py_XDECREF(s), Py_XDECREF(f);
    return fd;
}

/* the socket of conn (a protocol.transport.Connection on the standard loop's socket transport)
 * when nothing of it is queued, being written or closing: its fd, with *out (conn._out, empty)
 * and *pending (conn._pending, a Pending) as new references; else -1, nothing set, no exception */
static int idle_fd(PyObject *conn, PyObject **out, PyObject **pending) {
    int fd = -1;
    PyObject *o = NULL, *p = NULL, *t = NULL;
    if (!attr_false(conn, s_writing) || !attr_false(conn, s_write_paused) || !attr_false(conn, s_closed)) return -1;
    if (!(o = PyObject_GetAttr(conn, s_out)) || !PyList_CheckExact(o) || PyList_GET_SIZE(o)) goto end;
    if (!(p = PyObject_GetAttr(conn, s_pending)) || !lane_pending_type || !Py_IS_TYPE(p, lane_pending_type)) goto end;
    if (!(t = PyObject_GetAttr(conn, s_transport)) || t == Py_None) goto end;
    if ((fd = transport_fd(t)) < 0) goto end;
    *out = Py_NewRef(o);
    *pending = Py_NewRef(p);
end:
    if (PyErr_Occurred()) PyErr_Clear(), fd = -1;
    Py_XDECREF(o), Py_XDECREF(p), Py_XDECREF(t);
    return fd;
}

PyObject *lane_direct_conn(Lane *self, PyObject *addr) {
    return PyObject_CallOneArg(self->direct_conn, addr);  /* ClientInstance._direct_conn */
}

int lane_direct_send(Lane *self, PyObject *conn, const char *frame, Py_ssize_t n, int64_t key, PyObject *w,
                     PyObject *timeout) {
    PyObject *out = NULL, *pending = NULL, *rest = NULL, *okey = NULL;
    int rc = 0;
    /* ---- from the frame's writing (the caller's) to the end of the send, no Python code runs,
     * so no other thread does: the lane's scratch buffer is this put's, the checks still hold ---- */
    if (self->head) goto done;  /* another thread put into the lane meanwhile: after it */
    int fd = idle_fd(conn, &out, &pending);
    if (fd < 0) goto done;
    /* the frame's copy, first in conn._out before a byte is written: the rest of a partial write
     * (every allocation is made here, where a failure still leaves nothing written) */
    if (!(rest = PyBytes_FromStringAndSize(frame, n)) || (w && !(okey = PyLong_FromLongLong(key)))
        || PyList_Append(out, rest))
        goto fail;
    if (w && pt_put((pt_table *)pending, key, w)) {  /* registered before the answer can come */
        PyList_SetSlice(out, 0, 1, NULL);
        goto fail;
    }
    ssize_t r = send(fd, frame, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r <= 0) {  /* nothing written (EAGAIN, or an error the loop's own write will meet and report) */
        PyObject *back = w ? pt_take((pt_table *)pending, key) : NULL;
        Py_XDECREF(back);  /* (w: still the caller's) */
        if (PyList_SetSlice(out, 0, 1, NULL)) PyErr_Clear();
        goto done;
    }
    int partial = r < n;
    if (partial) {  /* the rest, in place: a fresh bytes object nobody else has seen */
        char *d = PyBytes_AS_STRING(rest);
        memmove(d, d + r, (size_t)(n - r));
        Py_SET_SIZE(rest, n - r);
        d[n - r] = 0;
    } else if (PyList_SetSlice(out, 0, 1, NULL)) {  /* (a shrink: it does not fail in practice) */
        PyErr_Clear();
        PyList_SetItem(out, 0, Py_NewRef(s_empty));  /* an empty frame writes nothing */
        partial = 1;                                 /* and its flush is asked for */
    }
    /* ---- the frame is on the connection (its rest first in _out) ---- */
    self->direct_frames++;
    rc = 1;
    if (w || partial) {  /* DirectWrites.after: the async send's timer, the rest's flush */
        PyObject *res = PyObject_CallFunctionObjArgs(self->direct_after, conn, w ? okey : Py_None,
                                                     w ? timeout : Py_None, partial ? Py_True : Py_False, NULL);
        if (!res) PyErr_WriteUnraisable(self->direct_after);  /* the frame went: the send stands */
        Py_XDECREF(res);
    }
    goto done;
fail:
    rc = -1;
done:
    Py_XDECREF(rest);
    Py_XDECREF(okey);
    Py_XDECREF(out);
    Py_XDECREF(pending);
    return rc;
}

int lane_direct_gate(Lane *self, long long now) {
    if (!self->direct_conn) return 0;
    long long last = self->last_ns;
    int quiet = now - last >= self->gap_ns || now < last, was = self->quiet;
    self->last_ns = now;
    self->quiet = quiet;
    return quiet && was && !self->head;
}

/* direct(conn_of, after, gap_ns): turn the caller-thread write on (conn_of None: off) */
PyObject *lane_set_direct(Lane *self, PyObject *args) {
    PyObject *conn_of, *after;
    long long gap;
    if (!PyArg_ParseTuple(args, "OOL", &conn_of, &after, &gap)) return NULL;
    if (conn_of == Py_None) {
        Py_CLEAR(self->direct_conn);
        Py_CLEAR(self->direct_after);
    } else {
        Py_XSETREF(self->direct_conn, Py_NewRef(conn_of));
        Py_XSETREF(self->direct_after, Py_NewRef(after));
    }
    self->gap_ns = gap;
    Py_RETURN_NONE;
}

/* write_held(transport, data) -> n: the loop thread's write of a client connection's coalesced
 * frames (protocol/transport.py Connection._flush), as the standard socket transport's write
 * begins it -- "if not self._buffer: try self._sock.send(data)" -- but holding the GIL through
 * the non-blocking send(): the transport's send() lets the GIL go, the caller thread of an async
 * producer takes it, and the loop thread then waits for it up to the switch interval (5 ms) before
 * it can finish the write and read the answers (bench/RESULTS.md, "Session 16, asyncgil16").
 * n bytes of data are on the socket, from its start; the caller hands the rest (all of it when
 * n is 0: not this transport's kind, its buffer not empty, closing, EAGAIN or an error, which
 * the transport's own send meets again and reports) to transport.write, which keeps the order:
 * its buffer was empty, so nothing of the connection was queued before these bytes. */
PyObject *lane_write_held(PyObject *mod, PyObject *const *a, Py_ssize_t na) {
    (void)mod;
    if (na != 2 || !PyBytes_CheckExact(a[1])) return PyLong_FromLong(0);
    PyObject *t = a[0], *w = NULL;
    long n = 0;
    /* (besides transport_fd's: the standard transport itself, no write_eof, no sendfile waiting,
     * each of which its write would refuse or queue behind) */
    if (strcmp(Py_TYPE(t)->tp_name, "_SelectorSocketTransport") || !attr_false(t, s_eof)) goto end;
    if (!(w = PyObject_GetAttr(t, s_empty_waiter)) || w != Py_None) goto end;
    int fd = transport_fd(t);
    if (fd < 0) goto end;
    ssize_t r = send(fd, PyBytes_AS_STRING(a[1]), (size_t)PyBytes_GET_SIZE(a[1]), MSG_DONTWAIT | MSG_NOSIGNAL);
    n = r > 0 ? (long)r : 0;
end:
    if (PyErr_Occurred()) PyErr_Clear();
    Py_XDECREF(w);
    return PyLong_FromLong(n);
}
