/*
 * shmq/native/hot_producer.c -- the C base of shmq.client.producer.Producer (exposed as
 * shmq.native._hot.ProducerBase): ``send``, ``send_batch``, ``send_async`` and ``send_oneway``
 * themselves, whose first step is the producer's local C send (``_hot`` / ``_hot_batch``:
 * LocalSend and LocalSend.batch, see hot_send.c) or its plain TCP async or oneway send
 * (``_hot_async``: _oneway's AsyncPlain and its ``oneway``, async_plain.c) and whose every other
 * case is the Python method ``_send`` / ``_send_batch`` / ``_send_async`` / ``_send_oneway``.
 *
 * Why: a local send() is one C call, and the Python frame of Producer.send around it (the frame,
 * the attribute lookup of _hot, the test of its answer) was a sixth of the send's instructions.
 * A C method is called without a frame, straight from the caller's bytecode.
 *
 * Behaviour kept: send(msg, timeout=None), send_batch(msgs, timeout=None) and send_async(msg,
 * callback=None, timeout=None) answer what _send / _send_batch / _send_async answer; _hot /
 * _hot_batch are tried only for a call with the message (or list) alone, _hot_async for a call
 * that binds to (msg, callback, timeout), and their None ("not one I take", nothing sent) hands
 * the call, with the same arguments, to the Python method; an exception from them propagates. A
 * subclass that overrides send, send_batch or send_async replaces these, as it would a Python
 * method.
 */
#include "hot.h"

typedef struct {
    PyObject_HEAD
    PyObject *hot, *hot_batch;  /* callables, or NULL / None: the Python methods alone */
    PyObject *hot_async;        /* send_async's: (msg, callback, timeout) -> its future, or None */
} producer_base;

static PyObject *str_send, *str_send_batch, *str_send_async, *str_send_oneway, *str_oneway, *str_callback, *str_timeout;

/* the Python method ``name`` of self with the call's own arguments: every case the C step did
 * not take */
static PyObject *py_method(PyObject *self, PyObject *name, PyObject *const *args, Py_ssize_t n, PyObject *kwnames) {
    PyObject *m = PyObject_GetAttr(self, name);
    if (!m) return NULL;
    PyObject *r = PyObject_Vectorcall(m, args, n, kwnames);
    Py_DECREF(m);
    return r;
}

/* hot(args[0]) when the call is (one positional argument); then the Python method name */
static PyObject *first_hot(PyObject *self, PyObject *hot, PyObject *name, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames) {
    if (hot && hot != Py_None && PyVectorcall_NARGS(nargsf) == 1 && !kwnames) {
        /* LocalSend's own vectorcall straight, when it has one (it does): PyObject_Vectorcall's
         * thread-state fetch and result check are a tenth of this path's Python overhead */
        vectorcallfunc f = PyVectorcall_Function(hot);
        PyObject *r = f ? f(hot, args, 1, NULL) : PyObject_Vectorcall(hot, args, 1, NULL);
        if (!r) return NULL;
        if (r != Py_None) return r;   /* a SendResult, or NULL with the exception */
        Py_DECREF(r);
    }
    return py_method(self, name, args, PyVectorcall_NARGS(nargsf), kwnames);
}

static PyObject *pb_send(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return first_hot(self, ((producer_base *)self)->hot, str_send, args, nargsf, kwnames);
}

static PyObject *pb_send_batch(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return first_hot(self, ((producer_base *)self)->hot_batch, str_send_batch, args, nargsf, kwnames);
}

/* send_async(msg, callback=None, timeout=None): hot_async(msg, callback, timeout) when the call
 * binds to those parameters (positional or by name; anything else is the Python method's to bind
 * or refuse), then, for its None, the Python method _send_async with the same arguments */
static PyObject *pb_send_async(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *hot = ((producer_base *)self)->hot_async;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (hot && hot != Py_None && n >= 1 && n <= 3) {
        PyObject *a[3] = {args[0], n > 1 ? args[1] : Py_None, n > 2 ? args[2] : Py_None};
        int ok = 1;
        Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
        char seen[3] = {0, n > 1, n > 2};
        for (Py_ssize_t i = 0; i < nk && ok; i++) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, i);
            int at = k == str_callback || PyUnicode_Compare(k, str_callback) == 0 ? 1
                     : k == str_timeout || PyUnicode_Compare(k, str_timeout) == 0 ? 2 : 0;
            if (!at || seen[at]) ok = 0;  /* unknown or given twice: Python's TypeError */
            else seen[at] = 1, a[at] = args[n + i];
        }
        if (PyErr_Occurred()) return NULL;
        if (ok) {
            PyObject *r = PyObject_Vectorcall(hot, a, 3, NULL);
            if (r != Py_None) return r;   /* the future, or NULL with the exception */
            Py_DECREF(r);
        }
    }
    return py_method(self, str_send_async, args, n, kwnames);
}

/* send_oneway(msg): hot_async's ``oneway(msg)`` (the plain case whole, async_plain.c) when the
 * call is the message alone and hot_async has one, then, for its None, the Python method
 * _send_oneway with the same arguments */
static PyObject *pb_send_oneway(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *hot = ((producer_base *)self)->hot_async;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (hot && hot != Py_None && n == 1 && !kwnames && _PyType_Lookup(Py_TYPE(hot), str_oneway)) {
        PyObject *call[2] = {hot, args[0]};
        PyObject *r = PyObject_VectorcallMethod(str_oneway, call, 2, NULL);
        if (!r) return NULL;
        if (r != Py_None) {  /* sent (or dropped, as the Python method drops it): send_oneway's None */
            Py_DECREF(r);
            Py_RETURN_NONE;
        }
        Py_DECREF(r);
    }
    return py_method(self, str_send_oneway, args, n, kwnames);
}

static int pb_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(((producer_base *)self)->hot);
    Py_VISIT(((producer_base *)self)->hot_batch);
    Py_VISIT(((producer_base *)self)->hot_async);
    return 0;
}

static int pb_clear(PyObject *self) {
    Py_CLEAR(((producer_base *)self)->hot);
    Py_CLEAR(((producer_base *)self)->hot_batch);
    Py_CLEAR(((producer_base *)self)->hot_async);
    return 0;
}

static void pb_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    pb_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef pb_methods[] = {
    {"send", (PyCFunction)(void (*)(void))pb_send, METH_FASTCALL | METH_KEYWORDS,
     "send($self, msg, timeout=None)\n--\n\nSend one message and wait for its answer: a SendResult (see _send)."},
    {"send_batch", (PyCFunction)(void (*)(void))pb_send_batch, METH_FASTCALL | METH_KEYWORDS,
     "send_batch($self, msgs, timeout=None)\n--\n\nSend a list of messages of one topic as one batch: a "
     "SendResult (see _send_batch)."},
    {"send_async", (PyCFunction)(void (*)(void))pb_send_async, METH_FASTCALL | METH_KEYWORDS,
     "send_async($self, msg, callback=None, timeout=None)\n--\n\nSend one message without waiting: a SendFuture "
     "of its SendResult; callback(result_or_exception) runs once when it is done (see _send_async)."},
    {"send_oneway", (PyCFunction)(void (*)(void))pb_send_oneway, METH_FASTCALL | METH_KEYWORDS,
     "send_oneway($self, msg)\n--\n\nSend one message with no answer (see _send_oneway)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pb_members[] = {
    {"_hot", T_OBJECT, offsetof(producer_base, hot), 0, "send's first step: message -> SendResult, or None"},
    {"_hot_batch", T_OBJECT, offsetof(producer_base, hot_batch), 0, "send_batch's: list -> SendResult, or None"},
    {"_hot_async", T_OBJECT, offsetof(producer_base, hot_async), 0,
     "send_async's: (msg, callback, timeout) -> its future, or None"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject producer_base_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._hot.ProducerBase",
    .tp_basicsize = sizeof(producer_base),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "send / send_batch of shmq.Producer: the local C send first (see shmq/native/hot_producer.c).",
    .tp_traverse = pb_traverse,
    .tp_clear = pb_clear,
    .tp_dealloc = pb_dealloc,
    .tp_methods = pb_methods,
    .tp_members = pb_members,
    .tp_new = PyType_GenericNew,
};

int shmq_producer_add(PyObject *m) {
    if ((!str_send && !(str_send = PyUnicode_InternFromString("_send"))) ||
        (!str_send_batch && !(str_send_batch = PyUnicode_InternFromString("_send_batch"))) ||
        (!str_send_async && !(str_send_async = PyUnicode_InternFromString("_send_async"))) ||
        (!str_send_oneway && !(str_send_oneway = PyUnicode_InternFromString("_send_oneway"))) ||
        (!str_oneway && !(str_oneway = PyUnicode_InternFromString("oneway"))) ||
        (!str_callback && !(str_callback = PyUnicode_InternFromString("callback"))) ||
        (!str_timeout && !(str_timeout = PyUnicode_InternFromString("timeout"))) ||
        PyType_Ready(&producer_base_type))
        return -1;
    return PyModule_AddObjectRef(m, "ProducerBase", (PyObject *)&producer_base_type);
}
