/*
 * shmq/native/hot_send.c -- the producer half of shmq.native._hot (module init in hot.c): the
 * local send's append as CPython functions that keep the GIL (``send``, ``send_message``,
 * ``send_batch``: the C core's shmq_send / shmq_send_batch, reached through the function pointers
 * cffi gives ``bind``), ``LocalSend`` (Producer.send's one C call: route-cache check, round
 * robin, append, SendResult), and ``encode_batch`` (a TCP batch's body, same checks).
 *
 * Why it exists: a cffi call releases and re-takes the GIL around every C function and packs
 * its arguments into a tuple. For a ~0.3 us append that was a third of a local send() (and a
 * GIL hand-off to the client's own threads on every call). Holding the GIL is safe only for a
 * call that never waits for another process: the sends are called with try_lock = 1, so a held
 * append lock answers SHMQ_EBUSY and the caller repeats the send through cffi, which releases
 * the GIL while it waits (shmq/client/local_send.py). What the append may still do with the
 * GIL held is bounded local work: the first entry of a ConsumeQueue file opens and maps it, and
 * a new extent of a sparse file is a pwrite of at most 64 KiB of zeros (core_ctl.c, cq_attach).
 */
#include "hot.h"
#include <stdlib.h>
#include "core.h"
#include "hot_message.h"
#include "hot_result.h"

typedef int (*send_fn)(const shmq_route *, const uint8_t *, uint32_t, const uint8_t *, uint32_t, int);
typedef int (*send_batch_fn)(const shmq_route *, const uint8_t *const *, const uint32_t *, uint32_t,
                             const uint8_t *, uint32_t, uint8_t *, uint64_t, char *, int);
typedef int (*encode_batch_fn)(const uint8_t *const *, const uint32_t *, uint32_t, const uint8_t *, uint32_t,
                               shmq_uniq *, uint8_t *, uint64_t, char *, uint64_t *);
static send_fn f_send;
static send_batch_fn f_send_batch;
static encode_batch_fn f_encode_batch;

/* bind(address of shmq_send, of shmq_send_batch, of shmq_encode_batch): once, at import of
 * shmq.native */
static PyObject *hot_bind(PyObject *self, PyObject *args) {
    PyObject *a, *b, *c;
    if (!PyArg_ParseTuple(args, "OOO", &a, &b, &c)) return NULL;
    void *p = PyLong_AsVoidPtr(a), *q = PyLong_AsVoidPtr(b), *e = PyLong_AsVoidPtr(c);
    if (!p || !q || !e) return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "null function"), NULL);
    f_send = (send_fn)p;
    f_send_batch = (send_batch_fn)q;
    f_encode_batch = (encode_batch_fn)e;
    Py_RETURN_NONE;
}

/* the SendResult of the append just made (hot_result.c): n ids of 32 chars at ids, the route's
 * offsets, all kept raw until read */
static inline PyObject *send_result(const shmq_route *r, const char *ids, Py_ssize_t n, PyObject *mq,
                                    PyObject *store_host) {
    return shmq_result_new(ids, n, r->out->phys_offset, r->out->queue_offset, mq, store_host);
}

/* send(route address, body: bytes, head: bytes, mq, store_host) -> the SendResult of the
 * appended record, or the SHMQ_* status (int) when it was not appended. */
static PyObject *hot_send(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    if (n != 5 || !PyBytes_CheckExact(args[1]) || !PyBytes_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "send(route, body: bytes, head: bytes, mq, store_host)");
        return NULL;
    }
    if (!f_send || !shmq_result_bound()) { PyErr_SetString(PyExc_RuntimeError, "shmq.native._hot is not bound"); return NULL; }
    const shmq_route *r = (const shmq_route *)PyLong_AsVoidPtr(args[0]);
    if (!r) return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "null route"), NULL);
    Py_ssize_t blen = PyBytes_GET_SIZE(args[1]), hlen = PyBytes_GET_SIZE(args[2]);
    if (blen > UINT32_MAX || hlen > UINT32_MAX) return PyLong_FromLong(SHMQ_ETOOBIG);
    int rc = f_send(r, (const uint8_t *)PyBytes_AS_STRING(args[1]), (uint32_t)blen,
                    (const uint8_t *)PyBytes_AS_STRING(args[2]), (uint32_t)hlen, 1);
    if (rc) return PyLong_FromLong(rc);
    return send_result(r, r->id_out, 1, args[3], args[4]);
}

/* ---- the producer's messages ------------------------------------------------------------
 * Only the exact bound Message class (hot_message.c: a C struct) is read here; a subclass takes
 * the Python path. */
/* the TAGS property's name and name/value separator, as bytes: given by the caller from
 * shmq.message (names.TAGS + properties.NAME_VALUE_SEP), which owns the property format */
static PyObject *msg_tags_key;

/* bind_message(Message, TAGS key bytes, timer_properties) */
static PyObject *hot_bind_message(PyObject *self, PyObject *args) {
    PyObject *cls, *key, *timer;
    if (!PyArg_ParseTuple(args, "OO!O", &cls, &PyBytes_Type, &key, &timer)) return NULL;
    if (PyBytes_GET_SIZE(key) > 64) {
        PyErr_SetString(PyExc_TypeError, "bind_message: the TAGS key must be bytes of at most 64");
        return NULL;
    }
    if (shmq_bind_message(cls, timer)) return NULL;
    Py_INCREF(key);
    Py_XSETREF(msg_tags_key, key);
    Py_RETURN_NONE;
}

#define MAX_BATCH_BYTES (4u << 20) /* local_send.MAX_BATCH_BYTES: the encoded batch */
/* the GIL is held from entry to return, so one set of buffers serves every thread */
static uint8_t *b_scratch;
static const uint8_t **b_ptrs;
static uint32_t *b_lens;
static char *b_ids;
static Py_ssize_t b_cap;

static int batch_room(Py_ssize_t n) {
    if (!b_scratch && !(b_scratch = malloc(MAX_BATCH_BYTES))) return -1;
    if (n <= b_cap) return 0;
    const uint8_t **p = realloc(b_ptrs, n * sizeof *p);
    if (p) b_ptrs = p;
    uint32_t *l = realloc(b_lens, n * sizeof *l);
    if (l) b_lens = l;
    char *i = realloc(b_ids, n * 32);
    if (i) b_ids = i;
    if (!p || !l || !i) return -1;
    b_cap = n;
    return 0;
}

/* Only exact built-in types are looked at, so no Python code runs (none could change the list
 * while its items are borrowed): a str equal to another, or None / 0 / an empty container. */
static int same_text(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    return PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b) && PyUnicode_Compare(a, b) == 0;
}

static int empty(PyObject *v) {
    if (v == Py_None) return 1;
    if (PyLong_CheckExact(v)) {
        int over;
        long long x = PyLong_AsLongLongAndOverflow(v, &over);
        return !over && x == 0;
    }
    if (PyDict_CheckExact(v)) return PyDict_GET_SIZE(v) == 0;
    if (PyList_CheckExact(v)) return PyList_GET_SIZE(v) == 0;
    if (PyTuple_CheckExact(v)) return PyTuple_GET_SIZE(v) == 0;
    if (PyUnicode_CheckExact(v)) return PyUnicode_GET_LENGTH(v) == 0;
    return 0;
}

static PyObject *zero;   /* the int 0 (a cached small int: what a default delay level / flag is) */
static inline int empty_fast(PyObject *v) { return v == Py_None || v == zero || empty(v); }

/* m (any object) is exactly a bound Message whose body is 1..limit bytes, with no keys,
 * properties, delay level or flag: its body is returned (borrowed), else NULL */
static PyObject *plain_body(PyObject *o, Py_ssize_t limit) {
    if (Py_TYPE(o) != shmq_message_cls) return NULL;
    shmq_message *m = (shmq_message *)o;
    PyObject *b = m->body;
    if (!b || !m->tags || !m->topic || !PyBytes_CheckExact(b) || PyBytes_GET_SIZE(b) < 1 || PyBytes_GET_SIZE(b) > limit)
        return NULL;
    if (!m->keys || !m->delay_level || !m->flag || !empty_fast(m->keys) || !empty_fast(m->delay_level) ||
        !empty_fast(m->flag) || !shmq_no_properties(m))
        return NULL;
    return b;
}

#define HEAD_MAX 256
/* the head (TAGS alone, as local_send._tags_head builds it) of tags: None or a str without the
 * \x01 / \x02 separators; its length, or -1 for tags the Python path must look at */
static Py_ssize_t tags_head(PyObject *tags, uint8_t *head) {
    if (tags == Py_None) return 0;
    if (!PyUnicode_CheckExact(tags)) return -1;
    Py_ssize_t tl;
    const char *t = PyUnicode_AsUTF8AndSize(tags, &tl);
    if (!t) { PyErr_Clear(); return -1; }
    if (tl == 0) return 0;
    Py_ssize_t kl = PyBytes_GET_SIZE(msg_tags_key);
    if (tl > HEAD_MAX - kl - 1 || memchr(t, SHMQ_NAME_VALUE_SEP, tl) || memchr(t, SHMQ_PROPERTY_SEP, tl)) return -1;
    memcpy(head, PyBytes_AS_STRING(msg_tags_key), kl);
    memcpy(head + kl, t, tl);
    head[kl + tl] = 2;   /* properties.PROPERTY_SEP */
    return kl + tl + 1;
}

/* The append of one message this path takes (plain_body, tags_head): 1 and its SHMQ_* status
 * in *rc (0: appended), or 0 when the message is not one for this path (nothing done). */
static int message_append(const shmq_route *r, PyObject *m, Py_ssize_t limit, int *rc) {
    PyObject *b = plain_body(m, limit);
    if (!b) return 0;
    uint8_t head[HEAD_MAX];
    Py_ssize_t hlen = tags_head(((shmq_message *)m)->tags, head);
    if (hlen < 0) return 0;
    *rc = f_send(r, (const uint8_t *)PyBytes_AS_STRING(b), (uint32_t)PyBytes_GET_SIZE(b), head, (uint32_t)hlen, 1);
    return 1;
}

/* send_message(route address, message, body limit, mq, store_host) -> SendResult, an int SHMQ_*
 * status (nothing appended), or None when the message is not one this call takes: exactly a
 * Message (bind_message) with a body of 1..limit bytes, no delay level, flag, properties or keys,
 * and no tags or tags of text without the \x01 / \x02 separators; its head (TAGS alone) is
 * built here, as local_send._tags_head builds it. */
static PyObject *hot_send_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyLong_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "send_message(route, message, limit: int, mq, store_host)");
        return NULL;
    }
    if (!f_send || !shmq_result_bound() || !msg_tags_key) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    const shmq_route *r = (const shmq_route *)PyLong_AsVoidPtr(args[0]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if (!r || (limit == -1 && PyErr_Occurred())) return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "null route"), NULL);
    int rc;
    if (!message_append(r, args[1], limit, &rc)) Py_RETURN_NONE;
    if (rc) return PyLong_FromLong(rc);
    return send_result(r, r->id_out, 1, args[3], args[4]);
}

/* ---- the producer's uniform batch ---------------------------------------------------------
 * send_batch(route address, messages, head, body limit, mq, store_host) -> SendResult, an int
 * SHMQ_* status (nothing appended), or None when the list is not a batch this call takes: every
 * item exactly a Message (the class bound by bind_message) of the first one's topic and tags,
 * with a body of 1..limit bytes and no delay level, flag, properties or keys. Anything else the
 * caller's Python path checks and raises on. */

/* The checks of a uniform batch (above): its bodies into b_ptrs / b_lens. Returns n, 0 when the
 * list is not such a batch (the caller answers None), -1 with an exception set. */
static Py_ssize_t uniform_batch(PyObject *list, Py_ssize_t limit) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n == 0 || n > UINT32_MAX / 2) return 0;
    if (batch_room(n)) return (PyErr_NoMemory(), -1);
    PyObject *m0 = PyList_GET_ITEM(list, 0);
    if (!plain_body(m0, limit)) return 0;
    PyObject *topic = ((shmq_message *)m0)->topic, *tags = ((shmq_message *)m0)->tags;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *m = PyList_GET_ITEM(list, k), *b = plain_body(m, limit);
        if (!b || !same_text(((shmq_message *)m)->topic, topic) || !same_text(((shmq_message *)m)->tags, tags))
            return 0;
        b_ptrs[k] = (const uint8_t *)PyBytes_AS_STRING(b);
        b_lens[k] = (uint32_t)PyBytes_GET_SIZE(b);
    }
    return n;
}

static PyObject *hot_send_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyList_CheckExact(args[1]) || !PyBytes_CheckExact(args[2]) || !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "send_batch(route, messages: list, head: bytes, limit: int, mq, store_host)");
        return NULL;
    }
    if (!f_send_batch || !shmq_result_bound() || !msg_tags_key) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    const shmq_route *r = (const shmq_route *)PyLong_AsVoidPtr(args[0]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if (!r || (limit == -1 && PyErr_Occurred())) return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "null route"), NULL);
    Py_ssize_t n = uniform_batch(args[1], limit);
    if (n <= 0) return n ? NULL : Py_NewRef(Py_None);
    int rc = f_send_batch(r, b_ptrs, b_lens, (uint32_t)n, (const uint8_t *)PyBytes_AS_STRING(args[2]),
                          (uint32_t)PyBytes_GET_SIZE(args[2]), b_scratch, MAX_BATCH_BYTES, b_ids, 1);
    if (rc) return PyLong_FromLong(rc);
    return send_result(r, b_ids, n, args[4], args[5]);
}

/* ---- the producer's whole common send() --------------------------------------------------
 * LocalSend(tls, limit)(message) does what client/local_send.LocalSender.send does for the
 * common message (plain_body) to a topic the calling thread already has a _LocalTopic for, in
 * one call from Producer.send: the route-cache check (the client's publish dict still holds the
 * TopicPublishInfo the entry was built from), the round robin over the writers, the append and
 * the SendResult. It answers None, with nothing appended and the round robin where it was,
 * whenever LocalSender must decide: no entry yet or a stale one, a topic without a link, a
 * SYNC_FLUSH route (the send waits for its flush), a message this path does not take, or an
 * append that answered a status (a held lock, a file to map, a full disk: LocalSender repeats
 * the append and handles it). */
enum { T_INFO, T_PUBLISH, T_LINK, T_WRITERS, T_N, T_I, T_STOREHOST, T_NSLOTS };
enum { W_MQ, W_FW, W_ADDR, W_SYNC, W_NFIELDS };  /* local_send._Route, the head of it */
static slotted topic_slots;
static PyObject *str_topics;
#define TSLOT(o, k) (*(PyObject **)((char *)(o) + topic_slots.off[k]))

/* bind_topic(_LocalTopic, slot descriptors in __slots__ order, _) */
static PyObject *hot_bind_topic(PyObject *self, PyObject *args) {
    PyObject *unused;
    if (!str_topics && !(str_topics = PyUnicode_InternFromString("topics"))) return NULL;
    if (bind_slots(&topic_slots, args, T_NSLOTS, &unused)) return NULL;
    Py_DECREF(unused);
    Py_RETURN_NONE;
}

/* owner / topics: the first sending thread's topic map, found by thread ident (any other
 * thread's is the attribute "topics" of tls, a threading.local); limit: the producer's
 * compress_over (bodies above it are compressed by the Python path) */
/* cache: the last entry found (t, borrowed from topics) and the route check it passed (its
 * publish dict held info for the topic): still true while the topic is the same object (held)
 * and neither dict has changed since, which CPython 3.11's dict version tag tells (it changes
 * with every modification of a dict, and no two dicts ever share one); a hit skips the two
 * dict lookups. Off on other versions (the tag is deprecated from 3.12). */
typedef struct {
    PyObject *topic, *topics, *t, *publish, *info;
    uint64_t topics_ver, publish_ver;
} ls_cache;

/* A writer tuple (local_send._Route) as C values, per queue index k: the tuple (held, so its
 * address is never another's while kept) and its route address. A tuple is immutable, so while
 * the entry's writers[k] is this very object, r is its W_ADDR and it is not SYNC_FLUSH (both
 * checked when kept): a send finds its route by one identity check instead of the tuple's
 * checks and an int conversion. A miss (another topic, a rebuilt entry) keeps the new tuple in
 * the slot. Queue indexes from LS_WMAX on are not kept (the uncached path). */
#define LS_WMAX 64
typedef struct { PyObject *w; const shmq_route *r; } ls_wslot;
static PyObject *small_ints[LS_WMAX];  /* 0 .. LS_WMAX-1: the round robin's values, made once */

typedef struct {
    PyObject_HEAD
    vectorcallfunc call;
    PyObject *tls, *topics;
    unsigned long owner;
    Py_ssize_t limit;
    ls_cache cache;
    ls_wslot wc[LS_WMAX];
} local_send;

#if PY_VERSION_HEX < 0x030C0000
#define DICT_VERSION(d) (((PyDictObject *)(d))->ma_version_tag)
#endif

/* What one send takes from the calling thread's _LocalTopic: the entry (borrowed from topics,
 * held), its next writer w (borrowed from it), that writer's index k (as next, made before the
 * append so nothing can fail after it) and route r. */
typedef struct {
    PyObject *topics, *t, *w, *next;
    const shmq_route *r;
    PyObject *old;  /* a writer tuple the route cache let go, released last (its dealloc runs no code here) */
} ls_pick;

/* topics[topic] when it is a _LocalTopic whose route is current (its publish dict still holds
 * the TopicPublishInfo it was built from), borrowed; NULL (an exception set, or none: LocalSender
 * builds it again) otherwise. */
static PyObject *ls_entry(ls_cache *c, PyObject *topics, PyObject *topic) {
#ifdef DICT_VERSION
    if (topic == c->topic && topics == c->topics && DICT_VERSION(topics) == c->topics_ver &&
        TSLOT(c->t, T_PUBLISH) == c->publish && TSLOT(c->t, T_INFO) == c->info &&
        DICT_VERSION(c->publish) == c->publish_ver)
        return c->t;
#endif
    PyObject *t = PyDict_CheckExact(topics) ? PyDict_GetItemWithError(topics, topic) : NULL;
    if (!t || Py_TYPE(t) != topic_slots.cls) return NULL;
    PyObject *publish = TSLOT(t, T_PUBLISH), *info = TSLOT(t, T_INFO);
    if (!publish || !info || !PyDict_CheckExact(publish)) return NULL;
    PyObject *now = PyDict_GetItemWithError(publish, topic);
    if ((now ? now : Py_None) != info) return NULL;
#ifdef DICT_VERSION
    Py_INCREF(topic);
    Py_XSETREF(c->topic, topic);
    c->topics = topics;
    c->topics_ver = DICT_VERSION(topics);
    c->t = t;
    c->publish = publish;
    c->publish_ver = DICT_VERSION(publish);
    c->info = info;
#endif
    return t;
}

/* the round robin's int (the slot's value: Python's t.i or this path's small_ints) as a C value,
 * read inline by hot.h's hot_ll for the common compact one; -1 for a negative or unreadable one */
static inline Py_ssize_t rr_index(PyObject *i) {
    long long k = hot_ll(i);
    if (k < 0) PyErr_Clear();
    return k < 0 ? -1 : (Py_ssize_t)k;
}

static int ls_writer(local_send *ls, PyObject *topic, ls_pick *p) {
    PyObject *t = ls_entry(&ls->cache, p->topics, topic);
    if (!t) return PyErr_Occurred() ? -1 : 0;
    PyObject *link = TSLOT(t, T_LINK), *writers = TSLOT(t, T_WRITERS), *i = TSLOT(t, T_I);
    PyObject *host = TSLOT(t, T_STOREHOST);
    if (!link || !writers || !i || !host || link == Py_None || !PyList_CheckExact(writers) || !PyLong_CheckExact(i) ||
        PyList_GET_SIZE(writers) == 0)
        return 0;
    Py_ssize_t n = PyList_GET_SIZE(writers), k = rr_index(i);
    if (k < 0) return 0;
    k = k + 1 < n ? k + 1 : (k + 1) % n;
    PyObject *w = PyList_GET_ITEM(writers, k);
    ls_wslot *c = k < LS_WMAX ? &ls->wc[k] : NULL;
    if (c && c->w == w) {
        p->r = c->r;
    } else {
        if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) < W_NFIELDS || PyTuple_GET_ITEM(w, W_SYNC) != Py_False)
            return 0;   /* SYNC_FLUSH: LocalSender waits for the flush */
        if (!(p->r = (const shmq_route *)PyLong_AsVoidPtr(PyTuple_GET_ITEM(w, W_ADDR))))
            return PyErr_Occurred() ? -1 : 0;
        if (c) {
            p->old = c->w;   /* the entry's t and writers are borrowed until the send is done */
            c->w = Py_NewRef(w);
            c->r = p->r;
        }
    }
    if (!(p->next = k < LS_WMAX ? Py_NewRef(small_ints[k]) : PyLong_FromSsize_t(k))) return -1;
    p->t = t;
    p->w = w;
    return 1;
}

/* 1 with *p filled (release it with ls_release), 0 when LocalSender must decide, -1 on error */
static int ls_route(local_send *ls, PyObject *topic, ls_pick *p) {
    p->old = NULL;
    if (ls->topics && PyThread_get_thread_ident() == ls->owner) p->topics = Py_NewRef(ls->topics);
    else if (!(p->topics = PyObject_GetAttr(ls->tls, str_topics))) {  /* another thread's; unset before its first send */
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    int ok = ls_writer(ls, topic, p);
    if (ok <= 0) { Py_CLEAR(p->topics); Py_CLEAR(p->old); }
    return ok;
}

static PyObject *ls_release(ls_pick *p, PyObject *out) {
    Py_XDECREF(p->next);
    Py_DECREF(p->topics);
    Py_XDECREF(p->old);
    return out;
}

/* after an append of n messages (ids: theirs): the round robin moves on; the SendResult */
static PyObject *ls_done(ls_pick *p, const char *ids, Py_ssize_t n) {
    Py_SETREF(TSLOT(p->t, T_I), p->next);
    p->next = NULL;
    /* held across the SendResult's allocation, which may run the GC (and finalizers) */
    PyObject *mq = Py_NewRef(PyTuple_GET_ITEM(p->w, W_MQ)), *host = Py_NewRef(TSLOT(p->t, T_STOREHOST));
    PyObject *out = send_result(p->r, ids, n, mq, host);
    Py_DECREF(mq);
    Py_DECREF(host);
    return ls_release(p, out);
}

/* every binding this path uses is set at import and only ever replaced, never unset: once all
 * are there, the answer is kept */
static int ls_all_bound;
static inline int ls_bound(void) {
    return ls_all_bound ||
           (ls_all_bound = topic_slots.cls && f_send && f_send_batch && shmq_result_bound() && msg_tags_key);
}

static PyObject *ls_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "LocalSend(message)");
        return NULL;
    }
    PyObject *m = args[0], *topic;
    if (Py_TYPE(m) != shmq_message_cls || !ls_bound() || !(topic = ((shmq_message *)m)->topic) ||
        !PyUnicode_CheckExact(topic))
        Py_RETURN_NONE;
    ls_pick p;
    int ok = ls_route((local_send *)self, topic, &p), rc;
    if (ok <= 0) return ok ? NULL : Py_NewRef(Py_None);
    if (!message_append(p.r, m, ((local_send *)self)->limit, &rc) || rc)
        return ls_release(&p, Py_NewRef(Py_None));  /* nothing appended: LocalSender decides */
    return ls_done(&p, p.r->id_out, 1);
}

/* batch(messages) -> SendResult or None: LocalSender.send_batch's uniform batch (uniform_batch,
 * the first message's tags as the head) on the same route and round robin as a send */
static PyObject *ls_batch(PyObject *self, PyObject *list) {
    PyObject *m0, *topic;
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) == 0 || !ls_bound() ||
        Py_TYPE(m0 = PyList_GET_ITEM(list, 0)) != shmq_message_cls || !(topic = ((shmq_message *)m0)->topic) ||
        !PyUnicode_CheckExact(topic) || !((shmq_message *)m0)->tags)
        Py_RETURN_NONE;
    uint8_t head[HEAD_MAX];
    Py_ssize_t hlen = tags_head(((shmq_message *)m0)->tags, head);
    if (hlen < 0) Py_RETURN_NONE;
    ls_pick p;
    int ok = ls_route((local_send *)self, topic, &p);
    if (ok <= 0) return ok ? NULL : Py_NewRef(Py_None);
    Py_ssize_t n = uniform_batch(list, ((local_send *)self)->limit);
    if (n <= 0) return ls_release(&p, n ? NULL : Py_NewRef(Py_None));
    int rc = f_send_batch(p.r, b_ptrs, b_lens, (uint32_t)n, head, (uint32_t)hlen, b_scratch, MAX_BATCH_BYTES, b_ids, 1);
    if (rc) return ls_release(&p, Py_NewRef(Py_None));  /* nothing appended: LocalSender decides */
    return ls_done(&p, b_ids, n);
}

/* own(thread ident, topics): the first sending thread and its topic map (LocalSender._topics) */
static PyObject *ls_own(PyObject *self, PyObject *args) {
    local_send *ls = (local_send *)self;
    unsigned long ident;
    PyObject *topics;
    if (!PyArg_ParseTuple(args, "kO!:own", &ident, &PyDict_Type, &topics)) return NULL;
    Py_INCREF(topics);
    Py_XSETREF(ls->topics, topics);
    ls->owner = ident;
    Py_RETURN_NONE;
}

static PyObject *ls_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *tls;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "On:LocalSend", &tls, &limit)) return NULL;
    local_send *ls = (local_send *)type->tp_alloc(type, 0);
    if (!ls) return NULL;
    ls->call = ls_call;
    ls->tls = Py_NewRef(tls);
    ls->limit = limit;
    return (PyObject *)ls;
}

static int ls_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(((local_send *)self)->tls);
    Py_VISIT(((local_send *)self)->topics);
    Py_VISIT(((local_send *)self)->cache.topic);
    for (int k = 0; k < LS_WMAX; k++) Py_VISIT(((local_send *)self)->wc[k].w);
    return 0;
}

static int ls_clear(PyObject *self) {
    Py_CLEAR(((local_send *)self)->tls);
    Py_CLEAR(((local_send *)self)->topics);
    Py_CLEAR(((local_send *)self)->cache.topic);
    for (int k = 0; k < LS_WMAX; k++) Py_CLEAR(((local_send *)self)->wc[k].w);
    return 0;
}

static void ls_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    ls_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyMethodDef ls_methods[] = {
    {"own", (PyCFunction)ls_own, METH_VARARGS, "own(thread ident, topics: dict): the first sending thread's map"},
    {"batch", (PyCFunction)ls_batch, METH_O, "batch(messages) -> SendResult, or None (LocalSender decides)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef ls_members[] = {
    {"limit", T_PYSSIZET, offsetof(local_send, limit), 0, "the producer's compress_over"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject shmq_local_send_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._hot.LocalSend",
    .tp_basicsize = sizeof(local_send),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "LocalSend(tls, limit)(message) -> SendResult, or None (see hot_send.c)",
    .tp_methods = ls_methods,
    .tp_members = ls_members,
    .tp_vectorcall_offset = offsetof(local_send, call),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = ls_traverse,
    .tp_clear = ls_clear,
    .tp_dealloc = ls_dealloc,
    .tp_new = ls_new,
};

/* encode_batch(uniq address, messages, head, body limit) -> (the MessageBatch body, the 32*n
 * bytes of its UNIQ_KEYs), an int SHMQ_* status, or None: send_batch's checks and its encoding
 * (shmq_encode_batch) without the append, for the producer's SEND_BATCH_MESSAGE over TCP. */
static PyObject *hot_encode_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_CheckExact(args[1]) || !PyBytes_CheckExact(args[2]) || !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "encode_batch(uniq, messages: list, head: bytes, limit: int)");
        return NULL;
    }
    if (!f_encode_batch || !shmq_message_cls || !msg_tags_key) { PyErr_SetString(PyExc_RuntimeError, "not bound"); return NULL; }
    shmq_uniq *u = (shmq_uniq *)PyLong_AsVoidPtr(args[0]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if (!u || (limit == -1 && PyErr_Occurred())) return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "null uniq"), NULL);
    Py_ssize_t n = uniform_batch(args[1], limit);
    if (n <= 0) return n ? NULL : Py_NewRef(Py_None);
    uint64_t len = 0;
    int rc = f_encode_batch(b_ptrs, b_lens, (uint32_t)n, (const uint8_t *)PyBytes_AS_STRING(args[2]),
                            (uint32_t)PyBytes_GET_SIZE(args[2]), u, b_scratch, MAX_BATCH_BYTES, b_ids, &len);
    if (rc) return PyLong_FromLong(rc);
    return Py_BuildValue("(y#y#)", (const char *)b_scratch, (Py_ssize_t)len, b_ids, 32 * n);
}

static PyMethodDef shmq_send_methods[] = {
    {"bind", (PyCFunction)hot_bind, METH_VARARGS, "bind(address of shmq_send, address of shmq_send_batch)"},
    {"bind_message", (PyCFunction)hot_bind_message, METH_VARARGS, "bind_message(Message, TAGS key, timer_properties)"},
    {"send_message", (PyCFunction)(void (*)(void))hot_send_message, METH_FASTCALL,
     "send_message(route, message, limit, mq, store_host) -> SendResult, an int status, or None"},
    {"send_batch", (PyCFunction)(void (*)(void))hot_send_batch, METH_FASTCALL,
     "send_batch(route, messages, head, limit, mq, store_host) -> SendResult, an int status, or None"},
    {"encode_batch", (PyCFunction)(void (*)(void))hot_encode_batch, METH_FASTCALL,
     "encode_batch(uniq, messages, head, limit) -> (body, ids), an int status, or None"},
    {"send", (PyCFunction)(void (*)(void))hot_send, METH_FASTCALL,
     "send(route address, body, head, mq, store_host) -> SendResult, or an int SHMQ_* status"},
    {"bind_topic", (PyCFunction)hot_bind_topic, METH_VARARGS, "bind_topic(_LocalTopic, slot descriptors, _)"},
    {NULL, NULL, 0, NULL},
};

int shmq_send_add(PyObject *m) {
    for (int k = 0; k < LS_WMAX; k++)
        if (!small_ints[k] && !(small_ints[k] = PyLong_FromLong(k))) return -1;
    if (PyType_Ready(&shmq_local_send_type) || (!zero && !(zero = PyLong_FromLong(0))) || shmq_result_add(m) ||
        shmq_producer_add(m))
        return -1;
    return PyModule_AddFunctions(m, shmq_send_methods) ||
           PyModule_AddObjectRef(m, "LocalSend", (PyObject *)&shmq_local_send_type) ? -1 : 0;
}
