/*
 * shmq/native/hot.c -- module shmq.native._hot: the local consumer's record walk (``read``:
 * ConsumeQueue entries -> records -> MessageExt objects, read-only, with the GIL held) and the
 * module's init; the same decode over a TCP pull's body (``records``) and a broker worker's
 * unfiltered pull answer, the records copied from the mapping (``read_raw``). The local pull
 * thread's wake-up that ends in a queue read (``wait_read``) is hot_wait.c; the producer's half
 * (the local send's append, LocalSend, encode_batch, and why they keep the GIL) is hot_send.c;
 * Message's C base is hot_message.c.
 */
#include "hot.h"
#include "core.h"
#include "hot_message.h"
#include "queue_read.h"
#include "pull_records.h"

/* ---- the consumer's record walk ---------------------------------------------------------
 * read(cq, at, qoff, count, log, log_base, positions, next_offset, topic, topic_utf8, broker)
 *   -> (messages, used, elsewhere)
 * walks up to ``count`` ConsumeQueue entries of the mapping ``cq`` from byte ``at`` (queue offset
 * ``qoff``) and decodes each record, found in the CommitLog mapping ``log`` (whose first byte is
 * commit-log offset ``log_base``), straight into a MessageExt (the class and its slots bound by
 * bind_ext). ``positions`` and ``next_offset`` are the addresses of the store's shmq_positions
 * and of the queue's published next offset, read here with acquire loads: an entry is used only
 * below that next offset and when its record ends at or before the commit position (the
 * visibility invariant of store/reader.py). It stops there, at an empty entry, an expired
 * record (below min_pos), a record that does not check (magic, lengths) or a compressed one,
 * and answers how many entries it used, and ``elsewhere``: the commit-log offset of the record
 * it stopped at when that one is outside ``log`` (the caller maps its file and goes on), else -1.
 * The caller reads what is left (and raises on a bad record) through the Python reader. Never
 * sleeps, never writes. */
/* MessageExt's object slots, in its __slots__ order; its numeric fields are its C base's
 * (shmq_ext_base, hot_ext.c), written here as C values */
enum { X_TOPIC, X_BODY, X_TAGS, X_KEYS, X_PROPS, X_MSGID, X_OFFID, X_BROKER, X_BORN, X_STORE, X_RAW, X_NSLOTS };
static slotted ext;
static PyObject *ext_lazy;

/* Freed MessageExt objects of the exact bound class, kept for the next decode (as hot_message.c
 * keeps Messages): a consumer makes and frees one per message, and the allocator's malloc and
 * free and subtype_dealloc's walk over the slot descriptors cost more than filling it. Kept
 * cleared, untracked by the GC and without their reference to the class; only ever touched with
 * the GIL held. Every slot is NULL but the body and the properties, which may still hold the
 * bytes object they held when that message died if nothing else referenced it (its reference
 * count was 1: no other object can ever see it again). The next decode writes its own bytes into
 * such an object of the same length (reuse_bytes) instead of freeing one and allocating another:
 * a body and a properties text per message, two allocations and two frees. */
#define EXT_FREE_MAX 64
static PyObject *ext_free[EXT_FREE_MAX];
static int n_ext_free;
static destructor ext_subtype_dealloc; /* CPython's subtype_dealloc, the class's own before bind */

#define EXT_SLOT(o, k) (*(PyObject **)((char *)(o) + ext.off[k]))

/* v (a slot's value) can be kept for reuse: an exact bytes object only the dying message held */
static inline int reusable(PyObject *v) { return v && PyBytes_CheckExact(v) && Py_REFCNT(v) == 1; }

/* n bytes from src as a bytes object: *kept (a bytes object no one else references, or NULL) with
 * them written in when it has that length (its cached hash reset), else a new one; *kept is
 * taken over either way */
static inline PyObject *reuse_bytes(PyObject *kept, const uint8_t *src, Py_ssize_t n) {
    if (kept && Py_SIZE(kept) == n) {
        memcpy(PyBytes_AS_STRING(kept), src, (size_t)n);
        ((PyBytesObject *)kept)->ob_shash = -1;
        return kept;
    }
    Py_XDECREF(kept);
    return PyBytes_FromStringAndSize((const char *)src, n);
}

/* slot k := v (a new reference), unless it holds v already (kept by ext_dealloc); the value it
 * replaces is a kept one (a str, None, the marker), whose release runs no code */
static inline void keep_set(PyObject *o, int k, PyObject *v) {
    PyObject *old = EXT_SLOT(o, k);
    if (old != v) {
        EXT_SLOT(o, k) = Py_NewRef(v);
        Py_XDECREF(old);
    }
}

static PyObject *ext_new(void) {
    if (!n_ext_free) return ext.cls->tp_alloc(ext.cls, 0);
    PyObject *o = ext_free[--n_ext_free];
    PyObject_Init(o, ext.cls);   /* the type (and the class's reference), a fresh reference count */
    PyObject_GC_Track(o);
    return o;
}

/* The bound class's dealloc in place of subtype_dealloc, for a class that adds nothing but its
 * X_NSLOTS slots to ExtBase (checked at bind): untrack, clear the slots, keep or free, release
 * the class. subtype_dealloc also calls it as the base dealloc of a subclass's instance (after
 * clearing the subclass's own part; it then leaves the class's reference to this base, a heap
 * type's). Given a __del__ later, the class goes back to subtype_dealloc. */
/* What a free-listed object keeps in slot k for the next decode, which writes the same value
 * there, so neither side touches a reference count: the lazy marker (tags, keys, msg_id), None
 * (offset msg id, raw), a str (topic, broker: decode compares it with the queue's), and the body
 * and properties bytes nothing else referenced (reuse_bytes). Releasing any of them later runs
 * no code. */
static inline int keepable(int k, PyObject *v) {
    switch (k) {
    case X_TAGS: case X_KEYS: case X_MSGID: return v == ext_lazy;
    case X_OFFID: case X_RAW: return v == Py_None;
    case X_TOPIC: case X_BROKER: return PyUnicode_CheckExact(v);
    case X_BODY: case X_PROPS: return reusable(v);
    default: return 0;
    }
}

/* slot k of a dying message cleared, unless keep and its value is one to keep (k a constant:
 * the switch above is resolved where this is inlined) */
static inline void drop_slot(PyObject *self, int k, int keep) {
    PyObject **s = &EXT_SLOT(self, k);
    if (*s && !(keep && keepable(k, *s))) Py_CLEAR(*s);
}

static void ext_dealloc(PyObject *self) {
    PyTypeObject *t = Py_TYPE(self);
    if (t == ext.cls && (t->tp_finalize || t->tp_del)) {
        t->tp_dealloc = ext_subtype_dealloc;
        ext_subtype_dealloc(self);
        return;
    }
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, ext_dealloc)
    /* ext.off: the class's slots (a subclass's instance has them at the same offsets; its own
     * part is subtype_dealloc's, cleared before) */
    int keep = t == ext.cls && n_ext_free < EXT_FREE_MAX;
    drop_slot(self, X_TOPIC, keep); drop_slot(self, X_BODY, keep); drop_slot(self, X_TAGS, keep);
    drop_slot(self, X_KEYS, keep); drop_slot(self, X_PROPS, keep); drop_slot(self, X_MSGID, keep);
    drop_slot(self, X_OFFID, keep); drop_slot(self, X_BROKER, keep); drop_slot(self, X_BORN, keep);
    drop_slot(self, X_STORE, keep); drop_slot(self, X_RAW, keep);
    if (t == ext.cls && n_ext_free < EXT_FREE_MAX) {  /* again: a clear above may have run code */
        ext_free[n_ext_free++] = self;
    } else {
        for (int k = 0; k < X_NSLOTS; k++) Py_CLEAR(EXT_SLOT(self, k));   /* what was kept: no code runs */
        t->tp_free(self);
    }
    Py_DECREF(t);
    Py_TRASHCAN_END
}

/* the free list and dealloc for the class just bound: only a heap type of exactly ExtBase plus
 * its X_NSLOTS slots (no __dict__, __weakref__ or finalizer); any other keeps CPython's */
static void ext_take_dealloc(void) {
    PyTypeObject *t = ext.cls;
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_base != &shmq_ext_base_type || t->tp_dictoffset ||
        t->tp_weaklistoffset || t->tp_finalize || t->tp_del || t->tp_dealloc == ext_dealloc ||
        t->tp_basicsize != (Py_ssize_t)(sizeof(shmq_ext_base) + X_NSLOTS * sizeof(PyObject *)))
        return;
    ext_subtype_dealloc = t->tp_dealloc;
    t->tp_dealloc = ext_dealloc;
}

/* bind_ext(MessageExt, slot descriptors in __slots__ order, the "not derived yet" marker) */
static PyObject *hot_bind_ext(PyObject *self, PyObject *args) {
    PyObject *lazy;
    /* a class bound before goes back to CPython's dealloc (its slots are not the new class's) */
    while (n_ext_free) {
        PyObject *o = ext_free[--n_ext_free];
        for (int k = 0; k < X_NSLOTS; k++) Py_CLEAR(EXT_SLOT(o, k));   /* what it kept (ext.off: the old class's) */
        PyObject_GC_Del(o);
    }
    if (ext.cls && ext.cls->tp_dealloc == ext_dealloc) ext.cls->tp_dealloc = ext_subtype_dealloc;
    if (bind_slots(&ext, args, X_NSLOTS, &lazy)) return NULL;
    Py_XSETREF(ext_lazy, lazy);
    if (!PyType_IsSubtype(ext.cls, &shmq_ext_base_type)) {  /* decode writes the C fields */
        Py_CLEAR(ext.cls);
        PyErr_SetString(PyExc_TypeError, "bind_ext: the class must derive from ExtBase");
        return NULL;
    }
    ext_take_dealloc();
    Py_RETURN_NONE;
}

static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v);
}
static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v);
}


/* The 8-byte born / store host of the record before, kept to be handed out again: a consumer's
 * records mostly come from a few producers and always from one store, and a bytes object is
 * immutable, so an equal one is shared instead of allocated per message. Only touched with the
 * GIL held. */
static PyObject *last_born, *last_store;

static PyObject *host_bytes(PyObject **last, const uint8_t *p) {
    if (*last && memcmp(PyBytes_AS_STRING(*last), p, 8) == 0) return REF(*last);
    PyObject *b = PyBytes_FromStringAndSize((const char *)p, 8);
    if (b) Py_XSETREF(*last, REF(b));
    return b;
}

/* one checked record -> a MessageExt (NULL with an exception set when out of memory) */
static PyObject *decode(const uint8_t *r, uint32_t total, PyObject *topic, const char *tu, Py_ssize_t tlen,
                        PyObject *broker) {
    int32_t blen = (int32_t)rd32(r + SHMQ_R_BODYLEN);
    const uint8_t *t = r + SHMQ_R_BODYLEN + 4 + blen;
    uint32_t rtl = t[0];
    const uint8_t *pp = t + 1 + rtl;
    uint32_t plen = ((uint32_t)pp[0] << 8) | pp[1];
    PyObject *o = ext_new();
    if (!o) return NULL;
    /* a reused object's kept values (keepable): the bytes are taken here, the rest written over */
    PyObject *kb = EXT_SLOT(o, X_BODY), *kp = EXT_SLOT(o, X_PROPS);
    EXT_SLOT(o, X_BODY) = EXT_SLOT(o, X_PROPS) = NULL;
    if ((Py_ssize_t)rtl == tlen && memcmp(t + 1, tu, rtl) == 0) {
        keep_set(o, X_TOPIC, topic);
    } else {
        PyObject *u = PyUnicode_DecodeUTF8((const char *)t + 1, rtl, "replace");
        if (!u) goto fail;
        Py_XSETREF(EXT_SLOT(o, X_TOPIC), u);
    }
    SET(ext, o, X_BODY, reuse_bytes(kb, r + SHMQ_R_BODYLEN + 4, blen));
    kb = NULL;
    keep_set(o, X_TAGS, ext_lazy);
    keep_set(o, X_KEYS, ext_lazy);
    SET(ext, o, X_PROPS, reuse_bytes(kp, pp + 2, plen));
    kp = NULL;
    keep_set(o, X_MSGID, ext_lazy);
    keep_set(o, X_OFFID, Py_None);
    shmq_ext_base *x = (shmq_ext_base *)o;   /* the numeric fields: C values, an int made when read */
    x->queue_id = (int32_t)rd32(r + SHMQ_R_QUEUEID);
    x->queue_offset = (int64_t)rd64(r + SHMQ_R_QUEUEOFFSET);
    x->reconsume_times = (int32_t)rd32(r + SHMQ_R_RECONSUME);
    x->born_timestamp = (int64_t)rd64(r + SHMQ_R_BORNTS);
    x->store_timestamp = (int64_t)rd64(r + SHMQ_R_STORETS);
    x->commit_log_offset = (int64_t)rd64(r + SHMQ_R_PHYSOFFSET);
    x->sysflag = (int32_t)rd32(r + SHMQ_R_SYSFLAG);
    x->flag = (int32_t)rd32(r + SHMQ_R_FLAG);
    keep_set(o, X_BROKER, broker);
    SET(ext, o, X_BORN, host_bytes(&last_born, r + SHMQ_R_BORNHOST));
    SET(ext, o, X_STORE, host_bytes(&last_store, r + SHMQ_R_STOREHOST));
    keep_set(o, X_RAW, Py_None);
    return o;
fail:
    Py_XDECREF(kb);   /* not handed to a slot yet */
    Py_XDECREF(kp);
    Py_DECREF(o);
    return NULL;
}

/* the checks of message/record.py's unpack_record: magic, and every length against TOTALSIZE */
static int record_ok(const uint8_t *r, uint32_t size) {
    if (size < SHMQ_RECORD_FIXED || rd32(r + SHMQ_R_TOTALSIZE) != size || rd32(r + SHMQ_R_MAGIC) != SHMQ_MESSAGE_MAGIC)
        return 0;
    int32_t blen = (int32_t)rd32(r + SHMQ_R_BODYLEN);
    uint64_t t0 = SHMQ_R_BODYLEN + 4 + (uint64_t)(uint32_t)blen;
    if (blen < 0 || t0 + 3 > size) return 0;
    uint64_t p0 = t0 + 1 + r[t0];
    if (p0 + 2 > size) return 0;
    return p0 + 2 + (((uint32_t)r[p0] << 8) | r[p0 + 1]) == size;
}

/* The walk itself (see read above): a new list of the decoded messages (NULL with an exception
 * set), *used entries used, *elsewhere as read answers it. The list is made once at the most
 * the walk can take (count, the published next offset, the ConsumeQueue mapping's end) and cut
 * to what it took: no append per message. */
static PyObject *walk(const Py_buffer *cq, Py_ssize_t at, Py_ssize_t count, const Py_buffer *lg, long long log_base,
                      const shmq_positions *P, const int64_t *next, long long qoff, PyObject *topic, PyObject *tu,
                      PyObject *broker, Py_ssize_t *used_out, long long *elsewhere) {
    int64_t mx = __atomic_load_n(next, __ATOMIC_ACQUIRE);
    int64_t commit = __atomic_load_n(&P->commit_pos, __ATOMIC_ACQUIRE);
    int64_t min_pos = __atomic_load_n(&P->min_pos, __ATOMIC_ACQUIRE);
    if (mx - qoff < count) count = mx - qoff;
    Py_ssize_t room = at >= 0 && at <= cq->len ? (cq->len - at) / SHMQ_CQ_ENTRY_SIZE : 0;
    if (room < count) count = room;
    if (count < 0) count = 0;
    const char *tub = PyBytes_AS_STRING(tu);
    Py_ssize_t tlen = PyBytes_GET_SIZE(tu), used = 0;
    *elsewhere = -1;
    PyObject *out = PyList_New(count);
    if (!out) return NULL;
    for (; used < count; used++) {
        const uint8_t *ent = (const uint8_t *)cq->buf + at + used * SHMQ_CQ_ENTRY_SIZE;
        int64_t phys = (int64_t)rd64(ent + SHMQ_CQ_PHYS);
        int32_t size = (int32_t)rd32(ent + SHMQ_CQ_SIZE);
        if (size <= 0 || phys + size > commit || phys < min_pos) break;
        if (phys < log_base || phys - log_base + size > lg->len) { *elsewhere = phys; break; }
        const uint8_t *r = (const uint8_t *)lg->buf + (phys - log_base);
        if (!record_ok(r, (uint32_t)size) || (rd32(r + SHMQ_R_SYSFLAG) & SHMQ_FLAG_COMPRESSED)) break;
        PyObject *m = decode(r, (uint32_t)size, topic, tub, tlen, broker);
        if (!m) { Py_SET_SIZE(out, used); Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, used, m);
    }
    Py_SET_SIZE(out, used);  /* the slots past it are NULL and stay allocated: a valid list */
    *used_out = used;
    return out;
}

static PyObject *hot_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11 || !PyUnicode_CheckExact(args[8]) || !PyBytes_CheckExact(args[9]) ||
        !PyUnicode_CheckExact(args[10])) {
        PyErr_SetString(PyExc_TypeError, "read(cq, at, qoff, count, log, log_base, positions, next_offset, "
                                         "topic: str, topic_utf8: bytes, broker: str)");
        return NULL;
    }
    if (!ext.cls) { PyErr_SetString(PyExc_RuntimeError, "bind_ext first"); return NULL; }
    Py_ssize_t at = PyLong_AsSsize_t(args[1]), count = PyLong_AsSsize_t(args[3]);
    long long qoff = PyLong_AsLongLong(args[2]), log_base = PyLong_AsLongLong(args[5]);
    const shmq_positions *P = (const shmq_positions *)PyLong_AsVoidPtr(args[6]);
    const int64_t *next = (const int64_t *)PyLong_AsVoidPtr(args[7]);
    if (PyErr_Occurred()) return NULL;
    if (!P || !next) { PyErr_SetString(PyExc_ValueError, "null position"); return NULL; }
    Py_buffer cq, lg;
    if (PyObject_GetBuffer(args[0], &cq, PyBUF_SIMPLE)) return NULL;
    if (PyObject_GetBuffer(args[4], &lg, PyBUF_SIMPLE)) { PyBuffer_Release(&cq); return NULL; }
    long long elsewhere = -1;
    Py_ssize_t used = 0;
    PyObject *out = walk(&cq, at, count, &lg, log_base, P, next, qoff, args[8], args[9], args[10], &used, &elsewhere);
    PyBuffer_Release(&lg);
    PyBuffer_Release(&cq);
    if (!out) return NULL;
    return tuple_of(out, PyLong_FromSsize_t(used), PyLong_FromLongLong(elsewhere), 3);
}

/* ---- one queue's read from its reader's state, and the wait that ends in it ---------------
 * A QueueReader (store/reader.py) keeps what a read needs in one list, ``st`` (queue_read.h's Q_*
 * order). read_queue(st, offset, max_count) -> (messages, next offset, elsewhere), or None when
 * offset is below min_offset or outside the ConsumeQueue file in st (the reader maps it and asks
 * again). elsewhere: -1 the read is complete (caught up, or where get_messages decides); >= 0 the
 * commit-log offset of a record in another CommitLog file; -2 the end of the ConsumeQueue file
 * (both: the reader maps the next file and goes on). */
PyObject *shmq_read_queue(PyObject *st, long long offset, Py_ssize_t max_count) {
    qstate q;
    if (queue_state(st, &q)) return NULL;
    if (!ext.cls) { PyErr_SetString(PyExc_RuntimeError, "bind_ext first"); return NULL; }
    long long ci = q.ci, per = q.per, log_base = q.log_base;
    const int64_t *minp = q.minp, *next = q.next;
    const shmq_positions *P = q.P;
    if (offset < __atomic_load_n(minp, __ATOMIC_ACQUIRE) || offset < 0 || offset / per != ci) Py_RETURN_NONE;
    long long n = offset % per;
    Py_buffer cq, lg;
    if (PyObject_GetBuffer(PyList_GET_ITEM(st, Q_CQ), &cq, PyBUF_SIMPLE)) return NULL;
    if (PyObject_GetBuffer(PyList_GET_ITEM(st, Q_LOG), &lg, PyBUF_SIMPLE)) { PyBuffer_Release(&cq); return NULL; }
    long long elsewhere = -1;
    Py_ssize_t count = max_count < per - n ? max_count : (Py_ssize_t)(per - n), used = 0;
    PyObject *out = walk(&cq, (Py_ssize_t)n * SHMQ_CQ_ENTRY_SIZE, count, &lg, log_base, P, next, offset,
                         PyList_GET_ITEM(st, Q_TOPIC), PyList_GET_ITEM(st, Q_UTF8), PyList_GET_ITEM(st, Q_BROKER),
                         &used, &elsewhere);
    PyBuffer_Release(&lg);
    PyBuffer_Release(&cq);
    if (!out) return NULL;
    if (elsewhere < 0 && used && n + used == per) elsewhere = -2;
    return tuple_of(out, PyLong_FromLongLong(offset + (long long)used), PyLong_FromLongLong(elsewhere), 3);
}

static PyObject *hot_read_queue(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "read_queue(state, offset, max_count)"); return NULL; }
    long long offset = PyLong_AsLongLong(args[1]);
    Py_ssize_t max_count = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    return shmq_read_queue(args[0], offset, max_count);
}

/* read_raw(st, offset, max_count, max_bytes) -> (body, count, next offset, max offset, min offset)
 * or an int: the broker's answer to a pull of a QueueReader's queue (store/reader.py read_raw)
 * as get_messages gives it with no filter, its records copied into one bytes object (queue_read.h
 * qr_raw: what it reads; the int is its ``why``, and nothing is copied then). */
static PyObject *hot_read_raw(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "read_raw(state, offset, max_count, max_bytes)"); return NULL; }
    long long offset = PyLong_AsLongLong(args[1]), max_bytes = PyLong_AsLongLong(args[3]), why;
    Py_ssize_t max_count = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    qr_read r;
    int rc = qr_raw(args[0], offset, max_count, max_bytes, &r, &why);
    if (rc < 0) return NULL;
    if (rc == 0) return PyLong_FromLongLong(why);
    PyObject *body = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)r.total);
    if (body) qr_copy(&r, (uint8_t *)PyBytes_AS_STRING(body));
    qr_release(&r);
    if (!body) return NULL;
    return Py_BuildValue("(NnLLL)", body, r.n, r.next, r.mx, r.mn);
}

/* records(body, topic, broker) -> [MessageExt], or None: a pulled body (a run of whole records,
 * as a TCP PULL answer carries them) decoded by the walk's own decode, for the TCP consumer
 * (client/message.py messages_from_records). None, and nothing made, as soon as one record is
 * not what decode handles as message_from_view would: a record that does not check, a
 * compressed one, or one of another topic than the queue's (a retry queue's original topic):
 * the caller then decodes the whole body in Python, which raises on the bad record.
 * records_of is that decode over n bytes at p (topic: a str; NULL with an exception set when out
 * of memory); the client's pull answers reader calls it on the read buffer itself, through the
 * capsule ``records_c`` (pull_records.h), so an answer's body is never copied into a bytes. */
static PyObject *records_of(const uint8_t *p, Py_ssize_t n, PyObject *topic, PyObject *broker) {
    if (!ext.cls) { PyErr_SetString(PyExc_RuntimeError, "bind_ext first"); return NULL; }
    Py_ssize_t tlen;
    const char *tu = PyUnicode_AsUTF8AndSize(topic, &tlen);
    if (!tu) return NULL;
    PyObject *out = PyList_New(0);
    Py_ssize_t pos = 0;
    while (out && pos < n) {
        const uint8_t *r = p + pos;
        uint32_t size = n - pos >= 4 ? rd32(r) : 0;
        if (size > (uint64_t)(n - pos) || !record_ok(r, size) || (rd32(r + SHMQ_R_SYSFLAG) & SHMQ_FLAG_COMPRESSED))
            goto python;
        const uint8_t *t = r + SHMQ_R_BODYLEN + 4 + rd32(r + SHMQ_R_BODYLEN);  /* in range: record_ok */
        if ((Py_ssize_t)t[0] != tlen || memcmp(t + 1, tu, (size_t)tlen) != 0) goto python;
        PyObject *m = decode(r, size, topic, tu, tlen, broker);
        if (!m || PyList_Append(out, m)) { Py_XDECREF(m); Py_CLEAR(out); break; }
        Py_DECREF(m);
        pos += size;
    }
    return out;
python:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyObject *hot_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyUnicode_CheckExact(args[1]) || !PyUnicode_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "records(body, topic: str, broker: str)");
        return NULL;
    }
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_SIMPLE)) return NULL;
    PyObject *out = records_of((const uint8_t *)b.buf, b.len, args[1], args[2]);
    PyBuffer_Release(&b);
    return out;
}

static PyMethodDef methods[] = {
    {"bind_ext", (PyCFunction)hot_bind_ext, METH_VARARGS, "bind_ext(MessageExt, slot descriptors, lazy marker)"},
    {"read_raw", (PyCFunction)(void (*)(void))hot_read_raw, METH_FASTCALL,
     "read_raw(QueueReader state, offset, max_count, max_bytes) -> (body, count, next, max, min) or int"},
    {"records", (PyCFunction)(void (*)(void))hot_records, METH_FASTCALL,
     "records(pulled body, topic, broker) -> [MessageExt], or None when Python must decode it"},
    {"read", (PyCFunction)(void (*)(void))hot_read, METH_FASTCALL,
     "read(cq, at, qoff, count, log, log_base, positions, next_offset, topic, topic_utf8, broker) "
     "-> (messages, entries used, elsewhere)"},
    {"read_queue", (PyCFunction)(void (*)(void))hot_read_queue, METH_FASTCALL,
     "read_queue(QueueReader state, offset, max_count) -> (messages, next offset, elsewhere) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hot", NULL, -1, methods};

PyMODINIT_FUNC PyInit__hot(void) {
    if (PyType_Ready(&shmq_message_type)) return NULL;
    PyObject *m = PyModule_Create(&module);
    records_fn *fn = records_of;  /* (the capsule's type is pull_records.h's: checked here) */
    PyObject *cap = m ? PyCapsule_New((void *)fn, RECORDS_CAPSULE, NULL) : NULL;
    if (m && (!cap || shmq_send_add(m) || shmq_ext_add(m) || shmq_wait_add(m) ||
              PyModule_AddObjectRef(m, "MessageBase", (PyObject *)&shmq_message_type) ||
              PyModule_AddObjectRef(m, "records_c", cap)))
        Py_CLEAR(m);
    Py_XDECREF(cap);
    return m;
}
