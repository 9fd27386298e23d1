/*
 * shmq/native/hot_oneway.c -- the TCP producer's oneway lane (module shmq.native._oneway), called
 * with the GIL held by client/oneway.py.
 *
 * Why it exists: a plain oneway send used to cost the caller ~3 us of Python objects and steps
 * (a properties string, a RemoteSend, a job tuple, a lock for the byte count) and the client's
 * loop thread ~1.5 us more (one frame built per message, a list of them, a join). Here one call
 * draws the UNIQ_KEY, reads the clock and writes the whole frame (length words, the queue's
 * template pieces with this send's numbers, the properties JSON, the body) straight into the
 * lane's buffer: no Python object per message. The loop thread takes the buffer of a whole burst
 * as one bytes object (``take``) and writes it in one call.
 *
 * Order: the lane is a list of segments, each the frames for one address, oldest first. A put
 * that cannot go to the open (last) segment opens a new one and appends a marker job to the
 * client's job deque in the same call, so segments and markers are in the same order and a
 * marker's ``take`` is always its own segment. Any other request appended to the deque ``seal``s
 * the open segment after it, so oneways put later go behind that request.
 * Bound: the bytes and frames put and not yet taken (plus what the caller ``charge``s while a
 * connection is opened) never pass max_bytes / max_frames: a put over them queues nothing.
 * Every call runs holding the GIL and never waits, so the two threads see each call whole.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <time.h>
#include "core.h"
#include "uniq_bind.h"
#include "send_frame.h"

enum { ST_NEW = 1, ST_LOOK = 2, ST_FULL = 4, ST_EMONTH = 8, ST_UNSUPPORTED = 16 };


typedef struct seg {
    struct seg *next;
    PyObject *addr;
    char *buf;
    size_t len, cap;
    Py_ssize_t frames;
} seg;

typedef struct {
    PyObject_HEAD
    seg *head, *tail;
    int tail_open;
    Py_ssize_t bytes, frames, max_bytes, max_frames;
    uint32_t opaque;
    uint32_t puts;
    PyObject *append, *mark;
} Lane;

static void seg_free(seg *s) {
    Py_XDECREF(s->addr);
    PyMem_Free(s->buf);
    PyMem_Free(s);
}

static int lane_init(Lane *self, PyObject *args, PyObject *kw) {
    PyObject *append, *mark;
    Py_ssize_t mb, mf;
    if (!PyArg_ParseTuple(args, "OOnn", &append, &mark, &mb, &mf)) return -1;
    Py_INCREF(append);
    Py_INCREF(mark);
    Py_XSETREF(self->append, append);
    Py_XSETREF(self->mark, mark);
    self->max_bytes = mb;
    self->max_frames = mf;
    return 0;
}

static void lane_clear_segs(Lane *self) {
    seg *s = self->head;
    while (s) {
        seg *n = s->next;
        seg_free(s);
        s = n;
    }
    self->head = self->tail = NULL;
    self->tail_open = 0;
    self->bytes = self->frames = 0;
}

static void lane_dealloc(Lane *self) {
    lane_clear_segs(self);
    Py_XDECREF(self->append);
    Py_XDECREF(self->mark);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the segment a put for addr goes to: the open one for the same address, or a new one (its
 * marker job appended to the deque here, in the same GIL-held step) */
static seg *lane_seg(Lane *self, PyObject *addr, int *status) {
    if (self->tail_open && self->tail) {
        PyObject *a = self->tail->addr;
        if (a == addr) return self->tail;
        int eq = PyObject_RichCompareBool(a, addr, Py_EQ);
        if (eq < 0) return NULL;
        if (eq) return self->tail;
    }
    seg *s = PyMem_Calloc(1, sizeof(seg));
    if (!s) return (seg *)PyErr_NoMemory();
    PyObject *job = Py_BuildValue("(OOOi)", addr, self->mark, Py_None, 0);
    PyObject *r = job ? PyObject_CallOneArg(self->append, job) : NULL;
    Py_XDECREF(job);
    if (!r) { PyMem_Free(s); return NULL; }
    Py_DECREF(r);
    Py_INCREF(addr);
    s->addr = addr;
    if (self->tail) self->tail->next = s; else self->head = s;
    self->tail = s;
    self->tail_open = 1;
    *status |= ST_NEW;
    return s;
}

/* put(addr, pieces, sysflag, flag, tags, body) -> status bits: the frame of one plain oneway
 * SEND_MESSAGE_V2 (pieces: the queue's template as 6 literal bytes around the slots sysflag,
 * born ms, flag, properties, opaque; tags: None or a str) written into the lane, or FULL /
 * EMONTH / UNSUPPORTED with nothing written */
static PyObject *lane_put(Lane *self, PyObject *const *a, Py_ssize_t na) {
    sf_pieces pc;
    if (na != 6 || !PyBytes_CheckExact(a[5])) {
        PyErr_SetString(PyExc_TypeError, "put(addr, pieces: 6 bytes, sysflag, flag, tags, body: bytes)");
        return NULL;
    }
    if (sf_pieces_of(a[1], &pc)) return NULL;
    if (!f_uniq) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    if (self->bytes > self->max_bytes || self->frames >= self->max_frames) return PyLong_FromLong(ST_FULL);
    /* every 32nd put first hands back LOOK (the caller looks at the connection's state, which
     * moves by bursts, not by one frame) and is then called again */
    if (!(++self->puts & 31)) return PyLong_FromLong(ST_LOOK);
    long long sysflag = PyLong_AsLongLong(a[2]), flag = PyLong_AsLongLong(a[3]);
    if ((sysflag == -1 || flag == -1) && PyErr_Occurred()) return NULL;
    const char *tags = NULL;
    Py_ssize_t tn = 0, tj = 0;
    if (a[4] != Py_None) {
        if (!PyUnicode_Check(a[4])) { PyErr_SetString(PyExc_TypeError, "tags: str or None"); return NULL; }
        tags = PyUnicode_AsUTF8AndSize(a[4], &tn);
        if (!tags) return NULL;
        if (tn && (tj = sf_tags_json_len(tags, tn)) < 0) return PyLong_FromLong(ST_UNSUPPORTED);
        if (!tn) tags = NULL;
    }
    char id[32];
    if (f_uniq(the_uniq, 1, id)) return PyLong_FromLong(ST_EMONTH);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long born = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    self->opaque = self->opaque % 0x7FFFFFFFu + 1;  /* positive and wrapping, as Connection numbers */
    Py_ssize_t bl = PyBytes_GET_SIZE(a[5]), most = sf_most(&pc, tags, tj, id, bl);
    int status = 0;
    seg *s = lane_seg(self, a[0], &status);
    if (!s) return NULL;
    if (s->len + most > s->cap) {
        size_t cap = s->cap ? s->cap : 65536;
        while (cap < s->len + most) cap *= 2;
        char *b = PyMem_Realloc(s->buf, cap);
        if (!b) return PyErr_NoMemory();
        s->buf = b, s->cap = cap;
    }
    Py_ssize_t n = sf_write(s->buf + s->len, &pc, sysflag, born, flag, tags, tn, id, self->opaque,
                            PyBytes_AS_STRING(a[5]), bl);
    if (n < 0) {  /* nothing committed: s->len is unchanged (an empty new segment stays) */
        PyErr_Format(PyExc_ValueError, "header of %zd bytes does not fit the 24-bit header length", -n);
        return NULL;
    }
    s->len += (size_t)n;
    s->frames++;
    self->bytes += n;
    self->frames++;
    return PyLong_FromLong(status);
}

/* take() -> (addr, frames as bytes) of the oldest segment, or None */
static PyObject *lane_take(Lane *self, PyObject *unused) {
    seg *s = self->head;
    if (!s) Py_RETURN_NONE;
    /* off the lane before anything is allocated: a collection run by the allocation may let
     * another thread put, and that put must go to a segment still on the lane */
    self->head = s->next;
    if (s == self->tail) self->tail = NULL, self->tail_open = 0;
    self->bytes -= (Py_ssize_t)s->len;
    self->frames -= s->frames;
    PyObject *data = PyBytes_FromStringAndSize(s->buf, (Py_ssize_t)s->len);
    PyObject *r = data ? PyTuple_Pack(2, s->addr, data) : NULL;
    Py_XDECREF(data);
    seg_free(s);
    return r;
}

static PyObject *lane_seal(Lane *self, PyObject *unused) {
    self->tail_open = 0;
    Py_RETURN_NONE;
}

/* charge(n): n more (or, negative, fewer) bytes count against the bound: frames taken off the
 * lane and held for a connection being opened */
static PyObject *lane_charge(Lane *self, PyObject *n) {
    Py_ssize_t v = PyLong_AsSsize_t(n);
    if (v == -1 && PyErr_Occurred()) return NULL;
    self->bytes += v;
    Py_RETURN_NONE;
}

static PyObject *lane_full(Lane *self, PyObject *unused) {
    return PyBool_FromLong(self->bytes > self->max_bytes || self->frames >= self->max_frames);
}

static PyObject *lane_clear(Lane *self, PyObject *unused) {
    lane_clear_segs(self);
    Py_RETURN_NONE;
}

static PyObject *lane_queued(Lane *self, void *unused) {
    return Py_BuildValue("(nn)", self->bytes, self->frames);
}

static PyMethodDef lane_methods[] = {
    {"put", (PyCFunction)(void (*)(void))lane_put, METH_FASTCALL, "put(addr, pieces, sysflag, flag, tags, body)"},
    {"take", (PyCFunction)lane_take, METH_NOARGS, "take() -> (addr, bytes) of the oldest segment, or None"},
    {"seal", (PyCFunction)lane_seal, METH_NOARGS, "later puts open a new segment"},
    {"charge", (PyCFunction)lane_charge, METH_O, "charge(n): bytes held elsewhere that count"},
    {"full", (PyCFunction)lane_full, METH_NOARGS, "over the bound"},
    {"clear", (PyCFunction)lane_clear, METH_NOARGS, "drop every segment"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef lane_getset[] = {
    {"queued", (getter)lane_queued, NULL, "(bytes, frames) counted against the bound", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._oneway.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Lane(deque_append, marker, max_bytes, max_frames): a client's queued oneway frames",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)lane_init,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_methods = lane_methods,
    .tp_getset = lane_getset,
};

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)uniq_bind, METH_VARARGS, "bind(shmq_uniq_ids address, shmq_uniq address)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_oneway", NULL, -1, methods};

PyMODINIT_FUNC PyInit__oneway(void) {
    if (PyType_Ready(&LaneType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&LaneType);
    if (PyModule_AddObject(m, "Lane", (PyObject *)&LaneType) < 0) {
        Py_DECREF(&LaneType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "NEW", ST_NEW);
    PyModule_AddIntConstant(m, "LOOK", ST_LOOK);
    PyModule_AddIntConstant(m, "FULL", ST_FULL);
    PyModule_AddIntConstant(m, "EMONTH", ST_EMONTH);
    PyModule_AddIntConstant(m, "UNSUPPORTED", ST_UNSUPPORTED);
    return m;
}
