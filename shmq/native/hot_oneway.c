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
 *
 * Async sends (``put_async``, client/async_lane.py) take the same lane, so their frames keep
 * their place among the oneways and the other requests: the call also draws the frame's opaque
 * and makes its waiter (the caller's ``client.remote_send.AsyncSend``, its slots written here)
 * and puts it in its segment's waiters by opaque; ``take`` hands those to the loop thread, which
 * registers them with the connection before it writes the segment. Their opaques are negative
 * (-1, -2, ... as a Java client's counter runs after 2^31 requests), so they never meet the
 * positive ones the connection numbers its other requests with. A segment's async sends share
 * one timeout (a put with another opens a new segment).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <time.h>
#include "core.h"
#include "uniq_bind.h"
#include "async_slots.h"

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

static void seg_free(seg *s) {
    Py_XDECREF(s->addr);
    Py_XDECREF(s->waiters);
    Py_XDECREF(s->timeout);
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

/* the decimal text of v at p (at most 20 characters), two digits a step; returns its length */
static size_t put_int(char *p, long long v) {
    static const char d2[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                             "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                             "8081828384858687888990919293949596979899";
    char tmp[24], *e = tmp + sizeof tmp, *q = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        *--q = d2[2 * r + 1], *--q = d2[2 * r];
    }
    if (u >= 10) *--q = d2[2 * u + 1], *--q = d2[2 * u];
    else *--q = (char)('0' + u);
    if (v < 0) *--q = '-';
    memcpy(p, q, (size_t)(e - q));
    return (size_t)(e - q);
}

/* the JSON-escaped length of tags as msgspec writes a string (" and \ escaped, UTF-8 kept), or -1
 * for a character below 0x20, which the caller leaves to the Python encoder */
static Py_ssize_t tags_json_len(const char *t, Py_ssize_t n) {
    Py_ssize_t out = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c < 0x20) return -1;
        if (c == '"' || c == '\\') out++;
    }
    return out;
}

/* the properties JSON: names from layout.h; \u0001 / \u0002 are the JSON escapes of
 * SHMQ_NAME_VALUE_SEP / SHMQ_PROPERTY_SEP, as msgspec writes them */
static const char TAGS_HEAD[] = "\"" SHMQ_PROP_TAGS "\\u0001", TAGS_END[] = "\\u0002",
                  UNIQ_HEAD[] = SHMQ_PROP_UNIQ_KEY "\\u0001";
#define LIT(s) (sizeof(s) - 1)

/* the segment a put for addr goes to: the open one for the same address (for an async put, one
 * whose async sends have no other timeout), or a new one (its marker job appended to the deque
 * here, in the same GIL-held step) */
static seg *lane_seg(Lane *self, PyObject *addr, PyObject *timeout, int *status) {
    seg *t = self->tail_open ? self->tail : NULL;
    if (t) {
        int eq = t->addr == addr ? 1 : PyObject_RichCompareBool(t->addr, addr, Py_EQ);
        if (eq < 0) return NULL;
        if (eq && timeout && t->timeout && t->timeout != timeout) {
            eq = PyObject_RichCompareBool(t->timeout, timeout, Py_EQ);
            if (eq < 0) return NULL;
        }
        if (eq) return t;
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

/* one frame's inputs, checked: the template's pieces, the tags (UTF-8, NULL for none), the body */
typedef struct {
    PyObject *const *pc;
    Py_ssize_t lit, tn, tj, bl;
    const char *tags, *body;
} frame_in;

/* 0, ST_UNSUPPORTED (a control character in the tags: the Python encoder's), or -1 (raised) */
static int frame_check(PyObject *pieces, PyObject *tags, PyObject *body, frame_in *fi) {
    if (!PyTuple_CheckExact(pieces) || PyTuple_GET_SIZE(pieces) != 6 || !PyBytes_CheckExact(body)) {
        PyErr_SetString(PyExc_TypeError, "pieces: a tuple of 6 bytes, body: bytes");
        return -1;
    }
    fi->pc = &PyTuple_GET_ITEM(pieces, 0);
    fi->lit = 0;
    for (int i = 0; i < 6; i++) {
        if (!PyBytes_CheckExact(fi->pc[i])) { PyErr_SetString(PyExc_TypeError, "pieces: bytes"); return -1; }
        fi->lit += PyBytes_GET_SIZE(fi->pc[i]);
    }
    fi->tags = NULL, fi->tn = fi->tj = 0;
    if (tags != Py_None) {
        if (!PyUnicode_Check(tags)) { PyErr_SetString(PyExc_TypeError, "tags: str or None"); return -1; }
        fi->tags = PyUnicode_AsUTF8AndSize(tags, &fi->tn);
        if (!fi->tags) return -1;
        if (fi->tn && (fi->tj = tags_json_len(fi->tags, fi->tn)) < 0) return ST_UNSUPPORTED;
        if (!fi->tn) fi->tags = NULL;
    }
    fi->body = PyBytes_AS_STRING(body);
    fi->bl = PyBytes_GET_SIZE(body);
    return 0;
}

/* the frame (a SEND_MESSAGE_V2 with the template's pieces around sysflag, born ms, flag, the
 * properties TAGS and UNIQ_KEY = id, opaque) at the end of s; its length, or -1 (raised, nothing
 * committed: s->len is unchanged) */
static Py_ssize_t frame_write(seg *s, const frame_in *fi, long long sysflag, long long flag, long long opaque,
                              const char *id) {
    Py_ssize_t props = 1 + (fi->tags ? LIT(TAGS_HEAD) - 1 + fi->tj + LIT(TAGS_END) : 0) + LIT(UNIQ_HEAD) + 32 + 1;
    Py_ssize_t most = 8 + fi->lit + 4 * 21 + props + fi->bl;  /* the header's numbers at their longest */
    if (s->len + most > s->cap) {
        size_t cap = s->cap ? s->cap : 65536;
        while (cap < s->len + most) cap *= 2;
        char *b = PyMem_Realloc(s->buf, cap);
        if (!b) return PyErr_NoMemory(), -1;
        s->buf = b, s->cap = cap;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long born = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    PyObject *const *pc = fi->pc;
    char *f = s->buf + s->len, *p = f + 8;
#define PIECE(i) (memcpy(p, PyBytes_AS_STRING(pc[i]), PyBytes_GET_SIZE(pc[i])), p += PyBytes_GET_SIZE(pc[i]))
    PIECE(0); p += put_int(p, sysflag);
    PIECE(1); p += put_int(p, born);
    PIECE(2); p += put_int(p, flag);
    PIECE(3);
    if (fi->tags) {
        memcpy(p, TAGS_HEAD, LIT(TAGS_HEAD)), p += LIT(TAGS_HEAD);
        for (Py_ssize_t i = 0; i < fi->tn; i++) {
            if (fi->tags[i] == '"' || fi->tags[i] == '\\') *p++ = '\\';
            *p++ = fi->tags[i];
        }
        memcpy(p, TAGS_END, LIT(TAGS_END)), p += LIT(TAGS_END);
    } else {
        *p++ = '"';
    }
    memcpy(p, UNIQ_HEAD, LIT(UNIQ_HEAD)), p += LIT(UNIQ_HEAD);
    memcpy(p, id, 32), p += 32;
    *p++ = '"';
    PIECE(4); p += put_int(p, opaque);
    PIECE(5);
#undef PIECE
    size_t hl = (size_t)(p - f - 8);
    if (hl > 0xFFFFFF) {
        PyErr_Format(PyExc_ValueError, "header of %zu bytes does not fit the 24-bit header length", hl);
        return -1;
    }
    memcpy(p, fi->body, fi->bl), p += fi->bl;
    uint32_t total = (uint32_t)(4 + hl + fi->bl), h = (uint32_t)hl;  /* serialize type JSON: 0 */
    unsigned char w[8] = {total >> 24, total >> 16, total >> 8, total, h >> 24, h >> 16, h >> 8, h};
    memcpy(f, w, 8);
    s->len += (size_t)(p - f);
    s->frames++;
    return p - f;
}

/* put(addr, pieces, sysflag, flag, tags, body) -> status bits: the frame of one plain oneway
 * SEND_MESSAGE_V2 (pieces: the queue's oneway template as 6 literal bytes around the slots
 * sysflag, born ms, flag, properties, opaque; tags: None or a str) written into the lane, or
 * FULL / EMONTH / UNSUPPORTED with nothing written */
static PyObject *lane_put(Lane *self, PyObject *const *a, Py_ssize_t na) {
    if (na != 6) { PyErr_SetString(PyExc_TypeError, "put(addr, pieces, sysflag, flag, tags, body)"); return NULL; }
    if (!f_uniq) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    if (self->bytes > self->max_bytes || self->frames >= self->max_frames) return PyLong_FromLong(ST_FULL);
    /* every 32nd put first hands back LOOK (the caller looks at the connection's state, which
     * moves by bursts, not by one frame) and is then called again */
    if (!(++self->puts & 31)) return PyLong_FromLong(ST_LOOK);
    long long sysflag = PyLong_AsLongLong(a[2]), flag = PyLong_AsLongLong(a[3]);
    if ((sysflag == -1 || flag == -1) && PyErr_Occurred()) return NULL;
    frame_in fi;
    int rc = frame_check(a[1], a[4], a[5], &fi);
    if (rc) return rc < 0 ? NULL : PyLong_FromLong(rc);
    char id[32];
    if (f_uniq(the_uniq, 1, id)) return PyLong_FromLong(ST_EMONTH);
    self->opaque = self->opaque % 0x7FFFFFFFu + 1;  /* positive and wrapping, as Connection numbers */
    int status = 0;
    seg *s = lane_seg(self, a[0], NULL, &status);
    if (!s) return NULL;
    Py_ssize_t n = frame_write(s, &fi, sysflag, flag, self->opaque, id);
    if (n < 0) return NULL;  /* (an empty new segment stays: its marker takes nothing) */
    self->bytes += n;
    self->frames++;
    return PyLong_FromLong(status);
}

/* ---- async sends: the waiter, an AsyncSend made here (async_slots.h) ---------------------- */
/* bind_async(AsyncSend): its slots' offsets, once at import */
static PyObject *bind_async(PyObject *self, PyObject *arg) {
    if (as_bind(arg)) return NULL;
    Py_RETURN_NONE;
}

/* a pending AsyncSend with what SendFuture.__init__ and AsyncSend.__init__ set (vals: AS_CALLBACK
 * on; AS_STATE's 0 made here); its _value is unset until it is done, as there */
static PyObject *new_waiter(PyObject *const *vals) {
    PyObject *w = as_type->tp_alloc(as_type, 0);
    if (!w) return NULL;
    AS_SLOT(w, AS_STATE) = PyLong_FromLong(0);
    for (int i = AS_CALLBACK; i < AS_N; i++) AS_SLOT(w, i) = Py_NewRef(vals[i]);
    return w;
}

/* put_async(addr, pieces, flag, tags, body, msg, producer, callback, mq, timeout, left) -> the
 * AsyncSend of one plain async SEND_MESSAGE_V2 of ``msg`` (pieces: the queue's template, not
 * oneway; flag, tags, body: msg's) written into the lane with its opaque and its waiter
 * registered in its segment; or an int, FULL / EMONTH / UNSUPPORTED, with nothing written. The
 * waiter's req is ``msg``: what a retry rebuilds its request from (AsyncSend.submit), as Java's
 * async send retries with the message object it was given. */
static PyObject *lane_put_async(Lane *self, PyObject *const *a, Py_ssize_t na) {
    if (na != 11) {
        PyErr_SetString(PyExc_TypeError, "put_async(addr, pieces, flag, tags, body, msg, producer, callback, mq, "
                                         "timeout, left)");
        return NULL;
    }
    if (!f_uniq || !as_type) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    if (self->bytes > self->max_bytes || self->frames >= self->max_frames) return PyLong_FromLong(ST_FULL);
    long long flag = PyLong_AsLongLong(a[2]);
    if (flag == -1 && PyErr_Occurred()) return NULL;
    frame_in fi;
    int rc = frame_check(a[1], a[3], a[4], &fi);
    if (rc) return rc < 0 ? NULL : PyLong_FromLong(rc);
    char id[32];
    if (f_uniq(the_uniq, 1, id)) return PyLong_FromLong(ST_EMONTH);
    int status = 0;
    seg *s = lane_seg(self, a[0], a[9], &status);
    if (!s) return NULL;
    if (!s->waiters && !(s->waiters = PyDict_New())) return NULL;
    uint32_t next = self->aopaque % 0x7FFFFFFFu + 1;
    PyObject *key = PyLong_FromLongLong(-(long long)next);
    PyObject *uniq = key ? PyUnicode_DecodeASCII(id, 32, NULL) : NULL;
    PyObject *w = NULL;
    if (uniq) {
        PyObject *vals[AS_N] = {NULL, NULL, a[7], Py_None, Py_None, a[6], a[8], a[5], uniq, a[9], a[10]};
        w = new_waiter(vals);
    }
    /* registered, then written: a frame in the lane always has its waiter */
    Py_ssize_t n = -1;
    if (w && !PyDict_SetItem(s->waiters, key, w) && (n = frame_write(s, &fi, 0, flag, -(long long)next, id)) < 0) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (PyDict_DelItem(s->waiters, key)) PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    if (n < 0) {
        Py_CLEAR(w);
    } else {
        self->aopaque = next;
        if (!s->timeout) s->timeout = Py_NewRef(a[9]);
        self->bytes += n;
        self->frames++;
    }
    Py_XDECREF(key);
    Py_XDECREF(uniq);
    return w;
}

/* take() -> (addr, frames as bytes, waiters, timeout) of the oldest segment, or None; waiters:
 * its async sends' by opaque (a dict) and their timeout, or None, None */
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
    int some = s->waiters && PyDict_GET_SIZE(s->waiters);
    PyObject *r = data ? PyTuple_Pack(4, s->addr, data, some ? s->waiters : Py_None, some ? s->timeout : Py_None)
                       : NULL;
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
    {"put_async", (PyCFunction)(void (*)(void))lane_put_async, METH_FASTCALL,
     "put_async(addr, pieces, flag, tags, body, msg, producer, callback, mq, timeout, left) -> AsyncSend or status"},
    {"take", (PyCFunction)lane_take, METH_NOARGS, "take() -> (addr, bytes, waiters, timeout) of the oldest segment, or None"},
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
    {"bind_async", (PyCFunction)bind_async, METH_O, "bind_async(AsyncSend): the waiter put_async makes"},
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
