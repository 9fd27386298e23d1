/*
 * shmq/native/send_answer.h -- what a send's answer frame says, read in C: the header's fields
 * (code, opaque, flag, remark, extFields) and a SUCCESS answer's SendResult fields, as
 * client.remote_send.send_result reads them, and this broker's own SUCCESS answer matched against
 * its template (sa_template). Header-only: native/remote_answer.c (async answers, from the loop's
 * read buffer) and native/sync_send.c (a sync send's answer, from its socket) each compile it in;
 * the bytes are scanned by remoting_header.h. Include it after Python.h.
 */
#ifndef SHMQ_SEND_ANSWER_H
#define SHMQ_SEND_ANSWER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "remoting_header.h"

#define MAX_EXT 24          /* extFields pairs read; more: the Python path's */
#define MAX_ANSWER 65536    /* larger frames are the Python decoder's (it knows the limits) */

typedef rh_span span;

typedef struct {
    int64_t code, opaque, flag, version;
    span language, remark;
    int has_remark, has_ext;  /* has_remark: 1 string, 0 absent or null; has_ext: an object */
    int tpl;  /* read by the template (sa_template_header): extFields are msgId, queueId, queueOffset */
    int n_ext;
    span key[MAX_EXT], val[MAX_EXT];
} header;

/* ---- the JSON header (remoting_header.h scans it; here: which fields mean what) ------------ */
static inline int ext_member(rh_cur *c, const span *k, void *ctx) {
    header *h = ctx;
    if (h->n_ext == MAX_EXT) return -1;
    h->key[h->n_ext] = *k;
    if (rh_str(c, &h->val[h->n_ext])) return -1;  /* extFields: strings only (the strict type) */
    h->n_ext++;
    return 0;
}

/* A repeated key keeps its last value, as msgspec's struct and dict decoding do. */
static inline int top_member(rh_cur *c, const span *k, void *ctx) {
    header *h = ctx;
    if (rh_is(k, "code")) return rh_int(c, &h->code, NULL);
    if (rh_is(k, "opaque")) return rh_int(c, &h->opaque, NULL);
    if (rh_is(k, "flag")) return rh_int(c, &h->flag, NULL);
    if (rh_is(k, "version")) return rh_int(c, &h->version, NULL);
    if (rh_is(k, "language")) return rh_str(c, &h->language);
    if (rh_is(k, "remark")) {
        if (rh_null(c)) { h->has_remark = 0; return 0; }
        h->has_remark = 1;
        return rh_str(c, &h->remark);
    }
    if (rh_is(k, "extFields")) {
        h->n_ext = 0;
        if (rh_null(c)) { h->has_ext = 0; return 0; }
        h->has_ext = 1;
        return rh_object(c, ext_member, h);
    }
    return rh_scalar(c);
}

/* a frame after its length word (mark | header | body): its JSON header read (escapes unescaped
 * into ``scr`` when it is not NULL: it holds the frame's length), or -1: not read exactly, Python's */
static inline int frame_header(const char *f, Py_ssize_t n, header *h, Py_ssize_t *body, uint8_t *scr) {
    uint32_t hl;
    rh_cur c;
    if (rh_frame((const uint8_t *)f, (size_t)n, &hl)) return -1;
    *body = n - 4 - hl;
    memset(h, 0, offsetof(header, key));
    h->language.p = (const uint8_t *)"JAVA"; h->language.n = 4;  /* the strict type's defaults */
    return rh_header(&c, (const uint8_t *)f + 4, hl, scr, top_member, h);
}

/* What a SUCCESS answer's extFields say, as send_result reads them: 0, or -1 (Python's: a
 * queueId other than the queue asked, a transactionId / recallHandle, an integer it would
 * read otherwise, or a refusal to raise). */
static inline int success_fields(const header *h, long queue_id, span *msg_id, int64_t *offset) {
    int64_t v;
    if (h->tpl) {  /* the template's three keys, each once (sa_template_of checked): no key compared */
        *msg_id = h->val[0];
        return rh_field_int(&h->val[1], INT64_MIN, INT64_MAX, &v) || v != queue_id ||
               rh_field_int(&h->val[2], INT64_MIN, INT64_MAX, offset) ? -1 : 0;
    }
    msg_id->p = (const uint8_t *)""; msg_id->n = 0;
    *offset = -1;
    for (int i = 0; i < h->n_ext; i++) {  /* in order: a repeated key's last value counts */
        const span *k = &h->key[i];
        if (rh_is(k, "msgId")) *msg_id = h->val[i];
        else if (rh_is(k, "queueOffset")) { if (rh_field_int(&h->val[i], INT64_MIN, INT64_MAX, offset)) return -1; }
        else if (rh_is(k, "queueId")) { if (rh_field_int(&h->val[i], INT64_MIN, INT64_MAX, &v) || v != queue_id) return -1; }
        else if (rh_is(k, "transactionId") || rh_is(k, "recallHandle")) return -1;
    }
    return 0;  /* (a doubt, e.g. a repeated key with a differing value, is left to Python) */
}

/* ---- the broker's own SUCCESS answer, matched against its template ------------------------- */
/* The pieces (protocol/send_answer.py's answer_pieces: the header this broker writes, cut at its
 * msgId, queueId, queueOffset and opaque), borrowed from the tuple the caller holds; an answer
 * whose header is exactly
 *
 *   piece0 msgId piece1 queueId piece2 queueOffset piece3 opaque piece4
 *
 * (the three strings of bytes 0x20-0x7F but a quote or a backslash, as the scanner's strings; the
 * opaque an integer as the scanner reads one) says what the scanner would read of it:
 * sa_template_of scans a sample made from the pieces and takes them only when it reads code 0,
 * the response flag, extFields, each of msgId / queueId / queueOffset once with the sample's
 * values, no key success_fields refuses, and the sample's opaque; so a match is read as the
 * scanner reads it without the scan (most of an answer's cost). Anything else is scanned. The
 * one matcher of it: remote_answer.c (async answers) and sync_send.c (a sync send's) each bind
 * the same pieces. */
typedef struct { span p[5]; } sa_template;

static const span sa_keys[3] = {{(const uint8_t *)"msgId", 5, 1}, {(const uint8_t *)"queueId", 7, 1},
                                {(const uint8_t *)"queueOffset", 11, 1}};

/* a string value's bytes up to its closing quote, as rh_str takes them without a scratch */
static inline int sa_string(const uint8_t **p, const uint8_t *e, span *v) {
    const uint8_t *q = rh_stop(*p, e);
    if (q >= e || *q != '"') return -1;
    v->p = *p, v->n = (uint32_t)(q - *p), v->set = 1;
    *p = q;
    return 0;
}

static inline int sa_lit(const sa_template *t, const uint8_t **p, const uint8_t *e, int i) {
    if ((size_t)(e - *p) < t->p[i].n || memcmp(*p, t->p[i].p, t->p[i].n)) return -1;
    *p += t->p[i].n;
    return 0;
}

/* the header h of a frame (after its length word; n bytes, no body) when it is the template: 0,
 * or -1 (scan it) */
static inline int sa_template_header(const sa_template *t, const char *f, Py_ssize_t n, header *h) {
    uint32_t hl;
    if (rh_frame((const uint8_t *)f, (size_t)n, &hl) || (Py_ssize_t)hl != n - 4) return -1;
    const uint8_t *p = (const uint8_t *)f + 4, *e = p + hl;
    span v[3];
    for (int i = 0; i < 3; i++)
        if (sa_lit(t, &p, e, i) || sa_string(&p, e, &v[i])) return -1;
    if (sa_lit(t, &p, e, 3)) return -1;
    rh_cur c = {p, e, NULL, 0};
    if (rh_int(&c, &h->opaque, NULL)) return -1;
    p = c.p;
    if (sa_lit(t, &p, e, 4) || p != e) return -1;
    h->code = 0, h->flag = 1, h->has_ext = 1, h->n_ext = 3, h->tpl = 1;
    h->has_remark = 0;
    for (int i = 0; i < 3; i++) h->key[i] = sa_keys[i], h->val[i] = v[i];
    return 0;
}

/* pieces: a tuple of 5 bytes the scanner reads as the comment above says: 0 with *t set (borrowed
 * from the tuple), or -1 with TypeError / ValueError */
static inline int sa_template_of(PyObject *pieces, sa_template *t) {
    if (!PyTuple_CheckExact(pieces) || PyTuple_GET_SIZE(pieces) != 5) {
        PyErr_SetString(PyExc_TypeError, "bind_template(5 bytes)");
        return -1;
    }
    Py_ssize_t total = 0;
    for (int i = 0; i < 5; i++) {
        PyObject *b = PyTuple_GET_ITEM(pieces, i);
        if (!PyBytes_CheckExact(b)) { PyErr_SetString(PyExc_TypeError, "bind_template(5 bytes)"); return -1; }
        t->p[i].p = (const uint8_t *)PyBytes_AS_STRING(b), t->p[i].n = (uint32_t)PyBytes_GET_SIZE(b), t->p[i].set = 1;
        total += PyBytes_GET_SIZE(b);
    }
    /* the sample: msgId "AB", queueId "7", queueOffset "9", opaque -5 */
    static const char *vals[4] = {"AB", "7", "9", "-5"};
    char *f = PyMem_Malloc((size_t)total + 16);
    if (!f) { PyErr_NoMemory(); return -1; }
    Py_ssize_t at = 4;
    for (int i = 0; i < 5; i++) {
        memcpy(f + at, t->p[i].p, t->p[i].n), at += t->p[i].n;
        if (i < 4) memcpy(f + at, vals[i], strlen(vals[i])), at += (Py_ssize_t)strlen(vals[i]);
    }
    uint32_t hl = (uint32_t)(at - 4);
    f[0] = (char)(hl >> 24), f[1] = (char)(hl >> 16), f[2] = (char)(hl >> 8), f[3] = (char)hl;
    header h;
    Py_ssize_t body;
    span mid;
    int64_t off;
    int ok = hl < (1u << 24) && !frame_header(f, at, &h, &body, NULL) && !body && h.code == 0 && (h.flag & 1) &&
             h.has_ext && h.opaque == -5 && !success_fields(&h, 7, &mid, &off) && off == 9 && mid.n == 2 &&
             !memcmp(mid.p, "AB", 2);
    for (int k = 0; ok && k < 3; k++) {  /* each once: a literal repeat would win over the slot */
        int seen = 0;
        for (int i = 0; i < h.n_ext; i++) seen += h.key[i].n == sa_keys[k].n && !memcmp(h.key[i].p, sa_keys[k].p, sa_keys[k].n);
        ok = seen == 1;
    }
    PyMem_Free(f);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "bind_template: the scanner does not read these pieces as an answer");
        return -1;
    }
    return 0;
}

/* A module's bound template: the pieces' tuple (held: the spans point into its bytes) and their
 * spans; obj NULL when none is bound (every answer scanned). */
typedef struct { PyObject *obj; sa_template t; } sa_bound;

/* the header h of a frame (after its length word; n bytes) when a template is bound and it is
 * that template: 0, or -1 (scan it) */
static inline int sa_bound_header(const sa_bound *b, const char *f, Py_ssize_t n, header *h) {
    return b->obj ? sa_template_header(&b->t, f, n, h) : -1;
}

/* bind_template(pieces or None)'s body, for remote_answer.c and sync_send.c alike: None unbinds
 * (the tests: every answer scanned); pieces the scanner does not read as an answer raise
 * (sa_template_of), the binding before kept */
static inline PyObject *sa_bind(sa_bound *b, PyObject *pieces) {
    if (pieces == Py_None) {
        Py_CLEAR(b->obj);
        Py_RETURN_NONE;
    }
    sa_template t;
    if (sa_template_of(pieces, &t)) return NULL;
    Py_XSETREF(b->obj, Py_NewRef(pieces));
    b->t = t;
    Py_RETURN_NONE;
}

#endif
