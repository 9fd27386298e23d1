/*
 * shmq/native/async_slots.h -- the slots of client.remote_send.AsyncSend (the SendFuture of an
 * async send over TCP) as the C that makes and completes it sees them: hot_oneway.c's put_async
 * makes one, remote_answer.c completes one from its answer. Each module is its own shared object,
 * so each includes this once and reads the offsets from the class's member descriptors at import
 * (``as_bind``): the slots' names are the only thing shared with the Python class, and a class
 * that does not have them all as object slots is refused then, never misread later.
 */
#ifndef SHMQ_ASYNC_SLOTS_H
#define SHMQ_ASYNC_SLOTS_H
#include <Python.h>
#include <structmember.h>

/* SendFuture's, then AsyncSend's (send_future.py, remote_send.py) */
enum { AS_STATE, AS_VALUE, AS_CALLBACK, AS_EVENT, AS_MORE, AS_PRODUCER, AS_MQ, AS_REQ, AS_UNIQ, AS_TIMEOUT, AS_LEFT,
       AS_N };
static const char *const as_names[AS_N] = {"_state", "_value", "_callback", "_event", "_more", "producer", "mq",
                                           "req", "uniq", "timeout", "left"};
static PyTypeObject *as_type;
static Py_ssize_t as_off[AS_N];

/* the slot i of w (a borrowed reference, NULL when unset) */
#define AS_SLOT(w, i) (*(PyObject **)((char *)(w) + as_off[i]))

/* the class's slot offsets, once at import: 0, or -1 with TypeError */
static int as_bind(PyObject *cls) {
    if (!PyType_Check(cls) || ((PyTypeObject *)cls)->tp_dictoffset) {
        PyErr_SetString(PyExc_TypeError, "AsyncSend: a class with __slots__ only");
        return -1;
    }
    for (int i = 0; i < AS_N; i++) {
        PyObject *d = PyObject_GetAttrString(cls, as_names[i]);
        if (!d) return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok) as_off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "AsyncSend.%s is not an object slot", as_names[i]);
            return -1;
        }
    }
    Py_XSETREF(as_type, (PyTypeObject *)Py_NewRef(cls));
    return 0;
}
#endif
