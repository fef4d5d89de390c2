/* pool_adopt.c - a pool in a state file (pool.h): set up, and adopted by another process from
 * what the file holds: the span directory and the live objects the page table names. The
 * spans' private halves (free lists, fullness lists) and the pool's accounting are made
 * again from those. A window with no live span whose pages are all in the file (the last
 * owner's span cache and reserve, kept ahead of need) goes to the span cache as it is, so that
 * a successor does not fault that memory in again; whatever else the file holds (parts of
 * windows, spans emptied or made but never used) is punched out. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/file_extents.h"
#include "pool/pool.h"
#include "pool/pool_internal.h"

void pool_set_file(struct pool *pool, int fd, uint64_t offset, _Atomic uint32_t *span_dir,
                   uint64_t dir_offset)
{
    pool->file_fd = fd;
    pool->file_offset = offset;
    pool->span_dir = span_dir;
    pool->dir_offset = dir_offset;
}

/* The span of `window` as the directory names it, made (all objects free) if it is not yet,
 * in *out: -EINVAL (*why says it) when the directory names no span there or an impossible
 * one; -EUCLEAN (sums_damage: the entry) when its entry does not match its check bits. */
static int adopted_span(struct pool *pool, uint32_t window, struct pool_span **out,
                        const char **why)
{
    uint32_t entry = atomic_load_explicit(&pool->span_dir[window], memory_order_relaxed);
    unsigned class_index = (entry >> 16) - 1, pages = entry & 0xffu;
    *why = "it names a pool window the span directory has no span in";
    if (entry == 0)
        return -EINVAL;
    if (entry != pool_span_dir_entry(class_index, pages) || class_index >= CLASS_COUNT)
        return sums_damage("span directory entry of pool window %u (bytes %llu to %llu): it does "
                           "not match its check bits",
                           window, (unsigned long long)(pool->dir_offset + window * 4ull),
                           (unsigned long long)(pool->dir_offset + window * 4ull + 3));
    const struct class_shape *shape = &pool_class_shapes()[class_index];
    unsigned objects = pages == shape->pages         ? shape->objects
                       : pages == shape->small_pages ? shape->small_objects
                                                     : 0;
    *why = "the span directory gives its pool window a length its size class has not";
    if (objects == 0)
        return -EINVAL;
    pthread_mutex_lock(&pool->window_lock);
    int rc = 0;
    while (rc == 0 && pool->chunk_count <= window >> WINDOWS_PER_CHUNK_SHIFT)
        rc = pool_map_chunk(pool);
    pthread_mutex_unlock(&pool->window_lock);
    if (rc)
        return rc;
    struct pool_chunk *chunk = pool->chunks[window >> WINDOWS_PER_CHUNK_SHIFT];
    _Atomic(struct pool_span *) *place = &chunk->spans[window & (WINDOWS_PER_CHUNK - 1)];
    struct pool_span *span = atomic_load_explicit(place, memory_order_relaxed);
    if (span) {
        *out = span;
        return 0; /* made from this same entry */
    }
    rc = pool_header_alloc(pool, objects, false, &span);
    if (rc)
        return rc;
    memset(span, 0, sizeof *span);
    span->base = pool_window_base(pool, window);
    span->window = window;
    span->class_index = (uint16_t)class_index;
    span->pages = (uint16_t)pages;
    span->objects = (uint16_t)objects;
    for (unsigned i = 0; i < objects; i++)
        span->next_free[i] = FREE_LIST_END;
    atomic_store_explicit(place, span, memory_order_relaxed);
    *out = span;
    return 0;
}

int pool_adopt_object(struct pool *pool, uint64_t handle, uint64_t owner, size_t size,
                      const char **why)
{
    uint64_t id = handle >> OBJECT_INDEX_BITS;
    *why = "its pool handle or object size is out of range";
    if (id == 0 || id > POOL_WINDOWS || size == 0 || size > POOL_MAX_OBJECT)
        return -EINVAL;
    struct pool_span *span = NULL;
    int rc = adopted_span(pool, (uint32_t)(id - 1), &span, why);
    if (rc < 0)
        return rc;
    const struct class_shape *all = pool_class_shapes();
    const struct class_shape *shape = &all[span->class_index];
    unsigned index = handle & OBJECT_INDEX_MASK;
    *why = "its object is in a span of another size class";
    if (all[pool_class_of(all, size)].home != span->class_index)
        return -EINVAL;
    *why = "its object is past the end of its span";
    if (index >= span->objects)
        return -EINVAL;
    *why = "its object is another's too (named twice)";
    if (span->next_free[index] == OBJECT_ALLOCATED)
        return -EINVAL;
    /* The object's own header (its owner) is not read: that would fault in every page of
     * the pool now, where reads fault in only what they read, later. */
    if (!shape->header_bytes)
        span->huge_owner = owner;
    span->next_free[index] = OBJECT_ALLOCATED;
    span->in_use++;
    return 0;
}

/* Whether `window` holds an adopted span; its pages in *pages. */
static bool window_live(struct pool *pool, uint64_t window, unsigned *pages)
{
    if (window >= (uint64_t)pool->chunk_count * WINDOWS_PER_CHUNK)
        return false;
    struct pool_span *span = atomic_load_explicit(
        &pool->chunks[window >> WINDOWS_PER_CHUNK_SHIFT]->spans[window & (WINDOWS_PER_CHUNK - 1)],
        memory_order_relaxed);
    *pages = span ? span->pages : 0;
    return span != NULL;
}

/* Whether window `window` (no live span), all its pages data of the file, can be kept in the
 * span cache: room in it (as much as a reserve at its largest and a span cache can hold), and
 * its chunk mapped. */
static bool keep_window(struct pool *pool, uint64_t window)
{
    uint64_t cached = atomic_load_explicit(&pool->cache_bytes, memory_order_relaxed);
    if (pool->cache_count >= CACHE_ENTRIES ||
        cached + WINDOW_BYTES > POOL_SPAN_CACHE_BYTES + POOL_RESERVE_MAX)
        return false;
    int rc = 0;
    pthread_mutex_lock(&pool->window_lock);
    while (rc == 0 && pool->chunk_count <= window >> WINDOWS_PER_CHUNK_SHIFT)
        rc = pool_map_chunk(pool);
    if (rc == 0) {
        pool->cache[pool->cache_count++] = (struct cached_window){(uint32_t)window, MAX_SPAN_PAGES};
        atomic_store_explicit(&pool->cache_bytes, cached + WINDOW_BYTES, memory_order_relaxed);
    }
    pthread_mutex_unlock(&pool->window_lock);
    return rc == 0;
}

/* In one extent of data of the pool: keep the whole windows no adopted span uses (the cache,
 * in increasing window order), punch out every other page no adopted span uses. */
static int punch_unused(void *arg, uint64_t from, uint64_t to)
{
    struct pool *pool = arg;
    uint64_t first = (from - pool->file_offset) / WINDOW_BYTES;
    uint64_t last = (to - 1 - pool->file_offset) / WINDOW_BYTES;
    for (uint64_t window = first; window <= last; window++) {
        unsigned pages = 0;
        window_live(pool, window, &pages);
        /* what the extent holds of the window past its span's pages (all of it: no span) */
        uint64_t unused = pool->file_offset + window * WINDOW_BYTES + (uint64_t)pages * PAGE_BYTES;
        uint64_t end = pool->file_offset + (window + 1) * WINDOW_BYTES;
        if (pages == 0 && unused >= from && end <= to && keep_window(pool, window))
            continue;
        unused = unused > from ? unused : from;
        end = end < to ? end : to;
        if (unused < end)
            (void)fallocate(pool->file_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                            (off_t)unused, (off_t)(end - unused));
    }
    return 0;
}

/* Forget, in one extent of data of the span directory, the spans not adopted. */
static int forget_unused(void *arg, uint64_t from, uint64_t to)
{
    struct pool *pool = arg;
    unsigned pages;
    for (uint64_t window = (from - pool->dir_offset) / sizeof(uint32_t);
         window < (to - pool->dir_offset) / sizeof(uint32_t); window++)
        if (atomic_load_explicit(&pool->span_dir[window], memory_order_relaxed) != 0 &&
            !window_live(pool, window, &pages))
            atomic_store_explicit(&pool->span_dir[window], 0, memory_order_relaxed);
    return 0;
}

/* A span's free list, lists and counts, from the objects adopted in it. */
static void span_finish(struct pool *pool, struct pool_span *span)
{
    struct pool_class *class = &pool->classes[span->class_index];
    span->free_head = FREE_LIST_END;
    for (unsigned i = span->objects; i-- > 0;)
        if (span->next_free[i] != OBJECT_ALLOCATED) {
            span->next_free[i] = (uint16_t)span->free_head;
            span->free_head = (uint16_t)i;
        }
    class->span_count++;
    class->capacity += span->objects;
    class->object_count += span->in_use;
    list_push(class, span, group_of(span));
    atomic_fetch_add_explicit(&pool->mem_used, (uint64_t)span->pages * PAGE_BYTES,
                              memory_order_relaxed);
}

int pool_adopt_finish(struct pool *pool)
{
    uint64_t unused = 0;
    for (uint32_t c = 0; c < pool->chunk_count; c++)
        for (unsigned w = 0; w < WINDOWS_PER_CHUNK; w++) {
            struct pool_span *span =
                atomic_load_explicit(&pool->chunks[c]->spans[w], memory_order_relaxed);
            if (span) {
                span_finish(pool, span);
                unused = (uint64_t)c * WINDOWS_PER_CHUNK + w + 1;
            }
        }
    atomic_store_explicit(&pool->mem_used_max, atomic_load(&pool->mem_used), memory_order_relaxed);
    /* The directory forgets the spans not adopted, then their memory goes, but for whole
     * windows, which the span cache keeps. */
    int rc =
        file_each_data(pool->file_fd, pool->dir_offset,
                       pool->dir_offset + POOL_WINDOWS * sizeof(uint32_t), forget_unused, pool);
    if (rc == 0)
        rc = file_each_data(pool->file_fd, pool->file_offset, pool->file_offset + POOL_FILE_BYTES,
                            punch_unused, pool);
    /* Windows never used start past the last live or cached one; the others below are free
     * (the cache went in in increasing window order). */
    if (pool->cache_count > 0 && pool->cache[pool->cache_count - 1].window + 1 > unused)
        unused = pool->cache[pool->cache_count - 1].window + 1;
    pool->next_unused_window = (uint32_t)unused;
    size_t cached = pool->cache_count;
    for (uint64_t window = unused; window-- > 0;) {
        unsigned pages;
        if (cached > 0 && pool->cache[cached - 1].window == window)
            cached--;
        else if (!window_live(pool, window, &pages))
            pool->free_windows[pool->free_window_count++] = (uint32_t)window;
    }
    return rc;
}
