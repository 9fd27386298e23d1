/*
 * shmq/native/hot_remote.c -- the TCP producer's per-send C (module shmq.native._remote), called
 * with the GIL held: ``uniq()`` draws one UNIQ_KEY from the process's one id source (core_append.c's
 * shmq_uniq_ids on the shmq_uniq the client's uniq_id.py owns, the counter every thread and the
 * local send share).
 *
 * Why it exists: a cffi call releases the GIL around its C function. A TCP producer has a second
 * thread, its client's event loop, waiting for the GIL while the caller sends: every release
 * handed it the GIL, the loop woke to drain a handful of sends, and the caller waited to get the
 * GIL back (the ids were drawn 16 at a time for that reason, and that was still ~8 % of a oneway
 * send's samples). Drawing an id never waits for anything (a clock read and an atomic add), so
 * holding the GIL is safe; the loop then runs when the caller blocks or its switch interval
 * ends, and drains the whole burst in one turn.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include "core.h"
#include "uniq_bind.h"

/* uniq() -> the next UNIQ_KEY (32 upper-case hex characters), or the int SHMQ_EMONTH when the
 * clock left the id's month window (the caller rolls the window and asks again) */
static PyObject *r_uniq(PyObject *self, PyObject *unused) {
    if (!f_uniq) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    char id[32];
    int rc = f_uniq(the_uniq, 1, id);
    if (rc) return PyLong_FromLong(rc);
    PyObject *s = PyUnicode_New(32, 127);
    if (s) memcpy(PyUnicode_DATA(s), id, 32);
    return s;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)uniq_bind, METH_VARARGS, "bind(shmq_uniq_ids address, shmq_uniq address)"},
    {"uniq", (PyCFunction)r_uniq, METH_NOARGS, "uniq() -> a UNIQ_KEY, or SHMQ_EMONTH"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_remote", NULL, -1, methods};

PyMODINIT_FUNC PyInit__remote(void) { return PyModule_Create(&module); }
