/*
 * shmq/native/hot_message.c -- the C base type of shmq.client.message.Message (exposed as
 * shmq.native._hot.MessageBase): its seven attributes and its __init__. The methods (key_list,
 * check_text, wire_properties, __repr__, ...) stay in the Python subclass.
 *
 * Why: a message is built per send, and the Python __init__ (a frame, seven slot stores, the
 * properties dict) was ~200 ns, as much as the C append it feeds. Here the same checks and
 * defaults are C, and the exact Message class (never a subclass) is constructed through a
 * vectorcall that skips the argument tuple and the separate __new__ / __init__ calls.
 *
 * Behaviour kept from the Python class: Message(topic, body, tags=None, keys=None,
 * properties=None, delay_level=0, flag=0, *, deliver_at=None, delay=None); a body that is not
 * exactly bytes is refused with TypeError when it is a str and converted with bytes(body)
 * otherwise; properties are copied (dict(properties), or a new {} when falsy, made when first
 * read); deliver_at / delay
 * are turned into properties by message._timer_properties (bound by bind_message) and merged in.
 */
#include "hot_message.h"
#include <structmember.h>

PyTypeObject *shmq_message_cls;
static PyObject *timer_props; /* message._timer_properties(deliver_at, delay) -> dict */

enum { A_TOPIC, A_BODY, A_TAGS, A_KEYS, A_PROPS, A_DELAY_LEVEL, A_FLAG, A_POSITIONAL, A_DELIVER_AT = A_POSITIONAL,
       A_DELAY, A_ALL };
static const char *const arg_names[A_ALL] = {"topic", "body", "tags", "keys", "properties", "delay_level",
                                             "flag", "deliver_at", "delay"};
static PyObject *arg_str[A_ALL]; /* the names, interned */

/* the arguments of one call, by position (NULL: not given), keywords matched to their slots */
static int parse(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out) {
    for (int k = 0; k < A_ALL; k++) out[k] = NULL;
    if (nargs > A_POSITIONAL) {
        PyErr_Format(PyExc_TypeError, "Message() takes from 2 to %d positional arguments but %zd were given",
                     A_POSITIONAL, nargs);
        return -1;
    }
    for (Py_ssize_t k = 0; k < nargs; k++) out[k] = args[k];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, j);
        int k = 0;
        while (k < A_ALL && arg_str[k] != name) k++;            /* interned: the usual case */
        if (k == A_ALL)
            for (k = 0; k < A_ALL && !(PyUnicode_Check(name) && PyUnicode_Compare(name, arg_str[k]) == 0); k++) {}
        if (k == A_ALL) {
            PyErr_Format(PyExc_TypeError, "Message() got an unexpected keyword argument '%S'", name);
            return -1;
        }
        if (out[k]) {
            PyErr_Format(PyExc_TypeError, "Message() got multiple values for argument '%s'", arg_names[k]);
            return -1;
        }
        out[k] = args[nargs + j];
    }
    for (int k = A_TOPIC; k <= A_BODY; k++)
        if (!out[k]) {
            PyErr_Format(PyExc_TypeError, "Message() missing required argument '%s'", arg_names[k]);
            return -1;
        }
    return 0;
}

/* dict(properties) if properties else {}: *out is the copy, or NULL for {} (made when read) */
static int copy_props(PyObject *p, PyObject **out) {
    *out = NULL;
    if (!p || p == Py_None) return 0;
    if (PyDict_CheckExact(p)) return PyDict_GET_SIZE(p) && !(*out = PyDict_Copy(p)) ? -1 : 0;
    int t = PyObject_IsTrue(p);
    if (t <= 0) return t;
    return (*out = PyObject_CallOneArg((PyObject *)&PyDict_Type, p)) ? 0 : -1;
}

static PyObject *msg_get_props(PyObject *self, void *unused) {
    shmq_message *m = (shmq_message *)self;
    if (!m->properties) {
        if (!m->props_empty) {
            PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute 'properties'", Py_TYPE(self)->tp_name);
            return NULL;
        }
        if (!(m->properties = PyDict_New())) return NULL;
        m->props_empty = 0;
    }
    return Py_NewRef(m->properties);
}

static int msg_set_props(PyObject *self, PyObject *v, void *unused) {
    shmq_message *m = (shmq_message *)self;
    if (!v && !m->properties && !m->props_empty) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute 'properties'", Py_TYPE(self)->tp_name);
        return -1;
    }
    m->props_empty = 0;
    Py_XINCREF(v);
    Py_XSETREF(m->properties, v);
    return 0;
}

static PyObject *own(PyObject *v, PyObject *dflt) { return Py_NewRef(v ? v : dflt); }

static PyObject *zero_int; /* 0: the default delay level and flag (made by the first fill or bind) */

static int fill(shmq_message *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *a[A_ALL];
    if (parse(args, nargs, kwnames, a)) return -1;
    PyObject *body = a[A_BODY];
    if (PyBytes_CheckExact(body)) Py_INCREF(body);
    else if (PyUnicode_Check(body)) {
        PyErr_SetString(PyExc_TypeError, "body must be bytes (encode text yourself)");
        return -1;
    } else if (!(body = PyObject_CallOneArg((PyObject *)&PyBytes_Type, body))) return -1;
    PyObject *props;
    if (copy_props(a[A_PROPS], &props)) { Py_DECREF(body); return -1; }
    PyObject *zero = zero_int;
    if (!zero && !(zero = zero_int = PyLong_FromLong(0))) { Py_DECREF(body); Py_XDECREF(props); return -1; }
    Py_XSETREF(m->topic, Py_NewRef(a[A_TOPIC]));
    Py_XSETREF(m->body, body);
    Py_XSETREF(m->tags, own(a[A_TAGS], Py_None));
    Py_XSETREF(m->keys, own(a[A_KEYS], Py_None));
    Py_XSETREF(m->properties, props);
    m->props_empty = !props;
    Py_XSETREF(m->delay_level, own(a[A_DELAY_LEVEL], zero));
    Py_XSETREF(m->flag, own(a[A_FLAG], zero));
    PyObject *at = a[A_DELIVER_AT] ? a[A_DELIVER_AT] : Py_None, *delay = a[A_DELAY] ? a[A_DELAY] : Py_None;
    if (at == Py_None && delay == Py_None) return 0;
    if (!timer_props) { PyErr_SetString(PyExc_RuntimeError, "bind_message first"); return -1; }
    PyObject *extra = PyObject_CallFunctionObjArgs(timer_props, at, delay, NULL);
    if (!extra) return -1;
    if (!m->properties && !(m->properties = PyDict_New())) { Py_DECREF(extra); return -1; }
    m->props_empty = 0;
    int rc = PyDict_Update(m->properties, extra);
    Py_DECREF(extra);
    return rc;
}

static int msg_init(PyObject *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t n = PyTuple_GET_SIZE(args), nkw = kwargs ? PyDict_GET_SIZE(kwargs) : 0;
    PyObject *v[A_ALL];
    if (n > A_POSITIONAL) return parse(NULL, n, NULL, v);   /* says how many were given */
    if (n + nkw > A_ALL) { PyErr_SetString(PyExc_TypeError, "Message() got too many arguments"); return -1; }
    for (Py_ssize_t k = 0; k < n; k++) v[k] = PyTuple_GET_ITEM(args, k);
    PyObject *names = NULL;
    if (nkw) {
        if (!(names = PyTuple_New(nkw))) return -1;
        Py_ssize_t pos = 0, j = 0;
        PyObject *key, *val;
        while (PyDict_Next(kwargs, &pos, &key, &val)) {
            PyTuple_SET_ITEM(names, j, Py_NewRef(key));
            v[n + j++] = val;
        }
    }
    int rc = fill((shmq_message *)self, v, n, names);
    Py_XDECREF(names);
    return rc;
}

/* Freed messages of the exact bound class, kept for the next Message(...) (as CPython keeps
 * floats and tuples): a message is made and freed per send, and the allocator's malloc and
 * free of it cost more than filling it. Kept cleared (every attribute NULL), untracked by the
 * GC and without their reference to the class; only ever touched with the GIL held. */
#define FREE_MAX 64
static PyObject *free_list[FREE_MAX];
static int n_free;

static PyObject *reuse(PyTypeObject *t) {
    PyObject *o = free_list[--n_free];
    PyObject_Init(o, t);   /* the type (and the class's reference), a fresh reference count */
    PyObject_GC_Track(o);
    return o;
}

/* Message(...) for the exact bound class: allocate and fill, no tuple, no __new__ call. A class
 * whose __init__ was replaced since bind_message goes through type's own call. */
static PyObject *msg_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyTypeObject *t = (PyTypeObject *)type;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (t->tp_init != msg_init || t->tp_new != shmq_message_type.tp_new) {
        PyObject *tuple = PyTuple_New(nargs), *kw = NULL;
        if (!tuple) return NULL;
        for (Py_ssize_t k = 0; k < nargs; k++) PyTuple_SET_ITEM(tuple, k, Py_NewRef(args[k]));
        if (kwnames && PyTuple_GET_SIZE(kwnames)) {
            kw = PyDict_New();
            for (Py_ssize_t j = 0; kw && j < PyTuple_GET_SIZE(kwnames); j++)
                if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, j), args[nargs + j])) Py_CLEAR(kw);
            if (!kw) { Py_DECREF(tuple); return NULL; }
        }
        PyObject *o = PyType_Type.tp_call(type, tuple, kw);
        Py_DECREF(tuple);
        Py_XDECREF(kw);
        return o;
    }
    PyObject *o = t == shmq_message_cls && n_free ? reuse(t) : t->tp_alloc(t, 0);
    if (!o) return NULL;
    if (nargs == 2 && !kwnames && PyBytes_CheckExact(args[1]) && zero_int) {
        /* Message(topic, body), the common call: what fill makes of it, without the parse (a
         * new or reused object: every attribute NULL) */
        shmq_message *m = (shmq_message *)o;
        m->topic = Py_NewRef(args[0]);
        m->body = Py_NewRef(args[1]);
        m->tags = Py_NewRef(Py_None);
        m->keys = Py_NewRef(Py_None);
        m->properties = NULL;
        m->props_empty = 1;
        m->delay_level = Py_NewRef(zero_int);
        m->flag = Py_NewRef(zero_int);
        return o;
    }
    if (fill((shmq_message *)o, args, nargs, kwnames)) Py_CLEAR(o);
    return o;
}

static int msg_traverse(PyObject *self, visitproc visit, void *arg) {
    shmq_message *m = (shmq_message *)self;
    Py_VISIT(m->topic); Py_VISIT(m->body); Py_VISIT(m->tags); Py_VISIT(m->keys);
    Py_VISIT(m->properties); Py_VISIT(m->delay_level); Py_VISIT(m->flag);
    return 0;
}

static int msg_clear(PyObject *self) {
    shmq_message *m = (shmq_message *)self;
    Py_CLEAR(m->topic); Py_CLEAR(m->body); Py_CLEAR(m->tags); Py_CLEAR(m->keys);
    Py_CLEAR(m->properties); Py_CLEAR(m->delay_level); Py_CLEAR(m->flag);
    return 0;
}

static void msg_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    msg_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* The bound class's dealloc, in place of CPython's subtype_dealloc (kept in subtype_dealloc_fn):
 * what subtype_dealloc does for a class that adds nothing to its C base (no __dict__,
 * __weakref__ or slots: checked at bind) in fewer steps: untrack, clear, free, release the class.
 * subtype_dealloc also calls it as the base dealloc of a subclass's instance (after its own
 * part; it then leaves the class's reference to this base, a heap type's). Given a __del__
 * later, the class goes back to subtype_dealloc. An instance of the exact class goes to
 * free_list while it has room. */
static destructor subtype_dealloc_fn;

static void msg_heap_dealloc(PyObject *self) {
    PyTypeObject *t = Py_TYPE(self);
    if (t == shmq_message_cls && (t->tp_finalize || t->tp_del)) {
        t->tp_dealloc = subtype_dealloc_fn;
        subtype_dealloc_fn(self);
        return;
    }
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, msg_heap_dealloc)
    msg_clear(self);
    if (t == shmq_message_cls && n_free < FREE_MAX) free_list[n_free++] = self;
    else t->tp_free(self);
    Py_DECREF(t);
    Py_TRASHCAN_END
}

#define MEMBER(name) {#name, T_OBJECT_EX, offsetof(shmq_message, name), 0, NULL}
static PyMemberDef msg_members[] = {
    MEMBER(topic), MEMBER(body), MEMBER(tags), MEMBER(keys), MEMBER(delay_level), MEMBER(flag),
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef msg_getset[] = {
    {"properties", msg_get_props, msg_set_props, "user properties (a dict)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject shmq_message_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._hot.MessageBase",
    .tp_basicsize = sizeof(shmq_message),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The attributes and __init__ of shmq.Message (see shmq/native/hot_message.c).",
    .tp_traverse = msg_traverse,
    .tp_clear = msg_clear,
    .tp_dealloc = msg_dealloc,
    .tp_members = msg_members,
    .tp_getset = msg_getset,
    .tp_init = msg_init,
    .tp_new = PyType_GenericNew,
};

int shmq_bind_message(PyObject *cls, PyObject *timer) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &shmq_message_type) ||
        ((PyTypeObject *)cls)->tp_basicsize != sizeof(shmq_message)) {
        PyErr_SetString(PyExc_TypeError, "bind_message: a subclass of MessageBase without instance attributes");
        return -1;
    }
    for (int k = 0; k < A_ALL; k++)
        if (!arg_str[k] && !(arg_str[k] = PyUnicode_InternFromString(arg_names[k]))) return -1;
    if (!zero_int && !(zero_int = PyLong_FromLong(0))) return -1;
    Py_INCREF(timer);
    Py_XSETREF(timer_props, timer);
    Py_INCREF(cls);
    Py_XSETREF(shmq_message_cls, (PyTypeObject *)cls);
    /* A class is called through its tp_vectorcall when it has one, and subclasses do not inherit
     * it (they go through type's call: tp_new, then tp_init, both the C ones above). */
    PyTypeObject *t = (PyTypeObject *)cls;
    if (t->tp_flags & Py_TPFLAGS_HEAPTYPE) {
        t->tp_vectorcall = msg_vectorcall;
        if (t->tp_dealloc != msg_heap_dealloc && !t->tp_dictoffset && !t->tp_weaklistoffset) {
            subtype_dealloc_fn = t->tp_dealloc;
            t->tp_dealloc = msg_heap_dealloc;
        }
    }
    return 0;
}
