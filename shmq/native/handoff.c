/*
 * shmq/native/handoff.c -- the wake-up of a client's consume threads (client/handoff.py).
 *
 * Why C: a consume thread woken while the waker holds the GIL runs, finds the GIL taken,
 * sleeps on it and is woken a second time when the loop thread drops it (and the loop thread
 * is often preempted at the wake-up itself): measured with perf on a caught-up TCP consumer,
 * a third of its time went to those switches. cffi calls these functions with the GIL
 * released, so shmq_handoff_epoll wakes the consume threads the loop's turn owes only once
 * the GIL is free, and then sleeps in epoll_wait as the selector would have: a woken thread
 * takes the GIL at once, one switch per hand-off.
 *
 * The lost-wake-up rule: a poster bumps seq after the task is queued, then reads waiters; a
 * waiter counts itself in waiters, then sleeps only while seq is still what it read before it
 * looked at the queue (FUTEX_WAIT checks that atomically). Sequentially consistent atomics on
 * both sides, so either the poster sees the waiter or the waiter sees the new seq.
 */
#define _GNU_SOURCE
#include "handoff.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EPOLL_BATCH 64

int shmq_handoff_wait(shmq_handoff *h, uint32_t seen, int timeout_ms) {
    int r = 0;
    __atomic_add_fetch(&h->waiters, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&h->seq, __ATOMIC_SEQ_CST) == seen) {
        struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
        if (syscall(SYS_futex, &h->seq, FUTEX_WAIT_PRIVATE, seen, timeout_ms < 0 ? NULL : &ts, NULL, 0) < 0)
            r = -errno;
        /* back from the futex, however: this thread looks at the queue next, so the mark a
         * post's wake-up set is cleared here, before that look (the loop's pay in
         * shmq_handoff_epoll relies on that order). A mark, not a count: a count must balance
         * exactly or a hand-over waits for the look for good; a mark any returning thread
         * clears can at worst let the loop wake one thread more. */
        __atomic_store_n(&h->woken, 0, __ATOMIC_SEQ_CST);
    }
    __atomic_sub_fetch(&h->waiters, 1, __ATOMIC_SEQ_CST);
    return r;
}

/* Wake up to n of the threads asleep (seq already bumped; only the loop thread wakes). woken
 * is set before the FUTEX_WAKE, so a woken thread's clearing (shmq_handoff_wait) always comes
 * after it, and cleared again when the call woke nobody. */
static void wake(shmq_handoff *h, int n) {
    int w = n > 0 ? __atomic_load_n(&h->waiters, __ATOMIC_SEQ_CST) : 0;
    if (w <= 0)  /* no thread asleep, or none to wake: no system call */
        return;
    int k = n < w ? n : w;
    __atomic_store_n(&h->woken, 1, __ATOMIC_SEQ_CST);
    if (syscall(SYS_futex, &h->seq, FUTEX_WAKE_PRIVATE, k, NULL, NULL, 0) <= 0)
        __atomic_store_n(&h->woken, 0, __ATOMIC_SEQ_CST);
}

void shmq_handoff_post(shmq_handoff *h, int n) {
    __atomic_add_fetch(&h->seq, 1, __ATOMIC_SEQ_CST);
    wake(h, n);
}

/* How long spare tasks wait at most for a thread of their own (HandoffSelector.respread, at the
 * loop's first turn after it, wakes a thread for each one no thread took by then): the delay a
 * task can see behind a consume thread whose listener is slow. */
#define SPREAD_US 1000

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Pay the wake-ups the loop's turn owes for hs[0..nh), then epoll_wait; fds/evs get what
 * Python's epoll.poll returns. -errno on failure. (posts, spare, force and due are the loop
 * thread's own: no atomics.)
 *
 * A consume thread takes the next queued task when it ends one, so a thread woken per task
 * is a wake-up too many when several tasks came in one turn (the four
 * queues' answers of one read: four threads woken, three of them then waiting on the GIL the
 * first holds). So: one thread is woken a turn, and the rest are "spare". Nor is one woken
 * while a thread an earlier turn (or another poster) woke has not yet come back from its futex
 * wait (woken > 0): that thread has not looked at the queue yet, so it finds these tasks too,
 * which are spare as well. On two busy CPUs a woken thread often waits for a CPU past the next
 * answer's turn, and a second thread woken then found the queue empty and slept again (a
 * timeline of the sync + PushConsumer row's futex calls: bench/RESULTS.md, session 12).
 * (Not none while a thread is awake: the task then waited for that thread's current task, or for it to get a CPU,
 * and the traced hand-over hop's p50 rose, median 322 -> 402 µs: bench/RESULTS.md, session 11.) SPREAD_US after the first of them, the loop's next turn looks (*spread is 1 when it
 * is time: this call does not sleep then, and it sleeps no longer than that before; 2 while
 * spare tasks wait for their look; 3 when this call set one, so handoff.py notes the queue's
 * head by then): a thread is woken for each spare task still queued if none was taken since
 * (the threads are stuck in listeners), else the look is set again (handoff.py's respread).
 * seq is bumped by every pay, a wake or not: a consume thread on its way to sleep then finds
 * the new task (handoff.c's rule above). */
int shmq_handoff_epoll(int epfd, shmq_handoff **hs, int nh, int timeout_ms, int *fds, uint32_t *evs, int maxevents,
                       int32_t *spread) {
    int64_t now = 0, left = -1;  /* µs until the first spare look, -1: none */
    int set = 0;                 /* a look set by this call (handoff.py's marks) */
    for (int i = 0; i < nh; i++) {
        shmq_handoff *h = hs[i];
        if (h == NULL)
            continue;
        if (h->force > 0) {
            int n = h->force;
            h->force = 0;
            shmq_handoff_post(h, n);
        }
        if (h->posts > 0) {
            int n = h->posts;
            h->posts = 0;
            __atomic_add_fetch(&h->seq, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&h->woken, __ATOMIC_SEQ_CST) > 0) {
                h->spare += n;  /* a thread woken before has not looked at the queue yet */
            } else {
                h->spare += n - 1;
                wake(h, 1);
            }
        }
        if (h->spare <= 0) {
            h->due = 0;
            continue;
        }
        if (!now)
            now = now_us();
        if (!h->due) {
            h->due = now + SPREAD_US;
            set = 1;
        }
        int64_t l = h->due > now ? h->due - now : 0;
        if (left < 0 || l < left)
            left = l;
    }
    /* none / look now / later (still the C wait's turn) / later, a look set now */
    *spread = left < 0 ? 0 : left == 0 ? 1 : set ? 3 : 2;
    if (left >= 0) {
        int ms = (int)((left + 999) / 1000);  /* epoll's ms, rounded up: never before the look is due */
        if (timeout_ms < 0 || timeout_ms > ms)
            timeout_ms = ms;
    }
    struct epoll_event buf[EPOLL_BATCH];
    if (maxevents > EPOLL_BATCH)
        maxevents = EPOLL_BATCH;  /* level-triggered: the rest is answered by the next call */
    if (maxevents < 1)
        maxevents = 1;
    int n = epoll_wait(epfd, buf, maxevents, timeout_ms);
    if (n < 0)
        return -errno;
    for (int i = 0; i < n; i++) {
        fds[i] = buf[i].data.fd;
        evs[i] = buf[i].events;
    }
    return n;
}
