/*
 * shmq/native/pull_answer.c -- a PushConsumer's PULL answers read straight from the client
 * connection's read buffer (part of shmq.native._answer: remote_answer.c's ``answers``, the
 * connection's fast hook, hands it each complete answer frame whose waiter is a TcpPull).
 *
 * Why: a caught-up TCP consumer gets one PULL answer per message, and the Python path of one
 * (msgspec decode into a RemotingCommand, its ext dict, the opaque's waiter, set_result, the
 * offsets read with int() from the dict, the body sliced into a bytes and decoded) was a large
 * part of the consumer's per-message cost on the loop thread, whose GIL the consume threads
 * share. Here: the header scanned by remoting_header.h (the one scanner, as the async send
 * answers are), the records decoded by hot.c's decode (pull_records.h: the one record decoder)
 * from the read buffer itself, and the TcpPull handed (suggestWhichBrokerId, nextBeginOffset,
 * messages) by one call, ``TcpPull._pulled``: what its Python ``set_result`` -> ``_answered``
 * does with a SUCCESS answer, without the command. minOffset and maxOffset are not read: the
 * consumer reads neither (RocketMQ's DefaultMQPushConsumerImpl reads them only for logging).
 *
 * Taken: a JSON header the scanner reads exactly (escapes refused, as for the async answers),
 * code SUCCESS, the response flag, extFields with suggestWhichBrokerId and nextBeginOffset in
 * the digits-only form Python's int() reads the same way (a repeated key: its last value, as
 * the dict decode keeps), the waiter's opaque the one it has in flight, a queue whose topic is
 * not a retry topic (its messages show their original topic: message_from_view's work; the
 * TcpPull says so by its ``_fast`` slot being None), and a body the C decode takes whole. Any
 * other answer (PULL_NOT_FOUND, RETRY_IMMEDIATELY, OFFSET_MOVED, an error code, a binary header,
 * a compressed or damaged record, a late answer of a stopped chain) is left to the Python
 * decoder untouched, which serves it as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

#include "pull_answer.h"
#include "pull_records.h"
#include "send_frame.h"  /* the frame prefix and decimal writers (sf_prefix, sf_put_int) */

/* TcpPull's slots read here (client/tcp_pull.py): the opaque in flight (0: none),
 * (topic, broker) of a queue whose answers this path may take, or None, and the chain's steady
 * case (pull_steady.c) or None */
enum { P_OPAQUE, P_FAST, P_STEADY, P_N };
static const char *const p_names[P_N] = {"_opaque", "_fast", "_steady"};
static PyTypeObject *pull_type;
static Py_ssize_t p_off[P_N];
static records_fn *records;
static PyObject *s_pulled;
static PyTypeObject pb_type;  /* PullBuild, below */

#define P_SLOT(w, i) (*(PyObject **)((char *)(w) + p_off[i]))

int pull_waiter(PyObject *w) { return pull_type && Py_TYPE(w) == pull_type; }

/* the last value of extFields ``name`` as int() reads it: 0, or -1 (absent, or another form) */
static int field(const header *h, const char *name, int64_t *v) {
    const span *val = NULL;
    for (int i = 0; i < h->n_ext; i++)
        if (rh_is(&h->key[i], name)) val = &h->val[i];
    return val ? rh_field_int(val, INT64_MIN, INT64_MAX, v) : -1;
}

int pull_answer(PyObject *pending, PyObject *key, PyObject *w, const header *h, const uint8_t *body, Py_ssize_t n) {
    if (h->code || !(h->flag & 1) || !h->has_ext) return 0;
    PyObject *opaque = P_SLOT(w, P_OPAQUE), *fast = P_SLOT(w, P_FAST);
    if (!opaque || !PyLong_CheckExact(opaque) || !fast || !PyTuple_CheckExact(fast) || PyTuple_GET_SIZE(fast) != 2)
        return 0;
    int overflow;
    long long mine = PyLong_AsLongLongAndOverflow(opaque, &overflow);
    if (overflow || mine != h->opaque || !mine) return 0;  /* a stopped chain's answer: Python drops it */
    PyObject *topic = PyTuple_GET_ITEM(fast, 0), *broker = PyTuple_GET_ITEM(fast, 1);
    int64_t suggest, next;
    if (!PyUnicode_CheckExact(topic) || !PyUnicode_CheckExact(broker) || field(h, "suggestWhichBrokerId", &suggest) ||
        field(h, "nextBeginOffset", &next))
        return 0;
    PyObject *msgs = records(body, n, topic, broker);
    if (!msgs) return -1;
    if (msgs == Py_None) { Py_DECREF(msgs); return 0; }
    PyObject *s = PyLong_FromLongLong(suggest), *x = s ? PyLong_FromLongLong(next) : NULL;
    int rc = -1;
    if (!x) goto out;
    /* popped as the Python path pops it, then handed the answer; w's reference held for the call */
    Py_INCREF(w);
    if (!PyObject_DelItem(pending, key)) {  /* (the connection's table: pending_table.c) */
        /* the steady case in C (pull_steady.c); anything else _pulled's, with nothing done yet */
        rc = pull_steady(w, &P_SLOT(w, P_OPAQUE), P_SLOT(w, P_STEADY), suggest, next, msgs);
        if (!rc) {
            PyObject *args[4] = {w, s, x, msgs};
            PyObject *r = PyObject_VectorcallMethod(s_pulled, args, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            rc = r ? 1 : -1;  /* _pulled catches what the answer's handling raises: an error here is fatal */
            Py_XDECREF(r);
        }
    }
    Py_DECREF(w);
out:
    Py_XDECREF(s);
    Py_XDECREF(x);
    Py_DECREF(msgs);
    return rc;
}

PyObject *pull_bind(PyObject *self, PyObject *cls) {
    if (!PyType_Check(cls) || ((PyTypeObject *)cls)->tp_dictoffset) {
        PyErr_SetString(PyExc_TypeError, "bind_pull: a class with __slots__ only");
        return NULL;
    }
    Py_ssize_t off[P_N];
    for (int i = 0; i < P_N; i++) {
        PyObject *d = PyObject_GetAttrString(cls, p_names[i]);
        if (!d) return NULL;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok) off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) return PyErr_Format(PyExc_TypeError, "TcpPull.%s is not an object slot", p_names[i]);
    }
    records_fn *fn = PyCapsule_Import(RECORDS_CAPSULE, 0);
    if (!fn) return NULL;
    if (!s_pulled && !(s_pulled = PyUnicode_InternFromString("_pulled"))) return NULL;
    if (PyType_Ready(&pb_type)) return NULL;
    memcpy(p_off, off, sizeof off);
    records = fn;
    Py_XSETREF(pull_type, (PyTypeObject *)Py_NewRef(cls));
    return Py_NewRef((PyObject *)&pb_type);  /* PullBuild, for the chains' steady case */
}

/* The frame of one PULL from its queue's template (client.tcp_pull.PullFrame: ``pieces`` the
 * five literal byte strings of the one JSON encoder's header around its four %d slots,
 * ``order`` which value each slot takes, 0-2 of v's queueOffset, sysFlag, commitOffset and 3 the
 * opaque), byte for byte PullFrame's ``template % values`` (tests/unit/test_tcp_pull.py), with
 * the length words before it. Once per pull of a caught-up consumer, where the %-format, the
 * slot tuple and the join cost ~4,000 instructions. */
static PyObject *frame_of(PyObject *pieces, PyObject *order, const long long v[4]) {
    char digits[4][24];
    size_t dn[4];
    Py_ssize_t hl = 0;
    for (int i = 0; i < 5; i++) {
        PyObject *b = PyTuple_GET_ITEM(pieces, i);
        if (!PyBytes_CheckExact(b)) { PyErr_SetString(PyExc_TypeError, "pull_frame: pieces are bytes"); return NULL; }
        hl += PyBytes_GET_SIZE(b);
    }
    for (int i = 0; i < 4; i++) {
        long k = PyLong_AsLong(PyTuple_GET_ITEM(order, i));
        if (k < 0 || k > 3) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "pull_frame: order holds 0..3");
            return NULL;
        }
        dn[i] = sf_put_int(digits[i], v[k]);  /* "%d" of a Python int */
        hl += (Py_ssize_t)dn[i];
    }
    if (hl > 0xFFFFFF) { PyErr_SetString(PyExc_ValueError, "pull_frame: header too long"); return NULL; }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 8 + hl);
    if (!out) return NULL;
    char *p = PyBytes_AS_STRING(out);
    sf_prefix(p, (size_t)hl, 0);
    p += 8;
    for (int i = 0; i < 5; i++) {
        PyObject *b = PyTuple_GET_ITEM(pieces, i);
        memcpy(p, PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
        p += PyBytes_GET_SIZE(b);
        if (i < 4) { memcpy(p, digits[i], dn[i]); p += dn[i]; }
    }
    return out;
}

static int template_ok(PyObject *pieces, PyObject *order) {
    if (PyTuple_CheckExact(pieces) && PyTuple_GET_SIZE(pieces) == 5 && PyTuple_CheckExact(order) &&
        PyTuple_GET_SIZE(order) == 4)
        return 1;
    PyErr_SetString(PyExc_TypeError, "pull_frame(pieces: 5 bytes, order: 4 ints, (offset, flags, commit), opaque)");
    return 0;
}

/* pull_frame(pieces, order, (queueOffset, sysFlag, commitOffset), opaque): frame_of */
PyObject *pull_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4 || !template_ok(args[0], args[1]) || !PyTuple_CheckExact(args[2]) || PyTuple_GET_SIZE(args[2]) != 3) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "pull_frame: 4 arguments");
        return NULL;
    }
    long long v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = PyLong_AsLongLong(i < 3 ? PyTuple_GET_ITEM(args[2], i) : args[3]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    return frame_of(args[0], args[1], v);
}

/* PullBuild(pieces, order): a queue's template whose three values pull_steady.c sets
 * (pull_build_set) before Connection.start_frame calls it with the opaque: ``build(opaque)`` is
 * frame_of, as TcpPull._frame's pull_frame is, without a Python frame between. */
typedef struct {
    PyObject_HEAD
    PyObject *pieces, *order;
    long long v[3];
    vectorcallfunc vectorcall;
} PullBuild;

static PyObject *pb_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw) {
    PullBuild *b = (PullBuild *)self;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kw && PyTuple_GET_SIZE(kw))) {
        PyErr_SetString(PyExc_TypeError, "PullBuild(opaque)");
        return NULL;
    }
    long long v[4] = {b->v[0], b->v[1], b->v[2], PyLong_AsLongLong(args[0])};
    if (v[3] == -1 && PyErr_Occurred()) return NULL;
    return frame_of(b->pieces, b->order, v);
}

static PyObject *pb_new(PyTypeObject *t, PyObject *args, PyObject *kw) {
    PyObject *pieces, *order;
    if (kw && PyDict_GET_SIZE(kw)) { PyErr_SetString(PyExc_TypeError, "PullBuild(pieces, order)"); return NULL; }
    if (!PyArg_ParseTuple(args, "OO", &pieces, &order) || !template_ok(pieces, order)) return NULL;
    PullBuild *b = (PullBuild *)t->tp_alloc(t, 0);
    if (!b) return NULL;
    b->pieces = Py_NewRef(pieces);
    b->order = Py_NewRef(order);
    b->vectorcall = pb_call;
    return (PyObject *)b;
}

static void pb_dealloc(PyObject *self) {
    PullBuild *b = (PullBuild *)self;
    Py_XDECREF(b->pieces);
    Py_XDECREF(b->order);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject pb_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._answer.PullBuild",
    .tp_basicsize = sizeof(PullBuild),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(PullBuild, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = pb_new,
    .tp_dealloc = pb_dealloc,
    .tp_doc = "PullBuild(pieces, order): a queue's PULL frame for Connection.start_frame (pull_answer.c)",
};

int pull_build_set(PyObject *b, int64_t offset, int64_t flags, int64_t commit) {
    if (Py_TYPE(b) != &pb_type) {
        PyErr_SetString(PyExc_TypeError, "TcpPull._steady: not a PullBuild");
        return -1;
    }
    PullBuild *p = (PullBuild *)b;
    p->v[0] = offset, p->v[1] = flags, p->v[2] = commit;
    return 0;
}
