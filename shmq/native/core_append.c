/*
 * shmq/native/core_append.c -- every append under the lock: place (fence, role, file roll),
 * write_record (the one writer of a record's bytes), put_one (one record: lock, intent, record,
 * ConsumeQueue entry, publish, wake) and shmq_put, put_batch (a scanned batch: one lock, one
 * intent, one ConsumeQueue reservation, one publish, so a reader sees all of its records or
 * none; a direct batch's records after the first copied from it, copy_direct), and the local
 * send (shmq_put_local, shmq_send: UNIQ_KEY and properties made here, one C call a send).
 * Holds: between lock and unlock no allocation, no logging, no call into Python, no unmapping;
 * the intent is active before the first byte is written and cleared after the publish;
 * next_offset is published before commit_pos (release stores); sleepers are woken after the
 * unlock. The hot helpers it inlines are core_private.h's static inline ones.
 */

#define _GNU_SOURCE
#include "core_private.h"

/* ================================================================== append == */
/* Writes one record at dst (which is the position phys). props2 (may be empty) is appended
 * to props, with a \2 separator inserted when props does not end with one. */
/* always inlined: put_one's call passes no second properties part, and the branches on it and
 * the ten-argument call went with it (~60 of a local send's instructions) */
static inline __attribute__((always_inline)) void write_record(shmq_writer *w, uint8_t *dst, int64_t phys, uint32_t size,
                         const shmq_queue_slot *qs, const shmq_meta *m, uint32_t crc,
                         int32_t flag, int64_t qoff, int64_t store_ts,
                         const uint8_t *body, uint32_t blen,
                         const uint8_t *props, uint32_t plen,
                         const uint8_t *props2, uint32_t plen2, int sep) {
    const shmq_owner *o = &w->ctl->owner;
    be32(dst + SHMQ_R_TOTALSIZE, size);
    be32(dst + SHMQ_R_MAGIC, SHMQ_MESSAGE_MAGIC);
    be32(dst + SHMQ_R_BODYCRC, crc);
    be32(dst + SHMQ_R_QUEUEID, (uint32_t)qs->queue_id);
    be32(dst + SHMQ_R_FLAG, (uint32_t)flag);
    be64(dst + SHMQ_R_QUEUEOFFSET, (uint64_t)qoff);
    be64(dst + SHMQ_R_PHYSOFFSET, (uint64_t)phys);
    be32(dst + SHMQ_R_SYSFLAG, (uint32_t)m->sysflag);
    /* born_ts 0: "now" (local producers leave it to the append, saving a clock read) */
    be64(dst + SHMQ_R_BORNTS, (uint64_t)(m->born_ts ? m->born_ts : store_ts));
    be32(dst + SHMQ_R_BORNHOST, m->born_ip);
    be32(dst + SHMQ_R_BORNHOST + 4, (uint32_t)m->born_port);
    fault(w, SHMQ_FP_MID_RECORD);
    be64(dst + SHMQ_R_STORETS, (uint64_t)store_ts);
    be32(dst + SHMQ_R_STOREHOST, o->store_ip);
    be32(dst + SHMQ_R_STOREHOST + 4, (uint32_t)o->store_port);
    be32(dst + SHMQ_R_RECONSUME, (uint32_t)m->reconsume_times);
    be64(dst + SHMQ_R_PREPARED, (uint64_t)m->prepared_offset);
    be32(dst + SHMQ_R_BODYLEN, blen);
    uint8_t *p = dst + SHMQ_R_BODYLEN + 4;
    memcpy(p, body, blen);
    p += blen;
    *p++ = qs->topic_len;
    memcpy(p, qs->topic, qs->topic_len);
    p += qs->topic_len;
    be16(p, (uint16_t)(plen + (uint32_t)sep + plen2));
    p += 2;
    memcpy(p, props, plen);
    p += plen;
    if (sep) *p++ = 2;
    if (plen2) memcpy(p, props2, plen2);
}

/* Under the lock: the fence and the place of an append of `total` bytes. On success
 * *cur (the file holding pos, for a filler) and *dst (the file holding the records) are set. */
static int place(shmq_writer *w, int64_t total, int64_t *pos_out, int64_t *rec_out,
                 uint8_t **cur, uint8_t **dst) {
    shmq_ctl *c = w->ctl;
    int rc = store_writable(w);
    if (rc) return rc;
    int64_t fsize = (int64_t)c->header.file_size;
    int64_t pos = c->pos.commit_pos, idx = pos / fsize, off = pos % fsize, rec = pos;
    if (off + total + SHMQ_BLANK_MIN > fsize) rec = (idx + 1) * fsize;
    *cur = rec != pos ? log_map(w, idx) : NULL;
    if (rec != pos && !*cur) { w->need_index = idx; return SHMQ_ENEEDLOG; }
    *dst = log_map(w, rec / fsize);
    if (!*dst) { w->need_index = rec / fsize; return SHMQ_ENEEDLOG; }
    *dst += rec % fsize;
    *pos_out = pos;
    *rec_out = rec;
    return SHMQ_OK;
}

/* tag_of_props: the TAGS hash when it is already known (put_local: from the head, the only part
 * of its properties that can hold TAGS); NULL: from props, as m->tag_mode says. now: the clock
 * the caller read just before for the record's UNIQ_KEY, the store time's reading when the lock
 * is only tried (no wait in between); 0: read under the lock. */
static inline __attribute__((always_inline)) int put_one(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *body, uint32_t blen,
                   const uint8_t *props, uint32_t plen, shmq_result *out, int try_lock, const int64_t *tag_of_props,
                   int64_t now) {
    shmq_ctl *c = w->ctl;
    if (slot >= c->header.queue_capacity || LOAD_ACQ(&c->queues[slot].state) != 1) return SHMQ_EINVAL;
    if (plen > SHMQ_PROPS_MAX) return SHMQ_EINVAL;
    shmq_queue_slot *qs = &c->queues[slot];
    uint64_t size = SHMQ_RECORD_FIXED + (uint64_t)blen + qs->topic_len + plen;
    if (blen > c->header.max_message_size || size + SHMQ_BLANK_MIN > c->header.file_size)
        return SHMQ_ETOOBIG;
    uint32_t crc = shmq_crc32(0, body, blen) & 0x7FFFFFFFu;
    int has_cq = !is_prepared_or_rollback(m->sysflag);
    int64_t tag = m->tag_mode != SHMQ_TAG_FROM_PROPS ? m->tag_code
                  : tag_of_props ? *tag_of_props : shmq_tag_code_of_props(props, plen);

    int rc = lock_take(w, try_lock);
    if (rc) return rc;
    fault(w, SHMQ_FP_AFTER_LOCK);
    int64_t pos, rec;
    uint8_t *cur, *dst, *cqe = NULL;
    rc = place(w, (int64_t)size, &pos, &rec, &cur, &dst);
    if (rc) goto unlock;
    int64_t qoff = 0;
    if (has_cq) {
        uint32_t per = c->header.cq_entries_per_file;
        qoff = qs->next_offset;
        cqe = cq_need(w, slot, qs, qoff / per, &rc);
        if (!cqe) goto unlock;
        rc = cq_reserve(w, slot, qs, qoff, qoff);
        if (rc) goto unlock;
        cqe += (qoff % per) * SHMQ_CQ_ENTRY_SIZE;
    }
    int64_t ts = next_store_ts(c, now);
    if (m->tag_mode == SHMQ_TAG_STORE_PLUS) tag = ts + m->tag_code;
    begin_intent(c, pos, rec, rec + (int64_t)size, qoff, slot, 1, has_cq);
    fault(w, SHMQ_FP_AFTER_INTENT);
    if (cur) write_filler(c, cur, pos);
    write_record(w, dst, rec, (uint32_t)size, qs, m, crc, m->flag, qoff, ts, body, blen, props, plen,
                 NULL, 0, 0);
    fault(w, SHMQ_FP_AFTER_RECORD);
    if (cqe) write_cq(cqe, rec, (uint32_t)size, tag);
    fault(w, SHMQ_FP_AFTER_CQ);
    if (has_cq) STORE_REL(&qs->next_offset, qoff + 1);
    fault(w, SHMQ_FP_MID_PUBLISH);
    STORE_REL(&c->pos.commit_pos, rec + (int64_t)size);
    c->pos.appends++;
    fault(w, SHMQ_FP_AFTER_PUBLISH);
    STORE_REL(&c->intent.active, 0);
    out->phys_offset = rec;
    out->queue_offset = qoff;
    out->end = rec + (int64_t)size;
    out->store_ts = ts;
    out->size = (int32_t)size;
    out->count = 1;
unlock:
    shmq_unlock(w);
    if (rc == SHMQ_OK) notify_data(c, qs);
    return rc;
}

int shmq_put(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *body, uint32_t blen,
             const uint8_t *props, uint32_t plen, shmq_result *out) {
    return put_one(w, slot, m, body, blen, props, plen, out, 0, NULL, 0);
}

int shmq_put_try(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *body, uint32_t blen,
                 const uint8_t *props, uint32_t plen, shmq_result *out, int try_lock) {
    return put_one(w, slot, m, body, blen, props, plen, out, try_lock, NULL, 0);
}

/* ================================================================= batch append == */
/* entry k; *at is the MessageBatch cursor (advanced past the entry) */
static inline void batch_next(const batch_src *s, uint32_t k, uint32_t *at, batch_entry *e) {
    if (s->b) {
        const uint8_t *p = s->b + *at;
        e->flag = (int32_t)rd32(p + 12);
        e->blen = rd32(p + 16);
        e->body = p + 20;
        e->plen = rd16(p + 20 + e->blen);
        e->props = p + 22 + e->blen;
        e->props2 = s->extra;
        e->plen2 = s->extra_len;
        e->sep = s->extra_len && e->plen && e->props[e->plen - 1] != SHMQ_PROPERTY_SEP;
        *at += BATCH_ENTRY_FIXED + e->blen + e->plen;
        return;
    }
    memcpy(s->pair + UNIQ_HEAD_LEN, s->ids + 32 * (uint64_t)k, 32);
    e->flag = 0;
    e->blen = s->blens[k];
    e->body = s->bodies[k];
    e->props = s->head;
    e->plen = s->hlen;
    e->props2 = s->pair;
    e->plen2 = s->pair_len;
    e->sep = 0;
}

/* Records 1..count-1 of a direct batch (batch_src without b), after record 0 at rec0 and its
 * ConsumeQueue entry are written: a direct batch's records differ only in their size, body CRC,
 * queue offset, physical offset, body (and its length) and the 32 hex digits of their UNIQ_KEY
 * (flag 0, one head, one tail, one store time: batch_next / write_record), so each is record 0's
 * fixed part and its tail (topic and properties) copied, those fields written over. The same
 * bytes write_record makes (tests/unit/test_write_paths.py compares them with the encoded batch's);
 * about a third of the instructions per record. Under the lock; returns the end position. */
static int64_t copy_direct(shmq_writer *w, uint32_t slot, const shmq_meta *m, const batch_src *s, uint32_t count,
                           int64_t qoff, int64_t ts, const uint8_t *rec0, uint8_t *dst, int64_t phys) {
    const shmq_queue_slot *qs = &w->ctl->queues[slot];
    uint32_t per = w->ctl->header.cq_entries_per_file;
    const uint8_t *tail0 = rec0 + SHMQ_R_BODYLEN + 4 + s->blens[0];
    uint32_t tail_len = 1u + qs->topic_len + 2u + s->hlen + s->pair_len;
    uint32_t id_at = 1u + qs->topic_len + 2u + s->hlen + UNIQ_HEAD_LEN;  /* in the tail */
    int64_t q = qoff + 1;
    uint8_t *cqf = cq_map(w, slot, q / per);
    for (uint32_t k = 1; k < count; k++, q++) {
        uint32_t blen = s->blens[k], size = SHMQ_R_BODYLEN + 4 + blen + tail_len;
        memcpy(dst, rec0, SHMQ_R_BODYLEN);
        be32(dst + SHMQ_R_TOTALSIZE, size);
        be32(dst + SHMQ_R_BODYCRC, w->scratch_crc[k]);
        be64(dst + SHMQ_R_QUEUEOFFSET, (uint64_t)q);
        be64(dst + SHMQ_R_PHYSOFFSET, (uint64_t)phys);
        fault(w, SHMQ_FP_MID_RECORD);
        be32(dst + SHMQ_R_BODYLEN, blen);
        uint8_t *p = dst + SHMQ_R_BODYLEN + 4;
        memcpy(p, s->bodies[k], blen);
        memcpy(p + blen, tail0, tail_len);
        memcpy(p + blen + id_at, s->ids + 32 * (uint64_t)k, 32);
        if (q % per == 0) cqf = cq_map(w, slot, q / per);  /* the batch crossed into the next file */
        int64_t tag = m->tag_mode == SHMQ_TAG_STORE_PLUS ? ts + m->tag_code : w->scratch_tag[k];
        write_cq(cqf + (q % per) * SHMQ_CQ_ENTRY_SIZE, phys, size, tag);
        dst += size;
        phys += size;
    }
    return phys;
}

/* The append of a scanned batch (count entries of src, total bytes, their CRCs and tags in the
 * writer's scratch), under the lock: one place, one intent, one CQ reservation, one publish. */
int put_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m, const batch_src *src, uint32_t count,
              uint64_t total, shmq_result *out, int try_lock) {
    shmq_ctl *c = w->ctl;
    shmq_queue_slot *qs = &c->queues[slot];
    if (total + SHMQ_BLANK_MIN > c->header.file_size) return SHMQ_ETOOBIG;

    int rc = lock_take(w, try_lock);
    if (rc) return rc;
    fault(w, SHMQ_FP_AFTER_LOCK);
    int64_t pos, rec;
    uint8_t *cur, *dst;
    rc = place(w, (int64_t)total, &pos, &rec, &cur, &dst);
    if (rc) goto unlock;
    uint32_t per = c->header.cq_entries_per_file;
    int64_t qoff = qs->next_offset, last = qoff + count - 1;
    /* a batch may cross one CQ file boundary: both files must be mapped (ring of two) */
    if (!cq_need(w, slot, qs, qoff / per, &rc) || !cq_need(w, slot, qs, last / per, &rc)) goto unlock;
    rc = cq_reserve(w, slot, qs, qoff, last);
    if (rc) goto unlock;
    int64_t ts = next_store_ts(c, 0);
    begin_intent(c, pos, rec, rec + (int64_t)total, qoff, slot, count, 1);
    fault(w, SHMQ_FP_AFTER_INTENT);
    if (cur) write_filler(c, cur, pos);
    int64_t phys = rec;
    uint32_t at = 0;
    uint8_t *rec0 = dst;
    /* a direct batch's records after the first are copies of it but for six fields (below) */
    uint32_t n_written = src->b || count < 2 ? count : 1;
    for (uint32_t k = 0; k < n_written; k++) {
        batch_entry e;
        batch_next(src, k, &at, &e);
        uint32_t size = SHMQ_RECORD_FIXED + e.blen + qs->topic_len + e.plen + (uint32_t)e.sep + e.plen2;
        int64_t q = qoff + k;
        write_record(w, dst, phys, size, qs, m, w->scratch_crc[k], e.flag, q, ts, e.body, e.blen, e.props, e.plen,
                     e.props2, e.plen2, e.sep);
        uint8_t *cqe = cq_map(w, slot, q / per) + (q % per) * SHMQ_CQ_ENTRY_SIZE;
        int64_t tag = m->tag_mode == SHMQ_TAG_STORE_PLUS ? ts + m->tag_code : w->scratch_tag[k];
        write_cq(cqe, phys, size, tag);
        if (k == 0) { out->size = (int32_t)size; }
        dst += size;
        phys += size;
    }
    if (n_written < count) phys = copy_direct(w, slot, m, src, count, qoff, ts, rec0, dst, phys);
    fault(w, SHMQ_FP_AFTER_CQ);
    STORE_REL(&qs->next_offset, qoff + count);
    fault(w, SHMQ_FP_MID_PUBLISH);
    STORE_REL(&c->pos.commit_pos, phys);
    c->pos.appends += count;
    fault(w, SHMQ_FP_AFTER_PUBLISH);
    STORE_REL(&c->intent.active, 0);
    out->phys_offset = rec;
    out->queue_offset = qoff;
    out->end = phys;
    out->store_ts = ts;
    out->count = (int32_t)count;
unlock:
    shmq_unlock(w);
    if (rc == SHMQ_OK) notify_data(c, qs);
    return rc;
}

/* ============================================================ local send == */
/* UNIQ_KEY as the Java client forms it (MessageClientIDSetter): 32 upper-case hex chars,
 *   prefix (20: IPv4, pid, loader hash) | ms since month start (8) | counter (4)
 * The counter is shared by every thread of the process (one shmq_uniq per process), so two
 * ids of one process never repeat within 65536 draws of one millisecond. */
static const char HEXU[] = "0123456789ABCDEF";
static char HEX2[256][2]; /* each byte's two upper-case hex digits: two digits per step */

__attribute__((constructor)) static void hex2_init(void) {
    for (int b = 0; b < 256; b++) { HEX2[b][0] = HEXU[b >> 4]; HEX2[b][1] = HEXU[b & 15]; }
}

/* v as `digits` (even) hex digits, most significant first */
static inline void hexn(char *out, uint32_t v, int digits) {
    for (int i = digits - 2; i >= 0; i -= 2) { memcpy(out + i, HEX2[v & 0xFF], 2); v >>= 8; }
}

/* n ids at out for the time now (ms since the epoch) */
static int uniq_ids_at(shmq_uniq *u, uint32_t n, char *out, int64_t now) {
    if (now < u->month_start_ms || now >= u->next_month_ms) return SHMQ_EMONTH;
    uint32_t ms = (uint32_t)(now - u->month_start_ms);  /* Java's (int) cast: the low 32 bits */
    uint32_t c0 = __atomic_fetch_add(&u->counter, n, __ATOMIC_RELAXED);
    char head[28]; /* prefix and time: the same for every id of one call */
    memcpy(head, u->prefix, 20);
    hexn(head + 20, ms, 8);
    for (uint32_t k = 0; k < n; k++, out += 32) {
        memcpy(out, head, 28);
        hexn(out + 28, (c0 + k) & 0xFFFF, 4);
    }
    return SHMQ_OK;
}

int shmq_uniq_ids(shmq_uniq *u, uint32_t n, char *out) { return uniq_ids_at(u, n, out, shmq_now_ms()); }

/* properties = head | UNIQ_KEY \x01 id | tail. head is empty or ends in \x02 (the caller's
 * user properties, TAGS and KEYS); tail is \x02 CLUSTER \x01 name. One C call for the whole
 * send: the id, the properties text and the append. */
static int put_local(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *body, uint32_t blen,
                     const uint8_t *head, uint32_t hlen, shmq_uniq *u, const uint8_t *tail, uint32_t tlen,
                     shmq_result *out, char *id_out, int try_lock) {
    uint8_t props[SHMQ_PROPS_MAX];
    if ((uint64_t)hlen + UNIQ_PAIR_LEN + tlen > SHMQ_PROPS_MAX) return SHMQ_EINVAL;
    int64_t now = shmq_now_ms();  /* one clock read a send: the id's time, and the store time's */
    int rc = uniq_ids_at(u, 1, id_out, now);
    if (rc) return rc;
    uint8_t *p = props;
    memcpy(p, head, hlen); p += hlen;
    p = put_uniq_head(p);
    memcpy(p, id_out, 32); p += 32;
    memcpy(p, tail, tlen); p += tlen;
    /* head comes first and the UNIQ_KEY / CLUSTER pairs after it are no TAGS: the first TAGS
     * pair of the whole text, the one the hash is of, is head's (saves scanning ~70 bytes) */
    int64_t tag = shmq_tag_code_of_props(head, hlen);
    return put_one(w, slot, m, body, blen, props, (uint32_t)(p - props), out, try_lock, &tag, try_lock ? now : 0);
}

int shmq_put_local(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *body, uint32_t blen,
                   const uint8_t *head, uint32_t hlen, shmq_uniq *u, const uint8_t *tail, uint32_t tlen,
                   shmq_result *out, char *id_out) {
    return put_local(w, slot, m, body, blen, head, hlen, u, tail, tlen, out, id_out, 0);
}

int shmq_send(const shmq_route *r, const uint8_t *body, uint32_t blen, const uint8_t *head, uint32_t hlen,
              int try_lock) {
    return put_local(r->w, r->slot, r->meta, body, blen, head, hlen, r->u, r->tail, r->tail_len, r->out,
                     r->id_out, try_lock);
}
