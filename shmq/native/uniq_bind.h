/*
 * shmq/native/uniq_bind.h -- the process's one UNIQ_KEY source (core_append.c's shmq_uniq_ids on the
 * shmq_uniq that client/uniq_id.py owns) as seen by a CPython extension module that draws ids
 * with the GIL held (hot_remote.c, hot_oneway.c). Each such module is its own shared object, so
 * each includes this once and gets its own two pointers, set by its ``bind`` at import.
 */
#ifndef SHMQ_UNIQ_BIND_H
#define SHMQ_UNIQ_BIND_H
#include <Python.h>
#include "core.h"

typedef int (*uniq_fn)(shmq_uniq *, uint32_t, char *);
static uniq_fn f_uniq;
static shmq_uniq *the_uniq;

/* bind(address of shmq_uniq_ids, address of the process's shmq_uniq): once, at import */
static PyObject *uniq_bind(PyObject *self, PyObject *args) {
    PyObject *f, *u;
    if (!PyArg_ParseTuple(args, "OO", &f, &u)) return NULL;
    void *p = PyLong_AsVoidPtr(f), *q = PyLong_AsVoidPtr(u);
    if (!p || !q) return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "null address"), NULL);
    f_uniq = (uniq_fn)p;
    the_uniq = (shmq_uniq *)q;
    Py_RETURN_NONE;
}
#endif
