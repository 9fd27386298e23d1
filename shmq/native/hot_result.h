/*
 * shmq/native/hot_result.h -- shmq.SendResult, a C type (hot_result.c), which the local send
 * (hot_send.c) builds straight from the append's raw fields.
 */
#ifndef SHMQ_HOT_RESULT_H
#define SHMQ_HOT_RESULT_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

extern PyTypeObject shmq_result_type;

/* SEND_OK's result of an append: n ids of 32 chars at ids, the first record's commit-log offset
 * phys and queue offset qoff, the queue mq and the 8 bytes of the store host (each kept raw,
 * made a Python object when read). NULL with an exception set when out of memory. */
PyObject *shmq_result_new(const char *ids, Py_ssize_t n, int64_t phys, int64_t qoff, PyObject *mq, PyObject *host);

/* the capsule _hot._result_tcp holds a shmq_result_tcp_fn (hot_result.c result_tcp): the SEND_OK
 * result of a TCP answer, for remote_answer.c (another shared object) */
typedef PyObject *(*shmq_result_tcp_fn)(PyObject *uniq, const char *mid, Py_ssize_t n, int64_t qoff, PyObject *mq);
#define SHMQ_RESULT_TCP_CAPSULE "shmq.native._hot._result_tcp"

/* bind_result was called (SEND_OK and the offset msgId's formatter are known) */
int shmq_result_bound(void);

/* adds SendResult and bind_result to the module: 0, or -1 with an exception set */
int shmq_result_add(PyObject *module);

#endif
