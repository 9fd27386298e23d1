/*
 * shmq/native/remoting_header.h -- the one C reader of a remoting frame's JSON header, as
 * shmq.protocol.command's strict decoder (``decode_command``) takes it. Header-only (static
 * inline): native/remote_answer.c (the client's async answers) and native/remoting_send.c (the
 * broker worker's sends) each compile it in; what a header's fields mean is theirs, how its bytes
 * are scanned is here, once.
 *
 * A frame after its 4-byte length word (shmq.protocol.frame):
 *
 *   offset     size  field
 *   0          4     mark, big-endian: serialize type << 24 | header length hl (JSON: type 0)
 *   4          hl    the header (JSON, read below)
 *   4 + hl     rest  the body
 *
 * The grammar read: a strict subset of JSON. Whatever is outside it is refused (-1) and the
 * caller hands the frame to the Python decoder, which reads it or names its error; the scanner
 * never guesses, so what it does read it reads as msgspec does.
 *
 *   header  = ws object ws END
 *   object  = '{' ws '}' | '{' member (',' member)* '}'
 *   member  = ws string ws ':' ws VALUE ws        VALUE: read by the caller's member function
 *   string  = '"' char* '"'   char: a byte 0x20-0x7F but '"' and '\'; with a scratch buffer (and
 *             only then) also \" \\ \/ \b \f \n \r \t and \uXXXX (not a surrogate), unescaped
 *             into it as UTF-8 (an unescaped string is never longer than its JSON)
 *   integer = '-'? digits     1 to 18 digits, no leading zero, no '.', 'e' or 'E' after them
 *   scalar  = string | integer | true | false | null   (the value of a key the caller skips)
 *   ws      = (' ' | '\t' | '\n' | '\r')*
 *
 * Objects and arrays other than those the caller reads (extFields) are refused.
 */
#ifndef SHMQ_REMOTING_HEADER_H
#define SHMQ_REMOTING_HEADER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

typedef struct { const uint8_t *p; uint32_t n; int set; } rh_span;

/* p..e: the bytes left; scr: where escaped strings are unescaped (NULL: escapes refused), so: used */
typedef struct { const uint8_t *p, *e; uint8_t *scr; size_t so; } rh_cur;

/* the member function: reads the value of ``key`` at c->p; 0, or -1 to refuse the header */
typedef int (*rh_member)(rh_cur *c, const rh_span *key, void *ctx);

static inline uint32_t rh_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* a frame of n bytes after its length word: 0 and its JSON header's length, or -1 (a binary
 * header or a header length the frame does not hold: the Python decoder's) */
static inline int rh_frame(const uint8_t *f, size_t n, uint32_t *hl) {
    if (n < 4) return -1;
    uint32_t mark = rh_be32(f), h = mark & 0xFFFFFF;
    if (mark >> 24 || !h || h > n - 4) return -1;
    *hl = h;
    return 0;
}

static inline void rh_ws(rh_cur *c) {
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static inline int rh_hex(uint8_t ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* one escape at c->p (its backslash, with at least one byte after it): its UTF-8 at d + *dn */
static inline int rh_unescape(rh_cur *c, uint8_t *d, uint32_t *dn) {
    static const char simple[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    uint8_t ch = c->p[1];
    if (ch != 'u') {  /* \uXXXX first: the properties' separators are written so */
        const char *k = ch ? strchr(simple, ch) : NULL;
        if (!k) return -1;
        d[(*dn)++] = (uint8_t)to[k - simple];
        c->p += 2;
        return 0;
    }
    if (c->e - c->p < 6) return -1;
    int v = 0;
    for (int i = 2; i < 6; i++) {
        int x = rh_hex(c->p[i]);
        if (x < 0) return -1;
        v = v << 4 | x;
    }
    if (v >= 0xD800 && v <= 0xDFFF) return -1;  /* surrogates (pairs too): the Python decoder's */
    if (v < 0x80) d[(*dn)++] = (uint8_t)v;
    else if (v < 0x800) { d[(*dn)++] = (uint8_t)(0xC0 | v >> 6); d[(*dn)++] = (uint8_t)(0x80 | (v & 0x3F)); }
    else {
        d[(*dn)++] = (uint8_t)(0xE0 | v >> 12);
        d[(*dn)++] = (uint8_t)(0x80 | ((v >> 6) & 0x3F));
        d[(*dn)++] = (uint8_t)(0x80 | (v & 0x3F));
    }
    c->p += 6;
    return 0;
}

/* The first byte at or after p (before e) that ends a plain run of a string: a '"', a '\\', a
 * byte below 0x20 or one of 0x80 and above; e when there is none. Sixteen bytes a step with
 * SSE2 (every x86-64 has it): one signed compare below 0x20 flags both the control and the
 * non-ASCII bytes. A byte-by-byte walk after an 8-byte word test was ~110 instructions a short
 * string and ~5 a byte of a long one (a batch answer's 1 KiB msgId), the most of a header's scan. */
static inline const uint8_t *rh_stop(const uint8_t *p, const uint8_t *e) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (e - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                 _mm_cmplt_epi8(x, space));
        int mask = _mm_movemask_epi8(m);
        if (mask) return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    while (p < e && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80) p++;
    return p;
}

/* a string at c->p (its quote): its bytes in *out, in the header when it has no escape, else in
 * the scratch */
static inline int rh_str(rh_cur *c, rh_span *out) {
    if (c->p >= c->e || *c->p != '"') return -1;
    const uint8_t *s = ++c->p;
    c->p = rh_stop(c->p, c->e);
    if (c->p >= c->e) return -1;
    if (*c->p == '"') { out->p = s; out->n = (uint32_t)(c->p - s); out->set = 1; c->p++; return 0; }
    if (*c->p != '\\' || !c->scr) return -1;  /* a control or non-ASCII byte; an escape without a scratch */
    uint8_t *d = c->scr + c->so;
    uint32_t dn = (uint32_t)(c->p - s);
    memcpy(d, s, dn);
    while (c->p < c->e && *c->p != '"') {
        if (*c->p == '\\') {
            if (c->e - c->p < 2 || rh_unescape(c, d, &dn)) return -1;
            continue;
        }
        /* the plain run up to the next escape or the end, copied whole: a properties text is
         * mostly such runs between its \u0001 and \u0002 separators */
        const uint8_t *r = c->p;
        c->p = rh_stop(c->p, c->e);
        if (c->p < c->e && *c->p != '"' && *c->p != '\\') return -1;
        memcpy(d + dn, r, (size_t)(c->p - r));
        dn += (uint32_t)(c->p - r);
    }
    if (c->p >= c->e) return -1;
    c->p++;
    out->p = d; out->n = dn; out->set = 1;
    c->so += dn;
    return 0;
}

/* an integer: its value, and its literal in *lit when lit is not NULL */
static inline int rh_int(rh_cur *c, int64_t *v, rh_span *lit) {
    const uint8_t *s = c->p;
    int neg = c->p < c->e && *c->p == '-';
    if (neg) c->p++;
    const uint8_t *d = c->p;
    uint64_t x = 0;  /* unsigned: wraps, never overflows, before the digit count is checked */
    while (c->p < c->e && *c->p >= '0' && *c->p <= '9') x = x * 10 + (uint64_t)(*c->p++ - '0');
    size_t nd = (size_t)(c->p - d);
    if (nd == 0 || nd > 18 || (nd > 1 && *d == '0')) return -1;
    if (c->p < c->e && (*c->p == '.' || *c->p == 'e' || *c->p == 'E')) return -1;
    *v = neg ? -(int64_t)x : (int64_t)x;
    if (lit) { lit->p = s; lit->n = (uint32_t)(c->p - s); lit->set = 1; }
    return 0;
}

static inline int rh_word(rh_cur *c, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(c->e - c->p) < n || memcmp(c->p, w, n)) return -1;
    c->p += n;
    return 0;
}

/* null at c->p: 1 (read), 0 (something else, nothing read) */
static inline int rh_null(rh_cur *c) {
    return c->p < c->e && *c->p == 'n' && rh_word(c, "null") == 0;
}

/* the value of a key the caller skips: a scalar */
static inline int rh_scalar(rh_cur *c) {
    rh_span s;
    int64_t v;
    if (c->p >= c->e) return -1;
    if (*c->p == '"') return rh_str(c, &s);
    if (*c->p == 't') return rh_word(c, "true");
    if (*c->p == 'f') return rh_word(c, "false");
    if (*c->p == 'n') return rh_word(c, "null");
    return rh_int(c, &v, NULL);
}

static inline int rh_is(const rh_span *k, const char *name) {
    size_t n = strlen(name);
    return k->n == n && memcmp(k->p, name, n) == 0;
}

/* an object at c->p, each member's value read by ``member`` in the order written */
static inline int rh_object(rh_cur *c, rh_member member, void *ctx) {
    if (c->p >= c->e || *c->p++ != '{') return -1;
    rh_ws(c);
    if (c->p < c->e && *c->p == '}') { c->p++; return 0; }
    for (;;) {
        rh_span k = {0};
        rh_ws(c);
        if (rh_str(c, &k)) return -1;
        rh_ws(c);
        if (c->p >= c->e || *c->p++ != ':') return -1;
        rh_ws(c);
        if (member(c, &k, ctx)) return -1;
        rh_ws(c);
        if (c->p < c->e && *c->p == ',') { c->p++; continue; }
        if (c->p < c->e && *c->p == '}') { c->p++; return 0; }
        return -1;
    }
}

/* the whole header p[0..n): one object and nothing but whitespace after it. 0 or -1; c->so is
 * then the scratch used (what the caller may place after it). */
static inline int rh_header(rh_cur *c, const uint8_t *p, size_t n, uint8_t *scr, rh_member member, void *ctx) {
    c->p = p; c->e = p + n; c->scr = scr; c->so = 0;
    rh_ws(c);
    if (rh_object(c, member, ctx)) return -1;
    rh_ws(c);
    return c->p == c->e ? 0 : -1;
}

/* an extFields value as Python's int() of it reads it, for the digits-only forms ('-'? 1 to 18
 * digits), within lo..hi: 0, or -1 (any other form is the Python path's) */
static inline int rh_field_int(const rh_span *f, int64_t lo, int64_t hi, int64_t *v) {
    if (!f->set) return -1;
    const uint8_t *q = f->p, *e = f->p + f->n;
    int neg = q < e && *q == '-';
    q += neg;
    uint64_t x = 0;
    size_t nd = (size_t)(e - q);
    if (nd == 0 || nd > 18) return -1;
    for (; q < e; q++) {
        if (*q < '0' || *q > '9') return -1;
        x = x * 10 + (uint64_t)(*q - '0');
    }
    *v = neg ? -(int64_t)x : (int64_t)x;
    return *v < lo || *v > hi ? -1 : 0;
}

#endif
