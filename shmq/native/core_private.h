/*
 * shmq/native/core_private.h -- what the C core's files (core_*.c) share, included by nothing
 * else: the atomics and byte-order helpers, the small hot functions of the append as static
 * inline (so the append inlines them as it did when the core was one file), and the hidden (not
 * exported) functions one core file defines for another. The core's API is core.h's.
 *
 * Rules that hold for everything between shmq_lock() and shmq_unlock() on the hot path:
 * no allocation, no logging, no call into Python, no unmapping. The one exception is the
 * repair path (a previous holder died inside the append), which is rare, runs holding the
 * lock, and does file I/O with pread/pwrite so that it needs no mapping of its own.
 *
 * Memory ordering: commit_pos and each queue's next_offset are published with release
 * stores and read with acquire loads; readers never look past commit_pos, so a writer that
 * dies anywhere leaves the log as if its append fully happened or never did.
 *
 * The core's files: core_util.c (CRC32, Java hashCode, tag code, clocks, pid liveness, the data
 * wake bits), core_ctl.c (control block, the lock and the dead writer's repair, queue and offset
 * tables, a writer's ConsumeQueue mappings), core_append.c (every append under the lock: one
 * record, a batch; the local send), core_batch.c (a batch's scan and encoding before the lock),
 * core_index.c (IndexFile, record checks), core_wait.c (waits, flush, replication, fence,
 * msync, the C helper threads).
 */
#ifndef SHMQ_CORE_PRIVATE_H
#define SHMQ_CORE_PRIVATE_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHMQ_HIDDEN __attribute__((visibility("hidden")))

/* ====================================================================== atomics == */
#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LOAD_RLX(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define LOAD_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define STORE_SC(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD_SC(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define SUB_SC(p, v) __atomic_sub_fetch((p), (v), __ATOMIC_SEQ_CST)
#define CAS(p, expp, v) \
    __atomic_compare_exchange_n((p), (expp), (v), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() do {} while (0)
#endif

/* ================================================================= byte order == */
static inline void be32(uint8_t *p, uint32_t v) { v = __builtin_bswap32(v); memcpy(p, &v, 4); }
static inline void be64(uint8_t *p, uint64_t v) { v = __builtin_bswap64(v); memcpy(p, &v, 8); }
static inline void be16(uint8_t *p, uint16_t v) { v = __builtin_bswap16(v); memcpy(p, &v, 2); }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v); }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v); }
static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return __builtin_bswap16(v); }

/* =========================================================== clocks and futexes == */
static inline int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int futex_wait(uint32_t *addr, uint32_t val, int64_t timeout_ns) {
    struct timespec ts;
    if (timeout_ns < 0) timeout_ns = 0;
    ts.tv_sec = timeout_ns / 1000000000LL;
    ts.tv_nsec = timeout_ns % 1000000000LL;
    /* shared (not FUTEX_PRIVATE): the word lives in a mapping several processes share */
    return (int)syscall(SYS_futex, addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static inline void futex_wake(uint32_t *addr, int n) { syscall(SYS_futex, addr, FUTEX_WAKE, n, NULL, NULL, 0); }

/* which sleepers on data_seq this process's appends wake (core_util.c says why); the workers
 * whose held pulls it wakes through their eventfds, those fds, and the data_skip_waiters counts
 * its appends need not wake (its own bit's and those workers') */
extern SHMQ_HIDDEN uint32_t data_wake_bits, pull_peer_bits;
extern SHMQ_HIDDEN int pull_peer_fds[32];
extern SHMQ_HIDDEN uint64_t skip_ignore[2];
/* this thread's run of appends (shmq_pull_peers_defer): its peers' eventfds written once, at its end */
extern SHMQ_HIDDEN __thread int pull_peer_deferred, pull_peer_owed;

/* A wake bit's count in data_skip_waiters (layout.h): the word, and the count's unit there. */
#define SKIP_WORD(bit) ((bit) >> 4)
#define SKIP_ONE(bit) (1ull << (4 * ((bit) & 15)))

/* data_waiters (layout.h): the count of sleepers with every wake bit, and the "woken" bit */
#define DATA_WOKEN 0x80000000u
#define DATA_COUNT 0x7FFFFFFFu

/* After data_seq moved: wake the sleepers this process's appends are for, when one sleeps and was
 * not woken already. A sleeper that skips this process's bit (its own worker's pull-wake thread)
 * is not one: that FUTEX_WAKE would wake nobody (0.8-1.2 us a call here). Nor is a sleeper of
 * data_waiters that an earlier append woke (DATA_WOKEN still set: none counted itself in since):
 * it has yet to run and re-check, and until it does every append made a FUTEX_WAKE that woke
 * nobody (a consumer woken onto a busy core waits for it up to a time slice: a producer at
 * 660k/s made 148k such calls a second, 15 % of its appends, "Session 8, localsend"). The woken
 * bit is set by the CAS that decides to wake, so of two appends one wakes; every sleeper waits
 * with all bits, so any append's wake is theirs. No lost wake-up: every count is raised before
 * its sleeper re-checks commit_pos, and these loads follow the data_seq bump (SC); a sleeper that
 * counted itself in after a wake cleared the bit, so the next append wakes it. */
static inline void wake_peers(shmq_ctl *c);

static inline void wake_data(shmq_ctl *c) {
    uint64_t skip0 = LOAD_SC(&c->pos.data_skip_waiters[0]), skip1 = LOAD_SC(&c->pos.data_skip_waiters[1]);
    uint32_t bits = data_wake_bits;
    if (pull_peer_bits) {
        if (pull_peer_deferred) pull_peer_owed = 1;
        else wake_peers(c);
    }
    skip0 &= ~skip_ignore[0];
    skip1 &= ~skip_ignore[1];
    int wake = skip0 || skip1;
    uint32_t w = LOAD_SC(&c->pos.data_waiters);
    while ((w & DATA_COUNT) && !(w & DATA_WOKEN)) {
        if (__atomic_compare_exchange_n(&c->pos.data_waiters, &w, w | DATA_WOKEN, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
            wake = 1;
            break;
        }
    }
    if (wake) syscall(SYS_futex, &c->pos.data_seq, FUTEX_WAKE_BITSET, INT_MAX, NULL, NULL, bits);
}

/* A worker's append (after data_seq moved): each other worker holding pulls (pull_armed) and not
 * signalled since it last looked gets one eventfd write (layout.h says the protocol). No lost
 * wake-up: the holder sets its armed bit before it looks at its queues, and clears its signalled
 * bit after it consumed its eventfd and before it looks again; this load follows the publish (SC), so either the holder's look sees
 * the append or this load sees the bit. A run of appends costs one write (and one wake-up). */
static inline void wake_peers(shmq_ctl *c) {
    uint32_t want = LOAD_SC(&c->pos.pull_armed) & pull_peer_bits;
    if (!want || !(want &= ~LOAD_SC(&c->pos.pull_signaled))) return;
    uint32_t was = __atomic_fetch_or(&c->pos.pull_signaled, want, __ATOMIC_SEQ_CST);
    for (want &= ~was; want; want &= want - 1) {
        uint64_t one = 1;
        while (write(pull_peer_fds[__builtin_ctz(want)], &one, sizeof one) < 0 && errno == EINTR) {}
    }
}

/* A sleeper with every wake bit counts itself in data_waiters: one more, and the woken bit
 * cleared (wake_data: the next append must wake it). */
static inline void data_waiter_in(shmq_ctl *c) {
    uint32_t w = LOAD_RLX(&c->pos.data_waiters);
    while (!__atomic_compare_exchange_n(&c->pos.data_waiters, &w, ((w & DATA_COUNT) + 1), 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {}
}

/* ==================================== defined in one core file, used in another == */
/* core_util.c */
SHMQ_HIDDEN uint32_t java_hash_cont(uint32_t h, const uint8_t *s, size_t n);

/* core_ctl.c: the lock, a writer's ConsumeQueue mappings */
SHMQ_HIDDEN int lock_take(shmq_writer *w, int try_only);
SHMQ_HIDDEN int cq_reserve_file(shmq_writer *w, shmq_map *m, shmq_queue_slot *qs, int64_t fi,
                                int64_t written, int64_t end, int fd);
SHMQ_HIDDEN int cq_attach(shmq_writer *w, uint32_t slot, shmq_queue_slot *qs, int64_t fi);

/* ================================================== the append's inline helpers == */
/* An append into the timer topic (a timer message, or a recall's marker) also moves timer_seq,
 * the one word the supervisor's timer service sleeps on (shmq_wait_timer): every other append
 * (thousands a second in a busy store) wakes no timer thread. Bumped after the publish, so a
 * timer service that loaded timer_seq before it read the timer queue misses no entry. */
static inline void wake_timer(shmq_ctl *c) {
    ADD_SC(&c->pos.timer_seq, 1);
    if (LOAD_SC(&c->pos.timer_waiters)) futex_wake(&c->pos.timer_seq, INT_MAX);
}

static inline void notify_timer(shmq_ctl *c, const shmq_queue_slot *qs) {
    if (qs->topic_len != SHMQ_PROP_LEN(SHMQ_TIMER_TOPIC) || memcmp(qs->topic, SHMQ_TIMER_TOPIC, qs->topic_len))
        return;
    wake_timer(c);
}

static inline void fault(shmq_writer *w, int point) {
    if (__builtin_expect(w->fault_point == point, 0)) {
        if (w->fault_action == SHMQ_FA_KILL) kill(getpid(), SIGKILL);
        if (w->fault_action == SHMQ_FA_STOP) {
            /* stop here, lock held, until SIGCONT; then finish this append normally */
            w->fault_point = 0;
            raise(SIGSTOP);
            return;
        }
        for (;;) pause(); /* SHMQ_FA_PAUSE: hold the lock until killed */
    }
}

/* Under the lock: whether this writer may write the store now: SHMQ_OK for the READY master of
 * its generation, else why not (READONLY after a failed flush, STALE for another generation or
 * a store not ready, SLAVE: a slave's log is written by replication only -- RocketMQ's "broker
 * role is slave, so putMessage is forbidden"). Checked under the lock, so a local producer
 * cannot race a role change. The append's place() and shmq_cq_prepare ask it. */
static inline int store_writable(const shmq_writer *w) {
    const shmq_ctl *c = w->ctl;
    uint32_t state = LOAD_ACQ(&c->owner.state);
    if (state != SHMQ_STATE_READY || c->owner.generation != w->generation)
        return state == SHMQ_STATE_READONLY ? SHMQ_EREADONLY : SHMQ_ESTALE;
    if (LOAD_ACQ(&c->owner.role) == SHMQ_ROLE_SLAVE) return SHMQ_ESLAVE;
    return SHMQ_OK;
}

static inline uint8_t *log_map(shmq_writer *w, int64_t index) {
    shmq_map *m = &w->logs[index % SHMQ_LOG_RING];
    return m->index == index ? m->addr : NULL;
}

static inline uint8_t *cq_map(shmq_writer *w, uint32_t slot, int64_t file_index) {
    shmq_map *m = &w->cqs[2 * (uint64_t)slot + (uint64_t)(file_index & 1)];
    return m->index == file_index ? m->addr : NULL;
}

/* The mapping of file fi of slot's queue, made now if this writer has none (under the lock). */
static inline uint8_t *cq_need(shmq_writer *w, uint32_t slot, shmq_queue_slot *qs, int64_t fi, int *rc) {
    uint8_t *a = cq_map(w, slot, fi);
    if (a) return a;
    *rc = cq_attach(w, slot, qs, fi);
    return *rc ? NULL : cq_map(w, slot, fi);
}

/* Entries [first, last] of slot's queue, in at most two files (both mapped by the caller). */
static inline int cq_reserve(shmq_writer *w, uint32_t slot, shmq_queue_slot *qs, int64_t first, int64_t last) {
    uint32_t per = w->ctl->header.cq_entries_per_file;
    int64_t fi = first / per, base = fi * (int64_t)per;
    shmq_map *m = &w->cqs[2 * (uint64_t)slot + (uint64_t)(fi & 1)];
    int64_t stop = last / per == fi ? last : base + per - 1;
    int64_t end = (stop - base + 1) * SHMQ_CQ_ENTRY_SIZE;
    if (end > m->ready) {
        int rc = cq_reserve_file(w, m, qs, fi, (first - base) * SHMQ_CQ_ENTRY_SIZE, end, -1);
        if (rc) return rc;
    }
    if (last / per == fi) return SHMQ_OK;
    m = &w->cqs[2 * (uint64_t)slot + (uint64_t)((fi + 1) & 1)];
    end = (last - (base + per) + 1) * SHMQ_CQ_ENTRY_SIZE;
    return end > m->ready ? cq_reserve_file(w, m, qs, fi + 1, 0, end, -1) : SHMQ_OK;
}

static inline int is_prepared_or_rollback(int32_t sysflag) {
    int32_t t = sysflag & 0xC;
    return t == 0x4 || t == 0xC;
}

static inline void write_cq(uint8_t *e, int64_t phys, uint32_t size, int64_t tag) {
    be64(e + SHMQ_CQ_PHYS, (uint64_t)phys);
    be32(e + SHMQ_CQ_SIZE, size);
    be64(e + SHMQ_CQ_TAG, (uint64_t)tag);
}

static inline void notify_data(shmq_ctl *c, const shmq_queue_slot *qs) {
    ADD_SC(&c->pos.data_seq, 1);
    wake_data(c);
    notify_timer(c, qs);
}

/* now: the clock read a moment ago by the caller (0: read it here, under the lock) */
static inline int64_t next_store_ts(shmq_ctl *c, int64_t now) {
    int64_t ts = now ? now : shmq_now_ms();
    if (ts < c->pos.last_store_ts) ts = c->pos.last_store_ts;
    c->pos.last_store_ts = ts;
    return ts;
}

static inline void begin_intent(shmq_ctl *c, int64_t pos, int64_t rec, int64_t end, int64_t qoff,
                                uint32_t slot, uint32_t count, int has_cq) {
    shmq_intent *in = &c->intent;
    in->phys_start = pos;
    in->rec_start = rec;
    in->phys_end = end;
    in->queue_offset = qoff;
    in->slot = slot;
    in->count = count;
    in->has_cq = (uint32_t)has_cq;
    STORE_REL(&in->active, 1);
}

static inline void write_filler(shmq_ctl *c, uint8_t *cur, int64_t pos) {
    int64_t fsize = (int64_t)c->header.file_size, off = pos % fsize;
    be32(cur + off, (uint32_t)(fsize - off));
    be32(cur + off + 4, SHMQ_BLANK_MAGIC);
}

/* UNIQ_KEY \001, written before the 32 hex digits of the id; returns the position after it */
static inline uint8_t *put_uniq_head(uint8_t *p) {
    memcpy(p, SHMQ_PROP_UNIQ_KEY, SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY));
    p[SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY)] = SHMQ_NAME_VALUE_SEP;
    return p + SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY) + 1;
}
#define UNIQ_HEAD_LEN (SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY) + 1)
#define UNIQ_PAIR_LEN (UNIQ_HEAD_LEN + 32)

/* ======= a batch's entries (core_batch.c scans them, core_append.c writes them) == */
/* A batch body (RocketMQ MessageDecoder.encodeMessages) is a run of entries:
 *   totalSize i32 | magic i32 (ignored) | bodyCRC i32 (ignored) | flag i32 |
 *   bodyLen i32 | body | propsLen i16 | props
 * Each entry becomes its own record with consecutive queue offsets on one queue; the
 * batch-level properties (extra) are appended to each entry's properties. */
#define BATCH_ENTRY_FIXED SHMQ_BATCH_ENTRY_FIXED /* layout.h */

/* Where a batch's entries come from: a MessageBatch body (b: entries as batch_scan reads them,
 * each entry's properties then extra, with a \2 between when they lack one), or (b NULL) n plain
 * bodies of one local send_batch: flag 0, properties head, then pair (UNIQ_KEY \1 <id> [\2
 * extra], built once; entry k's id, ids + 32 k, copied into it). Both make the same record. */
typedef struct {
    const uint8_t *b;
    const uint8_t *extra;
    uint32_t extra_len;
    const uint8_t *const *bodies;
    const uint32_t *blens;
    const uint8_t *head;
    uint32_t hlen;
    uint8_t *pair;
    uint32_t pair_len;
    const char *ids;
} batch_src;

typedef struct { const uint8_t *body, *props, *props2; uint32_t blen, plen, plen2; int32_t flag; int sep; } batch_entry;

/* core_append.c: a scanned batch's append, under the lock */
SHMQ_HIDDEN int put_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m, const batch_src *src, uint32_t count,
                          uint64_t total, shmq_result *out, int try_lock);

#endif
