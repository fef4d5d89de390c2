/* pool_reserve.c - the pool's reserve (pool_set_reserve(), for `uzram serve --swap`): a
 * thread that keeps windows faulted in ahead of need in the span cache, so that making a span
 * never faults memory in (see pool_reserve.h). */
#include "pool/pool_reserve.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>

#include "common/background.h"
#include "pool/group.h"
#include "pool/pool_internal.h"

/* Room for one more reserve window (window_lock held), under both limits, cache included. */
static bool reserve_short(struct pool *pool)
{
    uint64_t cached = atomic_load_explicit(&pool->cache_bytes, memory_order_relaxed);
    uint64_t limit = atomic_load_explicit(&pool->limit, memory_order_relaxed);
    struct uzram_group *group = atomic_load_explicit(&pool->group, memory_order_relaxed);
    uint64_t group_limit = group ? atomic_load_explicit(&group->limit, memory_order_relaxed) : 0;
    uint64_t bytes = WINDOW_BYTES;
    return cached + bytes <= atomic_load(&pool->reserve_target) &&
           pool->cache_count < CACHE_ENTRIES &&
           (limit == 0 || atomic_load(&pool->mem_used) + cached + bytes <= limit) &&
           (group_limit == 0 || atomic_load(&group->used) + bytes <= group_limit);
}

/* Fault `pages` pages of `window` from its page `first` in (MADV_POPULATE_WRITE, Linux 5.14,
 * else a write to each page), so that the wait for memory happens here and not in a write; in
 * a state file, allocated there first (a full tmpfs: -ENOSPC, where a fault would be SIGBUS). */
static int populate(struct pool *pool, uint32_t window, unsigned first, unsigned pages)
{
    int rc = pool_hold_file_pages(pool, window, first, pages);
    if (rc < 0)
        return rc;
    unsigned char *base = pool_window_base(pool, window) + (size_t)first * PAGE_BYTES;
    size_t bytes = (size_t)pages * PAGE_BYTES;
    if (madvise(base, bytes, 23 /* MADV_POPULATE_WRITE */) == 0)
        return 0;
    if (errno != EINVAL) /* EINVAL: a kernel without it; else a fault would fail too */
        return -ENOMEM;
    for (size_t at = 0; at < bytes; at += PAGE_BYTES)
        ((volatile unsigned char *)base)[at] = 0;
    return 0;
}

/* A span waits for a window of reserve_need pages and every cached window is smaller (spans
 * given back under the reserve keep their size): take the largest out, fault the rest of its
 * pages in, and cache it whole, within the limits. window_lock held (dropped meanwhile).
 * Returns whether it did. */
static bool top_up_window(struct pool *pool)
{
    ssize_t best = -1;
    for (size_t i = 0; i < pool->cache_count; i++) {
        if (pool->cache[i].pages >= pool->reserve_need)
            return false;
        if (best < 0 || pool->cache[i].pages > pool->cache[best].pages)
            best = (ssize_t)i;
    }
    if (pool->reserve_need == 0 || best < 0)
        return false;
    struct cached_window taken = pool->cache[best];
    uint64_t add = (uint64_t)(MAX_SPAN_PAGES - taken.pages) * PAGE_BYTES;
    uint64_t limit = atomic_load_explicit(&pool->limit, memory_order_relaxed);
    struct uzram_group *group = atomic_load_explicit(&pool->group, memory_order_relaxed);
    uint64_t group_limit = group ? atomic_load_explicit(&group->limit, memory_order_relaxed) : 0;
    if ((limit != 0 &&
         atomic_load(&pool->mem_used) + atomic_load(&pool->cache_bytes) + add > limit) ||
        (group_limit != 0 && atomic_load(&group->used) + add > group_limit))
        return false;
    pool->cache[best] = pool->cache[--pool->cache_count];
    atomic_fetch_sub_explicit(&pool->cache_bytes, (uint64_t)taken.pages * PAGE_BYTES,
                              memory_order_relaxed);
    pthread_mutex_unlock(&pool->window_lock);
    bool grown = populate(pool, taken.window, taken.pages, MAX_SPAN_PAGES - taken.pages) == 0;
    pthread_mutex_lock(&pool->window_lock);
    if (!grown) { /* back as it was; the refiller looks again later */
        pool->cache[pool->cache_count++] = taken;
        atomic_fetch_add_explicit(&pool->cache_bytes, (uint64_t)taken.pages * PAGE_BYTES,
                                  memory_order_relaxed);
        return false;
    }
    pool->cache[pool->cache_count++] = (struct cached_window){taken.window, MAX_SPAN_PAGES};
    atomic_fetch_add_explicit(&pool->cache_bytes, WINDOW_BYTES, memory_order_relaxed);
    pool->reserve_dry = false;
    pthread_cond_broadcast(&pool->reserve_filled);
    return true;
}

/* The refiller waits a second (or for a wake) before it looks again: the limit, a drain or
 * the room in a state's tmpfs may have changed. window_lock held. */
static void look_again_later(struct pool *pool)
{
    struct timespec wake = {0, 0};
    clock_gettime(CLOCK_MONOTONIC, &wake);
    wake.tv_sec++;
    pthread_cond_timedwait(&pool->reserve_wanted, &pool->window_lock, &wake);
}

/* The refiller keeps the reserve filled with windows whose pages it faults in itself
 * (MADV_POPULATE_WRITE, Linux 5.14, else a write to each page): the page faults, and any wait
 * for memory they cause, happen here and not in a write. */
static void *pool_refiller_main(void *arg)
{
    struct pool *pool = arg;
    /* One real-time priority below the threads that make spans from the reserve (serve --swap
     * runs them SCHED_FIFO): real-time, its page faults may go below the min watermark, which
     * under swap pressure is where the pages are; but out of memory they spin in reclaim, and
     * at its creator's priority it kept the thread that completes the swap-outs reclaim waits
     * for off a CPU they shared (a guest of one CPU stopped for minutes: tests/vm/swap.sh).
     * Below it, that thread preempts it. */
    background_below_creator();
    pthread_mutex_lock(&pool->window_lock);
    while (!pool->refiller_stop) {
        uint32_t window = 0;
        int rc = -ENOSPC;
        /* First what request threads gave back (pool.c: give_back); and before a cached
         * window is topped up, so that no queued punch of its tail comes after. */
        if (!pool->refiller_paused)
            pool_give_back_deferred(pool);
        if (!pool->refiller_paused && top_up_window(pool))
            continue;
        /* The span headers' memory, which new spans take as they take windows. */
        if (!pool->refiller_paused && pool_headers_stock(pool))
            continue;
        if (!pool->refiller_paused && reserve_short(pool)) {
            rc = 0;
            if (pool->free_window_count > 0)
                window = pool->free_windows[--pool->free_window_count];
            else if (pool->next_unused_window < pool->chunk_count * WINDOWS_PER_CHUNK ||
                     (rc = pool_map_chunk(pool)) == 0)
                window = pool->next_unused_window++;
        }
        if (rc < 0) {
            look_again_later(pool);
            continue;
        }
        unsigned pages = MAX_SPAN_PAGES;
        size_t bytes = (size_t)pages * PAGE_BYTES;
        pthread_mutex_unlock(&pool->window_lock);
        rc = populate(pool, window, 0, pages);
        if (rc < 0) /* what it made resident of the window goes back with it */
            pool_give_pages_back(pool, window, 0, pages);
        pthread_mutex_lock(&pool->window_lock);
        if (rc < 0) {
            pool->free_windows[pool->free_window_count++] = window;
            look_again_later(pool);
            continue;
        }
        pool->cache[pool->cache_count++] = (struct cached_window){window, pages};
        atomic_fetch_add_explicit(&pool->cache_bytes, bytes, memory_order_relaxed);
        pool->reserve_dry = false;
        pthread_cond_broadcast(&pool->reserve_filled);
    }
    pthread_mutex_unlock(&pool->window_lock);
    return NULL;
}

int pool_set_reserve(struct pool *pool, uint64_t bytes)
{
    if (bytes > POOL_RESERVE_MAX)
        return -EINVAL;
    pthread_mutex_lock(&pool->window_lock);
    int rc = 0;
    if (bytes != 0 && !pool->refiller_running) {
        pool->refiller_stop = false;
        rc = -background_start(&pool->refiller, pool_refiller_main, pool, "uzram-reserve");
        pool->refiller_running = rc == 0;
    }
    if (rc == 0) {
        atomic_store(&pool->reserve_target, bytes);
        pool->reserve_dry = false; /* a new reserve gets its wait */
        pthread_cond_signal(&pool->reserve_wanted);
    }
    /* Without a reserve, spans grow cached windows themselves: no queued punch may follow. */
    if (bytes == 0)
        pool_give_back_deferred(pool);
    pthread_mutex_unlock(&pool->window_lock);
    /* What the cache holds beyond the new reserve goes back (beyond a span cache when there
     * is none): e.g. the larger reserve a predecessor left in a state file (pool_adopt.c). */
    if (rc == 0)
        pool_drain_cache(pool, bytes == 0 ? POOL_SPAN_CACHE_BYTES : bytes);
    return rc;
}

bool pool_reserve_on(struct pool *pool)
{
    return atomic_load_explicit(&pool->reserve_target, memory_order_relaxed) != 0;
}

void pool_reserve_counts(struct pool *pool, struct pool_reserve_counts *out)
{
    pthread_mutex_lock(&pool->window_lock);
    out->dry = pool->reserve_dry;
    pthread_mutex_unlock(&pool->window_lock);
    out->empty = atomic_load_explicit(&pool->reserve_empty, memory_order_relaxed);
    out->timeouts = atomic_load_explicit(&pool->reserve_timeouts, memory_order_relaxed);
}

void pool_reserve_reset_counts(struct pool *pool)
{
    atomic_store_explicit(&pool->reserve_empty, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->reserve_timeouts, 0, memory_order_relaxed);
}

#ifdef UZRAM_TEST_HOOKS
void pool_reserve_pause(struct pool *pool, bool paused)
{
    pthread_mutex_lock(&pool->window_lock);
    pool->refiller_paused = paused;
    pthread_cond_signal(&pool->reserve_wanted);
    pthread_mutex_unlock(&pool->window_lock);
}
#endif
