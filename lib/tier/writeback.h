/* writeback.h - moving stored objects to the backing store: passes, making room under
 * mem_limit, the background thread, attaching the backing store and the settings (internal;
 * writeback.c). writeback_page.c does one page; coldest.c says which pages are coldest. The
 * page store reaches writeback only through writeback_tier (store.h). */
#ifndef UZRAM_WRITEBACK_H
#define UZRAM_WRITEBACK_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

struct uzram;

/* Create: make dev->writeback (0 or -ENOMEM). */
int writeback_create(struct uzram *dev);
/* Stop the thread, close the backing store, free dev->writeback (destroy). */
void writeback_destroy(struct uzram *dev);
/* uzram_reset(): zero writeback_limit; give back space. */
void writeback_reset(struct uzram *dev);
/* After adoption of a state whose backing store was opened again (state_backing.c): what
 * writeback needs for it. 0 or -ENOMEM. */
int writeback_adopted(struct uzram *dev);
/* uzram_reset(), before and after: stop the passes other than writers' own (uzram_writeback,
 * the thread's, compaction) and wait until none runs; let them run again. */
void writeback_pause(struct uzram *dev);
void writeback_resume(struct uzram *dev);

/* What the store asks of writeback: room when the pool is full, and whether a page read again
 * may come back into memory (see struct store_tier). */
extern const struct store_tier writeback_tier;

/* Give back the space of the backing store that no page uses any more
 * (punch the holes of released blocks), after compacting it first if
 * `compact` and a quarter of it is garbage (uzram_compact). `wait`: for
 * writeback's lock, else only if it is free (the caller may hold a slot
 * lock, or the settings lock, which come after it). */
void writeback_trim(struct uzram *dev, bool wait, bool compact);

#ifdef UZRAM_TEST_HOOKS
/* Test builds: never start the thread (its work would come at random
 * moments: a fault sweep needs every fault point in a fixed order). Writes
 * still make room themselves. */
void writeback_test_no_thread(struct uzram *dev);
#endif

/* What the attributes and statistics show. */
struct writeback_settings {
    bool when_full;
    uint64_t idle_seconds;
    uint64_t rate;
    uint64_t limit;
    bool limit_enable;
};
void writeback_settings(struct uzram *dev, struct writeback_settings *settings);

#endif
