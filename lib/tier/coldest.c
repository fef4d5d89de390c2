/* coldest.c - which pages writeback takes first when memory is full: an estimate, from a
 * sample of the page table, of when the oldest pages in memory were last accessed. */
#include "tier/coldest.h"

#include <stdatomic.h>

#include "device/device.h"
#include "tier/writeback_page.h"

/* The oldest 1/COLD_FRACTION of the pages in memory count as cold, as a sample of at most
 * COLD_SAMPLE slots spread over the table shows them. */
#define COLD_FRACTION 16u
#define COLD_SAMPLE 16384u

/* Ages of pages in ticks, counted in buckets: ages 0..7 one each, then eight buckets per
 * power of two (each an eighth of it wide). */
#define AGE_BUCKETS 240u

static unsigned age_bucket(uint32_t age)
{
    if (age < 8)
        return age;
    unsigned exponent = 31u - (unsigned)__builtin_clz(age); /* 3..31 */
    return (exponent - 2) * 8 + ((age >> (exponent - 3)) & 7);
}

/* The youngest age of a bucket. */
static uint32_t bucket_age(unsigned bucket)
{
    if (bucket < 8)
        return bucket;
    return (uint32_t)(8 + bucket % 8) << (bucket / 8 - 1);
}

uint32_t coldest_cutoff(struct uzram *dev, uint64_t *sample_start, uint32_t now)
{
    uint32_t counts[AGE_BUCKETS] = {0};
    uint64_t stride = dev->page_count / COLD_SAMPLE + 1, total = 0;
    *sample_start = (*sample_start + 7919) % stride;
    for (uint64_t index = *sample_start; index < dev->page_count; index += stride) {
        struct slot *slot = &dev->slots[index];
        uint32_t info = atomic_load_explicit(&slot->info, memory_order_relaxed);
        if ((info & SLOT_IDLE) || !writeback_page_in_memory(dev, index))
            continue; /* marked idle: taken first anyway */
        uint32_t ac_time = atomic_load_explicit(&slot->ac_time, memory_order_relaxed);
        counts[age_bucket(ac_time > now ? 0 : now - ac_time)]++;
        total++;
    }
    uint64_t wanted = total / COLD_FRACTION + 1, seen = 0;
    unsigned bucket = AGE_BUCKETS;
    while (bucket > 0 && seen < wanted)
        seen += counts[--bucket];
    return now - bucket_age(bucket);
}
