/*
 * shmq/native/hot_result.c -- shmq.SendResult as a C type (exposed as shmq.native._hot.SendResult,
 * re-exported by shmq.client.message): what every send returns.
 *
 * Why: a local send() is one C call of ~1 us, and the SendResult it returns was a __slots__
 * Python object: its allocation (two ints and an id bytes object besides) and CPython's
 * subtype_dealloc were a fifth of the send. Here a local send's answer is one allocation that
 * holds its raw fields (the 32-char id, the commit-log and queue offsets as C integers), and each
 * is made a Python object when first read: most callers of a fast send read none of them.
 *
 * Behaviour kept from the Python class it replaces: SendResult(status, msg_id, offset_msg_id,
 * queue, queue_offset, transaction_id=None, local_transaction_state=None, store_host=b"",
 * recall_handle=None); the attributes of those names (readable, settable, deletable) and
 * queue_id (queue.queue_id); a msg_id given as bytes is 32*n ASCII ids, read as the
 * comma-joined ids; an offset_msg_id given as an int is a commit-log offset, read as
 * offset_msg_id(store_host, offset) (both formatted by the Python functions bind_result hands
 * over, message._ids_text and msgid.offset_msg_id: each format is defined once); == compares
 * status, msg_id, offset_msg_id, queue, queue_offset, transaction_id and local_transaction_state;
 * unhashable; the same repr; pickles and copies. "store_host" (the keyword) is the 8 bytes the
 * offset msgId is made of, readable as _store_host.
 */
#include "hot.h"
#include "hot_result.h"

typedef struct {
    PyObject_HEAD
    PyObject *status, *msg_id, *offset_msg_id, *queue, *queue_offset, *transaction_id, *local_transaction_state,
        *store_host, *recall_handle;
    int64_t phys, qoff;   /* the raw offsets while R_OFFID / R_QOFF */
    unsigned raw;         /* R_*: which field is still only its raw form (its PyObject * is NULL) */
    char id[32];          /* the raw id while R_ID, or the offset msgId's text while R_OFFTXT */
} result;

/* R_OFFTXT: a TCP answer's offset msgId, its 32 ASCII characters in id (shmq_result_tcp) */
enum { R_ID = 1, R_OFFID = 2, R_QOFF = 4, R_OFFTXT = 8 };

static PyObject *send_ok;       /* SendStatus.SEND_OK */
static PyObject *offset_fn;     /* msgid.offset_msg_id(store_host: bytes, phys: int) -> str */
static PyObject *ids_fn;        /* message._ids_text(32*n ASCII bytes) -> the comma-joined ids */
static PyObject *empty_bytes;

int shmq_result_bound(void) { return send_ok && offset_fn && ids_fn; }

/* bind_result(SendStatus.SEND_OK, msgid.offset_msg_id, message._ids_text) */
static PyObject *bind_result(PyObject *self, PyObject *args) {
    PyObject *ok, *fn, *ids;
    if (!PyArg_ParseTuple(args, "OOO:bind_result", &ok, &fn, &ids)) return NULL;
    if (!PyCallable_Check(fn) || !PyCallable_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "bind_result: the formatters must be callable");
        return NULL;
    }
    Py_XSETREF(send_ok, Py_NewRef(ok));
    Py_XSETREF(offset_fn, Py_NewRef(fn));
    Py_XSETREF(ids_fn, Py_NewRef(ids));
    Py_RETURN_NONE;
}

/* Freed results of the exact type, kept for the next send's (a result is made and freed per
 * send, and malloc and free cost more than filling one): cleared and untracked; touched only
 * with the GIL held. As many as a window of async sends answers in a few reads: the loop
 * thread makes a read's answers (dozens to hundreds) at once and the caller frees them one by
 * one, so with 64 most of a read's came from malloc (85 % of the caller's frees were
 * PyObject_GC_Del); 1,024 of 160 bytes (with the GC head) is a burst, 160 KiB kept at most. */
#define FREE_MAX 1024
static result *free_list[FREE_MAX];
static int n_free;

PyObject *shmq_result_new(const char *ids, Py_ssize_t n, int64_t phys, int64_t qoff, PyObject *mq, PyObject *host) {
    PyObject *many = NULL;
    if (n != 1 && !(many = PyBytes_FromStringAndSize(ids, 32 * n))) return NULL;
    result *r;
    if (n_free) PyObject_Init((PyObject *)(r = free_list[--n_free]), &shmq_result_type);
    else if (!(r = PyObject_GC_New(result, &shmq_result_type))) { Py_XDECREF(many); return NULL; }
    r->status = Py_NewRef(send_ok);
    r->msg_id = many;
    r->offset_msg_id = r->queue_offset = NULL;
    r->queue = Py_NewRef(mq);
    r->transaction_id = Py_NewRef(Py_None);
    r->local_transaction_state = Py_NewRef(Py_None);
    r->store_host = Py_NewRef(host);
    r->recall_handle = Py_NewRef(Py_None);
    r->phys = phys;
    r->qoff = qoff;
    r->raw = R_OFFID | R_QOFF | (many ? 0 : R_ID);
    if (!many) memcpy(r->id, ids, 32);
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

/* SEND_OK's result of a TCP async send's answer (remote_answer.c, through the capsule
 * _hot._result_tcp): msg_id the send's UNIQ_KEY ``uniq`` (NULL: the offset msgId, as
 * send_result's ``uniq or msgId``), offset_msg_id the answer's msgId text (mid, n bytes, ASCII:
 * the header scanner refuses any other byte), queue_offset qoff, the queue mq. The offset msgId
 * of 32 characters and the queue offset are kept raw, made a str and an int when first read:
 * most callers read neither (the producer's loop thread made both for every answer, ~300
 * instructions). Equal to SendResult(SEND_OK, uniq or msgId, msgId, mq, qoff). */
static PyObject *result_tcp(PyObject *uniq, const char *mid, Py_ssize_t n, int64_t qoff, PyObject *mq) {
    if (!send_ok) { PyErr_SetString(PyExc_RuntimeError, "bind_result first"); return NULL; }
    PyObject *text = NULL;
    if ((!uniq || n != 32) && !(text = PyUnicode_FromStringAndSize(mid, n))) return NULL;
    result *r;
    if (n_free) PyObject_Init((PyObject *)(r = free_list[--n_free]), &shmq_result_type);
    else if (!(r = PyObject_GC_New(result, &shmq_result_type))) { Py_XDECREF(text); return NULL; }
    r->status = Py_NewRef(send_ok);
    r->msg_id = Py_NewRef(uniq ? uniq : text);
    r->offset_msg_id = text;  /* (NULL while R_OFFTXT) */
    r->queue = Py_NewRef(mq);
    r->queue_offset = NULL;
    r->transaction_id = Py_NewRef(Py_None);
    r->local_transaction_state = Py_NewRef(Py_None);
    r->store_host = Py_NewRef(empty_bytes);
    r->recall_handle = Py_NewRef(Py_None);
    r->qoff = qoff;
    r->raw = R_QOFF | (text ? 0 : R_OFFTXT);
    if (!text) memcpy(r->id, mid, 32);
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

/* ---- the lazy fields ------------------------------------------------------------------------ */
static PyObject *unset(const char *name) {
    PyErr_Format(PyExc_AttributeError, "'SendResult' object has no attribute '%s'", name);
    return NULL;
}

static PyObject *get_msg_id(result *r, void *unused) {
    if (r->raw & R_ID) {
        PyObject *s = PyUnicode_FromStringAndSize(r->id, 32);
        if (!s) return NULL;
        r->msg_id = s;
        r->raw &= ~R_ID;
    } else if (r->msg_id && PyBytes_CheckExact(r->msg_id)) {
        if (!ids_fn) { PyErr_SetString(PyExc_RuntimeError, "bind_result first"); return NULL; }
        PyObject *s = PyObject_CallOneArg(ids_fn, r->msg_id);
        if (!s) return NULL;
        Py_SETREF(r->msg_id, s);
    }
    return r->msg_id ? Py_NewRef(r->msg_id) : unset("msg_id");
}

static PyObject *get_offset_msg_id(result *r, void *unused) {
    if (r->raw & R_OFFTXT) {
        if (!(r->offset_msg_id = PyUnicode_FromStringAndSize(r->id, 32))) return NULL;
        r->raw &= ~R_OFFTXT;
    }
    if ((r->raw & R_OFFID) || (r->offset_msg_id && PyLong_CheckExact(r->offset_msg_id))) {
        if (!offset_fn) { PyErr_SetString(PyExc_RuntimeError, "bind_result first"); return NULL; }
        if (!r->store_host) return unset("_store_host");
        PyObject *phys = r->raw & R_OFFID ? PyLong_FromLongLong(r->phys) : Py_NewRef(r->offset_msg_id);
        if (!phys) return NULL;
        PyObject *s = PyObject_CallFunctionObjArgs(offset_fn, r->store_host, phys, NULL);
        Py_DECREF(phys);
        if (!s) return NULL;
        Py_XSETREF(r->offset_msg_id, s);
        r->raw &= ~R_OFFID;
    }
    return r->offset_msg_id ? Py_NewRef(r->offset_msg_id) : unset("offset_msg_id");
}

static PyObject *get_queue_offset(result *r, void *unused) {
    if (r->raw & R_QOFF) {
        if (!(r->queue_offset = PyLong_FromLongLong(r->qoff))) return NULL;
        r->raw &= ~R_QOFF;
    }
    return r->queue_offset ? Py_NewRef(r->queue_offset) : unset("queue_offset");
}

/* a set (or a del: v NULL) replaces the raw form too */
static int set_field(PyObject **field, result *r, unsigned raw, PyObject *v) {
    r->raw &= ~raw;
    Py_XSETREF(*field, Py_XNewRef(v));
    return 0;
}
static int set_msg_id(result *r, PyObject *v, void *unused) { return set_field(&r->msg_id, r, R_ID, v); }
static int set_offset_msg_id(result *r, PyObject *v, void *unused) {
    return set_field(&r->offset_msg_id, r, R_OFFID | R_OFFTXT, v);
}
static int set_queue_offset(result *r, PyObject *v, void *unused) {
    return set_field(&r->queue_offset, r, R_QOFF, v);
}

static PyObject *get_queue_id(result *r, void *unused) {
    return r->queue ? PyObject_GetAttrString(r->queue, "queue_id") : unset("queue");
}

/* ---- construction, comparison, repr, pickling ------------------------------------------------ */
static int result_init(result *r, PyObject *args, PyObject *kw) {
    static char *names[] = {"status", "msg_id", "offset_msg_id", "queue", "queue_offset", "transaction_id",
                            "local_transaction_state", "store_host", "recall_handle", NULL};
    PyObject *v[9] = {NULL, NULL, NULL, NULL, NULL, Py_None, Py_None, empty_bytes, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO|OOOO:SendResult", names, &v[0], &v[1], &v[2], &v[3], &v[4],
                                     &v[5], &v[6], &v[7], &v[8]))
        return -1;
    PyObject **f[9] = {&r->status, &r->msg_id, &r->offset_msg_id, &r->queue, &r->queue_offset, &r->transaction_id,
                       &r->local_transaction_state, &r->store_host, &r->recall_handle};
    for (int k = 0; k < 9; k++) Py_XSETREF(*f[k], Py_NewRef(v[k]));
    r->raw = 0;
    return 0;
}

/* SendResult(status, msg_id, offset_msg_id, queue, queue_offset): the five positional arguments
 * each TCP send's answer is made with (remote_answer.c, remote_send.send_result), filled straight
 * into a free-list object as result_init would fill it (the rest at their defaults); any other
 * call (keywords, more or fewer arguments, a subclass) is type.__call__'s: tp_new + result_init.
 * Why: the generic call (its argument tuple, the keyword parser, the zeroed allocation) was the
 * larger part of making an answer's result on the client's loop thread. */
static PyObject *result_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (type != (PyObject *)&shmq_result_type || kwnames || n != 5) {
        Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
        PyObject *t = PyTuple_New(n), *kw = nk ? PyDict_New() : NULL, *r = NULL;
        if (!t || (nk && !kw)) goto out;
        for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(args[i]));
        for (Py_ssize_t i = 0; i < nk; i++)
            if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[n + i])) goto out;
        r = PyType_Type.tp_call(type, t, kw);
    out:
        Py_XDECREF(t);
        Py_XDECREF(kw);
        return r;
    }
    result *r;
    if (n_free) PyObject_Init((PyObject *)(r = free_list[--n_free]), &shmq_result_type);
    else if (!(r = PyObject_GC_New(result, &shmq_result_type))) return NULL;
    r->status = Py_NewRef(args[0]);
    r->msg_id = Py_NewRef(args[1]);
    r->offset_msg_id = Py_NewRef(args[2]);
    r->queue = Py_NewRef(args[3]);
    r->queue_offset = Py_NewRef(args[4]);
    r->transaction_id = Py_NewRef(Py_None);
    r->local_transaction_state = Py_NewRef(Py_None);
    r->store_host = Py_NewRef(empty_bytes);
    r->recall_handle = Py_NewRef(Py_None);
    r->raw = 0;
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

/* (status, msg_id, offset_msg_id, queue, queue_offset, transaction_id, local_transaction_state), read */
static PyObject *fields(result *r) {
    PyObject *id = get_msg_id(r, NULL), *off = id ? get_offset_msg_id(r, NULL) : NULL;
    PyObject *qoff = off ? get_queue_offset(r, NULL) : NULL, *out = NULL;
    if (qoff && r->status && r->queue && r->transaction_id && r->local_transaction_state)
        out = PyTuple_Pack(7, r->status, id, off, r->queue, qoff, r->transaction_id, r->local_transaction_state);
    else if (qoff)
        unset("status");
    Py_XDECREF(id);
    Py_XDECREF(off);
    Py_XDECREF(qoff);
    return out;
}

static PyObject *result_compare(PyObject *a, PyObject *b, int op) {
    if (op != Py_EQ && op != Py_NE) Py_RETURN_NOTIMPLEMENTED;
    if (!PyObject_TypeCheck(b, &shmq_result_type)) return PyBool_FromLong(op == Py_NE);
    PyObject *x = fields((result *)a), *y = x ? fields((result *)b) : NULL, *out = NULL;
    if (y) out = PyObject_RichCompare(x, y, op);
    Py_XDECREF(x);
    Py_XDECREF(y);
    return out;
}

static PyObject *result_repr(result *r) {
    PyObject *t = fields(r);
    if (!t) return NULL;
    PyObject *s = PyUnicode_FromFormat("SendResult(status=%S, msg_id=%R, offset_msg_id=%R, queue=%R, queue_offset=%S)",
                                       PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1), PyTuple_GET_ITEM(t, 2),
                                       PyTuple_GET_ITEM(t, 3), PyTuple_GET_ITEM(t, 4));
    Py_DECREF(t);
    return s;
}

static PyObject *result_reduce(result *r, PyObject *unused) {
    PyObject *t = fields(r);
    if (!t) return NULL;
    if (!r->store_host || !r->recall_handle) { Py_DECREF(t); return unset("store_host"); }
    PyObject *out = Py_BuildValue("(O(OOOOOOOOO))", Py_TYPE(r), PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1),
                                  PyTuple_GET_ITEM(t, 2), PyTuple_GET_ITEM(t, 3), PyTuple_GET_ITEM(t, 4),
                                  PyTuple_GET_ITEM(t, 5), PyTuple_GET_ITEM(t, 6), r->store_host, r->recall_handle);
    Py_DECREF(t);
    return out;
}

/* ---- the type ---------------------------------------------------------------------------------- */
static int result_traverse(result *r, visitproc visit, void *arg) {
    Py_VISIT(r->status); Py_VISIT(r->msg_id); Py_VISIT(r->offset_msg_id); Py_VISIT(r->queue);
    Py_VISIT(r->queue_offset); Py_VISIT(r->transaction_id); Py_VISIT(r->local_transaction_state);
    Py_VISIT(r->store_host); Py_VISIT(r->recall_handle);
    return 0;
}

static int result_clear(result *r) {
    Py_CLEAR(r->status); Py_CLEAR(r->msg_id); Py_CLEAR(r->offset_msg_id); Py_CLEAR(r->queue);
    Py_CLEAR(r->queue_offset); Py_CLEAR(r->transaction_id); Py_CLEAR(r->local_transaction_state);
    Py_CLEAR(r->store_host); Py_CLEAR(r->recall_handle);
    return 0;
}

static void result_dealloc(result *r) {
    PyObject_GC_UnTrack(r);
    result_clear(r);
    if (Py_IS_TYPE(r, &shmq_result_type) && n_free < FREE_MAX) free_list[n_free++] = r;
    else Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMemberDef result_members[] = {
    {"status", T_OBJECT_EX, offsetof(result, status), 0, "a SendStatus"},
    {"queue", T_OBJECT_EX, offsetof(result, queue), 0, "the MessageQueue the message went to"},
    {"transaction_id", T_OBJECT_EX, offsetof(result, transaction_id), 0, NULL},
    {"local_transaction_state", T_OBJECT_EX, offsetof(result, local_transaction_state), 0, NULL},
    {"recall_handle", T_OBJECT_EX, offsetof(result, recall_handle), 0, "a timer message's: what Producer.recall takes"},
    {"_store_host", T_OBJECT_EX, offsetof(result, store_host), 0, "the 8 bytes of the store host (offset_msg_id)"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef result_getset[] = {
    {"msg_id", (getter)get_msg_id, (setter)set_msg_id, "the UNIQ_KEY (a batch's: the comma-joined ids)", NULL},
    {"offset_msg_id", (getter)get_offset_msg_id, (setter)set_offset_msg_id, "store host + commit-log offset", NULL},
    {"queue_offset", (getter)get_queue_offset, (setter)set_queue_offset, NULL, NULL},
    {"queue_id", (getter)get_queue_id, NULL, "queue.queue_id", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef result_methods[] = {
    {"__reduce__", (PyCFunction)result_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject shmq_result_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.SendResult",
    .tp_basicsize = sizeof(result),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "What a send returns. msg_id is the UNIQ_KEY (what Java clients show as msgId; a batch's is the "
              "comma-joined ids), offset_msg_id the store host + commit-log offset; a local send's are "
              "formatted when first read (shmq/native/hot_result.c).",
    .tp_traverse = (traverseproc)result_traverse,
    .tp_clear = (inquiry)result_clear,
    .tp_dealloc = (destructor)result_dealloc,
    .tp_richcompare = result_compare,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_repr = (reprfunc)result_repr,
    .tp_members = result_members,
    .tp_getset = result_getset,
    .tp_methods = result_methods,
    .tp_init = (initproc)result_init,
    .tp_new = PyType_GenericNew,
    .tp_vectorcall = result_vectorcall,
};

static PyMethodDef module_methods[] = {
    {"bind_result", (PyCFunction)bind_result, METH_VARARGS, "bind_result(SEND_OK, offset_msg_id, _ids_text)"},
    {NULL, NULL, 0, NULL},
};

int shmq_result_add(PyObject *m) {
    if (!empty_bytes && !(empty_bytes = PyBytes_FromStringAndSize("", 0))) return -1;
    if (PyType_Ready(&shmq_result_type)) return -1;
    PyObject *cap = PyCapsule_New((void *)result_tcp, SHMQ_RESULT_TCP_CAPSULE, NULL);
    if (!cap || PyModule_AddObject(m, "_result_tcp", cap)) { Py_XDECREF(cap); return -1; }
    return PyModule_AddFunctions(m, module_methods) ? -1 : PyModule_AddObjectRef(m, "SendResult", (PyObject *)&shmq_result_type);
}
