/*
 * shmq/native/conn_dict.h -- a client connection's plain attributes read and set in C through its
 * instance dict (conn_queue.c, client_read.c; both in shmq.native._answer).
 *
 * Why: the C API's generic attribute operations on a Python object cost ~250 (PyObject_GetAttr)
 * and ~380 (PyObject_SetAttr) instructions each, measured on the connection (the type's MRO
 * look-up, then the instance's values), where the interpreter's own, specialized, cost tens;
 * the dict's own look-up and store ~115 and ~215. Valid for the names read here only: each is a
 * plain instance attribute set by Connection.__init__ (protocol/transport.py) and no class of a
 * client connection defines a descriptor of that name, so the instance dict is where the generic
 * operation finds and puts it (tests/unit/test_conn_queue.py checks the class side).
 * ``PyObject_GenericGetDict`` gives the dict (made once from the instance's values, then kept).
 */
#ifndef SHMQ_CONN_DICT_H
#define SHMQ_CONN_DICT_H
#include <Python.h>

/* conn.__dict__ (a new reference), or NULL with an exception */
static inline PyObject *cd_dict(PyObject *conn) {
    PyObject *d = PyObject_GenericGetDict(conn, NULL);
    if (d && !PyDict_CheckExact(d)) {
        Py_DECREF(d);
        PyErr_SetString(PyExc_TypeError, "a connection's __dict__ is not a dict");
        return NULL;
    }
    return d;
}

/* d[name] (borrowed), or NULL with the AttributeError reading it would raise */
static inline PyObject *cd_get(PyObject *d, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(d, name);
    if (!v && !PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, name);
    return v;
}

/* d[name]'s truth: 1 / 0, or -1 with an exception */
static inline int cd_truth(PyObject *d, PyObject *name) {
    PyObject *v = cd_get(d, name);
    return !v ? -1 : v == Py_True ? 1 : v == Py_False || v == Py_None ? 0 : PyObject_IsTrue(v);
}
#endif
