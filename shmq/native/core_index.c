/*
 * shmq/native/core_index.c -- reading committed records: the IndexFile put (RocketMQ's layout;
 * entry, slot, then header published in that order, so a reader in any process sees whole
 * entries), the dispatch of a run of records into it (keys topic#UNIQ_KEY and topic#<each word
 * of KEYS>), and the check of one record (magic, lengths, PHYSICALOFFSET, CRC) that recovery and
 * the dead writer's repair use. Reads the log only below the commit position it is given;
 * writes only the IndexFile it is handed (one writer: the owner's dispatch thread).
 */

#define _GNU_SOURCE
#include "core_private.h"

/* ================================================================== index == */
/* RocketMQ's IndexFile (layout table in shmq/store/index_file.py): a 40-byte header, hashSlotNum
 * 4-byte slots, indexNum 20-byte entries, all big-endian. One writer (the owner's dispatch
 * thread); readers in any process follow the publication order of index_put: entry, slot,
 * begin (first entry), hashSlotCount, indexCount (release), end. */
#define IDX_HEADER 40
#define IDX_ENTRY 20

static int index_put(uint8_t *idx, uint32_t slots, uint32_t num, uint32_t hash, int64_t phys, int64_t ts) {
    int32_t count = (int32_t)rd32(idx + 36);
    if (count <= 0) count = 1;                          /* never written: empty */
    if ((uint32_t)count >= num) return 0;
    uint32_t key_hash = (int32_t)hash == INT32_MIN ? 0 : (uint32_t)abs((int32_t)hash);
    uint8_t *slot = idx + IDX_HEADER + (uint64_t)(key_hash % slots) * 4;
    int32_t prev = (int32_t)rd32(slot);
    if (prev <= 0 || prev >= count) prev = 0;           /* empty, or left by a put that died */
    int first = count <= 1;
    int64_t begin_ts = first ? ts : (int64_t)rd64(idx);
    int64_t diff = 0;
    if (begin_ts > 0) {
        diff = (ts - begin_ts) / 1000;
        if (diff < 0) diff = 0;
        if (diff > INT32_MAX) diff = INT32_MAX;
    }
    uint8_t *e = idx + IDX_HEADER + (uint64_t)slots * 4 + (uint64_t)count * IDX_ENTRY;
    be32(e, key_hash);
    be64(e + 4, (uint64_t)phys);
    be32(e + 12, (uint32_t)diff);
    be32(e + 16, (uint32_t)prev);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    be32(slot, (uint32_t)count);
    if (first) { be64(idx, (uint64_t)ts); be64(idx + 16, (uint64_t)phys); }
    if (prev == 0) be32(idx + 32, rd32(idx + 32) + 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    be32(idx + 36, (uint32_t)count + 1);
    be64(idx + 24, (uint64_t)phys);
    be64(idx + 8, (uint64_t)ts);
    return 1;
}

/* The values of UNIQ_KEY and KEYS (each its last occurrence, as a Java map keeps it; NULL when
 * absent), in one pass over the properties text. */
static void index_keys(const uint8_t *p, uint32_t n, const uint8_t **uniq, uint32_t *ulen, const uint8_t **keys,
                       uint32_t *klen) {
    *uniq = *keys = NULL;
    uint32_t i = 0;
    while (i < n) {
        uint32_t k = i;
        const uint8_t *sep = memchr(p + i, SHMQ_NAME_VALUE_SEP, n - i);
        if (!sep) break;
        i = (uint32_t)(sep - p);
        uint32_t nlen = i - k, v = ++i;
        const uint8_t *end = memchr(p + i, SHMQ_PROPERTY_SEP, n - i);
        i = end ? (uint32_t)(end - p) : n;
        if (nlen == SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY) && memcmp(p + k, SHMQ_PROP_UNIQ_KEY, nlen) == 0) {
            *uniq = p + v;
            *ulen = i - v;
        } else if (nlen == SHMQ_PROP_LEN(SHMQ_PROP_KEYS) && memcmp(p + k, SHMQ_PROP_KEYS, nlen) == 0) {
            *keys = p + v;
            *klen = i - v;
        }
        i++;
    }
}

/* Index the committed records from log[*off] that start below end (and end by limit, the
 * commit position: anything crossing it is not a record) into one IndexFile (IndexService.buildIndex each):
 * keys topic#UNIQ_KEY and topic#<word> for each non-empty space-separated word of KEYS;
 * rollback records and records below the file's endPhyOffset are skipped. *off advances
 * past every record done. *skip is the number of keys of the record at *off already put
 * (after a roll; 0 otherwise). Returns SHMQ_OK (reached end), SHMQ_IDX_FULL (the file is
 * full: roll, call again), SHMQ_IDX_BLANK (*off is at the file's BLANK filler) or
 * SHMQ_EINVAL (no record at *off). */
int shmq_index_records(uint8_t *idx, uint32_t slots, uint32_t num, const uint8_t *log, int64_t base_phys,
                       uint64_t *off, uint64_t end, uint64_t limit, uint32_t *skip) {
    const uint8_t *topic = NULL;  /* the topic h0 is the hash of (topic#), in the log */
    uint32_t topic_len = 0, h0 = 0;
    while (*off < end) {
        const uint8_t *r = log + *off;
        if (limit - *off < 8) return SHMQ_EINVAL;
        uint32_t total = rd32(r), magic = rd32(r + 4);
        if (magic == SHMQ_BLANK_MAGIC) return SHMQ_IDX_BLANK;
        if (magic != SHMQ_MESSAGE_MAGIC || total < SHMQ_RECORD_FIXED || total > limit - *off) return SHMQ_EINVAL;
        int64_t phys = base_phys + (int64_t)*off;
        uint32_t sysflag = rd32(r + SHMQ_R_SYSFLAG);
        int64_t ts = (int64_t)rd64(r + SHMQ_R_STORETS);
        uint32_t blen = rd32(r + SHMQ_R_BODYLEN);
        if ((uint64_t)blen + SHMQ_RECORD_FIXED > total) return SHMQ_EINVAL;
        const uint8_t *t = r + SHMQ_R_BODYLEN + 4 + blen;
        uint32_t tlen = t[0];
        uint32_t plen = rd16(t + 1 + tlen);
        if ((uint64_t)SHMQ_RECORD_FIXED + blen + tlen + plen != total) return SHMQ_EINVAL;
        const uint8_t *props = t + 3 + tlen;
        int64_t end_phy = (int64_t)rd64(idx + 24);
        if (phys >= end_phy && (sysflag & 0xC) != 0xC) {
            if (!topic || tlen != topic_len || memcmp(t + 1, topic, tlen) != 0) {  /* most runs are one topic */
                topic = t + 1;
                topic_len = tlen;
                h0 = java_hash_cont(java_hash_cont(0, topic, tlen), (const uint8_t *)"#", 1);
            }
            uint32_t ulen = 0, klen = 0, k = 0;
            const uint8_t *uniq, *keys;
            index_keys(props, plen, &uniq, &ulen, &keys, &klen);
            if (uniq) {
                if (k++ >= *skip && !index_put(idx, slots, num, java_hash_cont(h0, uniq, ulen), phys, ts)) {
                    *skip = k - 1;
                    return SHMQ_IDX_FULL;
                }
            }
            for (uint32_t i = 0; keys && i < klen;) {
                uint32_t w = i;
                while (i < klen && keys[i] != ' ') i++;
                if (i > w && k++ >= *skip
                        && !index_put(idx, slots, num, java_hash_cont(h0, keys + w, i - w), phys, ts)) {
                    *skip = k - 1;
                    return SHMQ_IDX_FULL;
                }
                i++;
            }
        }
        *off += total;
        *skip = 0;
    }
    return SHMQ_OK;
}

/* ================================================================= records == */
/* >0: the record's size; 0: a BLANK filler; <0: not a valid record here. phys < 0 skips the
 * PHYSICALOFFSET check. */
int64_t shmq_check_record(const uint8_t *p, uint64_t avail, int64_t phys, int check_crc) {
    if (avail < 8) return -1;
    uint32_t total = rd32(p), magic = rd32(p + 4);
    if (magic == SHMQ_BLANK_MAGIC) return 0;
    if (magic != SHMQ_MESSAGE_MAGIC) return -2;
    if (total < SHMQ_RECORD_FIXED || total > avail) return -3;
    if (phys >= 0 && (int64_t)rd64(p + SHMQ_R_PHYSOFFSET) != phys) return -4;
    uint32_t blen = rd32(p + SHMQ_R_BODYLEN);
    if ((uint64_t)blen + SHMQ_RECORD_FIXED > total) return -5;
    uint32_t tlen = p[SHMQ_R_BODYLEN + 4 + blen];
    if ((uint64_t)blen + tlen + SHMQ_RECORD_FIXED > total) return -5;
    uint32_t plen = rd16(p + SHMQ_R_BODYLEN + 5 + blen + tlen);
    if ((uint64_t)SHMQ_RECORD_FIXED + blen + tlen + plen != total) return -5;
    if (check_crc && (shmq_crc32(0, p + SHMQ_R_BODYLEN + 4, blen) & 0x7FFFFFFFu) != rd32(p + SHMQ_R_BODYCRC))
        return -6;
    return total;
}
