/*
 * shmq/native/remoting_batch.c -- the worker's C path (shmq.native._rsend, remoting_send.c) for a
 * SEND_BATCH_MESSAGE: what send.py's _put_batch and FastWriter.put_sent_batch do with a batch
 * to a learnt queue, in C, or nothing.
 *
 * remoting_send.c has read the header and made the checks a batch shares with a send (code 320,
 * the fields _fast_v2 reads, no transaction type, no DELAY / TRAN_MSG / TIMER_ text, a queue the
 * Python path served under the TopicConfig still in the table). Here the rest, each handed back
 * to the Python path when it does not hold, so that path answers, refuses or maps as it did:
 *   - a body over the store's max_message_size (put_sent_batch's check_sizes: its error);
 *   - a batch-level properties text the Python path has not stored a batch with (learn_batch:
 *     that text passed PutPipeline.batch_properties, PLAIN, and gave the extra properties each
 *     entry is stored with; the text is compared byte for byte, so nothing is re-derived here);
 *   - any non-zero status of shmq_put_batch: a damaged body (EBADBATCH), a too-large entry, a
 *     prepared or rolled-back sysFlag, a full disk, a file to map. Nothing was stored then: the
 *     batch is scanned before the lock, and put_batch fails only before its intent is written.
 * A retry topic never reaches here: its queues are never learnt (FastWriter refuses them, and
 * classify never calls a send to one PLAIN).
 *
 * The body is split by the core's own batch scan (core_batch.c batch_scan, in shmq_put_batch),
 * the one decoder of the MessageBatch layout the Python path uses too (it calls shmq_put_batch),
 * so both paths store the same records. The answer is the Python path's: SUCCESS, msgId the
 * offset ids of the records joined by ',' (msgid.batch_msg_ids; the record offsets from
 * shmq_batch_phys, the ones the ConsumeQueue holds), the queue id, the first queue offset.
 *
 * Every buffer the answer needs is reserved before the append, so a served batch is answered.
 */
#include <string.h>
#include "remoting_send.h"

static const bprops *find_props(const Sends *s, const uint8_t *t, uint32_t n) {
    for (uint32_t i = 0; i < s->bp_used; i++)
        if (s->bp[i].len == n && memcmp(s->bp[i].text, t, n) == 0) return &s->bp[i];
    return NULL;
}

/* buffers for a batch body of n bytes: at most n / SHMQ_BATCH_ENTRY_FIXED entries */
static int reserve(Sends *s, uint32_t n, size_t id_len) {
    uint32_t most = n / SHMQ_BATCH_ENTRY_FIXED + 1;
    if (s->phys_cap < most) {
        int64_t *p = PyMem_Realloc(s->phys, (size_t)most * sizeof *p);
        if (!p) return -1;
        s->phys = p;
        s->phys_cap = most;
    }
    size_t ids = (size_t)most * (id_len + 1);
    if (s->ids_cap < ids) {
        char *p = PyMem_Realloc(s->ids, ids);
        if (!p) return -1;
        s->ids = p;
        s->ids_cap = ids;
    }
    return 0;
}

/* the offset ids of count records at phys, joined by ',': their length */
static size_t join_ids(const Sends *s, uint32_t count) {
    char *d = s->ids;
    for (uint32_t k = 0; k < count; k++) {
        if (k) *d++ = ',';
        d += rs_offset_id(s, d, s->phys[k]);
    }
    return (size_t)(d - s->ids);
}

int rb_frame(Sends *s, const header *h, const int64_t *v, const qentry *e, const uint8_t *b, uint32_t n,
             uint32_t bip, int32_t bport) {
    if (n > s->max_body) return 0;
    const span *pr = &h->f[K_PROPS];
    const bprops *bp = pr->set ? find_props(s, pr->p, pr->n) : find_props(s, (const uint8_t *)"", 0);
    if (bp == NULL) return 0;
    int oneway = (h->flag & s->f_oneway) != 0;
    size_t fixed = 0, id_len = s->prefix_len + 16;
    for (int i = 0; i <= A_N; i++) fixed += (size_t)PyBytes_GET_SIZE(PyTuple_GET_ITEM(s->tpl, i));
    /* the answer's largest size: every id, the numbers' widest, the opaque as written */
    size_t most = (size_t)(n / SHMQ_BATCH_ENTRY_FIXED + 1) * (id_len + 1) + fixed + 11 + 20 + (h->opaque.set ? h->opaque.n : 1) + 8;
    if (!oneway && most - 8 > 0xFFFFFF) return 0;  /* an answer header over 24 bits: Python's */
    /* reserved before the append; when memory is short the Python path has the batch (nothing
     * stored yet, and the answers of the frames before it, already built, are kept) */
    if (!oneway && (reserve(s, n, id_len) || rs_out_reserve(s, most))) return 0;
    PyObject *extra = bp->extra;  /* owned by the table, which nothing changes while this runs */
    const uint8_t *xp = (const uint8_t *)PyBytes_AS_STRING(extra);
    uint32_t xn = (uint32_t)PyBytes_GET_SIZE(extra);
    uint32_t slot = e->slot, tlen = e->tlen;
    int32_t qid = e->qid;
    /* FastWriter.put_sent_batch's origin: flag and reconsumeTimes 0, the header's sysFlag and
     * bornTimestamp, the peer; each entry's tag from its own properties */
    shmq_meta m = {0};
    m.sysflag = (int32_t)v[K_SYSFLAG];
    m.born_ts = v[K_BORN];
    m.born_ip = bip;
    m.born_port = bport;
    m.tag_mode = SHMQ_TAG_FROM_PROPS;
    shmq_result r;
    int rc = rs_append(s->put_batch, s->w, slot, &m, b, n, xp, xn, &r);
    if (rc) return 0;  /* nothing stored: the Python path repeats it and maps, raises or answers */
    s->end = r.end;
    if (oneway) return r.count;
    if (s->batch_phys(b, n, tlen, xn, r.phys_offset, (uint32_t)r.count, s->phys)) {
        /* the append took this body, so its walk cannot fail: a broken invariant, said loudly */
        PyErr_SetString(PyExc_SystemError, "remoting_batch: an appended batch does not split");
        return -1;
    }
    size_t ids = join_ids(s, (uint32_t)r.count);
    if (rs_answer(s, s->ids, ids, qid, r.queue_offset, &h->opaque)) {
        PyErr_SetString(PyExc_SystemError, "remoting_batch: the answer outgrew its reservation");
        return -1;
    }
    return r.count;
}

/* batches(put_batch address, batch_phys address, SEND_BATCH_MESSAGE, max_message_size) */
PyObject *rb_enable(Sends *s, PyObject *args) {
    PyObject *put, *phys;
    int code;
    unsigned int max_body;
    if (!PyArg_ParseTuple(args, "OOiI", &put, &phys, &code, &max_body)) return NULL;
    put_fn p = (put_fn)PyLong_AsVoidPtr(put);
    phys_fn f = (phys_fn)PyLong_AsVoidPtr(phys);
    if (!p || !f) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null address");
        return NULL;
    }
    s->put_batch = p;
    s->batch_phys = f;
    s->max_body = max_body;
    s->code_batch = code;
    Py_RETURN_NONE;
}

/* learn_batch(text, extra): the Python path stored a batch whose properties text was ``text``
 * with ``extra`` as each entry's batch properties; False when the table is full */
PyObject *rb_learn(Sends *s, PyObject *args) {
    PyObject *text, *extra;
    if (!PyArg_ParseTuple(args, "UO!", &text, &PyBytes_Type, &extra)) return NULL;
    Py_ssize_t n;
    const char *t = PyUnicode_AsUTF8AndSize(text, &n);
    if (!t) return NULL;
    bprops *bp = (bprops *)find_props(s, (const uint8_t *)t, (uint32_t)n);
    if (bp == NULL) {
        if (s->bp_used >= BPROPS_CAP) Py_RETURN_FALSE;
        bp = &s->bp[s->bp_used];
        bp->text = PyMem_Malloc((size_t)n + 1);
        if (!bp->text) return PyErr_NoMemory();
        memcpy(bp->text, t, (size_t)n);
        bp->len = (uint32_t)n;
        bp->extra = NULL;
        s->bp_used++;
    }
    Py_XSETREF(bp->extra, Py_NewRef(extra));
    Py_RETURN_TRUE;
}

void rb_clear(Sends *s) {
    for (uint32_t i = 0; i < s->bp_used; i++) {
        PyMem_Free(s->bp[i].text);
        Py_CLEAR(s->bp[i].extra);
    }
    s->bp_used = 0;
}
