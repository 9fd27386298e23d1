/*
 * shmq/native/core.h -- the C core's functions. Everything here returns SHMQ_* status codes
 * (layout.h); nothing raises, logs or calls back into Python. The CDEF block is fed to cffi.
 */
#ifndef SHMQ_CORE_H
#define SHMQ_CORE_H
#include <stddef.h>
#include <stdint.h>
#include "layout.h"

/* CDEF-BEGIN */
uint32_t shmq_layout_fingerprint(void);
uint32_t shmq_crc32(uint32_t crc, const uint8_t *buf, size_t len);
int32_t shmq_java_hash(const uint8_t *utf8, size_t len);
int64_t shmq_tag_code_of_props(const uint8_t *props, size_t len);
uint64_t shmq_self_token(void);
int shmq_pid_alive(uint64_t token);
int64_t shmq_now_ms(void);

/* control block */
shmq_offset_slot *shmq_offset_table(shmq_ctl *ctl);
int shmq_ctl_init(shmq_ctl *ctl, uint64_t size, uint32_t queue_capacity, uint32_t offset_capacity);

/* the lock (normally taken inside the put functions) */
int shmq_lock(shmq_writer *w);
void shmq_unlock(shmq_writer *w);

/* tables */
int64_t shmq_queue_find(shmq_ctl *ctl, const uint8_t *topic, size_t tlen, int32_t qid);
int64_t shmq_queue_create(shmq_writer *w, const uint8_t *topic, size_t tlen, int32_t qid);
int64_t shmq_offset_find(shmq_ctl *ctl, const uint8_t *key, size_t klen, int32_t qid);
int64_t shmq_offset_create(shmq_writer *w, const uint8_t *key, size_t klen, int32_t qid);

/* the append */
int shmq_put(shmq_writer *w, uint32_t slot, const shmq_meta *meta,
             const uint8_t *body, uint32_t body_len,
             const uint8_t *props, uint32_t props_len, shmq_result *out);
int shmq_put_batch(shmq_writer *w, uint32_t slot, const shmq_meta *meta,
                   const uint8_t *batch, uint32_t batch_len,
                   const uint8_t *extra_props, uint32_t extra_len, shmq_result *out);
/* shmq_put / shmq_put_batch with try_lock (1: SHMQ_EBUSY, nothing written, rather than sleeping
 * on a held lock): the worker's C send path, which tries them holding the GIL (remoting_send.c) */
int shmq_put_try(shmq_writer *w, uint32_t slot, const shmq_meta *meta, const uint8_t *body, uint32_t body_len,
                 const uint8_t *props, uint32_t props_len, shmq_result *out, int try_lock);
int shmq_put_batch_try(shmq_writer *w, uint32_t slot, const shmq_meta *meta, const uint8_t *batch, uint32_t batch_len,
                       const uint8_t *extra_props, uint32_t extra_len, shmq_result *out, int try_lock);
/* the commit-log offsets of the count records an appended batch body made (the first at first) */
int shmq_batch_phys(const uint8_t *batch, uint32_t batch_len, uint32_t topic_len, uint32_t extra_len,
                    int64_t first, uint32_t count, int64_t *phys);

/* the writer's own ConsumeQueue mappings, unmapped (its close; no append after) */
void shmq_writer_unmap(shmq_writer *w);
/* off the send path: map slot's current ConsumeQueue file into the writer and reserve + fault in
 * the page of its next entry (what the first append would do under the lock); SHMQ_ENEEDCQ when
 * the file does not exist yet. shmq_cq_attaches: how many maps the append made on its path. */
int shmq_cq_prepare(shmq_writer *w, uint32_t slot);
uint64_t shmq_cq_attaches(void);

/* the client's plain local send: UNIQ_KEY formed here, properties assembled here */
typedef struct shmq_uniq {
    char prefix[20];              /* hex of IPv4 (4) | pid (2) | loader hash (4): per process */
    uint32_t counter;             /* atomic: every thread of the process draws from it */
    int64_t month_start_ms;       /* the id's time part counts ms from here ... */
    int64_t next_month_ms;        /* ... and is valid until here (SHMQ_EMONTH after) */
} shmq_uniq;
int shmq_uniq_ids(shmq_uniq *u, uint32_t n, char *out);
int shmq_put_local(shmq_writer *w, uint32_t slot, const shmq_meta *meta,
                   const uint8_t *body, uint32_t body_len,
                   const uint8_t *head, uint32_t head_len, shmq_uniq *u,
                   const uint8_t *tail, uint32_t tail_len, shmq_result *out, char *id_out);
/* shmq_put_local with the arguments that are constant per queue bound once (FastWriter.route);
 * try_lock 1: SHMQ_EBUSY rather than sleeping on a held lock (callers holding the GIL, hot.c) */
typedef struct shmq_route {
    shmq_writer *w;
    const shmq_meta *meta;
    shmq_uniq *u;
    const uint8_t *tail;
    shmq_result *out;
    char *id_out;
    uint32_t slot;
    uint32_t tail_len;
} shmq_route;
int shmq_send(const shmq_route *r, const uint8_t *body, uint32_t body_len,
              const uint8_t *head, uint32_t head_len, int try_lock);
/* shmq_put_local_batch's uniform case for a route (one head, flags 0), bodies by pointer */
int shmq_send_batch(const shmq_route *r, const uint8_t *const *body_ptrs, const uint32_t *body_lens, uint32_t n,
                    const uint8_t *head, uint32_t head_len, uint8_t *scratch, uint64_t scratch_cap,
                    char *ids_out, int try_lock);
/* that batch encoded only (the MessageBatch body a TCP send carries); *len_out its length */
int shmq_encode_batch(const uint8_t *const *body_ptrs, const uint32_t *body_lens, uint32_t n,
                      const uint8_t *head, uint32_t head_len, shmq_uniq *u, uint8_t *scratch, uint64_t scratch_cap,
                      char *ids_out, uint64_t *len_out);
int shmq_put_local_batch(shmq_writer *w, uint32_t slot, const shmq_meta *meta,
                         const uint8_t *bodies, const uint32_t *body_lens,
                         const uint8_t *heads, const uint32_t *head_lens, uint32_t head_len,
                         const int32_t *flags, uint32_t n, shmq_uniq *u,
                         const uint8_t *extra, uint32_t extra_len,
                         uint8_t *scratch, uint64_t scratch_cap, shmq_result *out, char *ids_out);

/* the index dispatch (owner only): IndexService.buildIndex over a run of records */
int shmq_index_records(uint8_t *idx, uint32_t slots, uint32_t num, const uint8_t *log, int64_t base_phys,
                       uint64_t *off, uint64_t end, uint64_t limit, uint32_t *skip);

/* records */
int64_t shmq_check_record(const uint8_t *p, uint64_t avail, int64_t phys, int check_crc);

/* waiting and flushing */
int64_t shmq_wait_data(shmq_ctl *ctl, int64_t seen, int64_t spin_ns, int64_t timeout_ns);
int64_t shmq_wait_data_others(shmq_ctl *ctl, int64_t seen, int64_t timeout_ns);
void shmq_set_data_wake_bit(int bit);
void shmq_set_pull_peers(const int *fds, int n);
void shmq_pull_armed(shmq_ctl *ctl, int bit, int on);
void shmq_pull_signal_clear(shmq_ctl *ctl, int bit);
void shmq_pull_peers_defer(shmq_ctl *ctl, int on);
int shmq_wait_queues(shmq_ctl *ctl, int64_t *const *next, const int64_t *offs, int n, int start, int64_t *seen,
                     int hold, const int32_t *poke, int32_t poked, int64_t spin_ns, int64_t timeout_ns, int64_t now);
uint32_t shmq_wait_timer(shmq_ctl *ctl, uint32_t seen, int64_t timeout_ns);
void shmq_wake_timer(shmq_ctl *ctl);
int shmq_wait_flushed(shmq_ctl *ctl, int64_t target, int64_t timeout_ns);
int64_t shmq_flusher_wait(shmq_ctl *ctl, int64_t timeout_ns);
int64_t shmq_group_commit(shmq_ctl *ctl, uint8_t *base, int64_t file_start, int64_t file_end, int64_t interval_ns,
                          int64_t budget_ns, const int32_t *in_c);
void shmq_set_flushed(shmq_ctl *ctl, int64_t pos, int io_errno);
void shmq_publish_recovered(shmq_ctl *ctl, int64_t commit_pos);
void shmq_publish_replica(shmq_ctl *ctl, int64_t commit_pos);
void shmq_set_replicated(shmq_ctl *ctl, int64_t pos, int32_t slaves);
int shmq_wait_replicated(shmq_ctl *ctl, int64_t target, int64_t timeout_ns);
void shmq_fence(shmq_ctl *ctl);
int shmq_msync(uint8_t *addr, uint64_t len);
int64_t shmq_load_i64(const int64_t *p);
/* a worker's confirm bridge (broker/worker/confirm.py): modes 1 flushed, 2 replicated, 3 both */
typedef struct shmq_bridge shmq_bridge;
shmq_bridge *shmq_bridge_start(shmq_ctl *ctl, int fd, int modes);
void shmq_bridge_arm(shmq_bridge *b, int64_t want, int64_t deadline_ns);
/* a worker's pull-wake bridge (broker/worker/pull_hold.py): eventfd written when others append */
typedef struct shmq_pullwake shmq_pullwake;
shmq_pullwake *shmq_pullwake_start(shmq_ctl *ctl, int fd);
void shmq_pullwake_arm(shmq_pullwake *b, int64_t seen, int armed);
void shmq_helpers_stop(shmq_ctl *ctl);
/* CDEF-END */

#endif
