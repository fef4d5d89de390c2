/* pool_reserve.h - the pool's reserve (internal; pool_reserve.c), for `uzram serve --swap`:
 * the span cache kept filled ahead of need by a thread of the pool. */
#ifndef UZRAM_POOL_RESERVE_H
#define UZRAM_POOL_RESERVE_H

#include <stdbool.h>
#include <stdint.h>

struct pool;

/* The reserve: `bytes` (at most POOL_RESERVE_MAX, pool.h; 0 turns it off, the default) of
 * the span cache kept filled, in whole windows, by a thread of the pool that faults their
 * pages in itself, and from then on every new span is made from it: a pool_alloc() never
 * faults pool memory in, so it never waits for the kernel to find a free page, which a swap
 * device's server must not do (the kernel may be waiting for that very write to free one).
 * A span that finds the reserve short waits up to POOL_RESERVE_WAIT_MS (pool_internal.h)
 * for the thread, then fails with -ENOMEM, and until the thread caches a window again every
 * span that finds no window fails with -ENOMEM at once (the reserve is "dry"); at the limit
 * it fails at once with -ENOSPC, as without a reserve. The reserve counts as span cache
 * (pool.h), within the limit, and compaction keeps it. The cache beyond
 * `bytes` (beyond POOL_SPAN_CACHE_BYTES for 0) is given back at once: e.g. the larger reserve
 * a predecessor left in a state file (pool_adopt.c). Returns 0, -EINVAL, or -errno when the
 * thread cannot start. */
int pool_set_reserve(struct pool *pool, uint64_t bytes);
/* Whether a reserve is kept (memory given back would only be faulted in again, by a write
 * that must not wait for it). */
bool pool_reserve_on(struct pool *pool);

/* What the reserve did: spans that failed for want of a window (the reserve_empty counter of
 * uzram.h), waits for the thread that timed out (one per dry spell), and whether the reserve
 * is dry now. The counts start again at 0 with pool_reserve_reset_counts() (uzram_reset). */
struct pool_reserve_counts {
    uint64_t empty;
    uint64_t timeouts;
    bool dry;
};
void pool_reserve_counts(struct pool *pool, struct pool_reserve_counts *out);
void pool_reserve_reset_counts(struct pool *pool);

#ifdef UZRAM_TEST_HOOKS
/* Test builds: stop the thread from caching windows (true) or let it again (false), as if it
 * were stuck waiting for memory. */
void pool_reserve_pause(struct pool *pool, bool paused);
#endif

#endif
