/*
 * shmq/native/core_util.c -- the C core's leaf helpers: CRC32 (zlib's, slice-by-8, PCLMUL
 * folding when the CPU has it), Java's String.hashCode and the ConsumeQueue tag code, the
 * wall clock, a process's identity token and the liveness check the lock's steal relies on
 * (dead only when provably dead), and which data-futex bits this process's appends wake.
 * No state but tables built once when the library loads and data_wake_bits (set once by a
 * process, read by its every append).
 */

#define _GNU_SOURCE
#include "core_private.h"

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
/* 31^k as Java's int arithmetic makes it (mod 2^32) */
#define P1 31u
#define P2 (P1 * P1)
#define P3 (P2 * P1)
#define P4 (P2 * P2)
#define P8 (P4 * P4)

uint32_t java_hash_cont(uint32_t h, const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* eight ASCII bytes a step: h * 31^8 + s0 * 31^7 + ... + s7, the same value mod 2^32 as
         * eight single steps with an eighth of their chain of multiplies (the index dispatch
         * hashes every message's topic#UNIQ_KEY, 40-odd bytes: this was ~45 % of its instructions) */
        for (uint64_t w; i + 8 <= n && (memcpy(&w, s + i, 8), (w & 0x8080808080808080ull) == 0); i += 8) {
            const uint8_t *c = s + i;
            uint32_t hi = c[0] * P3 + c[1] * P2 + c[2] * P1 + c[3];
            uint32_t lo = c[4] * P3 + c[5] * P2 + c[6] * P1 + c[7];
            h = h * P8 + hi * P4 + lo;
        }
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
 * Properties are "name\1value\2name\1value" with an optional trailing \2; a name that a \2
 * ends before any \1 is no pair, and is skipped. The separators are found with memchr (glibc's
 * vector scan): a byte-by-byte walk cost ~6 instructions a byte, ~250 for a message's UNIQ_KEY
 * pair alone, on every append whose tag comes from its properties (each entry of a TCP batch). */
int64_t shmq_tag_code_of_props(const uint8_t *p, size_t n) {
    const uint8_t *q = p, *e = p + n, *sep = NULL;
    int looked = 0;  /* sep: the first \1 at or after q, once looked for (NULL: none is left) */
    while (q < e) {
        if (!looked || (sep && sep < q)) sep = memchr(q, SHMQ_NAME_VALUE_SEP, (size_t)(e - q)), looked = 1;
        const uint8_t *stop = memchr(q, SHMQ_PROPERTY_SEP, (size_t)((sep ? sep : e) - q));
        if (stop) { q = stop + 1; continue; }  /* no value: not a pair */
        if (!sep) return 0;
        const uint8_t *val = sep + 1, *ve = memchr(val, SHMQ_PROPERTY_SEP, (size_t)(e - val));
        if (!ve) ve = e;
        if ((size_t)(sep - q) == SHMQ_PROP_LEN(SHMQ_PROP_TAGS) && memcmp(q, SHMQ_PROP_TAGS, (size_t)(sep - q)) == 0)
            return ve > val ? (int64_t)shmq_java_hash(val, (size_t)(ve - val)) : 0;
        q = ve + 1;
    }
    return 0;
}

/* ================================================================ identity == */
int64_t shmq_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
/* Which sleepers on data_seq an append of this process wakes (FUTEX_WAKE_BITSET): all of them
 * unless the process chose a bit (shmq_set_data_wake_bit). A broker worker takes its own bit:
 * its event loop checks its held pulls itself after each of its appends, and its pull-wake
 * thread sleeps with every bit but that one (shmq_wait_data_others), so the worker's own
 * appends do not wake that thread while everybody else's (other workers, local producers, the
 * supervisor, anyone who never chose a bit) still do. Every other sleeper waits with all bits. */
uint32_t data_wake_bits = FUTEX_BITSET_MATCH_ANY;

void shmq_set_data_wake_bit(int bit) {
    data_wake_bits = bit >= 0 && bit < 32 ? 1u << bit : FUTEX_BITSET_MATCH_ANY;
    pull_peer_bits = 0;  /* (a forked child, -1: an appender that wakes everyone the futex way) */
    skip_ignore[0] = skip_ignore[1] = 0;
    if (data_wake_bits != FUTEX_BITSET_MATCH_ANY) skip_ignore[SKIP_WORD(bit)] = 0xFull * SKIP_ONE(bit);
}

/* The other workers of this broker whose held pulls this worker's appends wake through their
 * eventfds (fds[b], -1: none), not through their pull-wake threads: each such thread sleeps with
 * none of those workers' bits (shmq_wait_data_others), so a worker's append wakes one loop, not a
 * thread that then wakes the loop (bench/RESULTS.md "Session 9, tcphops"). Only on a worker,
 * after shmq_set_data_wake_bit; every worker of the broker is given the same fds. */
uint32_t pull_peer_bits;
int pull_peer_fds[32];
uint64_t skip_ignore[2];

void shmq_set_pull_peers(const int *fds, int n) {
    if (data_wake_bits == FUTEX_BITSET_MATCH_ANY) return;
    uint32_t bits = 0;
    for (int b = 0; b < n && b < 32; b++) {
        pull_peer_fds[b] = fds[b];
        if (fds[b] >= 0 && !(data_wake_bits & (1u << b))) bits |= 1u << b;
    }
    for (int b = 0; b < 32; b++)  /* their threads do not count for this worker's appends either */
        if (bits & (1u << b)) skip_ignore[SKIP_WORD(b)] |= 0xFull * SKIP_ONE(b);
    pull_peer_bits = bits;
}

void shmq_pull_armed(shmq_ctl *c, int bit, int on) {
    if (bit < 0 || bit >= 32) return;
    if (on) __atomic_fetch_or(&c->pos.pull_armed, 1u << bit, __ATOMIC_SEQ_CST);
    else __atomic_fetch_and(&c->pos.pull_armed, ~(1u << bit), __ATOMIC_SEQ_CST);
}

/* A run of appends in one read of a connection (the worker's C send path, send_fast.py): while on,
 * this thread's appends owe their peers one wake_peers, written when it is turned off, after the
 * run's last append, not at its first. A holder on another worker then answers the run's
 * messages in one look, as a holder on the appending worker does (its check after the run),
 * instead of waking at the first append and answering one or two a pull while the run goes on
 * (the Java benchmark's 64 pipelined senders: bench/RESULTS.md "Session 17, place17"). No lost
 * wake-up: every append of the run is published before the owed wake_peers runs, and
 * wake_peers' protocol is unchanged. */
__thread int pull_peer_deferred, pull_peer_owed;

void shmq_pull_peers_defer(shmq_ctl *c, int on) {
    pull_peer_deferred = on;
    if (!on && pull_peer_owed) {
        pull_peer_owed = 0;
        wake_peers(c);
    }
}

void shmq_pull_signal_clear(shmq_ctl *c, int bit) {
    if (bit >= 0 && bit < 32) __atomic_fetch_and(&c->pos.pull_signaled, ~(1u << bit), __ATOMIC_SEQ_CST);
}
