/* device.h - the device structure and page slots shared by the engine's files (internal).
 * Only lib/ includes this; frontends see struct uzram as opaque. It includes no header of a
 * part built on the device (store, writeback, recompression): their state is theirs, behind
 * a pointer. */
#ifndef UZRAM_DEVICE_H
#define UZRAM_DEVICE_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/backoff.h"
#include "codec/codec_table.h"
#include "common/sums.h"
#include "dedup/dedup_object.h"
#include "uzram.h"

struct backing;
struct bundle_records;
struct dedup;
struct pool;
struct recompressor;
struct state_file;
struct store_tier;
struct writeback;

/*
 * A page slot is 16 bytes: `info`, `ac_time` and `value`.
 *
 * info bit layout (32 bits):
 *   bit  0       SLOT_LOCK: held while the slot is read or changed
 *   bits 1..3    state (enum slot_state; value 7 is free)
 *   bit  4       SLOT_IDLE: marked idle (the `idle` attribute) and not read
 *                or written since
 *   bit  5       SLOT_INCOMPRESSIBLE: recompression found no smaller form;
 *                later recompression passes skip the page
 *   bits 6..9    codec id of a COMPRESSED, BACKED or BUNDLED object (the device's
 *                codec table: the algorithm, level and dictionary that made it)
 *   bits 10..22  compressed size, 1..4096, of a COMPRESSED, HUGE or BACKED
 *                page (4096: a raw page); of a BUNDLED page its share of the
 *                bundle's bytes (an estimate for scans, never freed by it)
 *   bit  23      SLOT_REFERENCED: a written-back (BACKED) page was read from
 *                the backing store since it went there; the next read brings it
 *                back into memory when there is room (store.h,
 *                struct store_tier)
 *   bit  24      SLOT_DICT_KEPT: its object was made with a dictionary a retraining
 *                replaced, and the newer one did not shrink it: passes leave it
 *                (recompress_dict.c)
 *   bits 25..31  SLOT_CHECK: in a state file, the CRC-7 of the form (state, codec,
 *                size) and `value` (slot_check; 0 elsewhere), which adoption
 *                checks (sums.h)
 * A new form published in a slot starts with IDLE, INCOMPRESSIBLE, DICT_KEPT and
 * REFERENCED clear.
 *
 * ac_time: when the page was last read or written, in ticks of 1/8 s since
 * the device was created (store.h, store_now(); 2^32 ticks are 17 years). Fine
 * enough to order the pages of one burst of writes for writeback of the
 * coldest first; settings in seconds are compared in ticks (store_ticks()).
 *
 * value by state:
 *   EMPTY        unused (0)
 *   SAME         the 8-byte fill word
 *   COMPRESSED   pool handle of the compressed object
 *   HUGE         pool handle of the raw 4096-byte page
 *   DEDUP        id of a dedup entry (which owns the object)
 *   BACKED       byte offset of the object on the backing store (written
 *                back; below 2^47); a raw page when its size is 4096
 *   BUNDLED      the id of the record of the bundle that holds the page with
 *                several neighbours in one object (bundle_records.h) << 4 | the
 *                page's place in it (0..15; bundle.h)
 *
 * `value` and `ac_time` are only read or written with SLOT_LOCK held (ac_time
 * is atomic only so that a scan may peek at it without the lock); an empty
 * slot has info == 0 and is recognised without the lock. The lock is a spin
 * lock with yield because it is held for one page's worth of work at most.
 */
enum slot_state {
    SLOT_EMPTY = 0,
    SLOT_SAME = 1,
    SLOT_COMPRESSED = 2,
    SLOT_HUGE = 3,
    SLOT_DEDUP = 4,
    SLOT_BACKED = 5,
    SLOT_BUNDLED = 6,
};

#define SLOT_LOCK 1u
#define SLOT_STATE_SHIFT 1
#define SLOT_STATE_MASK (7u << SLOT_STATE_SHIFT)
#define SLOT_IDLE (1u << 4)
#define SLOT_INCOMPRESSIBLE (1u << 5)
#define SLOT_CODEC_SHIFT 6
#define SLOT_CODEC_BITS 4
#define SLOT_CODEC_MASK (((1u << SLOT_CODEC_BITS) - 1) << SLOT_CODEC_SHIFT)
#define SLOT_SIZE_SHIFT 10
#define SLOT_SIZE_MASK (0x1fffu << SLOT_SIZE_SHIFT)
#define SLOT_REFERENCED (1u << 23)
#define SLOT_DICT_KEPT (1u << 24)
#define SLOT_CHECK_SHIFT 25
#define SLOT_CHECK_MASK (0x7fu << SLOT_CHECK_SHIFT)

struct slot {
    _Atomic uint32_t info;
    _Atomic uint32_t ac_time;
    uint64_t value;
};
_Static_assert(sizeof(struct slot) == UZRAM_TABLE_BYTES_PER_PAGE, "a page slot is 16 bytes");
_Static_assert((SLOT_LOCK | SLOT_STATE_MASK | SLOT_IDLE | SLOT_INCOMPRESSIBLE | SLOT_CODEC_MASK |
                SLOT_SIZE_MASK | SLOT_REFERENCED | SLOT_DICT_KEPT) == (uint32_t)~SLOT_CHECK_MASK,
               "the info fields and the check bits cover the word exactly once");

static inline uint32_t slot_info_make(enum slot_state state, unsigned codec, unsigned size)
{
    return ((uint32_t)state << SLOT_STATE_SHIFT) | ((uint32_t)codec << SLOT_CODEC_SHIFT) |
           ((uint32_t)size << SLOT_SIZE_SHIFT);
}
static inline enum slot_state slot_info_state(uint32_t info)
{
    return (enum slot_state)((info & SLOT_STATE_MASK) >> SLOT_STATE_SHIFT);
}
static inline unsigned slot_info_codec(uint32_t info)
{
    return (info & SLOT_CODEC_MASK) >> SLOT_CODEC_SHIFT;
}
static inline unsigned slot_info_size(uint32_t info)
{
    return (info & SLOT_SIZE_MASK) >> SLOT_SIZE_SHIFT;
}
/* The check bits (SLOT_CHECK_MASK) of a form `info` holding `value`: the CRC-7 of the state,
 * codec and size bits and the value (0 for an empty slot). The marks, the lock and ac_time
 * are not covered: they change without the form, and say nothing of where its bytes are. */
static inline uint32_t slot_check(uint32_t info, uint64_t value)
{
    uint32_t form = (info & (SLOT_STATE_MASK | SLOT_CODEC_MASK | SLOT_SIZE_MASK)) >> 1;
    uint8_t bytes[11];
    memcpy(bytes, &value, sizeof value);
    bytes[8] = (uint8_t)form;
    bytes[9] = (uint8_t)(form >> 8);
    bytes[10] = (uint8_t)(form >> 16);
    return (uint32_t)sums_crc7(bytes, sizeof bytes) << SLOT_CHECK_SHIFT;
}

/* Owners of pool objects, as compaction sees them: a page slot (index + 1,
 * so that slot 0 is not owner 0), a dedup entry (top bit set) or a bundle. */
#define OWNER_DEDUP_BIT (1ull << 63)
/* A piece of a bundle's object (bundle.h): this bit | the id of the bundle's record. */
#define OWNER_BUNDLE_BIT (1ull << 62)

/* A dedup entry's object that was written back: its handle is OBJECT_BACKED
 * | its offset on the backing store (pool handles and store offsets are
 * both below 2^47, and an entry keeps 48 bits). */
#define OBJECT_BACKED (1ull << 47)

/* A compressed or raw page as the write path prepares it before it takes
 * any lock: what goes into the slot. */
struct page_object {
    enum slot_state state;
    uint64_t value;
    unsigned codec;
    unsigned size;
};

/* The form of a dedup entry's object: COMPRESSED, HUGE, or (written back) BACKED. */
static inline struct page_object dedup_object_form(const struct dedup_object *object)
{
    if (object->handle & OBJECT_BACKED)
        return (struct page_object){
            .state = SLOT_BACKED,
            .value = object->handle & ~OBJECT_BACKED,
            .codec = object->codec,
            .size = object->size,
        };
    return (struct page_object){
        .state = object->size == UZRAM_PAGE_SIZE ? SLOT_HUGE : SLOT_COMPRESSED,
        .value = object->handle,
        .codec = object->codec,
        .size = object->size,
    };
}

/* A page whose compressed form takes this many bytes or more (3585) is
 * stored raw: saving less than an eighth of a page is not worth a
 * decompression on every read. uzram_huge_threshold() reports it. */
#define HUGE_THRESHOLD (UZRAM_PAGE_SIZE - UZRAM_PAGE_SIZE / 8 + 1)

/* The counters of events (UZRAM_STATS' EVENTS kind) the device counts (the dedup index and
 * the pool count dedup_hash_collisions and reserve_empty). Zeroed by a reset, as zram's. */
struct device_events {
    _Atomic uint64_t huge_pages_since;
    _Atomic uint64_t pages_compacted;
    _Atomic uint64_t failed_reads;
    _Atomic uint64_t failed_writes;
    _Atomic uint64_t invalid_io;
    _Atomic uint64_t notify_free;
    _Atomic uint64_t recomp_pages;
    _Atomic uint64_t recomp_bytes;
    _Atomic uint64_t recomp_saved_bytes;
    _Atomic uint64_t dict_trainings; /* recompress_dict.c */
    _Atomic uint64_t recomp_passes;  /* recompress.c's thread */
    _Atomic uint64_t bd_reads;
    _Atomic uint64_t bd_writes;
    _Atomic uint64_t bd_write_errors;
    _Atomic uint64_t bd_nospace;
    _Atomic uint64_t bd_checksum_errors; /* counted by backing_read() */
    /* waits on a lock word of the state file that passed their deadline (backoff.h) */
    _Atomic uint64_t state_lock_timeouts;
};

struct uzram {
    uint64_t disksize;
    uint64_t page_count;
    struct slot *slots;
    struct pool *pool;
    /* Made when dedup is first switched on, then kept until destroy. Stored
     * with release before use_dedup is switched on, read with acquire
     * (device_dedup()), so whoever finds it also sees it made. */
    _Atomic(struct dedup *) dedup;
    /* Bundle records (bundle_records.h): the base of each region, and the rest. */
    unsigned char *bundle_base[4]; /* 3 used (BUNDLE_REGIONS): a region is 2 bits */
    struct bundle_records *bundle_records;

    /* settings: read without locks on the I/O path; written under
     * settings_lock, which also serialises reset */
    pthread_mutex_t settings_lock;
    /* The codec configurations: priority 0 is the algorithm and level
     * writes use, 1..3 the secondary algorithms of recompression. */
    struct codec_table codecs;
    _Atomic bool same_filled;
    _Atomic bool use_dedup;
    _Atomic uint64_t mem_limit;

    /* The clock of ac_time (store_now()): CLOCK_MONOTONIC_COARSE ticks at
     * creation, and the ticks test builds add to move time on. */
    int64_t clock_base;
    _Atomic uint32_t clock_skew;

    /* counters (see struct uzram_stats for their meaning; dedup keeps its own): the levels
     * here, the events in `events` */
    _Atomic uint64_t pages_stored;
    _Atomic uint64_t compr_data_size;
    _Atomic uint64_t same_pages;
    _Atomic uint64_t zero_pages;
    _Atomic uint64_t huge_pages;
    _Atomic uint64_t idle_pages;
    _Atomic uint64_t incompressible_pages;
    /* bundles (bundle.c, the one place they change): live bundles, the pages in them, their
     * dead members, what they save, and the memory of their records (in meta_data_size) */
    _Atomic uint64_t bundles;
    _Atomic uint64_t bundled_pages;
    _Atomic uint64_t bundle_dead_pages;
    _Atomic uint64_t bundle_saved_bytes;
    _Atomic uint64_t bundle_mem;

    /* The backing store, or NULL (device_backing()): attached and detached by writeback.c
     * (uzram_set_backing_dev) only while no page is stored, so a page on it always finds it.
     * Its counters: bd_checksum_errors is counted by backing_read(). */
    _Atomic(struct backing *) backing;
    _Atomic uint64_t bd_objects;
    _Atomic uint64_t bd_data_size;

    /* The counters of events: in the state file of a device that has one (state.h), so that
     * they go on counting across a restart or a crash as the pages stay; else own_events. */
    struct device_events *events;
    struct device_events own_events;

    /* What the store asks of writeback, which is built on it (store.h; set at create). */
    const struct store_tier *tier;
    /* The state of recompression (recompress.c) and of writeback (writeback.c): made at
     * create, private to them. */
    struct recompressor *recompressor;
    struct writeback *writeback;
    /* The state file the page table and pool live in (state.h), or NULL: anonymous memory. */
    struct state_file *state;
};

static inline struct dedup *device_dedup(struct uzram *dev)
{
    return atomic_load_explicit(&dev->dedup, memory_order_acquire);
}

/* The backing store, or NULL (see struct uzram). */
static inline struct backing *device_backing(struct uzram *dev)
{
    return atomic_load_explicit(&dev->backing, memory_order_acquire);
}

static inline void counter_add(_Atomic uint64_t *counter, uint64_t amount)
{
    atomic_fetch_add_explicit(counter, amount, memory_order_relaxed);
}
static inline void counter_sub(_Atomic uint64_t *counter, uint64_t amount)
{
    atomic_fetch_sub_explicit(counter, amount, memory_order_relaxed);
}
static inline uint64_t counter_get(_Atomic uint64_t *counter)
{
    return atomic_load_explicit(counter, memory_order_relaxed);
}

/* A wait on a lock word of the device (a slot's, an intent record's, a bundle record's): with
 * a deadline when the word lives in its state file (backoff.h). */
static inline struct lock_wait device_lock_wait(const struct uzram *dev)
{
    return (struct lock_wait){.bounded = dev->state != NULL};
}
/* Such a wait that passed its deadline: counted; what the caller fails with. */
static inline int device_lock_timeout(struct uzram *dev)
{
    counter_add(&dev->events->state_lock_timeouts, 1);
    return -EIO;
}

#endif
