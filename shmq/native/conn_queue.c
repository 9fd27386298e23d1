/*
 * shmq/native/conn_queue.c -- ``Connection.start_frame`` (shmq/protocol/transport.py) for a
 * client's connections, in C: one request frame numbered, queued on the connection's ``_out``
 * and its waiter put in ``_pending``, the flush arranged as the Python method arranges it.
 *
 * Why: a caught-up TCP PushConsumer queues its next PULL once per message (pull_steady.c) and
 * a sync producer its send once per message (client/request_start.py); called from pull_steady.c
 * the Python method was ~3,600 instructions of the loop thread a call (its method look-up and
 * frame, ten attribute operations, the PULL frame's build ~860). Here the same steps in the same
 * order, the connection's attributes read and set in its dict (conn_dict.h: through the C API's
 * generic attribute operations this cost more than the Python), the waiter put straight into
 * the C table when ``_pending`` is one (pending_table.h): ~2,800 from pull_steady.c, ~3,700 from
 * Python where the Python method is ~4,000 (bench/RESULTS.md, "Session 17, cons17").
 *
 * One way of queueing a frame: the client layer makes this the client connections' method
 * (``transport.use_start_frame``, as it gives them the C pending table), so every caller on a
 * client connection -- Python's ``conn.start_frame(...)`` and pull_steady.c's -- runs it; the
 * Python method stays the server's (and the fallback when the C core is not registered), and
 * tests/unit/test_conn_queue.py holds the two to the same frames, opaques, waiters, flushes and
 * errors. The closed connection's error is the connection's own (``_closed_error``).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "conn_dict.h"
#include "conn_queue.h"
#include "pending_table.h"

extern PyTypeObject shmq_pending_type;

static PyObject *s_closed, *s_transport, *s_next_opaque, *s_out, *s_pending, *s_in_read, *s_flush_scheduled,
    *s_loop, *s_call_soon, *s_flush, *s_last_activity, *s_now, *s_closed_error, *s_start_frame;
static PyObject *method;  /* the module's start_frame: what use_start_frame puts on the class */

/* the attributes are read and set in the connection's instance dict (conn_dict.h says why) */

/* raise conn._closed_error() (RemotingClosed, worded once in transport.py) */
static PyObject *refuse(PyObject *conn) {
    PyObject *e = PyObject_CallMethodNoArgs(conn, s_closed_error);
    if (e) {
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    }
    return NULL;
}

/* conn._next_opaque advanced as Connection._new_opaque numbers (Java's int that wraps; positive) */
static PyObject *next_opaque(PyObject *d, int64_t *opaque) {
    PyObject *v = cd_get(d, s_next_opaque);
    long long was = v ? PyLong_AsLongLong(v) : -1;
    if (was == -1 && PyErr_Occurred()) return NULL;
    *opaque = (was % 0x7FFFFFFF + 0x7FFFFFFF) % 0x7FFFFFFF + 1;  /* (Python's % of a negative too) */
    PyObject *o = PyLong_FromLongLong(*opaque);
    if (o && PyDict_SetItem(d, s_next_opaque, o)) Py_CLEAR(o);
    return o;
}

/* conn._pending[opaque] = waiter: the C table's put, or the mapping's */
static int put_waiter(PyObject *d, PyObject *key, int64_t opaque, PyObject *waiter) {
    PyObject *pending = cd_get(d, s_pending);
    if (!pending) return -1;
    return Py_IS_TYPE(pending, &shmq_pending_type) ? pt_put((pt_table *)pending, opaque, waiter)
                                                   : PyObject_SetItem(pending, key, waiter);
}

/* the flush after this read or turn (Connection.write_frame's rule), and the activity stamp */
static int arrange_flush(PyObject *conn, PyObject *d) {
    int r = cd_truth(d, s_in_read);
    if (!r && !(r = cd_truth(d, s_flush_scheduled))) {
        PyObject *loop = cd_get(d, s_loop), *flush = NULL, *res = NULL;
        if (loop && !PyDict_SetItem(d, s_flush_scheduled, Py_True) && (flush = PyObject_GetAttr(conn, s_flush)))
            res = PyObject_CallMethodOneArg(loop, s_call_soon, flush);
        Py_XDECREF(flush);
        if (!res) return -1;
        Py_DECREF(res);
    }
    if (r < 0) return -1;
    PyObject *clock = cd_get(d, s_now), *now = clock ? PyObject_CallNoArgs(clock) : NULL;
    r = now ? PyDict_SetItem(d, s_last_activity, now) : -1;
    Py_XDECREF(now);
    return r;
}

PyObject *shmq_start_frame(PyObject *conn, PyObject *build, PyObject *waiter) {
    PyObject *d = cd_dict(conn), *key = NULL;
    if (!d) return NULL;
    int r = cd_truth(d, s_closed);
    PyObject *t = r ? NULL : cd_get(d, s_transport);
    if (r < 0 || (!r && !t)) goto out;
    if (r || t == Py_None) {
        refuse(conn);
        goto out;
    }
    int64_t opaque;
    if (!(key = next_opaque(d, &opaque))) goto out;
    PyObject *frame = PyObject_CallOneArg(build, key), *out = frame ? cd_get(d, s_out) : NULL;
    r = !out ? -1 : PyList_CheckExact(out) ? PyList_Append(out, frame) : -1;
    if (out && !PyList_CheckExact(out)) PyErr_SetString(PyExc_TypeError, "conn._out is not a list");
    Py_XDECREF(frame);
    if (r || put_waiter(d, key, opaque, waiter) || arrange_flush(conn, d)) Py_CLEAR(key);
out:
    Py_DECREF(d);
    return key;
}

int shmq_has_start_frame(PyObject *conn) {
    return method && s_start_frame && _PyType_Lookup(Py_TYPE(conn), s_start_frame) == method;  /* (borrowed, cached) */
}

/* conn.start_frame(build, waiter): the method (self is the connection: see below) */
static PyObject *start_frame_fn(PyObject *conn, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "start_frame(build, waiter)");
        return NULL;
    }
    return shmq_start_frame(conn, args[0], args[1]);
}

static PyMethodDef start_frame_def = {"start_frame", (PyCFunction)(void (*)(void))start_frame_fn, METH_FASTCALL,
                                      "start_frame(build, waiter) -> opaque: Connection.start_frame (native/conn_queue.c)"};

int shmq_conn_queue_add(PyObject *m) {
#define INTERN(v, s) if (!(v = PyUnicode_InternFromString(s))) return -1
    INTERN(s_closed, "closed");
    INTERN(s_transport, "_transport");
    INTERN(s_next_opaque, "_next_opaque");
    INTERN(s_out, "_out");
    INTERN(s_pending, "_pending");
    INTERN(s_in_read, "_in_read");
    INTERN(s_flush_scheduled, "_flush_scheduled");
    INTERN(s_loop, "_loop");
    INTERN(s_call_soon, "call_soon");
    INTERN(s_flush, "_flush");
    INTERN(s_last_activity, "last_activity");
    INTERN(s_now, "_now");
    INTERN(s_closed_error, "_closed_error");
    INTERN(s_start_frame, "start_frame");
#undef INTERN
    /* a method descriptor, so that as a class attribute it is called as a def is, with no bound
     * method made per call (an instancemethod wrapper cost ~1,000 instructions a call); its
     * class is ``object`` only so that any instance passes the descriptor's type check */
    PyObject *meth = PyDescr_NewMethod(&PyBaseObject_Type, &start_frame_def);
    if (!meth) return -1;
    if (PyModule_AddObjectRef(m, "start_frame", meth) < 0) {
        Py_DECREF(meth);
        return -1;
    }
    method = meth;  /* (the reference kept for the module's life) */
    return 0;
}
