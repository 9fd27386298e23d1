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
 * and puts it in its segment's waiters (a Run, pending_table.h); ``take`` hands those to the loop thread, which
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
#include "send_frame.h"
#include "async_slots.h"
#include "oneway_lane.h"
#include "pending_table.h"

/* _answer's Pending and Run (bind_pending): a segment's waiters are a Run, a connection's table a Pending */
PyTypeObject *lane_pending_type, *lane_run_type;

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
    Py_XDECREF(self->direct_conn);
    Py_XDECREF(self->direct_after);
    Py_XDECREF(self->spare_run);
    PyMem_Free(self->scratch);
    PyMem_Free(self->spare);
    sf_heads_clear(self->heads);
    PyMem_Free(self->heads);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the lane's header heads (sf_write_kept), made at the first put; NULL (none kept) if that fails */
static sf_head *lane_heads(Lane *self) {
    if (!self->heads) self->heads = PyMem_Calloc(SF_HEADS, sizeof(sf_head));
    return self->heads;
}

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
    if (self->spare) {  /* the last taken segment's buffer (lane_take) */
        s->buf = self->spare, s->cap = self->spare_cap;
        self->spare = NULL, self->spare_cap = 0;
    }
    PyObject *job = Py_BuildValue("(OOOi)", addr, self->mark, Py_None, 0);
    PyObject *r = job ? PyObject_CallOneArg(self->append, job) : NULL;
    Py_XDECREF(job);
    if (!r) { PyMem_Free(s->buf); PyMem_Free(s); return NULL; }
    Py_DECREF(r);
    Py_INCREF(addr);
    s->addr = addr;
    if (self->tail) self->tail->next = s; else self->head = s;
    self->tail = s;
    self->tail_open = 1;
    self->marker_unseen = 1;
    *status |= ST_NEW;
    return s;
}

/* room for ``most`` more bytes in s: 0, or -1 with MemoryError */
static int seg_reserve(seg *s, Py_ssize_t most) {
    if (s->len + (size_t)most <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 65536;
    while (cap < s->len + (size_t)most) cap *= 2;
    char *b = PyMem_Realloc(s->buf, cap);
    if (!b) return PyErr_NoMemory(), -1;
    s->buf = b, s->cap = cap;
    return 0;
}

/* room for ``most`` bytes in the lane's scratch buffer (a frame tried on the socket first) */
static int scratch_reserve(Lane *self, Py_ssize_t most) {
    if ((size_t)most <= self->scap) return 0;
    size_t cap = self->scap ? self->scap : 4096;
    while (cap < (size_t)most) cap *= 2;
    char *b = PyMem_Realloc(self->scratch, cap);
    if (!b) return PyErr_NoMemory(), -1;
    self->scratch = b, self->scap = cap;
    return 0;
}

/* put(addr, pieces, sysflag, flag, tags, body) -> status bits: the frame of one plain oneway
 * SEND_MESSAGE_V2 (pieces: the queue's template as 6 literal bytes around the slots sysflag,
 * born ms, flag, properties, opaque; tags: None or a str) written into the lane, or FULL /
 * EMONTH / UNSUPPORTED with nothing written */
static PyObject *lane_put(Lane *self, PyObject *const *a, Py_ssize_t na) {
    if (na != 6 || !PyBytes_CheckExact(a[5])) {
        PyErr_SetString(PyExc_TypeError, "put(addr, pieces: 6 bytes, sysflag, flag, tags, body: bytes)");
        return NULL;
    }
    return lane_oneway(self, a);
}

PyObject *lane_oneway(Lane *self, PyObject *const *a) {
    sf_pieces pc;
    if (sf_pieces_of(a[1], &pc)) return NULL;
    if (!f_uniq) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    if (self->bytes > self->max_bytes || self->frames >= self->max_frames) return PyLong_FromLong(ST_FULL);
    /* every 32nd put first hands back LOOK (the caller looks at the connection's state, which
     * moves by bursts, not by one frame) and is then called again */
    if (!(++self->puts & 31)) return PyLong_FromLong(ST_LOOK);
    long long sysflag = PyLong_AsLongLong(a[2]), flag = PyLong_AsLongLong(a[3]);
    if ((sysflag == -1 || flag == -1) && PyErr_Occurred()) return NULL;
    const char *tags;
    Py_ssize_t tn, tj;
    int tst = sf_tags_of(a[4], &tags, &tn, &tj);
    if (tst) return tst < 0 ? NULL : PyLong_FromLong(ST_UNSUPPORTED);
    char id[32];
    if (f_uniq(the_uniq, 1, id)) return PyLong_FromLong(ST_EMONTH);
    long long now = lane_now_ns(), born = now / 1000000;  /* (one clock read: the born ms and the gap) */
    self->opaque = self->opaque % 0x7FFFFFFFu + 1;  /* positive and wrapping, as Connection numbers */
    Py_ssize_t bl = PyBytes_GET_SIZE(a[5]), most = sf_most(&pc, tags, tj, id, bl);
    self->last_direct = 0;
    if (lane_direct_gate(self, now)) {  /* the caller's thread writes it (lane_direct.c), or the lane does */
        PyObject *conn = lane_direct_conn(self, a[0]);
        if (!conn) return NULL;
        int r = conn == Py_None ? 0 : scratch_reserve(self, most);
        if (conn != Py_None && !r) {  /* (lane_direct_send: no Python code from sf_write to its send) */
            Py_ssize_t n = sf_write_kept(self->scratch, &pc, sysflag, born, flag, tags, tn, id, self->opaque,
                                         PyBytes_AS_STRING(a[5]), bl, lane_heads(self), a[1]);
            r = n > 0 ? lane_direct_send(self, conn, self->scratch, n, 0, NULL, NULL) : 0;
        }
        Py_DECREF(conn);
        if (r < 0) return NULL;
        if (r) {
            self->last_direct = 1;
            return PyLong_FromLong(0);  /* no segment: no drain to ask for */
        }
    }
    int status = 0;
    seg *s = lane_seg(self, a[0], NULL, &status);
    if (!s) return NULL;
    if (seg_reserve(s, most)) return NULL;
    Py_ssize_t n = sf_write_kept(s->buf + s->len, &pc, sysflag, born, flag, tags, tn, id, self->opaque,
                                 PyBytes_AS_STRING(a[5]), bl, lane_heads(self), a[1]);
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

/* ---- async sends: the waiter, an AsyncSend made here (async_slots.h) ---------------------- */
/* bind_pending(Pending, Run): _answer's types (pending_table.c), once at import */
static PyObject *bind_pending(PyObject *self, PyObject *args) {
    PyObject *p, *r;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &p, &PyType_Type, &r)) return NULL;
    if (((PyTypeObject *)p)->tp_basicsize != sizeof(pt_table) || ((PyTypeObject *)r)->tp_basicsize != sizeof(pt_run)) {
        PyErr_SetString(PyExc_TypeError, "bind_pending: not pending_table.h's types");
        return NULL;
    }
    Py_XSETREF(lane_pending_type, (PyTypeObject *)Py_NewRef(p));
    Py_XSETREF(lane_run_type, (PyTypeObject *)Py_NewRef(r));
    Py_RETURN_NONE;
}

/* AsyncSend's own dealloc, installed by bind_async: its AS_N object slots cleared and the object
 * freed. Why: the class's dealloc as Python made it, subtype_dealloc, is general (the finalizer,
 * weakref and __dict__ checks, each class of the MRO's slots walked by its member table, the
 * base's dealloc looked up): ~300 instructions a send in the caller (RESULTS "Session 13,
 * async13"); this is what it comes to for a class of object slots only, which bind_async checks
 * (as_fast_ok). An instance of a subclass keeps its own subtype_dealloc, which clears the
 * subclass's slots and calls this as its base's; an AsyncSend whose class was given a finalizer
 * after the bind (a __del__ set on it) goes back to the general dealloc. */
static destructor as_general_dealloc;  /* the class's dealloc before bind_async (subtype_dealloc) */
/* freed AsyncSends of the bound class (untracked, every slot NULL), the next puts' (new_waiter):
 * a windowed sender frees one a put on the same thread, and the allocation, its zeroing and the
 * free were ~250 instructions of it. GIL held; emptied when another class is bound. */
#define AS_FREE_MAX 64
static PyObject *as_free[AS_FREE_MAX];
static int as_n_free;

static void as_dealloc(PyObject *w) {
    PyTypeObject *tp = Py_TYPE(w);
    if (tp == as_type && (tp->tp_finalize || tp->tp_del)) {
        as_general_dealloc(w);
        return;
    }
    PyObject_GC_UnTrack(w);
    for (int i = 0; i < AS_N; i++) Py_CLEAR(AS_SLOT(w, i));
    if (tp == as_type && as_n_free < AS_FREE_MAX) as_free[as_n_free++] = w;  /* (a subclass's: freed) */
    else tp->tp_free(w);
    Py_DECREF(tp);  /* (an instance of a heap type holds its type: subtype_dealloc leaves it to the
                     * dealloc of a heap base, this) */
}

/* cls and each base but object: a heap class of slots only (no __dict__, __weakref__ or
 * finalizer), all AS_N object slots and nothing else */
static int as_fast_ok(PyTypeObject *cls) {
    if (cls->tp_basicsize != (Py_ssize_t)(sizeof(PyObject) + AS_N * sizeof(PyObject *)) || !PyType_IS_GC(cls))
        return 0;
    for (PyTypeObject *t = cls; t != &PyBaseObject_Type; t = t->tp_base) {
        if (!t || !(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_dictoffset || t->tp_weaklistoffset ||
            t->tp_finalize || t->tp_del || t->tp_dealloc != cls->tp_dealloc)
            return 0;
    }
    return 1;
}

/* bind_async(AsyncSend): its slots' offsets, once at import; its dealloc made as_dealloc */
static PyObject *bind_async(PyObject *self, PyObject *arg) {
    if (arg != (PyObject *)as_type)
        while (as_n_free) PyObject_GC_Del(as_free[--as_n_free]);  /* (the old class's size) */
    if (as_bind(arg)) return NULL;
    if (as_type->tp_dealloc != as_dealloc) {
        if (!as_fast_ok(as_type)) {
            PyErr_SetString(PyExc_TypeError, "bind_async: AsyncSend is not a class of its object slots only");
            return NULL;
        }
        as_general_dealloc = as_type->tp_dealloc;
        as_type->tp_dealloc = as_dealloc;
    }
    Py_RETURN_NONE;
}

/* AsyncSend.result(timeout=None), its common case in C: a send answered SUCCESS (the state
 * _OK, 1, the SendResult in _value) is its value, as SendFuture.result returns it; any other
 * state (pending: wait; failed: raise) is SendFuture.result's own Python, called as is. The
 * caller of a windowed async sender calls it once per send: its Python frame was ~400
 * instructions of a ~16k send. */
static PyObject *result_slow;  /* SendFuture.result (the Python function) */

static PyObject *as_result(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *st = AS_SLOT(self, AS_STATE), *v = AS_SLOT(self, AS_VALUE);
    if (nargs <= 1 && !kwnames && st && PyLong_CheckExact(st) && v && PyLong_AsLong(st) == 1)
        return Py_NewRef(v);
    PyErr_Clear();  /* (an odd state: the Python method says what it is) */
    /* SendFuture.result(self, *args, **kw): the Python method binds (and refuses) the arguments */
    PyObject *full[8];
    Py_ssize_t k = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs + k > 7) { PyErr_SetString(PyExc_TypeError, "result(timeout=None)"); return NULL; }
    full[0] = NULL, full[1] = self;
    for (Py_ssize_t i = 0; i < nargs + k; i++) full[2 + i] = args[i];
    return PyObject_Vectorcall(result_slow, full + 1, (size_t)(1 + nargs) | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
}

static PyMethodDef as_result_def = {"result", (PyCFunction)(void (*)(void))as_result, METH_FASTCALL | METH_KEYWORDS,
                                    "result(timeout=None): the SendResult, waiting up to timeout s (SendFuture.result)"};

/* bind_result(SendFuture.result) -> the method descriptor of AsyncSend (bind_async's class)
 * that AsyncSend.result is set to */
static PyObject *bind_result(PyObject *self, PyObject *fn) {
    if (!as_type) { PyErr_SetString(PyExc_RuntimeError, "bind_async first"); return NULL; }
    if (!PyFunction_Check(fn)) { PyErr_SetString(PyExc_TypeError, "bind_result(a Python function)"); return NULL; }
    Py_XSETREF(result_slow, Py_NewRef(fn));
    return PyDescr_NewMethod(as_type, &as_result_def);
}

/* a pending AsyncSend with what SendFuture.__init__ and AsyncSend.__init__ set (vals: AS_CALLBACK
 * on; AS_STATE's 0 made here); its _value is unset until it is done, as there */
static PyObject *new_waiter(PyObject *const *vals) {
    PyObject *w = as_n_free ? as_free[--as_n_free] : NULL;
    if (w) PyObject_Init(w, as_type);  /* (the type's reference and the object's, as tp_alloc) */
    else if (!(w = as_type->tp_alloc(as_type, 0))) return NULL;  /* (tracked) */
    AS_SLOT(w, AS_STATE) = PyLong_FromLong(0);
    for (int i = AS_CALLBACK; i < AS_N; i++) AS_SLOT(w, i) = Py_NewRef(vals[i]);
    if (!PyObject_GC_IsTracked(w)) PyObject_GC_Track(w);
    return w;
}

/* put_async(addr, pieces, flag, tags, body, msg, producer, callback, mq, timeout, left) -> the
 * AsyncSend of one plain async SEND_MESSAGE_V2 of ``msg`` (pieces: the queue's template, not
 * oneway; flag, tags, body: msg's) written into the lane with its opaque and its waiter
 * registered in its segment; or an int, FULL / EMONTH / UNSUPPORTED, with nothing written. The
 * waiter's req is ``msg``: what a retry rebuilds its request from (AsyncSend.submit), as Java's
 * async send retries with the message object it was given. */
static PyObject *lane_put_async(Lane *self, PyObject *const *a, Py_ssize_t na) {
    if (na != 11 || !PyBytes_CheckExact(a[4])) {
        PyErr_SetString(PyExc_TypeError, "put_async(addr, pieces, flag, tags, body: bytes, msg, producer, callback, "
                                         "mq, timeout, left)");
        return NULL;
    }
    return lane_async(self, a);
}

/* the 32 characters of a UNIQ_KEY (hex: ASCII) as a str: PyUnicode_DecodeASCII's result, made
 * without its decoder (a compact ASCII str filled in place, the bytes checked 8 at a time) */
static PyObject *ascii32(const char *id) {
    uint64_t w[4];
    memcpy(w, id, 32);
    if ((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ULL) return PyUnicode_DecodeASCII(id, 32, NULL);  /* (its error) */
    PyObject *s = PyUnicode_New(32, 127);
    if (s) memcpy(PyUnicode_1BYTE_DATA(s), id, 32);
    return s;
}

/* an unused (empty) Run back as the lane's spare, or released (its dealloc runs no Python code) */
static void keep_run(Lane *self, PyObject *run) {
    if (!run) return;
    if (!self->spare_run) self->spare_run = run;
    else Py_DECREF(run);
}

PyObject *lane_async(Lane *self, PyObject *const *a) {
    sf_pieces pc;
    if (sf_pieces_of(a[1], &pc)) return NULL;
    if (!f_uniq || !as_type || !lane_run_type) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    if (self->bytes > self->max_bytes || self->frames >= self->max_frames) return PyLong_FromLong(ST_FULL);
    long long flag = PyLong_AsLongLong(a[2]);
    if (flag == -1 && PyErr_Occurred()) return NULL;
    const char *tags;
    Py_ssize_t tn, tj;
    int tst = sf_tags_of(a[3], &tags, &tn, &tj);
    if (tst) return tst < 0 ? NULL : PyLong_FromLong(ST_UNSUPPORTED);
    char id[32];
    if (f_uniq(the_uniq, 1, id)) return PyLong_FromLong(ST_EMONTH);
    long long now = lane_now_ns(), born = now / 1000000;  /* (one clock read: the born ms and the gap) */
    Py_ssize_t bl = PyBytes_GET_SIZE(a[4]), most = sf_most(&pc, tags, tj, id, bl), n;
    uint32_t next = self->aopaque % 0x7FFFFFFFu + 1;
    int64_t key = -(int64_t)next;  /* (no int object: the waiter's key in the Run and the Pending) */
    PyObject *uniq = ascii32(id);
    PyObject *w = NULL, *run = NULL;
    if (uniq) {
        PyObject *vals[AS_N] = {NULL, NULL, a[7], Py_None, Py_None, a[6], a[8], a[5], uniq, a[9], a[10]};
        w = new_waiter(vals);
    }
    Py_XDECREF(uniq);
    if (!w) goto fail;
    self->last_direct = 0;
    /* the opaque is this put's from here: a put of another thread while this one runs Python
     * code (_direct_conn) draws the next */
    self->aopaque = next;
    if (lane_direct_gate(self, now)) {  /* the caller's thread writes it (lane_direct.c), or the lane does */
        PyObject *conn = lane_direct_conn(self, a[0]);
        if (!conn) goto fail;
        int r = conn == Py_None ? 0 : scratch_reserve(self, most);
        if (conn != Py_None && !r) {  /* (lane_direct_send: no Python code from sf_write to its send) */
            n = sf_write_kept(self->scratch, &pc, 0, born, flag, tags, tn, id, key, PyBytes_AS_STRING(a[4]), bl,
                              lane_heads(self), a[1]);
            r = n > 0 ? lane_direct_send(self, conn, self->scratch, n, key, w, a[9]) : 0;
        }
        Py_DECREF(conn);
        if (r < 0) goto fail;
        if (r) {
            self->last_direct = 1;
            return w;
        }
    }
    /* the Run a new segment needs, made before lane_seg: from lane_seg's return to the write no
     * Python code may run, for the loop thread's take frees the segment. A GC object's allocation
     * may collect (CPython 3.11), a finalizer then runs Python code and the GIL may pass to the
     * loop thread: a Run made after lane_seg went into a segment taken and freed meanwhile, and
     * the put's frame and waiter were lost (test_async_lane.py's finalizer test). Kept
     * for the next put when the segment has one; taken off the lane first: a put of another
     * thread in lane_seg's Python code (the marker's append) must not use the same one. */
    run = self->spare_run;
    self->spare_run = NULL;
    if (!run && !(run = lane_run_type->tp_alloc(lane_run_type, 0))) goto fail;
    int status = 0;
    seg *s = lane_seg(self, a[0], a[9], &status);
    if (!s || seg_reserve(s, most)) goto fail;
    /* a Run (pending_table.h): the waiter and its opaque appended, no int or dict entry; its
     * arrays made at the size the last taken segment's reached (a burst's holds some hundred) */
    if (!s->waiters) s->waiters = run, run = NULL;
    /* registered, then written (nothing after the write can fail): a frame in the lane always
     * has its waiter */
    if (pt_run_add((pt_run *)s->waiters, key, w, self->wait_hint)) goto fail;
    n = sf_write_kept(s->buf + s->len, &pc, 0, born, flag, tags, tn, id, key, PyBytes_AS_STRING(a[4]), bl,
                      lane_heads(self), a[1]);
    if (n < 0) {  /* (never, for a template's pieces: the header is far below 16 MiB) */
        pt_run_pop((pt_run *)s->waiters);
        PyErr_Format(PyExc_ValueError, "header of %zd bytes does not fit the 24-bit header length", -n);
        goto fail;
    }
    if (!s->timeout) s->timeout = Py_NewRef(a[9]);
    s->len += (size_t)n;
    s->frames++;
    self->bytes += n;
    self->frames++;
    keep_run(self, run);
    return w;
fail:
    keep_run(self, run);
    Py_XDECREF(w);
    return NULL;
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
    Py_ssize_t some = s->waiters ? ((pt_run *)s->waiters)->n : 0;
    if (some) self->wait_hint = Py_MIN(some, 8192);  /* (one large burst: one large run) */
    PyObject *r = data ? PyTuple_Pack(4, s->addr, data, some ? s->waiters : Py_None, some ? s->timeout : Py_None)
                       : NULL;
    Py_XDECREF(data);
    /* its buffer kept for the next segment (the larger of two): a burst's segment is some
     * hundred KiB, which malloc maps anew (page faults) and grows by reallocation every time */
    if (s->buf && s->cap > self->spare_cap) {
        PyMem_Free(self->spare);
        self->spare = s->buf, self->spare_cap = s->cap;
        s->buf = NULL;
    }
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

static PyObject *lane_last_direct(Lane *self, void *unused) {
    return PyBool_FromLong(self->last_direct);
}

static PyObject *lane_direct_frames(Lane *self, void *unused) {
    return PyLong_FromUnsignedLongLong(self->direct_frames);
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
    {"direct", (PyCFunction)lane_set_direct, METH_VARARGS,
     "direct(conn_of, after, gap_ns): a put may write its frame from the caller's thread (conn_of None: never)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef lane_getset[] = {
    {"queued", (getter)lane_queued, NULL, "(bytes, frames) counted against the bound", NULL},
    {"last_direct", (getter)lane_last_direct, NULL, "the last put's frame was written from the caller's thread", NULL},
    {"direct_frames", (getter)lane_direct_frames, NULL, "frames written from the callers' threads", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef lane_members[] = {
    {"hooked", T_BOOL, offsetof(Lane, hooked), 0, "its client signs requests (ClientInstance.rpc_hook set)"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject shmq_lane_type = {
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
    .tp_members = lane_members,
};

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)uniq_bind, METH_VARARGS, "bind(shmq_uniq_ids address, shmq_uniq address)"},
    {"bind_async", (PyCFunction)bind_async, METH_O, "bind_async(AsyncSend): the waiter put_async makes"},
    {"bind_pending", (PyCFunction)bind_pending, METH_VARARGS, "bind_pending(Pending, Run): _answer's tables"},
    {"bind_result", (PyCFunction)bind_result, METH_O,
     "bind_result(SendFuture.result) -> AsyncSend.result's C method (its answered case in C)"},
    {"write_held", (PyCFunction)(void (*)(void))lane_write_held, METH_FASTCALL, "write_held(transport, data) -> n"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_oneway", NULL, -1, methods};

PyMODINIT_FUNC PyInit__oneway(void) {
    if (PyType_Ready(&shmq_lane_type) < 0 || lane_direct_init() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&shmq_lane_type);
    if (PyModule_AddObject(m, "Lane", (PyObject *)&shmq_lane_type) < 0) {
        Py_DECREF(&shmq_lane_type);
        Py_DECREF(m);
        return NULL;
    }
    if (shmq_async_plain_add(m) < 0) {
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
