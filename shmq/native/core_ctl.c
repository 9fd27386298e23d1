/*
 * shmq/native/core_ctl.c -- the control block and a writer's hold on it: init and the layout
 * fingerprint, the append lock (spin, futex sleep, steal of a provably dead holder's word only),
 * the repair of a dead writer's append (completed when every record verifies, else erased:
 * either way the log reads as if the append was atomic), the queue and offset tables (open
 * addressing; slots made under the lock and published by a release store of their state), and
 * the writer's own ConsumeQueue mappings, pages reserved ahead of the append (ENOSPC, never a
 * SIGBUS mid-append). The repair runs holding the lock, with pread/pwrite and no mapping.
 */

#define _GNU_SOURCE
#include "core_private.h"

/* the shared layout as this build compiles it (layout.h; shmq_layout_fingerprint folds the same) */
_Static_assert(sizeof(shmq_ctl_header) == 64, "header is one cache line");
_Static_assert(sizeof(shmq_owner) == 64, "owner is one cache line");
_Static_assert(sizeof(shmq_lockword) == 64, "lock is one cache line");
_Static_assert(sizeof(shmq_intent) == 64, "intent is one cache line");
_Static_assert(sizeof(shmq_positions) == 192, "positions are three cache lines");
_Static_assert(sizeof(shmq_queue_slot) == 160, "queue slot size");
_Static_assert(sizeof(shmq_offset_slot) == 416, "offset slot size");
_Static_assert(offsetof(shmq_ctl, queues) == SHMQ_QUEUE_TABLE_OFFSET, "queue table offset");
_Static_assert(offsetof(shmq_positions, flushed_pos) == 64, "flusher line");

/* ============================================================ control block == */
uint32_t shmq_layout_fingerprint(void) {
    /* Sizes and offsets of everything shared, folded so that two builds that disagree on
     * any of them (other compiler flags, another version) refuse to share a segment. */
    uint32_t parts[] = {
        SHMQ_LAYOUT_VERSION, sizeof(shmq_ctl_header), sizeof(shmq_owner), sizeof(shmq_lockword),
        sizeof(shmq_intent), sizeof(shmq_positions), sizeof(shmq_queue_slot),
        sizeof(shmq_offset_slot), offsetof(shmq_ctl, queues), offsetof(shmq_ctl, pos),
        offsetof(shmq_positions, flushed_pos), offsetof(shmq_queue_slot, topic),
        offsetof(shmq_offset_slot, key), sizeof(void *),
    };
    return shmq_crc32(0, (const uint8_t *)parts, sizeof parts);
}

shmq_offset_slot *shmq_offset_table(shmq_ctl *ctl) {
    return (shmq_offset_slot *)((uint8_t *)ctl + SHMQ_QUEUE_TABLE_OFFSET +
                                (uint64_t)ctl->header.queue_capacity * sizeof(shmq_queue_slot));
}

int shmq_ctl_init(shmq_ctl *ctl, uint64_t size, uint32_t qcap, uint32_t ocap) {
    uint64_t need = SHMQ_QUEUE_TABLE_OFFSET + (uint64_t)qcap * sizeof(shmq_queue_slot) +
                    (uint64_t)ocap * sizeof(shmq_offset_slot);
    if (size < need || qcap == 0 || ocap == 0) return SHMQ_EINVAL;
    memset(ctl, 0, SHMQ_QUEUE_TABLE_OFFSET);
    ctl->header.magic = SHMQ_CTL_MAGIC;
    ctl->header.layout_version = SHMQ_LAYOUT_VERSION;
    ctl->header.fingerprint = shmq_layout_fingerprint();
    ctl->header.ctl_size = size;
    ctl->header.queue_capacity = qcap;
    ctl->header.offset_capacity = ocap;
    ctl->owner.state = SHMQ_STATE_INIT;
    return SHMQ_OK;
}

/* ================================================================== repair == */
/* A stealer holds the lock and finds intent.active: the previous holder died inside an
 * append. If every record it meant to write verifies (magic, lengths, PHYSICALOFFSET, CRC,
 * queue id and offset) the append is completed: missing ConsumeQueue entries are written
 * and both positions published. Otherwise it is erased: the bytes and CQ entries are
 * zeroed and nothing is published. Both leave the log as if the append was atomic. */
static int open_log(shmq_ctl *c, int64_t index) {
    char path[SHMQ_ROOT_MAX + 64];
    snprintf(path, sizeof path, "%s/commitlog/%020lld", c->root,
             (long long)(index * (int64_t)c->header.file_size));
    return open(path, O_RDWR | O_CLOEXEC);
}

static int open_cq(shmq_ctl *c, shmq_queue_slot *qs, int64_t file_index) {
    char path[SHMQ_ROOT_MAX + 256];
    snprintf(path, sizeof path, "%s/consumequeue/%.*s/%d/%020lld", c->root, (int)qs->topic_len,
             qs->topic, qs->queue_id,
             (long long)(file_index * (int64_t)c->header.cq_entries_per_file * SHMQ_CQ_ENTRY_SIZE));
    return open(path, O_RDWR | O_CLOEXEC);
}

static int pread_all(int fd, uint8_t *buf, size_t n, off_t off) {
    while (n) {
        ssize_t r = pread(fd, buf, n, off);
        if (r <= 0) return -1;
        buf += r; n -= (size_t)r; off += r;
    }
    return 0;
}

static int pwrite_all(int fd, const uint8_t *buf, size_t n, off_t off) {
    while (n) {
        ssize_t r = pwrite(fd, buf, n, off);
        if (r <= 0) return -1;
        buf += r; n -= (size_t)r; off += r;
    }
    return 0;
}

static int repair_verify(shmq_ctl *c, shmq_intent *in, shmq_queue_slot *qs, int write_cq) {
    int64_t fsize = (int64_t)c->header.file_size;
    int64_t len = in->phys_end - in->rec_start;
    if (len <= 0 || in->rec_start / fsize != (in->phys_end - 1) / fsize) return 0;
    if (in->rec_start != in->phys_start) { /* a filler must close the previous file */
        int fd = open_log(c, in->phys_start / fsize);
        uint8_t f[8];
        int ok = fd >= 0 && pread_all(fd, f, 8, in->phys_start % fsize) == 0 &&
                 rd32(f + 4) == SHMQ_BLANK_MAGIC && (int64_t)rd32(f) == fsize - in->phys_start % fsize;
        if (fd >= 0) close(fd);
        if (!ok) return 0;
    }
    uint8_t *buf = malloc((size_t)len);
    if (!buf) return 0;
    int fd = open_log(c, in->rec_start / fsize);
    int ok = fd >= 0 && pread_all(fd, buf, (size_t)len, in->rec_start % fsize) == 0;
    if (fd >= 0) close(fd);
    uint32_t per = c->header.cq_entries_per_file;
    int64_t p = 0;
    for (uint32_t i = 0; ok && i < in->count; i++) {
        int64_t phys = in->rec_start + p;
        int64_t sz = shmq_check_record(buf + p, (uint64_t)(len - p), phys, 1);
        if (sz <= 0) { ok = 0; break; }
        const uint8_t *r = buf + p;
        uint32_t blen = rd32(r + SHMQ_R_BODYLEN);
        const uint8_t *t = r + SHMQ_R_BODYLEN + 4 + blen;
        if ((int32_t)rd32(r + SHMQ_R_QUEUEID) != qs->queue_id || t[0] != qs->topic_len ||
            memcmp(t + 1, qs->topic, qs->topic_len) != 0) { ok = 0; break; }
        if (in->has_cq) {
            int64_t qoff = in->queue_offset + i;
            if ((int64_t)rd64(r + SHMQ_R_QUEUEOFFSET) != qoff) { ok = 0; break; }
            if (write_cq) {
                uint32_t tl = t[0];
                uint32_t plen = rd16(t + 1 + tl);
                int64_t tag = shmq_tag_code_of_props(t + 3 + tl, plen);
                uint8_t e[SHMQ_CQ_ENTRY_SIZE], old[SHMQ_CQ_ENTRY_SIZE];
                be64(e + SHMQ_CQ_PHYS, (uint64_t)phys); be32(e + SHMQ_CQ_SIZE, (uint32_t)sz); be64(e + SHMQ_CQ_TAG, (uint64_t)tag);
                int cfd = open_cq(c, qs, qoff / per);
                off_t at = (off_t)(qoff % per) * SHMQ_CQ_ENTRY_SIZE;
                /* keep a tag code the writer already put there (it may be a delay due time) */
                if (cfd < 0 || pread_all(cfd, old, sizeof old, at) != 0) { ok = 0; }
                else if (memcmp(old, e, 12) != 0 && pwrite_all(cfd, e, sizeof e, at) != 0) { ok = 0; }
                if (cfd >= 0) close(cfd);
            }
        }
        p += sz;
    }
    free(buf);
    return ok && p == len;
}

static void zero_range(shmq_ctl *c, int64_t from, int64_t to) {
    int64_t fsize = (int64_t)c->header.file_size;
    static const uint8_t zeros[4096];
    while (from < to) {
        int64_t idx = from / fsize, end = (idx + 1) * fsize;
        if (end > to) end = to;
        int fd = open_log(c, idx);
        if (fd >= 0) {
            for (int64_t p = from; p < end; p += (int64_t)sizeof zeros) {
                int64_t n = end - p < (int64_t)sizeof zeros ? end - p : (int64_t)sizeof zeros;
                if (pwrite_all(fd, zeros, (size_t)n, p % fsize) != 0) break;
            }
            close(fd);
        }
        from = end;
    }
}

static void zero_cq(shmq_ctl *c, shmq_queue_slot *qs, int64_t qoff, uint32_t count) {
    uint32_t per = c->header.cq_entries_per_file;
    static const uint8_t zeros[SHMQ_CQ_ENTRY_SIZE];
    for (uint32_t i = 0; i < count; i++) {
        int64_t q = qoff + i;
        int fd = open_cq(c, qs, q / per);
        if (fd < 0) continue;
        pwrite_all(fd, zeros, sizeof zeros, (off_t)(q % per) * SHMQ_CQ_ENTRY_SIZE);
        close(fd);
    }
}

static void repair(shmq_ctl *c) {
    shmq_intent *in = &c->intent;
    if (in->slot >= c->header.queue_capacity) { STORE_REL(&in->active, 0); return; }
    shmq_queue_slot *qs = &c->queues[in->slot];
    int64_t commit = LOAD_ACQ(&c->pos.commit_pos);
    if (commit >= in->phys_end) { /* died after publishing commit_pos: finish the rest */
        if (in->has_cq && LOAD_ACQ(&qs->next_offset) < in->queue_offset + in->count)
            STORE_REL(&qs->next_offset, in->queue_offset + in->count);
        c->lock.repairs_completed++;
    } else if (repair_verify(c, in, qs, 1)) {
        if (in->has_cq) STORE_REL(&qs->next_offset, in->queue_offset + in->count);
        STORE_REL(&c->pos.commit_pos, in->phys_end);
        c->pos.appends += in->count;
        c->lock.repairs_completed++;
        ADD_SC(&c->pos.data_seq, 1);
        /* every sleeper, its own worker's pull-wake thread too: a repair is no append the
         * repairing worker's loop checks its holds after */
        if ((LOAD_SC(&c->pos.data_waiters) & DATA_COUNT) || LOAD_SC(&c->pos.data_skip_waiters[0])
                || LOAD_SC(&c->pos.data_skip_waiters[1]))
            futex_wake(&c->pos.data_seq, INT_MAX);
        notify_timer(c, qs);
    } else {
        zero_range(c, in->phys_start, in->phys_end);
        if (in->has_cq) {
            zero_cq(c, qs, in->queue_offset, in->count);
            STORE_REL(&qs->next_offset, in->queue_offset);
        }
        c->lock.repairs_rolled_back++;
    }
    STORE_REL(&in->active, 0);
}

/* ==================================================================== lock == */
#define SPIN_TRIES 256
#define LIVENESS_EVERY_NS 2000000LL /* check a holder's liveness every 2 ms of waiting */
#define SLEEP_SLICE_NS 2000000LL

/* try_only: after the spin, answer SHMQ_EBUSY instead of sleeping (a caller holding the GIL,
 * shmq_send, then calls again through a path that releases it). */
int lock_take(shmq_writer *w, int try_only) {
    shmq_lockword *L = &w->ctl->lock;
    uint64_t expect = 0;
    if (CAS(&L->word, &expect, w->token)) goto acquired;
    for (int i = 0; i < SPIN_TRIES; i++) {
        CPU_RELAX();
        expect = 0;
        if (LOAD_RLX(&L->word) == 0 && CAS(&L->word, &expect, w->token)) goto acquired;
    }
    if (try_only) return SHMQ_EBUSY;
    int64_t start = mono_ns();
    int64_t deadline = start + (int64_t)w->lock_timeout_ms * 1000000LL;
    int64_t next_check = start;
    for (;;) {
        uint64_t cur = LOAD_ACQ(&L->word);
        if (cur == 0) {
            expect = 0;
            if (CAS(&L->word, &expect, w->token)) goto acquired;
            continue;
        }
        int64_t now = mono_ns();
        if (now >= next_check) {
            if (cur != w->token && !shmq_pid_alive(cur)) {
                expect = cur; /* steal only the exact dead word we judged; a CAS race has one winner */
                if (CAS(&L->word, &expect, w->token)) {
                    L->steals++;
                    goto acquired;
                }
                continue;
            }
            next_check = now + LIVENESS_EVERY_NS;
        }
        if (now >= deadline) return SHMQ_ETIMEDOUT;
        uint32_t seq = LOAD_SC(&L->wake_seq);
        ADD_SC(&L->sleepers, 1);
        if (LOAD_SC(&L->word) != 0) {
            int64_t slice = deadline - now < SLEEP_SLICE_NS ? deadline - now : SLEEP_SLICE_NS;
            futex_wait(&L->wake_seq, seq, slice);
        }
        SUB_SC(&L->sleepers, 1);
    }
acquired:
    /* A holder may have died inside an append (or inside a previous repair). */
    if (LOAD_ACQ(&w->ctl->intent.active)) repair(w->ctl);
    L->acquires++;
    return SHMQ_OK;
}

int shmq_lock(shmq_writer *w) { return lock_take(w, 0); }

void shmq_unlock(shmq_writer *w) {
    shmq_lockword *L = &w->ctl->lock;
    STORE_SC(&L->word, 0);
    if (LOAD_SC(&L->sleepers)) {
        ADD_SC(&L->wake_seq, 1);
        futex_wake(&L->wake_seq, 1);
    }
}

/* ================================================================== tables == */
static uint32_t fnv1a(const uint8_t *s, size_t n, int32_t qid) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    h = (h ^ (uint32_t)qid) * 16777619u;
    return h ? h : 1;
}

int64_t shmq_queue_find(shmq_ctl *c, const uint8_t *topic, size_t tlen, int32_t qid) {
    uint32_t cap = c->header.queue_capacity, h = fnv1a(topic, tlen, qid);
    for (uint32_t i = 0, idx = h % cap; i < cap; i++, idx = (idx + 1) % cap) {
        shmq_queue_slot *s = &c->queues[idx];
        if (LOAD_ACQ(&s->state) == 0) return -1;
        if (s->hash == h && s->queue_id == qid && s->topic_len == tlen && memcmp(s->topic, topic, tlen) == 0)
            return idx;
    }
    return -1;
}

int64_t shmq_queue_create(shmq_writer *w, const uint8_t *topic, size_t tlen, int32_t qid) {
    shmq_ctl *c = w->ctl;
    if (tlen == 0 || tlen > SHMQ_TOPIC_MAX) return SHMQ_EINVAL;
    int64_t found = shmq_queue_find(c, topic, tlen, qid);
    if (found >= 0) return found;
    int rc = shmq_lock(w);
    if (rc) return rc;
    found = shmq_queue_find(c, topic, tlen, qid);
    if (found < 0) {
        uint32_t cap = c->header.queue_capacity, h = fnv1a(topic, tlen, qid);
        found = SHMQ_EFULL;
        for (uint32_t i = 0, idx = h % cap; i < cap; i++, idx = (idx + 1) % cap) {
            shmq_queue_slot *s = &c->queues[idx];
            if (s->state == 0) {
                memset(s, 0, sizeof *s);
                memcpy(s->topic, topic, tlen);
                s->topic_len = (uint8_t)tlen;
                s->queue_id = qid;
                s->hash = h;
                STORE_REL(&s->state, 1);
                found = idx;
                break;
            }
        }
    }
    shmq_unlock(w);
    return found;
}

int64_t shmq_offset_find(shmq_ctl *c, const uint8_t *key, size_t klen, int32_t qid) {
    shmq_offset_slot *t = shmq_offset_table(c);
    uint32_t cap = c->header.offset_capacity, h = fnv1a(key, klen, qid);
    for (uint32_t i = 0, idx = h % cap; i < cap; i++, idx = (idx + 1) % cap) {
        shmq_offset_slot *s = &t[idx];
        if (LOAD_ACQ(&s->state) == 0) return -1;
        if (s->hash == h && s->queue_id == qid && s->key_len == klen && memcmp(s->key, key, klen) == 0)
            return idx;
    }
    return -1;
}

int64_t shmq_offset_create(shmq_writer *w, const uint8_t *key, size_t klen, int32_t qid) {
    shmq_ctl *c = w->ctl;
    if (klen == 0 || klen > SHMQ_OFFSET_KEY_MAX) return SHMQ_EINVAL;
    int64_t found = shmq_offset_find(c, key, klen, qid);
    if (found >= 0) return found;
    int rc = shmq_lock(w);
    if (rc) return rc;
    found = shmq_offset_find(c, key, klen, qid);
    if (found < 0) {
        shmq_offset_slot *t = shmq_offset_table(c);
        uint32_t cap = c->header.offset_capacity, h = fnv1a(key, klen, qid);
        found = SHMQ_EFULL;
        for (uint32_t i = 0, idx = h % cap; i < cap; i++, idx = (idx + 1) % cap) {
            shmq_offset_slot *s = &t[idx];
            if (s->state == 0) {
                memset(s, 0, sizeof *s);
                memcpy(s->key, key, klen);
                s->key_len = (uint16_t)klen;
                s->queue_id = qid;
                s->hash = h;
                s->offset = -1;
                STORE_REL(&s->state, 1);
                found = idx;
                break;
            }
        }
    }
    shmq_unlock(w);
    return found;
}

/* ======================================================== ConsumeQueue mappings == */
/* ConsumeQueue files are sparse (store/files.py): a store into a hole of a shared mapping
 * allocates at the page fault, and on a full disk that is SIGBUS in the middle of an append.
 * So before the append writes entries [first, last] it makes sure their pages are allocated,
 * by pwrite(2) of zeros, which answers ENOSPC instead. Under the lock. Why zeros are safe:
 * entries below next_offset are written, so every page up to the one holding the last of them
 * is allocated already, and nothing valid lies past next_offset (a crashed append's leftovers
 * are garbage the next entry overwrites); zeros are written only from the page after the last
 * published entry on. m->ready remembers what this writer knows, so the steady path is one
 * compare; extents grow with the file (a page first, then doubling to 64 KiB): disk follows the
 * entries stored, a syscall per extent. Another writer may zero a range this one reserved:
 * harmless, it is past next_offset. */
#define CQ_EXTENT_MAX (64 * 1024)
#ifdef MADV_POPULATE_WRITE
#define CQ_MADV_POPULATE_WRITE MADV_POPULATE_WRITE
#else
#define CQ_MADV_POPULATE_WRITE 23  /* Linux 5.14; an older kernel answers EINVAL, and the store faults */
#endif
static int64_t page_bytes;

/* fd: the file open already (cq_attach's), or -1 to open it here. */
int cq_reserve_file(shmq_writer *w, shmq_map *m, shmq_queue_slot *qs, int64_t fi,
                    int64_t written, int64_t end, int fd) {
    shmq_ctl *c = w->ctl;
    if (!page_bytes) page_bytes = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    int64_t fbytes = (int64_t)c->header.cq_entries_per_file * SHMQ_CQ_ENTRY_SIZE;
    int64_t known = (written + page_bytes - 1) / page_bytes * page_bytes;
    if (known < m->ready) known = m->ready;
    if (end <= known) { m->ready = known; return SHMQ_OK; }
    int64_t step = known < page_bytes ? page_bytes : known > CQ_EXTENT_MAX ? CQ_EXTENT_MAX : known;
    int64_t to = known + step, need = (end + page_bytes - 1) / page_bytes * page_bytes;
    if (to < need) to = need;
    if (to > fbytes) to = fbytes;
    static const uint8_t zeros[CQ_EXTENT_MAX];
    int own = fd < 0;
    if (own && (fd = open_cq(c, qs, fi)) < 0) { w->os_errno = errno; return SHMQ_ECQSPACE; }
    int rc = SHMQ_OK;
    for (int64_t p = known; p < to;) {
        int64_t n = to - p < CQ_EXTENT_MAX ? to - p : CQ_EXTENT_MAX;
        ssize_t r = pwrite(fd, zeros, (size_t)n, (off_t)p);
        if (r <= 0) { w->os_errno = r < 0 ? errno : ENOSPC; rc = SHMQ_ECQSPACE; break; }
        p += r;
    }
    if (own) close(fd);
    if (rc == SHMQ_OK) m->ready = to;
    return rc;
}

/* Maps made on the append's path (cq_attach): what a test reads to see that a prepared queue's
 * first append mapped nothing (shmq_cq_attaches). Process-wide; relaxed (a count, no order). */
static uint64_t attaches;
uint64_t shmq_cq_attaches(void) { return LOAD_RLX(&attaches); }

/* open + fstat + mmap of file fi of the queue: reads the file only, so no lock is needed. On
 * SHMQ_OK *fd and *addr are the caller's (close / install or munmap). */
static int cq_open_map(shmq_writer *w, uint32_t slot, shmq_queue_slot *qs, int64_t fi, int *fd, void **addr) {
    shmq_ctl *c = w->ctl;
    int64_t fbytes = (int64_t)c->header.cq_entries_per_file * SHMQ_CQ_ENTRY_SIZE;
    *fd = open_cq(c, qs, fi);
    if (*fd < 0) {
        if (errno == ENOENT) { w->need_slot = slot; w->need_index = fi; return SHMQ_ENEEDCQ; }
        w->os_errno = errno;
        return SHMQ_ECQSPACE;
    }
    struct stat st;
    void *a = MAP_FAILED;
    if (fstat(*fd, &st) != 0) w->os_errno = errno;
    else if (st.st_size != fbytes) w->os_errno = EINVAL;  /* a mapping past its end would SIGBUS */
    else if ((a = mmap(NULL, (size_t)fbytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0)) == MAP_FAILED)
        w->os_errno = errno;
    if (a == MAP_FAILED) { close(*fd); return SHMQ_ECQSPACE; }
    *addr = a;
    return SHMQ_OK;
}

/* Under the lock: mapping a (of file fi, open as fd) becomes slot's (the one it replaces, two
 * files back, is unmapped), and the page of the next entry is reserved while the file is open
 * (saves cq_reserve an open). */
static int cq_install(shmq_writer *w, uint32_t slot, shmq_queue_slot *qs, int64_t fi, int fd, void *a) {
    shmq_ctl *c = w->ctl;
    int64_t fbytes = (int64_t)c->header.cq_entries_per_file * SHMQ_CQ_ENTRY_SIZE;
    shmq_map *m = &w->cqs[2 * (uint64_t)slot + (uint64_t)(fi & 1)];
    if (m->index >= 0 && m->addr) munmap(m->addr, (size_t)fbytes);
    m->addr = a;
    m->ready = 0;
    m->index = fi;
    int64_t n = LOAD_RLX(&qs->next_offset) - fi * (int64_t)c->header.cq_entries_per_file;
    if (n >= 0 && n < (int64_t)c->header.cq_entries_per_file)
        return cq_reserve_file(w, m, qs, fi, n * SHMQ_CQ_ENTRY_SIZE, (n + 1) * SHMQ_CQ_ENTRY_SIZE, fd);
    return SHMQ_OK;
}

/* A writer's ConsumeQueue mappings are its own (w->cqs, two per slot: the current file and
 * the next), made here under the lock the first time the append needs a file (unless
 * shmq_cq_prepare made it before, off the send path), and replaced when the queue moves two
 * files on. A file that does not exist yet answers SHMQ_ENEEDCQ: the caller creates it (sparse)
 * and calls again. w->cqs is read and written only under the store lock (the append,
 * shmq_cq_prepare), or by shmq_writer_unmap (the writer's close, no append after): so threads
 * of one process sharing the writer never race on it. */
int cq_attach(shmq_writer *w, uint32_t slot, shmq_queue_slot *qs, int64_t fi) {
    int fd;
    void *a;
    int rc = cq_open_map(w, slot, qs, fi, &fd, &a);
    if (rc) return rc;
    __atomic_add_fetch(&attaches, 1, __ATOMIC_RELAXED);
    rc = cq_install(w, slot, qs, fi, fd, a);
    close(fd);
    return rc;
}

/* Off the send path (the local producer, when it learns a topic's route: client/local_send.py):
 * what the first append to slot's queue would do on its path, done now. The open + fstat + mmap
 * without the lock; under it, the mapping installed (unless the writer has one already) and the
 * page of the next entry reserved by pwrite, as the append does: under the lock because the
 * zeros must land past next_offset's page (cq_reserve_file's comment). Then that page is faulted
 * in writable (MADV_POPULATE_WRITE: no data written; an error, never SIGBUS, if it failed), so the
 * first entry's store takes no fault while the page stays dirty. Crash-safe as the append's own
 * reservation (only zeros past the last published entry); a failure (ENOSPC, a stale store) is
 * answered here and the append meets it again and answers it as today. Disk: one page per queue
 * prepared (see bench/RESULTS.md, Session 14, localfirst14). */
int shmq_cq_prepare(shmq_writer *w, uint32_t slot) {
    shmq_ctl *c = w->ctl;
    if (slot >= c->header.queue_capacity || LOAD_ACQ(&c->queues[slot].state) != 1) return SHMQ_EINVAL;
    shmq_queue_slot *qs = &c->queues[slot];
    uint32_t per = c->header.cq_entries_per_file;
    int64_t fi = LOAD_ACQ(&qs->next_offset) / per;
    int fd;
    void *a;
    int rc = cq_open_map(w, slot, qs, fi, &fd, &a);
    if (rc) return rc;
    int64_t fbytes = (int64_t)per * SHMQ_CQ_ENTRY_SIZE;
    rc = shmq_lock(w);
    if (rc) { munmap(a, (size_t)fbytes); close(fd); return rc; }
    rc = store_writable(w);  /* as the append's place(): only this writer's READY master is written */
    int64_t next = qs->next_offset;
    if (rc == SHMQ_OK && next / per == fi) {  /* else the queue moved on meanwhile: the append maps */
        uint8_t *have = cq_map(w, slot, fi);
        shmq_map *m = &w->cqs[2 * (uint64_t)slot + (uint64_t)(fi & 1)];
        int64_t n = next - fi * (int64_t)per;
        if (!have) {
            rc = cq_install(w, slot, qs, fi, fd, a);
            have = a;
            a = NULL;  /* installed: the writer's now */
        } else {
            rc = cq_reserve_file(w, m, qs, fi, n * SHMQ_CQ_ENTRY_SIZE, (n + 1) * SHMQ_CQ_ENTRY_SIZE, fd);
        }
        if (rc == SHMQ_OK) {
            /* page_bytes: set by cq_reserve_file, which ran just above */
            (void)madvise(have + n * SHMQ_CQ_ENTRY_SIZE / page_bytes * page_bytes, (size_t)page_bytes,
                          CQ_MADV_POPULATE_WRITE);
        }
    }
    shmq_unlock(w);
    close(fd);
    if (a) munmap(a, (size_t)fbytes);
    return rc;
}

void shmq_writer_unmap(shmq_writer *w) {
    int64_t fbytes = (int64_t)w->ctl->header.cq_entries_per_file * SHMQ_CQ_ENTRY_SIZE;
    for (uint64_t i = 0; i < 2 * (uint64_t)w->ctl->header.queue_capacity; i++) {
        shmq_map *m = &w->cqs[i];
        if (m->index >= 0 && m->addr) munmap(m->addr, (size_t)fbytes);
        m->index = -1;
        m->addr = NULL;
        m->ready = 0;
    }
}
