/* recompress_page.h - one page's recompression (internal): what a pass asks of a page, what it
 * did, and the two calls recompress.c makes page by page. recompress_page.c does the work with
 * the page store's helpers (store_internal.h). */
#ifndef UZRAM_RECOMPRESS_PAGE_H
#define UZRAM_RECOMPRESS_PAGE_H

#include <stdbool.h>
#include <stdint.h>

struct uzram;

/* Which pages a pass takes (zram's type=): a mask, 0 for every stored page. */
#define RECOMPRESS_IDLE 1u
#define RECOMPRESS_HUGE 2u

struct bundle_work;

/* A pass over the page table, as one page sees it. */
struct recompress_plan {
    unsigned mode;             /* RECOMPRESS_IDLE | RECOMPRESS_HUGE, or 0 */
    uint32_t min_age;          /* ticks (store_now()) since the last access (background
                                  mode); 0: any */
    unsigned threshold;        /* only objects of at least this many bytes, and the new one
                                  below it; 0: any */
    unsigned first, last;      /* the priorities to try, in order (1..3) */
    bool marks_incompressible; /* every priority is tried: mark pages none shrinks */
    unsigned group;            /* pack idle neighbours by this many pages (bundles,
                                  recompress_bundle.h); 0: pages one by one */
    struct bundle_work *work;  /* the pass's buffers for that, or NULL */
    uint32_t stale_dicts;      /* codec ids whose dictionary a retraining replaced
                                  (codec_table_stale_dicts()): their objects are tried
                                  again at their own priority */
    uint64_t stale_share[16];  /* of each: what one object may grow by moving off it (its
                                  share of that dictionary's memory at the pass's start) */
    uint32_t retry_kept;       /* of those, the ones whose pages marked SLOT_DICT_KEPT are
                                  tried again (their share doubled since) */
};

/* Whether `plan` takes a page with this info and ac_time at `now`: checked once without the
 * lock (to pass over most pages cheaply) and again with it. */
bool recompress_plan_takes(const struct recompress_plan *plan, uint32_t info, uint32_t ac_time,
                           uint32_t now);

/* What a pass did. */
struct recompress_tally {
    uint64_t tried;                     /* pages compressed again with at least one algorithm */
    uint64_t recompressed;              /* objects replaced by a smaller one */
    uint64_t incompressible;            /* pages marked incompressible */
    uint64_t dict_kept;                 /* pages the newer dictionary did not shrink */
    uint64_t bytes_before, bytes_after; /* sizes of the replaced and new objects */
    uint64_t bundled;                   /* pages packed into bundles */
    uint64_t bundles;                   /* bundles made */
    uint64_t split;                     /* pages taken out of mostly dead bundles */
    /* Of each codec id: what moving the pages kept on its replaced dictionary this pass would
     * have cost the pool (their newer objects' cost beyond the older ones') */
    uint64_t kept_growth[16];
};

/* Recompress page `index` as `plan` says, at time `now` (store_now()). The
 * slot lock is held only to copy the old object and to swap in the new one
 * when the slot still holds what was copied; a failure leaves the page as it
 * was. Returns 0 or a negative errno (no memory, mem_limit, an injected
 * fault). */
int recompress_page(struct uzram *dev, uint64_t index, const struct recompress_plan *plan,
                    uint32_t now, struct recompress_tally *tally);

/* For training a dictionary: the content of page `index` if it is stored
 * compressed (not raw, not same-filled; alone, shared or bundled), without counting as an access.
 * Returns 1 with `page` filled, else 0. */
int recompress_sample_page(struct uzram *dev, uint64_t index, void *page);

#endif
