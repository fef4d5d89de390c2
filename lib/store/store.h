/* store.h - the page store's calls for the rest of the engine (internal; store.c): the clock
 * of the slots' ac_time, the hooks through which the store asks writeback for room, the
 * compaction of the pool with the store's owner callbacks, the dedup index whose entries'
 * objects the store loads and frees, and the store's part of create and reset. What store.c
 * shares with the per-page halves of recompression and writeback alone is in
 * store_internal.h. */
#ifndef UZRAM_STORE_H
#define UZRAM_STORE_H

#include <stdbool.h>
#include <stdint.h>

struct uzram;
struct dedup;

/* The clock of a slot's ac_time: ticks of 1/8 s since the device was
 * created. */
#define STORE_TICKS_PER_SECOND 8u
uint32_t store_now(struct uzram *dev);

/* `seconds` in ticks of store_now(), at most UINT32_MAX. */
static inline uint32_t store_ticks(uint64_t seconds)
{
    return seconds >= UINT32_MAX / STORE_TICKS_PER_SECOND
               ? UINT32_MAX
               : (uint32_t)seconds * STORE_TICKS_PER_SECOND;
}

/* Create: the clock starts at 0. */
void store_clock_start(struct uzram *dev);

#ifdef UZRAM_TEST_HOOKS
/* Test builds: move the device's clock `seconds` on. */
void store_test_advance_clock(struct uzram *dev, uint32_t seconds);
#endif

/* What the store asks of the tier below memory (writeback.c's writeback_tier, which
 * uzram_create puts in dev->tier). Writeback is built on the store (it moves the store's
 * pages), so the store reaches it through these hooks rather than by calling it. */
struct store_tier {
    /* A write found the pool full (attempt 0, 1, ...): make room, and return true to try
     * again, false when nothing more can be done. Never waits on a slot lock, so the caller
     * may hold one. */
    bool (*make_room)(struct uzram *dev, unsigned attempt);
    /* Whether a written-back page of `size` bytes read a second time may come back into
     * memory (the read holds no slot lock). */
    bool (*room_to_promote)(struct uzram *dev, unsigned size);
};

/* Compact the pool (uzram_compact() without the backing store and malloc): the pages freed. */
uint64_t store_compact_pool(struct uzram *dev);

/* Make a dedup index for this device: its entries' objects live in the
 * device's pool, and the store loads and frees them. With a state file, the index is in its
 * dedup region: `adopt`, as a process before left it (dedup_adopt_begin follows), else new. */
int store_dedup_create(struct uzram *dev, bool adopt, struct dedup **out);

/* Reset: free every page (counted in notify_free as a discard is). -EIO: a page whose slot
 * lock, a word of the state file, stayed held (it keeps its data); the others are freed. */
int store_discard_all(struct uzram *dev);

#endif
