/*
 * shmq/native/async_plain.c -- ``Producer.send_async`` of a plain message over TCP, whole, in one
 * C call (shmq.native._oneway.AsyncPlain, called by ProducerBase.send_async, hot_producer.c).
 *
 * Why: after the lane (hot_oneway.c's put_async) wrote the frame and made the waiter in C, ~8k of
 * the caller's 14.5k instructions per send were the Python around that call (three frames:
 * Producer.send_async, async_lane.send_plain_async, oneway.plain, and the route's cache look-ups;
 * RESULTS "Session 5, tcpcli"). Here the same steps read the Message's C struct and the
 * producer's LaneState as the plan's fields, with no Python frame.
 *
 * ``send_oneway`` of a plain message is whole here too (``plan.oneway``, from ProducerBase.send_oneway):
 * oneway.send_plain's steps over the same rule and route cache (each queue's oneway template is
 * in it beside the async one), its Python ~9k of the caller's ~13.6k instructions a oneway before.
 *
 * A sync ``send()`` of a plain message reads the same rule and route here (``plan.sync``: the
 * plain rule, the route cache, the round robin drawn, the master address, the queue's template;
 * client/sync_send.send_plain makes the C sync call with them), so the two sends share one rule.
 *
 * What it does is async_lane.send_plain_async's common case, step for step: the plain rule
 * (oneway.plain), the route from the LaneState's cache (kept only while the client's route for
 * the topic is the same object), the round robin drawn from the producer's own counter, the
 * master address, the lane's put_async, the drain scheduled. Whatever it does not take exactly
 * -- a message that is not plain or not certainly so (an attribute unset, a field of a type whose
 * test would run Python code, tags Python's isprintable refuses), a route not in the cache, no master
 * address, a put that wrote nothing (FULL / EMONTH / UNSUPPORTED), any error before the frame is
 * in the lane -- answers None with nothing written, and the caller takes the Python method
 * (``Producer._send_async``), which decides it from the start. A plan exists only for a
 * LaneState without local links or latency-fault selection (oneway.lane_state makes it); it is
 * dropped with the LaneState whenever an attribute of the producer is set.
 */
#include <stddef.h>
#include "oneway_lane.h"
#include "hot_message.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Lane *lane;
    /* the LaneState's objects (shared, not copies): the client, its route dicts, the topics
     * checked, the round robin, the route cache; the producer (the waiter's), the Message
     * class, the default timeout and retries, and producer._done for an error after the put */
    PyObject *inst, *publish, *addrs, *sendable, *rr, *routes, *producer, *msg_cls, *timeout, *left, *done;
    /* a oneway's waits, as oneway.send_plain makes them: oneway.wait_room(inst, addr, timeout)
     * while the lane is full (or every 32nd put: the connection looked at), and the id
     * generator's roll() at a new month */
    PyObject *wait_room, *roll;
    Py_ssize_t limit;  /* the largest body the lane takes (LaneState.limit) */
    /* plan_route's last look-ups (the route of c_topic, the address of c_bname), each valid
     * while the dicts it read are unchanged: a dict's version tag changes with every change of
     * that dict and is never reused by another, and each entry holds what it read, so a hit is
     * what the look-ups would find (a send is 4 look-ups otherwise, ~500 instructions) */
    PyObject *c_topic, *c_r, *c_info, *c_bname, *c_ba, *c_addr;
    uint64_t c_routes_v, c_publish_v, c_addrs_v, c_ba_v;
} plan;

/* the version tag of a dict (CPython 3.11's; later ones deprecate it: no cache there) */
#if PY_VERSION_HEX < 0x030C0000
#define ROUTE_CACHE 1
#define DICT_V(d) (((PyDictObject *)(d))->ma_version_tag)
#endif

/* itertools.count's object as CPython 3.11 and 3.12 lay it out (Modules/itertoolsmodule.c): while
 * cnt is not PY_SSIZE_T_MAX (its "fast mode": an int start, a step of 1) next() answers cnt and
 * adds one. plan_route draws the round robin so, with no int made (the producer's count is the
 * one its Python path draws from too); rr_type is NULL (next() called) when the type's size is
 * not this struct's, or on another CPython */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#define RR_PEEK 1
typedef struct {
    PyObject_HEAD
    Py_ssize_t cnt;
    PyObject *long_cnt, *long_step;
} count_mirror;
static PyTypeObject *rr_type;
#endif

static PyObject *str_drain_scheduled, *str_loop, *str_call_soon_threadsafe, *str_drain_submitted,
    *str_template, *str_pieces, *zero;

/* tags as oneway.plain takes them: NULL when not plain (or not certainly: the caller's Python
 * decides), else None (no tags: None or "") or the str; borrowed */
static PyObject *plain_tags(PyObject *t) {
    if (t == Py_None) return t;
    if (!PyUnicode_CheckExact(t)) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(t);
    if (!n) return Py_None;  /* `msg.tags or None` */
    int kind = PyUnicode_KIND(t);
    const void *d = PyUnicode_DATA(t);
    for (Py_ssize_t i = 0; i < n; i++)  /* str.isprintable, character by character */
        if (!Py_UNICODE_ISPRINTABLE(PyUnicode_READ(kind, d, i))) return NULL;
    return t;
}

/* an exact int, str, list or tuple (None: 0): its truth without running any Python code; -1 for
 * any other type (the caller's Python decides) */
static int plain_truth(PyObject *o) {
    if (o == Py_None) return 0;
    if (PyLong_CheckExact(o) || PyFloat_CheckExact(o)) return PyObject_IsTrue(o);
    if (PyUnicode_CheckExact(o)) return PyUnicode_GET_LENGTH(o) != 0;
    if (PyList_CheckExact(o)) return PyList_GET_SIZE(o) != 0;
    if (PyTuple_CheckExact(o)) return PyTuple_GET_SIZE(o) != 0;
    return -1;
}

/* the route entry of one queue in the LaneState's cache (oneway._targets): the queue, its
 * SendTarget and oneway SendTarget, and their templates' pieces (the frame's literal bytes) */
enum { RT_MQ, RT_TARGET, RT_ONEWAY_TARGET, RT_PIECES, RT_ONEWAY_PIECES, RT_N };

/* the route of a plain message to ``topic`` from the LaneState's cache: -1 (nothing drawn: the
 * caller's Python decides) when it is not there (or not of the cache's shape), else 0 with the
 * round robin drawn, *mq the queue, *t its entry (RT_*) and *addr the master's address, or NULL
 * when the client knows none; *info (when asked) the route. All borrowed. Shared by
 * send_async's put, send_oneway's and send()'s ``sync``. */
static int plan_route(plan *self, PyObject *topic, PyObject **info_out, PyObject **mq_out, PyObject **addr_out,
                      PyObject **t_out) {
    /* the route: the LaneState's (info, [entry]) while info is the client's route */
    PyObject *r, *info;
#ifdef ROUTE_CACHE
    if (topic == self->c_topic && DICT_V(self->routes) == self->c_routes_v && DICT_V(self->publish) == self->c_publish_v) {
        r = self->c_r, info = self->c_info;  /* (held by the cache: checked when they were stored) */
    } else {
#endif
    r = PyDict_GetItemWithError(self->routes, topic);
    if (!r || !PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2 || !(info = PyDict_GetItemWithError(self->publish, topic))
        || PyTuple_GET_ITEM(r, 0) != info)
        return -1;
#ifdef ROUTE_CACHE
    /* the versions read before the old entries are released (that may run code that changes a
     * dict: then the next send misses) */
    self->c_routes_v = DICT_V(self->routes), self->c_publish_v = DICT_V(self->publish);
    Py_INCREF(topic), Py_INCREF(r), Py_INCREF(info);
    PyObject *old[3] = {self->c_topic, self->c_r, self->c_info};
    self->c_topic = topic, self->c_r = r, self->c_info = info;
    for (int j = 0; j < 3; j++) Py_XDECREF(old[j]);
    }
#endif
    PyObject *targets = PyTuple_GET_ITEM(r, 1);
    if (!PyList_CheckExact(targets) || !PyList_GET_SIZE(targets)) return -1;
    Py_ssize_t i;  /* next(s.rr) % len(targets) */
#ifdef RR_PEEK
    count_mirror *c = (count_mirror *)self->rr;
    if (rr_type && Py_IS_TYPE(self->rr, rr_type) && c->cnt != PY_SSIZE_T_MAX) {
        i = c->cnt++;  /* (count_next's fast mode, step for step) */
    } else
#endif
    {
        PyObject *k = PyIter_Next(self->rr);
        if (!k) return -1;
        i = PyLong_AsSsize_t(k);
        Py_DECREF(k);
    }
    if (i < 0) return -1;
    PyObject *t = PyList_GET_ITEM(targets, i % PyList_GET_SIZE(targets));
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != RT_N) return -1;
    PyObject *mq = PyTuple_GET_ITEM(t, 0);  /* a MessageQueue: (topic, broker_name, queue_id) */
    if (!PyTuple_Check(mq) || PyTuple_GET_SIZE(mq) != 3) return -1;
    /* inst.broker_addrs.get(mq.broker_name, {}).get(0) */
    PyObject *bname = PyTuple_GET_ITEM(mq, 1);
#ifdef ROUTE_CACHE
    if (bname == self->c_bname && DICT_V(self->addrs) == self->c_addrs_v && DICT_V(self->c_ba) == self->c_ba_v) {
        *addr_out = self->c_addr;
    } else {
#endif
    PyObject *ba = PyDict_GetItemWithError(self->addrs, bname);
    *addr_out = ba && PyDict_CheckExact(ba) ? PyDict_GetItemWithError(ba, zero) : NULL;
    if (PyErr_Occurred()) return -1;
#ifdef ROUTE_CACHE
    if (*addr_out) {  /* (no address: not kept, the general path's error) */
        self->c_addrs_v = DICT_V(self->addrs), self->c_ba_v = DICT_V(ba);
        Py_INCREF(bname), Py_INCREF(ba), Py_INCREF(*addr_out);
        PyObject *old[3] = {self->c_bname, self->c_ba, self->c_addr};
        self->c_bname = bname, self->c_ba = ba, self->c_addr = *addr_out;
        for (int j = 0; j < 3; j++) Py_XDECREF(old[j]);
    }
    }
#endif
    if (info_out) *info_out = info;
    *mq_out = mq;
    *t_out = t;
    return 0;
}

/* a new segment's marker is in the client's deque: its drain asked for unless it is already
 * (``if not inst._drain_scheduled: inst._drain_scheduled = True;
 * inst.loop.call_soon_threadsafe(inst._drain_submitted)``): 0, or -1 with an exception */
static int plan_drain(plan *self) {
    PyObject *ds = PyObject_GetAttr(self->inst, str_drain_scheduled);
    int scheduled = ds ? PyObject_IsTrue(ds) : -1;
    Py_XDECREF(ds);
    if (scheduled == 0) {
        PyObject *loop = NULL, *fn = NULL, *res = NULL;
        self->lane->marker_unseen = 0;  /* (before the call: a thread switch there may put again) */
        if (!PyObject_SetAttr(self->inst, str_drain_scheduled, Py_True) &&
            (loop = PyObject_GetAttr(self->inst, str_loop)) && (fn = PyObject_GetAttr(self->inst, str_drain_submitted)))
            res = PyObject_CallMethodOneArg(loop, str_call_soon_threadsafe, fn);
        Py_XDECREF(loop);
        Py_XDECREF(fn);
        Py_XDECREF(res);
        scheduled = res ? 1 : -1;
    } else if (scheduled == 1) {
        self->lane->marker_unseen = 0;
    }
    return scheduled < 0 ? -1 : 0;
}

/* the route, address, template and put of a plain message (its fields held by the caller): the
 * AsyncSend, or None with nothing written; NULL only with an exception */
static PyObject *plan_put(plan *self, PyObject *msg, PyObject *topic, PyObject *body, PyObject *tags, PyObject *flag,
                          PyObject *cb, PyObject *timeout) {
    if (self->lane->hooked) Py_RETURN_NONE;  /* a request signer: the Python path's (oneway.plain) */
    PyObject *mq, *addr, *t;
    if (plan_route(self, topic, NULL, &mq, &addr, &t) || !addr) goto python;
    PyObject *entry = Py_NewRef(t), *w;  /* (holds the queue and the pieces) */
    {
        PyObject *vals[11] = {addr, PyTuple_GET_ITEM(t, RT_PIECES), flag, tags, body, msg, self->producer, cb, mq,
                              timeout, self->left};
        Py_INCREF(addr);
        w = lane_async(self->lane, vals);
        Py_DECREF(addr);
    }
    Py_DECREF(entry);
    if (!w || PyLong_CheckExact(w)) {  /* nothing written */
        Py_XDECREF(w);
        goto python;
    }
    /* written by this thread (lane_direct.c), or into a segment whose drain was asked for */
    if (self->lane->last_direct || !self->lane->marker_unseen) return w;
    /* the frame is in the lane: its segment's marker is in the deque; its drain may have run */
    if (plan_drain(self) < 0) {  /* as send_async's `except Exception as e: return _done(callback, e)` */
        Py_DECREF(w);
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
        PyObject *et, *e, *tb;
        PyErr_Fetch(&et, &e, &tb);
        PyErr_NormalizeException(&et, &e, &tb);
        if (tb) PyException_SetTraceback(e, tb);
        Py_XDECREF(et);
        Py_XDECREF(tb);
        PyObject *f = PyObject_CallFunctionObjArgs(self->done, cb, e, NULL);
        Py_DECREF(e);
        return f;
    }
    return w;
python:
    PyErr_Clear();  /* (the Python path meets the same error, if it is one, and decides it) */
    Py_RETURN_NONE;
}

/* oneway.plain, decided with no Python code run (exact types only; any other is the Python
 * path's): 1 with f[] = the message's topic, body, tags (None or a printable str) and flag,
 * borrowed; 0 when not plain or not certainly so. Every plain send of the plan shares it. */
static int plan_plain(plan *self, PyObject *msg, PyObject **f) {
    if ((PyObject *)Py_TYPE(msg) != self->msg_cls) return 0;
    shmq_message *m = (shmq_message *)msg;
    /* oneway.plain, in its order (an unset attribute: the Python path raises its AttributeError) */
    PyObject *topic = m->topic, *body = m->body, *tags = m->tags, *flag = m->flag;
    if (!topic || !body || !tags || !m->keys || !m->delay_level || !flag || !PyUnicode_CheckExact(topic) ||
        !PyLong_CheckExact(flag))
        return 0;
    int in = PySet_Contains(self->sendable, topic);
    if (in != 1) {
        PyErr_Clear();
        return 0;
    }
    if (plain_truth(m->keys) || plain_truth(m->delay_level)) return 0;  /* (-1: Python's) */
    if (!PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) <= 0 || PyBytes_GET_SIZE(body) > self->limit ||
        !shmq_no_properties(m) || !(tags = plain_tags(tags)))
        return 0;
    f[0] = topic, f[1] = body, f[2] = tags, f[3] = flag;
    return 1;
}

/* plan(msg, callback, timeout) -> the AsyncSend, the future of an error after the put, or None.
 * The message's fields are held while the put runs (an allocation may collect, and a finalizer
 * could set an attribute of the message). */
static PyObject *plan_call(plan *self, PyObject *const *a, size_t nargsf, PyObject *kw) {
    if (PyVectorcall_NARGS(nargsf) != 3 || kw) {
        PyErr_SetString(PyExc_TypeError, "AsyncPlain(msg, callback, timeout)");
        return NULL;
    }
    PyObject *msg = a[0], *cb = a[1], *to = a[2], *f[4];
    if (!plan_plain(self, msg, f)) Py_RETURN_NONE;
    int tt = plain_truth(to);  /* `timeout or s.timeout` */
    if (tt < 0) Py_RETURN_NONE;
    PyObject *held[5] = {Py_NewRef(f[0]), Py_NewRef(f[1]), Py_NewRef(f[2]), Py_NewRef(f[3]), Py_NewRef(to)};
    PyObject *w = plan_put(self, msg, f[0], f[1], f[2], f[3], cb, tt ? to : self->timeout);
    for (int i = 0; i < 5; i++) Py_DECREF(held[i]);
    return w;
}

/* plan.sync(msg) -> None (not plain, the client has a request hook, or its route is not in the
 * cache: nothing drawn; an exception a look-up raised is raised, not answered None, so that
 * nothing is drawn twice), else (info, mq, addr, template, flag, tags, body) with the round robin
 * drawn (addr None: the client knows no master for the queue). What client/sync_send.send_plain
 * needs before its C call, by the same rule and cache as a send_async (one rule, not two). */
static PyObject *plan_sync(plan *self, PyObject *msg) {
    PyObject *f[4], *info, *mq, *addr, *t;
    if (!plan_plain(self, msg, f)) Py_RETURN_NONE;
    PyObject *held[4] = {Py_NewRef(f[0]), Py_NewRef(f[1]), Py_NewRef(f[2]), Py_NewRef(f[3])};
    PyObject *out = NULL;
    if (!self->lane->hooked && !plan_route(self, f[0], &info, &mq, &addr, &t)) {
        PyObject *tpl = PyObject_GetAttr(PyTuple_GET_ITEM(t, RT_TARGET), str_template);
        if (tpl) {
            out = PyTuple_Pack(7, info, mq, addr ? addr : Py_None, tpl, f[3], f[2], f[1]);
            Py_DECREF(tpl);
        }
    }
    if (!out && !PyErr_Occurred()) out = Py_NewRef(Py_None);
    for (int i = 0; i < 4; i++) Py_DECREF(held[i]);
    return out;  /* NULL: the exception a look-up raised (the Python path's _plain_route meets it too) */
}

/* plan.oneway(msg) -> True or None: ``send_oneway(msg)`` of a plain message whole, as
 * oneway.send_plain does it step for step: the plain rule, the route from the cache with the
 * round robin drawn, the master address (none: the message dropped, True, as there), the queue's
 * oneway template, the lane's put (a LOOK or FULL answer waits in wait_room, an EMONTH rolls
 * the ids, and the put is made again; an error those raise, RemotingTimeout, is raised), the
 * drain asked for when the put opened a segment. None (nothing drawn, nothing written): not
 * plain or not certainly so, a request hook, a route not in the cache; the Python method
 * decides it from the start. */
static PyObject *plan_oneway(plan *self, PyObject *msg) {
    PyObject *f[4], *mq, *addr, *t;
    if (!plan_plain(self, msg, f)) Py_RETURN_NONE;
    PyObject *held[4] = {Py_NewRef(f[0]), Py_NewRef(f[1]), Py_NewRef(f[2]), Py_NewRef(f[3])};
    PyObject *out = NULL, *pieces = NULL;
    if (self->lane->hooked || plan_route(self, f[0], NULL, &mq, &addr, &t)) {
        /* an exception a look-up raised is raised (as plan_sync does: the round robin may have
         * been drawn, and the Python path would draw again); else the Python path's */
        if (!PyErr_Occurred()) out = Py_NewRef(Py_None);
        goto done;
    }
    if (!addr) {  /* as send_oneway: dropped, the caller asked not to hear */
        out = Py_NewRef(Py_True);
        goto done;
    }
    Py_INCREF(addr);
    pieces = Py_NewRef(PyTuple_GET_ITEM(t, RT_ONEWAY_PIECES));
    PyObject *vals[6] = {addr, pieces, zero, f[3], f[2], f[1]};
    long st;
    for (;;) {
        PyObject *r = lane_oneway(self->lane, vals);
        if (!r) goto fail;
        st = PyLong_AsLong(r);
        Py_DECREF(r);
        if (st <= ST_NEW) break;
        if (st & ST_UNSUPPORTED) {  /* (tags plan_plain let by but the writer refuses: Python's) */
            out = Py_NewRef(Py_None);
            goto fail;
        }
        PyObject *w = st & ST_EMONTH ? PyObject_CallNoArgs(self->roll)
                                     : PyObject_CallFunctionObjArgs(self->wait_room, self->inst, addr, self->timeout, NULL);
        if (!w) goto fail;
        Py_DECREF(w);
    }
    if (!self->lane->last_direct && self->lane->marker_unseen && plan_drain(self) < 0) goto fail;
    out = Py_NewRef(Py_True);
fail:
    Py_DECREF(addr);
    Py_DECREF(pieces);
done:
    for (int i = 0; i < 4; i++) Py_DECREF(held[i]);
    return out;  /* NULL: the exception a look-up, a wait or the drain's call raised */
}

static PyMethodDef plan_methods[] = {
    {"oneway", (PyCFunction)plan_oneway, METH_O,
     "oneway(msg) -> True (a plain send_oneway made, or dropped for want of an address), or None"},
    {"sync", (PyCFunction)plan_sync, METH_O,
     "sync(msg) -> (info, mq, addr, template, flag, tags, body) of a plain send(), the round robin drawn; or None"},
    {NULL, NULL, 0, NULL},
};

static int plan_init(plan *self, PyObject *args, PyObject *kw) {
    (void)kw;
    PyObject *lane, *inst, *publish, *addrs, *sendable, *rr, *routes, *producer, *cls, *timeout, *left, *done, *wait,
        *roll;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "O!OO!O!O!OO!OO!OOOnOO:AsyncPlain", &shmq_lane_type, &lane, &inst, &PyDict_Type,
                          &publish, &PyDict_Type, &addrs, &PySet_Type, &sendable, &rr, &PyDict_Type, &routes,
                          &producer, &PyType_Type, &cls, &timeout, &left, &done, &limit, &wait, &roll))
        return -1;
    /* the struct this reads is hot_message.h's: a subclass that adds nothing to MessageBase */
    if (((PyTypeObject *)cls)->tp_basicsize != (Py_ssize_t)sizeof(shmq_message)) {
        PyErr_SetString(PyExc_TypeError, "AsyncPlain: the Message class is not MessageBase's layout");
        return -1;
    }
    PyObject *o[14] = {lane, inst, publish, addrs, sendable, rr, routes, producer, cls, timeout, left, done, wait, roll};
    PyObject **f[14] = {(PyObject **)&self->lane, &self->inst, &self->publish, &self->addrs, &self->sendable, &self->rr,
                        &self->routes, &self->producer, &self->msg_cls, &self->timeout, &self->left, &self->done,
                        &self->wait_room, &self->roll};
    for (int i = 0; i < 14; i++) Py_XSETREF(*f[i], Py_NewRef(o[i]));
    Py_CLEAR(self->c_topic); Py_CLEAR(self->c_r); Py_CLEAR(self->c_info);  /* (other dicts: nothing kept) */
    Py_CLEAR(self->c_bname); Py_CLEAR(self->c_ba); Py_CLEAR(self->c_addr);
    self->limit = limit;
    self->vectorcall = (vectorcallfunc)plan_call;
    return 0;
}

#define PLAN_EACH(X) X(self->lane); X(self->inst); X(self->publish); X(self->addrs); X(self->sendable); \
    X(self->rr); X(self->routes); X(self->producer); X(self->msg_cls); X(self->timeout); X(self->left); X(self->done); \
    X(self->wait_room); X(self->roll); X(self->c_topic); X(self->c_r); X(self->c_info); X(self->c_bname); \
    X(self->c_ba); X(self->c_addr)

static int plan_traverse(plan *self, visitproc visit, void *arg) {
    PLAN_EACH(Py_VISIT);
    return 0;
}

static int plan_clear(plan *self) {
    PLAN_EACH(Py_CLEAR);
    return 0;
}

static void plan_dealloc(plan *self) {
    PyObject_GC_UnTrack(self);
    plan_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject plan_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._oneway.AsyncPlain",
    .tp_basicsize = sizeof(plan),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "AsyncPlain(lane, inst, publish, broker_addrs, sendable, rr, routes, producer, Message, timeout, left, "
              "done, limit, wait_room, roll)(msg, callback, timeout): a plain send_async whole, or None (async_plain.c)",
    .tp_vectorcall_offset = offsetof(plan, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_methods = plan_methods,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)plan_init,
    .tp_traverse = (traverseproc)plan_traverse,
    .tp_clear = (inquiry)plan_clear,
    .tp_dealloc = (destructor)plan_dealloc,
};

int shmq_async_plain_add(PyObject *m) {
    static const char *const names[] = {"_drain_scheduled", "loop", "call_soon_threadsafe", "_drain_submitted",
                                        "template", "pieces"};
    PyObject **strs[] = {&str_drain_scheduled, &str_loop, &str_call_soon_threadsafe, &str_drain_submitted,
                         &str_template, &str_pieces};
    for (int i = 0; i < 6; i++)
        if (!*strs[i] && !(*strs[i] = PyUnicode_InternFromString(names[i]))) return -1;
    if (!zero && !(zero = PyLong_FromLong(0))) return -1;
#ifdef RR_PEEK
    PyObject *it = PyImport_ImportModule("itertools"), *ct = it ? PyObject_GetAttrString(it, "count") : NULL;
    Py_XDECREF(it);
    if (!ct) return -1;
    if (PyType_Check(ct) && ((PyTypeObject *)ct)->tp_basicsize == (Py_ssize_t)sizeof(count_mirror))
        rr_type = (PyTypeObject *)Py_NewRef(ct);
    Py_DECREF(ct);
#endif
    if (PyType_Ready(&plan_type) < 0) return -1;
    return PyModule_AddObjectRef(m, "AsyncPlain", (PyObject *)&plan_type);
}
