/* bench/new_pages.c -- the cost per 4 KiB page of each way to get NEW file pages writable here
 * (issue 16, session 6, pagefloor; RESULTS "Session 6, pagefloor"). Not part of shmq: a
 * measurement, built by hand:
 *
 *     gcc -O2 -o <tree>/new_pages bench/new_pages.c
 *     <tree>/new_pages DIR METHOD MIB [STEP_KIB]      # KEEP=1: leave the file (fresh memory next time)
 *
 * Each run makes one fresh file of MIB MiB in DIR (posix_fallocate as the store's CommitLog, or
 * ftruncate for the sparse_* methods) and times each phase (wall and process CPU per page):
 *   write_fault / sparse_write   a store per page through a shared mapping (what an append meets
 *                                with no pre-touch)
 *   populate_read[_random]       MADV_POPULATE_READ in STEP_KIB steps (the store's pre-touch), then
 *                                a store per page through a second mapping (the producer's own);
 *                                _random: MADV_RANDOM first (no readahead, order-0 folios)
 *   populate_write[_same]        MADV_POPULATE_WRITE, then the stores (second / the same mapping)
 *   map_populate                 mmap(MAP_POPULATE) (a shared mapping: read faults), then the stores
 *   pwrite_zeros[_small] / sparse_pwrite   pwrite of zeros in 1 MiB (16 KiB) pieces, then the stores
 *   records_fault[_random], records_popr, records_popw, records_pwrite, records_old
 *                                268-byte records back to back: into new pages with faults, after
 *                                POPULATE_READ / _WRITE, by pwrite of 64-record pieces, and into
 *                                pages already written (the copy alone)
 *   anon                         first touch of anonymous memory (the host's side of a new page)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define PG 4096
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static size_t SZ;
static int newfile(const char *p, int alloc) {
    unlink(p);
    int fd = open(p, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) { perror("open"); exit(1); }
    if (alloc == 1) { int r = posix_fallocate(fd, 0, SZ); if (r) { errno = r; perror("fallocate"); exit(1); } }
    else if (ftruncate(fd, SZ)) { perror("ftruncate"); exit(1); }
    return fd;
}
static char *map(int fd, int flags) {
    char *m = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);
    if (m == MAP_FAILED) { perror("mmap"); exit(1); }
    return m;
}
static void touch_w(char *m) { for (size_t o = 0; o < SZ; o += PG) *(volatile uint64_t *)(m + o) = 1; }
static void madv(char *m, size_t step, int adv) {
    for (size_t o = 0; o < SZ; o += step) {
        size_t n = SZ - o < step ? SZ - o : step;
        if (madvise(m + o, n, adv)) { perror("madvise"); exit(1); }
    }
}
static char rec[268];
static void write_records(char *m) {  /* the producer: 268-byte records, back to back */
    size_t o = 0;
    while (o + sizeof rec <= SZ) { memcpy(m + o, rec, sizeof rec); o += sizeof rec; }
}
static void report(const char *name, const char *phase, double w, double c) {
    double pages = SZ / PG;
    printf("%-28s %-22s wall %7.0f ns/page cpu %7.0f ns/page  %5.2f GB/s\n", name, phase, w / pages * 1e9, c / pages * 1e9, SZ / w / 1e9);
    fflush(stdout);
}
#define T0 double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID)
#define T1(name, phase) report(name, phase, now(CLOCK_MONOTONIC) - w0, now(CLOCK_PROCESS_CPUTIME_ID) - c0)
int main(int argc, char **argv) {
    const char *dir = argv[1]; const char *method = argv[2]; SZ = (size_t)atol(argv[3]) << 20;
    size_t step = argc > 4 ? (size_t)atol(argv[4]) << 10 : SZ;
    char path[4096]; snprintf(path, sizeof path, "%s/pf-%d", dir, getpid());
    memset(rec, 'x', sizeof rec);
    int alloc = strcmp(method, "sparse_write") && strcmp(method, "sparse_pwrite") ? 1 : 0;
    int fd = newfile(path, alloc);
    char *a = NULL, *b = NULL;
    char label[64]; snprintf(label, sizeof label, "%s/%zuK", method, step >> 10);
    if (!strcmp(method, "write_fault") || !strcmp(method, "sparse_write")) {
        a = map(fd, 0);
        { T0; touch_w(a); T1(label, "write fault"); }
    } else if (!strcmp(method, "populate_read")) {  /* today's prefault, then the producer's own mapping */
        a = map(fd, 0); b = map(fd, 0);
        { T0; madv(a, step, MADV_POPULATE_READ); T1(label, "prefault (READ)"); }
        { T0; touch_w(b); T1(label, "then write fault"); }
    } else if (!strcmp(method, "populate_read_random")) {  /* no readahead: order-0 folios */
        a = map(fd, 0); b = map(fd, 0);
        madvise(a, SZ, MADV_RANDOM);
        { T0; madv(a, step, MADV_POPULATE_READ); T1(label, "prefault (READ, RANDOM)"); }
        { T0; touch_w(b); T1(label, "then write fault"); }
    } else if (!strcmp(method, "records_fault_random")) {
        a = map(fd, 0); madvise(a, SZ, MADV_RANDOM);
        { T0; write_records(a); T1(label, "records, faults, RANDOM"); }
    } else if (!strcmp(method, "pwrite_zeros_small")) {
        static char z16[16384];
        { T0; for (size_t o = 0; o < SZ; o += sizeof z16) if (pwrite(fd, z16, sizeof z16, o) != sizeof z16) { perror("pwrite"); exit(1); } T1(label, "pwrite zeros 16K"); }
        b = map(fd, 0);
        { T0; touch_w(b); T1(label, "then write fault"); }
    } else if (!strcmp(method, "populate_write")) {
        a = map(fd, 0); b = map(fd, 0);
        { T0; madv(a, step, MADV_POPULATE_WRITE); T1(label, "prefault (WRITE)"); }
        { T0; touch_w(b); T1(label, "then write fault"); }
    } else if (!strcmp(method, "populate_write_same")) {  /* same mapping: no producer fault left */
        a = map(fd, 0);
        { T0; madv(a, step, MADV_POPULATE_WRITE); T1(label, "prefault (WRITE)"); }
        { T0; touch_w(a); T1(label, "then write (same map)"); }
    } else if (!strcmp(method, "map_populate")) {
        { T0; a = map(fd, MAP_POPULATE); T1(label, "mmap MAP_POPULATE"); }
        b = map(fd, 0);
        { T0; touch_w(b); T1(label, "then write fault"); }
    } else if (!strcmp(method, "pwrite_zeros") || !strcmp(method, "sparse_pwrite")) {
        static char z[1 << 20];
        { T0; for (size_t o = 0; o < SZ; o += sizeof z) if (pwrite(fd, z, sizeof z, o) != sizeof z) { perror("pwrite"); exit(1); } T1(label, "pwrite zeros"); }
        b = map(fd, 0);
        { T0; touch_w(b); T1(label, "then write fault"); }
    } else if (!strcmp(method, "records_fault")) {  /* the page floor: records straight into new pages */
        a = map(fd, 0);
        { T0; write_records(a); T1(label, "records, faults"); }
    } else if (!strcmp(method, "records_popw")) {
        a = map(fd, 0);
        { T0; madv(a, step, MADV_POPULATE_WRITE); write_records(a); T1(label, "POP_WRITE+records"); }
    } else if (!strcmp(method, "records_popr")) {
        a = map(fd, 0);
        { T0; madv(a, step, MADV_POPULATE_READ); write_records(a); T1(label, "POP_READ+records"); }
    } else if (!strcmp(method, "records_pwrite")) {  /* write(2) of 64-record chunks: no faults */
        static char chunk[64 * sizeof rec];
        for (int k = 0; k < 64; k++) memcpy(chunk + k * sizeof rec, rec, sizeof rec);
        { T0; for (size_t o = 0; o + sizeof chunk <= SZ; o += sizeof chunk) if (pwrite(fd, chunk, sizeof chunk, o) != sizeof chunk) { perror("pwrite"); exit(1); } T1(label, "pwrite records x64"); }
    } else if (!strcmp(method, "records_old")) {  /* records into pages already written once */
        a = map(fd, 0); touch_w(a);
        { T0; write_records(a); T1(label, "records, old pages"); }
    } else if (!strcmp(method, "anon")) {
        a = mmap(NULL, SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        { T0; touch_w(a); T1(label, "anon first touch"); }
    } else { fprintf(stderr, "? %s\n", method); return 2; }
    if (a) munmap(a, SZ);
    if (b) munmap(b, SZ);
    close(fd); if (!getenv("KEEP")) unlink(path);
    return 0;
}
