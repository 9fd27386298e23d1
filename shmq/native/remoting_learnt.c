/*
 * shmq/native/remoting_learnt.c -- a SEND_MESSAGE_V2 header read by its learnt layout instead of
 * scanned (part of shmq.native._rsend; remoting_send.c's one_frame asks here first).
 *
 * Why: the full scan of a send's JSON header (remoting_header.h: ~34 strings, each key matched
 * against the names the worker reads) was ~5,600 of the worker's ~8,400 instructions per oneway
 * send (bench/RESULTS.md, "Session 11, asyncw"). A producer writes every send to a topic from
 * one template (its client's SendFrame, or a Java client's fixed field order): the headers of
 * its sends differ only in the values of a few fields. So once the scan has read a header whose
 * send was stored, its bytes are kept, cut at the value tokens of those fields (the slots): the
 * queue id, sysFlag, bornTimestamp, flag and properties in extFields, and the top-level flag and
 * opaque. A later header is read by the layout when its bytes between the slots are those bytes
 * exactly and each slot holds a token of the kind the scan read there, read by the scan's own
 * token reader (rh_str, with the same scratch, for a string; rh_int for a number, with the
 * scan's "-0" rule for the opaque).
 *
 * Why that is the scan's reading: the scan is a left-to-right reader whose state after a value
 * token does not depend on the token's content (a string's or a number's bytes change only the
 * value kept), so over the same bytes between the slots it takes the same path, keys and
 * values, and for each slot reads the same token as here; the end (the last literal ends the
 * header) is the scan's "nothing but whitespace after the object". What the scan keeps of the
 * other fields (group, topic, the rest) is the learnt header's, whose bytes are the same; a
 * layout is learnt only when each of those values is a span of the header itself (no escape
 * unescaped into the scratch). Anything else -- no layout, a byte that differs, a token of
 * another kind -- is the full scan's, as before; a match changes no check after the read.
 */
#include <string.h>
#include "remoting_send.h"

/* a span of the scan's header h rebased from the frame's header (at base) to the copy */
static int rebase(span *sp, const uint8_t *base, uint32_t n, const uint8_t *copy) {
    if (!sp->set) return 0;
    if (sp->p < base || sp->p + sp->n > base + n) return -1;  /* unescaped into the scratch */
    sp->p = copy + (sp->p - base);
    return 0;
}

void rt_free(Sends *s) {
    for (int i = 0; i < RT_N; i++) {
        PyMem_Free(s->rt[i].bytes);
        memset(&s->rt[i], 0, sizeof s->rt[i]);
    }
    s->rt_next = 0;
}

/* the layout of a header p[0..n) the scan read into h (a plain send or a batch, stored): kept in the next of
 * the RT_N places, unless a slot is missing or another value is not in the header itself */
void rt_learn(Sends *s, const uint8_t *p, uint32_t n, const header *h) {
    for (int i = 0; i < HS_N; i++)
        if (!h->tok[i][0]) return;
    learnt *l = &s->rt[s->rt_next];
    uint8_t *copy = PyMem_Realloc(l->bytes, n ? n : 1);
    if (!copy) { PyErr_Clear(); return; }
    memcpy(copy, p, n);
    l->bytes = copy;
    l->len = 0;  /* unusable until complete */
    l->h = *h;
    for (int i = 0; i < K_N; i++)
        if (rs_ext_slot(i) < 0 && rebase(&l->h.f[i], p, n, copy)) return;
    for (int i = 0; i < P_N; i++)
        if (rebase(&l->h.pf[i], p, n, copy)) return;
    /* the slots in the order of their place in the header */
    int order[HS_N];
    for (int i = 0; i < HS_N; i++) {
        int k = i;
        while (k > 0 && h->tok[order[k - 1]][0] > h->tok[i][0]) { order[k] = order[k - 1]; k--; }
        order[k] = i;
    }
    for (int i = 0; i < HS_N; i++) {
        l->slot[i] = (uint8_t)order[i];
        l->at[i] = (uint32_t)(h->tok[order[i]][0] - p);
        l->end[i] = (uint32_t)(h->tok[order[i]][1] - p);
        if (i && l->at[i] < l->end[i - 1]) return;  /* (never: tokens do not overlap) */
    }
    for (int i = 0; i < HS_N; i++) memset(l->h.tok[i], 0, sizeof l->h.tok[i]);
    l->len = n;
    s->rt_next = (s->rt_next + 1) % RT_N;
}

/* a header p[0..n) read by one learnt layout into *h: the scratch used, or -1 (not this layout) */
static int match_one(Sends *s, const learnt *l, const uint8_t *p, uint32_t n, header *h) {
    const uint8_t *q = p, *e = p + n, *lp = l->bytes;
    uint32_t from = 0;
    rh_cur c = {p, e, s->scr, 0};
    span v[HS_N] = {{0}};
    int64_t iv[HS_N] = {0};
    for (int i = 0; i < HS_N; i++) {
        uint32_t lit = l->at[i] - from;
        if ((size_t)(e - q) < lit || memcmp(q, lp + from, lit)) return -1;
        c.p = q + lit;
        int k = l->slot[i];
        if (k == HS_TFLAG) {
            if (rh_int(&c, &iv[k], NULL)) return -1;
        } else if (k == HS_OPAQUE) {  /* echoed as written: "-0" (Python writes 0) is Python's */
            if (rh_int(&c, &iv[k], &v[k]) || (iv[k] == 0 && v[k].n != 1)) return -1;
        } else if (rh_str(&c, &v[k])) {
            return -1;
        }
        q = c.p;
        from = l->end[i];
    }
    if ((size_t)(e - q) != l->len - from || memcmp(q, lp + from, l->len - from)) return -1;
    *h = l->h;
    h->f[K_QID] = v[HS_QID], h->f[K_SYSFLAG] = v[HS_SYSFLAG], h->f[K_BORN] = v[HS_BORN];
    h->f[K_FLAG] = v[HS_FLAG], h->f[K_PROPS] = v[HS_PROPS];
    h->flag = iv[HS_TFLAG];
    h->opaque = v[HS_OPAQUE];
    return (int)c.so;
}

int rt_match(Sends *s, const uint8_t *p, uint32_t n, header *h) {
    /* the most recently learnt first: a producer's sends to one topic share one */
    for (int k = 0, i = (s->rt_next + RT_N - 1) % RT_N; k < RT_N; k++, i = (i + RT_N - 1) % RT_N) {
        const learnt *l = &s->rt[i];
        if (!l->len) continue;
        int used = match_one(s, l, p, n, h);
        if (used >= 0) {
            s->rt_hits++;
            return used;
        }
    }
    return -1;
}
