/*
 * shmq/native/hot_message.h -- the C base of shmq.client.message.Message (hot_message.c), shared
 * with hot.c, which reads its fields straight from the struct on the local send path.
 */
#ifndef SHMQ_HOT_MESSAGE_H
#define SHMQ_HOT_MESSAGE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Message's attributes (the former __slots__), each a strong reference or NULL (unset: reading
 * it raises AttributeError, as an unset slot did). properties is NULL with props_empty set
 * while it is the empty dict nobody has read yet (made on first read: most messages never
 * have a property, and a dict per message was a tenth of building one). */
typedef struct {
    PyObject_HEAD
    PyObject *topic, *body, *tags, *keys, *properties, *delay_level, *flag;
    char props_empty;
} shmq_message;

/* the message has no properties: an unread empty dict, or an empty dict */
static inline int shmq_no_properties(const shmq_message *m) {
    return m->properties ? PyDict_CheckExact(m->properties) && PyDict_GET_SIZE(m->properties) == 0 : m->props_empty;
}

extern PyTypeObject shmq_message_type;

/* The class the client uses (the Python subclass, methods and all) once it is bound: the exact
 * type the local send path takes; NULL before bind_message. */
extern PyTypeObject *shmq_message_cls;

/* Remembers the class (and gives it the C vectorcall constructor) and the Python function that
 * turns deliver_at / delay into properties (message._timer_properties); -1 with an exception
 * set when cls is not a subclass of MessageBase without instance attributes of its own. */
int shmq_bind_message(PyObject *cls, PyObject *timer);

#endif
