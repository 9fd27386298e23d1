/*
 * shmq/native/remoting_send.c -- the broker worker's fast path for the common TCP send (module
 * shmq.native._rsend, type Sends; the Python side is shmq/broker/worker/processors/send_fast.py),
 * and the frame loop the common PULL_MESSAGE shares with it (remoting_pull.c, once ``pulls`` is
 * called: one serve call takes a run of both, in wire order).
 *
 * One call takes a connection's read buffer and serves the leading run of remoting frames that
 * are plain SEND_MESSAGE_V2 requests with a JSON header to a queue the Python path has already
 * served (``learn``): it splits the frames, reads the header fields, appends each record through
 * the core's shmq_put (the same append FastWriter.put_sent makes) and writes the answers into one
 * buffer. It stops, consuming nothing of it, at the first frame it does not take: any other
 * request or serialization, anything odd in the header (an escape it does not know, a non-ASCII
 * byte, a duplicate or missing field, a number Python would read differently), a delayed,
 * transactional, timer or SEND_MESSAGE_V2 batch message, a queue not learnt or whose TopicConfig
 * is no longer the one in the worker's table, and any non-zero status of the append (nothing was
 * stored then). A SEND_BATCH_MESSAGE (once ``batches`` is called) gets the same header checks
 * here and the rest in remoting_batch.c, which appends it whole through shmq_put_batch.
 * The caller hands that frame to the Python path and calls again after it, so frames are served
 * in their order on the wire and every refusal, error code and protocol error is the Python
 * path's own. Incomplete frames and bad length words are left to shmq.protocol.frame.
 *
 * What is not defined here: how the header's JSON is scanned (remoting_header.h, the one C reader
 * of it, which the client's remote_answer.c shares; a producer's later headers are read by the
 * layout learnt from one scanned, remoting_learnt.c, which says why that is the scan's reading), the header's field names (the letters, passed in from
 * shmq.protocol.headers.SEND_V2_LETTERS), the answer's JSON (pieces cut by Python from
 * shmq.protocol.command's own encoding of an answer), the CLUSTER pair and the msgId prefix. The
 * stored properties are properties.stored_properties' (every WAIT and CLUSTER pair dropped, this
 * broker's CLUSTER pair appended); PLAIN is classify's quick filter (no transaction type in the
 * sysFlag, no "DELAY\1", "TRAN_MSG\1" or "TIMER_" in the text; the names are layout.h's).
 *
 * The GIL is released only while an append waits for the store's lock, which another process
 * holds (remoting_send.h's rs_append: the lock is tried with it held first).
 */
#include <string.h>
#include "remoting_send.h"

static qentry *lookup(Sends *s, const uint8_t *t, uint32_t n, int32_t qid, int for_insert) {
    uint32_t i = rs_fnv(2166136261u ^ (uint32_t)qid, t, n) & (TAB_CAP - 1);
    for (uint32_t k = 0; k < TAB_CAP; k++, i = (i + 1) & (TAB_CAP - 1)) {
        qentry *e = &s->tab[i];
        if (e->topic == NULL) return for_insert ? e : NULL;
        if (e->qid == qid && e->tlen == n && memcmp(e->tb, t, n) == 0) return e;
    }
    return NULL;
}

/* ---- the header (remoting_header.h scans its JSON; here: which fields a send takes) -------- */
typedef struct { Sends *s; header *h; } reading;

/* an extFields member: strings only; the letters read are remembered, others skipped */
static int ext_member(rh_cur *c, const span *k, void *ctx) {
    reading *r = ctx;
    span v = {0};
    const uint8_t *t0 = c->p;
    if (rh_str(c, &v)) return -1;
    for (int i = 0; i < K_N; i++) {
        /* the first byte before the call: the keys are one letter each (SEND_V2_LETTERS) */
        if (k->n == r->s->key_len[i] && k->p[0] == (uint8_t)r->s->keys[i][0]
                && memcmp(k->p, r->s->keys[i], k->n) == 0) {
            if (r->h->f[i].set) return -1;  /* a duplicate: Python's */
            r->h->f[i] = v;
            int slot = rs_ext_slot(i);  /* where its token is, for a learnt layout (remoting_learnt.c) */
            if (slot >= 0) r->h->tok[slot][0] = t0, r->h->tok[slot][1] = c->p;
            return 0;
        }
    }
    if (r->s->pl && k->n >= 4) {  /* a PULL_MESSAGE's (its names are longer than any letter) */
        for (int i = 0; i < P_N; i++) {
            if (k->n == r->s->pkey_len[i] && memcmp(k->p, r->s->pkeys[i], k->n) == 0) {
                if (r->h->pf[i].set) return -1;
                r->h->pf[i] = v;
                return 0;
            }
        }
    }
    return 0;
}

/* a top-level member; a repeated key is the Python path's */
static int top_member(rh_cur *c, const span *k, void *ctx) {
    reading *r = ctx;
    header *h = r->h;
    int64_t v;
    span sp;
    if (rh_is(k, "code")) {  /* any other request: handed back before the rest is read */
        if (h->have_code++) return -1;
        if (rh_int(c, &h->code, NULL)) return -1;
        return h->code == r->s->code || (h->code == r->s->code_batch && r->s->code_batch) ||
               (r->s->pl && (h->code == r->s->code_pull || h->code == r->s->code_lite_pull)) ? 0 : -1;
    }
    const uint8_t *t0 = c->p;
    if (rh_is(k, "flag")) {
        if (h->have_flag++ || rh_int(c, &h->flag, NULL)) return -1;
        h->tok[HS_TFLAG][0] = t0, h->tok[HS_TFLAG][1] = c->p;
        return 0;
    }
    if (rh_is(k, "opaque")) {  /* echoed as written: "-0" (Python writes 0) is Python's */
        if (h->opaque.set) return -1;
        if (rh_int(c, &v, &h->opaque) || (v == 0 && h->opaque.n != 1)) return -1;
        h->tok[HS_OPAQUE][0] = t0, h->tok[HS_OPAQUE][1] = c->p;
        return 0;
    }
    if (rh_is(k, "version")) { if (h->have_version++) return -1; return rh_int(c, &v, NULL); }
    if (rh_is(k, "extFields")) { if (h->have_ext++) return -1; return rh_object(c, ext_member, r); }
    if (rh_is(k, "language")) { if (h->have_lang++) return -1; return rh_str(c, &sp); }
    if (rh_is(k, "serializeTypeCurrentRPC")) { if (h->have_stype++) return -1; return rh_str(c, &sp); }
    if (rh_is(k, "remark")) {
        if (h->have_remark++) return -1;
        return rh_null(c) ? 0 : rh_str(c, &sp);
    }
    return rh_scalar(c);
}

/* the header read into *h, escapes unescaped into the scratch: the scratch used, or -1 */
static int parse_header(Sends *s, const uint8_t *p, uint32_t n, header *h) {
    rh_cur c;
    reading r = {s, h};
    memset(h, 0, sizeof *h);
    if (rh_header(&c, p, n, s->scr, top_member, &r) || !h->have_code) return -1;  /* no code: not a send */
    return (int)c.so;
}

/* ---- the stored properties: stored_properties(raw, cluster) -------------------------------- */
/* ``needle`` anywhere in the text, followed by the name-value separator when ``pair`` */
static int has(const span *t, const char *needle, int pair) {
    size_t n = strlen(needle);
    const uint8_t *p = t->p, *e = t->p + t->n;
    /* memchr to each occurrence of the first byte (glibc's vector scan), not a look per byte */
    while ((size_t)(e - p) >= n + (size_t)pair && (p = memchr(p, needle[0], (size_t)(e - p) - n - pair + 1))) {
        if (memcmp(p, needle, n) == 0 && (!pair || p[n] == SHMQ_NAME_VALUE_SEP)) return 1;
        p++;
    }
    return 0;
}

/* the pair p[0..n) is named ``name`` */
static int named(const uint8_t *p, size_t n, const char *name) {
    size_t k = strlen(name);
    return n > k && memcmp(p, name, k) == 0 && p[k] == SHMQ_NAME_VALUE_SEP;
}

/* stored_properties: the text split at \2, every pair starting WAIT\1 or CLUSTER\1 dropped,
 * joined again (drop_pair), then this broker's CLUSTER pair after a separator */
static uint32_t stored_props(Sends *s, const span *raw, uint8_t *d) {
    uint32_t dn = 0;
    int first = 1;
    const uint8_t *p = raw->p, *e = raw->p + raw->n;
    while (raw->n) {
        const uint8_t *q = memchr(p, SHMQ_PROPERTY_SEP, (size_t)(e - p));
        size_t n = (size_t)((q ? q : e) - p);
        if (!named(p, n, SHMQ_PROP_WAIT) && !named(p, n, SHMQ_PROP_CLUSTER)) {
            if (!first) d[dn++] = SHMQ_PROPERTY_SEP;
            memcpy(d + dn, p, n);
            dn += (uint32_t)n;
            first = 0;
        }
        if (!q) break;
        p = q + 1;
    }
    if (dn && d[dn - 1] != SHMQ_PROPERTY_SEP) d[dn++] = SHMQ_PROPERTY_SEP;
    Py_ssize_t cl = PyBytes_GET_SIZE(s->cluster);
    memcpy(d + dn, PyBytes_AS_STRING(s->cluster), (size_t)cl);
    return dn + (uint32_t)cl;
}

/* ---- one frame ------------------------------------------------------------------------------ */
int rs_out_reserve(Sends *s, size_t more) {
    if (s->out_len + more <= s->out_cap) return 0;
    size_t cap = s->out_cap ? s->out_cap : 16384;
    while (cap < s->out_len + more) cap *= 2;
    uint8_t *p = PyMem_Realloc(s->out, cap);
    if (!p) return -1;
    s->out = p;
    s->out_cap = cap;
    return 0;
}

static void put_piece(Sends *s, int i) {
    PyObject *b = PyTuple_GET_ITEM(s->tpl, i);
    memcpy(s->out + s->out_len, PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
    s->out_len += (size_t)PyBytes_GET_SIZE(b);
}

static void put_text(Sends *s, const char *t, size_t n) {
    memcpy(s->out + s->out_len, t, n);
    s->out_len += n;
}

/* length word, mark (JSON, header length) and the answer's header: the template's pieces with the
 * msgId text (one id, or a batch's joined by commas), queue id, queue offset and the request's
 * own opaque literal between them */
int rs_answer(Sends *s, const char *id, size_t id_len, int32_t qid, int64_t qoff, const span *opaque) {
    char q[24], o[24];
    int ql = (int)sf_put_int(q, qid), ol = (int)sf_put_int(o, (long long)qoff);
    size_t fixed = 0;
    for (int i = 0; i <= A_N; i++) fixed += (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(s->tpl, i));
    size_t hl = fixed + id_len + (size_t)ql + (size_t)ol + (opaque->set ? opaque->n : 1);
    if (hl > 0xFFFFFF || rs_out_reserve(s, hl + 8)) return -1;
    uint8_t *w = s->out + s->out_len;
    uint32_t total = (uint32_t)(4 + hl), mark = (uint32_t)hl;
    for (int i = 0; i < 4; i++) { w[i] = (uint8_t)(total >> (24 - 8 * i)); w[4 + i] = (uint8_t)(mark >> (24 - 8 * i)); }
    s->out_len += 8;
    put_piece(s, 0);
    put_text(s, id, id_len);
    put_piece(s, 1);
    put_text(s, q, (size_t)ql);
    put_piece(s, 2);
    put_text(s, o, (size_t)ol);
    put_piece(s, 3);
    if (opaque->set) put_text(s, (const char *)opaque->p, opaque->n);
    else put_text(s, "0", 1);
    put_piece(s, 4);
    return 0;
}

/* a new entry (from lookup's for_insert) filled; its topic str and tc referenced */
static int fill(Sends *s, qentry *e, PyObject *topic, const uint8_t *t, uint32_t tlen, int32_t qid) {
    e->tb = PyMem_Malloc((size_t)tlen + 1);
    if (!e->tb) { PyErr_NoMemory(); return -1; }
    memcpy(e->tb, t, tlen);
    e->tlen = tlen;
    e->qid = qid;
    e->nq = 0;
    e->tc = NULL;
    e->topic = Py_NewRef(topic);
    s->used++;
    return 0;
}

/* The first send to a queue of a topic whose sends the Python path served (its entry, learnt
 * with one of its queues) under the TopicConfig still in the worker's table: learnt here, not
 * by a trip through send.py for each queue (issue 16: that trip made the first message to a new
 * queue over TCP cost ~10x a C send of CPU, ms on a loaded machine). send.py's checks are the
 * topic's but for the queue id's range, checked against the topic entry's count; the queue's
 * slot is found, or made, in the store's queue table by shmq_queue_create, as appender.slot
 * does (the GIL released: it may wait for the store's lock). NULL: the Python path's, which
 * learns the queue, refuses it or raises as before (the table full, the slot table full). */
static qentry *sibling(Sends *s, const uint8_t *t, uint32_t n, int32_t qid, PyObject *topics) {
    if (s->qcreate == NULL || s->used >= TAB_CAP / 2) return NULL;
    qentry *te = lookup(s, t, n, TOPIC_QID, 0);
    if (te == NULL || qid >= te->nq) return NULL;
    PyObject *tc = PyDict_GetItemWithError(topics, te->topic);
    if (tc != te->tc) { PyErr_Clear(); return NULL; }
    int64_t slot;
    Py_BEGIN_ALLOW_THREADS
    slot = s->qcreate(s->w, t, n, qid);
    Py_END_ALLOW_THREADS
    if (slot < 0) return NULL;
    qentry *e = lookup(s, t, n, qid, 1);
    if (e == NULL || e->topic != NULL) return NULL;  /* (absent a moment ago: not reached) */
    if (fill(s, e, te->topic, t, n, qid)) { PyErr_Clear(); return NULL; }
    e->tc = Py_NewRef(tc);
    e->slot = (uint32_t)slot;
    return e;
}

/* the checks of send.py's _fast_v2 and _send_checked for a learnt queue; the queue or NULL. A
 * batch (code_batch) is checked as a send but for the batch field (SEND_BATCH_MESSAGE is a batch
 * whatever it says); remoting_batch.c checks the rest. */
static qentry *plain_send(Sends *s, header *h, PyObject *topics, int64_t *v) {
    static const int ints[] = {K_DEFNUMS, K_QID, K_SYSFLAG, K_FLAG};
    int batch = s->code_batch && h->code == s->code_batch;
    if ((h->code != s->code && !batch) || h->flag & s->f_response) return NULL;
    if (!h->f[K_GROUP].set || !h->f[K_TOPIC].set || !h->f[K_DEFTOPIC].set) return NULL;
    for (int i = 0; i < 4; i++)
        if (rh_field_int(&h->f[ints[i]], INT32_MIN, INT32_MAX, &v[ints[i]])) return NULL;
    if (rh_field_int(&h->f[K_BORN], INT64_MIN / 2, INT64_MAX / 2, &v[K_BORN])) return NULL;
    v[K_RECONSUME] = 0;
    if (h->f[K_RECONSUME].set && rh_field_int(&h->f[K_RECONSUME], INT32_MIN, INT32_MAX, &v[K_RECONSUME])) return NULL;
    if (h->f[K_MAXRECONSUME].set && rh_field_int(&h->f[K_MAXRECONSUME], INT32_MIN, INT32_MAX, &v[K_MAXRECONSUME]))
        return NULL;
    const span *b = &h->f[K_BATCH];
    if (!batch && b->set && !(b->n == 5 && memcmp(b->p, "false", 5) == 0)) return NULL;
    if (v[K_SYSFLAG] & s->tx_mask) return NULL;
    const span *pr = &h->f[K_PROPS];
    if (pr->set && (has(pr, SHMQ_PROP_DELAY, 1) || has(pr, SHMQ_PROP_TRAN_MSG, 1) || has(pr, SHMQ_TIMER_NAME_HEAD, 0)))
        return NULL;
    if (v[K_QID] < 0) return NULL;  /* the broker picks the queue: Python's (and no topic entry is a queue) */
    qentry *e = lookup(s, h->f[K_TOPIC].p, h->f[K_TOPIC].n, (int32_t)v[K_QID], 0);
    if (e == NULL) e = sibling(s, h->f[K_TOPIC].p, h->f[K_TOPIC].n, (int32_t)v[K_QID], topics);
    if (e == NULL) return NULL;
    PyObject *tc = PyDict_GetItemWithError(topics, e->topic);  /* the table may have changed */
    if (tc != e->tc) { PyErr_Clear(); return NULL; }
    return e;
}

/* the messages served (stored, answered unless oneway; a pull served: 1, and *pull set); 0: the
 * Python path's; -1: out of memory or an exception */
static int one_frame(Sends *s, const uint8_t *f, uint32_t total, PyObject *topics, uint32_t bip, int32_t bport,
                     int *pull) {
    uint32_t hl;
    if (rh_frame(f, total, &hl)) return 0;
    if (s->scr_cap < (size_t)hl + SHMQ_PROPS_MAX + 256) {
        uint8_t *p = PyMem_Realloc(s->scr, (size_t)hl + SHMQ_PROPS_MAX + 256);
        if (!p) return -1;
        s->scr = p;
        s->scr_cap = (size_t)hl + SHMQ_PROPS_MAX + 256;
    }
    header h;
    int64_t v[K_N];
    int used = rt_match(s, f + 4, hl, &h), scanned = used < 0;  /* a learnt layout's, or the scan's */
    if (scanned) used = parse_header(s, f + 4, hl, &h);
    if (used < 0) return 0;
    if (s->pl && (h.code == s->code_pull || h.code == s->code_lite_pull)) {
        *pull = 1;
        return rp_frame(s, &h);
    }
    if (s->no_mix && s->pulled) return 0;  /* SYNC_FLUSH: this run's pull answers must not wait for its flush */
    qentry *e = plain_send(s, &h, topics, v);
    if (e == NULL) return 0;
    if (h.code != s->code) {
        int got = rb_frame(s, &h, v, e, f + 4 + hl, total - 4 - hl, bip, bport);
        /* a stored batch's header layout learnt too (its code is a literal of the layout, so it
         * reads only batches): a producer's batches to a topic share one, and the scan of each
         * was ~6,000 of the worker's ~47,000 instructions a batch of 32 (session 15, batch15) */
        if (got > 0 && scanned) rt_learn(s, f + 4, hl, &h);
        return got;
    }
    const span *pr = &h.f[K_PROPS];
    span raw = pr->set ? *pr : (span){(const uint8_t *)"", 0, 1};
    if (raw.n + 1 + (size_t)PyBytes_GET_SIZE(s->cluster) > SHMQ_PROPS_MAX) return 0;  /* Python's error */
    uint8_t *props = s->scr + used;
    uint32_t plen = stored_props(s, &raw, props);
    shmq_meta m = {0};
    m.flag = (int32_t)v[K_FLAG];
    m.sysflag = (int32_t)v[K_SYSFLAG];
    m.born_ts = v[K_BORN];
    m.born_ip = bip;
    m.born_port = bport;
    m.reconsume_times = (int32_t)v[K_RECONSUME];
    m.tag_mode = SHMQ_TAG_FROM_PROPS;
    shmq_result r;
    int rc = rs_append(s->put, s->w, e->slot, &m, f + 4 + hl, total - 4 - hl, props, plen, &r);
    if (rc) return 0;  /* nothing stored: the Python path repeats it and maps, raises or answers */
    s->end = r.end;
    if (scanned) rt_learn(s, f + 4, hl, &h);  /* the next of this producer's sends reads faster */
    if (h.flag & s->f_oneway) return 1;
    char id[96];  /* prefix (at most 64) + 16 */
    size_t id_len = rs_offset_id(s, id, r.phys_offset);
    return rs_answer(s, id, id_len, e->qid, r.queue_offset, &h.opaque) ? -1 : 1;
}

/* ---- the type ------------------------------------------------------------------------------- */
/* serve(data, pos, topics, born_ip, born_port, max_frame, room, epoch) -> (pos, answers, stored,
 * stop, end, got, held): stored counts the messages (a batch's each); got the messages pull
 * answers carried; held the pulls held (remoting_pull.c's records) or None; room the held pulls
 * this connection may still take (-1: every pull is Python's), epoch the worker's subscription
 * cache's (remoting_pull.c); frames
 * from ``pos`` served until the end, an incomplete frame or a bad length word (stop False: the
 * frame splitter's), or a complete frame this does not take (stop True: the Python path's); end:
 * the commit position after the last append (what a SYNC_FLUSH answer waits for), 0 if none */
static PyObject *sends_serve(Sends *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "serve(data, pos, topics: dict, born_ip, born_port, max_frame, room, epoch)");
        return NULL;
    }
    Py_buffer buf;
    if (PyObject_GetBuffer(args[0], &buf, PyBUF_SIMPLE)) return NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    unsigned long bip = PyLong_AsUnsignedLong(args[3]);
    long bport = PyLong_AsLong(args[4]);
    long long maxf = PyLong_AsLongLong(args[5]);
    s->room = PyLong_AsLongLong(args[6]);
    s->epoch = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred() || pos < 0 || pos > buf.len) {
        PyBuffer_Release(&buf);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "pos out of range");
        return NULL;
    }
    const uint8_t *d = buf.buf;
    Py_ssize_t n = buf.len, stored = 0;
    int stop = 0;
    s->out_len = 0;
    s->end = 0;
    s->got = 0;
    s->sent = s->pulled = 0;
    s->topics = args[2];
    Py_CLEAR(s->held);
    while (n - pos >= 4) {
        int32_t total = (int32_t)rh_be32(d + pos);
        if (total < 4 || (long long)total + 4 > maxf || n - pos - 4 < total) break;
        int pull = 0;
        int rc = one_frame(s, d + pos + 4, (uint32_t)total, args[2], (uint32_t)bip, (int32_t)bport, &pull);
        if (rc < 0) {
            PyBuffer_Release(&buf);
            Py_CLEAR(s->held);  /* nothing was changed for a held pull but its commit: the error closes */
            return PyErr_Occurred() ? NULL : PyErr_NoMemory();
        }
        if (rc == 0) { stop = 1; break; }
        if (!pull) { stored += rc; s->sent = 1; }
        pos += 4 + total;
    }
    PyBuffer_Release(&buf);
    s->topics = NULL;
    PyObject *held = s->held ? s->held : Py_NewRef(Py_None);
    s->held = NULL;
    PyObject *out = s->out_len ? PyBytes_FromStringAndSize((const char *)s->out, (Py_ssize_t)s->out_len)
                               : Py_NewRef(Py_None);
    if (!out) { Py_DECREF(held); return NULL; }
    /* the tuple made directly: Py_BuildValue's format parse was ~900 instructions a read */
    PyObject *r = PyTuple_New(7);
    PyObject *v[7] = {PyLong_FromSsize_t(pos), out, PyLong_FromSsize_t(stored), Py_NewRef(stop ? Py_True : Py_False),
                      PyLong_FromLongLong((long long)s->end), PyLong_FromLongLong(s->got), held};
    int bad = !r;
    for (int i = 0; i < 7; i++) {
        if (!v[i]) bad = 1;
        else if (r) PyTuple_SET_ITEM(r, i, v[i]);
        else Py_DECREF(v[i]);
    }
    if (bad) Py_XDECREF(r);  /* (its items set so far go with it) */
    return bad ? NULL : r;
}

/* learn(topic, qid, tc, slot[, nq]): the Python path served a plain send to this queue under
 * ``tc``; nq > 0 (the topic's queue count, max(writeQueueNums, readQueueNums)) learns the topic
 * too, so its other queues' first sends are learnt here (``sibling``; ``queues`` must be set).
 * qid -1 with nq > 0: the topic's entry alone (no slot), for a topic whose sends would pass
 * send.py's topic checks under ``tc`` (send_fast.py ``topics_changed``, the worker's table
 * pushed): its very first send is learnt here too, not by a trip through send.py (issue 16) */
static PyObject *sends_learn(Sends *s, PyObject *args) {
    PyObject *topic, *tc;
    int qid, nq = 0;
    unsigned int slot;
    if (!PyArg_ParseTuple(args, "UiOI|i", &topic, &qid, &tc, &slot, &nq)) return NULL;
    if (qid < 0 && (qid != -1 || nq <= 0)) { PyErr_SetString(PyExc_ValueError, "queue id < 0"); return NULL; }
    Py_ssize_t tlen;
    const char *t = PyUnicode_AsUTF8AndSize(topic, &tlen);
    if (!t) return NULL;
    for (int pass = qid < 0 ? 1 : 0; pass < (nq > 0 ? 2 : 1); pass++) {
        int32_t q = pass ? TOPIC_QID : qid;
        qentry *e = lookup(s, (const uint8_t *)t, (uint32_t)tlen, q, 1);
        if (e == NULL || (e->topic == NULL && s->used >= TAB_CAP / 2)) Py_RETURN_FALSE;  /* full: Python serves */
        if (e->topic == NULL) {
            if (fill(s, e, topic, (const uint8_t *)t, (uint32_t)tlen, q)) return NULL;
        } else {
            Py_CLEAR(e->tc);
        }
        e->tc = Py_NewRef(tc);
        e->slot = pass ? 0 : slot;
        e->nq = pass ? nq : 0;
    }
    Py_RETURN_TRUE;
}

/* queues(address of shmq_queue_create): a learnt topic's other queues are learnt by their first
 * send (``sibling``) */
static PyObject *sends_queues(Sends *s, PyObject *arg) {
    void *p = PyLong_AsVoidPtr(arg);
    if (p == NULL) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null address"); return NULL; }
    s->qcreate = (qcreate_fn)p;
    Py_RETURN_NONE;
}

static void sends_clear_table(Sends *s) {
    if (s->tab == NULL) return;
    for (uint32_t i = 0; i < TAB_CAP; i++) {
        qentry *e = &s->tab[i];
        if (e->topic == NULL) continue;
        Py_CLEAR(e->topic);
        Py_CLEAR(e->tc);
        PyMem_Free(e->tb);
        e->tb = NULL;
    }
    s->used = 0;
}

/* Sends(put address, writer address, code, letters, answer pieces, cluster pair, msgId prefix,
 *       (response flag, oneway flag, transaction type mask)) */
static int sends_init(Sends *s, PyObject *args, PyObject *kw) {
    (void)kw;
    PyObject *put, *w, *letters, *tpl, *cluster;
    const char *prefix;
    Py_ssize_t plen;
    int code, f_response, f_oneway, tx_mask;
    if (!PyArg_ParseTuple(args, "OOiO!O!O!s#(iii)", &put, &w, &code, &PyTuple_Type, &letters, &PyTuple_Type, &tpl,
                          &PyBytes_Type, &cluster, &prefix, &plen, &f_response, &f_oneway, &tx_mask))
        return -1;
    if (PyTuple_GET_SIZE(letters) != K_N || PyTuple_GET_SIZE(tpl) != A_N + 1 || plen >= 64) {
        PyErr_SetString(PyExc_ValueError, "letters, answer pieces or prefix of the wrong size");
        return -1;
    }
    if (s->tab == NULL && (s->tab = PyMem_Calloc(TAB_CAP, sizeof *s->tab)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < K_N; i++) {
        Py_ssize_t n;
        const char *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(letters, i), &n);
        if (!k || n < 1 || n > 3) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "letter"); return -1; }
        memcpy(s->keys[i], k, (size_t)n);
        s->key_len[i] = (uint8_t)n;
    }
    for (int i = 0; i <= A_N; i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(tpl, i))) { PyErr_SetString(PyExc_TypeError, "pieces are bytes"); return -1; }
    s->put = (put_fn)PyLong_AsVoidPtr(put);
    s->w = (shmq_writer *)PyLong_AsVoidPtr(w);
    if (!s->put || !s->w) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null address"); return -1; }
    s->code = code;
    s->f_response = f_response;
    s->f_oneway = f_oneway;
    s->tx_mask = tx_mask;
    Py_XSETREF(s->tpl, Py_NewRef(tpl));
    Py_XSETREF(s->cluster, Py_NewRef(cluster));
    memcpy(s->prefix, prefix, (size_t)plen);
    s->prefix_len = (uint32_t)plen;
    sends_clear_table(s);
    rb_clear(s);
    rp_free(s);
    rt_free(s);
    return 0;
}

static PyObject *sends_clear(Sends *s, PyObject *unused) {
    (void)unused;
    sends_clear_table(s);
    Py_RETURN_NONE;
}

static void sends_dealloc(Sends *s) {
    sends_clear_table(s);
    PyMem_Free(s->tab);
    rt_free(s);
    rp_free(s);
    Py_CLEAR(s->held);
    rb_clear(s);
    PyMem_Free(s->phys);
    PyMem_Free(s->ids);
    Py_CLEAR(s->tpl);
    Py_CLEAR(s->cluster);
    PyMem_Free(s->out);
    PyMem_Free(s->scr);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef sends_methods[] = {
    {"serve", (PyCFunction)(void (*)(void))sends_serve, METH_FASTCALL,
     "serve(data, pos, topics, born_ip, born_port, max_frame) -> (pos, answers or None, stored, stop, end)"},
    {"learn", (PyCFunction)sends_learn, METH_VARARGS,
     "learn(topic, qid, tc, slot[, nq]) -> bool (False: table full); nq > 0: the topic's queues 0 .. nq-1 too (qid -1: only they)"},
    {"queues", (PyCFunction)sends_queues, METH_O,
     "queues(address of shmq_queue_create): a learnt topic's other queues are learnt by their first send"},
    {"clear", (PyCFunction)sends_clear, METH_NOARGS, "forget every learnt queue"},
    {"batches", (PyCFunction)rb_enable, METH_VARARGS,
     "batches(put_batch address, batch_phys address, code, max_body): serve SEND_BATCH_MESSAGE too"},
    {"learn_batch", (PyCFunction)rb_learn, METH_VARARGS,
     "learn_batch(text, extra) -> bool (False: table full): batches with this properties text store extra"},
    {"pulls", (PyCFunction)rp_enable, METH_VARARGS,
     "pulls(code, lite code, names, answer pieces, (commit, suspend, subscription bits), max count, max bytes, "
     "no_mix): serve PULL_MESSAGE too"},
    {"learn_pull", (PyCFunction)rp_learn, METH_VARARGS,
     "learn_pull(group, topic, qid, tc, (topic, qid, state), commit address, (version, epoch, until) or None) -> bool"},
    {"answer", (PyCFunction)(void (*)(void))rp_answer, METH_FASTCALL,
     "answer(held record) -> (frame, count) or None: a held pull's FOUND answer"},
    {"clear_pulls", (PyCFunction)rp_clear_method, METH_NOARGS, "forget every learnt pull"},
    {"due", (PyCFunction)(void (*)(void))rp_due, METH_FASTCALL | METH_STATIC,
     "due(holds, find, ctl) -> the held pulls to look at, or None"},
    {NULL, NULL, 0, NULL},
};

static PyObject *sends_learnt_hits(Sends *s, void *unused) {
    (void)unused;
    return PyLong_FromUnsignedLongLong(s->rt_hits);
}

static PyGetSetDef sends_getset[] = {
    {"learnt_hits", (getter)sends_learnt_hits, NULL, "headers read by a learnt layout (remoting_learnt.c)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SendsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shmq.native._rsend.Sends",
    .tp_basicsize = sizeof(Sends),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "the worker's C path for plain SEND_MESSAGE_V2 frames (remoting_send.c)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)sends_init,
    .tp_dealloc = (destructor)sends_dealloc,
    .tp_methods = sends_methods,
    .tp_getset = sends_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "shmq.native._rsend", .m_size = -1};

PyMODINIT_FUNC PyInit__rsend(void) {
    if (PyType_Ready(&SendsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Sends", (PyObject *)&SendsType) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
