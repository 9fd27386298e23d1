/*
 * shmq/native/core.c -- the small C core: the append lock, the append (single and batch),
 * the repair of a dead writer's append, CRC32, futex waits and record checks.
 *
 * Rules that hold for everything between shmq_lock() and shmq_unlock() on the hot path:
 * no allocation, no logging, no call into Python, no unmapping. The one exception is the
 * repair path (a previous holder died inside the append), which is rare, runs holding the
 * lock, and does file I/O with pread/pwrite so that it needs no mapping of its own.
 *
 * Memory ordering: commit_pos and each queue's next_offset are published with release
 * stores and read with acquire loads; readers never look past commit_pos, so a writer that
 * dies anywhere leaves the log as if its append fully happened or never did.
 */
#define _GNU_SOURCE
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

_Static_assert(sizeof(shmq_ctl_header) == 64, "header is one cache line");
_Static_assert(sizeof(shmq_owner) == 64, "owner is one cache line");
_Static_assert(sizeof(shmq_lockword) == 64, "lock is one cache line");
_Static_assert(sizeof(shmq_intent) == 64, "intent is one cache line");
_Static_assert(sizeof(shmq_positions) == 192, "positions are three cache lines");
_Static_assert(sizeof(shmq_queue_slot) == 160, "queue slot size");
_Static_assert(sizeof(shmq_offset_slot) == 416, "offset slot size");
_Static_assert(offsetof(shmq_ctl, queues) == SHMQ_QUEUE_TABLE_OFFSET, "queue table offset");
_Static_assert(offsetof(shmq_positions, flushed_pos) == 64, "flusher line");

/* ================================================================= byte order == */
static inline void be32(uint8_t *p, uint32_t v) { v = __builtin_bswap32(v); memcpy(p, &v, 4); }
static inline void be64(uint8_t *p, uint64_t v) { v = __builtin_bswap64(v); memcpy(p, &v, 8); }
static inline void be16(uint8_t *p, uint16_t v) { v = __builtin_bswap16(v); memcpy(p, &v, 2); }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v); }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v); }
static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return __builtin_bswap16(v); }

/* ====================================================================== CRC32 == */
/* zlib polynomial, slice-by-8; tables built once when the library loads. */
static uint32_t crc_table[8][256];

__attribute__((constructor)) static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

#if defined(__x86_64__)
#include <immintrin.h>
/* CRC-32 by carry-less multiplication ("folding", Gopal et al., Intel, 2009: Fast CRC
 * Computation for Generic Polynomials Using PCLMULQDQ). Four 128-bit lanes are folded
 * 512 bits at a time, then into one lane, then 128 -> 64 -> 32 bits with a Barrett
 * reduction. The constants are x^k mod P for the bit-reflected zlib polynomial, as given
 * in that paper. Takes and returns the running CRC in its inverted (raw register) form;
 * len is a multiple of 16 and at least 64. About 5x the table-driven loop on 1 KiB. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_fold(const uint8_t *p, size_t len, uint32_t reg) {
    const __m128i k_512 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k_128 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k_64 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i barrett = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i a = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)reg));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
#define FOLD(x, k, next) _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128((x), (k), 0x00), \
                                                     _mm_clmulepi64_si128((x), (k), 0x11)), (next))
    for (p += 64, len -= 64; len >= 64; p += 64, len -= 64) {
        a = FOLD(a, k_512, _mm_loadu_si128((const __m128i *)p));
        b = FOLD(b, k_512, _mm_loadu_si128((const __m128i *)(p + 16)));
        c = FOLD(c, k_512, _mm_loadu_si128((const __m128i *)(p + 32)));
        d = FOLD(d, k_512, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    a = FOLD(a, k_128, b);
    a = FOLD(a, k_128, c);
    a = FOLD(a, k_128, d);
    for (; len >= 16; p += 16, len -= 16) a = FOLD(a, k_128, _mm_loadu_si128((const __m128i *)p));
#undef FOLD
    /* 128 -> 64 bits */
    __m128i t = _mm_clmulepi64_si128(a, k_128, 0x10);
    a = _mm_xor_si128(_mm_srli_si128(a, 8), t);
    /* 64 -> 32 bits */
    t = _mm_srli_si128(a, 4);
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), k_64, 0x00), t);
    /* Barrett reduction */
    t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(a, t), 1);
}

static int have_pclmul;
__attribute__((constructor)) static void crc_detect(void) {
    __builtin_cpu_init();
    have_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}
#endif

uint32_t shmq_crc32(uint32_t crc, const uint8_t *p, size_t len) {
    crc = ~crc;
#if defined(__x86_64__)
    if (len >= 64 && have_pclmul) {
        size_t n = len & ~(size_t)15;
        crc = crc32_fold(p, n, crc);
        p += n;
        len -= n;
    }
#endif
    while (len && ((uintptr_t)p & 7)) { crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF]; len--; }
    while (len >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4); memcpy(&b, p + 4, 4);
        a ^= crc;
        crc = crc_table[7][a & 0xFF] ^ crc_table[6][(a >> 8) & 0xFF] ^ crc_table[5][(a >> 16) & 0xFF] ^
              crc_table[4][a >> 24] ^ crc_table[3][b & 0xFF] ^ crc_table[2][(b >> 8) & 0xFF] ^
              crc_table[1][(b >> 16) & 0xFF] ^ crc_table[0][b >> 24];
        p += 8; len -= 8;
    }
    if (len >= 4) {  /* slice-by-4: a 100-byte body is 96 folded + 4 */
        uint32_t a;
        memcpy(&a, p, 4);
        a ^= crc;
        crc = crc_table[3][a & 0xFF] ^ crc_table[2][(a >> 8) & 0xFF] ^ crc_table[1][(a >> 16) & 0xFF] ^
              crc_table[0][a >> 24];
        p += 4; len -= 4;
    }
    while (len--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

/* ============================================================ Java hashCode == */
/* String.hashCode over the UTF-16 code units of a UTF-8 string; invalid bytes count as
 * U+FFFD, as Java's decoder would make them. Wraps like Java's int. */
static uint32_t java_hash_cont(uint32_t h, const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        while (i < n && s[i] < 0x80) h = 31u * h + s[i++];  /* ASCII: one code unit a byte */
        if (i >= n) break;
        uint32_t c = s[i], cp;
        size_t k;
        if (c < 0x80) { h = 31u * h + c; i++; continue; }
        else if ((c & 0xE0) == 0xC0) { cp = c & 0x1F; k = 1; }
        else if ((c & 0xF0) == 0xE0) { cp = c & 0x0F; k = 2; }
        else if ((c & 0xF8) == 0xF0) { cp = c & 0x07; k = 3; }
        else { h = 31u * h + 0xFFFD; i++; continue; }
        size_t j;
        for (j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80) break;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (j <= k) { h = 31u * h + 0xFFFD; i++; continue; }
        i += k + 1;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = 31u * h + (0xD800 + (cp >> 10));
            h = 31u * h + (0xDC00 + (cp & 0x3FF));
        } else {
            h = 31u * h + cp;
        }
    }
    return h;
}

int32_t shmq_java_hash(const uint8_t *s, size_t n) { return (int32_t)java_hash_cont(0, s, n); }

/* The ConsumeQueue tag code: hashCode of the TAGS property, 0 when absent or empty.
 * Properties are "name\1value\2name\1value" with an optional trailing \2. */
int64_t shmq_tag_code_of_props(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t name = i;
        while (i < n && p[i] != SHMQ_NAME_VALUE_SEP && p[i] != SHMQ_PROPERTY_SEP) i++;
        if (i >= n || p[i] == SHMQ_PROPERTY_SEP) { i++; continue; }
        size_t name_len = i - name;
        size_t val = ++i;
        while (i < n && p[i] != SHMQ_PROPERTY_SEP) i++;
        if (name_len == SHMQ_PROP_LEN(SHMQ_PROP_TAGS) && memcmp(p + name, SHMQ_PROP_TAGS, name_len) == 0)
            return i > val ? (int64_t)shmq_java_hash(p + val, i - val) : 0;
        i++;
    }
    return 0;
}

/* ================================================================ identity == */
int64_t shmq_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Reads state (field 3) and starttime (field 22) of /proc/<pid>/stat.
 * Returns 0, -1 when the process does not exist, -2 when /proc cannot tell (hidden). */
static int proc_stat(int pid, char *state, uint64_t *starttime) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT || errno == ESRCH ? -1 : -2;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -2;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
    if (!p || p[1] != ' ') return -2;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return -2;
        p++;
    }
    *starttime = strtoull(p, NULL, 10);
    return 0;
}

uint64_t shmq_self_token(void) {
    char st;
    uint64_t start = 0;
    int pid = getpid();
    proc_stat(pid, &st, &start);
    return ((uint64_t)(uint32_t)pid << 32) | (start & 0xFFFFFFFFu);
}

/* 1 alive, 0 provably dead. Dead only when kill(pid,0) says ESRCH, /proc says the process
 * is a zombie, or its start time differs (the pid was reused). Anything unclear: alive. */
int shmq_pid_alive(uint64_t token) {
    int pid = (int)(token >> 32);
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
    char st;
    uint64_t start;
    int rc = proc_stat(pid, &st, &start);
    if (rc == -1) return 0;
    if (rc == -2) return 1;
    if (st == 'Z' || st == 'X' || st == 'x') return 0;
    return (start & 0xFFFFFFFFu) == (token & 0xFFFFFFFFu);
}

/* =================================================================== futexes == */
static int futex_wait(uint32_t *addr, uint32_t val, int64_t timeout_ns) {
    struct timespec ts;
    if (timeout_ns < 0) timeout_ns = 0;
    ts.tv_sec = timeout_ns / 1000000000LL;
    ts.tv_nsec = timeout_ns % 1000000000LL;
    /* shared (not FUTEX_PRIVATE): the word lives in a mapping several processes share */
    return (int)syscall(SYS_futex, addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake(uint32_t *addr, int n) { syscall(SYS_futex, addr, FUTEX_WAKE, n, NULL, NULL, 0); }

/* Which sleepers on data_seq an append of this process wakes (FUTEX_WAKE_BITSET): all of them
 * unless the process chose a bit (shmq_set_data_wake_bit). A broker worker takes its own bit:
 * its event loop checks its held pulls itself after each of its appends, and its pull-wake
 * thread sleeps with every bit but that one (shmq_wait_data_others), so the worker's own
 * appends do not wake that thread while everybody else's (other workers, local producers, the
 * supervisor, anyone who never chose a bit) still do. Every other sleeper waits with all bits. */
static uint32_t data_wake_bits = FUTEX_BITSET_MATCH_ANY;

void shmq_set_data_wake_bit(int bit) {
    data_wake_bits = bit >= 0 && bit < 32 ? 1u << bit : FUTEX_BITSET_MATCH_ANY;
}

static int futex_wait_bits(uint32_t *addr, uint32_t val, int64_t deadline_ns, uint32_t bits) {
    struct timespec ts;  /* FUTEX_WAIT_BITSET: an absolute CLOCK_MONOTONIC deadline */
    ts.tv_sec = deadline_ns / 1000000000LL;
    ts.tv_nsec = deadline_ns % 1000000000LL;
    return (int)syscall(SYS_futex, addr, FUTEX_WAIT_BITSET, val, &ts, NULL, bits);
}

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
                be64(e, (uint64_t)phys); be32(e + 8, (uint32_t)sz); be64(e + 12, (uint64_t)tag);
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

/* An append into the timer topic (a timer message, or a recall's marker) also moves timer_seq,
 * the one word the supervisor's timer service sleeps on (shmq_wait_timer): every other append
 * (thousands a second in a busy store) wakes no timer thread. Bumped after the publish, so a
 * timer service that loaded timer_seq before it read the timer queue misses no entry. */
static inline void notify_timer(shmq_ctl *c, const shmq_queue_slot *qs) {
    if (qs->topic_len != SHMQ_PROP_LEN(SHMQ_TIMER_TOPIC) || memcmp(qs->topic, SHMQ_TIMER_TOPIC, qs->topic_len))
        return;
    ADD_SC(&c->pos.timer_seq, 1);
    if (LOAD_SC(&c->pos.timer_waiters)) futex_wake(&c->pos.timer_seq, INT_MAX);
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
        if (LOAD_SC(&c->pos.data_waiters)) futex_wake(&c->pos.data_seq, INT_MAX);
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
static int lock_take(shmq_writer *w, int try_only) {
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

/* ================================================================== append == */
static inline uint8_t *log_map(shmq_writer *w, int64_t index) {
    shmq_map *m = &w->logs[index % SHMQ_LOG_RING];
    return m->index == index ? m->addr : NULL;
}

static inline uint8_t *cq_map(shmq_writer *w, uint32_t slot, int64_t file_index) {
    shmq_map *m = &w->cqs[2 * (uint64_t)slot + (uint64_t)(file_index & 1)];
    return m->index == file_index ? m->addr : NULL;
}

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
static int64_t page_bytes;

/* fd: the file open already (cq_attach's), or -1 to open it here. */
static int cq_reserve_file(shmq_writer *w, shmq_map *m, shmq_queue_slot *qs, int64_t fi,
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

/* A writer's ConsumeQueue mappings are its own (w->cqs, two per slot: the current file and
 * the next), made here under the lock the first time the append needs a file, and replaced
 * (the old one unmapped) when the queue moves two files on: open + mmap in C is a few
 * microseconds, where the Python mapping cost the first message to a queue three times more.
 * A file that does not exist yet answers SHMQ_ENEEDCQ: the caller creates it (sparse) and
 * calls again. Nothing else touches w->cqs but shmq_writer_unmap (the writer's close). */
static int cq_attach(shmq_writer *w, uint32_t slot, shmq_queue_slot *qs, int64_t fi) {
    shmq_ctl *c = w->ctl;
    int64_t fbytes = (int64_t)c->header.cq_entries_per_file * SHMQ_CQ_ENTRY_SIZE;
    int fd = open_cq(c, qs, fi);
    if (fd < 0) {
        if (errno == ENOENT) { w->need_slot = slot; w->need_index = fi; return SHMQ_ENEEDCQ; }
        w->os_errno = errno;
        return SHMQ_ECQSPACE;
    }
    struct stat st;
    void *a = MAP_FAILED;
    if (fstat(fd, &st) != 0) w->os_errno = errno;
    else if (st.st_size != fbytes) w->os_errno = EINVAL;  /* a mapping past its end would SIGBUS */
    else if ((a = mmap(NULL, (size_t)fbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        w->os_errno = errno;
    if (a == MAP_FAILED) { close(fd); return SHMQ_ECQSPACE; }
    shmq_map *m = &w->cqs[2 * (uint64_t)slot + (uint64_t)(fi & 1)];
    if (m->index >= 0 && m->addr) munmap(m->addr, (size_t)fbytes);
    m->addr = a;
    m->ready = 0;
    m->index = fi;
    /* the page of the next entry, while the file is open (saves cq_reserve an open) */
    int64_t n = LOAD_RLX(&qs->next_offset) - fi * (int64_t)c->header.cq_entries_per_file;
    int rc = SHMQ_OK;
    if (n >= 0 && n < (int64_t)c->header.cq_entries_per_file)
        rc = cq_reserve_file(w, m, qs, fi, n * SHMQ_CQ_ENTRY_SIZE, (n + 1) * SHMQ_CQ_ENTRY_SIZE, fd);
    close(fd);
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

/* Writes one record at dst (which is the position phys). props2 (may be empty) is appended
 * to props, with a \2 separator inserted when props does not end with one. */
static void write_record(shmq_writer *w, uint8_t *dst, int64_t phys, uint32_t size,
                         const shmq_queue_slot *qs, const shmq_meta *m, uint32_t crc,
                         int32_t flag, int64_t qoff, int64_t store_ts,
                         const uint8_t *body, uint32_t blen,
                         const uint8_t *props, uint32_t plen,
                         const uint8_t *props2, uint32_t plen2, int sep) {
    const shmq_owner *o = &w->ctl->owner;
    be32(dst + SHMQ_R_TOTALSIZE, size);
    be32(dst + SHMQ_R_MAGIC, SHMQ_MESSAGE_MAGIC);
    be32(dst + SHMQ_R_BODYCRC, crc);
    be32(dst + SHMQ_R_QUEUEID, (uint32_t)qs->queue_id);
    be32(dst + SHMQ_R_FLAG, (uint32_t)flag);
    be64(dst + SHMQ_R_QUEUEOFFSET, (uint64_t)qoff);
    be64(dst + SHMQ_R_PHYSOFFSET, (uint64_t)phys);
    be32(dst + SHMQ_R_SYSFLAG, (uint32_t)m->sysflag);
    /* born_ts 0: "now" (local producers leave it to the append, saving a clock read) */
    be64(dst + SHMQ_R_BORNTS, (uint64_t)(m->born_ts ? m->born_ts : store_ts));
    be32(dst + SHMQ_R_BORNHOST, m->born_ip);
    be32(dst + SHMQ_R_BORNHOST + 4, (uint32_t)m->born_port);
    fault(w, SHMQ_FP_MID_RECORD);
    be64(dst + SHMQ_R_STORETS, (uint64_t)store_ts);
    be32(dst + SHMQ_R_STOREHOST, o->store_ip);
    be32(dst + SHMQ_R_STOREHOST + 4, (uint32_t)o->store_port);
    be32(dst + SHMQ_R_RECONSUME, (uint32_t)m->reconsume_times);
    be64(dst + SHMQ_R_PREPARED, (uint64_t)m->prepared_offset);
    be32(dst + SHMQ_R_BODYLEN, blen);
    uint8_t *p = dst + SHMQ_R_BODYLEN + 4;
    memcpy(p, body, blen);
    p += blen;
    *p++ = qs->topic_len;
    memcpy(p, qs->topic, qs->topic_len);
    p += qs->topic_len;
    be16(p, (uint16_t)(plen + (uint32_t)sep + plen2));
    p += 2;
    memcpy(p, props, plen);
    p += plen;
    if (sep) *p++ = 2;
    if (plen2) memcpy(p, props2, plen2);
}

static inline void write_cq(uint8_t *e, int64_t phys, uint32_t size, int64_t tag) {
    be64(e, (uint64_t)phys);
    be32(e + 8, size);
    be64(e + 12, (uint64_t)tag);
}

static inline void notify_data(shmq_ctl *c, const shmq_queue_slot *qs) {
    ADD_SC(&c->pos.data_seq, 1);
    if (LOAD_SC(&c->pos.data_waiters))
        syscall(SYS_futex, &c->pos.data_seq, FUTEX_WAKE_BITSET, INT_MAX, NULL, NULL, data_wake_bits);
    notify_timer(c, qs);
}

/* Under the lock: the fence and the place of an append of `total` bytes. On success
 * *cur (the file holding pos, for a filler) and *dst (the file holding the records) are set. */
static int place(shmq_writer *w, int64_t total, int64_t *pos_out, int64_t *rec_out,
                 uint8_t **cur, uint8_t **dst) {
    shmq_ctl *c = w->ctl;
    uint32_t state = LOAD_ACQ(&c->owner.state);
    if (state != SHMQ_STATE_READY || c->owner.generation != w->generation)
        return state == SHMQ_STATE_READONLY ? SHMQ_EREADONLY : SHMQ_ESTALE;
    /* A slave's log is written by replication only (RocketMQ: "broke role is slave, so
     * putMessage is forbidden"); checked under the lock, so a local producer cannot race it. */
    if (LOAD_ACQ(&c->owner.role) == SHMQ_ROLE_SLAVE) return SHMQ_ESLAVE;
    int64_t fsize = (int64_t)c->header.file_size;
    int64_t pos = c->pos.commit_pos, idx = pos / fsize, off = pos % fsize, rec = pos;
    if (off + total + SHMQ_BLANK_MIN > fsize) rec = (idx + 1) * fsize;
    *cur = rec != pos ? log_map(w, idx) : NULL;
    if (rec != pos && !*cur) { w->need_index = idx; return SHMQ_ENEEDLOG; }
    *dst = log_map(w, rec / fsize);
    if (!*dst) { w->need_index = rec / fsize; return SHMQ_ENEEDLOG; }
    *dst += rec % fsize;
    *pos_out = pos;
    *rec_out = rec;
    return SHMQ_OK;
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

/* tag_of_props: the TAGS hash when it is already known (put_local: from the head, the only part
 * of its properties that can hold TAGS); NULL: from props, as m->tag_mode says. now: the clock
 * the caller read just before for the record's UNIQ_KEY, the store time's reading when the lock
 * is only tried (no wait in between); 0: read under the lock. */
static int put_one(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *body, uint32_t blen,
                   const uint8_t *props, uint32_t plen, shmq_result *out, int try_lock, const int64_t *tag_of_props,
                   int64_t now) {
    shmq_ctl *c = w->ctl;
    if (slot >= c->header.queue_capacity || LOAD_ACQ(&c->queues[slot].state) != 1) return SHMQ_EINVAL;
    if (plen > SHMQ_PROPS_MAX) return SHMQ_EINVAL;
    shmq_queue_slot *qs = &c->queues[slot];
    uint64_t size = SHMQ_RECORD_FIXED + (uint64_t)blen + qs->topic_len + plen;
    if (blen > c->header.max_message_size || size + SHMQ_BLANK_MIN > c->header.file_size)
        return SHMQ_ETOOBIG;
    uint32_t crc = shmq_crc32(0, body, blen) & 0x7FFFFFFFu;
    int has_cq = !is_prepared_or_rollback(m->sysflag);
    int64_t tag = m->tag_mode != SHMQ_TAG_FROM_PROPS ? m->tag_code
                  : tag_of_props ? *tag_of_props : shmq_tag_code_of_props(props, plen);

    int rc = lock_take(w, try_lock);
    if (rc) return rc;
    fault(w, SHMQ_FP_AFTER_LOCK);
    int64_t pos, rec;
    uint8_t *cur, *dst, *cqe = NULL;
    rc = place(w, (int64_t)size, &pos, &rec, &cur, &dst);
    if (rc) goto unlock;
    int64_t qoff = 0;
    if (has_cq) {
        uint32_t per = c->header.cq_entries_per_file;
        qoff = qs->next_offset;
        cqe = cq_need(w, slot, qs, qoff / per, &rc);
        if (!cqe) goto unlock;
        rc = cq_reserve(w, slot, qs, qoff, qoff);
        if (rc) goto unlock;
        cqe += (qoff % per) * SHMQ_CQ_ENTRY_SIZE;
    }
    int64_t ts = next_store_ts(c, now);
    if (m->tag_mode == SHMQ_TAG_STORE_PLUS) tag = ts + m->tag_code;
    begin_intent(c, pos, rec, rec + (int64_t)size, qoff, slot, 1, has_cq);
    fault(w, SHMQ_FP_AFTER_INTENT);
    if (cur) write_filler(c, cur, pos);
    write_record(w, dst, rec, (uint32_t)size, qs, m, crc, m->flag, qoff, ts, body, blen, props, plen,
                 NULL, 0, 0);
    fault(w, SHMQ_FP_AFTER_RECORD);
    if (cqe) write_cq(cqe, rec, (uint32_t)size, tag);
    fault(w, SHMQ_FP_AFTER_CQ);
    if (has_cq) STORE_REL(&qs->next_offset, qoff + 1);
    fault(w, SHMQ_FP_MID_PUBLISH);
    STORE_REL(&c->pos.commit_pos, rec + (int64_t)size);
    c->pos.appends++;
    fault(w, SHMQ_FP_AFTER_PUBLISH);
    STORE_REL(&c->intent.active, 0);
    out->phys_offset = rec;
    out->queue_offset = qoff;
    out->end = rec + (int64_t)size;
    out->store_ts = ts;
    out->size = (int32_t)size;
    out->count = 1;
unlock:
    shmq_unlock(w);
    if (rc == SHMQ_OK) notify_data(c, qs);
    return rc;
}

int shmq_put(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *body, uint32_t blen,
             const uint8_t *props, uint32_t plen, shmq_result *out) {
    return put_one(w, slot, m, body, blen, props, plen, out, 0, NULL, 0);
}

/* UNIQ_KEY \001, written before the 32 hex digits of the id; returns the position after it */
static inline uint8_t *put_uniq_head(uint8_t *p) {
    memcpy(p, SHMQ_PROP_UNIQ_KEY, SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY));
    p[SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY)] = SHMQ_NAME_VALUE_SEP;
    return p + SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY) + 1;
}
#define UNIQ_HEAD_LEN (SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY) + 1)
#define UNIQ_PAIR_LEN (UNIQ_HEAD_LEN + 32)

/* A batch body (RocketMQ MessageDecoder.encodeMessages) is a run of entries:
 *   totalSize i32 | magic i32 (ignored) | bodyCRC i32 (ignored) | flag i32 |
 *   bodyLen i32 | body | propsLen i16 | props
 * Each entry becomes its own record with consecutive queue offsets on one queue; the
 * batch-level properties (extra) are appended to each entry's properties. */
#define BATCH_ENTRY_FIXED 22

/* tag_all: every entry's TAGS hash when the caller knows it (one head shared by a local batch);
 * NULL: from each entry's properties, as m->tag_mode says */
static int batch_scan(shmq_writer *w, const shmq_queue_slot *qs, const shmq_meta *m,
                      const uint8_t *b, uint32_t n, uint32_t extra_len, uint32_t *count,
                      uint64_t *total, const int64_t *tag_all) {
    uint32_t i = 0, k = 0;
    uint64_t sum = 0;
    while (i < n) {
        if (n - i < BATCH_ENTRY_FIXED) return SHMQ_EBADBATCH;
        const uint8_t *e = b + i;
        int32_t blen = (int32_t)rd32(e + 16);
        if (blen < 0 || (uint64_t)blen + BATCH_ENTRY_FIXED > n - i) return SHMQ_EBADBATCH;
        int16_t plen = (int16_t)rd16(e + 20 + blen);
        if (plen < 0 || (uint64_t)blen + BATCH_ENTRY_FIXED + (uint64_t)plen > n - i) return SHMQ_EBADBATCH;
        const uint8_t *props = e + 22 + blen;
        int sep = extra_len && plen && props[plen - 1] != SHMQ_PROPERTY_SEP;
        uint64_t merged = (uint64_t)plen + (uint64_t)sep + extra_len;
        if (merged > SHMQ_PROPS_MAX) return SHMQ_EINVAL;
        if ((uint32_t)blen > w->ctl->header.max_message_size) return SHMQ_ETOOBIG;
        if (k >= w->scratch_cap) return SHMQ_EBADBATCH;
        w->scratch_crc[k] = shmq_crc32(0, e + 20, (size_t)blen) & 0x7FFFFFFFu;
        w->scratch_tag[k] = m->tag_mode != SHMQ_TAG_FROM_PROPS ? m->tag_code
                            : tag_all ? *tag_all : shmq_tag_code_of_props(props, (size_t)plen);
        sum += SHMQ_RECORD_FIXED + (uint64_t)blen + qs->topic_len + merged;
        i += BATCH_ENTRY_FIXED + (uint32_t)blen + (uint32_t)plen;
        k++;
    }
    if (k == 0) return SHMQ_EBADBATCH;
    *count = k;
    *total = sum;
    return SHMQ_OK;
}

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

/* entry k; *at is the MessageBatch cursor (advanced past the entry) */
static inline void batch_next(const batch_src *s, uint32_t k, uint32_t *at, batch_entry *e) {
    if (s->b) {
        const uint8_t *p = s->b + *at;
        e->flag = (int32_t)rd32(p + 12);
        e->blen = rd32(p + 16);
        e->body = p + 20;
        e->plen = rd16(p + 20 + e->blen);
        e->props = p + 22 + e->blen;
        e->props2 = s->extra;
        e->plen2 = s->extra_len;
        e->sep = s->extra_len && e->plen && e->props[e->plen - 1] != SHMQ_PROPERTY_SEP;
        *at += BATCH_ENTRY_FIXED + e->blen + e->plen;
        return;
    }
    memcpy(s->pair + UNIQ_HEAD_LEN, s->ids + 32 * (uint64_t)k, 32);
    e->flag = 0;
    e->blen = s->blens[k];
    e->body = s->bodies[k];
    e->props = s->head;
    e->plen = s->hlen;
    e->props2 = s->pair;
    e->plen2 = s->pair_len;
    e->sep = 0;
}

/* Records 1..count-1 of a direct batch (batch_src without b), after record 0 at rec0 and its
 * ConsumeQueue entry are written: a direct batch's records differ only in their size, body CRC,
 * queue offset, physical offset, body (and its length) and the 32 hex digits of their UNIQ_KEY
 * (flag 0, one head, one tail, one store time: batch_next / write_record), so each is record 0's
 * fixed part and its tail (topic and properties) copied, those fields written over. The same
 * bytes write_record makes (tests/unit/test_write_paths.py compares them with the encoded batch's);
 * about a third of the instructions per record. Under the lock; returns the end position. */
static int64_t copy_direct(shmq_writer *w, uint32_t slot, const shmq_meta *m, const batch_src *s, uint32_t count,
                           int64_t qoff, int64_t ts, const uint8_t *rec0, uint8_t *dst, int64_t phys) {
    const shmq_queue_slot *qs = &w->ctl->queues[slot];
    uint32_t per = w->ctl->header.cq_entries_per_file;
    const uint8_t *tail0 = rec0 + SHMQ_R_BODYLEN + 4 + s->blens[0];
    uint32_t tail_len = 1u + qs->topic_len + 2u + s->hlen + s->pair_len;
    uint32_t id_at = 1u + qs->topic_len + 2u + s->hlen + UNIQ_HEAD_LEN;  /* in the tail */
    int64_t q = qoff + 1;
    uint8_t *cqf = cq_map(w, slot, q / per);
    for (uint32_t k = 1; k < count; k++, q++) {
        uint32_t blen = s->blens[k], size = SHMQ_R_BODYLEN + 4 + blen + tail_len;
        memcpy(dst, rec0, SHMQ_R_BODYLEN);
        be32(dst + SHMQ_R_TOTALSIZE, size);
        be32(dst + SHMQ_R_BODYCRC, w->scratch_crc[k]);
        be64(dst + SHMQ_R_QUEUEOFFSET, (uint64_t)q);
        be64(dst + SHMQ_R_PHYSOFFSET, (uint64_t)phys);
        fault(w, SHMQ_FP_MID_RECORD);
        be32(dst + SHMQ_R_BODYLEN, blen);
        uint8_t *p = dst + SHMQ_R_BODYLEN + 4;
        memcpy(p, s->bodies[k], blen);
        memcpy(p + blen, tail0, tail_len);
        memcpy(p + blen + id_at, s->ids + 32 * (uint64_t)k, 32);
        if (q % per == 0) cqf = cq_map(w, slot, q / per);  /* the batch crossed into the next file */
        int64_t tag = m->tag_mode == SHMQ_TAG_STORE_PLUS ? ts + m->tag_code : w->scratch_tag[k];
        write_cq(cqf + (q % per) * SHMQ_CQ_ENTRY_SIZE, phys, size, tag);
        dst += size;
        phys += size;
    }
    return phys;
}

/* The append of a scanned batch (count entries of src, total bytes, their CRCs and tags in the
 * writer's scratch), under the lock: one place, one intent, one CQ reservation, one publish. */
static int put_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m, const batch_src *src, uint32_t count,
                     uint64_t total, shmq_result *out, int try_lock) {
    shmq_ctl *c = w->ctl;
    shmq_queue_slot *qs = &c->queues[slot];
    if (total + SHMQ_BLANK_MIN > c->header.file_size) return SHMQ_ETOOBIG;

    int rc = lock_take(w, try_lock);
    if (rc) return rc;
    fault(w, SHMQ_FP_AFTER_LOCK);
    int64_t pos, rec;
    uint8_t *cur, *dst;
    rc = place(w, (int64_t)total, &pos, &rec, &cur, &dst);
    if (rc) goto unlock;
    uint32_t per = c->header.cq_entries_per_file;
    int64_t qoff = qs->next_offset, last = qoff + count - 1;
    /* a batch may cross one CQ file boundary: both files must be mapped (ring of two) */
    if (!cq_need(w, slot, qs, qoff / per, &rc) || !cq_need(w, slot, qs, last / per, &rc)) goto unlock;
    rc = cq_reserve(w, slot, qs, qoff, last);
    if (rc) goto unlock;
    int64_t ts = next_store_ts(c, 0);
    begin_intent(c, pos, rec, rec + (int64_t)total, qoff, slot, count, 1);
    fault(w, SHMQ_FP_AFTER_INTENT);
    if (cur) write_filler(c, cur, pos);
    int64_t phys = rec;
    uint32_t at = 0;
    uint8_t *rec0 = dst;
    /* a direct batch's records after the first are copies of it but for six fields (below) */
    uint32_t n_written = src->b || count < 2 ? count : 1;
    for (uint32_t k = 0; k < n_written; k++) {
        batch_entry e;
        batch_next(src, k, &at, &e);
        uint32_t size = SHMQ_RECORD_FIXED + e.blen + qs->topic_len + e.plen + (uint32_t)e.sep + e.plen2;
        int64_t q = qoff + k;
        write_record(w, dst, phys, size, qs, m, w->scratch_crc[k], e.flag, q, ts, e.body, e.blen, e.props, e.plen,
                     e.props2, e.plen2, e.sep);
        uint8_t *cqe = cq_map(w, slot, q / per) + (q % per) * SHMQ_CQ_ENTRY_SIZE;
        int64_t tag = m->tag_mode == SHMQ_TAG_STORE_PLUS ? ts + m->tag_code : w->scratch_tag[k];
        write_cq(cqe, phys, size, tag);
        if (k == 0) { out->size = (int32_t)size; }
        dst += size;
        phys += size;
    }
    if (n_written < count) phys = copy_direct(w, slot, m, src, count, qoff, ts, rec0, dst, phys);
    fault(w, SHMQ_FP_AFTER_CQ);
    STORE_REL(&qs->next_offset, qoff + count);
    fault(w, SHMQ_FP_MID_PUBLISH);
    STORE_REL(&c->pos.commit_pos, phys);
    c->pos.appends += count;
    fault(w, SHMQ_FP_AFTER_PUBLISH);
    STORE_REL(&c->intent.active, 0);
    out->phys_offset = rec;
    out->queue_offset = qoff;
    out->end = phys;
    out->store_ts = ts;
    out->count = (int32_t)count;
unlock:
    shmq_unlock(w);
    if (rc == SHMQ_OK) notify_data(c, qs);
    return rc;
}

/* A MessageBatch body b of n bytes, extra appended to each entry's properties (tag_all: as
 * batch_scan) */
static int put_encoded_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *b, uint32_t n,
                             const uint8_t *extra, uint32_t extra_len, shmq_result *out, int try_lock,
                             const int64_t *tag_all) {
    shmq_ctl *c = w->ctl;
    if (slot >= c->header.queue_capacity || LOAD_ACQ(&c->queues[slot].state) != 1) return SHMQ_EINVAL;
    if (is_prepared_or_rollback(m->sysflag) || extra_len > SHMQ_PROPS_MAX) return SHMQ_EINVAL;
    uint32_t count;
    uint64_t total;
    int rc = batch_scan(w, &c->queues[slot], m, b, n, extra_len, &count, &total, tag_all);
    if (rc) return rc;
    batch_src src = {.b = b, .extra = extra, .extra_len = extra_len};
    return put_batch(w, slot, m, &src, count, total, out, try_lock);
}

int shmq_put_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *b, uint32_t n,
                   const uint8_t *extra, uint32_t extra_len, shmq_result *out) {
    return put_encoded_batch(w, slot, m, b, n, extra, extra_len, out, 0, NULL);
}

/* ============================================================ local send == */
/* UNIQ_KEY as the Java client forms it (MessageClientIDSetter): 32 upper-case hex chars,
 *   prefix (20: IPv4, pid, loader hash) | ms since month start (8) | counter (4)
 * The counter is shared by every thread of the process (one shmq_uniq per process), so two
 * ids of one process never repeat within 65536 draws of one millisecond. */
static const char HEXU[] = "0123456789ABCDEF";
static char HEX2[256][2]; /* each byte's two upper-case hex digits: two digits per step */

__attribute__((constructor)) static void hex2_init(void) {
    for (int b = 0; b < 256; b++) { HEX2[b][0] = HEXU[b >> 4]; HEX2[b][1] = HEXU[b & 15]; }
}

/* v as `digits` (even) hex digits, most significant first */
static inline void hexn(char *out, uint32_t v, int digits) {
    for (int i = digits - 2; i >= 0; i -= 2) { memcpy(out + i, HEX2[v & 0xFF], 2); v >>= 8; }
}

/* n ids at out for the time now (ms since the epoch) */
static int uniq_ids_at(shmq_uniq *u, uint32_t n, char *out, int64_t now) {
    if (now < u->month_start_ms || now >= u->next_month_ms) return SHMQ_EMONTH;
    uint32_t ms = (uint32_t)(now - u->month_start_ms);  /* Java's (int) cast: the low 32 bits */
    uint32_t c0 = __atomic_fetch_add(&u->counter, n, __ATOMIC_RELAXED);
    char head[28]; /* prefix and time: the same for every id of one call */
    memcpy(head, u->prefix, 20);
    hexn(head + 20, ms, 8);
    for (uint32_t k = 0; k < n; k++, out += 32) {
        memcpy(out, head, 28);
        hexn(out + 28, (c0 + k) & 0xFFFF, 4);
    }
    return SHMQ_OK;
}

int shmq_uniq_ids(shmq_uniq *u, uint32_t n, char *out) { return uniq_ids_at(u, n, out, shmq_now_ms()); }

/* properties = head | UNIQ_KEY \x01 id | tail. head is empty or ends in \x02 (the caller's
 * user properties, TAGS and KEYS); tail is \x02 CLUSTER \x01 name. One C call for the whole
 * send: the id, the properties text and the append. */
static int put_local(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *body, uint32_t blen,
                     const uint8_t *head, uint32_t hlen, shmq_uniq *u, const uint8_t *tail, uint32_t tlen,
                     shmq_result *out, char *id_out, int try_lock) {
    uint8_t props[SHMQ_PROPS_MAX];
    if ((uint64_t)hlen + UNIQ_PAIR_LEN + tlen > SHMQ_PROPS_MAX) return SHMQ_EINVAL;
    int64_t now = shmq_now_ms();  /* one clock read a send: the id's time, and the store time's */
    int rc = uniq_ids_at(u, 1, id_out, now);
    if (rc) return rc;
    uint8_t *p = props;
    memcpy(p, head, hlen); p += hlen;
    p = put_uniq_head(p);
    memcpy(p, id_out, 32); p += 32;
    memcpy(p, tail, tlen); p += tlen;
    /* head comes first and the UNIQ_KEY / CLUSTER pairs after it are no TAGS: the first TAGS
     * pair of the whole text, the one the hash is of, is head's (saves scanning ~70 bytes) */
    int64_t tag = shmq_tag_code_of_props(head, hlen);
    return put_one(w, slot, m, body, blen, props, (uint32_t)(p - props), out, try_lock, &tag, try_lock ? now : 0);
}

int shmq_put_local(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *body, uint32_t blen,
                   const uint8_t *head, uint32_t hlen, shmq_uniq *u, const uint8_t *tail, uint32_t tlen,
                   shmq_result *out, char *id_out) {
    return put_local(w, slot, m, body, blen, head, hlen, u, tail, tlen, out, id_out, 0);
}

int shmq_send(const shmq_route *r, const uint8_t *body, uint32_t blen, const uint8_t *head, uint32_t hlen,
              int try_lock) {
    return put_local(r->w, r->slot, r->meta, body, blen, head, hlen, r->u, r->tail, r->tail_len, r->out,
                     r->id_out, try_lock);
}

/* The MessageBatch body (RocketMQ MessageDecoder.encodeMessages, entries as above batch_scan)
 * of n plain messages, built in scratch: bodies concatenated (body_lens[k] each), or (body_ptrs
 * not NULL) at body_ptrs[k]; heads either concatenated with head_lens, or (head_lens NULL) one
 * head of head_len shared by all; flags NULL for all 0. Each entry's properties are its head and
 * a UNIQ_KEY drawn here (written to ids_out, 32 chars each). Returns the encoded length, or a
 * negative SHMQ_* status. The one encoder of a producer's batch, appended locally (local_batch)
 * or sent over TCP as SEND_BATCH_MESSAGE's body (shmq_encode_batch). */
static int64_t encode_batch(const uint8_t *bodies, const uint8_t *const *body_ptrs, const uint32_t *blens,
                            const uint8_t *heads, const uint32_t *hlens, uint32_t hlen0, const int32_t *flags,
                            uint32_t n, shmq_uniq *u, uint8_t *scratch, uint64_t cap, char *ids_out) {
    if (n == 0) return SHMQ_EBADBATCH;
    uint64_t need = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t hl = hlens ? hlens[k] : hlen0;
        if ((uint64_t)hl + UNIQ_PAIR_LEN > SHMQ_PROPS_MAX || blens[k] > INT32_MAX) return SHMQ_EINVAL;
        need += BATCH_ENTRY_FIXED + (uint64_t)blens[k] + hl + UNIQ_PAIR_LEN;
    }
    if (need > cap || need > UINT32_MAX) return SHMQ_ETOOBIG;
    int rc = shmq_uniq_ids(u, n, ids_out);
    if (rc) return rc;
    uint8_t *p = scratch;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t hl = hlens ? hlens[k] : hlen0;
        uint32_t plen = hl + UNIQ_PAIR_LEN;
        const uint8_t *body = body_ptrs ? body_ptrs[k] : bodies;
        be32(p, BATCH_ENTRY_FIXED + blens[k] + plen);
        be32(p + 4, 0);
        be32(p + 8, 0);
        be32(p + 12, flags ? (uint32_t)flags[k] : 0);
        be32(p + 16, blens[k]);
        memcpy(p + 20, body, blens[k]);
        if (!body_ptrs) bodies += blens[k];
        p += 20 + blens[k];
        be16(p, (uint16_t)plen);
        p += 2;
        memcpy(p, heads, hl); p += hl;
        if (hlens) heads += hl;
        p = put_uniq_head(p);
        memcpy(p, ids_out + 32 * (uint64_t)k, 32); p += 32;
    }
    return (int64_t)need;
}

/* A batch of n plain messages (encode_batch's arguments), appended as shmq_put_batch with extra. */
static int local_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m, const uint8_t *bodies,
                       const uint8_t *const *body_ptrs, const uint32_t *blens, const uint8_t *heads,
                       const uint32_t *hlens, uint32_t hlen0, const int32_t *flags, uint32_t n, shmq_uniq *u,
                       const uint8_t *extra, uint32_t elen, uint8_t *scratch, uint64_t cap, shmq_result *out,
                       char *ids_out, int try_lock) {
    int64_t need = encode_batch(bodies, body_ptrs, blens, heads, hlens, hlen0, flags, n, u, scratch, cap, ids_out);
    if (need < 0) return (int)need;
    /* one shared head: its TAGS hash is every entry's (the UNIQ_KEY pair after it holds none) */
    int64_t tag = hlens ? 0 : shmq_tag_code_of_props(heads, hlen0);
    return put_encoded_batch(w, slot, m, scratch, (uint32_t)need, extra, elen, out, try_lock, hlens ? NULL : &tag);
}

int shmq_put_local_batch(shmq_writer *w, uint32_t slot, const shmq_meta *m,
                         const uint8_t *bodies, const uint32_t *blens,
                         const uint8_t *heads, const uint32_t *hlens, uint32_t hlen0,
                         const int32_t *flags, uint32_t n, shmq_uniq *u,
                         const uint8_t *extra, uint32_t elen,
                         uint8_t *scratch, uint64_t cap, shmq_result *out, char *ids_out) {
    return local_batch(w, slot, m, bodies, NULL, blens, heads, hlens, hlen0, flags, n, u, extra, elen, scratch, cap,
                       out, ids_out, 0);
}

/* The scan of a direct batch (batch_src without b): the checks encode_batch and batch_scan make
 * of the same messages, in their order (so the same status: the encoded batch at most cap bytes,
 * the ids drawn, then the append's limits), each entry's CRC and tag into the writer's scratch,
 * the total into *total. The properties of every entry are merged bytes long. */
static int direct_scan(shmq_writer *w, uint32_t slot, const shmq_meta *m, const batch_src *s, uint32_t n,
                       shmq_uniq *u, char *ids_out, uint64_t cap, uint32_t merged, uint64_t *total) {
    if (n == 0) return SHMQ_EBADBATCH;
    uint64_t need = 0;
    for (uint32_t k = 0; k < n; k++) {
        if ((uint64_t)s->hlen + UNIQ_PAIR_LEN > SHMQ_PROPS_MAX || s->blens[k] > INT32_MAX) return SHMQ_EINVAL;
        need += BATCH_ENTRY_FIXED + (uint64_t)s->blens[k] + s->hlen + UNIQ_PAIR_LEN;
    }
    if (need > cap || need > UINT32_MAX) return SHMQ_ETOOBIG;
    int rc = shmq_uniq_ids(u, n, ids_out);
    if (rc) return rc;
    shmq_ctl *c = w->ctl;
    if (slot >= c->header.queue_capacity || LOAD_ACQ(&c->queues[slot].state) != 1) return SHMQ_EINVAL;
    if (is_prepared_or_rollback(m->sysflag) || s->extra_len > SHMQ_PROPS_MAX || merged > SHMQ_PROPS_MAX)
        return SHMQ_EINVAL;
    /* one shared head: its TAGS hash is every entry's (the UNIQ_KEY pair after it holds none) */
    int64_t tag = m->tag_mode != SHMQ_TAG_FROM_PROPS ? m->tag_code : shmq_tag_code_of_props(s->head, s->hlen);
    uint64_t sum = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (s->blens[k] > c->header.max_message_size) return SHMQ_ETOOBIG;
        if (k >= w->scratch_cap) return SHMQ_EBADBATCH;
        w->scratch_crc[k] = shmq_crc32(0, s->bodies[k], s->blens[k]) & 0x7FFFFFFFu;
        w->scratch_tag[k] = tag;
        sum += SHMQ_RECORD_FIXED + (uint64_t)s->blens[k] + c->queues[slot].topic_len + merged;
    }
    *total = sum;
    return SHMQ_OK;
}

/* The uniform local batch of a route (one head, flags 0), appended straight from the bodies: the
 * records (and statuses) encode_batch and put_encoded_batch would make of it, without encoding it
 * first. The batch-level properties are the route's tail without its leading \x02, after a \x02
 * (the entries' properties end with their id). scratch is not needed; cap still bounds the batch
 * as encoded (local_send.MAX_BATCH_BYTES). */
int shmq_send_batch(const shmq_route *r, const uint8_t *const *body_ptrs, const uint32_t *blens, uint32_t n,
                    const uint8_t *head, uint32_t hlen, uint8_t *scratch, uint64_t cap, char *ids_out, int try_lock) {
    if (r->tail_len < 1) return SHMQ_EINVAL;
    uint32_t elen = r->tail_len - 1;
    uint8_t pair[SHMQ_PROPS_MAX];
    uint32_t pair_len = UNIQ_PAIR_LEN + (elen ? 1 + elen : 0);
    if (pair_len > sizeof pair) return SHMQ_EINVAL;
    put_uniq_head(pair);
    if (elen) { pair[UNIQ_PAIR_LEN] = SHMQ_PROPERTY_SEP; memcpy(pair + UNIQ_PAIR_LEN + 1, r->tail + 1, elen); }
    batch_src s = {.extra = r->tail + 1, .extra_len = elen, .bodies = body_ptrs, .blens = blens, .head = head,
                   .hlen = hlen, .pair = pair, .pair_len = pair_len, .ids = ids_out};
    uint64_t total;
    int rc = direct_scan(r->w, r->slot, r->meta, &s, n, r->u, ids_out, cap, hlen + pair_len, &total);
    return rc ? rc : put_batch(r->w, r->slot, r->meta, &s, n, total, r->out, try_lock);
}

/* The same uniform batch only encoded (no append): SEND_BATCH_MESSAGE's body over TCP. */
int shmq_encode_batch(const uint8_t *const *body_ptrs, const uint32_t *blens, uint32_t n, const uint8_t *head,
                      uint32_t hlen, shmq_uniq *u, uint8_t *scratch, uint64_t cap, char *ids_out, uint64_t *len_out) {
    int64_t need = encode_batch(NULL, body_ptrs, blens, head, NULL, hlen, NULL, n, u, scratch, cap, ids_out);
    if (need < 0) return (int)need;
    *len_out = (uint64_t)need;
    return SHMQ_OK;
}

/* ================================================================== index == */
/* RocketMQ's IndexFile (layout table in shmq/store/index_file.py): a 40-byte header, hashSlotNum
 * 4-byte slots, indexNum 20-byte entries, all big-endian. One writer (the owner's dispatch
 * thread); readers in any process follow the publication order of index_put: entry, slot,
 * begin (first entry), hashSlotCount, indexCount (release), end. */
#define IDX_HEADER 40
#define IDX_ENTRY 20

static int index_put(uint8_t *idx, uint32_t slots, uint32_t num, uint32_t hash, int64_t phys, int64_t ts) {
    int32_t count = (int32_t)rd32(idx + 36);
    if (count <= 0) count = 1;                          /* never written: empty */
    if ((uint32_t)count >= num) return 0;
    uint32_t key_hash = (int32_t)hash == INT32_MIN ? 0 : (uint32_t)abs((int32_t)hash);
    uint8_t *slot = idx + IDX_HEADER + (uint64_t)(key_hash % slots) * 4;
    int32_t prev = (int32_t)rd32(slot);
    if (prev <= 0 || prev >= count) prev = 0;           /* empty, or left by a put that died */
    int first = count <= 1;
    int64_t begin_ts = first ? ts : (int64_t)rd64(idx);
    int64_t diff = 0;
    if (begin_ts > 0) {
        diff = (ts - begin_ts) / 1000;
        if (diff < 0) diff = 0;
        if (diff > INT32_MAX) diff = INT32_MAX;
    }
    uint8_t *e = idx + IDX_HEADER + (uint64_t)slots * 4 + (uint64_t)count * IDX_ENTRY;
    be32(e, key_hash);
    be64(e + 4, (uint64_t)phys);
    be32(e + 12, (uint32_t)diff);
    be32(e + 16, (uint32_t)prev);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    be32(slot, (uint32_t)count);
    if (first) { be64(idx, (uint64_t)ts); be64(idx + 16, (uint64_t)phys); }
    if (prev == 0) be32(idx + 32, rd32(idx + 32) + 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    be32(idx + 36, (uint32_t)count + 1);
    be64(idx + 24, (uint64_t)phys);
    be64(idx + 8, (uint64_t)ts);
    return 1;
}

/* The values of UNIQ_KEY and KEYS (each its last occurrence, as a Java map keeps it; NULL when
 * absent), in one pass over the properties text. */
static void index_keys(const uint8_t *p, uint32_t n, const uint8_t **uniq, uint32_t *ulen, const uint8_t **keys,
                       uint32_t *klen) {
    *uniq = *keys = NULL;
    uint32_t i = 0;
    while (i < n) {
        uint32_t k = i;
        const uint8_t *sep = memchr(p + i, SHMQ_NAME_VALUE_SEP, n - i);
        if (!sep) break;
        i = (uint32_t)(sep - p);
        uint32_t nlen = i - k, v = ++i;
        const uint8_t *end = memchr(p + i, SHMQ_PROPERTY_SEP, n - i);
        i = end ? (uint32_t)(end - p) : n;
        if (nlen == SHMQ_PROP_LEN(SHMQ_PROP_UNIQ_KEY) && memcmp(p + k, SHMQ_PROP_UNIQ_KEY, nlen) == 0) {
            *uniq = p + v;
            *ulen = i - v;
        } else if (nlen == SHMQ_PROP_LEN(SHMQ_PROP_KEYS) && memcmp(p + k, SHMQ_PROP_KEYS, nlen) == 0) {
            *keys = p + v;
            *klen = i - v;
        }
        i++;
    }
}

/* Index the committed records from log[*off] that start below end (and end by limit, the
 * commit position: anything crossing it is not a record) into one IndexFile (IndexService.buildIndex each):
 * keys topic#UNIQ_KEY and topic#<word> for each non-empty space-separated word of KEYS;
 * rollback records and records below the file's endPhyOffset are skipped. *off advances
 * past every record done. *skip is the number of keys of the record at *off already put
 * (after a roll; 0 otherwise). Returns SHMQ_OK (reached end), SHMQ_IDX_FULL (the file is
 * full: roll, call again), SHMQ_IDX_BLANK (*off is at the file's BLANK filler) or
 * SHMQ_EINVAL (no record at *off). */
int shmq_index_records(uint8_t *idx, uint32_t slots, uint32_t num, const uint8_t *log, int64_t base_phys,
                       uint64_t *off, uint64_t end, uint64_t limit, uint32_t *skip) {
    const uint8_t *topic = NULL;  /* the topic h0 is the hash of (topic#), in the log */
    uint32_t topic_len = 0, h0 = 0;
    while (*off < end) {
        const uint8_t *r = log + *off;
        if (limit - *off < 8) return SHMQ_EINVAL;
        uint32_t total = rd32(r), magic = rd32(r + 4);
        if (magic == SHMQ_BLANK_MAGIC) return SHMQ_IDX_BLANK;
        if (magic != SHMQ_MESSAGE_MAGIC || total < SHMQ_RECORD_FIXED || total > limit - *off) return SHMQ_EINVAL;
        int64_t phys = base_phys + (int64_t)*off;
        uint32_t sysflag = rd32(r + SHMQ_R_SYSFLAG);
        int64_t ts = (int64_t)rd64(r + SHMQ_R_STORETS);
        uint32_t blen = rd32(r + SHMQ_R_BODYLEN);
        if ((uint64_t)blen + SHMQ_RECORD_FIXED > total) return SHMQ_EINVAL;
        const uint8_t *t = r + SHMQ_R_BODYLEN + 4 + blen;
        uint32_t tlen = t[0];
        uint32_t plen = rd16(t + 1 + tlen);
        if ((uint64_t)SHMQ_RECORD_FIXED + blen + tlen + plen != total) return SHMQ_EINVAL;
        const uint8_t *props = t + 3 + tlen;
        int64_t end_phy = (int64_t)rd64(idx + 24);
        if (phys >= end_phy && (sysflag & 0xC) != 0xC) {
            if (!topic || tlen != topic_len || memcmp(t + 1, topic, tlen) != 0) {  /* most runs are one topic */
                topic = t + 1;
                topic_len = tlen;
                h0 = java_hash_cont(java_hash_cont(0, topic, tlen), (const uint8_t *)"#", 1);
            }
            uint32_t ulen = 0, klen = 0, k = 0;
            const uint8_t *uniq, *keys;
            index_keys(props, plen, &uniq, &ulen, &keys, &klen);
            if (uniq) {
                if (k++ >= *skip && !index_put(idx, slots, num, java_hash_cont(h0, uniq, ulen), phys, ts)) {
                    *skip = k - 1;
                    return SHMQ_IDX_FULL;
                }
            }
            for (uint32_t i = 0; keys && i < klen;) {
                uint32_t w = i;
                while (i < klen && keys[i] != ' ') i++;
                if (i > w && k++ >= *skip
                        && !index_put(idx, slots, num, java_hash_cont(h0, keys + w, i - w), phys, ts)) {
                    *skip = k - 1;
                    return SHMQ_IDX_FULL;
                }
                i++;
            }
        }
        *off += total;
        *skip = 0;
    }
    return SHMQ_OK;
}

/* ================================================================= records == */
/* >0: the record's size; 0: a BLANK filler; <0: not a valid record here. phys < 0 skips the
 * PHYSICALOFFSET check. */
int64_t shmq_check_record(const uint8_t *p, uint64_t avail, int64_t phys, int check_crc) {
    if (avail < 8) return -1;
    uint32_t total = rd32(p), magic = rd32(p + 4);
    if (magic == SHMQ_BLANK_MAGIC) return 0;
    if (magic != SHMQ_MESSAGE_MAGIC) return -2;
    if (total < SHMQ_RECORD_FIXED || total > avail) return -3;
    if (phys >= 0 && (int64_t)rd64(p + SHMQ_R_PHYSOFFSET) != phys) return -4;
    uint32_t blen = rd32(p + SHMQ_R_BODYLEN);
    if ((uint64_t)blen + SHMQ_RECORD_FIXED > total) return -5;
    uint32_t tlen = p[SHMQ_R_BODYLEN + 4 + blen];
    if ((uint64_t)blen + tlen + SHMQ_RECORD_FIXED > total) return -5;
    uint32_t plen = rd16(p + SHMQ_R_BODYLEN + 5 + blen + tlen);
    if ((uint64_t)SHMQ_RECORD_FIXED + blen + tlen + plen != total) return -5;
    if (check_crc && (shmq_crc32(0, p + SHMQ_R_BODYLEN + 4, blen) & 0x7FFFFFFFu) != rd32(p + SHMQ_R_BODYCRC))
        return -6;
    return total;
}

/* ========================================================== waits and flush == */
int64_t shmq_load_i64(const int64_t *p) { return LOAD_ACQ(p); }

static int64_t wait_data(shmq_ctl *c, int64_t seen, int64_t spin_ns, int64_t timeout_ns, uint32_t bits,
                         const uint32_t *stop);

int64_t shmq_wait_data(shmq_ctl *c, int64_t seen, int64_t spin_ns, int64_t timeout_ns) {
    return wait_data(c, seen, spin_ns, timeout_ns, FUTEX_BITSET_MATCH_ANY, NULL);
}

/* shmq_wait_data for a worker's pull-wake thread: not woken by this process's own appends
 * (see data_wake_bits); returns at the timeout with whatever the position is then. */
static int64_t wait_data_others(shmq_ctl *c, int64_t seen, int64_t timeout_ns, const uint32_t *stop) {
    return wait_data(c, seen, 0, timeout_ns, data_wake_bits == FUTEX_BITSET_MATCH_ANY
                     ? FUTEX_BITSET_MATCH_ANY : ~data_wake_bits, stop);
}

int64_t shmq_wait_data_others(shmq_ctl *c, int64_t seen, int64_t timeout_ns) {
    return wait_data_others(c, seen, timeout_ns, NULL);
}

/* `stop` (or NULL): a word that, once non-zero, ends the wait at its next look (a helper thread
 * being stopped before its control block is unmapped: shmq_helpers_stop). */
static int64_t wait_data(shmq_ctl *c, int64_t seen, int64_t spin_ns, int64_t timeout_ns, uint32_t bits,
                         const uint32_t *stop) {
    int64_t t0 = mono_ns(), cpos;
    if ((cpos = LOAD_ACQ(&c->pos.commit_pos)) > seen) return cpos;
    while (spin_ns > 0) {
        for (int i = 0; i < 64; i++) {
            CPU_RELAX();
            if ((cpos = LOAD_ACQ(&c->pos.commit_pos)) > seen) return cpos;
        }
        if (mono_ns() - t0 >= spin_ns) break;
    }
    int64_t deadline = t0 + timeout_ns;
    for (;;) {
        uint32_t seq = LOAD_SC(&c->pos.data_seq);
        if ((cpos = LOAD_SC(&c->pos.commit_pos)) > seen || (stop && LOAD_SC(stop))) return cpos;
        int64_t left = deadline - mono_ns();
        if (left <= 0) return cpos;
        ADD_SC(&c->pos.data_waiters, 1);
        if (LOAD_SC(&c->pos.commit_pos) <= seen && LOAD_ACQ(&c->owner.state) != SHMQ_STATE_FENCED
                && !(stop && LOAD_SC(stop)))
            futex_wait_bits(&c->pos.data_seq, seq, deadline, bits);
        SUB_SC(&c->pos.data_waiters, 1);
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
 * moves commit_pos past that load and ends the sleep. */
int shmq_wait_queues(shmq_ctl *c, int64_t *const *next, const int64_t *offs, int n, int start, int64_t *seen,
                     int hold, const int32_t *poke, int32_t poked, int64_t spin_ns, int64_t timeout_ns) {
    int64_t deadline = mono_ns() + timeout_ns, before = *seen;
    if (start < 0 || start >= n) start = 0;
    for (;;) {
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
        int64_t left = deadline - mono_ns();
        if (left <= 0) return -1;
        shmq_wait_data(c, cpos, spin_ns < left ? spin_ns : left, left);
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
    if (LOAD_SC(&c->pos.data_waiters))
        syscall(SYS_futex, &c->pos.data_seq, FUTEX_WAKE_BITSET, INT_MAX, NULL, NULL, data_wake_bits);
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
