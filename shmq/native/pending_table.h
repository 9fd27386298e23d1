/*
 * shmq/native/pending_table.h -- a client connection's requests in flight by opaque, as C (the
 * types are pending_table.c's, in shmq.native._answer; the lane's puts, hot_oneway.c and
 * lane_direct.c in shmq.native._oneway, reach the same structs through these inline functions,
 * each module being its own shared object).
 *
 * Why: a windowed async sender paid ~1,200 instructions a message for the waiter's bookkeeping in
 * dicts (RESULTS "Session 11, asyncw2"): an int object per opaque, the segment's dict entry, the
 * connection's ``_pending.update`` of it, the answer's look-up and delete, the timer's set. Here
 * a waiter is one slot of an open-addressed table keyed by the opaque as a C integer, and a
 * lane segment's waiters are two arrays in put order (``Run``) that the loop thread moves into
 * the table in one call.
 *
 * ``Pending`` is the connection's one table (``Connection._pending``): every reader -- the
 * Python answer path, connection_lost, the timers, ``busy``, the C answer path, the caller's
 * direct write -- sees every request in flight there. It has the dict protocol those readers
 * use (get, pop, ``in``, ``[]``, len, values, keys, items, clear, update, iteration, == with a
 * dict); its keys are ints of 64 bits (an opaque is 32).
 *
 * The table: linear probing on a multiplicative (Fibonacci) hash of the opaque, kept at most half
 * full; deletion shifts the run back (no tombstones), so a look-up stops at the first empty
 * slot. Not the opaque itself masked: the sequential opaques in flight would then fill one
 * contiguous run of slots, and a look-up of an opaque no longer there (the timer's look at
 * sends answered seconds ago, the direct writes' sweep) whose slot falls in that run walks all
 * of it (~1,800 instructions a message measured in the async row's timer); hashed, runs stay a
 * few slots long for present and absent keys alike. Every change runs no Python code
 * until the table is whole again (a value's reference is dropped after), so a finalizer that
 * runs then sees a consistent table.
 */
#ifndef SHMQ_PENDING_TABLE_H
#define SHMQ_PENDING_TABLE_H
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int64_t key;
    PyObject *val;  /* NULL: the slot is empty */
} pt_slot;

typedef struct {
    PyObject_HEAD
    Py_ssize_t used;
    size_t mask;     /* slots - 1 (a power of two), 0 while slots is NULL */
    unsigned shift;  /* 64 - log2(slots): the hash's top bits index the table */
    pt_slot *slots;  /* NULL until the first entry */
} pt_table;

/* a lane segment's async sends, in put order: keys[i] its opaque, vals[i] its waiter; once
 * moved into a table (pt_move) vals is NULL and the keys stay, for the timer (pt_table.left) */
typedef struct {
    PyObject_HEAD
    Py_ssize_t n, cap;
    int64_t *keys;
    PyObject **vals;
} pt_run;

#define PT_MIN 16

/* the slot a key hashes to (the table has slots) */
static inline size_t pt_home(const pt_table *t, int64_t key) {
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ULL) >> t->shift);
}

/* the slot of key, or -1 */
static inline Py_ssize_t pt_find(const pt_table *t, int64_t key) {
    if (!t->slots) return -1;
    for (size_t i = pt_home(t, key);; i = (i + 1) & t->mask) {
        const pt_slot *s = &t->slots[i];
        if (!s->val) return -1;
        if (s->key == key) return (Py_ssize_t)i;
    }
}

/* the table at `cap` slots (a power of two > used * 2): 0, or -1 with MemoryError (unchanged) */
static inline int pt_resize(pt_table *t, size_t cap) {
    pt_slot *n = PyMem_Calloc(cap, sizeof(pt_slot)), *old = t->slots;
    if (!n) { PyErr_NoMemory(); return -1; }
    size_t oldn = old ? t->mask + 1 : 0;
    unsigned bits = 0;
    while (((size_t)1 << bits) < cap) bits++;
    t->slots = n, t->mask = cap - 1, t->shift = 64 - bits;
    for (size_t j = 0; j < oldn; j++) {
        if (!old[j].val) continue;
        size_t i = pt_home(t, old[j].key);
        while (n[i].val) i = (i + 1) & t->mask;
        n[i] = old[j];
    }
    PyMem_Free(old);
    return 0;
}

/* room for `more` entries without a resize: 0, or -1 with MemoryError */
static inline int pt_reserve(pt_table *t, Py_ssize_t more) {
    size_t need = (size_t)(t->used + more) * 2, cap = t->slots ? t->mask + 1 : 0;
    if (need < cap) return 0;
    size_t c = cap ? cap : PT_MIN;
    while (c <= need) c <<= 1;
    return pt_resize(t, c);
}

/* put key -> val, val's reference stolen (room reserved: cannot fail); the value key had
 * before (to be released by the caller once the table is whole), or NULL */
static inline PyObject *pt_store(pt_table *t, int64_t key, PyObject *val) {
    size_t i = pt_home(t, key);
    for (;; i = (i + 1) & t->mask) {
        pt_slot *s = &t->slots[i];
        if (!s->val) {
            s->key = key, s->val = val;
            t->used++;
            return NULL;
        }
        if (s->key == key) {
            PyObject *old = s->val;
            s->val = val;
            return old;
        }
    }
}

/* put key -> val (a new reference taken): 0, or -1 with MemoryError (nothing changed) */
static inline int pt_put(pt_table *t, int64_t key, PyObject *val) {
    if (pt_reserve(t, 1)) return -1;
    PyObject *old = pt_store(t, key, Py_NewRef(val));
    Py_XDECREF(old);
    return 0;
}

/* remove slot i (backward shift: every entry after it in its probe run that may move back does);
 * its value, whose reference passes to the caller. The table shrinks when a burst has left it
 * mostly empty (a failed shrink keeps it as it is). */
static inline PyObject *pt_take_at(pt_table *t, size_t i) {
    pt_slot *sl = t->slots;
    PyObject *v = sl[i].val;
    for (size_t j = i;;) {
        j = (j + 1) & t->mask;
        if (!sl[j].val) break;
        size_t h = pt_home(t, sl[j].key);
        /* the entry at j may fill the hole at i unless its home lies cyclically in (i, j] */
        int stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (!stays) sl[i] = sl[j], i = j;
    }
    sl[i].val = NULL;
    t->used--;
    size_t cap = t->mask + 1;
    if (cap > 1024 && (size_t)t->used * 8 < cap && pt_resize(t, cap / 2)) PyErr_Clear();
    return v;
}

/* remove key: its value (the caller's reference), or NULL when it is not there */
static inline PyObject *pt_take(pt_table *t, int64_t key) {
    Py_ssize_t i = pt_find(t, key);
    return i < 0 ? NULL : pt_take_at(t, (size_t)i);
}

/* append (key, w) to a run (a new reference to w): 0, or -1 with MemoryError */
static inline int pt_run_add(pt_run *r, int64_t key, PyObject *w, Py_ssize_t hint) {
    if (r->n == r->cap) {
        Py_ssize_t cap = r->cap ? r->cap * 2 : (hint > 16 ? hint : 16);
        int64_t *k = PyMem_Realloc(r->keys, (size_t)cap * sizeof(int64_t));
        if (k) r->keys = k;
        PyObject **v = k ? PyMem_Realloc(r->vals, (size_t)cap * sizeof(PyObject *)) : NULL;
        if (!v) { PyErr_NoMemory(); return -1; }
        r->vals = v, r->cap = cap;
    }
    r->keys[r->n] = key;
    r->vals[r->n++] = Py_NewRef(w);
    return 0;
}

/* drop a run's last entry (its waiter's reference released) */
static inline void pt_run_pop(pt_run *r) {
    PyObject *w = r->vals[--r->n];
    Py_DECREF(w);
}
#endif
