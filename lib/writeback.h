/* writeback.h - moving stored objects to the backing store: passes, making room under
 * mem_limit, the background thread and the settings (internal). writeback_page.c does one
 * page; coldest.c says which pages are coldest. */
#ifndef UZRAM_WRITEBACK_H
#define UZRAM_WRITEBACK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct uzram;
struct backing;
struct writeback_item;

/* Lock order: `lock` before any page slot, dedup or pool lock (it is held
 * through a batch, which takes those), and passes only *try* slot locks when
 * a writer making room may hold one, so a writer holding a slot lock may
 * wait for `lock`. It is held for one batch at a time (and a bounded scan),
 * never by a thread at a low CPU priority, and passes step aside between
 * batches for writers waiting to make room. `thread_lock` is a leaf. */
struct writeback {
    pthread_mutex_t lock; /* one writer of the store at a time; attach and detach */
    _Atomic(struct backing *) backing;
    /* Under lock: an object's bytes on their way, the batch, the hands of
     * the sweeps for cold and idle pages, and the age that counts as cold. */
    unsigned char *copy;
    struct writeback_item *items;
    uint64_t cold_hand, idle_hand;
    uint32_t cold_before; /* pages last accessed then or before are cold (store_now()) */
    bool cold_valid;      /* cold_before was sampled for this turn of the sweep */
    uint64_t sample_start;
    _Atomic uint64_t garbage_after_pass; /* the store's garbage after its last compaction */
    _Atomic uint64_t room_made;          /* batches written to make room: waiters retry */
    _Atomic unsigned room_waiters;       /* writers waiting for `lock` to make room */
    /* Passes other than a writer's (under thread_lock): how many run, and resets
     * waiting (uzram_reset(): writeback_pause()); passes_changed tells of either. */
    unsigned passes;
    _Atomic unsigned pauses;
    pthread_cond_t passes_changed;

    /* settings */
    _Atomic bool when_full;
    _Atomic uint64_t idle_seconds;
    _Atomic uint64_t rate;
    _Atomic uint64_t limit;
    _Atomic bool limit_enable;

    /* the thread (under thread_lock) */
    pthread_mutex_t thread_lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool running;
    bool stop;
#ifdef UZRAM_TEST_HOOKS
    bool no_thread; /* writeback_test_no_thread() */
#endif

    /* counters (see struct uzram_stats) */
    _Atomic uint64_t bd_objects;
    _Atomic uint64_t bd_data_size;
    _Atomic uint64_t bd_reads;
    _Atomic uint64_t bd_writes;
    _Atomic uint64_t bd_write_errors;
    _Atomic uint64_t bd_nospace;
    _Atomic uint64_t bd_checksum_errors; /* counted by the store (backing_read) */
};

void writeback_init(struct writeback *writeback);
/* Stop the thread and close the store (destroy). */
void writeback_destroy(struct uzram *dev);
/* uzram_reset(): zero the counters and writeback_limit; give back space. */
void writeback_reset(struct uzram *dev);
/* uzram_reset(), before and after: stop the passes other than writers' own (uzram_writeback,
 * the thread's, compaction) and wait until none runs; let them run again. */
void writeback_pause(struct uzram *dev);
void writeback_resume(struct uzram *dev);

static inline struct backing *device_backing_of(struct writeback *writeback)
{
    return atomic_load_explicit(&writeback->backing, memory_order_acquire);
}

/* Give back the space of the backing store that no page uses any more
 * (punch the holes of released blocks), after compacting it first if
 * `compact` and a quarter of it is garbage (uzram_compact). `wait`: for
 * writeback's lock, else only if it is free (the caller may hold a slot
 * lock, or the settings lock, which come after it). */
void writeback_trim(struct uzram *dev, bool wait, bool compact);

/* A write found the pool full (attempt 0, 1, ...): with writeback_when_full,
 * write back cold pages (or wait for another writer doing so) and return
 * true to try again; false when nothing more can be done: the store is full,
 * writeback_limit is used up, a write failed, or searches over the whole
 * table found no page to write back. Never waits on a slot lock, so a
 * caller may hold one. */
bool writeback_make_room(struct uzram *dev, unsigned attempt);

/* Whether a written-back page of `size` bytes read again may come back into memory: the
 * device moves pages between the tiers itself (writeback_when_full or writeback_idle), and
 * the pool stays below the mark where the thread starts writing back with it (half the
 * headroom below mem_limit), so that bringing one page back does not send another out. */
bool writeback_room_to_promote(struct uzram *dev, unsigned size);

#ifdef UZRAM_TEST_HOOKS
/* Test builds: never start the thread (its work would come at random
 * moments: a fault sweep needs every fault point in a fixed order). Writes
 * still make room themselves. */
void writeback_test_no_thread(struct uzram *dev);
#endif

/* What the attributes show. */
struct writeback_settings {
    bool when_full;
    uint64_t idle_seconds;
    uint64_t rate;
};
void writeback_settings(struct uzram *dev, struct writeback_settings *settings);

#endif
