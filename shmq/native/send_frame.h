/*
 * shmq/native/send_frame.h -- the one C writer of a plain send's frame (SEND_MESSAGE_V2 or
 * SEND_BATCH_MESSAGE) from its queue's template, header-only: native/hot_oneway.c (the oneway
 * lane) and native/sync_send.c (a sync send) each compile it in, native/pull_answer.c its
 * frame prefix and decimal writers for a PULL's frame, and the worker's C path
 * (native/remoting_send.h) its decimal writer for the numbers its answers carry. Include it
 * after Python.h.
 *
 * The template is ``protocol.headers.SendFrame.pieces``: the six literal byte strings of the one
 * JSON encoder's header around the slots sysflag, born ms, flag, properties, opaque, so the
 * frame is the template path's (``SendFrame.frame``), byte for byte (tests/unit/test_oneway_lane.py,
 * tests/unit/test_sync_send.py):
 *
 *   total (4, big-endian) | 0 << 24 | header length (4) | p0 sysflag p1 born p2 flag p3 PROPS p4 opaque p5 | body
 *
 * PROPS, the properties text as a JSON string: with an id, [TAGS \u0001 tags \u0002] UNIQ_KEY
 * \u0001 id (what Producer._wire makes of a plain message, escaped as msgspec writes it: the
 * names from layout.h); without one, "" (a batch: each message's properties are in the body).
 */
#ifndef SHMQ_SEND_FRAME_H
#define SHMQ_SEND_FRAME_H

#include <stdint.h>
#include <string.h>
#include <time.h>
#include "layout.h"

/* the template's six pieces, borrowed from their bytes objects */
typedef struct { const char *p[6]; Py_ssize_t n[6]; Py_ssize_t lit; } sf_pieces;

/* pieces: a tuple of 6 bytes: 0, or -1 with TypeError */
static inline int sf_pieces_of(PyObject *t, sf_pieces *out) {
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 6) {
        PyErr_SetString(PyExc_TypeError, "pieces: a tuple of 6 bytes");
        return -1;
    }
    out->lit = 0;
    for (int i = 0; i < 6; i++) {
        PyObject *b = PyTuple_GET_ITEM(t, i);
        if (!PyBytes_CheckExact(b)) { PyErr_SetString(PyExc_TypeError, "pieces: bytes"); return -1; }
        out->p[i] = PyBytes_AS_STRING(b);
        out->n[i] = PyBytes_GET_SIZE(b);
        out->lit += out->n[i];
    }
    return 0;
}

/* the decimal text of v at p (at most 20 characters); returns its length. Two digits a step
 * from a table (a born time's 13 digits a digit a step were ~130 instructions of every frame) */
static inline size_t sf_put_int(char *p, long long v) {
    static const char d2[] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    char tmp[24], *e = tmp + sizeof tmp, *q = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        q -= 2;
        memcpy(q, d2 + 2 * r, 2);
    }
    if (u >= 10) q -= 2, memcpy(q, d2 + 2 * u, 2);
    else *--q = (char)('0' + u);
    size_t k = 0, n = (size_t)(e - q);
    if (v < 0) p[k++] = '-';
    memcpy(p + k, q, n);
    return k + n;
}

/* a frame's 8 length bytes at f: total (4 + header + body) and the header length, big-endian,
 * serialize type JSON (0) in the top byte; hl fits 24 bits (the callers check) */
static inline void sf_prefix(char *f, size_t hl, Py_ssize_t bl) {
    uint32_t total = (uint32_t)(4 + hl + (size_t)bl), h = (uint32_t)hl;
    unsigned char w[8] = {total >> 24, total >> 16, total >> 8, total, h >> 24, h >> 16, h >> 8, h};
    memcpy(f, w, 8);
}

/* the JSON-escaped length of tags as msgspec writes a string (" and \ escaped, UTF-8 kept), or -1
 * for a character below 0x20, which the caller leaves to the Python encoder */
static inline Py_ssize_t sf_tags_json_len(const char *t, Py_ssize_t n) {
    Py_ssize_t out = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c < 0x20) return -1;
        if (c == '"' || c == '\\') out++;
    }
    return out;
}

/* A message's tags argument (str or None) as sf_most / sf_write take it: *tags (NULL for None or
 * ""), *tn bytes, *tj their JSON length. 0; 1 when a character needs the Python encoder
 * (sf_tags_json_len); -1 with an exception set. The one reader for the lane's and the sync send's
 * callers. */
static inline int sf_tags_of(PyObject *t, const char **tags, Py_ssize_t *tn, Py_ssize_t *tj) {
    *tags = NULL, *tn = *tj = 0;
    if (t == Py_None) return 0;
    if (!PyUnicode_Check(t)) { PyErr_SetString(PyExc_TypeError, "tags: str or None"); return -1; }
    const char *s = PyUnicode_AsUTF8AndSize(t, tn);
    if (!s) return -1;
    if (*tn && (*tj = sf_tags_json_len(s, *tn)) < 0) return 1;
    *tags = *tn ? s : NULL;
    return 0;
}

/* the born timestamp: wall-clock milliseconds, as System.currentTimeMillis() */
static inline long long sf_born_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* the properties JSON: names from layout.h; \u0001 / \u0002 are the JSON escapes of
 * SHMQ_NAME_VALUE_SEP / SHMQ_PROPERTY_SEP, as msgspec writes them */
static const char SF_TAGS_HEAD[] = "\"" SHMQ_PROP_TAGS "\\u0001", SF_TAGS_END[] = "\\u0002",
                  SF_UNIQ_HEAD[] = SHMQ_PROP_UNIQ_KEY "\\u0001";
#define SF_LIT(s) (sizeof(s) - 1)

/* the most bytes sf_write writes for these pieces, tags (tj: sf_tags_json_len; NULL: none), id
 * (NULL: a batch's "") and body length: the header's numbers at their longest */
static inline Py_ssize_t sf_most(const sf_pieces *pc, const char *tags, Py_ssize_t tj, const char *id,
                                 Py_ssize_t bl) {
    Py_ssize_t props = id ? 1 + (tags ? SF_LIT(SF_TAGS_HEAD) - 1 + tj + SF_LIT(SF_TAGS_END) : 0)
                            + SF_LIT(SF_UNIQ_HEAD) + 32 + 1 : 2;
    return 8 + pc->lit + 4 * 21 + props + bl;
}

/* A writer's last header heads, a few queues' (sf_write_kept). The header from its start to the
 * properties (p0 sysflag p1 born p2 flag p3: ~130 bytes of a plain send's) is the same for every
 * send to one queue within one millisecond with one sysflag and flag, so a writer that sends
 * many a millisecond copies it whole instead of writing its four pieces and three numbers
 * (~200 instructions a send: RESULTS "Session 13, async13"). An entry is keyed by its pieces'
 * tuple, which it holds (a reference: the key cannot be freed and its address reused while the
 * entry stands; the tuple and its bytes are immutable, so the text stays theirs). */
enum { SF_HEADS = 8, SF_HEAD_MAX = 384 };
typedef struct sf_head {
    PyObject *key;  /* the pieces' tuple (a reference), or NULL */
    long long sysflag, born, flag;
    Py_ssize_t n;
    char text[SF_HEAD_MAX];
} sf_head;

/* the entries' references dropped (the owner's clear and dealloc) */
static inline void sf_heads_clear(sf_head *h) {
    for (int i = 0; h && i < SF_HEADS; i++) Py_CLEAR(h[i].key);
}

/* The frame at f (sf_most bytes free): its length, or minus its header's length when that passes
 * the 24-bit header length (nothing is raised: the caller says so). tags: tn bytes, or NULL.
 * heads (SF_HEADS entries, or NULL: none kept) and key (the pieces' tuple pc was read from):
 * the head copied from an entry of the same key and numbers, or written and kept in one. */
static inline Py_ssize_t sf_write_kept(char *f, const sf_pieces *pc, long long sysflag, long long born,
                                       long long flag, const char *tags, Py_ssize_t tn, const char *id,
                                       long long opaque, const char *body, Py_ssize_t bl, sf_head *heads,
                                       PyObject *key) {
    char *p = f + 8;
    sf_head *h = NULL;
#define SF_PIECE(i) (memcpy(p, pc->p[i], pc->n[i]), p += pc->n[i])
    if (heads) {  /* (the key's address, Fibonacci-hashed to one of the entries) */
        h = &heads[(size_t)(((uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ULL) >> 61) % SF_HEADS];
        if (h->key == key && h->born == born && h->flag == flag && h->sysflag == sysflag) {
            memcpy(p, h->text, (size_t)h->n), p += h->n;
            h = NULL;
        }
    }
    if (!heads || h) {
        SF_PIECE(0); p += sf_put_int(p, sysflag);
        SF_PIECE(1); p += sf_put_int(p, born);
        SF_PIECE(2); p += sf_put_int(p, flag);
        SF_PIECE(3);
        Py_ssize_t n = p - (f + 8);
        if (h && n <= SF_HEAD_MAX) {  /* (the old key released last: a tuple's dealloc runs no Python code) */
            PyObject *old = h->key;
            h->key = Py_NewRef(key), h->sysflag = sysflag, h->born = born, h->flag = flag, h->n = n;
            memcpy(h->text, f + 8, (size_t)n);
            Py_XDECREF(old);
        }
    }
    if (!id) {
        *p++ = '"';
    } else if (tags) {
        memcpy(p, SF_TAGS_HEAD, SF_LIT(SF_TAGS_HEAD)), p += SF_LIT(SF_TAGS_HEAD);
        for (Py_ssize_t i = 0; i < tn; i++) {
            if (tags[i] == '"' || tags[i] == '\\') *p++ = '\\';
            *p++ = tags[i];
        }
        memcpy(p, SF_TAGS_END, SF_LIT(SF_TAGS_END)), p += SF_LIT(SF_TAGS_END);
    } else {
        *p++ = '"';
    }
    if (id) {
        memcpy(p, SF_UNIQ_HEAD, SF_LIT(SF_UNIQ_HEAD)), p += SF_LIT(SF_UNIQ_HEAD);
        memcpy(p, id, 32), p += 32;
    }
    *p++ = '"';
    SF_PIECE(4); p += sf_put_int(p, opaque);
    SF_PIECE(5);
#undef SF_PIECE
    size_t hl = (size_t)(p - f - 8);
    if (hl > 0xFFFFFF) return -(Py_ssize_t)hl;
    memcpy(p, body, bl), p += bl;
    sf_prefix(f, hl, bl);
    return p - f;
}

/* sf_write_kept with nothing kept */
static inline Py_ssize_t sf_write(char *f, const sf_pieces *pc, long long sysflag, long long born, long long flag,
                                  const char *tags, Py_ssize_t tn, const char *id, long long opaque,
                                  const char *body, Py_ssize_t bl) {
    return sf_write_kept(f, pc, sysflag, born, flag, tags, tn, id, opaque, body, bl, NULL, NULL);
}

#endif
