/*
 * shmq/native/handoff.h -- the consume pool's hand-off word (client/handoff.py): a client's
 * loop thread gives pulled messages to consume threads with no GIL held at the wake-up.
 * The CDEF block is fed to cffi with core.h's.
 */
#ifndef SHMQ_HANDOFF_H
#define SHMQ_HANDOFF_H
#include <stdint.h>

/* CDEF-BEGIN */
/* seq: bumped by every post (the futex word); waiters: consume threads inside
 * shmq_handoff_wait; woken: 1 from a post's wake-up until a thread comes back from its futex
 * wait (and so looks at the task queue next), else 0. The loop thread's own fields (only
 * that thread reads or writes them, in Python or in shmq_handoff_epoll): posts: tasks it
 * handed over since its last sleep; spare: those of them it woke no thread for (the one
 * thread woken a turn takes them in turn); due: when spare tasks still
 * queued get a thread each (CLOCK_MONOTONIC µs; 0: no spare); force: wake-ups to pay at once
 * (HandoffSelector.respread's, for those). */
typedef struct shmq_handoff {
    uint32_t seq; int32_t waiters; int32_t posts; int32_t spare; int32_t force; int32_t woken; int64_t due;
} shmq_handoff;
int shmq_handoff_wait(shmq_handoff *h, uint32_t seen, int timeout_ms);
void shmq_handoff_post(shmq_handoff *h, int n);
int shmq_handoff_epoll(int epfd, shmq_handoff **hs, int nh, int timeout_ms, int *fds, uint32_t *evs, int maxevents,
                       int32_t *spread);
/* CDEF-END */

#endif
