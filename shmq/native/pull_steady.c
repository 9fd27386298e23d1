/*
 * shmq/native/pull_steady.c -- a PushConsumer's steady pull answer handled in C (part of
 * shmq.native._answer, beside pull_answer.c, which calls it once it has read the answer).
 *
 * Why: a caught-up TCP consumer gets one PULL answer per message, and ``TcpPull._pulled`` in
 * Python (the ProcessQueue's put under its lock, ``_issue``: the route look-up, the offset
 * table, the frame, the connection's queueing; the hand-over to a consume thread) was ~22k
 * instructions of the loop thread's ~54k a message (bench/RESULTS.md, Session 13, pullcycle13),
 * spread over ~15 Python calls. Here the same steps, in the same order, for the steady case
 * only; anything else is ``_pulled``'s, unchanged.
 *
 * Taken (``pull_steady`` answers 1) only when every one of these holds, all read before
 * anything is changed, so a 0 leaves the answer to ``_pulled`` with nothing done:
 * - the chain armed it (``TcpPull._steady`` a tuple: client/tcp_pull.py ``_arm`` says what it
 *   holds and when it is set: a plain frame template, no ACL hook, not an orderly consumer's
 *   gated queue; cleared when the chain stops);
 * - the queue not dropped, the consumer running and not gated, no tag filter on its topic;
 * - messages, contiguous and above everything the ProcessQueue saw (its put's one-span case),
 *   and room for them under the pull threshold (else flow control: Python finishes the chain);
 * - the route's usual case (ClientInstance.read_addr's first return: no address ever marked
 *   unreachable) naming the chain's own address, and its connection not closed;
 * - the consume pool not shutting down (when the hand-over is done here).
 * Then, as ``_pulled``: the suggested broker noted, next_offset set, the span put under the
 * ProcessQueue's lock (rechecked under it: otherwise ProcessQueue.put's general case in Python),
 * the next PULL queued by ``Connection.start_frame`` (the one queueing: a client connection's is
 * conn_queue.c's, called directly; its frame built by the
 * chain's PullBuild from the queue's template: pull_answer.c's ``pull_frame`` encoder), and
 * only then the messages handed over: ConsumePool.submit's steps from the loop thread (the task
 * appended before the owed wake-up is counted: handoff.c's rule), or the consumer's own
 * ``_deliver``. An error raised on the way goes to ``TcpPull._steady_failed``, which logs it and
 * ends the chain as ``_pulled``'s handler does; never the connection.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "conn_queue.h"
#include "pull_answer.h"

/* TcpPull._steady's items (client/tcp_pull.py _arm) */
enum { S_CORE, S_PQ, S_MQ, S_CONN, S_ADDR, S_INST, S_BUILD, S_POOL, S_FLAGS, S_COMMIT_FLAGS,
       /* the containers read per answer, fixed for the chain (_arm: made once by their owners,
        * only changed in place): core._filters, core._pull_from, inst._unreachable,
        * inst.broker_addrs, pq.lock's bound acquire and release, pq._spans, core.offsets.table */
       S_FILTERS, S_PULL_FROM, S_UNREACHABLE, S_BROKER_ADDRS, S_ACQUIRE, S_RELEASE, S_SPANS, S_TABLE, S_N };
/* the pool's hand-over, S_POOL's items when not None (PushConsumer._steady_pool) */
enum { D_POOL, D_APPEND, D_FN, D_POSTS, D_SELECTOR, D_N };

static PyObject *s_dropped, *s_running, *s_gated, *s_queue_offset, *s_max_seen, *s_count, *s_threshold,
    *s_closed, *s_stopping, *s_next_offset, *s_low, *s_put, *s_start_frame, *s_deliver,
    *s_owed, *s_failed;

static int names(void) {
    if (s_failed) return 0;
#define N(v, t) if (!(v = PyUnicode_InternFromString(t))) return -1
    N(s_dropped, "dropped"); N(s_running, "_running"); N(s_gated, "_gated");
    N(s_queue_offset, "queue_offset"); N(s_max_seen, "max_seen"); N(s_count, "count"); N(s_threshold, "threshold");
    N(s_closed, "closed"); N(s_stopping, "_stopping"); N(s_next_offset, "next_offset");
    N(s_low, "_low"); N(s_put, "put");
    N(s_start_frame, "start_frame"); N(s_deliver, "_deliver"); N(s_owed, "owed"); N(s_failed, "_steady_failed");
#undef N
    return 0;
}

/* obj.name is exactly ``want`` (Py_True / Py_False): 1, else 0; -1 an error raised */
static int is(PyObject *obj, PyObject *name, PyObject *want) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) return -1;
    int r = v == want;
    Py_DECREF(v);
    return r;
}

/* obj.name as an int64 (an exact int): 0, else -1 (an error raised, or *ok 0: another type) */
static int int_of(PyObject *obj, PyObject *name, int64_t *out, int *ok) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) return -1;
    *ok = PyLong_CheckExact(v);
    if (*ok) {
        int overflow;
        *out = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) *ok = 0;
    }
    Py_DECREF(v);
    return *ok ? 0 : (PyErr_Occurred() ? -1 : 0);
}

static int set_int(PyObject *obj, PyObject *name, int64_t v) {
    PyObject *x = PyLong_FromLongLong(v);
    if (!x) return -1;
    int r = PyObject_SetAttr(obj, name, x);
    Py_DECREF(x);
    return r;
}

/* Every condition of the steady case (the comment at the top), read only: 1 all hold, 0 not,
 * -1 an error raised. *lo / *hi: the messages' first and last queue offsets. */
static int steady(PyObject *const *st, int64_t suggest, PyObject *msgs, int64_t *lo, int64_t *hi) {
    PyObject *core = st[S_CORE], *pq = st[S_PQ], *mq = st[S_MQ], *v;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    int r, ok;
    if (!n || !PyTuple_Check(mq) || PyTuple_GET_SIZE(mq) != 3) return 0;  /* a MessageQueue */
    if ((r = is(pq, s_dropped, Py_False)) != 1 || (r = is(core, s_running, Py_True)) != 1 ||
        (r = is(core, s_gated, Py_False)) != 1)
        return r;
    /* no tag filter: ConsumerCore._filters has no entry for the topic, or (None, ...) */
    v = st[S_FILTERS];
    r = 0;
    if (PyDict_CheckExact(v)) {
        PyObject *f = PyDict_GetItemWithError(v, PyTuple_GET_ITEM(mq, 0));  /* borrowed */
        r = f ? PyTuple_CheckExact(f) && PyTuple_GET_SIZE(f) && PyTuple_GET_ITEM(f, 0) == Py_None
              : PyErr_Occurred() ? -1 : 1;
    }
    if (r != 1) return r;
    /* ProcessQueue.put's one-span case, with room under the threshold after it */
    int64_t max_seen, count, threshold;
    if (int_of(PyList_GET_ITEM(msgs, 0), s_queue_offset, lo, &ok) || !ok ||
        int_of(PyList_GET_ITEM(msgs, n - 1), s_queue_offset, hi, &ok) || !ok ||
        int_of(pq, s_max_seen, &max_seen, &ok) || !ok || int_of(pq, s_count, &count, &ok) || !ok ||
        int_of(core, s_threshold, &threshold, &ok) || !ok)
        return PyErr_Occurred() ? -1 : 0;
    if (*lo <= max_seen || *hi - *lo != n - 1 || count + n >= threshold) return 0;
    /* read_addr's usual case: nothing marked unreachable, the suggested broker's address the chain's */
    if ((r = PyObject_IsTrue(st[S_UNREACHABLE]))) return r < 0 ? -1 : 0;
    v = st[S_BROKER_ADDRS];
    r = 0;
    if (PyDict_CheckExact(v)) {
        PyObject *addrs = PyDict_GetItemWithError(v, PyTuple_GET_ITEM(mq, 1)), *key, *a = NULL;
        if (addrs && PyDict_CheckExact(addrs) && (key = PyLong_FromLongLong(suggest))) {
            a = PyDict_GetItemWithError(addrs, key);
            Py_DECREF(key);
        }
        if (PyErr_Occurred()) r = -1;
        else if (a && PyUnicode_CheckExact(a)) r = a == st[S_ADDR] || PyUnicode_Compare(a, st[S_ADDR]) == 0;
    }
    if (r != 1) return r;
    if ((r = is(st[S_CONN], s_closed, Py_False)) != 1) return r;
    if (st[S_POOL] != Py_None) {
        if (!PyTuple_CheckExact(st[S_POOL]) || PyTuple_GET_SIZE(st[S_POOL]) != D_N) return 0;
        return is(PyTuple_GET_ITEM(st[S_POOL], D_POOL), s_stopping, Py_False);
    }
    return 1;
}

/* ProcessQueue.put(msgs) of a span (contiguous, above max_seen: checked again under its lock,
 * else put's general case in Python). Its lock is a threading.Lock, taken as put takes it. */
static int put(PyObject *const *st, PyObject *msgs, int64_t lo, int64_t hi) {
    PyObject *pq = st[S_PQ], *r;
    if (!(r = PyObject_CallNoArgs(st[S_ACQUIRE]))) return -1;
    Py_DECREF(r);
    int64_t max_seen, count;
    int ok, rc = -1, general = 0;
    if (int_of(pq, s_max_seen, &max_seen, &ok) || (ok && int_of(pq, s_count, &count, &ok))) goto out;
    if (!ok || lo <= max_seen) {
        general = 1;
        rc = 0;
        goto out;
    }
    PyObject *spans = st[S_SPANS], *key;
    if (!count && set_int(pq, s_low, lo)) goto out;
    if ((key = PyLong_FromLongLong(lo))) {
        if (!PyObject_SetItem(spans, key, msgs) && !set_int(pq, s_count, count + PyList_GET_SIZE(msgs)) &&
            !set_int(pq, s_max_seen, hi))
            rc = 0;
        Py_DECREF(key);
    }
out:;
    /* released whatever happened above, as put's finally does (an error stays raised) */
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    r = PyObject_CallNoArgs(st[S_RELEASE]);
    if (!r) {
        Py_XDECREF(et); Py_XDECREF(ev); Py_XDECREF(tb);
        return -1;
    }
    Py_DECREF(r);
    PyErr_Restore(et, ev, tb);
    if (rc || !general) return rc;
    PyObject *args[2] = {pq, msgs};
    if (!(r = PyObject_VectorcallMethod(s_put, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL))) return -1;
    Py_DECREF(r);
    return 0;
}

/* the commit offset and sysFlag of the next pull, as TcpPull._issue reads them: the sysFlag with
 * the commit bit (the chain's S_COMMIT_FLAGS, _arm's: the model's rule) only with an offset to
 * commit and to a master (suggest 0), else S_FLAGS; the bits are client/tcp_pull.py's */
static int commit_of(PyObject *const *st, int64_t suggest, int64_t *commit, int64_t *flags) {
    PyObject *table = st[S_TABLE];
    if (!PyDict_CheckExact(table)) {  /* OffsetStore.table is a dict */
        PyErr_SetString(PyExc_TypeError, "the offset store's table is not a dict");
        return -1;
    }
    PyObject *c = PyDict_GetItemWithError(table, st[S_MQ]);  /* borrowed: table.get(mq, -1) */
    int64_t v = -1;
    if (c) v = PyLong_AsLongLong(c);
    if (PyErr_Occurred()) return -1;
    *commit = v > 0 ? v : 0;
    *flags = PyLong_AsLongLong(st[v > 0 && !suggest ? S_COMMIT_FLAGS : S_FLAGS]);
    return *flags == -1 && PyErr_Occurred() ? -1 : 0;
}

/* an error raised after the first change: TcpPull._steady_failed(exc) logs it and ends the chain
 * (its answer: whether the messages are still handed over, as when _issue's ShmqError) */
static int failed(PyObject *w) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    if (tb) PyException_SetTraceback(ev, tb);
    PyObject *args[2] = {w, ev ? ev : Py_None};
    PyObject *r = PyObject_VectorcallMethod(s_failed, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(et); Py_XDECREF(ev); Py_XDECREF(tb);
    if (!r) return -1;
    int go = PyObject_IsTrue(r);
    Py_DECREF(r);
    return go;
}

static int hand_over(PyObject *const *st, PyObject *msgs) {
    PyObject *pool = st[S_POOL], *r;
    if (pool == Py_None) {  /* the consumer's own _deliver */
        PyObject *args[3] = {st[S_CORE], st[S_PQ], msgs};
        if (!(r = PyObject_VectorcallMethod(s_deliver, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL))) return -1;
        Py_DECREF(r);
        return 0;
    }
    /* ConsumePool.submit(fn, pq, msgs) from the loop thread: the task queued, then the owed
     * wake-up counted for the loop's sleep (handoff.py / handoff.c) */
    PyObject *inner = PyTuple_Pack(2, st[S_PQ], msgs), *task = inner ? PyTuple_Pack(2, PyTuple_GET_ITEM(pool, D_FN), inner) : NULL;
    Py_XDECREF(inner);
    if (!task) return -1;
    r = PyObject_Vectorcall(PyTuple_GET_ITEM(pool, D_APPEND), &task, 1, NULL);
    Py_DECREF(task);
    if (!r) return -1;
    Py_DECREF(r);
    void *posts = PyLong_AsVoidPtr(PyTuple_GET_ITEM(pool, D_POSTS));
    if (!posts) return -1;
    *(int32_t *)posts += 1;  /* the loop thread's own field: no atomics (handoff.h) */
    return PyObject_SetAttr(PyTuple_GET_ITEM(pool, D_SELECTOR), s_owed, Py_True);
}

int pull_steady(PyObject *w, PyObject **opaque_slot, PyObject *st_obj, int64_t suggest, int64_t next, PyObject *msgs) {
    if (!st_obj || !PyTuple_CheckExact(st_obj) || PyTuple_GET_SIZE(st_obj) != S_N || !PyList_CheckExact(msgs)) return 0;
    if (names()) return -1;
    PyObject *const *st = &PyTuple_GET_ITEM(st_obj, 0);
    int64_t lo, hi;
    Py_INCREF(st_obj);  /* its items borrowed for the call: _stop may clear the slot meanwhile */
    int r = steady(st, suggest, msgs, &lo, &hi);
    if (r < 0) {  /* a read the steady case did not expect (a stand-in's object): _pulled's */
        PyErr_Clear();
        r = 0;
    }
    if (r != 1) goto done;
    /* from here the answer is this path's: nothing below answers 0 */
    PyObject *pq = st[S_PQ], *mq = st[S_MQ];
    Py_XSETREF(*opaque_slot, PyLong_FromLong(0));  /* (a small int: never NULL) */
    PyObject *s = PyLong_FromLongLong(suggest);
    int bad = !s || PyObject_SetItem(st[S_PULL_FROM], mq, s) || set_int(pq, s_next_offset, next) ||
              put(st, msgs, lo, hi);
    Py_XDECREF(s);
    int64_t commit, flags;
    if (!bad && commit_of(st, suggest, &commit, &flags)) bad = 1;
    if (!bad) {  /* the next pull first, before any consume thread is woken (as _pulled) */
        if (pull_build_set(st[S_BUILD], next, flags, commit)) {
            bad = 1;
        } else {
            /* the connection's own start_frame: conn_queue.c's, called here with no Python frame
             * between, when it is the class's (a client connection's); else the method, as Python */
            PyObject *args[3] = {st[S_CONN], st[S_BUILD], w};
            PyObject *o = shmq_has_start_frame(st[S_CONN]) ? shmq_start_frame(st[S_CONN], st[S_BUILD], w)
                : PyObject_VectorcallMethod(s_start_frame, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            if (o) {
                Py_XSETREF(*opaque_slot, o);
            } else {
                int go = failed(w);  /* _issue's ShmqError: the chain ends, the messages still go */
                if (go < 0) { r = -1; goto done; }
                if (!go) goto done;
            }
        }
    }
    if (bad || hand_over(st, msgs)) {
        if (failed(w) < 0) r = -1;
    }
done:
    Py_DECREF(st_obj);
    return r;
}
