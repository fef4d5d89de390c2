/* device.h - the device structure and page slots shared by the engine's files.
 * Only lib/ includes this; frontends see struct uzram as opaque. */
#ifndef UZRAM_DEVICE_H
#define UZRAM_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backoff.h"
#include "uzram.h"

struct pool;
struct dedup;

/*
 * A page slot is 16 bytes: `value` and `info`.
 *
 * info bit layout (32 bits):
 *   bit  0      SLOT_LOCK: held while the slot is read or changed
 *   bits 1..3   state (enum slot_state)
 *   bits 4..6   compression algorithm id of a COMPRESSED page
 *   bits 7..19  compressed size, 1..4096, of a COMPRESSED or HUGE page
 *
 * value by state:
 *   EMPTY        unused (0)
 *   SAME         the 8-byte fill word
 *   COMPRESSED   pool handle of the compressed object
 *   HUGE         pool handle of the raw 4096-byte page
 *   DEDUP        id of a dedup entry (which owns the object)
 *
 * `value` is only read or written with SLOT_LOCK held; the lock is a spin
 * lock with yield because it is held for one page's worth of work at most.
 */
enum slot_state {
    SLOT_EMPTY = 0,
    SLOT_SAME = 1,
    SLOT_COMPRESSED = 2,
    SLOT_HUGE = 3,
    SLOT_DEDUP = 4,
};

#define SLOT_LOCK 1u
#define SLOT_STATE_SHIFT 1
#define SLOT_STATE_MASK (7u << SLOT_STATE_SHIFT)
#define SLOT_ALGO_SHIFT 4
#define SLOT_ALGO_MASK (7u << SLOT_ALGO_SHIFT)
#define SLOT_SIZE_SHIFT 7
#define SLOT_SIZE_MASK (0x1fffu << SLOT_SIZE_SHIFT)

struct slot {
    _Atomic uint32_t info;
    uint32_t unused;
    uint64_t value;
};
_Static_assert(sizeof(struct slot) == 16, "a page slot is 16 bytes");

static inline uint32_t slot_info_make(enum slot_state state, unsigned algo, unsigned size)
{
    return ((uint32_t)state << SLOT_STATE_SHIFT) | ((uint32_t)algo << SLOT_ALGO_SHIFT) |
           ((uint32_t)size << SLOT_SIZE_SHIFT);
}
static inline enum slot_state slot_info_state(uint32_t info)
{
    return (enum slot_state)((info & SLOT_STATE_MASK) >> SLOT_STATE_SHIFT);
}
static inline unsigned slot_info_algo(uint32_t info)
{
    return (info & SLOT_ALGO_MASK) >> SLOT_ALGO_SHIFT;
}
static inline unsigned slot_info_size(uint32_t info)
{
    return (info & SLOT_SIZE_MASK) >> SLOT_SIZE_SHIFT;
}

/* Owners of pool objects, as compaction sees them: a page slot (index + 1,
 * so that slot 0 is not owner 0) or a dedup entry (top bit set). */
#define OWNER_DEDUP_BIT (1ull << 63)

/* A compressed or raw page as the write path prepares it before it takes
 * any lock: what goes into the slot. */
struct page_object {
    enum slot_state state;
    uint64_t value;
    unsigned algo;
    unsigned size;
};

/* A page whose compressed form takes this many bytes or more (3585) is
 * stored raw: saving less than an eighth of a page is not worth a
 * decompression on every read. uzram_huge_threshold() reports it. */
#define HUGE_THRESHOLD (UZRAM_PAGE_SIZE - UZRAM_PAGE_SIZE / 8 + 1)

struct uzram {
    uint64_t disksize;
    uint64_t page_count;
    struct slot *slots;
    struct pool *pool;
    /* Made when dedup is first switched on, then kept until destroy. Stored
     * with release before use_dedup is switched on, read with acquire
     * (device_dedup()), so whoever finds it also sees it made. */
    _Atomic(struct dedup *) dedup;

    /* settings: read without locks on the I/O path; written under
     * settings_lock, which also serialises reset */
    pthread_mutex_t settings_lock;
    /* The algorithm and its level, one word (compression_make()): set
     * together and read together, so that a writer never pairs one
     * algorithm with another's level. */
    _Atomic uint32_t compression;
    _Atomic bool same_filled;
    _Atomic bool use_dedup;
    _Atomic uint64_t mem_limit;

    /* counters (see struct uzram_stats for their meaning; dedup keeps its own) */
    _Atomic uint64_t pages_stored;
    _Atomic uint64_t compr_data_size;
    _Atomic uint64_t same_pages;
    _Atomic uint64_t zero_pages;
    _Atomic uint64_t huge_pages;
    _Atomic uint64_t huge_pages_since;
    _Atomic uint64_t pages_compacted;
    _Atomic uint64_t failed_reads;
    _Atomic uint64_t failed_writes;
    _Atomic uint64_t invalid_io;
    _Atomic uint64_t notify_free;
};

static inline uint32_t compression_make(int algorithm, int level)
{
    /* levels are resolved (comp_resolve_level), never negative */
    return (uint32_t)algorithm << 16 | ((uint32_t)level & 0xffffu);
}
static inline int compression_algorithm(uint32_t compression)
{
    return (int)(compression >> 16);
}
static inline int compression_level(uint32_t compression)
{
    return (int)(compression & 0xffffu);
}

static inline struct dedup *device_dedup(struct uzram *dev)
{
    return atomic_load_explicit(&dev->dedup, memory_order_acquire);
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

/* Make a dedup index for this device: its entries' objects live in the
 * device's pool, and the store loads and frees them. (store.c) */
int store_dedup_create(struct uzram *dev, struct dedup **out);

#endif
