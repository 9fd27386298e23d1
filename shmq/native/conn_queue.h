/*
 * shmq/native/conn_queue.h -- a client connection's request frame queued, in C (conn_queue.c,
 * part of shmq.native._answer): ``Connection.start_frame`` for client connections, called by
 * Python (``conn.start_frame(build, waiter)``) and by pull_steady.c alike.
 */
#ifndef SHMQ_CONN_QUEUE_H
#define SHMQ_CONN_QUEUE_H
#include <Python.h>

/* conn.start_frame(build, waiter): the opaque (a new reference), or NULL with the exception the
 * Python method raises (RemotingClosed when closed, or build's own) */
PyObject *shmq_start_frame(PyObject *conn, PyObject *build, PyObject *waiter);

/* 1 when conn's class has this start_frame (its method is shmq_start_frame), else 0 */
int shmq_has_start_frame(PyObject *conn);

/* adds ``start_frame`` (a method for a class: transport.use_start_frame) to the module; 0, or -1 */
int shmq_conn_queue_add(PyObject *m);
#endif
