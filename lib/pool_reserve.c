/* pool_reserve.c - the pool's reserve (pool_set_reserve(), for `uzram serve --swap`): a
 * thread that keeps windows faulted in ahead of need in the span cache, so that making a span
 * never faults memory in (see pool_reserve.h). */
#include "pool_reserve.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#include "background.h"
#include "group.h"
#include "pool_internal.h"

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

/* The refiller keeps the reserve filled with windows whose pages it faults in itself
 * (MADV_POPULATE_WRITE, Linux 5.14, else a write to each page): the page faults, and any wait
 * for memory they cause, happen here and not in a write. */
static void *pool_refiller_main(void *arg)
{
    struct pool *pool = arg;
    pthread_mutex_lock(&pool->window_lock);
    while (!pool->refiller_stop) {
        uint32_t window = 0;
        int rc = -ENOSPC;
        if (reserve_short(pool)) {
            rc = 0;
            if (pool->free_window_count > 0)
                window = pool->free_windows[--pool->free_window_count];
            else if (pool->next_unused_window < pool->chunk_count * WINDOWS_PER_CHUNK ||
                     (rc = pool_map_chunk(pool)) == 0)
                window = pool->next_unused_window++;
        }
        if (rc < 0) { /* look again in a second: the limit or a drain may have changed */
            struct timespec wake = {0, 0};
            clock_gettime(CLOCK_MONOTONIC, &wake);
            wake.tv_sec++;
            pthread_cond_timedwait(&pool->reserve_wanted, &pool->window_lock, &wake);
            continue;
        }
        unsigned pages = MAX_SPAN_PAGES;
        size_t bytes = (size_t)pages * PAGE_BYTES;
        pthread_mutex_unlock(&pool->window_lock);
        unsigned char *base = pool_window_base(pool, window);
        if (madvise(base, bytes, 23 /* MADV_POPULATE_WRITE */) < 0)
            for (size_t at = 0; at < bytes; at += PAGE_BYTES)
                ((volatile unsigned char *)base)[at] = 0;
        pthread_mutex_lock(&pool->window_lock);
        pool->cache[pool->cache_count++] = (struct cached_window){window, pages};
        atomic_fetch_add_explicit(&pool->cache_bytes, bytes, memory_order_relaxed);
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
        pthread_cond_signal(&pool->reserve_wanted);
    }
    pthread_mutex_unlock(&pool->window_lock);
    if (rc == 0 && bytes == 0)
        pool_drain_cache(pool, POOL_SPAN_CACHE_BYTES);
    return rc;
}

bool pool_reserve_on(struct pool *pool)
{
    return atomic_load_explicit(&pool->reserve_target, memory_order_relaxed) != 0;
}
