/*
 * shmq/native/hot_ext.c -- the C base type of shmq.client.message.MessageExt (exposed as
 * shmq.native._hot.ExtBase): a consumed message's eight fixed numeric fields (queue_id,
 * queue_offset, reconsume_times, born_timestamp, store_timestamp, commit_log_offset, sysflag,
 * flag) kept as C values in the object itself. The object fields and every method stay in the
 * Python subclass (its __slots__); hot.c's record walk fills both.
 *
 * Why: the consumer makes one MessageExt per message, and as slots these eight were eight slot
 * stores, eight clears and two int objects made and freed per message (the queue and commit-log
 * offsets; the small ones are CPython's cached ints) -- ~400 of the ~3,070 instructions a
 * message cost the pull thread -- while a listener mostly reads only the body. Here the walk
 * writes eight C words, and an int object is made only when a field is read.
 *
 * Behaviour kept from the slots: each field reads as an int and is set with an int (or an
 * object with __index__, stored as its int value); a non-integer is refused with TypeError, a
 * value outside 64 bits with OverflowError (as a record's fields, none is wider than 64 bits).
 * Unlike a slot a field is never unset (it is 0 until set) and cannot be deleted. Pickling and
 * copying keep them through MessageExt.__getstate__ (the slots' state plus these fields).
 */
#include "hot.h"

/* A field's getter and setter, the field's offset as the closure. Not a T_LONGLONG member: its
 * setter stores -1 before it checks for the error, so a refused value would leave -1 behind;
 * here a refused value leaves the field as it was. */
static PyObject *field_get(PyObject *self, void *off) {
    return PyLong_FromLongLong(*(long long *)((char *)self + (Py_ssize_t)off));
}

static int field_set(PyObject *self, PyObject *v, void *off) {
    if (!v) {
        PyErr_SetString(PyExc_TypeError, "a MessageExt number cannot be deleted");
        return -1;
    }
    long long x = PyLong_AsLongLong(v);  /* an int, or __index__; TypeError / OverflowError */
    if (x == -1 && PyErr_Occurred()) return -1;
    *(long long *)((char *)self + (Py_ssize_t)off) = x;
    return 0;
}

#define FIELD(name) {#name, field_get, field_set, NULL, (void *)offsetof(shmq_ext_base, name)}
static PyGetSetDef ext_fields[] = {
    FIELD(queue_id), FIELD(queue_offset), FIELD(reconsume_times), FIELD(born_timestamp), FIELD(store_timestamp),
    FIELD(commit_log_offset), FIELD(sysflag), FIELD(flag),
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject shmq_ext_base_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._hot.ExtBase",
    .tp_basicsize = sizeof(shmq_ext_base),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The fixed numeric fields of shmq.client.message.MessageExt as C values (see shmq/native/hot_ext.c).",
    .tp_getset = ext_fields,
    .tp_new = PyType_GenericNew,
};

int shmq_ext_add(PyObject *m) {
    if (PyType_Ready(&shmq_ext_base_type)) return -1;
    return PyModule_AddObjectRef(m, "ExtBase", (PyObject *)&shmq_ext_base_type);
}
