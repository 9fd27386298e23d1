/*
 * shmq/native/hot_wait.c -- the local pull thread's wake-up of shmq.native._hot (module init in
 * hot.c): ``wait_read``, shmq_wait_queues (core_wait.c) with its adaptive spin and the GIL
 * dropped for the sleep, then the answered queue's read (hot.c's shmq_read_queue) in the same
 * call; ``bind_wait`` gives it the core's function (hot.c keeps the record walk and decode).
 */
#include "hot.h"
#include <limits.h>
#include <time.h>
#include "core.h"

/* the type is core.h's own declaration, so the call cannot drift from the definition */
typedef __typeof__(shmq_wait_queues) wait_fn;
static wait_fn *f_wait;

/* bind_wait(address of shmq_wait_queues): once, at import of shmq.native */
static PyObject *hot_bind_wait(PyObject *self, PyObject *arg) {
    void *p = PyLong_AsVoidPtr(arg);
    if (!p) return PyErr_Occurred() ? NULL : (PyErr_SetString(PyExc_ValueError, "null function"), NULL);
    f_wait = (wait_fn *)p;
    Py_RETURN_NONE;
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* With keep_gil, the first GIL_HOLD_NS of the spin keep the GIL: taking it back after a spin
 * that found news cost the e2e consumer ~0.5 us per message (its lines are cold by then), which a
 * wake-up caught in that part skips (at 10,000 msgs/s the next message comes within it). Then it
 * is dropped for the rest of the spin and the futex sleep, and not taken again until the wait
 * ends: a thread that wants it meanwhile gets it at that drop (or, as behind any running Python
 * thread, by CPython's drop request, honoured once this thread runs Python again). It is never
 * dropped and taken back in a loop: each drop wakes a waiting thread, which restarts its
 * switch-interval wait and, losing the race for the GIL to the spinner, would never ask for it.
 * Only for a pull thread that runs the listener itself (consume_threads=0), never one that hands
 * messages to consume threads. */
#define GIL_HOLD_NS 200000LL

/* The spin adapts to the gaps between this pull thread's wake-ups (one local pull thread per
 * consumer and store): a wait spins only when the previous wait that found news started within
 * 1.5x the spin of this one's start (the extra half: a gap measured through a futex sleep
 * includes the wake-up's own latency); after a timeout, or news later than that, it sleeps at
 * once. At a paced 10,000 msgs/s the gap is ~100 us: the default 50 us spin never caught a
 * message and was ~40 of the consumer's ~65 us of CPU per message, which put the local e2e
 * row's processes above the CPU this VM's host lets it have per 100 ms (both vCPUs then stop for
 * 7-37 ms: the row's p99; RESULTS, "Session 8, tail"). Short gaps (bursts, high rates) spin as
 * before, and a busy-polling consumer (a spin of seconds) always spins.
 * The gap runs from start to start (so it includes the delivery after a wake-up), so a wait
 * reads the clock once, at its start, and not after the wake-up: on this VM a read costs
 * 140-430 ns (RESULTS, "Session 11, local11"), and the wake-up's path to the listener then has
 * none; the same reading is the start of the spin and of the timeout below (core_wait.c). */
#define NO_NEWS INT64_MIN
static __thread int64_t news_start;   /* the start of the last wait that found news; 0: none yet */

static int wait_queues_once(shmq_ctl *ctl, int64_t *const *next, const int64_t *offs, int n, int start, int64_t *seen,
                            int hold, const int32_t *poke, int32_t poked, int64_t spin, int64_t timeout, int keep_gil,
                            int64_t t0);

/* Under a flood the pull thread delivers back to back, and each wake-up took what one queue had
 * gathered since its last read (RESULTS, "Session 12, localrow": 5-7 messages a wake-up in the
 * local send() row, whose ~15,800-instruction wake-up, one Python turn and listener call per queue
 * read, made the consumer's CPU per message 3-4x its batch-32 cost, on the two CPUs the producer
 * needs too). So a wait that answers a queue with fewer than half a read's worth of new entries
 * first sleeps LINGER_NS, and the read then takes what came meanwhile, when both:
 * - the thread is turning back to back: the previous wait with news started less than
 *   LINGER_GAP_NS before this one;
 * - the queue's news comes at one entry per LINGER_NS or faster: its new entries since its last
 *   answer, over the time since then (so a backlog left by a stall of a slow stream, read back to
 *   back, does not linger: its entries are old).
 * The sleep is a timed one with the GIL dropped, not a futex wait, so no append pays a wake for
 * it; one linger a round of the queues (the others gathered during it too). The answer is the same
 * queue, only later. A paced stream below 1/LINGER_NS a queue (the local e2e row: 2,500/s a queue)
 * never lingers, nor a read of one message (pull batch 1), nor a queue whose read is half full.
 * linger_tune() changes both times (tests). */
#define LINGER_GAP_NS 30000LL
#define LINGER_NS 50000LL
#define LINGER_QUEUES 64                /* queue indexes whose last answer is remembered */
static int64_t linger_gap = LINGER_GAP_NS, linger_ns = LINGER_NS;
static __thread int64_t answered_at[LINGER_QUEUES];  /* the start of the wait that last answered queue i */
static __thread int linger_skip;        /* answers left in this round before the next linger */
static __thread long long lingers;      /* this thread's lingers (linger_tune's answer) */

static void linger(void) {
    struct timespec ts = {(time_t)(linger_ns / 1000000000LL), (long)(linger_ns % 1000000000LL)};
    Py_BEGIN_ALLOW_THREADS
    clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);  /* EINTR: read what is there */
    Py_END_ALLOW_THREADS
    lingers++;
}

static int wait_queues(shmq_ctl *ctl, int64_t *const *next, const int64_t *offs, int n, int start, int64_t *seen,
                       int hold, const int32_t *poke, int32_t poked, int64_t spin, int64_t timeout, int keep_gil,
                       int64_t t0, int64_t want) {
    int flood = news_start != NO_NEWS && news_start && t0 - news_start < linger_gap;
    if (news_start == NO_NEWS || (news_start && t0 - news_start > spin + spin / 2)) spin = 0;
    int i = wait_queues_once(ctl, next, offs, n, start, seen, hold, poke, poked, spin, timeout, keep_gil, t0);
    if (i == -1) news_start = NO_NEWS;
    if (i < 0) return i;
    news_start = t0;
    if (i >= LINGER_QUEUES) return i;
    int64_t last = answered_at[i];
    answered_at[i] = t0;
    if (!flood || !last || i == hold || !next[i]) return i;
    int64_t fresh = __atomic_load_n(next[i], __ATOMIC_ACQUIRE) - offs[i];
    if (fresh >= want || fresh * linger_ns < t0 - last) return i;
    if (linger_skip > 0) {
        linger_skip--;
        return i;
    }
    linger();
    linger_skip = n - 1;
    answered_at[i] = t0 + linger_ns;
    /* loaded before the read, as the wait's own load (the rule of the queue it holds) */
    *seen = __atomic_load_n(&ctl->pos.commit_pos, __ATOMIC_ACQUIRE);
    return i;
}

static int wait_queues_once(shmq_ctl *ctl, int64_t *const *next, const int64_t *offs, int n, int start, int64_t *seen,
                            int hold, const int32_t *poke, int32_t poked, int64_t spin, int64_t timeout, int keep_gil,
                            int64_t t0) {
    int64_t elapsed = 0;
    if (keep_gil) {
        int64_t held = spin < timeout ? spin : timeout;
        if (held > GIL_HOLD_NS) held = GIL_HOLD_NS;
        /* held 0 (no spin, or a zero timeout): one look, which never sleeps, still with the GIL */
        int i = f_wait(ctl, next, offs, n, start, seen, hold, poke, poked, held, held, t0);
        if (i != -1) return i;
        if (held <= 0 && timeout <= 0) return i;
        if (held > 0) elapsed = mono_ns() - t0;   /* one look alone takes no time worth a reading */
    }
    int64_t left = timeout - elapsed;
    if (keep_gil && left <= 0) return -1;
    int i;
    Py_BEGIN_ALLOW_THREADS
    i = f_wait(ctl, next, offs, n, start, seen, hold, poke, poked, spin > elapsed ? spin - elapsed : 0,
               left > 0 ? left : 0, t0 + elapsed);
    Py_END_ALLOW_THREADS
    return i;
}

/* wait_read(ctl, next, offs, n, start, seen, hold, poke, poked, spin_ns, timeout_ns, states, max_count,
 *           keep_gil, look_ns) -> (i, read)
 * shmq_wait_queues (core_wait.c), sleeping without the GIL, spinning with it when keep_gil (wait_queues above;
 * ctl, next, offs, seen, poke: addresses, as int; the arrays stay owned by the caller, who keeps
 * them alive), then, when it answers a queue
 * i >= 0 whose states[i] is a QueueReader state, that queue's shmq_read_queue(states[i], offs[i],
 * max_count) with the GIL: the local pull thread's wake-up and read in one call.
 * read is None otherwise (i < 0, no state, or read_queue's None). Reads only; the caller decides
 * whether the queue may be delivered to, and may drop what was read. look_ns: a CLOCK_MONOTONIC
 * time (time.monotonic_ns), or 0: a wait that starts at or after it answers -3 at once (the
 * caller's queue set is to be looked at again), so the caller reads no clock of its own. */
static PyObject *hot_wait_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 15 || !PyList_CheckExact(args[11])) {
        PyErr_SetString(PyExc_TypeError, "wait_read(ctl, next, offs, n, start, seen, hold, poke, poked, spin_ns, "
                                         "timeout_ns, states: list, max_count, keep_gil, look_ns)");
        return NULL;
    }
    if (!f_wait) { PyErr_SetString(PyExc_RuntimeError, "bind_wait first"); return NULL; }
    shmq_ctl *ctl = (shmq_ctl *)hot_ptr(args[0]);
    int64_t *const *next = (int64_t *const *)hot_ptr(args[1]);
    const int64_t *offs = (const int64_t *)hot_ptr(args[2]);
    long long n = hot_ll(args[3]), start = hot_ll(args[4]), hold = hot_ll(args[6]);
    int64_t *seen = (int64_t *)hot_ptr(args[5]);
    const int32_t *poke = (const int32_t *)hot_ptr(args[7]);
    long long poked = hot_ll(args[8]);
    long long spin = hot_ll(args[9]), timeout = hot_ll(args[10]);
    long long max_count = hot_ll(args[12]), look = hot_ll(args[14]);
    int keep_gil = PyObject_IsTrue(args[13]);
    PyObject *states = args[11];
    if (keep_gil < 0 || PyErr_Occurred()) return NULL;
    if (!ctl || !next || !offs || !seen || n < 1 || n > PyList_GET_SIZE(states) || n > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "wait_read: null address or a queue count the states do not cover");
        return NULL;
    }
    int64_t t0 = mono_ns();
    int i = look > 0 && t0 >= look ? -3
            : wait_queues(ctl, next, offs, (int)n, (int)start, seen, (int)hold, poke, (int32_t)poked, spin, timeout,
                          keep_gil, t0, max_count / 2);
    PyObject *read = NULL;
    if (i >= 0 && i < n && PyList_GET_ITEM(states, i) != Py_None) {
        read = shmq_read_queue(PyList_GET_ITEM(states, i), offs[i], max_count);
        if (!read) return NULL;
    } else {
        read = REF(Py_None);
    }
    return tuple_of(PyLong_FromLong(i), read, NULL, 2);
}

/* linger_tune(gap_ns, linger_ns) -> this thread's lingers so far; 0 for either: keep it, -1: its default */
static PyObject *hot_linger_tune(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "linger_tune(gap_ns, linger_ns)"); return NULL; }
    long long gap = PyLong_AsLongLong(args[0]), ln = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) return NULL;
    if (gap) linger_gap = gap < 0 ? LINGER_GAP_NS : gap;
    if (ln) linger_ns = ln < 0 ? LINGER_NS : ln;
    return PyLong_FromLongLong(lingers);
}

static PyMethodDef wait_methods[] = {
    {"linger_tune", (PyCFunction)(void (*)(void))hot_linger_tune, METH_FASTCALL,
     "linger_tune(gap_ns, linger_ns) -> this thread's lingers (0: keep, -1: the default)"},
    {"bind_wait", (PyCFunction)hot_bind_wait, METH_O, "bind_wait(address of shmq_wait_queues)"},
    {"wait_read", (PyCFunction)(void (*)(void))hot_wait_read, METH_FASTCALL,
     "wait_read(ctl, next, offs, n, start, seen, hold, poke, poked, spin_ns, timeout_ns, states, max_count, keep_gil, "
     "look_ns) "
     "-> (queue index or a negative answer, read_queue's answer or None)"},
    {NULL, NULL, 0, NULL},
};

int shmq_wait_add(PyObject *m) { return PyModule_AddFunctions(m, wait_methods); }
