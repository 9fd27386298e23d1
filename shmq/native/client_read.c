/*
 * shmq/native/client_read.c -- a client connection's read, in C: ``Reader`` (module
 * shmq.native._answer), the callback shmq/protocol/read_native.py registers with the loop's
 * ``_add_reader`` for the socket in place of asyncio's transport reader.
 *
 * Why: each read of a client connection ran asyncio's ``_SelectorSocketTransport._read_ready``
 * (two Python frames and ``sock.recv``, which allocates a new bytes object), then
 * ``ReadPath.data_received`` (Python) around the C fast hook and the flush: a few thousand
 * instructions of the loop thread per read, and a caught-up consumer or a windowed async
 * producer reads once for every message or few (bench/RESULTS.md, "Session 13, pullcycle13";
 * "Session 14, readc14" has the counts). Here one C call does the common read: ``recv`` into a
 * buffer reused from read to read, ``answers``' scan (remote_answer.c, the same function) over
 * the whole frames from the read's start, and the flush of what their callbacks wrote.
 *
 * A read that ends inside a frame of up to ``size`` bytes keeps that frame's start here, at the
 * head of the buffer, and the next read is received after it and scanned from it (a windowed
 * async sender's reads end inside a frame as often as not). The bytes held back are this
 * reader's or the Python decoder's, never both; ``partial_since`` is set while either holds
 * them, its clock started with the frame as read_path.py starts it (the frame timeout).
 *
 * What stays Python, so that each case is served exactly as asyncio and read_path.py serve it:
 * - a read while the Python decoder holds the start of a frame (a larger frame, or bytes held
 *   before this reader was attached) or after a decoder error: ``conn.data_received(bytes)``;
 * - the rest of a read from the first frame the scan does not take (a complete frame it leaves,
 *   an incomplete frame larger than ``size``, a bad length word): ``conn._read_rest(rest, stop, now)``,
 *   read_path.py's continuation of ``data_received`` after its own fast call, with a copy of
 *   the rest only. Frames are served in their order: the scan serves a prefix, Python the rest;
 * - EOF and read errors: the transport's own ``_read_ready__on_eof()`` and
 *   ``_fatal_error(exc, "Fatal read error on socket transport")``, what ``_read_ready`` calls
 *   after its ``recv``, so ``eof_received`` / ``connection_lost`` run as before; an exception
 *   raised while serving goes to ``_fatal_error`` as asyncio's "data_received() call failed";
 * - pausing and resuming reading (read_native.py: the loop's reader removed and added again;
 *   the transport's own reader stays paused), closing (the transport's ``close`` and
 *   ``_force_close`` remove whatever reads the fd, this reader included, and cancel its handle).
 * Writes stay the transport's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <sys/socket.h>

#include "client_read.h"
#include "conn_dict.h"
#include "remoting_header.h"

typedef struct {
    PyObject_HEAD
    PyObject *conn, *transport, *decoder, *pending, *out, *now;  /* the connection's, fixed for its life */
    int fd;
    Py_ssize_t size;  /* the most one recv reads */
    Py_ssize_t held;  /* the start of a frame kept at buf[0:held] from the reads before */
    char *buf;  /* 2 * size bytes, reused by every read: what is held, then one read */
} Reader;

static PyObject *s_last_activity, *s_partial_since, *s_in_read, *s_error, *s_flush, *s_read_rest,
    *s_data_received, *s_fatal_error, *s_on_eof, *s_read_error, *s_serve_error;

/* the exception raised now to the transport's _fatal_error(exc, why), as asyncio's reader does;
 * SystemExit and KeyboardInterrupt go up as they do there */
static PyObject *fatal(Reader *r, PyObject *why) {
    if (PyErr_ExceptionMatches(PyExc_SystemExit) || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) return NULL;
    PyObject *et, *e, *tb;
    PyErr_Fetch(&et, &e, &tb);
    PyErr_NormalizeException(&et, &e, &tb);
    if (tb) PyException_SetTraceback(e, tb);
    PyObject *res = PyObject_CallMethodObjArgs(r->transport, s_fatal_error, e, why, NULL);
    Py_XDECREF(et), Py_XDECREF(e), Py_XDECREF(tb);
    return res;
}

/* the end of a read served here: _in_read off and the coalesced answers written (data_received's
 * ``finally``); 0, or -1 with an exception. d: the connection's dict (conn_dict.h) */
static int end_read(Reader *r, PyObject *d) {
    if (PyDict_SetItem(d, s_in_read, Py_False)) return -1;
    if (!PyList_GET_SIZE(r->out)) return 0;  /* (what _flush does with nothing to write) */
    PyObject *res = PyObject_CallMethodNoArgs(r->conn, s_flush);
    Py_XDECREF(res);
    return res ? 0 : -1;
}

/* n bytes at r->buf (what was held, then this read), served (the module comment: the common
 * read here, the rest Python's); the connection's attributes read and set in its dict d
 * (conn_dict.h says why) */
static int serve(Reader *r, PyObject *d, Py_ssize_t n) {
    PyObject *partial = cd_get(d, s_partial_since);  /* (borrowed) */
    if (!partial) return -1;
    int mine = partial == Py_None || r->held;  /* nothing held, or held here (not by the decoder) */
    PyObject *error = mine ? PyObject_GetAttr(r->decoder, s_error) : Py_NewRef(Py_None);
    if (!error) return -1;
    mine = mine && error == Py_None;
    Py_DECREF(error);
    PyObject *res;
    if (!mine) {  /* the decoder holds part of a frame (or failed): the Python read, whole */
        r->held = 0;  /* (what was held here, if anything, is in this read's bytes) */
        PyObject *data = PyBytes_FromStringAndSize(r->buf, n);
        res = data ? PyObject_CallMethodOneArg(r->conn, s_data_received, data) : NULL;
        Py_XDECREF(data);
        Py_XDECREF(res);
        return res ? 0 : -1;
    }
    PyObject *now = PyObject_CallNoArgs(r->now);
    if (!now) return -1;
    Py_ssize_t was_held = r->held;
    r->held = 0;
    int rc = -1, stop;
    if (PyDict_SetItem(d, s_last_activity, now) || PyDict_SetItem(d, s_in_read, Py_True)) goto out;
    Py_ssize_t pos = shmq_answers_scan(r->pending, r->buf, n, 0, &stop);
    rc = 0;
    if (pos < 0) {
        rc = -1;
    } else if (pos == n) {  /* every frame taken: the common read */
        if (was_held) rc = PyDict_SetItem(d, s_partial_since, Py_None);
    } else {
        Py_ssize_t tail = n - pos, total = tail >= 4 ? (Py_ssize_t)rh_be32((const uint8_t *)r->buf + pos) : -1;
        if (!stop && (tail < 4 || (total >= 4 && 4 + total <= r->size))) {
            /* the start of a frame that fits the buffer: kept here, and the next read scanned after
             * it (a windowed async sender's reads end inside a frame as often as not); its clock
             * (partial_since: frame_timeout) starts with the frame, as the decoder's does */
            if (pos) memmove(r->buf, r->buf + pos, (size_t)tail);
            r->held = tail;
            if (pos || !was_held) rc = PyDict_SetItem(d, s_partial_since, now);
        } else {  /* from the first frame not taken: read_path.py's, a copy of the rest only */
            PyObject *rest = PyBytes_FromStringAndSize(r->buf + pos, tail);
            res = rest ? PyObject_CallMethodObjArgs(r->conn, s_read_rest, rest, stop ? Py_True : Py_False, now, NULL) : NULL;
            Py_XDECREF(rest);
            Py_XDECREF(res);
            rc = res ? 0 : -1;
        }
    }
    PyObject *et, *e, *tb;  /* (the end of the read runs whatever was raised, as a ``finally``) */
    PyErr_Fetch(&et, &e, &tb);
    if (end_read(r, d)) {
        if (rc) PyErr_Clear();  /* the first exception is the one reported */
        else rc = -1;
    }
    if (et) PyErr_Restore(et, e, tb);
out:
    Py_DECREF(now);
    return rc;
}

/* reader(): one read of the socket, as the loop's reader callback */
static PyObject *reader_call(PyObject *self, PyObject *args, PyObject *kw) {
    (void)args, (void)kw;  /* (the loop calls it with none) */
    Reader *r = (Reader *)self;
    if (!r->buf && !(r->buf = PyMem_Malloc(2 * (size_t)r->size))) return PyErr_NoMemory();
    ssize_t n = recv(r->fd, r->buf + r->held, (size_t)r->size, 0);  /* (held < size: room for a read) */
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) Py_RETURN_NONE;
        PyErr_SetFromErrno(PyExc_OSError);  /* (the exception socket.recv raises: ConnectionResetError...) */
        return fatal(r, s_read_error);
    }
    Py_INCREF(self);  /* (serving may drop the loop's handle, and with it this reader) */
    PyObject *res, *d;
    if (!n) {
        res = PyObject_CallMethodNoArgs(r->transport, s_on_eof);  /* EOF: the transport's own */
    } else {
        d = cd_dict(r->conn);
        res = d && !serve(r, d, r->held + n) ? Py_NewRef(Py_None) : fatal(r, s_serve_error);
        Py_XDECREF(d);
    }
    Py_DECREF(self);
    return res;
}

/* Reader(conn, transport, fd, size) */
static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)kw;
    PyObject *conn, *transport;
    int fd;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "OOin", &conn, &transport, &fd, &size)) return NULL;
    if (size <= 0) { PyErr_SetString(PyExc_ValueError, "size"); return NULL; }
    Reader *r = (Reader *)type->tp_alloc(type, 0);
    if (!r) return NULL;
    r->conn = Py_NewRef(conn);
    r->transport = Py_NewRef(transport);
    r->fd = fd;
    r->size = size;
    if (!(r->decoder = PyObject_GetAttrString(conn, "_decoder")) || !(r->pending = PyObject_GetAttrString(conn, "_pending"))
        || !(r->out = PyObject_GetAttrString(conn, "_out")) || !(r->now = PyObject_GetAttrString(conn, "_now"))) {
        Py_DECREF(r);
        return NULL;
    }
    if (!PyList_CheckExact(r->out)) {
        PyErr_SetString(PyExc_TypeError, "conn._out is not a list");
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

static int reader_traverse(Reader *r, visitproc visit, void *arg) {
    Py_VISIT(r->conn);
    Py_VISIT(r->transport);
    Py_VISIT(r->decoder);
    Py_VISIT(r->pending);
    Py_VISIT(r->out);
    Py_VISIT(r->now);
    return 0;
}

static int reader_clear(Reader *r) {
    Py_CLEAR(r->conn);
    Py_CLEAR(r->transport);
    Py_CLEAR(r->decoder);
    Py_CLEAR(r->pending);
    Py_CLEAR(r->out);
    Py_CLEAR(r->now);
    return 0;
}

static void reader_dealloc(Reader *r) {
    PyObject_GC_UnTrack(r);
    reader_clear(r);
    PyMem_Free(r->buf);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyTypeObject reader_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._answer.Reader",
    .tp_doc = "Reader(conn, transport, fd, size): a client connection's read in C (client_read.c)",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = reader_new,
    .tp_call = reader_call,
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_dealloc = (destructor)reader_dealloc,
};

int shmq_reader_add(PyObject *m) {
#define INTERN(v, s) if (!(v = PyUnicode_InternFromString(s))) return -1
    INTERN(s_last_activity, "last_activity");
    INTERN(s_partial_since, "partial_since");
    INTERN(s_in_read, "_in_read");
    INTERN(s_error, "error");
    INTERN(s_flush, "_flush");
    INTERN(s_read_rest, "_read_rest");
    INTERN(s_data_received, "data_received");
    INTERN(s_fatal_error, "_fatal_error");
    INTERN(s_on_eof, "_read_ready__on_eof");
    INTERN(s_read_error, "Fatal read error on socket transport");
    INTERN(s_serve_error, "Fatal error: protocol.data_received() call failed.");
#undef INTERN
    if (PyType_Ready(&reader_type) < 0) return -1;
    Py_INCREF(&reader_type);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&reader_type) < 0) {
        Py_DECREF(&reader_type);
        return -1;
    }
    return 0;
}
