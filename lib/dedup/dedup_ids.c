/* dedup_ids.c - the dedup index's id space: chunks of entries mapped as ids reach them and
 * given back when none of their ids is handed out, a free list per chunk, ids handed out
 * lowest chunk first so that the entries stay dense. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>

#include "common/backoff.h"
#include "dedup/dedup_ids.h"
#include "common/fault.h"

static off_t chunk_offset(const struct dedup *dedup, size_t c)
{
    return (off_t)(dedup->file.offset + DEDUP_SAVED_BYTES + c * chunk_bytes(dedup));
}

/* `bytes` of the index's memory at `at` in its file, or anonymous: one code path for both. */
static void *index_mmap(struct dedup *dedup, off_t at, size_t bytes, int *rc)
{
    *rc = -ENOMEM;
    if (FAULT_POINT(FAULT_ALLOC))
        return MAP_FAILED;
    if (dedup->file.fd < 0)
        return mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (dedup->file.limited && fallocate(dedup->file.fd, 0, at, (off_t)bytes) < 0) {
        *rc = -errno;
        return MAP_FAILED;
    }
    return mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, dedup->file.fd,
                at);
}

int dedup_saved_map(struct dedup *dedup)
{
    int rc;
    void *saved = index_mmap(dedup, (off_t)dedup->file.offset, DEDUP_SAVED_BYTES, &rc);
    if (saved == MAP_FAILED)
        return rc;
    dedup->saved = saved;
    atomic_fetch_add_explicit(&dedup->mem_bytes, DEDUP_SAVED_BYTES, memory_order_relaxed);
    return 0;
}

static void mapped_mark(struct dedup *dedup, size_t c, bool on)
{
    _Atomic uint64_t *word = &dedup->saved->mapped[c / 64];
    if (on)
        atomic_fetch_or_explicit(word, 1ull << (c % 64), memory_order_relaxed);
    else
        atomic_fetch_and_explicit(word, ~(1ull << (c % 64)), memory_order_relaxed);
}

static bool mapped_saved(const struct dedup *dedup, size_t c)
{
    return atomic_load_explicit(&dedup->saved->mapped[c / 64], memory_order_relaxed) &
           (1ull << (c % 64));
}

int dedup_chunk_map(struct dedup *dedup, size_t c)
{
    if (atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed))
        return 0;
    int rc;
    void *chunk = index_mmap(dedup, chunk_offset(dedup, c), chunk_bytes(dedup), &rc);
    if (chunk == MAP_FAILED)
        return rc;
    mapped_mark(dedup, c, true); /* before any of its ids is handed out */
    atomic_store_explicit(&dedup->chunks[c], chunk, memory_order_release);
    atomic_fetch_add_explicit(&dedup->mem_bytes, chunk_bytes(dedup), memory_order_relaxed);
    return 0;
}

void dedup_chunk_unmap(struct dedup *dedup, size_t c)
{
    struct dedup_entry *chunk = atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed);
    if (!chunk)
        return;
    mapped_mark(dedup, c, false); /* before its memory goes: a successor does not map it */
    atomic_store_explicit(&dedup->chunks[c], NULL, memory_order_relaxed);
    dedup->chunk_free[c] = 0; /* its free ids go with it */
    munmap(chunk, chunk_bytes(dedup));
    if (dedup->file.fd >= 0)
        (void)fallocate(dedup->file.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        chunk_offset(dedup, c), (off_t)chunk_bytes(dedup));
    atomic_fetch_sub_explicit(&dedup->mem_bytes, chunk_bytes(dedup), memory_order_relaxed);
}

void dedup_ids_unmap(struct dedup *dedup)
{
    for (size_t c = 0; dedup->chunks && c < dedup->chunk_count; c++) {
        struct dedup_entry *chunk = atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed);
        if (chunk)
            munmap(chunk, chunk_bytes(dedup));
    }
    if (dedup->saved)
        munmap(dedup->saved, DEDUP_SAVED_BYTES);
}

static void set_high_water(struct dedup *dedup, uint64_t high_water)
{
    dedup->high_water = high_water;
    dedup->saved->high_water = high_water;
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

uint32_t dedup_id_alloc(struct dedup *dedup, size_t below, int *rc)
{
    uint32_t id = UINT32_MAX;
    *rc = -ENOMEM;
    pthread_mutex_lock(&dedup->id_lock);
    size_t c = lowest_free(dedup, below);
    if (c >= below) {
        size_t hole = lowest_hole(dedup);
        if (hole < below && (*rc = hole_fill(dedup, hole)) == 0)
            c = hole;
    }
    if (c < below) {
        id = dedup->chunk_free[c] - 1;
        dedup->chunk_free[c] = entry_at(dedup, id)->next;
    } else if (below >= dedup->chunk_count && dedup->high_water < dedup->capacity &&
               (*rc = dedup_chunk_map(dedup, (size_t)(dedup->high_water >> dedup->chunk_shift))) ==
                   0) {
        id = (uint32_t)dedup->high_water;
        set_high_water(dedup, dedup->high_water + 1);
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
    set_high_water(dedup, keep);
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

struct dedup_record *dedup_record_begin(struct dedup *dedup, uint32_t id)
{
    struct dedup_record *record = &dedup->saved->records[id % DEDUP_RECORDS];
    struct lock_wait wait = dedup_lock_wait(dedup);
    for (uint32_t free_lock = 0; !atomic_compare_exchange_weak_explicit(
             &record->lock, &free_lock, 1, memory_order_acquire, memory_order_relaxed);
         free_lock = 0)
        if (!lock_wait(&wait)) {
            dedup_lock_timeout(dedup);
            return NULL;
        }
    struct dedup_entry *entry = entry_at(dedup, id);
    struct dedup_record old = {
        .id = id + 1,
        .object = entry_handle(entry) |
                  (uint64_t)atomic_load_explicit(&entry->size_codec, memory_order_relaxed) << 48,
    };
    record->object = old.object;
    record->sum = sums_32((const char *)&old + DEDUP_RECORD_SUMMED_FROM, DEDUP_RECORD_SUMMED_BYTES);
    /* the old object before the id that makes it a record; the record before the entry's
     * stores (a full fence: not even the compiler moves them before it) */
    atomic_store_explicit(&record->id, id + 1, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    return record;
}

void dedup_record_end(struct dedup_record *record)
{
    atomic_store_explicit(&record->id, 0, memory_order_release);
    record->sum = 0;
    atomic_store_explicit(&record->lock, 0, memory_order_release);
}

int dedup_ids_adopt_map(struct dedup *dedup)
{
    for (size_t c = 0; c < dedup->chunk_count; c++)
        if (mapped_saved(dedup, c)) {
            int rc = dedup_chunk_map(dedup, c);
            if (rc < 0)
                return rc;
        }
    /* no id at or past the end of the last chunk mapped is handed out (a process killed while
     * it cut chunks off may not have lowered the mark yet), nor past the capacity */
    uint64_t high_water = dedup->saved->high_water, end = 0;
    for (size_t c = 0; c < dedup->chunk_count; c++)
        if (atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed))
            end = (uint64_t)(c + 1) << dedup->chunk_shift;
    high_water = high_water < end ? high_water : end;
    dedup->high_water = high_water < dedup->capacity ? high_water : dedup->capacity;
    return 0;
}

/* What the file holds outside the chunks mapped (given back by a process killed before it
 * punched them, or never): punched, in runs. */
static void punch_unmapped(struct dedup *dedup)
{
    for (size_t c = 0; c < dedup->chunk_count;) {
        size_t run = c;
        while (run < dedup->chunk_count &&
               !atomic_load_explicit(&dedup->chunks[run], memory_order_relaxed))
            run++;
        if (run > c)
            (void)fallocate(dedup->file.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                            chunk_offset(dedup, c), (off_t)((run - c) * chunk_bytes(dedup)));
        c = run + 1;
    }
}

void dedup_ids_adopt_free(struct dedup *dedup)
{
    size_t per = (size_t)1 << dedup->chunk_shift;
    for (size_t c = 0; c < dedup->chunk_count; c++) {
        dedup->chunk_used[c] = 0;
        dedup->chunk_free[c] = 0;
    }
    dedup->holes = 0;
    dedup->free_low = dedup->chunk_count;
    /* the highest first, so that the lowest free id of each chunk is first out */
    for (uint64_t id = dedup->high_water; id-- > 0;) {
        size_t c = (size_t)(id / per);
        if (!atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed)) {
            if (c > 0)
                dedup->holes++;
            id = (uint64_t)c * per; /* the next is the last of the chunk below */
            continue;
        }
        struct dedup_entry *entry = entry_at(dedup, (uint32_t)id);
        if (state_refs(atomic_load_explicit(&entry->state, memory_order_relaxed)))
            dedup->chunk_used[c]++;
        else
            free_push(dedup, (uint32_t)id);
    }
    if (dedup->file.fd >= 0)
        punch_unmapped(dedup);
}
