/*
 * shmq/native/client_read.h -- the client connection's read in C (client_read.c) and the scan it
 * shares with the ``answers`` hook (remote_answer.c); both in shmq.native._answer.
 */
#ifndef SHMQ_CLIENT_READ_H
#define SHMQ_CLIENT_READ_H
#include <Python.h>

/* remote_answer.c: the frames of data[pos:n] that ``answers`` takes, served in order; returns the
 * new pos (-1 with an exception); *stop: the frame at the new pos is complete and the Python
 * path's. ``pending`` is the connection's ``_pending``. */
Py_ssize_t shmq_answers_scan(PyObject *pending, const char *data, Py_ssize_t n, Py_ssize_t pos, int *stop);

/* client_read.c: adds the ``Reader`` type to the module; 0, or -1 with an exception */
int shmq_reader_add(PyObject *m);
#endif
