/*
 * shmq/native/core_batch.c -- a batch's work before the lock: the scan of a MessageBatch body
 * (every entry checked, its CRC and tag put in the writer's scratch), the one encoder of a
 * producer's batch (encode_batch: SEND_BATCH_MESSAGE's body, or a local batch), the scan of a
 * direct local batch (the same checks and statuses, in the same order, without encoding it),
 * the record offsets of an appended batch (shmq_batch_phys: a TCP batch's answer), and the batch
 * entry points, which hand the scanned batch to core_append.c's put_batch.
 * Nothing here takes the lock or writes the log.
 */

#define _GNU_SOURCE
#include "core_private.h"

/* ======================================================================== batch == */
/* An entry's properties as its record holds them: its own plen bytes, then (extra_len > 0) a \2
 * when they do not end with one, then the batch's extra (batch_next in core_append.c writes them
 * so). The record's size is SHMQ_RECORD_FIXED + blen + topic_len + this. */
static inline uint64_t merged_len(const uint8_t *props, int16_t plen, uint32_t extra_len) {
    int sep = extra_len && plen && props[plen - 1] != SHMQ_PROPERTY_SEP;
    return (uint64_t)plen + (uint64_t)sep + extra_len;
}

/* tag_all: every entry's TAGS hash when the caller knows it (one head shared by a local batch);
 * NULL: from each entry's properties, as m->tag_mode says */
static int batch_scan(shmq_writer *w, const shmq_queue_slot *qs, const shmq_meta *m,
                      const uint8_t *b, uint32_t n, uint32_t extra_len, uint32_t *count,
                      uint64_t *total, const int64_t *tag_all) {
    uint32_t i = 0, k = 0;
    uint64_t sum = 0;
    while (i < n) {
        if (n - i < BATCH_ENTRY_FIXED) return SHMQ_EBADBATCH;
        const uint8_t *e = b + i;
        int32_t blen = (int32_t)rd32(e + 16);
        if (blen < 0 || (uint64_t)blen + BATCH_ENTRY_FIXED > n - i) return SHMQ_EBADBATCH;
        int16_t plen = (int16_t)rd16(e + 20 + blen);
        if (plen < 0 || (uint64_t)blen + BATCH_ENTRY_FIXED + (uint64_t)plen > n - i) return SHMQ_EBADBATCH;
        const uint8_t *props = e + 22 + blen;
        uint64_t merged = merged_len(props, plen, extra_len);
        if (merged > SHMQ_PROPS_MAX) return SHMQ_EINVAL;
        if ((uint32_t)blen > w->ctl->header.max_message_size) return SHMQ_ETOOBIG;
        if (k >= w->scratch_cap) return SHMQ_EBADBATCH;
        w->scratch_crc[k] = shmq_crc32(0, e + 20, (size_t)blen) & 0x7FFFFFFFu;
        w->scratch_tag[k] = m->tag_mode != SHMQ_TAG_FROM_PROPS ? m->tag_code
                            : tag_all ? *tag_all : shmq_tag_code_of_props(props, (size_t)plen);
        sum += SHMQ_RECORD_FIXED + (uint64_t)blen + qs->topic_len + merged;
        i += BATCH_ENTRY_FIXED + (uint32_t)blen + (uint32_t)plen;
        k++;
    }
    if (k == 0) return SHMQ_EBADBATCH;
    *count = k;
    *total = sum;
    return SHMQ_OK;
}

/* A MessageBatch body b of n bytes, extra appended to each entry's properties (tag_all: as
 * batch_scan) */
static int put_encoded_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *b, uint32_t n,
                             const uint8_t *extra, uint32_t extra_len, shmq_result *out, int try_lock,
                             const int64_t *tag_all) {
    shmq_ctl *c = w->ctl;
    if (slot >= c->header.queue_capacity || LOAD_ACQ(&c->queues[slot].state) != 1) return SHMQ_EINVAL;
    if (is_prepared_or_rollback(m->sysflag) || extra_len > SHMQ_PROPS_MAX) return SHMQ_EINVAL;
    uint32_t count;
    uint64_t total;
    int rc = batch_scan(w, &c->queues[slot], m, b, n, extra_len, &count, &total, tag_all);
    if (rc) return rc;
    batch_src src = {.b = b, .extra = extra, .extra_len = extra_len};
    return put_batch(w, slot, m, &src, count, total, out, try_lock);
}

int shmq_put_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *b, uint32_t n,
                   const uint8_t *extra, uint32_t extra_len, shmq_result *out) {
    return put_encoded_batch(w, slot, m, b, n, extra, extra_len, out, 0, NULL);
}

int shmq_put_batch_try(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *b, uint32_t n,
                       const uint8_t *extra, uint32_t extra_len, shmq_result *out, int try_lock) {
    return put_encoded_batch(w, slot, m, b, n, extra, extra_len, out, try_lock, NULL);
}

/* The commit-log offsets of the count records an appended MessageBatch body b made (the body
 * shmq_put_batch took with extra_len bytes of extra, to a queue whose topic is topic_len bytes),
 * the first at first: the records are contiguous (put_batch places the whole batch in one file),
 * each the size batch_scan summed. A batch's answer lists them (its msgIds; the Python path reads
 * the same offsets back from the ConsumeQueue, ConsumeQueue.phys_hex). b was scanned by the
 * append, so every length holds; a body of fewer entries is SHMQ_EBADBATCH. */
int shmq_batch_phys(const uint8_t *b, uint32_t n, uint32_t topic_len, uint32_t extra_len, int64_t first,
                    uint32_t count, int64_t *phys) {
    uint32_t i = 0;
    for (uint32_t k = 0; k < count; k++) {
        if (i > n || n - i < BATCH_ENTRY_FIXED) return SHMQ_EBADBATCH;
        const uint8_t *e = b + i;
        uint32_t blen = rd32(e + 16);
        if ((uint64_t)blen + BATCH_ENTRY_FIXED > n - i) return SHMQ_EBADBATCH;
        int16_t plen = (int16_t)rd16(e + 20 + blen);
        if (plen < 0 || (uint64_t)blen + BATCH_ENTRY_FIXED + (uint64_t)plen > n - i) return SHMQ_EBADBATCH;
        phys[k] = first;
        first += (int64_t)(SHMQ_RECORD_FIXED + blen + topic_len + merged_len(e + 22 + blen, plen, extra_len));
        i += BATCH_ENTRY_FIXED + blen + (uint32_t)plen;
    }
    return SHMQ_OK;
}

/* ================================================================== local batch == */
/* The MessageBatch body (RocketMQ MessageDecoder.encodeMessages, entries as above batch_scan)
 * of n plain messages, built in scratch: bodies concatenated (body_lens[k] each), or (body_ptrs
 * not NULL) at body_ptrs[k]; heads either concatenated with head_lens, or (head_lens NULL) one
 * head of head_len shared by all; flags NULL for all 0. Each entry's properties are its head and
 * a UNIQ_KEY drawn here (written to ids_out, 32 chars each). Returns the encoded length, or a
 * negative SHMQ_* status. The one encoder of a producer's batch, appended locally (local_batch)
 * or sent over TCP as SEND_BATCH_MESSAGE's body (shmq_encode_batch). */
static int64_t encode_batch(const uint8_t *bodies, const uint8_t *const *body_ptrs, const uint32_t *blens,
                            const uint8_t *heads, const uint32_t *hlens, uint32_t hlen0, const int32_t *flags,
                            uint32_t n, shmq_uniq *u, uint8_t *scratch, uint64_t cap, char *ids_out) {
    if (n == 0) return SHMQ_EBADBATCH;
    uint64_t need = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t hl = hlens ? hlens[k] : hlen0;
        if ((uint64_t)hl + UNIQ_PAIR_LEN > SHMQ_PROPS_MAX || blens[k] > INT32_MAX) return SHMQ_EINVAL;
        need += BATCH_ENTRY_FIXED + (uint64_t)blens[k] + hl + UNIQ_PAIR_LEN;
    }
    if (need > cap || need > UINT32_MAX) return SHMQ_ETOOBIG;
    int rc = shmq_uniq_ids(u, n, ids_out);
    if (rc) return rc;
    uint8_t *p = scratch;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t hl = hlens ? hlens[k] : hlen0;
        uint32_t plen = hl + UNIQ_PAIR_LEN;
        const uint8_t *body = body_ptrs ? body_ptrs[k] : bodies;
        be32(p, BATCH_ENTRY_FIXED + blens[k] + plen);
        be32(p + 4, 0);
        be32(p + 8, 0);
        be32(p + 12, flags ? (uint32_t)flags[k] : 0);
        be32(p + 16, blens[k]);
        memcpy(p + 20, body, blens[k]);
        if (!body_ptrs) bodies += blens[k];
        p += 20 + blens[k];
        be16(p, (uint16_t)plen);
        p += 2;
        memcpy(p, heads, hl); p += hl;
        if (hlens) heads += hl;
        p = put_uniq_head(p);
        memcpy(p, ids_out + 32 * (uint64_t)k, 32); p += 32;
    }
    return (int64_t)need;
}

/* A batch of n plain messages (encode_batch's arguments), appended as shmq_put_batch with extra. */
static int local_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *bodies,
                       const uint8_t *const *body_ptrs, const uint32_t *blens, const uint8_t *heads,
                       const uint32_t *hlens, uint32_t hlen0, const int32_t *flags, uint32_t n, shmq_uniq *u,
                       const uint8_t *extra, uint32_t elen, uint8_t *scratch, uint64_t cap, shmq_result *out,
                       char *ids_out, int try_lock) {
    int64_t need = encode_batch(bodies, body_ptrs, blens, heads, hlens, hlen0, flags, n, u, scratch, cap, ids_out);
    if (need < 0) return (int)need;
    /* one shared head: its TAGS hash is every entry's (the UNIQ_KEY pair after it holds none) */
    int64_t tag = hlens ? 0 : shmq_tag_code_of_props(heads, hlen0);
    return put_encoded_batch(w, slot, m, scratch, (uint32_t)need, extra, elen, out, try_lock, hlens ? NULL : &tag);
}

int shmq_put_local_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m,
                         const uint8_t *bodies, const uint32_t *blens,
                         const uint8_t *heads, const uint32_t *hlens, uint32_t hlen0,
                         const int32_t *flags, uint32_t n, shmq_uniq *u,
                         const uint8_t *extra, uint32_t elen,
                         uint8_t *scratch, uint64_t cap, shmq_result *out, char *ids_out) {
    return local_batch(w, slot, m, bodies, NULL, blens, heads, hlens, hlen0, flags, n, u, extra, elen, scratch, cap,
                       out, ids_out, 0);
}

/* The scan of a direct batch (batch_src without b): the checks encode_batch and batch_scan make
 * of the same messages, in their order (so the same status: the encoded batch at most cap bytes,
 * the ids drawn, then the append's limits), each entry's CRC and tag into the writer's scratch,
 * the total into *total. The properties of every entry are merged bytes long. */
static int direct_scan(shmq_writer *w, uint32_t slot, const shmq_meta *m, const batch_src *s, uint32_t n,
                       shmq_uniq *u, char *ids_out, uint64_t cap, uint32_t merged, uint64_t *total) {
    if (n == 0) return SHMQ_EBADBATCH;
    uint64_t need = 0;
    for (uint32_t k = 0; k < n; k++) {
        if ((uint64_t)s->hlen + UNIQ_PAIR_LEN > SHMQ_PROPS_MAX || s->blens[k] > INT32_MAX) return SHMQ_EINVAL;
        need += BATCH_ENTRY_FIXED + (uint64_t)s->blens[k] + s->hlen + UNIQ_PAIR_LEN;
    }
    if (need > cap || need > UINT32_MAX) return SHMQ_ETOOBIG;
    int rc = shmq_uniq_ids(u, n, ids_out);
    if (rc) return rc;
    shmq_ctl *c = w->ctl;
    if (slot >= c->header.queue_capacity || LOAD_ACQ(&c->queues[slot].state) != 1) return SHMQ_EINVAL;
    if (is_prepared_or_rollback(m->sysflag) || s->extra_len > SHMQ_PROPS_MAX || merged > SHMQ_PROPS_MAX)
        return SHMQ_EINVAL;
    /* one shared head: its TAGS hash is every entry's (the UNIQ_KEY pair after it holds none) */
    int64_t tag = m->tag_mode != SHMQ_TAG_FROM_PROPS ? m->tag_code : shmq_tag_code_of_props(s->head, s->hlen);
    uint64_t sum = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (s->blens[k] > c->header.max_message_size) return SHMQ_ETOOBIG;
        if (k >= w->scratch_cap) return SHMQ_EBADBATCH;
        w->scratch_crc[k] = shmq_crc32(0, s->bodies[k], s->blens[k]) & 0x7FFFFFFFu;
        w->scratch_tag[k] = tag;
        sum += SHMQ_RECORD_FIXED + (uint64_t)s->blens[k] + c->queues[slot].topic_len + merged;
    }
    *total = sum;
    return SHMQ_OK;
}

/* The uniform local batch of a route (one head, flags 0), appended straight from the bodies: the
 * records (and statuses) encode_batch and put_encoded_batch would make of it, without encoding it
 * first. The batch-level properties are the route's tail without its leading \x02, after a \x02
 * (the entries' properties end with their id). scratch is not needed; cap still bounds the batch
 * as encoded (local_send.MAX_BATCH_BYTES). */
int shmq_send_batch(const shmq_route *r, const uint8_t *const *body_ptrs, const uint32_t *blens, uint32_t n,
                    const uint8_t *head, uint32_t hlen, uint8_t *scratch, uint64_t cap, char *ids_out, int try_lock) {
    if (r->tail_len < 1) return SHMQ_EINVAL;
    uint32_t elen = r->tail_len - 1;
    uint8_t pair[SHMQ_PROPS_MAX];
    uint32_t pair_len = UNIQ_PAIR_LEN + (elen ? 1 + elen : 0);
    if (pair_len > sizeof pair) return SHMQ_EINVAL;
    put_uniq_head(pair);
    if (elen) { pair[UNIQ_PAIR_LEN] = SHMQ_PROPERTY_SEP; memcpy(pair + UNIQ_PAIR_LEN + 1, r->tail + 1, elen); }
    batch_src s = {.extra = r->tail + 1, .extra_len = elen, .bodies = body_ptrs, .blens = blens, .head = head,
                   .hlen = hlen, .pair = pair, .pair_len = pair_len, .ids = ids_out};
    uint64_t total;
    int rc = direct_scan(r->w, r->slot, r->meta, &s, n, r->u, ids_out, cap, hlen + pair_len, &total);
    return rc ? rc : put_batch(r->w, r->slot, r->meta, &s, n, total, r->out, try_lock);
}

/* The same uniform batch only encoded (no append): SEND_BATCH_MESSAGE's body over TCP. */
int shmq_encode_batch(const uint8_t *const *body_ptrs, const uint32_t *blens, uint32_t n, const uint8_t *head,
                      uint32_t hlen, shmq_uniq *u, uint8_t *scratch, uint64_t cap, char *ids_out, uint64_t *len_out) {
    int64_t need = encode_batch(NULL, body_ptrs, blens, head, NULL, hlen, NULL, n, u, scratch, cap, ids_out);
    if (need < 0) return (int)need;
    *len_out = (uint64_t)need;
    return SHMQ_OK;
}
