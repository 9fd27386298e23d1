/*
 * shmq/native/send_answer.h -- what a send's answer frame says, read in C: the header's fields
 * (code, opaque, flag, remark, extFields) and a SUCCESS answer's SendResult fields, as
 * client.remote_send.send_result reads them. Header-only: native/remote_answer.c (async answers,
 * from the loop's read buffer) and native/sync_send.c (a sync send's answer, from its socket)
 * each compile it in; the bytes are scanned by remoting_header.h. Include it after Python.h.
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
    msg_id->p = (const uint8_t *)""; msg_id->n = 0;
    *offset = -1;
    for (int i = 0; i < h->n_ext; i++) {  /* in order: a repeated key's last value counts */
        const span *k = &h->key[i];
        int64_t v;
        if (rh_is(k, "msgId")) *msg_id = h->val[i];
        else if (rh_is(k, "queueOffset")) { if (rh_field_int(&h->val[i], INT64_MIN, INT64_MAX, offset)) return -1; }
        else if (rh_is(k, "queueId")) { if (rh_field_int(&h->val[i], INT64_MIN, INT64_MAX, &v) || v != queue_id) return -1; }
        else if (rh_is(k, "transactionId") || rh_is(k, "recallHandle")) return -1;
    }
    return 0;  /* (a doubt, e.g. a repeated key with a differing value, is left to Python) */
}

#endif
