/*
 * shmq/native/remoting_send.h -- the types the worker's C request path (module shmq.native._rsend)
 * shares between its files: remoting_send.c (the frames, the header's fields, a plain
 * SEND_MESSAGE_V2, the type), remoting_batch.c (a SEND_BATCH_MESSAGE) and remoting_pull.c (a
 * PULL_MESSAGE). Not a public header: nothing but those three includes it.
 */
#ifndef SHMQ_REMOTING_SEND_H
#define SHMQ_REMOTING_SEND_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "core.h"
#include "remoting_header.h"
#include "send_frame.h"

/* shmq_put_try and shmq_put_batch_try, shmq_batch_phys (core.h), called through the addresses
 * cffi gives */
typedef int (*put_fn)(shmq_writer *, uint32_t, const shmq_meta *, const uint8_t *, uint32_t, const uint8_t *,
                      uint32_t, shmq_result *, int);
typedef int64_t (*qcreate_fn)(shmq_writer *, const uint8_t *, size_t, int32_t);  /* shmq_queue_create */
typedef int (*phys_fn)(const uint8_t *, uint32_t, uint32_t, uint32_t, int64_t, uint32_t, int64_t *);

/* the SEND_MESSAGE_V2 fields read, in the order ``Sends`` is given their letters */
enum { K_GROUP, K_TOPIC, K_DEFTOPIC, K_DEFNUMS, K_QID, K_SYSFLAG, K_BORN, K_FLAG, K_PROPS, K_RECONSUME, K_MAXRECONSUME,
       K_BATCH, K_N };
/* the PULL_MESSAGE fields read (PullMessageRequestHeader's), in the order ``pulls`` is given their names */
enum { P_GROUP, P_TOPIC, P_QID, P_QOFF, P_MAXN, P_SYSFLAG, P_COMMIT, P_SUSPEND, P_SUBVER, P_SUB, P_EXPR, P_N };
/* the answer's variable parts, in the order of the template's pieces */
enum { A_MSGID, A_QID, A_QOFF, A_OPAQUE, A_N };

typedef rh_span span;

typedef struct {
    PyObject *topic;   /* the str the worker's topic table is keyed by */
    PyObject *tc;      /* the TopicConfig the queue was learnt under */
    uint8_t *tb;       /* topic as UTF-8 */
    uint32_t tlen, slot;
    int32_t qid;       /* TOPIC_QID: the topic's own entry (a queue's are >= 0) */
    int32_t nq;        /* the topic's entry: its queue ids are 0 .. nq - 1 (send.py's range check) */
} qentry;

/* the qid of a topic's entry in the same table: a header's queue id is never looked up below 0 */
#define TOPIC_QID INT32_MIN

/* entries of a worker's table (queues and topics learnt; half may be used): twice the store's
 * default queue_capacity (16,384), so a worker that sees every queue the store can hold plus
 * their topics is not cleared and relearnt (at 4,096 the 10,000-queue curve point cleared it
 * again and again: plain send p50 149 µs against 53-71). Allocated zeroed (calloc: pages only as
 * entries are used), 40 bytes an entry. */
#define TAB_CAP 32768

/* a batch-level properties text the Python path stored a batch with, and the extra properties
 * it stored with each entry then (PutPipeline.batch_properties of that text) */
typedef struct {
    uint8_t *text;
    uint32_t len;
    PyObject *extra;   /* bytes */
} bprops;

#define BPROPS_CAP 64  /* texts learnt per worker; producers repeat a few, others are Python's */

typedef struct rp_state rp_state;  /* remoting_pull.c's: the learnt pulls and their answer */

/* the slots of a learnt header layout (remoting_learnt.c): the value tokens that differ between
 * a producer's sends to one topic */
enum { HS_QID, HS_SYSFLAG, HS_BORN, HS_FLAG, HS_PROPS, HS_TFLAG, HS_OPAQUE, HS_N };

/* a request's header as read (remoting_send.c's parse_header); tok: where the scan found each
 * slot's value token (its first byte and the byte after it; NULL: not seen) */
typedef struct {
    int64_t code, flag;
    span opaque;
    span f[K_N];
    span pf[P_N];
    int have_code, have_flag, have_ext, have_lang, have_remark, have_version, have_stype;
    const uint8_t *tok[HS_N][2];
} header;

/* one learnt layout: the header's bytes, its slots in the order of their place (their kinds,
 * first bytes and ends), and what the scan read of it (its other spans into ``bytes``) */
typedef struct {
    uint8_t *bytes;
    uint32_t len;  /* 0: none */
    uint8_t slot[HS_N];
    uint32_t at[HS_N], end[HS_N];
    header h;
} learnt;

#define RT_N 4  /* layouts kept per worker, the most recent tried first */

/* which slot an extFields field (K_*) is, or -1 */
static inline int rs_ext_slot(int k) {
    switch (k) {
        case K_QID: return HS_QID;
        case K_SYSFLAG: return HS_SYSFLAG;
        case K_BORN: return HS_BORN;
        case K_FLAG: return HS_FLAG;
        case K_PROPS: return HS_PROPS;
        default: return -1;
    }
}

typedef struct {
    PyObject_HEAD
    put_fn put;
    shmq_writer *w;
    int32_t code;                  /* SEND_MESSAGE_V2 */
    int32_t f_response, f_oneway;  /* the remoting flag bits (shmq.protocol.codes) */
    int32_t tx_mask;               /* the sysFlag's transaction type (shmq.message.layout) */
    char keys[K_N][4];
    uint8_t key_len[K_N];
    PyObject *tpl;                 /* tuple of A_N + 1 bytes: the answer's header cut at its parts */
    PyObject *cluster;             /* bytes: this broker's CLUSTER pair */
    char prefix[64];
    uint32_t prefix_len;
    qentry *tab;                   /* TAB_CAP entries, open addressing on (topic, qid) */
    qcreate_fn qcreate;            /* set by ``queues``: a learnt topic's other queues are learnt by C */
    uint32_t used;
    uint8_t *out; size_t out_len, out_cap;
    int64_t end;                   /* commit position after the last append served */
    uint8_t *scr; size_t scr_cap;  /* unescaped header strings, then the stored properties */
    /* batches (remoting_batch.c): Python's until ``batches`` is called (code_batch 0) */
    put_fn put_batch;
    phys_fn batch_phys;
    int32_t code_batch;            /* SEND_BATCH_MESSAGE */
    uint32_t max_body;             /* the store's max_message_size: a larger batch body is Python's */
    bprops bp[BPROPS_CAP];
    uint32_t bp_used;
    int64_t *phys; uint32_t phys_cap;  /* a batch's record offsets */
    char *ids; size_t ids_cap;         /* a batch's msgIds, comma-joined */
    /* pulls (remoting_pull.c): Python's until ``pulls`` is called (pl NULL) */
    rp_state *pl;
    int32_t code_pull, code_lite_pull;  /* PULL_MESSAGE, LITE_PULL_MESSAGE (0: none) */
    char pkeys[P_N][24];
    uint8_t pkey_len[P_N];
    /* this serve call's: held pulls it may still take (-1: none, every pull is Python's), the
     * worker's subscription epoch, what it did (messages answered, held pulls handed back, a
     * send stored / a pull answered: under SYNC_FLUSH the two are not mixed in one run) */
    long long room, epoch, got;
    PyObject *topics;                  /* the worker's topic table (borrowed, this call only) */
    PyObject *held;
    int sent, pulled;
    int no_mix;                        /* SYNC_FLUSH: a run is sends or pulls, not both */
    /* learnt header layouts (remoting_learnt.c), the next place to fill, headers read by one */
    learnt rt[RT_N];
    uint32_t rt_next;
    unsigned long long rt_hits;
} Sends;


/* One append through put (s->put or s->put_batch): tried first with the GIL held, the store's
 * lock taken only if it is free (or frees within the core's spin), since it nearly always is and
 * the GIL's release and retake around a ~1 us append (its mutex, condition variable and thread
 * state, ~1,500 instructions a request) cost more than the append; a lock another writer holds
 * (SHMQ_EBUSY: nothing written) is then waited for with the GIL released, as before. With the GIL
 * held the append does only bounded local work (hot_send.c says which), never a wait. */
static inline int rs_append(put_fn put, shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *b,
                            uint32_t n, const uint8_t *props, uint32_t plen, shmq_result *r) {
    int rc = put(w, slot, m, b, n, props, plen, r, 1);
    if (rc == SHMQ_EBUSY) {
        Py_BEGIN_ALLOW_THREADS
        rc = put(w, slot, m, b, n, props, plen, r, 0);
        Py_END_ALLOW_THREADS
    }
    return rc;
}

/* remoting_send.c: room for ``more`` bytes after s->out_len in s->out; 0 or -1 (out of memory) */
int rs_out_reserve(Sends *s, size_t more);
/* remoting_send.c: one SUCCESS answer into s->out (msgId text, queue id, queue offset, the
 * request's opaque literal); 0 or -1 (out of memory) */
int rs_answer(Sends *s, const char *id, size_t id_len, int32_t qid, int64_t qoff, const span *opaque);

/* FNV-1a over n bytes, from h (start: 2166136261 ^ the queue id): the learnt tables' hash, the
 * sends' (topic, queue) and the pulls' (group, topic, queue) */
static inline uint32_t rs_fnv(uint32_t h, const uint8_t *p, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

/* The offset msgId of the record at phys, written at out: the store's prefix (host and port,
 * as msgid.py's offset id begins) then phys as 16 upper-case hex digits, two a step from a
 * table (a digit a step was ~140 instructions an id: 32 of them in a batch's answer); its
 * length. One writer for a send's answer (remoting_send.c) and a batch's ids (remoting_batch.c). */
static inline size_t rs_offset_id(const Sends *s, char *out, int64_t phys) {
    static const char hex2[] =
        "000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F"
        "202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F"
        "404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F"
        "606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F"
        "808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9F"
        "A0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBF"
        "C0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDF"
        "E0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF";
    memcpy(out, s->prefix, s->prefix_len);
    char *d = out + s->prefix_len;
    uint64_t x = (uint64_t)phys;
    for (int i = 14; i >= 0; i -= 2, x >>= 8) memcpy(d + i, hex2 + 2 * (x & 0xFF), 2);
    return s->prefix_len + 16;
}

/* remoting_learnt.c: a SEND_MESSAGE_V2 header read by a learnt layout (the scratch used, or -1:
 * scan it), a stored send's header learnt, the layouts freed */
int rt_match(Sends *s, const uint8_t *p, uint32_t n, header *h);
void rt_learn(Sends *s, const uint8_t *p, uint32_t n, const header *h);
void rt_free(Sends *s);

/* remoting_pull.c */
/* a PULL_MESSAGE (its code checked) whose header is h: 1 served (answered into s->out, or held:
 * a record appended to s->held), 0 the Python path's (nothing done), -1 an exception set */
int rp_frame(Sends *s, const header *h);
PyObject *rp_enable(Sends *s, PyObject *args);
PyObject *rp_learn(Sends *s, PyObject *args);
PyObject *rp_answer(Sends *s, PyObject *const *args, Py_ssize_t nargs);
PyObject *rp_clear_method(Sends *s, PyObject *unused);
PyObject *rp_due(PyObject *unused, PyObject *const *args, Py_ssize_t nargs);  /* Sends.due (static): pull_hold's scan */
void rp_free(Sends *s);

/* remoting_batch.c */
/* a checked SEND_BATCH_MESSAGE (plain_send's checks passed, to the learnt queue e; v: its
 * integer fields) whose body is b[0..n): the messages stored (answered unless oneway), 0 (the
 * Python path's: nothing stored, also when memory is short) or -1 (a broken invariant after the
 * append: an exception set) */
int rb_frame(Sends *s, const header *h, const int64_t *v, const qentry *e, const uint8_t *b, uint32_t n,
             uint32_t bip, int32_t bport);
PyObject *rb_enable(Sends *s, PyObject *args);
PyObject *rb_learn(Sends *s, PyObject *args);
void rb_clear(Sends *s);

#endif
