/*
 * shmq/native/core_wait.c -- every sleep on the control block's futex words, and every wake
 * but the append's: the data wait (spin, then FUTEX_WAIT_BITSET), a local consumer's wait on
 * its queues, the timer service's wait, SYNC_FLUSH waits, the group commit and the flushed
 * position, replication's positions, recovery's publish, the fence, msync, and the two C
 * helper threads (confirm bridge, pull-wake) with their stop before the block is unmapped.
 * No lost wake-up: a sleeper loads the sequence word, re-checks its condition after raising
 * the waiters count, then sleeps on that value; a mover publishes, bumps the word and wakes
 * when the count is non-zero.
 */

#define _GNU_SOURCE
#include "core_private.h"

/* ========================================================== waits and flush == */
static int futex_wait_bits(uint32_t *addr, uint32_t val, int64_t deadline_ns, uint32_t bits) {
    struct timespec ts;  /* FUTEX_WAIT_BITSET: an absolute CLOCK_MONOTONIC deadline */
    ts.tv_sec = deadline_ns / 1000000000LL;
    ts.tv_nsec = deadline_ns % 1000000000LL;
    return (int)syscall(SYS_futex, addr, FUTEX_WAIT_BITSET, val, &ts, NULL, bits);
}

int64_t shmq_load_i64(const int64_t *p) { return LOAD_ACQ(p); }

static int64_t wait_data(shmq_ctl *c, int64_t seen, int64_t spin_ns, int64_t now, int64_t deadline, uint32_t bits,
                         const uint32_t *stop);

int64_t shmq_wait_data(shmq_ctl *c, int64_t seen, int64_t spin_ns, int64_t timeout_ns) {
    int64_t now = mono_ns();
    return wait_data(c, seen, spin_ns, now, now + timeout_ns, FUTEX_BITSET_MATCH_ANY, NULL);
}

/* shmq_wait_data for a worker's pull-wake thread: not woken by this process's own appends
 * (see data_wake_bits); returns at the timeout with whatever the position is then. */
static int64_t wait_data_others(shmq_ctl *c, int64_t seen, int64_t timeout_ns, const uint32_t *stop) {
    int64_t now = mono_ns();
    return wait_data(c, seen, 0, now, now + timeout_ns, data_wake_bits == FUTEX_BITSET_MATCH_ANY
                     ? FUTEX_BITSET_MATCH_ANY : ~(data_wake_bits | pull_peer_bits), stop);
}

int64_t shmq_wait_data_others(shmq_ctl *c, int64_t seen, int64_t timeout_ns) {
    return wait_data_others(c, seen, timeout_ns, NULL);
}

/* `stop` (or NULL): a word that, once non-zero, ends the wait at its next look (a helper thread
 * being stopped before its control block is unmapped: shmq_helpers_stop). `now`: the caller's
 * CLOCK_MONOTONIC reading at the start of the wait (the spin counts from it), `deadline` an
 * absolute one. The clock is read only while spinning and after a sleep that did not end with
 * news: on this VM a read costs 140-430 ns (RESULTS, "Session 11, local11"), and a wait that
 * ends with news returns without one. */
static int64_t wait_data(shmq_ctl *c, int64_t seen, int64_t spin_ns, int64_t now, int64_t deadline, uint32_t bits,
                         const uint32_t *stop) {
    int64_t t0 = now, cpos;
    if ((cpos = LOAD_ACQ(&c->pos.commit_pos)) > seen) return cpos;
    while (spin_ns > 0) {
        for (int i = 0; i < 64; i++) {
            CPU_RELAX();
            if ((cpos = LOAD_ACQ(&c->pos.commit_pos)) > seen) return cpos;
        }
        if ((now = mono_ns()) - t0 >= spin_ns) break;
    }
    /* counted where the appenders look (wake_data): with all bits in data_waiters; skipping one
     * process's bit (a pull-wake thread) in that bit's count of data_skip_waiters */
    uint64_t skip_unit = 0, *skip_count = NULL;
    if (bits != FUTEX_BITSET_MATCH_ANY) {
        int own = __builtin_ctz(data_wake_bits);  /* (wait_data_others: this process's bit) */
        skip_count = &c->pos.data_skip_waiters[SKIP_WORD(own)];
        skip_unit = SKIP_ONE(own);
    }
    for (int slept = 0;; slept = 1) {
        uint32_t seq = LOAD_SC(&c->pos.data_seq);
        if ((cpos = LOAD_SC(&c->pos.commit_pos)) > seen || (stop && LOAD_SC(stop))) return cpos;
        if (slept) now = mono_ns();
        if (deadline - now <= 0) return cpos;
        if (skip_count) ADD_SC(skip_count, skip_unit); else data_waiter_in(c);
        if (LOAD_SC(&c->pos.commit_pos) <= seen && LOAD_ACQ(&c->owner.state) != SHMQ_STATE_FENCED
                && !(stop && LOAD_SC(stop)))
            futex_wait_bits(&c->pos.data_seq, seq, deadline, bits);
        if (skip_count) SUB_SC(skip_count, skip_unit); else SUB_SC(&c->pos.data_waiters, 1);
        if (LOAD_ACQ(&c->owner.state) == SHMQ_STATE_FENCED) return LOAD_ACQ(&c->pos.commit_pos);
    }
}

/* A local consumer's wait on the queues it reads (client/local_pull.py): the index of the first
 * queue, round robin from `start`, whose published next_offset is past offs[i]; -1 when none
 * within timeout_ns; -2 when the store stopped being READY/READONLY (fenced: re-attach); -3
 * when *poke is no longer `poked` (the caller's queue set changed; looked at with every scan).
 * *seen is a commit position loaded before the caller's last read: queue `hold` (whose entry
 * was published but whose record was not committed yet when it was read) and queues with no
 * slot yet (next[i] NULL) count as ready only once commit_pos passes it; a queue with no slot
 * is answered only when no queue has news (the commit that moved was most likely another queue's:
 * a push consumer's retry queue has no slot until its first retry, and answering it first cost
 * a look at it in Python before a quarter of the messages; the caller builds its set again every
 * LOOK_AGAIN_S while one has no slot, so a stream of news elsewhere cannot hide a new slot
 * for longer). On return *seen is the
 * commit position loaded before the scan that found the queue (so before the caller reads it).
 * Appends to other queues move commit_pos too: they are looked at and slept through here,
 * without a return to Python. No lost wake-up: commit_pos is loaded before each scan, and an
 * append publishes its queue's next_offset before commit_pos, so an append the scan missed
 * moves commit_pos past that load and ends the sleep. `now`: the caller's CLOCK_MONOTONIC
 * reading at the start of the wait, or 0 (read here); a wait that ends with news for one of
 * the queues reads the clock only if it spun (wait_data). */
int shmq_wait_queues(shmq_ctl *c, int64_t *const *next, const int64_t *offs, int n, int start, int64_t *seen,
                     int hold, const int32_t *poke, int32_t poked, int64_t spin_ns, int64_t timeout_ns, int64_t now) {
    if (!now) now = mono_ns();
    int64_t deadline = now + timeout_ns, before = *seen;
    if (start < 0 || start >= n) start = 0;
    for (int looked = 0;; looked = 1) {
        uint32_t st = LOAD_ACQ(&c->owner.state);
        if (st != SHMQ_STATE_READY && st != SHMQ_STATE_READONLY) return -2;
        if (poke && LOAD_ACQ(poke) != poked) return -3;
        int64_t cpos = LOAD_ACQ(&c->pos.commit_pos);
        int moved = cpos > before, absent = -1;
        *seen = cpos;
        for (int k = 0, i = start; k < n; k++, i = i + 1 < n ? i + 1 : 0) {
            if (!next[i]) {
                if (moved && absent < 0) absent = i;
            } else if (i == hold) {
                if (moved) return i;
            } else if (LOAD_ACQ(next[i]) > offs[i]) {
                return i;
            }
        }
        if (absent >= 0) return absent;
        if (looked) now = mono_ns();  /* the first scan runs at the caller's reading */
        int64_t left = deadline - now;
        if (left <= 0) return -1;
        wait_data(c, cpos, spin_ns < left ? spin_ns : left, now, deadline, FUTEX_BITSET_MATCH_ANY, NULL);
    }
}

/* The supervisor's timer service's sleep (broker/supervisor/timer_service.py): until timer_seq
 * is no longer `seen` (an append into the timer topic, see notify_timer; or a fence), or the
 * timeout. Returns timer_seq. */
uint32_t shmq_wait_timer(shmq_ctl *c, uint32_t seen, int64_t timeout_ns) {
    int64_t deadline = mono_ns() + timeout_ns;
    for (;;) {
        uint32_t cur = LOAD_SC(&c->pos.timer_seq);
        int64_t left = deadline - mono_ns();
        if (cur != seen || left <= 0 || LOAD_ACQ(&c->owner.state) == SHMQ_STATE_FENCED) return cur;
        ADD_SC(&c->pos.timer_waiters, 1);
        if (LOAD_SC(&c->pos.timer_seq) == seen) futex_wait(&c->pos.timer_seq, seen, left);
        SUB_SC(&c->pos.timer_waiters, 1);
    }
}

/* Ends a shmq_wait_timer at once (the timer service's stop and wake, a cleanup's roll request):
 * the bump an append into the timer topic makes (notify_timer), so the service just runs a round
 * that finds nothing new. Lets that service sleep until its next due time instead of polling. */
void shmq_wake_timer(shmq_ctl *c) { wake_timer(c); }

int shmq_wait_flushed(shmq_ctl *c, int64_t target, int64_t timeout_ns) {
    shmq_positions *p = &c->pos;
    if (LOAD_ACQ(&p->flushed_pos) >= target) return SHMQ_OK;
    int64_t cur = LOAD_RLX(&p->flush_request_pos);
    while (cur < target && !CAS(&p->flush_request_pos, &cur, target)) {}
    ADD_SC(&p->flush_request_seq, 1);
    if (LOAD_SC(&p->flusher_waiting)) futex_wake(&p->flush_request_seq, INT_MAX);
    int64_t deadline = mono_ns() + timeout_ns;
    for (;;) {
        uint32_t seq = LOAD_SC(&p->flushed_seq);
        if (LOAD_SC(&p->flushed_pos) >= target) return SHMQ_OK;
        if (LOAD_ACQ(&p->io_error)) return SHMQ_EIO;
        int64_t left = deadline - mono_ns();
        if (left <= 0) return SHMQ_ETIMEDOUT;
        ADD_SC(&p->flushed_waiters, 1);
        if (LOAD_SC(&p->flushed_pos) < target) futex_wait(&p->flushed_seq, seq, left);
        SUB_SC(&p->flushed_waiters, 1);
    }
}

int64_t shmq_flusher_wait(shmq_ctl *c, int64_t timeout_ns) {
    shmq_positions *p = &c->pos;
    int64_t deadline = mono_ns() + timeout_ns;
    for (;;) {
        uint32_t seq = LOAD_SC(&p->flush_request_seq);
        int64_t req = LOAD_SC(&p->flush_request_pos);
        if (req > LOAD_ACQ(&p->flushed_pos)) return req;
        int64_t left = deadline - mono_ns();
        if (left <= 0) return req;
        STORE_SC(&p->flusher_waiting, 1);
        if (LOAD_SC(&p->flush_request_pos) <= LOAD_ACQ(&p->flushed_pos))
            futex_wait(&p->flush_request_seq, seq, left);
        STORE_SC(&p->flusher_waiting, 0);
    }
}

/* The group-commit thread's steady state, without the GIL (store/flush.py): msync the CommitLog
 * bytes between the flushed and the commit position, publish the new flushed position, and start
 * the next msync as soon as one returns if a putter asked meanwhile (else after interval_ns),
 * until budget_ns is spent. In Python the thread took the GIL back after every msync, behind the
 * supervisor's other threads (up to a switch interval, 5 ms). Only inside the one mapped file
 * [file_start, file_end) at base, already named durably: it returns once the commit position
 * passes file_end (Python prepares the next file and flushes across), on the stop request (a
 * request of 2^62, FlushService.interrupt), the store turning read-only, or *in_c turning 0
 * (store/faults.py was configured: its hooks see every msync from then on); >= 0 the flushes
 * made, -errno after a failed msync (nothing published: Python makes the store read-only). */
int64_t shmq_group_commit(shmq_ctl *c, uint8_t *base, int64_t file_start, int64_t file_end, int64_t interval_ns,
                          int64_t budget_ns, const int32_t *in_c) {
    shmq_positions *p = &c->pos;
    int64_t n = 0, deadline = mono_ns() + budget_ns;
    for (;;) {
        if (LOAD_ACQ(&p->io_error)) return n;
        int64_t done = LOAD_ACQ(&p->flushed_pos), target = LOAD_ACQ(&p->commit_pos);
        if (done < file_start || target > file_end) return n;
        if (target > done) {
            if (!LOAD_ACQ(in_c)) return n;  /* a fault / trace hook was set: every msync is Python's */
            int err = shmq_msync(base + (done - file_start), (uint64_t)(target - done));
            if (err) return -(int64_t)err;
            shmq_set_flushed(c, target, 0);
            n++;
        }
        int64_t left = deadline - mono_ns();
        if (left <= 0) return n;
        if (shmq_flusher_wait(c, left < interval_ns ? left : interval_ns) >= ((int64_t)1 << 62)) return n;
    }
}

void shmq_set_flushed(shmq_ctl *c, int64_t pos, int io_errno) {
    shmq_positions *p = &c->pos;
    if (io_errno) {
        STORE_SC(&p->io_error, (uint32_t)io_errno);
        STORE_SC(&c->owner.state, SHMQ_STATE_READONLY);
    } else {
        int64_t cur = LOAD_RLX(&p->flushed_pos);
        while (cur < pos && !CAS(&p->flushed_pos, &cur, pos)) {}
        __atomic_add_fetch(&p->flush_count, 1, __ATOMIC_RELAXED);
    }
    ADD_SC(&p->flushed_seq, 1);
    if (LOAD_SC(&p->flushed_waiters)) futex_wake(&p->flushed_seq, INT_MAX);
}

void shmq_publish_recovered(shmq_ctl *c, int64_t commit_pos) {
    STORE_SC(&c->pos.commit_pos, commit_pos);
    STORE_SC(&c->pos.flushed_pos, commit_pos);
    STORE_SC(&c->pos.flush_request_pos, commit_pos);
}

/* Replication (store/ha). A slave publishes the end of the last complete record it received
 * (the bytes and ConsumeQueue entries below it are written): readers see it as they see an
 * append. Only the slave's replica writer calls this; nothing appends on a slave. */
void shmq_publish_replica(shmq_ctl *c, int64_t commit_pos) {
    STORE_REL(&c->pos.commit_pos, commit_pos);
    ADD_SC(&c->pos.data_seq, 1);  /* a slave runs no timer service: no timer_seq */
    wake_data(c);
}

/* Master: the HA service raises repl_pos to what a slave acknowledged (never past what it
 * was sent) and keeps repl_slaves; every change wakes the putters waiting for a slave. */
void shmq_set_replicated(shmq_ctl *c, int64_t pos, int32_t slaves) {
    shmq_positions *p = &c->pos;
    int64_t cur = LOAD_RLX(&p->repl_pos);
    while (cur < pos && !CAS(&p->repl_pos, &cur, pos)) {}
    if (slaves >= 0) STORE_SC(&p->repl_slaves, (uint32_t)slaves);
    ADD_SC(&p->repl_seq, 1);
    if (LOAD_SC(&p->repl_waiters)) futex_wake(&p->repl_seq, INT_MAX);
}

/* SYNC_MASTER putter: wait until a slave has everything below `target` (group commit: one
 * acknowledgement releases every putter below it). SHMQ_OK, SHMQ_ETIMEDOUT, SHMQ_ESTALE when
 * fenced, or SHMQ_ESLAVE when no slave is connected any more (SLAVE_NOT_AVAILABLE). */
int shmq_wait_replicated(shmq_ctl *c, int64_t target, int64_t timeout_ns) {
    shmq_positions *p = &c->pos;
    int64_t deadline = mono_ns() + timeout_ns;
    for (;;) {
        uint32_t seq = LOAD_SC(&p->repl_seq);
        if (LOAD_SC(&p->repl_pos) >= target) return SHMQ_OK;
        if (LOAD_ACQ(&c->owner.state) == SHMQ_STATE_FENCED) return SHMQ_ESTALE;
        if (LOAD_SC(&p->repl_slaves) == 0) return SHMQ_ESLAVE;
        int64_t left = deadline - mono_ns();
        if (left <= 0) return SHMQ_ETIMEDOUT;
        ADD_SC(&p->repl_waiters, 1);
        if (LOAD_SC(&p->repl_pos) < target) futex_wait(&p->repl_seq, seq, left);
        SUB_SC(&p->repl_waiters, 1);
    }
}

/* Marks the segment FENCED (appends answer ESTALE from now on) and wakes every sleeper so
 * that waiting readers and SYNC_FLUSH putters notice at once. */
void shmq_fence(shmq_ctl *c) {
    STORE_SC(&c->owner.state, SHMQ_STATE_FENCED);
    ADD_SC(&c->pos.data_seq, 1);
    futex_wake(&c->pos.data_seq, INT_MAX);
    ADD_SC(&c->pos.flushed_seq, 1);
    futex_wake(&c->pos.flushed_seq, INT_MAX);
    ADD_SC(&c->pos.repl_seq, 1);
    futex_wake(&c->pos.repl_seq, INT_MAX);
    ADD_SC(&c->pos.timer_seq, 1);
    futex_wake(&c->pos.timer_seq, INT_MAX);
}

int shmq_msync(uint8_t *addr, uint64_t len) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(page - 1);
    uint64_t n = len + ((uintptr_t)addr - start);
    if (n == 0) return 0;
    return msync((void *)start, n, MS_SYNC) == 0 ? 0 : errno;
}

/* ============================================================ confirm bridge == */
/* A worker's SYNC_FLUSH / SYNC_MASTER answers (broker/worker/confirm.py). An event loop cannot
 * sleep on a futex, and a Python thread that does must take the GIL from the loop at every
 * group commit; this thread holds no GIL. The loop arms it with the oldest end it waits for;
 * once the flushed (modes & 1) and replicated (modes & 2) positions pass that end, or the
 * store cannot get there (read-only after a failed flush, no slave), or the armed deadline
 * passes, it disarms and writes to the loop's eventfd: one wake-up of the loop per group
 * commit. Only the loop arms, and only after it has read the previous wake-up, so one armed
 * end is enough. The thread touches the control block only while armed. */
#include <pthread.h>

/* The helper threads of every control block this process mapped (both kinds), so that
 * shmq_helpers_stop can end them before the block is unmapped: an armed thread sleeps inside
 * the block's futex words (up to a slice) and would write to the unmapped page when it wakes. */
static pthread_mutex_t helpers_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shmq_bridge *bridges;
static struct shmq_pullwake *pullwakes;

static void helper_done(uint32_t *done) {
    STORE_SC(done, 1);
    futex_wake(done, INT_MAX);
}

/* Stop one helper: set its stop word, wake it where a disarmed one sleeps (its seq), and wait
 * (at most 2 s) for it to say it is done. */
static void helper_stop(uint32_t *stop, uint32_t *seq, uint32_t *done) {
    STORE_SC(stop, 1);
    ADD_SC(seq, 1);
    futex_wake(seq, 1);
    int64_t deadline = mono_ns() + 2000000000LL;
    while (!LOAD_SC(done)) {
        int64_t left = deadline - mono_ns();
        if (left <= 0) return;
        futex_wait(done, 0, left < 100000000LL ? left : 100000000LL);
    }
}

struct shmq_bridge {
    shmq_ctl *c;
    int fd;
    int modes;
    int64_t want;      /* the end waited for; 0: disarmed */
    int64_t deadline;  /* CLOCK_MONOTONIC ns */
    uint32_t seq;      /* bumped by every arm; a disarmed thread sleeps on it */
    uint32_t stop;     /* set by shmq_helpers_stop: the thread ends at its next look */
    uint32_t done;     /* set by the thread as it ends: it touches the control block no more */
    struct shmq_bridge *next;  /* helpers_mu's list */
};

#define BRIDGE_SLICE_NS 50000000LL

static int bridge_wait(shmq_bridge *b, int64_t want, int64_t deadline) {
    int64_t left = deadline - mono_ns();
    if (left > BRIDGE_SLICE_NS) left = BRIDGE_SLICE_NS;
    int rc = SHMQ_OK;
    if (b->modes & 1) rc = shmq_wait_flushed(b->c, want, left);
    if (rc == SHMQ_OK && (b->modes & 2)) rc = shmq_wait_replicated(b->c, want, left);
    if (rc != SHMQ_OK && rc != SHMQ_ETIMEDOUT && rc != SHMQ_ESLAVE && rc != SHMQ_EIO) {
        struct timespec ts = {0, 5000000};  /* fenced: only the deadline answers */
        nanosleep(&ts, NULL);
        rc = SHMQ_ETIMEDOUT;
    }
    return rc == SHMQ_ETIMEDOUT && mono_ns() < deadline ? 0 : 1;
}

static void *bridge_run(void *arg) {
    shmq_bridge *b = arg;
    while (!LOAD_SC(&b->stop)) {
        uint32_t seq = LOAD_SC(&b->seq);
        int64_t want = LOAD_SC(&b->want);
        if (want <= 0) {
            futex_wait(&b->seq, seq, 1000000000LL);
            continue;
        }
        if (!bridge_wait(b, want, LOAD_SC(&b->deadline))) continue;
        STORE_SC(&b->want, 0);
        uint64_t one = 1;
        while (write(b->fd, &one, sizeof one) < 0 && errno == EINTR) {}
    }
    helper_done(&b->done);
    return NULL;
}

/* A detached helper thread with a small stack on which no signal may land (Python's handlers
 * run on the main thread only). 0 on success. */
static int start_helper(void *(*run)(void *), void *arg) {
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 64 * 1024);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&th, &at, run, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
    return rc;
}

shmq_bridge *shmq_bridge_start(shmq_ctl *c, int fd, int modes) {
    shmq_bridge *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->c = c;
    b->fd = fd;
    b->modes = modes;
    if (start_helper(bridge_run, b) != 0) {
        free(b);
        return NULL;
    }
    pthread_mutex_lock(&helpers_mu);
    b->next = bridges;
    bridges = b;
    pthread_mutex_unlock(&helpers_mu);
    return b;
}

void shmq_bridge_arm(shmq_bridge *b, int64_t want, int64_t deadline_ns) {
    STORE_SC(&b->deadline, deadline_ns);
    STORE_SC(&b->want, want);
    ADD_SC(&b->seq, 1);
    futex_wake(&b->seq, 1);
}

/* ========================================================== pull-wake bridge == */
/* A worker's held pulls (broker/worker/pull_hold.py). The loop cannot sleep on the store's
 * data futex, and a Python thread that does takes the GIL from the loop at every append it
 * sees; this thread takes none. While armed it sleeps on data_seq with every wake bit but its
 * process's own (the worker's loop checks its holds itself after each of its own appends:
 * shmq_set_data_wake_bit), and once the commit position passes the last one it reported it
 * reports the new one and writes the loop's eventfd: one wake-up of the loop per run of other
 * processes' appends, none for the worker's own. No lost wake-up: the loop arms it with a
 * position read before it looked at its holds, and it reports (seen, then the eventfd write)
 * only positions it read after they were published. The loop disarms it when it finds no
 * holds; a disarmed thread sleeps on its own word and never touches the control block. */
struct shmq_pullwake {
    shmq_ctl *c;
    int fd;
    int64_t seen;    /* the last position armed with or reported */
    uint32_t armed;
    uint32_t seq;    /* bumped by every arm and disarm */
    uint32_t stop;   /* as shmq_bridge's */
    uint32_t done;
    struct shmq_pullwake *next;
};

/* How long it sleeps on data_seq between looks at `armed`. At each end it reports the position
 * if this worker's own appends moved it (they do not wake it): a spare check of the loop. */
#define PULLWAKE_SLICE_NS 1000000000LL

static void *pullwake_run(void *arg) {
    shmq_pullwake *b = arg;
    while (!LOAD_SC(&b->stop)) {
        uint32_t seq = LOAD_SC(&b->seq);
        if (!LOAD_SC(&b->armed)) {
            futex_wait(&b->seq, seq, 1000000000LL);
            continue;
        }
        int64_t seen = LOAD_SC(&b->seen);
        int64_t pos = wait_data_others(b->c, seen, PULLWAKE_SLICE_NS, &b->stop);
        if (pos > seen) {
            /* a re-arm in between set an older or equal position: report from whichever is higher */
            if (__atomic_compare_exchange_n(&b->seen, &seen, pos, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
                uint64_t one = 1;
                while (write(b->fd, &one, sizeof one) < 0 && errno == EINTR) {}
            }
        } else if (LOAD_ACQ(&b->c->owner.state) == SHMQ_STATE_FENCED) {
            struct timespec ts = {0, 5000000};  /* fenced: the wait returns at once; do not spin */
            nanosleep(&ts, NULL);
        }
    }
    helper_done(&b->done);
    return NULL;
}

shmq_pullwake *shmq_pullwake_start(shmq_ctl *c, int fd) {
    shmq_pullwake *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->c = c;
    b->fd = fd;
    if (start_helper(pullwake_run, b) != 0) {
        free(b);
        return NULL;
    }
    pthread_mutex_lock(&helpers_mu);
    b->next = pullwakes;
    pullwakes = b;
    pthread_mutex_unlock(&helpers_mu);
    return b;
}

void shmq_pullwake_arm(shmq_pullwake *b, int64_t seen, int armed) {
    STORE_SC(&b->seen, seen);
    STORE_SC(&b->armed, armed ? 1u : 0u);
    ADD_SC(&b->seq, 1);
    futex_wake(&b->seq, 1);
}

/* Before `c` is unmapped (store/control.py close): every helper thread of this process on it
 * ends, and is waited for, so none wakes later inside the unmapped block. A confirm bridge
 * ends within its slice (50 ms); a pull-wake thread at once (its wait looks at `stop`, and
 * data_seq is bumped and woken: a spurious wake-up, which every sleeper on it re-checks). The
 * structs stay allocated (a late arm from Python writes to them harmlessly) and leave the
 * lists. */
void shmq_helpers_stop(shmq_ctl *c) {
    pthread_mutex_lock(&helpers_mu);
    for (shmq_bridge **pp = &bridges; *pp;) {
        shmq_bridge *b = *pp;
        if (b->c != c) { pp = &b->next; continue; }
        *pp = b->next;
        helper_stop(&b->stop, &b->seq, &b->done);
    }
    for (shmq_pullwake **pp = &pullwakes; *pp;) {
        shmq_pullwake *b = *pp;
        if (b->c != c) { pp = &b->next; continue; }
        *pp = b->next;
        /* it may sleep on data_seq: stop is set before data_seq moves, so the woken wait sees it */
        STORE_SC(&b->stop, 1);
        ADD_SC(&c->pos.data_seq, 1);
        syscall(SYS_futex, &c->pos.data_seq, FUTEX_WAKE_BITSET, INT_MAX, NULL, NULL, FUTEX_BITSET_MATCH_ANY);
        helper_stop(&b->stop, &b->seq, &b->done);
    }
    pthread_mutex_unlock(&helpers_mu);
}
