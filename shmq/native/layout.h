/*
 * shmq/native/layout.h -- the document of record for every shared-memory structure and
 * for the on-disk record written by the C append. shmq/message/layout.py mirrors the record
 * constants and tests/layout/test_layout.py checks each against this header (and the struct
 * geometry against ffi.offsetof / ffi.sizeof).
 *
 * The text between CDEF-BEGIN and CDEF-END is also fed verbatim to cffi's cdef (lines that
 * start with '#' other than integer #defines are dropped), so it holds only fixed-width types,
 * explicit padding and integer constants.
 *
 * ===================================================================================
 * The CommitLog record (RocketMQ 4.x MessageDecoder layout, IPv4 hosts, big-endian)
 * ===================================================================================
 *   off  width  field
 *     0    4    TOTALSIZE          whole record, = 91 + body + topic + props
 *     4    4    MAGICCODE          0xDAA320A7 (BLANK filler: 0xCBD43194)
 *     8    4    BODYCRC            crc32(body) & 0x7FFFFFFF
 *    12    4    QUEUEID
 *    16    4    FLAG               user flag
 *    20    8    QUEUEOFFSET        index in the ConsumeQueue (0 for prepared/rollback)
 *    28    8    PHYSICALOFFSET     == the record's own position (recovery checks it)
 *    36    4    SYSFLAG
 *    40    8    BORNTIMESTAMP      ms
 *    48    8    BORNHOST           IPv4 (4) + port int32
 *    56    8    STORETIMESTAMP     ms, never decreasing along the log (taken under the lock)
 *    64    8    STOREHOST          IPv4 (4) + port int32
 *    72    4    RECONSUMETIMES
 *    76    8    PREPAREDTXOFFSET
 *    84    4+b  BODYLEN + BODY
 *  88+b  1+t    TOPICLEN + TOPIC
 * 89+b+t 2+p    PROPLEN + PROPERTIES
 * A record that does not fit (size + 8 > bytes left in the file) is replaced by an 8-byte
 * filler {TOTALSIZE = bytes left, MAGIC = BLANK} and goes to the start of the next file.
 *
 * ConsumeQueue entry (20 bytes, big-endian): commitlog offset i64 | size i32 | tag code i64.
 * Entry n of a queue is at byte (n mod entries_per_file) * 20 of file n / entries_per_file,
 * named by its start byte offset (20 digits).
 *
 * ===================================================================================
 * The shared control block (one POSIX shm object per store, native byte order)
 * ===================================================================================
 *   +---------------------------+ 0
 *   | shmq_ctl_header   (64 B)  |  identity and geometry, written once by the creator
 *   | shmq_owner        (64 B)  |  the broker that owns the store
 *   | shmq_lock         (64 B)  |  append lock word, futex for sleeping lockers
 *   | shmq_intent       (64 B)  |  what the lock holder is doing (for repair)
 *   | shmq_positions   (192 B)  |  commit / flushed positions and their futexes
 *   | root path        (512 B)  |  absolute store path, for the repair path's file I/O
 *   +---------------------------+ SHMQ_QUEUE_TABLE_OFFSET (1024)
 *   | shmq_queue_slot x queue_capacity (160 B each)  topic-queue table
 *   +---------------------------+
 *   | shmq_offset_slot x offset_capacity (416 B each) consumer offsets
 *   +---------------------------+
 * The block is a cache of what the files say: a reboot, a removed segment, or a boot-id or
 * store-nonce mismatch means the owner rebuilds it from the files.
 */
#ifndef SHMQ_LAYOUT_H
#define SHMQ_LAYOUT_H
#include <stdint.h>

/* CDEF-BEGIN */
#define SHMQ_CTL_MAGIC 0x314C5443514D4853
#define SHMQ_LAYOUT_VERSION 5

#define SHMQ_MESSAGE_MAGIC 0xDAA320A7
#define SHMQ_BLANK_MAGIC 0xCBD43194
#define SHMQ_RECORD_FIXED 91
#define SHMQ_BLANK_MIN 8
#define SHMQ_CQ_ENTRY_SIZE 20
/* a ConsumeQueue entry's fields (big-endian; store/consume_queue.py ENTRY ">qiq"): the record's
 * CommitLog offset (8), its size (4), its tag hash code (8) */
#define SHMQ_CQ_PHYS 0
#define SHMQ_CQ_SIZE 8
#define SHMQ_CQ_TAG 12
/* a MessageBatch entry's fixed bytes (message/batch.py ENTRY_FIXED): totalSize, magic, bodyCRC,
 * flag, bodyLen (i32 each), then propsLen (i16) after the body */
#define SHMQ_BATCH_ENTRY_FIXED 22
/* SYSFLAG bit: the body is zlib-compressed (MessageSysFlag.COMPRESSED_FLAG) */
#define SHMQ_FLAG_COMPRESSED 0x1
#define SHMQ_TOPIC_MAX 127
#define SHMQ_PROPS_MAX 32767
#define SHMQ_OFFSET_KEY_MAX 384
#define SHMQ_ROOT_MAX 512
#define SHMQ_LOG_RING 4

/* record field offsets */
#define SHMQ_R_TOTALSIZE 0
#define SHMQ_R_MAGIC 4
#define SHMQ_R_BODYCRC 8
#define SHMQ_R_QUEUEID 12
#define SHMQ_R_FLAG 16
#define SHMQ_R_QUEUEOFFSET 20
#define SHMQ_R_PHYSOFFSET 28
#define SHMQ_R_SYSFLAG 36
#define SHMQ_R_BORNTS 40
#define SHMQ_R_BORNHOST 48
#define SHMQ_R_STORETS 56
#define SHMQ_R_STOREHOST 64
#define SHMQ_R_RECONSUME 72
#define SHMQ_R_PREPARED 76
#define SHMQ_R_BODYLEN 84

/* owner.role */
#define SHMQ_ROLE_ASYNC_MASTER 0
#define SHMQ_ROLE_SYNC_MASTER 1
#define SHMQ_ROLE_SLAVE 2

/* owner.state */
#define SHMQ_STATE_INIT 0
#define SHMQ_STATE_READY 1
#define SHMQ_STATE_READONLY 2
#define SHMQ_STATE_FENCED 3

/* status codes returned by the C core (0 = OK). errors.py maps them to exceptions. */
#define SHMQ_OK 0
#define SHMQ_ENEEDLOG -1
#define SHMQ_ENEEDCQ -2
#define SHMQ_ETIMEDOUT -3
#define SHMQ_ESTALE -4
#define SHMQ_ETOOBIG -5
#define SHMQ_EINVAL -6
#define SHMQ_EREADONLY -7
#define SHMQ_EFULL -8
#define SHMQ_EBADBATCH -9
#define SHMQ_EIO -10
/* shmq_uniq: the clock left the month window of the ids (shmq_uniq_ids) */
#define SHMQ_EMONTH -11
/* the store's role is SLAVE: only replication writes into it (shmq_put* refuse) */
#define SHMQ_ESLAVE -12
/* shmq_send with try_lock: the append lock is held by another writer (call again without) */
#define SHMQ_EBUSY -13
/* the append could not map its ConsumeQueue file or allocate the pages ahead of its entries
 * (shmq_writer.os_errno: why; ENOSPC/EDQUOT: the disk is full); nothing was written */
#define SHMQ_ECQSPACE -14
/* shmq_index_records: not errors, where the run stopped */
#define SHMQ_IDX_FULL 1
#define SHMQ_IDX_BLANK 2

/* tag code modes of shmq_meta.tag_mode */
#define SHMQ_TAG_FROM_PROPS 0
#define SHMQ_TAG_GIVEN 1
#define SHMQ_TAG_STORE_PLUS 2

/* fault points (test builds drive kill -9 tests through shmq_writer.fault_point) */
#define SHMQ_FP_AFTER_LOCK 1
#define SHMQ_FP_AFTER_INTENT 2
#define SHMQ_FP_MID_RECORD 3
#define SHMQ_FP_AFTER_RECORD 4
#define SHMQ_FP_AFTER_CQ 5
#define SHMQ_FP_MID_PUBLISH 6
#define SHMQ_FP_AFTER_PUBLISH 7
#define SHMQ_FA_PAUSE 1
#define SHMQ_FA_KILL 2
/* SHMQ_FA_STOP: raise(SIGSTOP) at the point, carry on after SIGCONT (stalled-owner tests) */
#define SHMQ_FA_STOP 3

/* Identity and geometry. Written once by the creator before owner.state becomes READY;
 * every attacher checks magic, version, fingerprint and sizes and refuses on a mismatch. */
typedef struct shmq_ctl_header {
    uint64_t magic;               /* SHMQ_CTL_MAGIC */
    uint32_t layout_version;      /* SHMQ_LAYOUT_VERSION */
    uint32_t fingerprint;         /* shmq_layout_fingerprint(): struct sizes + offsets */
    uint64_t ctl_size;            /* bytes of the whole segment */
    uint64_t store_nonce;         /* random; equals the store's config/nonce file */
    uint64_t boot_id;             /* hash of /proc/sys/kernel/random/boot_id at creation */
    uint64_t file_size;           /* CommitLog file size (mappedFileSizeCommitLog) */
    uint32_t cq_entries_per_file; /* ConsumeQueue entries per file (300,000) */
    uint32_t queue_capacity;      /* slots in the topic-queue table */
    uint32_t offset_capacity;     /* slots in the consumer-offset table */
    uint32_t max_message_size;    /* records above this are refused before the lock */
} shmq_ctl_header;

/* The broker that owns the store. Written by the owner; `state` is the fence: the append
 * checks it (and generation) under the lock, so a new owner that sets FENCED on an old
 * segment stops every writer still attached to it. */
typedef struct shmq_owner {
    uint64_t generation;          /* increases at every owner start */
    int32_t pid;
    uint32_t state;               /* SHMQ_STATE_* */
    uint64_t starttime;           /* /proc/<pid>/stat field 22 of the owner */
    uint32_t store_ip;            /* IPv4, host order; written into STOREHOST */
    int32_t store_port;
    uint32_t flush_mode;          /* 0 ASYNC_FLUSH, 1 SYNC_FLUSH */
    uint32_t role;                /* 0 ASYNC_MASTER, 1 SYNC_MASTER, 2 SLAVE */
    uint32_t sync_flush_timeout_ms;
    uint32_t _pad0;
    uint32_t index_hash_slots;    /* IndexFile geometry, so attached readers can open them */
    uint32_t index_num;
    int64_t ha_fallbehind_max;    /* haSlaveFallbehindMax: SYNC_MASTER refuses to wait past it */
} shmq_owner;

/* The append lock. word = 0 when free, else (pid << 32) | (starttime & 0xFFFFFFFF) of the
 * holder, so a waiter can prove the holder dead (kill(pid,0) = ESRCH, a zombie, or a
 * different start time after pid reuse) and steal it by CAS. wake_seq/sleepers form the
 * futex on which lockers sleep after spinning. */
typedef struct shmq_lockword {
    uint64_t word;
    uint32_t wake_seq;
    uint32_t sleepers;
    uint64_t acquires;            /* statistics, under the lock */
    uint64_t steals;              /* times a dead holder's lock was taken over */
    uint64_t repairs_completed;   /* dead holder's append verified and published */
    uint64_t repairs_rolled_back; /* dead holder's append erased */
    uint64_t _pad[2];
} shmq_lockword;

/* What the lock holder is doing, written before the first byte of the append and cleared
 * after publishing. A stealer reads it to complete (all records and CQ entries verify) or
 * roll back (zero them) the dead holder's append. Only the lock holder writes it. */
typedef struct shmq_intent {
    uint64_t active;              /* 1 while an append is in progress */
    int64_t phys_start;           /* commit_pos when the append began (a filler goes here) */
    int64_t rec_start;            /* first record; > phys_start when it rolled to a new file */
    int64_t phys_end;             /* commit_pos once published */
    int64_t queue_offset;         /* first queue offset */
    uint32_t slot;                /* topic-queue slot */
    uint32_t count;               /* records in this append */
    uint32_t has_cq;              /* 0 for prepared / rollback records (no CQ entry) */
    uint32_t _pad0;
    uint64_t _pad1;
} shmq_intent;

/* Published positions. commit_pos is the end of the last complete record: readers never
 * look past it (release store by the writer, acquire load by readers). flushed_pos <=
 * commit_pos is what the flusher has made durable. Each has a futex word + waiter count so
 * that a writer or flusher wakes sleepers only when one exists. */
typedef struct shmq_positions {
    int64_t commit_pos;
    int64_t min_pos;              /* first offset still in files (cleanup) */
    int64_t last_store_ts;        /* store timestamps never go back along the log */
    uint64_t appends;             /* records appended (statistics) */
    uint32_t data_seq;            /* futex: +1 at every publish */
    /* Sleepers on data_seq with every wake bit: their count (bits 0-30), and bit 31 "woken": set
     * by the append that woke them all, cleared by every sleeper that counts itself in. While it
     * is set, no sleeper counted arrived since that wake, so later appends make no FUTEX_WAKE
     * (they woke nobody: their sleepers were woken already and have yet to run; core_private.h
     * wake_data; layout 5) */
    uint32_t data_waiters;
    /* futex: +1 at every publish into the timer topic (rmq_sys_wheel_timer, both queues), so
     * the supervisor's timer service sleeps through every other append (layout 3) */
    uint32_t timer_seq;
    uint32_t timer_waiters;
    /* The sleepers on data_seq that skip one worker's appends (a worker's pull-wake thread:
     * shmq_wait_data_others), counted apart from data_waiters, four bits per wake bit: bit b's
     * count is bits 4(b%16)..4(b%16)+3 of word b/16. An append by the worker of bit b wakes only
     * when another sleeper exists (data_waiters, or a count other than b's): without this, every
     * append of a worker whose own pull-wake thread sleeps made a FUTEX_WAKE that woke nobody.
     * One such sleeper per bit (a worker has one pull-wake thread); at most 15 (layout 4). */
    uint64_t data_skip_waiters[2];
    /* --- cache line: flusher side --- */
    int64_t flushed_pos;
    uint32_t flushed_seq;         /* futex: +1 whenever flushed_pos moves */
    uint32_t flushed_waiters;
    int64_t flush_request_pos;    /* highest position a SYNC_FLUSH putter waits for */
    uint32_t flush_request_seq;   /* futex the flusher sleeps on */
    uint32_t flusher_waiting;
    uint64_t flush_count;         /* msyncs done (group commit makes this < puts) */
    uint32_t io_error;            /* errno of a failed flush; the store is read-only after */
    /* Held pulls woken by the appending worker itself (in what was padding: layout 5 still). Bit
     * b of pull_armed: worker b holds pulls; an append by another worker of the same broker that
     * finds it set sets bit b of pull_signaled and, when that bit was clear, writes worker b's
     * eventfd (made by the supervisor, passed to every worker); worker b's loop reads its eventfd,
     * then clears its bit, then looks at its holds. core_private.h wake_data, broker/worker/pull_hold.py */
    uint32_t pull_armed;
    uint32_t pull_signaled;
    uint32_t _pad1;
    uint64_t _pad2;
    /* --- cache line: replication (SYNC_MASTER) --- */
    int64_t repl_pos;             /* highest offset a slave acknowledged (and was sent) */
    uint32_t repl_seq;            /* futex: +1 whenever repl_pos moves or slaves change */
    uint32_t repl_waiters;
    uint32_t repl_slaves;         /* slaves connected to the master's HA service now */
    uint32_t _pad3;
    uint64_t _pad4[5];
} shmq_positions;

/* One (topic, queue id). Slots are only ever added (state 0 -> 1, published last with a
 * release store, under the lock), so a lock-free lookup that stops at a free slot is safe.
 * next_offset is advanced only by the append under the lock. */
typedef struct shmq_queue_slot {
    int64_t next_offset;          /* entries < this are published */
    int64_t min_offset;           /* first entry still in files (cleanup) */
    int32_t queue_id;
    uint32_t hash;
    uint8_t state;                /* 0 free, 1 used */
    uint8_t topic_len;
    uint16_t _pad0;
    uint32_t _pad1;
    char topic[128];
} shmq_queue_slot;

/* A consumer offset: key "topic@group" + queue id. offset is a plain aligned 8-byte store
 * (atomic on every platform shmq runs on); -1 when never committed. */
typedef struct shmq_offset_slot {
    int64_t offset;
    int32_t queue_id;
    uint32_t hash;
    uint8_t state;
    uint8_t _pad0;
    uint16_t key_len;
    uint32_t _pad1;
    uint64_t _pad2;
    char key[384];
} shmq_offset_slot;

typedef struct shmq_ctl {
    shmq_ctl_header header;
    shmq_owner owner;
    shmq_lockword lock;
    shmq_intent intent;
    shmq_positions pos;
    char root[512];               /* absolute store path, NUL-terminated */
    uint8_t _pad_root[64];
    shmq_queue_slot queues[];     /* queue_capacity, then the offset table */
} shmq_ctl;

#define SHMQ_QUEUE_TABLE_OFFSET 1024

/* Process-local (never shared): one per process that appends. */
typedef struct shmq_map {
    int64_t index;                /* file index (start offset / file size); -1 = none */
    uint8_t *addr;
    int64_t ready;                /* ConsumeQueue: bytes from the file's start known allocated */
} shmq_map;

typedef struct shmq_meta {
    int32_t flag;
    int32_t sysflag;
    int64_t born_ts;
    uint32_t born_ip;
    int32_t born_port;
    int32_t reconsume_times;
    int32_t tag_mode;             /* SHMQ_TAG_* */
    int64_t prepared_offset;
    int64_t tag_code;             /* GIVEN: the code; STORE_PLUS: added to the store time */
} shmq_meta;

typedef struct shmq_result {
    int64_t phys_offset;          /* first record */
    int64_t queue_offset;         /* first queue offset */
    int64_t end;                  /* commit position after this append */
    int64_t store_ts;
    int32_t size;                 /* first record's size */
    int32_t count;
} shmq_result;

typedef struct shmq_writer {
    shmq_ctl *ctl;
    uint64_t token;               /* this process's lock word */
    uint64_t generation;          /* owner generation this writer attached to */
    int32_t lock_timeout_ms;
    int32_t fault_point;          /* 0, or SHMQ_FP_* at which to act (tests) */
    int32_t fault_action;         /* SHMQ_FA_* */
    uint32_t need_slot;           /* out: with SHMQ_ENEEDCQ */
    int64_t need_index;           /* out: file index to map with ENEEDLOG / ENEEDCQ */
    shmq_map logs[4];             /* CommitLog files, at index % SHMQ_LOG_RING */
    shmq_map *cqs;                /* queue_capacity entries: each slot's current CQ file */
    uint32_t *scratch_crc;        /* batch: per-entry CRC, computed before the lock */
    int64_t *scratch_tag;         /* batch: per-entry tag code */
    uint32_t scratch_cap;
    int32_t os_errno;             /* out: with SHMQ_ECQSPACE */
} shmq_writer;
/* CDEF-END */

/* ===================================================================================
 * The properties text: the names the C core reads or writes in it and its separators
 * (RocketMQ's MessageConst and MessageDecoder: name \001 value \002 ...). The Python side is
 * shmq/message/names.py and shmq/message/properties.py; tests/layout/test_layout.py reads these
 * lines and checks them against it. Outside the cdef: strings and chars are no integers.
 * =================================================================================== */
#define SHMQ_PROP_TAGS "TAGS"
#define SHMQ_PROP_KEYS "KEYS"
#define SHMQ_PROP_UNIQ_KEY "UNIQ_KEY"
/* what the broker's C send path (remoting_send.c) drops, or hands back to Python when present */
#define SHMQ_PROP_WAIT "WAIT"
#define SHMQ_PROP_CLUSTER "CLUSTER"
#define SHMQ_PROP_DELAY "DELAY"
#define SHMQ_PROP_TRAN_MSG "TRAN_MSG"
/* the head every TIMER_* name shares (classify's quick filter looks for it anywhere) */
#define SHMQ_TIMER_NAME_HEAD "TIMER_"
/* the timer topic: an append into it also moves pos.timer_seq (the timer service's futex) */
#define SHMQ_TIMER_TOPIC "rmq_sys_wheel_timer"
#define SHMQ_NAME_VALUE_SEP '\001'
#define SHMQ_PROPERTY_SEP '\002'
/* the length of a name above, without its NUL */
#define SHMQ_PROP_LEN(name) (sizeof(name) - 1)

#endif
