/*
 * shmq/native/remote_answer.c -- the TCP producer's answers to its async sends, matched and
 * completed in C straight from the connection's read buffer (module shmq.native._answer).
 *
 * Why: an async send's answer cost the client's loop thread ~3.3 us in Python (frame split,
 * msgspec decode into a RemotingCommand, the opaque's waiter, send_result, the Future), more
 * than the send itself, on the one GIL the caller shares. ``answers`` is the client
 * connection's ``fast`` hook (protocol/transport.py: the same contract as a broker's fast path):
 * for each complete frame from ``pos`` that is a SUCCESS answer, JSON, with no body, to an
 * opaque whose waiter is a ``client.remote_send.AsyncSend``, it does what the Python path does
 * for it (``Connection._serve_frames`` -> ``AsyncSend.set_result`` -> ``send_result``): pops
 * the waiter (the caller's SendFuture itself), builds ``SendResult(SEND_OK, uniq or msgId,
 * msgId, mq, queueOffset)`` and resolves the future with it (``AsyncSend._resolve``). It stops at the first frame it does not
 * take, which the Python path then serves, in order: any other code (a refusal to retry), a
 * request from the broker, an answer with a body (to a send; a pull's is below), a binary header, an unknown opaque,
 * a queueId other than the queue asked, a transactionId or recallHandle, and any header its
 * scanner does not read exactly as msgspec would (a backslash: no scratch is given here, a byte
 * >= 0x80, a value of another JSON type, a number with a fraction). The scanner is
 * remoting_header.h, the one the worker's remoting_send.c reads its sends with; ``decode``
 * exposes it so the tests hold it against ``decode_command`` frame by frame (with and without
 * escapes). A bad length word is the Python decoder's (not taken).
 *
 * The same hook takes a PushConsumer's SUCCESS answers to its pulls (the waiter a
 * ``client.tcp_pull.TcpPull``): pull_answer.c, which says which it takes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "send_answer.h"
#include "async_slots.h"
#include "pull_answer.h"
#include "pending_table.h"
#include "hot_result.h"
#include "client_read.h"
#include "conn_queue.h"

extern PyTypeObject shmq_pending_type;
int shmq_pending_add(PyObject *m);

/* the largest frame read here: a pull's answer carries up to 256 KiB of records (the broker's
 * maxTransferBytes) or one larger record; far below the Python decoder's frame limit (16 MiB),
 * so no frame it would refuse is taken. A send's answer has no body (MAX_ANSWER's). */
#define MAX_TAKEN (1 << 20)

static PyObject *resolve, *result_type, *send_ok, *invalid_state, *callback_raised;
static shmq_result_tcp_fn result_tcp;  /* hot_result.c's, from _hot's capsule (bind) */
static PyObject *s_pending, *s_set, *state_ok;  /* state_ok: SendFuture's _OK, 1 */

static PyObject *text(span s) { return PyUnicode_DecodeASCII((const char *)s.p, s.n, NULL); }

/* a string as the tests' decode makes it: UTF-8 (an escape may unescape to a non-ASCII byte) */
static PyObject *utext(span s) { return PyUnicode_DecodeUTF8((const char *)s.p, s.n, NULL); }

/* decode(frame, escapes=False) -> (code, opaque, flag, version, language, remark, ext_fields,
 * body) read as decode_command reads them, or None: the tests' view of the scanner; with
 * ``escapes`` it unescapes strings as remoting_send.c's reading does (answers() refuses them) */
static PyObject *a_decode(PyObject *self, PyObject *args) {
    Py_buffer b;
    header h;
    Py_ssize_t body;
    int escapes = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &b, &escapes)) return NULL;
    PyObject *r = NULL, *ext = NULL;
    uint8_t *scr = escapes ? PyMem_Malloc((size_t)b.len + 1) : NULL;
    if (escapes && !scr) { PyErr_NoMemory(); goto out; }
    if (frame_header(b.buf, b.len, &h, &body, scr)) { r = Py_NewRef(Py_None); goto out; }
    if (!(ext = PyDict_New())) goto out;
    for (int i = 0; h.has_ext && i < h.n_ext; i++) {
        PyObject *k = utext(h.key[i]), *v = k ? utext(h.val[i]) : NULL;
        int rc = v ? PyDict_SetItem(ext, k, v) : -1;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (rc) goto out;
    }
    r = Py_BuildValue("LLLLNNOy#", (long long)h.code, (long long)h.opaque, (long long)h.flag,
                      (long long)h.version, utext(h.language),
                      h.has_remark ? utext(h.remark) : Py_NewRef(Py_None), ext,
                      (const char *)b.buf + b.len - body, body);
out:
    Py_XDECREF(ext);
    PyMem_Free(scr);
    PyBuffer_Release(&b);
    return r;
}

/* SendFuture's _state is _PENDING (0) */
static int is_pending(PyObject *state) {
    return state && PyLong_CheckExact(state) && PyLong_AsLong(state) == 0;
}

/* SendFuture.set_result(w, result) (consumes result): in place, as its Python does it (the value,
 * then the state, then the waiting thread's Event, then the callback, taken off first, called
 * with the result, an Exception it raises logged by send_future.callback_raised and the send's
 * outcome kept, then add_done_callback's functions by _run_more), or by that Python when
 * add_done_callback's list exists before; 0, or -1 with an exception (one a callback raised that
 * is not an Exception, as SendFuture lets it through). Why the callback here too: the two
 * Python frames around it (set_result, _finish) were ~500 instructions of the loop thread a send
 * for a user who passes one (RESULTS "Session 13, async13"). */
static int resolve_future(PyObject *w, PyObject *result) {
    PyObject *more = AS_SLOT(w, AS_MORE);
    if (more && more != Py_None) {
        PyObject *call[2] = {w, result};
        PyObject *r = PyObject_Vectorcall(resolve, call, 2, NULL);
        Py_DECREF(result);
        if (r) { Py_DECREF(r); return 0; }
        if (!PyErr_ExceptionMatches(invalid_state)) return -1;
        PyErr_Clear();  /* answered already */
        return 0;
    }
    PyObject *old_value = AS_SLOT(w, AS_VALUE), *old_state = AS_SLOT(w, AS_STATE);
    if (!is_pending(old_state)) { Py_DECREF(result); return 0; }  /* answered already (dropped) */
    AS_SLOT(w, AS_VALUE) = result;
    AS_SLOT(w, AS_STATE) = Py_NewRef(state_ok);
    Py_XDECREF(old_state);
    Py_XDECREF(old_value);
    PyObject *ev = AS_SLOT(w, AS_EVENT);  /* read after the state: SendFuture's order */
    if (ev && ev != Py_None) {
        Py_INCREF(ev);
        PyObject *r = PyObject_CallMethodNoArgs(ev, s_set);
        Py_DECREF(ev);
        if (!r) return -1;
        Py_DECREF(r);
    }
    PyObject *cb = AS_SLOT(w, AS_CALLBACK);
    if (!cb || cb == Py_None) return 0;
    AS_SLOT(w, AS_CALLBACK) = Py_NewRef(Py_None);  /* (its reference now this call's) */
    Py_INCREF(result);  /* (the slot's may be replaced while the callback runs) */
    PyObject *r = PyObject_CallOneArg(cb, result);
    Py_DECREF(result);
    int rc = 0;
    if (r) {
        Py_DECREF(r);
    } else if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        rc = -1;
    } else {
        PyObject *et, *e, *tb;
        PyErr_Fetch(&et, &e, &tb);
        PyErr_NormalizeException(&et, &e, &tb);
        if (tb) PyException_SetTraceback(e, tb);
        PyObject *lr = PyObject_CallFunctionObjArgs(callback_raised, cb, e, NULL);
        Py_XDECREF(et), Py_XDECREF(e), Py_XDECREF(tb);
        if (lr) Py_DECREF(lr);
        else rc = -1;
    }
    Py_DECREF(cb);
    if (rc) return rc;
    more = AS_SLOT(w, AS_MORE);  /* (added by the callback: SendFuture._finish runs them too) */
    if (more && more != Py_None) {
        PyObject *rm = PyObject_CallMethod(w, "_run_more", NULL);
        if (!rm) return -1;
        Py_DECREF(rm);
    }
    return 0;
}

/* The answer of one frame to its AsyncSend waiter ``w`` (in ``pending`` under ``key``):
 * 1 done, 0 not this path's (nothing changed), -1 an error raised. */
static int complete(pt_table *pending, int64_t key, PyObject *w, const header *h) {
    PyObject *state = AS_SLOT(w, AS_STATE), *mq = AS_SLOT(w, AS_MQ), *uniq = AS_SLOT(w, AS_UNIQ);
    if (!is_pending(state) || !mq || !uniq) return 0;  /* done already: the Python path drops it */
    long qid = -1;
    if (PyTuple_Check(mq) && PyTuple_GET_SIZE(mq) == 3 && PyLong_CheckExact(PyTuple_GET_ITEM(mq, 2)))
        qid = PyLong_AsLong(PyTuple_GET_ITEM(mq, 2));
    span msg_id;
    int64_t offset;
    if (qid < 0 || success_fields(h, qid, &msg_id, &offset)) { PyErr_Clear(); return 0; }
    Py_INCREF(w);  /* the table's reference may go while the result is made (an allocation may collect) */
    Py_INCREF(mq);
    Py_INCREF(uniq);
    int rc = -1, truthy = PyObject_IsTrue(uniq);
    if (truthy < 0) goto out;
    /* the result first: a failure to make it (memory) changes nothing, the read fails and the
     * connection's close fails every waiter still pending, this one included. It is
     * SendResult(SEND_OK, uniq or msgId, msgId, mq, queueOffset) with the msgId and the offset
     * kept raw until read (hot_result.c result_tcp) */
    PyObject *result = result_tcp(truthy ? uniq : NULL, (const char *)msg_id.p, msg_id.n, offset, mq);
    if (!result) goto out;
    /* taken out of the table by its key again: code run meanwhile may have moved its slot */
    PyObject *got = pt_take(pending, key);
    if (got != w) {  /* taken meanwhile (expired, the connection lost): the Python path's, as before */
        if (got) Py_XDECREF(pt_store(pending, key, got));  /* (back where it was: room is there) */
        Py_DECREF(result);
        rc = 0;
        goto out;
    }
    Py_DECREF(got);  /* (w is still held above) */
    rc = resolve_future(w, result) ? -1 : 1;
out:
    Py_DECREF(w);
    Py_DECREF(mq);
    Py_DECREF(uniq);
    return rc;
}

/* ---- the broker's own SUCCESS answer, matched against its template ------------------------- */
/* send_answer.h's sa_template (what a match says, and why it is read as the scanner reads it) */
static sa_bound tpl;

/* the header h of a frame (after its length word; n bytes) when it is the template: 0, or -1 */
static int tpl_header(const char *f, Py_ssize_t n, header *h) { return sa_bound_header(&tpl, f, n, h); }

/* bind_template(pieces): the 5 pieces of the broker's SUCCESS answer header (None: none);
 * ValueError (the binding before kept) when the scanner does not read them as an answer */
static PyObject *a_bind_template(PyObject *self, PyObject *pieces) { return sa_bind(&tpl, pieces); }

/* match(frame) -> (opaque, msgId, queueId, queueOffset) as the template path reads them, or None:
 * the tests' view (held against decode) */
static PyObject *a_match(PyObject *self, PyObject *arg) {
    Py_buffer b;
    header h;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE)) return NULL;
    PyObject *r = tpl_header(b.buf, b.len, &h) ? Py_NewRef(Py_None)
                  : Py_BuildValue("LNNN", (long long)h.opaque, text(h.val[0]), text(h.val[1]), text(h.val[2]));
    PyBuffer_Release(&b);
    return r;
}

/* The frames of data[pos:n] the hook takes, served (client_read.h): the new pos; *stop says
 * the frame there is complete and is the Python path's. -1 with an exception. ``pending`` is the
 * connection's ``_pending``; one not of this module's table takes nothing. */
Py_ssize_t shmq_answers_scan(PyObject *pending, const char *data, Py_ssize_t n, Py_ssize_t pos, int *stop) {
    *stop = 0;
    if (!as_type) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return -1; }
    if (!Py_IS_TYPE(pending, &shmq_pending_type)) return pos;  /* not this module's table: the Python path's */
    pt_table *t = (pt_table *)pending;
    Py_INCREF(pending);  /* (a callback run below may drop the connection's reference) */
    int err = 0;
    header h;
    while (n - pos >= 4) {
        Py_ssize_t total = rh_be32((const uint8_t *)data + pos), body;
        if (total < 4 || total > MAX_TAKEN || total > n - pos - 4) break;
        *stop = 1;  /* from here the frame at pos is complete: not taken, it is Python's */
        if (tpl_header(data + pos + 4, total, &h)) {
            if (frame_header(data + pos + 4, total, &h, &body, NULL) || !(h.flag & 1)) break;
        } else {
            body = 0;
        }
        Py_ssize_t i = pt_find(t, h.opaque);
        PyObject *w = i >= 0 ? t->slots[i].val : NULL;  /* borrowed */
        int rc = 0;
        if (w && Py_TYPE(w) == as_type) {
            if (!body && !h.code && h.has_ext) rc = complete(t, h.opaque, w, &h);
        } else if (w && pull_waiter(w)) {  /* a PushConsumer's pull (pull_answer.c) */
            PyObject *key = PyLong_FromLongLong(h.opaque);
            rc = key ? pull_answer(pending, key, w, &h, (const uint8_t *)data + pos + 4 + total - body, body) : -1;
            Py_XDECREF(key);
        }
        if (rc < 0) { err = 1; break; }
        if (!rc) break;
        *stop = 0;
        pos += 4 + total;
    }
    Py_DECREF(pending);
    return err ? -1 : pos;
}

/* answers(conn, data, pos) -> (pos, None, stop): the client connection's fast hook (the module
 * comment says which frames it takes). ``pos`` is where it stopped: with ``stop`` the frame
 * there is complete and is the Python path's; without, the rest (an incomplete frame, a bad
 * length, a large frame) goes to the frame decoder. client_read.c calls the same scan on its
 * own read buffer. */
static PyObject *a_answers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "answers(conn, data, pos)"); return NULL; }
    Py_ssize_t pos = PyLong_AsSsize_t(args[2]);
    if (pos < 0 && PyErr_Occurred()) return NULL;
    PyObject *pending = PyObject_GetAttr(args[0], s_pending);
    if (!pending) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(args[1], &b, PyBUF_SIMPLE)) { Py_DECREF(pending); return NULL; }
    int stop;
    pos = shmq_answers_scan(pending, b.buf, b.len, pos, &stop);
    PyBuffer_Release(&b);
    Py_DECREF(pending);
    if (pos < 0) return NULL;
    return Py_BuildValue("nOO", pos, Py_None, stop ? Py_True : Py_False);
}

/* bind(AsyncSend, its _resolve (SendFuture.set_result), SendResult, SendStatus.SEND_OK,
 * InvalidStateError, send_future.callback_raised): once, at import */
static PyObject *a_bind(PyObject *self, PyObject *args) {
    PyObject *t, *res, *r, *ok, *inv, *raised;
    if (!PyArg_ParseTuple(args, "O!OOOOO", &PyType_Type, &t, &res, &r, &ok, &inv, &raised)) return NULL;
    if (as_bind(t)) return NULL;
    if (!(result_tcp = (shmq_result_tcp_fn)PyCapsule_Import(SHMQ_RESULT_TCP_CAPSULE, 0))) return NULL;
    Py_XSETREF(resolve, Py_NewRef(res));
    Py_XSETREF(result_type, Py_NewRef(r));
    Py_XSETREF(send_ok, Py_NewRef(ok));
    Py_XSETREF(invalid_state, Py_NewRef(inv));
    Py_XSETREF(callback_raised, Py_NewRef(raised));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)a_bind, METH_VARARGS, "bind(AsyncSend, AsyncSend._resolve, SendResult, SEND_OK, InvalidStateError, callback_raised)"},
    {"bind_pull", (PyCFunction)pull_bind, METH_O, "bind_pull(TcpPull): its answers are read here too (pull_answer.c)"},
    {"pull_frame", (PyCFunction)(void (*)(void))pull_frame, METH_FASTCALL,
     "pull_frame(pieces, order, (offset, flags, commit), opaque) -> a PULL frame (pull_answer.c)"},
    {"answers", (PyCFunction)(void (*)(void))a_answers, METH_FASTCALL, "answers(conn, data, pos) -> (pos, None, stop)"},
    {"decode", (PyCFunction)a_decode, METH_VARARGS, "decode(frame, escapes=False) -> the header's fields as read here, or None"},
    {"bind_template", (PyCFunction)a_bind_template, METH_O, "bind_template(answer_pieces() or None): the broker's SUCCESS answer"},
    {"match", (PyCFunction)a_match, METH_O, "match(frame) -> (opaque, msgId, queueId, queueOffset) by the template, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_answer", NULL, -1, methods};

PyMODINIT_FUNC PyInit__answer(void) {
    if (!(s_pending = PyUnicode_InternFromString("_pending")) || !(s_set = PyUnicode_InternFromString("set"))
        || !(state_ok = PyLong_FromLong(1)))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && (shmq_pending_add(m) < 0 || shmq_reader_add(m) < 0 || shmq_conn_queue_add(m) < 0)) Py_CLEAR(m);
    return m;
}
