/*
 * shmq/native/hot_producer.c -- the C base of shmq.client.producer.Producer (exposed as
 * shmq.native._hot.ProducerBase): ``send`` and ``send_batch`` themselves, whose first step is
 * the producer's local C send (``_hot`` / ``_hot_batch``: LocalSend and LocalSend.batch, see
 * hot_send.c) and whose every other case is the Python method ``_send`` / ``_send_batch``.
 *
 * Why: a local send() is one C call, and the Python frame of Producer.send around it (the frame,
 * the attribute lookup of _hot, the test of its answer) was a sixth of the send's instructions.
 * A C method is called without a frame, straight from the caller's bytecode.
 *
 * Behaviour kept: send(msg, timeout=None) and send_batch(msgs, timeout=None) answer what
 * _send / _send_batch answer; _hot / _hot_batch are tried only for a call with the message (or
 * list) alone, and their None ("not one I take", nothing stored) hands the call, with the same
 * arguments, to the Python method; an exception from them propagates. A subclass that overrides
 * send or send_batch replaces these, as it would a Python method.
 */
#include "hot.h"

typedef struct {
    PyObject_HEAD
    PyObject *hot, *hot_batch;  /* callables, or NULL / None: the Python methods alone */
} producer_base;

static PyObject *str_send, *str_send_batch;

/* hot(args[0]) when the call is (one positional argument); then the Python method name */
static PyObject *first_hot(PyObject *self, PyObject *hot, PyObject *name, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames) {
    if (hot && hot != Py_None && PyVectorcall_NARGS(nargsf) == 1 && !kwnames) {
        PyObject *r = PyObject_Vectorcall(hot, args, 1, NULL);
        if (r != Py_None) return r;   /* a SendResult, or NULL with the exception */
        Py_DECREF(r);
    }
    PyObject *m = PyObject_GetAttr(self, name);
    if (!m) return NULL;
    PyObject *r = PyObject_Vectorcall(m, args, PyVectorcall_NARGS(nargsf), kwnames);
    Py_DECREF(m);
    return r;
}

static PyObject *pb_send(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return first_hot(self, ((producer_base *)self)->hot, str_send, args, nargsf, kwnames);
}

static PyObject *pb_send_batch(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return first_hot(self, ((producer_base *)self)->hot_batch, str_send_batch, args, nargsf, kwnames);
}

static int pb_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(((producer_base *)self)->hot);
    Py_VISIT(((producer_base *)self)->hot_batch);
    return 0;
}

static int pb_clear(PyObject *self) {
    Py_CLEAR(((producer_base *)self)->hot);
    Py_CLEAR(((producer_base *)self)->hot_batch);
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
    {NULL, NULL, 0, NULL},
};

static PyMemberDef pb_members[] = {
    {"_hot", T_OBJECT, offsetof(producer_base, hot), 0, "send's first step: message -> SendResult, or None"},
    {"_hot_batch", T_OBJECT, offsetof(producer_base, hot_batch), 0, "send_batch's: list -> SendResult, or None"},
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
        PyType_Ready(&producer_base_type))
        return -1;
    return PyModule_AddObjectRef(m, "ProducerBase", (PyObject *)&producer_base_type);
}
