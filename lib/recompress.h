/* recompress.h - recompression of stored pages with secondary algorithms (internal).
 * recompress.c runs the passes (by request and in the background); store.c does one page. */
#ifndef UZRAM_RECOMPRESS_H
#define UZRAM_RECOMPRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct uzram;

/* Which pages a pass takes (zram's type=): a mask, 0 for every stored page. */
#define RECOMPRESS_IDLE 1u
#define RECOMPRESS_HUGE 2u

/* A pass over the page table, as one page sees it. */
struct recompress_plan {
    unsigned mode;             /* RECOMPRESS_IDLE | RECOMPRESS_HUGE, or 0 */
    uint32_t min_age;          /* ticks (store_now()) since the last access (background
                                  mode); 0: any */
    unsigned threshold;        /* only objects of at least this many bytes, and the new one
                                  below it; 0: any */
    unsigned first, last;      /* the priorities to try, in order (1..3) */
    bool marks_incompressible; /* every priority is tried: mark pages none shrinks */
};

/* What a pass did. */
struct recompress_tally {
    uint64_t tried;                     /* pages compressed again with at least one algorithm */
    uint64_t recompressed;              /* objects replaced by a smaller one */
    uint64_t incompressible;            /* pages marked incompressible */
    uint64_t bytes_before, bytes_after; /* sizes of the replaced and new objects */
};

/* Recompress page `index` as `plan` says, at time `now` (store_now()). The
 * slot lock is held only to copy the old object and to swap in the new one
 * when the slot still holds what was copied; a failure leaves the page as it
 * was. Returns 0 or a negative errno (no memory, mem_limit, an injected
 * fault). (store.c) */
int store_recompress_page(struct uzram *dev, uint64_t index, const struct recompress_plan *plan,
                          uint32_t now, struct recompress_tally *tally);

/* For training a dictionary: the content of page `index` if it is stored
 * compressed (not raw, not same-filled), without counting as an access.
 * Returns 1 with `page` filled, else 0. (store.c) */
int store_sample_page(struct uzram *dev, uint64_t index, void *page);

/* The background recompressor of a device (struct uzram): a thread the
 * library starts when recompress_idle is set and stops when it is 0, at
 * reset (paused) and at destroy. */
struct recompressor {
    /* Held through a start or stop (uzram_set_recompress_idle, destroy): one at a time,
     * so that a start racing a stop cannot leave a setting without its thread. */
    pthread_mutex_t control;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool running;          /* the thread exists (under lock) */
    bool in_pass;          /* it is working through the table (under lock) */
    unsigned requests;     /* passes by request (uzram_recompress) running (under lock) */
    _Atomic bool stop;     /* leave: recompress_idle 0 or destroy */
    _Atomic bool paused;   /* a reset is running: no pass begins, running ones end */
    uint64_t idle_seconds; /* under lock; 0: off */
    _Atomic uint64_t rate; /* pages per second; 0: no limit */
    int priority_class;    /* what the thread got: 1 SCHED_IDLE, 2 nice 19, 0 none */
};

/* Set up and tear down (store.c calls these from create, reset, destroy). */
void recompressor_init(struct recompressor *recompressor);
void recompressor_destroy(struct uzram *dev);
void recompressor_pause(struct uzram *dev);
void recompressor_resume(struct uzram *dev);

/* What the attributes show: recompress_idle, recompress_rate, and how low
 * the thread's CPU priority went (1 SCHED_IDLE, 2 nice 19, 0 neither or no
 * thread yet). */
void recompressor_settings(struct uzram *dev, uint64_t *idle_seconds, uint64_t *rate,
                           int *priority_class);

#endif
