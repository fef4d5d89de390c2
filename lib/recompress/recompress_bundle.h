/* recompress_bundle.h - recompression's part in bundles (internal; recompress_bundle.c): a pass
 * packs the idle pages of a window of neighbours into one bundle (bundle.h), and splits a
 * bundle more than half dead back into single objects. recompress.c calls these page by page
 * beside recompress_page(). */
#ifndef UZRAM_RECOMPRESS_BUNDLE_H
#define UZRAM_RECOMPRESS_BUNDLE_H

#include <stdint.h>

#include "recompress/recompress_page.h"

struct uzram;

/* The buffers of a pass that packs (about 200 KiB): made once per pass. NULL: no memory. */
struct bundle_work *bundle_work_new(void);
void bundle_work_free(struct bundle_work *work);

/* Pack the pages of the window of plan->group pages that starts at `first` (a multiple of
 * it) that the plan takes and are stored compressed on their own (not raw, not same-filled,
 * not marked incompressible; a dedup reference only if it is its entry's one reference: its
 * entry then leaves the index as the page joins, dedup_take_sole(); a shared page is never
 * bundled) into one bundle, compressed with the plan's last zstd codec, if at least two are
 * and the bundle takes less memory than their objects. Each page's slot is locked only to
 * copy its object and, later, to swap in the bundle if it still holds those bytes. Any
 * failure leaves every page as it was. Returns 0 or a negative errno. */
int recompress_bundle_window(struct uzram *dev, uint64_t first, const struct recompress_plan *plan,
                             uint32_t now, struct recompress_tally *tally);

#ifdef UZRAM_TEST_HOOKS
/* Test builds: the process SIGKILLs itself at the `points`-th point from now (negative: never)
 * of packing's dedup references, two each: its entry taken (its slot still names it), and its
 * slot naming the bundle (the entry's object not yet freed); a kill at either leaves what a
 * successor must adopt (test_state_bundle.c). */
void recompress_bundle_test_kill_at(long points);
#endif

/* If page `index` is a member of a bundle more than half of whose members are dead, or made
 * with a dictionary a retraining replaced (plan->stale_dicts), put
 * each live member back into an object of its own (the bundle's codec priority, or the
 * primary algorithm), freeing the bundle. Returns 0 or a negative errno (members not moved
 * stay in the bundle). */
int recompress_bundle_split(struct uzram *dev, uint64_t index, const struct recompress_plan *plan,
                            struct recompress_tally *tally);

#endif
