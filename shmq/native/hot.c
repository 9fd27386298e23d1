/*
 * shmq/native/hot.c -- the local producer's per-message call, as a CPython function that keeps
 * the GIL (module shmq.native._hot). Everything it does is in the C core (core.c, reached
 * through the function pointer cffi gives ``bind``); this file only calls it.
 *
 * Why it exists: a cffi call releases and re-takes the GIL around every C function and packs
 * its arguments into a tuple. For a ~0.3 us append that was a third of a local send() (and a
 * GIL hand-off to the client's own threads on every call). Holding the GIL is safe only for a
 * call that never sleeps: shmq_send is called with try_lock = 1, so a held append lock answers
 * SHMQ_EBUSY and the caller repeats the send through cffi, which releases the GIL while it
 * waits (shmq/client/local_send.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "core.h"

typedef int (*send_fn)(const shmq_route *, const uint8_t *, uint32_t, const uint8_t *, uint32_t, int);
static send_fn f_send;

/* bind(address of shmq_send): once, at import of shmq.native */
static PyObject *hot_bind(PyObject *self, PyObject *addr) {
    void *p = PyLong_AsVoidPtr(addr);
    if (!p) return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "null function"), NULL);
    f_send = (send_fn)p;
    Py_RETURN_NONE;
}

/* send(route address, body: bytes, head: bytes) -> the 32-byte UNIQ_KEY (bytes) of the
 * appended record, or the SHMQ_* status (int) when it was not appended. */
static PyObject *hot_send(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    if (n != 3 || !PyBytes_CheckExact(args[1]) || !PyBytes_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "send(route, body: bytes, head: bytes)");
        return NULL;
    }
    if (!f_send) { PyErr_SetString(PyExc_RuntimeError, "shmq.native._hot is not bound"); return NULL; }
    const shmq_route *r = (const shmq_route *)PyLong_AsVoidPtr(args[0]);
    if (!r) return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "null route"), NULL);
    Py_ssize_t blen = PyBytes_GET_SIZE(args[1]), hlen = PyBytes_GET_SIZE(args[2]);
    if (blen > UINT32_MAX || hlen > UINT32_MAX) return PyLong_FromLong(SHMQ_ETOOBIG);
    int rc = f_send(r, (const uint8_t *)PyBytes_AS_STRING(args[1]), (uint32_t)blen,
                    (const uint8_t *)PyBytes_AS_STRING(args[2]), (uint32_t)hlen, 1);
    if (rc) return PyLong_FromLong(rc);
    return PyBytes_FromStringAndSize(r->id_out, 32);
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)hot_bind, METH_O, "bind(address of shmq_send)"},
    {"send", (PyCFunction)(void (*)(void))hot_send, METH_FASTCALL,
     "send(route address, body, head) -> UNIQ_KEY bytes, or an int SHMQ_* status"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hot", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hot(void) { return PyModule_Create(&module); }
