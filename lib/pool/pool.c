/* pool.c - size-class allocator for compressed objects (see pool.h).
 * Packs objects into spans of pages, tracks pool memory and compacts sparse spans. */
#include "pool/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/fault.h"
#include "pool/group.h"
#include "pool/pool_class.h"
#include "pool/pool_internal.h"

/*
 * Handle bit layout (bits 39..63 always zero: handles stay below 2^47):
 *
 *   bits  0..11  object index inside its span (a span holds at most
 *                16 pages / 16 bytes = 4096 objects)
 *   bits 12..38  span id + 1 (so that no handle is 0)
 *
 * The span id is also the index of the span's 64 KiB window of address space:
 * window id = chunk number * WINDOWS_PER_CHUNK + window within the chunk. Ids are
 * recycled when a span is released.
 *
 * Address space: chunks of CHUNK_BYTES are reserved with one mmap each and
 * cut into fixed 64 KiB windows, one per span; a span of k pages touches only
 * the first k pages of its window. One mapping per chunk (not per span) keeps
 * the process far below vm.max_map_count.
 */
static uint64_t make_handle(const struct pool_span *span, unsigned index)
{
    return ((uint64_t)span->window + 1) << OBJECT_INDEX_BITS | index;
}

/* Span of a handle, or NULL for a handle that names no live span. */
static struct pool_span *span_of(struct pool *pool, uint64_t handle)
{
    uint64_t id = handle >> OBJECT_INDEX_BITS;
    if (id == 0 || id > (uint64_t)MAX_CHUNKS * WINDOWS_PER_CHUNK)
        return NULL;
    uint64_t window = id - 1;
    struct pool_chunk *chunk = atomic_load_explicit(
        &pool->chunks[window >> WINDOWS_PER_CHUNK_SHIFT], memory_order_acquire);
    if (!chunk)
        return NULL;
    return atomic_load_explicit(&chunk->spans[window & (WINDOWS_PER_CHUNK - 1)],
                                memory_order_acquire);
}

static unsigned char *object_start(const struct class_shape *shape, const struct pool_span *span,
                                   unsigned index)
{
    return span->base + (size_t)index * shape->footprint;
}

/* Move a span to the list matching its fill after in_use changed. */
static void regroup(struct pool_class *class, struct pool_span *span)
{
    if (span->isolated)
        return;
    unsigned group = group_of(span);
    if (group != span->group) {
        list_unlink(class, span);
        list_push(class, span, group);
    }
}

/* Fullest span that still has a free object, or NULL. */
static struct pool_span *fullest_open_span(struct pool_class *class)
{
    for (int group = GROUP_FULL - 1; group >= 0; group--)
        if (class->groups[group])
            return class->groups[group];
    return NULL;
}

/* Take a free object of `span`; the caller checked one exists. */
static unsigned take_object(struct pool_class *class, const struct class_shape *shape,
                            struct pool_span *span, uint64_t owner)
{
    unsigned index = span->free_head;
    span->free_head = span->next_free[index];
    span->next_free[index] = OBJECT_ALLOCATED;
    span->in_use++;
    class->object_count++;
    if (shape->header_bytes)
        memcpy(object_start(shape, span, index), &owner, sizeof owner);
    else
        span->huge_owner = owner;
    regroup(class, span);
    return index;
}

static void put_object(struct pool_class *class, struct pool_span *span, unsigned index)
{
    span->next_free[index] = (uint16_t)span->free_head;
    span->free_head = (uint16_t)index;
    span->in_use--;
    class->object_count--;
    regroup(class, span);
}

static uint64_t owner_of(const struct class_shape *shape, const struct pool_span *span,
                         unsigned index)
{
    uint64_t owner;
    if (!shape->header_bytes)
        return span->huge_owner;
    memcpy(&owner, object_start(shape, span, index), sizeof owner);
    return owner;
}

/* Account `bytes` more pool memory unless that would pass the limit, the pool's own or
 * its group's, by more than `grace` bytes. */
static int reserve_memory(struct pool *pool, uint64_t bytes, uint64_t grace)
{
    uint64_t limit = atomic_load_explicit(&pool->limit, memory_order_relaxed);
    uint64_t used = atomic_load_explicit(&pool->mem_used, memory_order_relaxed);
    do {
        if (limit != 0 && used + bytes > limit + grace)
            return -ENOSPC;
    } while (!atomic_compare_exchange_weak_explicit(&pool->mem_used, &used, used + bytes,
                                                    memory_order_relaxed, memory_order_relaxed));
    struct uzram_group *group = atomic_load_explicit(&pool->group, memory_order_relaxed);
    if (group && group_reserve(group, bytes, grace) < 0) {
        atomic_fetch_sub_explicit(&pool->mem_used, bytes, memory_order_relaxed);
        return -ENOSPC;
    }
    uint64_t now = used + bytes;
    uint64_t peak = atomic_load_explicit(&pool->mem_used_max, memory_order_relaxed);
    while (peak < now &&
           !atomic_compare_exchange_weak_explicit(&pool->mem_used_max, &peak, now,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    return 0;
}

/* Give back what reserve_memory() took. */
static void unreserve_memory(struct pool *pool, uint64_t bytes)
{
    atomic_fetch_sub_explicit(&pool->mem_used, bytes, memory_order_relaxed);
    struct uzram_group *group = atomic_load_explicit(&pool->group, memory_order_relaxed);
    if (group)
        group_release(group, bytes);
}

/* Reserve one more chunk of address space. Called with window_lock held. */
int pool_map_chunk(struct pool *pool)
{
    if (pool->chunk_count >= MAX_CHUNKS)
        return -ENOMEM;
    size_t capacity = ((size_t)pool->chunk_count + 1) * WINDOWS_PER_CHUNK;
    /* Size the free-window stack for every window now, so releasing a span can
     * never fail for lack of memory. */
    if (capacity > pool->free_window_capacity) {
        uint32_t *grown =
            FAULT_POINT(FAULT_ALLOC) ? NULL : realloc(pool->free_windows, capacity * sizeof *grown);
        if (!grown)
            return -ENOMEM;
        pool->free_windows = grown;
        pool->free_window_capacity = capacity;
    }
    struct pool_chunk *chunk = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *chunk);
    if (!chunk)
        return -ENOMEM;
    void *base = MAP_FAILED;
    if (FAULT_POINT(FAULT_ALLOC))
        ;
    else if (pool->file_fd >= 0)
        base = mmap(NULL, CHUNK_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                    pool->file_fd,
                    (off_t)(pool->file_offset + (uint64_t)pool->chunk_count * CHUNK_BYTES));
    else
        base = mmap(NULL, CHUNK_BYTES, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        free(chunk);
        return -ENOMEM;
    }
    /* A transparent huge page would turn one touched 4 KiB page into 2 MiB
     * of resident memory; spans are sparse in their windows, so refuse them.
     * Failure only costs memory, hence ignored. */
    (void)madvise(base, CHUNK_BYTES, MADV_NOHUGEPAGE);
    chunk->base = base;
    atomic_store_explicit(&pool->chunks[pool->chunk_count], chunk, memory_order_release);
    pool->chunk_count++;
    return 0;
}

/* The cached window to take for a span of `pages` pages: the newest of the last few with
 * exactly `pages` resident, else the newest (with a reserve: else the newest with more, whose
 * tail is given back, so that no page is faulted in). -1 when there is none. Called with
 * window_lock held. */
static ssize_t pick_cached(const struct pool *pool, unsigned pages, bool reserve)
{
    for (size_t i = pool->cache_count, looked = 0; i-- > 0 && looked < 8; looked++)
        if (pool->cache[i].pages == pages)
            return (ssize_t)i;
    for (size_t i = pool->cache_count; i-- > 0;)
        if (!reserve || pool->cache[i].pages >= pages)
            return (ssize_t)i;
    return -1;
}

/* With a reserve, wait (up to POOL_RESERVE_WAIT_MS, window_lock held) for the refiller to
 * cache a window of `pages` pages: its index in the cache in *pick, or -ENOSPC when the pool
 * is at its limit (no window will come; the store may write back to make room, as without a
 * reserve), -ENOMEM when none came in time, or at once while the reserve is dry (a wait timed
 * out and the refiller has cached nothing since: it is stuck faulting memory in, and a swap
 * device's request must not wait for it one by one, stalling the kernel's swap-out for
 * POOL_RESERVE_WAIT_MS each; zram's writes fail at once when zsmalloc finds no page). */
static struct timespec reserve_deadline(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    uint64_t ns = (uint64_t)deadline.tv_nsec + (uint64_t)POOL_RESERVE_WAIT_MS * 1000000;
    deadline.tv_sec += (time_t)(ns / 1000000000);
    deadline.tv_nsec = (long)(ns % 1000000000);
    return deadline;
}

static int wait_for_reserve(struct pool *pool, unsigned pages, ssize_t *pick)
{
    struct timespec deadline = reserve_deadline();
    uint64_t limit = atomic_load(&pool->limit), cached = atomic_load(&pool->cache_bytes);
    if (limit != 0 && atomic_load(&pool->mem_used) + cached + WINDOW_BYTES > limit)
        return -ENOSPC;
    bool timed_out = false;
    while ((*pick = pick_cached(pool, pages, true)) < 0 && pool->refiller_running &&
           !pool->reserve_dry) {
        if (pool->reserve_need < pages)
            pool->reserve_need = pages;
        pthread_cond_signal(&pool->reserve_wanted);
        if (pthread_cond_timedwait(&pool->reserve_filled, &pool->window_lock, &deadline) != 0) {
            *pick = pick_cached(pool, pages, true);
            timed_out = *pick < 0;
            break;
        }
    }
    if (timed_out) {
        pool->reserve_dry = true;
        atomic_fetch_add_explicit(&pool->reserve_timeouts, 1, memory_order_relaxed);
    }
    if (*pick >= 0) {
        pool->reserve_need = 0; /* another waiter sets it again when it wakes */
        return 0;
    }
    /* Failed: the refiller, once back, still tops a window up to the size wanted. */
    if (pool->reserve_need < pages)
        pool->reserve_need = pages;
    pthread_cond_signal(&pool->reserve_wanted);
    atomic_fetch_add_explicit(&pool->reserve_empty, 1, memory_order_relaxed);
    return -ENOMEM;
}

/* The header of a new span of `objects` objects (pool_headers.c). With a reserve, from the
 * memory its thread faulted in: when that is used up, a wait for the thread as for a window
 * (wait_for_reserve), -ENOMEM when none comes in time or the reserve is dry. */
static int make_header(struct pool *pool, unsigned objects, struct pool_span **span)
{
    bool reserve = atomic_load_explicit(&pool->reserve_target, memory_order_relaxed) != 0;
    int rc = pool_header_alloc(pool, objects, reserve, span);
    if (rc != -EAGAIN)
        return rc;
    struct timespec deadline = reserve_deadline();
    pthread_mutex_lock(&pool->window_lock);
    while ((rc = pool_header_alloc(pool, objects, true, span)) == -EAGAIN &&
           pool->refiller_running && !pool->reserve_dry) {
        pthread_cond_signal(&pool->reserve_wanted);
        if (pthread_cond_timedwait(&pool->reserve_filled, &pool->window_lock, &deadline) != 0) {
            if ((rc = pool_header_alloc(pool, objects, true, span)) == -EAGAIN) {
                pool->reserve_dry = true;
                atomic_fetch_add_explicit(&pool->reserve_timeouts, 1, memory_order_relaxed);
            }
            break;
        }
    }
    pthread_mutex_unlock(&pool->window_lock);
    if (rc == -EAGAIN) {
        atomic_fetch_add_explicit(&pool->reserve_empty, 1, memory_order_relaxed);
        rc = -ENOMEM;
    }
    return rc;
}

/* A window for a span of `pages` pages: a cached one first (its resident pages in
 * *resident), then a released one, then a new one. With a reserve, only a cached one with
 * `pages` resident (waiting for the refiller): -ENOSPC at the limit, -ENOMEM when none
 * comes. */
static int take_window(struct pool *pool, unsigned pages, uint32_t *window, unsigned *resident)
{
    int rc = 0;
    *resident = 0;
    bool reserve = atomic_load_explicit(&pool->reserve_target, memory_order_relaxed) != 0;
    pthread_mutex_lock(&pool->window_lock);
    ssize_t pick = pick_cached(pool, pages, reserve);
    if (pick < 0 && reserve)
        rc = wait_for_reserve(pool, pages, &pick);
    if (pick >= 0) {
        struct cached_window taken = pool->cache[pick];
        pool->cache[pick] = pool->cache[--pool->cache_count];
        atomic_fetch_sub_explicit(&pool->cache_bytes, (uint64_t)taken.pages * PAGE_BYTES,
                                  memory_order_relaxed);
        *window = taken.window;
        *resident = taken.pages;
    } else if (rc == 0 && pool->free_window_count > 0) {
        *window = pool->free_windows[--pool->free_window_count];
    } else if (rc == 0) {
        if (pool->next_unused_window == pool->chunk_count * WINDOWS_PER_CHUNK)
            rc = pool_map_chunk(pool);
        if (rc == 0)
            *window = pool->next_unused_window++;
    }
    pthread_mutex_unlock(&pool->window_lock);
    return rc;
}

int pool_hold_file_pages(struct pool *pool, uint32_t window, unsigned first, unsigned pages)
{
    if (pool->file_fd < 0)
        return 0;
    if (FAULT_POINT(FAULT_ALLOC))
        return -ENOSPC;
    off_t at =
        (off_t)(pool->file_offset + (uint64_t)window * WINDOW_BYTES + (uint64_t)first * PAGE_BYTES);
    if ((pages != 0 && fallocate(pool->file_fd, 0, at, (off_t)pages * PAGE_BYTES) < 0) ||
        fallocate(pool->file_fd, 0, (off_t)(pool->dir_offset + (uint64_t)window * sizeof(uint32_t)),
                  sizeof(uint32_t)) < 0)
        return errno == ENOSPC ? -ENOSPC : -ENOMEM;
    return 0;
}

static void give_back_window(struct pool *pool, uint32_t window)
{
    pthread_mutex_lock(&pool->window_lock);
    pool->free_windows[pool->free_window_count++] = window;
    pthread_mutex_unlock(&pool->window_lock);
}

/* Pages of `window` a request's thread gives back, and the window with them if `free_window`:
 * under a reserve, queued for the refiller, else given back here. A punch takes the file's
 * inode lock, which the refiller holds while it allocates the file's pages, and under memory
 * pressure that allocation waits for swap-out to this very device: a request's thread that
 * punched waited for itself (tests/vm/ublk-restart.sh swap hung so). madvise() takes the
 * address space's lock, which the refiller holds while it faults the reserve in, in reclaim
 * under pressure, and behind which a munmap() of another thread (the recompressor's) queues
 * and stops every new taker: a request's madvise waited for itself so
 * (tests/vm/swap-memory.sh dense). */
static void give_back(struct pool *pool, uint32_t window, unsigned first, unsigned pages,
                      bool free_window)
{
    if (atomic_load(&pool->reserve_target) != 0) {
        pthread_mutex_lock(&pool->window_lock);
        bool queued = atomic_load(&pool->reserve_target) != 0 && pool->refiller_running &&
                      pool->deferred_count < POOL_DEFERRED_MAX;
        if (queued) {
            pool->deferred[pool->deferred_count++] =
                (struct deferred_give){window, (uint16_t)first, (uint16_t)pages, free_window};
            pthread_cond_signal(&pool->reserve_wanted);
        }
        pthread_mutex_unlock(&pool->window_lock);
        if (queued)
            return;
    }
    pool_give_pages_back(pool, window, first, pages);
    if (free_window)
        give_back_window(pool, window);
}

void pool_give_back_deferred(struct pool *pool)
{
    /* A pause (test builds) holds from the next batch on, not only from the refiller's next
     * round: a drain under way gave back pages freed after the pause (test_pool_reserve). */
    while (pool->deferred_count > 0 && !(pool->refiller_paused && !pool->refiller_stop)) {
        struct deferred_give batch[64];
        size_t n = pool->deferred_count < 64 ? pool->deferred_count : 64;
        memcpy(batch, pool->deferred, n * sizeof *batch);
        pool->deferred_count -= n;
        memmove(pool->deferred, pool->deferred + n, pool->deferred_count * sizeof *batch);
        pthread_mutex_unlock(&pool->window_lock);
        for (size_t i = 0; i < n; i++)
            pool_give_pages_back(pool, batch[i].window, batch[i].first, batch[i].pages);
        pthread_mutex_lock(&pool->window_lock);
        for (size_t i = 0; i < n; i++)
            if (batch[i].free_window)
                pool->free_windows[pool->free_window_count++] = batch[i].window;
    }
}

static struct pool_chunk *chunk_of_window(struct pool *pool, uint32_t window)
{
    return atomic_load_explicit(&pool->chunks[window >> WINDOWS_PER_CHUNK_SHIFT],
                                memory_order_acquire);
}

unsigned char *pool_window_base(struct pool *pool, uint32_t window)
{
    return chunk_of_window(pool, window)->base +
           (size_t)(window & (WINDOWS_PER_CHUNK - 1)) * WINDOW_BYTES;
}

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
/* Give `pages` pages of `window` from its page `first` back to the OS. MADV_DONTNEED refuses
 * locked memory (EINVAL): in a process that called mlockall() (uzram serve --swap)
 * MADV_DONTNEED_LOCKED (Linux 5.18) empties the range and leaves the mapping alone; before it,
 * the range is unlocked, emptied and locked again as it is touched (MLOCK_ONFAULT), which also
 * lets the kernel merge it back into one mapping with its neighbours. If even that failed, the
 * pages would merely stay resident. A pool in a state file punches a hole in the file instead:
 * MADV_DONTNEED would only drop this process's view of shared memory. */
void pool_give_pages_back(struct pool *pool, uint32_t window, unsigned first, unsigned pages)
{
    unsigned char *base = pool_window_base(pool, window) + (size_t)first * PAGE_BYTES;
    size_t bytes = (size_t)pages * PAGE_BYTES;
    if (pool->file_fd >= 0) {
        (void)fallocate(pool->file_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        (off_t)(pool->file_offset + (uint64_t)window * WINDOW_BYTES +
                                (uint64_t)first * PAGE_BYTES),
                        (off_t)bytes);
        return;
    }
    if (madvise(base, bytes, MADV_DONTNEED) == 0 || errno != EINVAL ||
        madvise(base, bytes, MADV_DONTNEED_LOCKED) == 0)
        return;
    if (munlock(base, bytes) == 0) {
        (void)madvise(base, bytes, MADV_DONTNEED);
        (void)mlock2(base, bytes, MLOCK_ONFAULT);
    }
}

/* Keep the window of an emptied span of `pages` pages, its pages resident,
 * while the cache has room and pool memory, cache included, stays within the
 * limit (mem_used no longer counts the span). false: give it back instead. */
static bool cache_window(struct pool *pool, uint32_t window, unsigned pages)
{
    uint64_t bytes = (uint64_t)pages * PAGE_BYTES;
    uint64_t limit = atomic_load_explicit(&pool->limit, memory_order_relaxed);
    bool kept = false;
    /* Under a group's limit too (approximately: other members' caches are not seen). */
    struct uzram_group *group = atomic_load_explicit(&pool->group, memory_order_relaxed);
    uint64_t group_limit = group ? atomic_load_explicit(&group->limit, memory_order_relaxed) : 0;
    bool group_room =
        group_limit == 0 ||
        atomic_load_explicit(&group->used, memory_order_relaxed) + bytes <= group_limit;
    pthread_mutex_lock(&pool->window_lock);
    uint64_t cached = atomic_load_explicit(&pool->cache_bytes, memory_order_relaxed);
    /* With a reserve (serve --swap), the reserve is the cache: its memory is locked, and
     * emptied spans beyond it would be held for nothing (the refiller keeps it full). */
    uint64_t reserve = atomic_load(&pool->reserve_target);
    uint64_t capacity = reserve != 0 ? reserve : POOL_SPAN_CACHE_BYTES;
    if (group_room && cached + bytes <= capacity && pool->cache_count < CACHE_ENTRIES &&
        (limit == 0 ||
         atomic_load_explicit(&pool->mem_used, memory_order_relaxed) + cached + bytes <= limit)) {
        pool->cache[pool->cache_count++] = (struct cached_window){window, pages};
        atomic_store_explicit(&pool->cache_bytes, cached + bytes, memory_order_relaxed);
        kept = true;
    }
    pthread_mutex_unlock(&pool->window_lock);
    return kept;
}

/* Give the cached windows' pages back to the OS until at most `keep` bytes stay cached
 * (madvise outside the lock, a few windows at a time). Returns the pages given back. */
uint64_t pool_drain_cache(struct pool *pool, uint64_t keep)
{
    uint64_t pages_given = 0;
    for (;;) {
        struct cached_window batch[64];
        size_t n = 0;
        pthread_mutex_lock(&pool->window_lock);
        uint64_t bytes = 0, cached = atomic_load_explicit(&pool->cache_bytes, memory_order_relaxed);
        while (n < 64 && pool->cache_count > 0 && cached - bytes > keep) {
            batch[n] = pool->cache[--pool->cache_count];
            bytes += (uint64_t)batch[n++].pages * PAGE_BYTES;
        }
        atomic_fetch_sub_explicit(&pool->cache_bytes, bytes, memory_order_relaxed);
        pthread_mutex_unlock(&pool->window_lock);
        if (n == 0)
            return pages_given;
        for (size_t i = 0; i < n; i++) {
            pool_give_pages_back(pool, batch[i].window, 0, batch[i].pages);
            give_back_window(pool, batch[i].window);
            pages_given += batch[i].pages;
        }
    }
}

/* Make an empty span of class `class_index` (a short one if `small`),
 * published in the span table but on no list yet. Called without any class
 * lock. */
static int create_span(struct pool *pool, unsigned class_index, bool small, uint64_t grace,
                       struct pool_span **out)
{
    const struct class_shape *shape = &pool_class_shapes()[class_index];
    unsigned pages = small ? shape->small_pages : shape->pages;
    unsigned objects = small ? shape->small_objects : shape->objects;
    uint64_t bytes = (uint64_t)pages * PAGE_BYTES;
    int rc = reserve_memory(pool, bytes, grace);
    if (rc)
        return rc;
    /* Near the limit the span cache goes first: pool memory, cache included, stays within
     * it. (A span made from the reserve only moves memory from the cache to mem_used.) */
    uint64_t limit = atomic_load_explicit(&pool->limit, memory_order_relaxed);
    if (limit != 0 && atomic_load_explicit(&pool->reserve_target, memory_order_relaxed) == 0 &&
        atomic_load_explicit(&pool->cache_bytes, memory_order_relaxed) > 0 &&
        atomic_load_explicit(&pool->mem_used, memory_order_relaxed) +
                atomic_load_explicit(&pool->cache_bytes, memory_order_relaxed) >
            limit)
        pool_drain_cache(pool, 0);
    /* Not from malloc: pool_headers.c says why. */
    struct pool_span *span = NULL;
    rc = make_header(pool, objects, &span);
    if (rc) {
        unreserve_memory(pool, bytes);
        return rc;
    }
    uint32_t window;
    unsigned resident;
    rc = take_window(pool, pages, &window, &resident);
    if (rc) {
        pool_header_free(pool, span);
        unreserve_memory(pool, bytes);
        return rc;
    }
    if (resident < pages &&
        (rc = pool_hold_file_pages(pool, window, resident, pages - resident)) < 0) {
        if (resident)
            pool_give_pages_back(pool, window, 0, resident);
        give_back_window(pool, window);
        pool_header_free(pool, span);
        unreserve_memory(pool, bytes);
        return rc;
    }
    struct pool_chunk *chunk = chunk_of_window(pool, window);
    memset(span, 0, sizeof *span);
    span->base = pool_window_base(pool, window);
    /* A cached window longer than the span: its tail would be resident and
     * counted nowhere. */
    if (resident > pages)
        give_back(pool, window, pages, resident - pages, false);
    span->window = window;
    span->class_index = (uint16_t)class_index;
    span->pages = (uint16_t)pages;
    span->objects = (uint16_t)objects;
    span->free_head = 0;
    for (unsigned i = 0; i < objects; i++)
        span->next_free[i] = (uint16_t)(i + 1 < objects ? i + 1 : FREE_LIST_END);
    /* In a state file: the directory names the span before any object of it is handed out. */
    if (pool->span_dir)
        atomic_store_explicit(&pool->span_dir[window], pool_span_dir_entry(class_index, pages),
                              memory_order_release);
    atomic_store_explicit(&chunk->spans[window & (WINDOWS_PER_CHUNK - 1)], span,
                          memory_order_release);
    *out = span;
    return 0;
}

/* Give an empty span back: its window to the span cache with its pages
 * resident while the cache has room (`cache`), else its pages to the OS and
 * its window to the free stack. Called without any class lock (madvise can
 * take a while). */
static void release_span(struct pool *pool, struct pool_span *span, bool cache)
{
    size_t bytes = (size_t)span->pages * PAGE_BYTES;
    uint32_t window = span->window;
    unsigned pages = span->pages;
    struct pool_chunk *chunk = chunk_of_window(pool, window);
    atomic_store_explicit(&chunk->spans[window & (WINDOWS_PER_CHUNK - 1)], NULL,
                          memory_order_release);
    /* After its last object went, before the window is used again. */
    if (pool->span_dir)
        atomic_store_explicit(&pool->span_dir[window], 0, memory_order_release);
    pool_header_free(pool, span);
    unreserve_memory(pool, bytes);
    if (cache && cache_window(pool, window, pages))
        return;
    give_back(pool, window, 0, pages, true);
}

int pool_create(struct pool **out)
{
    if (!out)
        return -EINVAL;
    pool_class_shapes();
    /* Class locks sit on their own cache lines: the struct needs its
     * 64-byte alignment honoured, which calloc does not promise. */
    struct pool *pool =
        FAULT_POINT(FAULT_ALLOC) ? NULL : aligned_alloc(_Alignof(struct pool), sizeof *pool);
    if (!pool)
        return -ENOMEM;
    memset(pool, 0, sizeof *pool);
    pool->file_fd = -1;
    pool->chunks = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(MAX_CHUNKS, sizeof *pool->chunks);
    if (!pool->chunks || pool_headers_init(&pool->headers) < 0) {
        free(pool->chunks);
        free(pool);
        return -ENOMEM;
    }
    pthread_mutex_init(&pool->window_lock, NULL);
    pthread_condattr_t clock;
    pthread_condattr_init(&clock);
    pthread_condattr_setclock(&clock, CLOCK_MONOTONIC);
    pthread_cond_init(&pool->reserve_wanted, &clock);
    pthread_cond_init(&pool->reserve_filled, &clock);
    pthread_condattr_destroy(&clock);
    for (unsigned i = 0; i < CLASS_COUNT; i++)
        pthread_mutex_init(&pool->classes[i].lock, NULL);
    *out = pool;
    return 0;
}

void pool_destroy(struct pool *pool)
{
    if (!pool)
        return;
    if (pool->refiller_running) {
        pthread_mutex_lock(&pool->window_lock);
        pool->refiller_stop = true;
        pthread_cond_signal(&pool->reserve_wanted);
        pthread_mutex_unlock(&pool->window_lock);
        pthread_join(pool->refiller, NULL);
    }
    pthread_mutex_lock(&pool->window_lock);
    pool_give_back_deferred(pool); /* what the refiller had not punched yet */
    pthread_mutex_unlock(&pool->window_lock);
    struct uzram_group *group = atomic_load(&pool->group);
    if (group) {
        group_release(group, atomic_load(&pool->mem_used) + pool->group_fixed);
        atomic_fetch_sub(&group->members, 1);
    }
    for (uint32_t c = 0; c < pool->chunk_count; c++) {
        struct pool_chunk *chunk = atomic_load_explicit(&pool->chunks[c], memory_order_acquire);
        munmap(chunk->base, CHUNK_BYTES); /* the spans' headers go with pool->headers */
        free(chunk);
    }
    for (unsigned i = 0; i < CLASS_COUNT; i++)
        pthread_mutex_destroy(&pool->classes[i].lock);
    pthread_mutex_destroy(&pool->window_lock);
    pthread_cond_destroy(&pool->reserve_wanted);
    pthread_cond_destroy(&pool->reserve_filled);
    pool_headers_destroy(&pool->headers);
    free(pool->free_windows);
    free(pool->chunks);
    free(pool);
}

int pool_alloc_over(struct pool *pool, size_t size, uint64_t owner, uint64_t grace,
                    uint64_t *handle)
{
    if (!pool || !handle || owner == 0 || size == 0 || size > POOL_MAX_OBJECT)
        return -EINVAL;
    const struct class_shape *all = pool_class_shapes();
    unsigned class_index = pool_class_of(all, size);
    const struct class_shape *shape = &all[class_index];
    struct pool_class *class = &pool->classes[class_index];

    pthread_mutex_lock(&class->lock);
    struct pool_span *span = fullest_open_span(class);
    if (!span) {
        /* Make the span without the class lock so that frees and other
         * allocations of the class go on meanwhile; if someone else made
         * room in the meantime, the new span is used anyway (rare, and it
         * is as dense as any other once filled). */
        bool small = class->span_count < SMALL_SPANS_PER_CLASS;
        pthread_mutex_unlock(&class->lock);
        int rc = create_span(pool, class_index, small, grace, &span);
        if (rc)
            return rc;
        pthread_mutex_lock(&class->lock);
        class->span_count++;
        class->capacity += span->objects;
        list_push(class, span, 0);
    }
    unsigned index = take_object(class, shape, span, owner);
    *handle = make_handle(span, index);
    pthread_mutex_unlock(&class->lock);
    return 0;
}

void pool_free(struct pool *pool, uint64_t handle)
{
    if (!pool)
        return;
    struct pool_span *span = span_of(pool, handle);
    if (!span)
        return;
    unsigned index = handle & OBJECT_INDEX_MASK;
    struct pool_class *class = &pool->classes[span->class_index];

    pthread_mutex_lock(&class->lock);
    if (index >= span->objects || span->next_free[index] != OBJECT_ALLOCATED) {
        /* Not an allocated object: a caller bug that must not corrupt the
         * free list. */
        pthread_mutex_unlock(&class->lock);
        return;
    }
    put_object(class, span, index);
    bool empty = span->in_use == 0 && !span->isolated;
    if (empty) {
        list_unlink(class, span);
        class->span_count--;
        class->capacity -= span->objects;
    }
    pthread_mutex_unlock(&class->lock);
    if (empty)
        release_span(pool, span, true);
}

int pool_set_owner(struct pool *pool, uint64_t handle, uint64_t owner)
{
    struct pool_span *span = pool ? span_of(pool, handle) : NULL;
    if (!span || owner == 0)
        return -EINVAL;
    unsigned index = handle & OBJECT_INDEX_MASK;
    struct pool_class *class = &pool->classes[span->class_index];
    const struct class_shape *shape = &pool_class_shapes()[span->class_index];
    pthread_mutex_lock(&class->lock);
    int rc = -EINVAL;
    if (index < span->objects && span->next_free[index] == OBJECT_ALLOCATED) {
        if (shape->header_bytes)
            memcpy(object_start(shape, span, index), &owner, sizeof owner);
        else
            span->huge_owner = owner;
        rc = 0;
    }
    pthread_mutex_unlock(&class->lock);
    return rc;
}

void *pool_map(struct pool *pool, uint64_t handle)
{
    struct pool_span *span = span_of(pool, handle);
    if (!span)
        return NULL;
    const struct class_shape *shape = &pool_class_shapes()[span->class_index];
    unsigned index = handle & OBJECT_INDEX_MASK;
    return object_start(shape, span, index) + shape->header_bytes;
}

void pool_set_limit(struct pool *pool, uint64_t bytes)
{
    atomic_store_explicit(&pool->limit, bytes, memory_order_relaxed);
    /* A lower limit leaves no room for the cache: give it back, down to what still fits. */
    uint64_t used = atomic_load_explicit(&pool->mem_used, memory_order_relaxed);
    if (bytes != 0 && used + atomic_load_explicit(&pool->cache_bytes, memory_order_relaxed) > bytes)
        pool_drain_cache(pool, used < bytes ? bytes - used : 0);
}

int pool_set_group(struct pool *pool, struct uzram_group *group, uint64_t fixed)
{
    if (atomic_load(&pool->group) != NULL || atomic_load(&pool->mem_used) != 0)
        return -EBUSY;
    pool->group_fixed = fixed;
    atomic_fetch_add(&group->members, 1);
    atomic_store(&pool->group, group);
    return 0;
}

uint64_t pool_mem_used(struct pool *pool)
{
    return atomic_load_explicit(&pool->mem_used, memory_order_relaxed);
}

uint64_t pool_mem_used_max(struct pool *pool)
{
    return atomic_load_explicit(&pool->mem_used_max, memory_order_relaxed);
}

void pool_reset_mem_used_max(struct pool *pool)
{
    atomic_store_explicit(&pool->mem_used_max,
                          atomic_load_explicit(&pool->mem_used, memory_order_relaxed),
                          memory_order_relaxed);
}

#ifdef UZRAM_TEST_HOOKS
uint64_t pool_pages_compacted(struct pool *pool)
{
    return atomic_load_explicit(&pool->pages_compacted, memory_order_relaxed);
}
#endif

/* Sparsest span with a free object that this round has not tried yet. */
static struct pool_span *sparsest_untried_span(struct pool_class *class, uint64_t gen)
{
    for (unsigned group = 0; group < GROUP_FULL; group++)
        for (struct pool_span *span = class->groups[group]; span; span = span->next)
            if (span->compact_gen != gen)
                return span;
    return NULL;
}

/* Try to empty one source span of a class. Returns false when the class
 * has nothing left worth trying; adds the pages it freed to *freed. */
static bool compact_one_span(struct pool *pool, unsigned class_index,
                             const struct pool_owner_ops *ops, uint64_t gen, uint64_t *freed)
{
    const struct class_shape *shape = &pool_class_shapes()[class_index];
    struct pool_class *class = &pool->classes[class_index];

    pthread_mutex_lock(&class->lock);
    uint64_t free_objects = class->capacity - class->object_count;
    struct pool_span *source = NULL;
    if (free_objects >= shape->small_objects)
        source = sparsest_untried_span(class, gen);
    /* The other spans must have room for all of the source's objects,
     * otherwise no span can be emptied (the source is the sparsest). */
    if (!source || free_objects - (source->objects - source->in_use) < source->in_use) {
        pthread_mutex_unlock(&class->lock);
        return false;
    }
    source->compact_gen = gen;
    list_unlink(class, source);
    source->isolated = true;

    for (unsigned index = 0; index < source->objects && source->in_use > 0; index++) {
        if (source->next_free[index] != OBJECT_ALLOCATED)
            continue;
        struct pool_span *target = fullest_open_span(class);
        if (!target)
            break;
        uint64_t old_handle = make_handle(source, index);
        uint64_t owner = owner_of(shape, source, index);
        if (!ops->try_lock_owner(ops->arg, owner, old_handle))
            continue;
        unsigned new_index = take_object(class, shape, target, owner);
        memcpy(object_start(shape, target, new_index) + shape->header_bytes,
               object_start(shape, source, index) + shape->header_bytes,
               shape->footprint - shape->header_bytes);
        if (!ops->relocate(ops->arg, owner, old_handle, make_handle(target, new_index))) {
            put_object(class, target, new_index); /* a word held for good: no more tries */
            break;
        }
        put_object(class, source, index);
    }

    source->isolated = false;
    bool empty = source->in_use == 0;
    unsigned pages = source->pages;
    if (empty) {
        class->span_count--;
        class->capacity -= source->objects;
    } else
        list_push(class, source, group_of(source));
    pthread_mutex_unlock(&class->lock);
    if (empty) {
        release_span(pool, source, false);
        *freed += pages;
        atomic_fetch_add_explicit(&pool->pages_compacted, pages, memory_order_relaxed);
    }
    return true;
}

uint64_t pool_compact(struct pool *pool, const struct pool_owner_ops *ops)
{
    if (!pool || !ops || !ops->try_lock_owner || !ops->relocate)
        return 0;
    const struct class_shape *all = pool_class_shapes();
    /* A fresh generation per call marks the spans this call already tried,
     * so a span that keeps a locked object is not picked again and again. */
    uint64_t gen = atomic_fetch_add_explicit(&pool->compact_gen, 1, memory_order_relaxed) + 1;
    uint64_t freed = 0;
    for (unsigned class_index = 0; class_index < NORMAL_CLASSES; class_index++) {
        if (all[class_index].home != class_index)
            continue;
        while (compact_one_span(pool, class_index, ops, gen, &freed))
            ;
    }
    /* Compaction gives memory back: the span cache too, the reserve apart (not counted in
     * freed, which is mem_used's share). */
    pool_drain_cache(pool, atomic_load_explicit(&pool->reserve_target, memory_order_relaxed));
    return freed;
}

uint64_t pool_span_cache_bytes(struct pool *pool)
{
    return atomic_load_explicit(&pool->cache_bytes, memory_order_relaxed);
}

double pool_object_cost(size_t size)
{
    if (size == 0 || size > POOL_MAX_OBJECT)
        return 0.0;
    const struct class_shape *all = pool_class_shapes();
    const struct class_shape *shape = &all[pool_class_of(all, size)];
    return (double)shape->pages * PAGE_BYTES / shape->objects;
}
