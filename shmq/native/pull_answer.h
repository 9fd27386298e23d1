/*
 * shmq/native/pull_answer.h -- what remote_answer.c's ``answers`` hook (the client connection's
 * fast path) calls of pull_answer.c, the PushConsumer's PULL answers: the two files make the one
 * extension module shmq.native._answer. Include it after send_answer.h.
 */
#ifndef SHMQ_PULL_ANSWER_H
#define SHMQ_PULL_ANSWER_H
#include "send_answer.h"

/* w is a bound client.tcp_pull.TcpPull (the waiter of a PULL_MESSAGE) */
int pull_waiter(PyObject *w);

/* The answer of one frame (its header h, its body the n bytes at body) to the TcpPull w, which
 * ``pending`` holds under ``key``: 1 taken (w popped and handed the answer), 0 not this path's
 * (nothing changed: the Python decoder serves the frame), -1 an error raised. */
int pull_answer(PyObject *pending, PyObject *key, PyObject *w, const header *h, const uint8_t *body, Py_ssize_t n);

/* bind_pull(TcpPull) -> the PullBuild type: once, at import of client/tcp_pull.py */
PyObject *pull_bind(PyObject *self, PyObject *cls);

/* pull_frame(pieces, order, (queueOffset, sysFlag, commitOffset), opaque) -> the PULL_MESSAGE
 * frame of client.tcp_pull.PullFrame (its template's literal pieces around the four slots) */
PyObject *pull_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* pull_steady.c: the steady case of the TcpPull w's SUCCESS answer (w already popped): 1 taken
 * (as TcpPull._pulled would have), 0 not the steady case (nothing changed: _pulled's), -1 an
 * error raised. opaque_slot points at w's _opaque slot, steady is its _steady slot's value. */
int pull_steady(PyObject *w, PyObject **opaque_slot, PyObject *steady, int64_t suggest, int64_t next, PyObject *msgs);

/* a PullBuild's three values (queueOffset, sysFlag, commitOffset) for its next call: 0, or -1
 * (not a PullBuild: an error raised) */
int pull_build_set(PyObject *b, int64_t offset, int64_t flags, int64_t commit);

#endif
