/*
 * shmq/native/remoting_pull.c -- the broker worker's C path for the common PULL_MESSAGE (and
 * LITE_PULL_MESSAGE, answered alike), in the same serve call as the sends (remoting_send.c splits
 * the frames and reads the header with remoting_header.h; the Python side is
 * shmq/broker/worker/processors/pull_fast.py).
 *
 * A pull is taken here when the Python path (processors/pull.py) would answer it from an
 * unfiltered read, and what it does is done the same way: a JSON header whose PullMessageRequestHeader
 * fields are all there as digits-only numbers, not oneway, from a (consumerGroup, topic, queueId)
 * the Python path has served an unfiltered pull of (``learn``) under the TopicConfig still in the
 * worker's table (the broker's and topic's read permission, the queue id's range: checked then),
 * with a subscription that keeps every message: the request's own (sysFlag's subscription bit:
 * expressionType absent, empty or TAG, subscription absent, empty or "*") or, without that bit,
 * the group's cached heartbeat subscription the Python path found unfiltered, while the worker's
 * subscription cache is unchanged since (its epoch), that entry has not expired, and its version
 * is not older than the request's subVersion. Then:
 *
 * - the commit offset is stored when the flag asks (the word MessageStore.commit_offset writes,
 *   learnt from the Python path's own commit of this queue; not learnt yet: the Python path's);
 * - caught up (the queue's max offset is the offset asked) with the suspend flag and a timeout:
 *   held. The pull is handed back as a record (learnt info, offset, suspendTimeoutMillis,
 *   maxMsgNums, opaque) and pull_fast.py parks it in pull_hold.py beside the Python path's holds,
 *   within the connection's max_inflight (``room``); its answer is one call here (``answer``);
 * - else the records queue_read.h's qr_raw finds (what get_messages answers FOUND with) go out
 *   in the FOUND answer, written from the Python path's own header template (pieces cut from
 *   ``_answer_template``), the records copied straight from the mapping after it.
 *
 * Everything else is the Python path's, which serves the frame in its place on the wire: any
 * other status of the read (nothing readable, out of range, a file to map), a filter, a learnt
 * word missing, a changed table. Nothing is changed before the frame is known to be taken.
 */
#include <time.h>
#include "remoting_send.h"
#include "queue_read.h"
#include <structmember.h>  /* T_OBJECT_EX: a hold's slots (rp_due) */

typedef struct {
    PyObject *topic;          /* the str the worker's topic table is keyed by (NULL: a free entry) */
    PyObject *tc;             /* the TopicConfig the queue was learnt under */
    PyObject *info;           /* (topic, queue id, QueueReader state): handed back with a hold */
    PyObject *st;             /* the QueueReader state (info[2]) */
    uint8_t *key;             /* consumerGroup then topic, as UTF-8 */
    uint32_t glen, tlen;
    int32_t qid;
    int64_t *commit;          /* the group's committed-offset word of the queue (NULL: not learnt) */
    const int64_t *next;      /* the queue's published max offset */
    int sub_cached;           /* the cached heartbeat subscription was unfiltered, as below */
    long long sub_version, sub_epoch;
    double sub_until;         /* time.monotonic() at which the cache entry expires */
} pentry;

/* (group, topic, queue) entries per worker, half usable (more are served by Python): one group
 * over every queue of the store's default queue_capacity (16,384) fits; rp_state is calloc'd,
 * so the pages are touched only as entries are learnt */
#define PTAB_CAP 32768

struct rp_state {
    PyObject *tpl;            /* the FOUND answer's header cut at nextBeginOffset, minOffset, maxOffset, opaque */
    size_t tpl_fixed;
    long long f_commit, f_suspend, f_sub;  /* the sysFlag bits */
    long long max_count, max_bytes;        /* MAX_TRANSFER_COUNT, MAX_TRANSFER_BYTES */
    pentry tab[PTAB_CAP];
    uint32_t used;
};

static uint32_t pkey_hash(const uint8_t *g, uint32_t gn, const uint8_t *t, uint32_t tn, int32_t qid) {
    static const uint8_t sep = 0xFF;  /* between group and topic: a byte no UTF-8 text holds */
    return rs_fnv(rs_fnv(rs_fnv(2166136261u ^ (uint32_t)qid, g, gn), &sep, 1), t, tn);
}

static pentry *plookup(rp_state *p, const uint8_t *g, uint32_t gn, const uint8_t *t, uint32_t tn, int32_t qid,
                       int for_insert) {
    uint32_t i = pkey_hash(g, gn, t, tn, qid) & (PTAB_CAP - 1);
    for (uint32_t k = 0; k < PTAB_CAP; k++, i = (i + 1) & (PTAB_CAP - 1)) {
        pentry *e = &p->tab[i];
        if (e->topic == NULL) return for_insert ? e : NULL;
        if (e->qid == qid && e->glen == gn && e->tlen == tn && memcmp(e->key, g, gn) == 0 &&
            memcmp(e->key + gn, t, tn) == 0)
            return e;
    }
    return NULL;
}

static void ptab_clear(rp_state *p) {
    for (uint32_t i = 0; i < PTAB_CAP; i++) {
        pentry *e = &p->tab[i];
        if (e->topic == NULL) continue;
        Py_CLEAR(e->topic);
        Py_CLEAR(e->tc);
        Py_CLEAR(e->info);
        e->st = NULL;
        PyMem_Free(e->key);
        memset(e, 0, sizeof *e);
    }
    p->used = 0;
}

/* ---- the answer ---------------------------------------------------------------------------- */
/* the FOUND answer of read r to the request ``opaque``: its size, and the frame at w when w is
 * not NULL (length word, mark, the template's pieces with the four numbers, then the records) */
static size_t found_frame(const rp_state *p, const qr_read *r, long long opaque, uint8_t *w) {
    char v[4][24];
    int vl[4];
    long long x[4] = {r->next, r->mn, r->mx, opaque};
    size_t hl = p->tpl_fixed;
    for (int i = 0; i < 4; i++) hl += (size_t)(vl[i] = (int)sf_put_int(v[i], x[i]));  /* send_frame.h: the one C decimal writer */
    if (w == NULL) return 8 + hl + (size_t)r->total;
    uint32_t total = (uint32_t)(4 + hl + (size_t)r->total), mark = (uint32_t)hl;
    for (int i = 0; i < 4; i++) { w[i] = (uint8_t)(total >> (24 - 8 * i)); w[4 + i] = (uint8_t)(mark >> (24 - 8 * i)); }
    w += 8;
    for (int i = 0; i <= 4; i++) {
        PyObject *b = PyTuple_GET_ITEM(p->tpl, i);
        memcpy(w, PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
        w += PyBytes_GET_SIZE(b);
        if (i < 4) { memcpy(w, v[i], (size_t)vl[i]); w += vl[i]; }
    }
    qr_copy(r, w);
    return 0;
}

static long long count_of(const rp_state *p, long long n) {  /* pull.py _max_count */
    return n < 1 ? 1 : n > p->max_count ? p->max_count : n;
}

/* ---- one frame ------------------------------------------------------------------------------ */
/* the request's subscription keeps every message (pull.py _pull_expression with tag_codes_of None):
 * expressionType absent, empty or TAG in any case; subscription absent, empty or "*" */
static int request_unfiltered(const header *h) {
    const span *x = &h->pf[P_EXPR], *t = &h->pf[P_SUB];
    if (x->set && x->n && !(x->n == 3 && (x->p[0] | 0x20) == 't' && (x->p[1] | 0x20) == 'a' &&
                            (x->p[2] | 0x20) == 'g'))
        return 0;
    return !t->set || t->n == 0 || (t->n == 1 && t->p[0] == '*');
}

/* (info, the four numbers): a held pull's record, built without Py_BuildValue's format parsing
 * (~1,000 instructions a record) */
static PyObject *record5(PyObject *info, long long a, long long b, long long c, long long d) {
    PyObject *t = PyTuple_New(5);
    if (!t) return NULL;
    PyTuple_SET_ITEM(t, 0, Py_NewRef(info));
    long long x[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++) {
        PyObject *n = PyLong_FromLongLong(x[i]);
        if (!n) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i + 1, n);
    }
    return t;
}

static double monotonic_s(void) {  /* time.monotonic()'s clock */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int rp_frame(Sends *s, const header *h) {
    rp_state *p = s->pl;
    if (!p || s->room < 0 || h->flag & (s->f_response | s->f_oneway) || (s->no_mix && s->sent)) return 0;
    static const int ints[] = {P_QID, P_QOFF, P_MAXN, P_SYSFLAG, P_COMMIT, P_SUSPEND, P_SUBVER};
    int64_t v[P_N];
    if (!h->pf[P_GROUP].set || !h->pf[P_TOPIC].set) return 0;
    for (int i = 0; i < 7; i++)
        if (rh_field_int(&h->pf[ints[i]], INT64_MIN, INT64_MAX, &v[ints[i]])) return 0;
    if (v[P_QID] < INT32_MIN || v[P_QID] > INT32_MAX) return 0;
    const span *g = &h->pf[P_GROUP], *t = &h->pf[P_TOPIC];
    pentry *e = plookup(p, g->p, g->n, t->p, t->n, (int32_t)v[P_QID], 0);
    if (e == NULL) return 0;
    PyObject *tc = PyDict_GetItemWithError(s->topics, e->topic);  /* the table may have changed */
    if (tc != e->tc) { PyErr_Clear(); return 0; }
    if (v[P_SYSFLAG] & p->f_sub) {
        if (!request_unfiltered(h)) return 0;
    } else if (!e->sub_cached || e->sub_epoch != s->epoch || e->sub_version < v[P_SUBVER] ||
               e->sub_until < monotonic_s()) {
        return 0;
    }
    int commit = (v[P_SYSFLAG] & p->f_commit) && v[P_COMMIT] >= 0;
    if (commit && e->commit == NULL) return 0;
    int64_t opaque = 0;
    if (h->opaque.set) {
        rh_cur c = {h->opaque.p, h->opaque.p + h->opaque.n, NULL, 0};
        if (rh_int(&c, &opaque, NULL)) return 0;
    }
    long long qoff = v[P_QOFF];
    if ((v[P_SYSFLAG] & p->f_suspend) && v[P_SUSPEND] > 0 && __atomic_load_n(e->next, __ATOMIC_ACQUIRE) == qoff) {
        /* caught up: held (pull.py _pull_filtered parks it without a read) */
        if (s->room == 0) return 0;  /* the connection's direct holds are at max_inflight: Python's */
        if (s->held == NULL && !(s->held = PyList_New(0))) return -1;
        PyObject *rec = record5(e->info, qoff, (long long)v[P_SUSPEND], (long long)v[P_MAXN], (long long)opaque);
        if (!rec || PyList_Append(s->held, rec)) { Py_XDECREF(rec); return -1; }
        Py_DECREF(rec);
        s->room--;
    } else {
        qr_read r;
        long long why;
        int rc = qr_raw(e->st, qoff, (Py_ssize_t)count_of(p, v[P_MAXN]), p->max_bytes, &r, &why);
        if (rc <= 0) {  /* get_messages decides, or a file to map: the Python path reads it again */
            PyErr_Clear();
            return 0;
        }
        size_t need = found_frame(p, &r, opaque, NULL);
        if (need - 8 > 0x7FFFFFFF || rs_out_reserve(s, need)) { qr_release(&r); return -1; }
        found_frame(p, &r, opaque, s->out + s->out_len);
        s->out_len += need;
        s->got += r.n;
        s->pulled = 1;
        qr_release(&r);
    }
    if (commit) __atomic_store_n(e->commit, (int64_t)v[P_COMMIT], __ATOMIC_RELAXED);  /* commit_offset's store */
    return 1;
}

/* ---- the methods ---------------------------------------------------------------------------- */
/* pulls(code, lite code, field names in P_* order, answer pieces, (commit, suspend, subscription
 * bits), max count, max bytes, no_mix): take PULL_MESSAGE frames too */
PyObject *rp_enable(Sends *s, PyObject *args) {
    int code, lite, no_mix;
    PyObject *names, *tpl;
    long long fc, fs, fsub, max_count, max_bytes;
    if (!PyArg_ParseTuple(args, "iiO!O!(LLL)LLp", &code, &lite, &PyTuple_Type, &names, &PyTuple_Type, &tpl, &fc, &fs,
                          &fsub, &max_count, &max_bytes, &no_mix))
        return NULL;
    if (PyTuple_GET_SIZE(names) != P_N || PyTuple_GET_SIZE(tpl) != 5 || max_count < 1 || max_count > QR_MAX) {
        PyErr_SetString(PyExc_ValueError, "pulls: names, pieces or count of the wrong size");
        return NULL;
    }
    size_t fixed = 0;
    for (int i = 0; i < 5; i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(tpl, i))) { PyErr_SetString(PyExc_TypeError, "pieces are bytes"); return NULL; }
        fixed += (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(tpl, i));
    }
    for (int i = 0; i < P_N; i++) {
        Py_ssize_t n;
        const char *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(names, i), &n);
        if (!k) return NULL;
        if (n < 4 || n >= 24) { PyErr_SetString(PyExc_ValueError, "pulls: a field name"); return NULL; }
        memcpy(s->pkeys[i], k, (size_t)n);
        s->pkey_len[i] = (uint8_t)n;
    }
    if (!s->pl && !(s->pl = PyMem_Calloc(1, sizeof *s->pl))) return PyErr_NoMemory();
    rp_state *p = s->pl;
    ptab_clear(p);
    Py_XSETREF(p->tpl, Py_NewRef(tpl));
    p->tpl_fixed = fixed;
    p->f_commit = fc; p->f_suspend = fs; p->f_sub = fsub;
    p->max_count = max_count; p->max_bytes = max_bytes;
    s->code_pull = code;
    s->code_lite_pull = lite;
    s->no_mix = no_mix;
    Py_RETURN_NONE;
}

/* learn_pull(group, topic, qid, tc, info, commit address or 0, cached subscription or None):
 * the Python path served an unfiltered pull of this queue under ``tc``; info is (topic, qid, the
 * QueueReader's state); the commit word is kept when 0; the cached subscription, when the pull's
 * came from the worker's cache, is (version, epoch, until). False: the table is full. */
PyObject *rp_learn(Sends *s, PyObject *args) {
    PyObject *group, *topic, *tc, *info, *sub;
    int qid;
    unsigned long long commit;
    if (!PyArg_ParseTuple(args, "UUiOO!KO", &group, &topic, &qid, &tc, &PyTuple_Type, &info, &commit, &sub)) return NULL;
    rp_state *p = s->pl;
    if (!p) { PyErr_SetString(PyExc_RuntimeError, "pulls first"); return NULL; }
    long long version = 0, epoch = 0;
    double until = 0;
    if (sub != Py_None && !PyArg_ParseTuple(sub, "LLd", &version, &epoch, &until)) return NULL;
    qstate q;
    if (PyTuple_GET_SIZE(info) != 3 || queue_state(PyTuple_GET_ITEM(info, 2), &q)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "info is (topic, qid, state)");
        return NULL;
    }
    Py_ssize_t gn, tn;
    const char *g = PyUnicode_AsUTF8AndSize(group, &gn), *t = PyUnicode_AsUTF8AndSize(topic, &tn);
    if (!g || !t) return NULL;
    pentry *e = plookup(p, (const uint8_t *)g, (uint32_t)gn, (const uint8_t *)t, (uint32_t)tn, qid, 1);
    if (e == NULL || (e->topic == NULL && p->used >= PTAB_CAP / 2)) Py_RETURN_FALSE;  /* full: Python serves */
    if (e->topic == NULL) {
        if (!(e->key = PyMem_Malloc((size_t)(gn + tn) + 1))) return PyErr_NoMemory();
        memcpy(e->key, g, (size_t)gn);
        memcpy(e->key + gn, t, (size_t)tn);
        e->glen = (uint32_t)gn;
        e->tlen = (uint32_t)tn;
        e->qid = qid;
        e->topic = Py_NewRef(topic);
        p->used++;
    } else {
        Py_DECREF(e->tc);
        Py_DECREF(e->info);
    }
    e->tc = Py_NewRef(tc);
    e->info = Py_NewRef(info);
    e->st = PyTuple_GET_ITEM(info, 2);
    e->next = q.next;
    if (commit) e->commit = (int64_t *)(uintptr_t)commit;  /* a slot's word never moves while attached */
    if (sub != Py_None) {
        e->sub_cached = 1;
        e->sub_version = version;
        e->sub_epoch = epoch;
        e->sub_until = until;
    }
    Py_RETURN_TRUE;
}

/* answer(record) -> (frame, count) or None: the FOUND answer of a pull held by rp_frame, whose
 * record it is ((topic, queue id, reader state), offset, suspendTimeoutMillis, maxMsgNums,
 * opaque), in one call (None: qr_raw found nothing this way; the Python path answers) */
PyObject *rp_answer(Sends *s, PyObject *const *args, Py_ssize_t nargs) {
    rp_state *p = s->pl;
    PyObject *rec = nargs == 1 ? args[0] : NULL, *info = NULL;
    if (rec && PyTuple_Check(rec) && PyTuple_GET_SIZE(rec) == 5) info = PyTuple_GET_ITEM(rec, 0);
    if (!p || !info || !PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 3) {
        PyErr_SetString(PyExc_TypeError, "answer(a held pull's record) after pulls");
        return NULL;
    }
    long long offset = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 1)), n = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 3)),
              opaque = PyLong_AsLongLong(PyTuple_GET_ITEM(rec, 4)), why;
    if (PyErr_Occurred()) return NULL;
    qr_read r;
    int rc = qr_raw(PyTuple_GET_ITEM(info, 2), offset, (Py_ssize_t)count_of(p, n), p->max_bytes, &r, &why);
    if (rc <= 0) {
        PyErr_Clear();  /* a mapping closed under the read: the Python path's read says so */
        Py_RETURN_NONE;
    }
    size_t need = found_frame(p, &r, opaque, NULL);
    PyObject *frame = need - 8 > 0x7FFFFFFF ? NULL : PyBytes_FromStringAndSize(NULL, (Py_ssize_t)need);
    if (frame) found_frame(p, &r, opaque, (uint8_t *)PyBytes_AS_STRING(frame));
    qr_release(&r);
    if (!frame) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    PyObject *count = PyLong_FromSsize_t(r.n), *t = count ? PyTuple_New(2) : NULL;
    if (!t) { Py_XDECREF(count); Py_DECREF(frame); return NULL; }
    PyTuple_SET_ITEM(t, 0, frame);
    PyTuple_SET_ITEM(t, 1, count);
    return t;
}

/* due(holds, find, ctl) -> the list of those to look at, or None: pull_hold.py's check, its scan
 * in C (a Python loop over the holds cost ~1,300 instructions a hold, one C load through cffi
 * among them). Each hold is a pull_hold._Hold: ``addr`` (the address of its queue's published
 * max offset as an int, store.max_offset_watch's; 0: the queue did not exist when it was held),
 * ``offset`` and ``owner`` (with ``closed``), read from their slots (a getattr each cost ~170).
 * Due: the queue's max offset passed the offset (the acquire load pull_hold.py's _load makes),
 * the owner is closed, or the queue was unknown and is there now (``find``, shmq_queue_find's
 * address, over the control block at ``ctl``, by the hold's ``tb``, its topic as UTF-8, and
 * ``qid``; Python then takes its watch). The addresses are only ever the store's (cffi's), which
 * stays mapped while holds are checked (PullHolds.close releases them before the store closes). */
typedef int64_t (*find_fn)(shmq_ctl *, const uint8_t *, size_t, int32_t);
typedef struct { PyTypeObject *type; Py_ssize_t addr, offset, owner, tb, qid; } hold_slots;

static int slot_of(PyTypeObject *t, const char *name, Py_ssize_t *off) {
    PyObject *d = PyObject_GetAttrString((PyObject *)t, name);
    if (!d) return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    if (ok) *off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) PyErr_Format(PyExc_TypeError, "due: %s is not a slot of a hold", name);
    return ok ? 0 : -1;
}

static PyObject *slot_get(PyObject *h, Py_ssize_t off, const char *name) {
    PyObject *v = *(PyObject **)((char *)h + off);
    if (!v) PyErr_Format(PyExc_AttributeError, "due: a hold without %s", name);
    return v;  /* borrowed */
}

/* an unknown queue's hold: its queue is there now (1), still not (0), or -1 (an exception set) */
static int made_now(PyObject *h, const hold_slots *hs, find_fn find, shmq_ctl *ctl) {
    PyObject *tb = slot_get(h, hs->tb, "tb"), *q = tb ? slot_get(h, hs->qid, "qid") : NULL;
    if (!q) return -1;
    if (!PyBytes_Check(tb)) { PyErr_SetString(PyExc_TypeError, "due: a hold's tb is bytes"); return -1; }
    long qid = PyLong_AsLong(q);
    if (qid == -1 && PyErr_Occurred()) return -1;
    return find(ctl, (const uint8_t *)PyBytes_AS_STRING(tb), (size_t)PyBytes_GET_SIZE(tb), (int32_t)qid) >= 0;
}

PyObject *rp_due(PyObject *unused, PyObject *const *args, Py_ssize_t nargs) {
    (void)unused;
    static hold_slots hs;
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "due(holds, find address, control block address)"); return NULL; }
    PyObject *holds = args[0];
    find_fn find = (find_fn)PyLong_AsVoidPtr(args[1]);
    shmq_ctl *ctl = PyLong_AsVoidPtr(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (!find || !ctl) { PyErr_SetString(PyExc_ValueError, "due: no find or control block"); return NULL; }
    static PyObject *n_closed;
    if (!n_closed && !(n_closed = PyUnicode_InternFromString("closed"))) return NULL;
    PyObject *it = PyObject_GetIter(holds), *out = NULL, *h;
    if (!it) return NULL;
    while ((h = PyIter_Next(it))) {
        int due = -1;
        PyTypeObject *t = Py_TYPE(h);
        if (t != hs.type) {  /* one type in practice: its slots' offsets looked up once */
            hold_slots n = {t, 0, 0, 0, 0, 0};
            if (slot_of(t, "addr", &n.addr) || slot_of(t, "offset", &n.offset) || slot_of(t, "owner", &n.owner) ||
                slot_of(t, "tb", &n.tb) || slot_of(t, "qid", &n.qid)) {
                Py_DECREF(h);
                break;
            }
            Py_INCREF(t);  /* (kept: the offsets belong to it) */
            Py_XDECREF(hs.type);
            hs = n;
        }
        PyObject *a = slot_get(h, hs.addr, "addr"), *o, *w;
        void *addr = a ? PyLong_AsVoidPtr(a) : NULL;
        if (!PyErr_Occurred()) {
            if (addr == NULL) {
                due = made_now(h, &hs, find, ctl);
            } else if ((o = slot_get(h, hs.offset, "offset"))) {
                long long off = PyLong_AsLongLong(o);
                if (!PyErr_Occurred()) due = __atomic_load_n((const int64_t *)addr, __ATOMIC_ACQUIRE) > off;
            }
        }
        if (due == 0 && (w = slot_get(h, hs.owner, "owner"))) {
            PyObject *c = PyObject_GetAttr(w, n_closed);
            due = c ? PyObject_IsTrue(c) : -1;
            Py_XDECREF(c);
        } else if (due == 0) {
            due = -1;
        }
        if (due > 0 && ((!out && !(out = PyList_New(0))) || PyList_Append(out, h))) due = -1;
        Py_DECREF(h);
        if (due < 0) break;
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) { Py_XDECREF(out); return NULL; }
    return out ? out : Py_NewRef(Py_None);
}

PyObject *rp_clear_method(Sends *s, PyObject *unused) {
    (void)unused;
    if (s->pl) ptab_clear(s->pl);
    Py_RETURN_NONE;
}

void rp_free(Sends *s) {
    if (!s->pl) return;
    ptab_clear(s->pl);
    Py_CLEAR(s->pl->tpl);
    PyMem_Free(s->pl);
    s->pl = NULL;
    s->code_pull = s->code_lite_pull = 0;
}
