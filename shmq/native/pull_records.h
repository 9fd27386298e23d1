/*
 * shmq/native/pull_records.h -- the _hot module's decode of a pulled body (a run of whole
 * records: hot.c's ``records_of``, the local record walk's own decode) as another extension
 * module calls it: through the capsule ``shmq.native._hot.records_c``, which holds this type's
 * pointer. remote_answer.c's pull answers (pull_answer.c) decode the records straight from the
 * connection's read buffer with it; there is no second decoder.
 *
 * records_fn(p, n, topic, broker) -> a new list of MessageExt, None (a record the C decode does
 * not take: the caller decodes the body in Python), or NULL with an exception set. ``topic`` and
 * ``broker`` are str; the GIL is held.
 */
#ifndef SHMQ_PULL_RECORDS_H
#define SHMQ_PULL_RECORDS_H
#include <Python.h>
#include <stdint.h>

typedef PyObject *records_fn(const uint8_t *p, Py_ssize_t n, PyObject *topic, PyObject *broker);
#define RECORDS_CAPSULE "shmq.native._hot.records_c"

#endif
