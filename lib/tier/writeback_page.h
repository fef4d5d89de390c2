/* writeback_page.h - one page's writeback (internal): which pages a pass takes, a page on its
 * way to the backing store, and the calls writeback.c and coldest.c make page by page.
 * writeback_page.c does the work with the page store's helpers (store_internal.h). */
#ifndef UZRAM_WRITEBACK_PAGE_H
#define UZRAM_WRITEBACK_PAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "dedup/dedup.h"

struct uzram;

/* Which pages a writeback takes, as one page sees it. */
struct writeback_filter {
    unsigned type;    /* UZRAM_WRITEBACK_IDLE | _HUGE | _INCOMPRESSIBLE; 0: any in memory */
    uint32_t min_age; /* ticks (store_now()) since the last access; 0: any */
    /* Compaction of the backing store instead: pages already on it whose object
     * lies in a sparse block (backing_sparse) move; the rest is ignored. */
    bool relocate;
};

/* One page on its way to the backing store: what writeback_page_take() copied. */
struct writeback_item {
    uint64_t index;
    /* What the slot held: COMPRESSED or HUGE (state, value, codec, size as
     * in a slot), BACKED (moving: its extent is pinned meanwhile), or DEDUP
     * with the entry's object in `entry` (the item holds a reference on the
     * entry). */
    unsigned state; /* enum slot_state */
    uint64_t value;
    unsigned codec;
    unsigned size;
    struct dedup_object entry;
    uint64_t offset; /* where the copy went on the backing store */
};

/* Copy the object of page `index` into `bytes` (4096) if `filter` takes the
 * page at time `now` and it is held in memory (or, relocating, read it from
 * the backing store), and describe it in `item`.
 * A locked slot is passed over (-EBUSY), at once or, with `wait`, after
 * trying for a while: a writer holding a slot lock may be waiting for
 * writeback's lock. Returns the object's size, 0 if the page is not taken,
 * or -EBUSY. */
int writeback_page_take(struct uzram *dev, uint64_t index, const struct writeback_filter *filter,
                        uint32_t now, bool wait, struct writeback_item *item, void *bytes);

/* The copy of `item` is on the backing store at item->offset (written): put it in
 * the page's place if the page still holds the same bytes (`bytes`, the
 * copy), and free the memory. Returns whether it did; if not (the page
 * changed, or its slot stayed locked: `wait` as above), the caller frees
 * the copy on the backing store. Drops the item's dedup reference. */
bool writeback_page_publish(struct uzram *dev, struct writeback_item *item, const void *bytes,
                            bool wait);

/* Give up an item that was not written (drops its dedup reference). */
void writeback_page_drop(struct uzram *dev, struct writeback_item *item);

/* Whether page `index` holds its object in memory (compressed, raw, or a dedup reference to
 * an entry whose object is): what writeback may take. A look without waiting: false when
 * its slot is locked. */
bool writeback_page_in_memory(struct uzram *dev, uint64_t index);

#endif
