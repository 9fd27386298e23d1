/*
 * shmq/native/pending_table.c -- the types of pending_table.h (module shmq.native._answer):
 * ``Pending``, a client connection's requests in flight by opaque (Connection._pending), and
 * ``Run``, a lane segment's async sends in put order (hot_oneway.c's put_async fills it, the
 * loop thread moves it into the connection's Pending with ``update``). pending_table.h says why.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include "pending_table.h"

/* k as a table key: 1 (*out set), 0 (not an int of 64 bits: no such key), -1 (an error) */
static int key_of(PyObject *k, int64_t *out) {
    if (!PyLong_Check(k)) return 0;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(k, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow) return 0;
    *out = v;
    return 1;
}

/* as key_of, for a key to store: 0, or -1 with TypeError / OverflowError */
static int store_key(PyObject *k, int64_t *out) {
    int r = key_of(k, out);
    if (r == 0) PyErr_Format(PyExc_TypeError, "Pending: a key is an int of 64 bits, not %R", k);
    return r == 1 ? 0 : -1;
}

/* ---- Pending ---------------------------------------------------------------------------- */
/* the order entries are listed in: the general path's positive opaques ascending, then the
 * lane's negative ones in the order they were drawn (-1, -2, ...): each path's send order */
static inline uint64_t order_of(int64_t k) { return k >= 0 ? (uint64_t)k : (1ULL << 63) + (uint64_t)-(k + 1); }

static int by_order(const void *a, const void *b) {
    uint64_t x = order_of(((const pt_slot *)a)->key), y = order_of(((const pt_slot *)b)->key);
    return x < y ? -1 : x > y;
}

/* the entries, in order, as a list of what `what` makes of each: 0 keys, 1 values, 2 items */
static PyObject *listed(pt_table *t, int what) {
    pt_slot *e = t->used ? PyMem_Malloc((size_t)t->used * sizeof(pt_slot)) : NULL;
    if (t->used && !e) return PyErr_NoMemory();
    Py_ssize_t n = 0;
    for (size_t i = 0; t->slots && i <= t->mask; i++)
        if (t->slots[i].val) e[n++] = t->slots[i];
    /* held while the list is made: an allocation below may collect, and a finalizer change the table */
    for (Py_ssize_t i = 0; i < n; i++) Py_INCREF(e[i].val);
    if (n > 1) qsort(e, (size_t)n, sizeof(pt_slot), by_order);  /* (e is NULL when empty: qsort's UB, UBSan) */
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *k = what == 1 ? NULL : PyLong_FromLongLong(e[i].key), *x;
        if (what == 0) x = k;
        else if (what == 1) x = Py_NewRef(e[i].val);
        else {
            x = k ? PyTuple_Pack(2, k, e[i].val) : NULL;
            Py_XDECREF(k);
        }
        if (!x) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, x);
    }
    for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(e[i].val);
    PyMem_Free(e);
    return out;
}

static PyObject *as_dict(pt_table *t) {
    PyObject *items = listed(t, 2), *d = items ? PyDict_New() : NULL;
    for (Py_ssize_t i = 0; d && i < PyList_GET_SIZE(items); i++) {
        PyObject *kv = PyList_GET_ITEM(items, i);
        if (PyDict_SetItem(d, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1))) Py_CLEAR(d);
    }
    Py_XDECREF(items);
    return d;
}

static Py_ssize_t p_len(pt_table *t) { return t->used; }

static PyObject *p_subscript(pt_table *t, PyObject *k) {
    int64_t key;
    int r = key_of(k, &key);
    if (r < 0) return NULL;
    Py_ssize_t i = r ? pt_find(t, key) : -1;
    if (i < 0) { PyErr_SetObject(PyExc_KeyError, k); return NULL; }
    return Py_NewRef(t->slots[i].val);
}

static int p_ass(pt_table *t, PyObject *k, PyObject *v) {
    int64_t key;
    if (v) return store_key(k, &key) ? -1 : pt_put(t, key, v);
    int r = key_of(k, &key);
    if (r < 0) return -1;
    PyObject *old = r ? pt_take(t, key) : NULL;
    if (!old) { PyErr_SetObject(PyExc_KeyError, k); return -1; }
    Py_DECREF(old);
    return 0;
}

static int p_contains(pt_table *t, PyObject *k) {
    int64_t key;
    int r = key_of(k, &key);
    return r <= 0 ? r : pt_find(t, key) >= 0;
}

static PyObject *p_iter(pt_table *t) {
    PyObject *keys = listed(t, 0), *it = keys ? PyObject_GetIter(keys) : NULL;
    Py_XDECREF(keys);
    return it;
}

static PyObject *p_get(pt_table *t, PyObject *const *a, Py_ssize_t n) {
    if (n < 1 || n > 2) { PyErr_SetString(PyExc_TypeError, "get(key, default=None)"); return NULL; }
    int64_t key;
    int r = key_of(a[0], &key);
    if (r < 0) return NULL;
    Py_ssize_t i = r ? pt_find(t, key) : -1;
    return Py_NewRef(i >= 0 ? t->slots[i].val : n > 1 ? a[1] : Py_None);
}

static PyObject *p_pop(pt_table *t, PyObject *const *a, Py_ssize_t n) {
    if (n < 1 || n > 2) { PyErr_SetString(PyExc_TypeError, "pop(key[, default])"); return NULL; }
    int64_t key;
    int r = key_of(a[0], &key);
    if (r < 0) return NULL;
    PyObject *v = r ? pt_take(t, key) : NULL;
    if (v) return v;
    if (n > 1) return Py_NewRef(a[1]);
    PyErr_SetObject(PyExc_KeyError, a[0]);
    return NULL;
}

static PyObject *p_keys(pt_table *t, PyObject *unused) { return listed(t, 0); }
static PyObject *p_values(pt_table *t, PyObject *unused) { return listed(t, 1); }
static PyObject *p_items(pt_table *t, PyObject *unused) { return listed(t, 2); }

/* every entry dropped: the table emptied first, the references released after (a finalizer
 * they run sees an empty table) */
static int p_clear(pt_table *t) {
    pt_slot *sl = t->slots;
    size_t n = sl ? t->mask + 1 : 0;
    t->slots = NULL, t->mask = 0, t->used = 0;
    for (size_t i = 0; i < n; i++) Py_XDECREF(sl[i].val);
    PyMem_Free(sl);
    return 0;
}

static PyObject *p_clear_m(pt_table *t, PyObject *unused) {
    p_clear(t);
    Py_RETURN_NONE;
}

extern PyTypeObject shmq_pending_type, shmq_run_type;

/* a Run's waiters moved in (their references with them; the run keeps its keys for the timer):
 * 0, or -1 with MemoryError (nothing moved) */
static int move_run(pt_table *t, pt_run *r) {
    if (!r->vals) return 0;  /* moved already */
    if (pt_reserve(t, r->n)) return -1;
    PyObject **vals = r->vals, *olds = NULL;
    r->vals = NULL;
    for (Py_ssize_t i = 0; i < r->n; i++) {
        PyObject *old = pt_store(t, r->keys[i], vals[i]);
        if (old) {  /* (an opaque in flight twice: never, the lane's run 2^31 apart) */
            if (!olds && !(olds = PyList_New(0))) PyErr_Clear();
            if (olds && PyList_Append(olds, old)) PyErr_Clear();
            Py_DECREF(old);
        }
    }
    PyMem_Free(vals);
    Py_XDECREF(olds);
    return 0;
}

/* update(other): a Run (moved in), a Pending, a dict, or anything with items() */
static PyObject *p_update(pt_table *t, PyObject *o) {
    if (Py_IS_TYPE(o, &shmq_run_type)) return move_run(t, (pt_run *)o) ? NULL : Py_NewRef(Py_None);
    PyObject *items = Py_IS_TYPE(o, &shmq_pending_type) ? listed((pt_table *)o, 2)
                      : PyDict_Check(o) ? PyDict_Items(o) : PyObject_CallMethod(o, "items", NULL);
    PyObject *seq = items ? PySequence_Fast(items, "update: items() is not a sequence") : NULL;
    Py_XDECREF(items);
    if (!seq) return NULL;
    int rc = 0;
    for (Py_ssize_t i = 0; !rc && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *kv = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
            PyErr_SetString(PyExc_TypeError, "update: an item is not a pair");
            rc = -1;
        } else {
            rc = p_ass(t, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1));
        }
    }
    Py_DECREF(seq);
    return rc ? NULL : Py_NewRef(Py_None);
}

/* left(opaques) -> the opaques still in the table, in their order: ``opaques`` a list of ints
 * and Runs (a Run stands for its keys): the timer's look at the requests it started (nearly
 * all answered by then), one C loop, no int object but for those left */
static PyObject *p_left(pt_table *t, PyObject *lst) {
    if (!PyList_Check(lst)) { PyErr_SetString(PyExc_TypeError, "left(a list)"); return NULL; }
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < PyList_GET_SIZE(lst); i++) {
        PyObject *o = PyList_GET_ITEM(lst, i);
        if (Py_IS_TYPE(o, &shmq_run_type)) {
            pt_run *r = (pt_run *)o;
            for (Py_ssize_t j = 0; out && j < r->n; j++) {
                if (pt_find(t, r->keys[j]) < 0) continue;
                PyObject *k = PyLong_FromLongLong(r->keys[j]);
                if (!k || PyList_Append(out, k)) Py_CLEAR(out);
                Py_XDECREF(k);
            }
            continue;
        }
        int64_t key;
        int rc = key_of(o, &key);
        if (rc < 0 || (rc && pt_find(t, key) >= 0 && PyList_Append(out, o))) Py_CLEAR(out);
    }
    return out;
}

static PyObject *p_richcompare(pt_table *t, PyObject *o, int op) {
    if (op != Py_EQ && op != Py_NE) Py_RETURN_NOTIMPLEMENTED;
    PyObject *d = as_dict(t), *od = d && Py_IS_TYPE(o, &shmq_pending_type) ? as_dict((pt_table *)o) : Py_XNewRef(o);
    PyObject *r = od ? PyObject_RichCompare(d, od, op) : NULL;
    Py_XDECREF(d);
    Py_XDECREF(od);
    return r;
}

static PyObject *p_repr(pt_table *t) {
    PyObject *d = as_dict(t), *r = d ? PyUnicode_FromFormat("Pending(%R)", d) : NULL;
    Py_XDECREF(d);
    return r;
}

static int p_traverse(pt_table *t, visitproc visit, void *arg) {
    for (size_t i = 0; t->slots && i <= t->mask; i++) Py_VISIT(t->slots[i].val);
    return 0;
}

static void p_dealloc(pt_table *t) {
    PyObject_GC_UnTrack(t);
    p_clear(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyMappingMethods p_mapping = {(lenfunc)p_len, (binaryfunc)p_subscript, (objobjargproc)p_ass};
static PySequenceMethods p_sequence = {.sq_contains = (objobjproc)p_contains};

static PyMethodDef p_methods[] = {
    {"get", (PyCFunction)(void (*)(void))p_get, METH_FASTCALL, "get(key, default=None)"},
    {"pop", (PyCFunction)(void (*)(void))p_pop, METH_FASTCALL, "pop(key[, default])"},
    {"keys", (PyCFunction)p_keys, METH_NOARGS, "the opaques, as a list (pending_table.c's order)"},
    {"values", (PyCFunction)p_values, METH_NOARGS, "the waiters, as a list, in the keys' order"},
    {"items", (PyCFunction)p_items, METH_NOARGS, "(opaque, waiter) pairs, as a list"},
    {"clear", (PyCFunction)p_clear_m, METH_NOARGS, "drop every entry"},
    {"update", (PyCFunction)p_update, METH_O, "update(Run | Pending | dict | mapping): a Run's waiters moved in"},
    {"left", (PyCFunction)p_left, METH_O, "left([int | Run, ...]) -> the opaques of these still in flight, in order"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject shmq_pending_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._answer.Pending",
    .tp_basicsize = sizeof(pt_table),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Pending(): a connection's requests in flight by opaque (pending_table.h)",
    .tp_as_mapping = &p_mapping,
    .tp_as_sequence = &p_sequence,
    .tp_iter = (getiterfunc)p_iter,
    .tp_methods = p_methods,
    .tp_richcompare = (richcmpfunc)p_richcompare,
    .tp_repr = (reprfunc)p_repr,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)p_traverse,
    .tp_clear = (inquiry)p_clear,
    .tp_dealloc = (destructor)p_dealloc,
};

/* ---- Run -------------------------------------------------------------------------------- */
static Py_ssize_t r_len(pt_run *r) { return r->n; }

/* 0 keys, 1 values (none once moved), 2 items (likewise) */
static PyObject *r_listed(pt_run *r, int what) {
    Py_ssize_t n = what && !r->vals ? 0 : r->n;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        if (what && (!r->vals || i >= r->n)) {  /* moved meanwhile (code an allocation ran) */
            PyErr_SetString(PyExc_RuntimeError, "Run changed while listed");
            Py_CLEAR(out);
            break;
        }
        PyObject *k = what == 1 ? NULL : PyLong_FromLongLong(r->keys[i]), *x;
        if (what == 0) x = k;
        else if (what == 1) x = Py_NewRef(r->vals[i]);
        else {
            x = k ? PyTuple_Pack(2, k, r->vals[i]) : NULL;
            Py_XDECREF(k);
        }
        if (!x) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, x);
    }
    return out;
}

static PyObject *r_iter(pt_run *r) {
    PyObject *keys = r_listed(r, 0), *it = keys ? PyObject_GetIter(keys) : NULL;
    Py_XDECREF(keys);
    return it;
}

static PyObject *r_keys(pt_run *r, PyObject *unused) { return r_listed(r, 0); }
static PyObject *r_values(pt_run *r, PyObject *unused) { return r_listed(r, 1); }
static PyObject *r_items(pt_run *r, PyObject *unused) { return r_listed(r, 2); }

static int r_traverse(pt_run *r, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; r->vals && i < r->n; i++) Py_VISIT(r->vals[i]);
    return 0;
}

/* the waiters released (the keys stay: a timer may still hold the run) */
static int r_clear(pt_run *r) {
    PyObject **vals = r->vals;
    r->vals = NULL;
    for (Py_ssize_t i = 0; vals && i < r->n; i++) Py_DECREF(vals[i]);
    PyMem_Free(vals);
    return 0;
}

static void r_dealloc(pt_run *r) {
    PyObject_GC_UnTrack(r);
    r_clear(r);
    PyMem_Free(r->keys);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PySequenceMethods r_sequence = {.sq_length = (lenfunc)r_len};

static PyMethodDef r_methods[] = {
    {"keys", (PyCFunction)r_keys, METH_NOARGS, "the opaques, in put order"},
    {"values", (PyCFunction)r_values, METH_NOARGS, "the waiters, in put order (none once moved into a Pending)"},
    {"items", (PyCFunction)r_items, METH_NOARGS, "(opaque, waiter) pairs, in put order"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject shmq_run_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._answer.Run",
    .tp_basicsize = sizeof(pt_run),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "a lane segment's async sends by opaque, in put order (pending_table.h)",
    .tp_as_sequence = &r_sequence,
    .tp_iter = (getiterfunc)r_iter,
    .tp_methods = r_methods,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)r_traverse,
    .tp_clear = (inquiry)r_clear,
    .tp_dealloc = (destructor)r_dealloc,
};

int shmq_pending_add(PyObject *m) {
    if (PyType_Ready(&shmq_pending_type) < 0 || PyType_Ready(&shmq_run_type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Pending", (PyObject *)&shmq_pending_type) < 0) return -1;
    return PyModule_AddObjectRef(m, "Run", (PyObject *)&shmq_run_type);
}
