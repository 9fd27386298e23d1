/*
 * shmq/native/hot.h -- what the files of shmq.native._hot share: the binding of a Python
 * __slots__ class whose instances they fill in C (hot.c: MessageExt; hot_send.c: _LocalTopic,
 * which LocalSend reads), MessageExt's C base (hot_ext.c), the entry points that hot.c's module
 * init registers (the producer side's, hot_wait.c's wake-up), and hot.c's queue read, which
 * hot_wait.c's wake-up ends in.
 */
#ifndef SHMQ_HOT_H
#define SHMQ_HOT_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* A __slots__ class whose instances hot.c / hot_send.c build: its type and each slot's offset (from
 * the member descriptors bind_* is given, in the order the X_* / S_* enums name them). */
typedef struct { PyTypeObject *cls; Py_ssize_t off[24]; } slotted;

static inline int bind_slots(slotted *s, PyObject *args, Py_ssize_t n, PyObject **extra) {
    PyObject *cls, *slots;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyType_Type, &cls, &PyTuple_Type, &slots, extra)) return -1;
    if (PyTuple_GET_SIZE(slots) != n) { PyErr_SetString(PyExc_ValueError, "slot count"); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(slots, i);
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type) || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            PyErr_SetString(PyExc_TypeError, "a slot is not an object member");
            return -1;
        }
        s->off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    Py_INCREF(cls);
    Py_XSETREF(s->cls, (PyTypeObject *)cls);
    Py_INCREF(*extra);
    return 0;
}

/* An exact int of at most two digits (|v| < 2^60: every address and count these calls take) read
 * inline, without the call and checks of PyLong_AsLongLong / PyLong_AsVoidPtr (~40 instructions
 * each, and the local pull thread's wake-up converts eleven); anything else goes to those. */
static inline long long hot_ll(PyObject *o) {
#if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
    if (PyLong_CheckExact(o)) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        switch (Py_SIZE(o)) {
        case 0: return 0;
        case 1: return (long long)d[0];
        case -1: return -(long long)d[0];
        case 2: return (long long)d[0] | ((long long)d[1] << PyLong_SHIFT);
        case -2: return -((long long)d[0] | ((long long)d[1] << PyLong_SHIFT));
        }
    }
#endif
    return PyLong_AsLongLong(o);
}

static inline void *hot_ptr(PyObject *o) {
#if PY_VERSION_HEX < 0x030C0000 && PyLong_SHIFT == 30
    if (PyLong_CheckExact(o) && Py_SIZE(o) > 0 && Py_SIZE(o) <= 2) return (void *)(uintptr_t)hot_ll(o);
#endif
    return PyLong_AsVoidPtr(o);
}

#define SET(s, o, k, v) do { PyObject *v_ = (v); if (!v_) goto fail; *(PyObject **)((char *)(o) + (s).off[k]) = v_; } while (0)
#define REF(x) (Py_INCREF(x), (x))

/* hot_ext.c: MessageExt's C base (ExtBase), its fixed numeric fields as C values, which hot.c's
 * record walk writes straight into a new message (the Python subclass's slots follow them) */
typedef struct {
    PyObject_HEAD
    long long queue_id, queue_offset, reconsume_times, born_timestamp, store_timestamp, commit_log_offset, sysflag,
        flag;
} shmq_ext_base;
extern PyTypeObject shmq_ext_base_type;
int shmq_ext_add(PyObject *module);

/* hot_send.c: adds the producer's functions (bind, bind_message, bind_topic, send, send_message,
 * send_batch, encode_batch), the LocalSend type, and SendResult with bind_result (hot_result.c)
 * to the module; 0, or -1 with an exception set. Called by PyInit__hot. */
int shmq_send_add(PyObject *module);

/* hot_producer.c: adds ProducerBase (Producer's send / send_batch, the C send first) */
int shmq_producer_add(PyObject *module);

/* hot.c: one queue's read from a QueueReader's state (store/reader.py): (messages, next offset,
 * elsewhere), None (the reader maps another file), or NULL with an exception set */
PyObject *shmq_read_queue(PyObject *st, long long offset, Py_ssize_t max_count);

/* hot_wait.c: adds bind_wait and wait_read (the local pull thread's wake-up and read) */
int shmq_wait_add(PyObject *module);

/* A 2- or 3-tuple of the new references a, b (and c), taken over (NULL: one of them failed,
 * every one given is released); Py_BuildValue's format parse cost more than the read of a short
 * batch. */
static inline PyObject *tuple_of(PyObject *a, PyObject *b, PyObject *c, Py_ssize_t n) {
    PyObject *t = a && b && (n < 3 || c) ? PyTuple_New(n) : NULL;
    if (!t) { Py_XDECREF(a); Py_XDECREF(b); if (n > 2) Py_XDECREF(c); return NULL; }
    PyTuple_SET_ITEM(t, 0, a);
    PyTuple_SET_ITEM(t, 1, b);
    if (n > 2) PyTuple_SET_ITEM(t, 2, c);
    return t;
}

#endif
