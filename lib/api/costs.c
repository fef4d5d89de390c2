/* costs.c - what storing a page costs, for the estimators (uzram estimate, uzram bench), which
 * work without a device: the pool memory of an object and of a bundle, the size from which a
 * page is stored raw, and a dedup entry. */

/* defines the page-analysis helpers of uzram.h's static-linking-only part */
#define UZRAM_STATIC_LINKING_ONLY
#include "bundle/bundle.h"
#include "dedup/dedup.h"
#include "device/device.h"
#include "pool/pool.h"

double uzram_pool_object_cost(size_t length)
{
    if (length == 0 || length >= HUGE_THRESHOLD)
        return UZRAM_PAGE_SIZE;
    return pool_object_cost(length);
}

double uzram_bundle_cost(size_t length)
{
    return bundle_cost((unsigned)length);
}

size_t uzram_huge_threshold(void)
{
    return HUGE_THRESHOLD;
}

size_t uzram_dedup_entry_cost(void)
{
    return dedup_entry_cost();
}
