/* dedup_ids.c - the dedup index's id space: chunks of entries mapped as ids reach them and
 * given back when none of their ids is handed out, a free list per chunk, ids handed out
 * lowest chunk first so that the entries stay dense. */
#include <errno.h>
#include <sys/mman.h>

#include "dedup_ids.h"
#include "fault.h"

int dedup_chunk_map(struct dedup *dedup, size_t c)
{
    if (atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed))
        return 0;
    void *chunk = FAULT_POINT(FAULT_ALLOC)
                      ? MAP_FAILED
                      : mmap(NULL, chunk_bytes(dedup), PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (chunk == MAP_FAILED)
        return -ENOMEM;
    atomic_store_explicit(&dedup->chunks[c], chunk, memory_order_release);
    atomic_fetch_add_explicit(&dedup->mem_bytes, chunk_bytes(dedup), memory_order_relaxed);
    return 0;
}

void dedup_chunk_unmap(struct dedup *dedup, size_t c)
{
    struct dedup_entry *chunk = atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed);
    if (!chunk)
        return;
    atomic_store_explicit(&dedup->chunks[c], NULL, memory_order_relaxed);
    dedup->chunk_free[c] = 0; /* its free ids go with it */
    munmap(chunk, chunk_bytes(dedup));
    atomic_fetch_sub_explicit(&dedup->mem_bytes, chunk_bytes(dedup), memory_order_relaxed);
}

static void free_push(struct dedup *dedup, uint32_t id)
{
    size_t c = id >> dedup->chunk_shift;
    entry_at(dedup, id)->next = dedup->chunk_free[c];
    dedup->chunk_free[c] = id + 1;
    if (c < dedup->free_low)
        dedup->free_low = c;
}

/* The lowest hole (an unmapped chunk below the high water mark), or chunk_count. */
static size_t lowest_hole(const struct dedup *dedup)
{
    if (!dedup->holes)
        return dedup->chunk_count;
    size_t c = 1;
    while (c < dedup->chunk_count && atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed))
        c++;
    return c;
}

/* Map hole `c` again, its ids free (the lowest first out). id_lock held. */
static int hole_fill(struct dedup *dedup, size_t c)
{
    int rc = dedup_chunk_map(dedup, c);
    if (rc < 0)
        return rc;
    uint32_t first = (uint32_t)(c << dedup->chunk_shift);
    for (uint32_t id = first + (1u << dedup->chunk_shift); id-- > first;)
        free_push(dedup, id);
    dedup->holes--;
    return 0;
}

void dedup_holes_fill(struct dedup *dedup)
{
    size_t c;
    while ((c = lowest_hole(dedup)) < dedup->chunk_count && hole_fill(dedup, c) == 0)
        ;
}

/* The lowest chunk below `below` with a free id on its list, or `below`. id_lock held. */
static size_t lowest_free(struct dedup *dedup, size_t below)
{
    size_t c = dedup->free_low;
    while (c < below && c < dedup->chunk_count && !dedup->chunk_free[c])
        c++;
    dedup->free_low = c; /* none from the old mark up to here */
    return c < below && c < dedup->chunk_count ? c : below;
}

uint32_t dedup_id_alloc(struct dedup *dedup, size_t below)
{
    uint32_t id = UINT32_MAX;
    pthread_mutex_lock(&dedup->id_lock);
    size_t c = lowest_free(dedup, below);
    if (c >= below) {
        size_t hole = lowest_hole(dedup);
        if (hole < below && hole_fill(dedup, hole) == 0)
            c = hole;
    }
    if (c < below) {
        id = dedup->chunk_free[c] - 1;
        dedup->chunk_free[c] = entry_at(dedup, id)->next;
    } else if (below >= dedup->chunk_count && dedup->high_water < dedup->capacity &&
               dedup_chunk_map(dedup, (size_t)(dedup->high_water >> dedup->chunk_shift)) == 0) {
        id = (uint32_t)dedup->high_water++;
    }
    if (id != UINT32_MAX)
        dedup->chunk_used[id >> dedup->chunk_shift]++;
    pthread_mutex_unlock(&dedup->id_lock);
    return id;
}

void dedup_id_free(struct dedup *dedup, uint32_t id)
{
    pthread_mutex_lock(&dedup->id_lock);
    free_push(dedup, id);
    dedup->chunk_used[id >> dedup->chunk_shift]--;
    pthread_mutex_unlock(&dedup->id_lock);
}

/* Drop the chunks at and past `keep` (a chunk boundary below the high water mark), free ids
 * and all. id_lock held. */
static void ids_cut(struct dedup *dedup, uint64_t keep)
{
    size_t end =
        (size_t)((dedup->high_water + (1u << dedup->chunk_shift) - 1) >> dedup->chunk_shift);
    for (size_t c = (size_t)(keep >> dedup->chunk_shift); c < dedup->chunk_count; c++) {
        if (c < end && !atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed))
            dedup->holes--; /* a hole below the old high water mark, now past the new one */
        dedup_chunk_unmap(dedup, c);
    }
    dedup->high_water = keep;
}

void dedup_ids_trim(struct dedup *dedup)
{
    uint64_t keep = dedup->high_water;
    while (keep > 0) {
        size_t c = (size_t)((keep - 1) >> dedup->chunk_shift);
        if (c == 0 || dedup->chunk_used[c])
            break;
        keep = (uint64_t)c << dedup->chunk_shift;
    }
    if (keep < dedup->high_water)
        ids_cut(dedup, keep);
    if (dedup->high_water == 0)
        return;
    size_t last = (size_t)((dedup->high_water - 1) >> dedup->chunk_shift);
    for (size_t c = 1; c < last; c++)
        if (dedup->chunk_used[c] == 0 &&
            atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed)) {
            dedup_chunk_unmap(dedup, c);
            dedup->holes++;
        }
}
