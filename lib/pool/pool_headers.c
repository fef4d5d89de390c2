/* pool_headers.c - the memory of span headers (struct pool_span, pool_internal.h): carved in
 * order from mappings of the pool's own, kept on a lock-free free list per size once freed,
 * and, under a reserve, faulted in ahead of need by the reserve's thread (pool_reserve.c), so
 * that making or dropping a span takes neither malloc's lock nor a page fault. A request of a
 * swap device then shares no lock here with the library's low-priority threads and never
 * waits for memory: with malloc, a swap-out's span header waited for malloc's lock, which the
 * recompressor (low priority, its allocations faulting memory in) could hold while it waited
 * in reclaim for that very swap-out. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "common/fault.h"
#include "pool/pool_internal.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Every slot starts with this, the allocator's own: the free list's link, only ever read and
 * written atomically (a pop may read the link of a slot another thread has just popped; the
 * span's fields never share its bytes), the slot's own unit (its offset / HEADER_UNIT) and
 * its size bucket, both set when it is carved and never changed. */
struct header_slot {
    _Atomic uint32_t next; /* unit of the next free slot + 1; 0: the end */
    uint32_t unit;
    uint32_t bucket;
    uint32_t unused;
};
_Static_assert(sizeof(struct header_slot) == 16, "a span's header follows at 16 bytes");
_Static_assert((uint64_t)HEADER_CHUNKS_MAX *HEADER_CHUNK_BYTES / HEADER_UNIT < UINT32_MAX,
               "every unit + 1 fits a free list's 32 bits");

/* The slot sizes, in HEADER_UNIT: from a span of one object (16 + 56 + 2 bytes) to one of
 * 4096 objects of 16 bytes (8 KiB of free list), at most a quarter apart, so that a header
 * wastes at most a fifth of its slot (malloc's 16-byte steps waste less, but its arena's lock
 * is shared). */
static const uint16_t bucket_units[HEADER_BUCKETS] = {
    5,  6,  7,  8,  10,  12,  14,  16,  20,  24,  28,  32,  40,  48,
    56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 520};
_Static_assert(5 * HEADER_UNIT >= sizeof(struct header_slot) + sizeof(struct pool_span) + 2,
               "the smallest bucket holds the header of a span of one object");
_Static_assert(520 * HEADER_UNIT >= sizeof(struct header_slot) + sizeof(struct pool_span) +
                                        PAGE_BYTES * MAX_SPAN_PAGES / 16 * sizeof(uint16_t),
               "the largest bucket holds the header of a span of 16-byte objects");

/* How many sizes above its own a header may take a free slot of (the slot stays of its size:
 * it goes back on its own list). 3: a slot at most twice the size of its own. */
#define HEADER_REUSE_SPAN 3u

/* How much header memory the refiller keeps faulted in ahead: HEADER_STOCK_BYTES, or for a
 * larger reserve what its windows can take (each span takes a window of its own, and no
 * span has more than 256 objects, pool_class.c: a header of at most 16 + 56 + 512 bytes, a
 * slot of 640), so that with the refiller stuck the windows run out before the headers. */
static uint64_t stock_bytes(struct pool *pool)
{
    uint64_t windows =
        atomic_load_explicit(&pool->reserve_target, memory_order_relaxed) / WINDOW_BYTES;
    uint64_t most = windows * 640;
    return most > HEADER_STOCK_BYTES ? most : HEADER_STOCK_BYTES;
}

static unsigned bucket_for(size_t bytes)
{
    unsigned bucket = 0;
    while ((size_t)bucket_units[bucket] * HEADER_UNIT < bytes)
        bucket++;
    return bucket;
}

static struct header_slot *slot_at(struct pool_headers *headers, uint64_t at)
{
    unsigned char *chunk =
        atomic_load_explicit(&headers->chunks[at / HEADER_CHUNK_BYTES], memory_order_acquire);
    return (struct header_slot *)(chunk + at % HEADER_CHUNK_BYTES);
}

int pool_headers_init(struct pool_headers *headers)
{
    headers->chunks =
        FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(HEADER_CHUNKS_MAX, sizeof *headers->chunks);
    if (!headers->chunks)
        return -ENOMEM;
    pthread_mutex_init(&headers->grow_lock, NULL);
    return 0;
}

void pool_headers_destroy(struct pool_headers *headers)
{
    if (!headers->chunks)
        return;
    for (uint64_t c = 0; c < HEADER_CHUNKS_MAX; c++) {
        unsigned char *chunk = atomic_load_explicit(&headers->chunks[c], memory_order_relaxed);
        if (!chunk)
            break;
        munmap(chunk, HEADER_CHUNK_BYTES);
    }
    free(headers->chunks);
    headers->chunks = NULL;
    pthread_mutex_destroy(&headers->grow_lock);
}

/* Map one more chunk, unless another thread did since the caller saw `mapped` (then 0).
 * -ENOMEM at the bound or when the mapping fails. */
static int map_chunk(struct pool_headers *headers, uint64_t mapped)
{
    pthread_mutex_lock(&headers->grow_lock);
    int rc = 0;
    uint64_t c = mapped / HEADER_CHUNK_BYTES;
    if (atomic_load(&headers->mapped) != mapped)
        ;
    else if (c >= HEADER_CHUNKS_MAX)
        rc = -ENOMEM;
    else {
        void *chunk = mmap(NULL, HEADER_CHUNK_BYTES, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (chunk == MAP_FAILED)
            rc = -ENOMEM;
        else {
            /* A huge page would make the whole chunk resident at its first header. */
            (void)madvise(chunk, HEADER_CHUNK_BYTES, MADV_NOHUGEPAGE);
            atomic_store_explicit(&headers->chunks[c], chunk, memory_order_release);
            atomic_store_explicit(&headers->mapped, mapped + HEADER_CHUNK_BYTES,
                                  memory_order_release);
        }
    }
    pthread_mutex_unlock(&headers->grow_lock);
    return rc;
}

/* Carve `bytes` below `*limit`: their offset, or UINT64_MAX when they would pass it. A slot
 * never crosses chunks: the tail of one too short for it is skipped. */
static uint64_t carve(struct pool_headers *headers, size_t bytes, _Atomic uint64_t *limit)
{
    uint64_t at = atomic_load_explicit(&headers->carved, memory_order_relaxed);
    for (;;) {
        uint64_t start = at;
        if (start % HEADER_CHUNK_BYTES + bytes > HEADER_CHUNK_BYTES)
            start = (start / HEADER_CHUNK_BYTES + 1) * HEADER_CHUNK_BYTES;
        if (start + bytes > atomic_load_explicit(limit, memory_order_acquire))
            return UINT64_MAX;
        if (atomic_compare_exchange_weak_explicit(&headers->carved, &at, start + bytes,
                                                  memory_order_relaxed, memory_order_relaxed))
            return start;
    }
}

/* Pop a free slot of `bucket`; NULL: none. The tag in the top 32 bits of the list's word
 * changes with every push and pop, so that a slot popped and pushed back meanwhile fails the
 * exchange (ABA). A slot's memory is never unmapped while the pool lives, so reading the link
 * of a slot another thread has just popped is harmless: its exchange then fails. */
static struct header_slot *pop(struct pool_headers *headers, unsigned bucket)
{
    _Atomic uint64_t *top = &headers->free[bucket];
    uint64_t word = atomic_load_explicit(top, memory_order_acquire);
    for (;;) {
        uint32_t unit = (uint32_t)word;
        if (unit == 0)
            return NULL;
        struct header_slot *slot = slot_at(headers, (uint64_t)(unit - 1) * HEADER_UNIT);
        uint32_t next = atomic_load_explicit(&slot->next, memory_order_relaxed);
        uint64_t popped = ((word >> 32) + 1) << 32 | next;
        if (atomic_compare_exchange_weak_explicit(top, &word, popped, memory_order_acquire,
                                                  memory_order_acquire))
            return slot;
    }
}

static void push(struct pool_headers *headers, struct header_slot *slot)
{
    _Atomic uint64_t *top = &headers->free[slot->bucket];
    uint64_t word = atomic_load_explicit(top, memory_order_relaxed);
    do
        atomic_store_explicit(&slot->next, (uint32_t)word, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(top, &word,
                                                  ((word >> 32) + 1) << 32 | (slot->unit + 1),
                                                  memory_order_release, memory_order_relaxed));
}

int pool_header_alloc(struct pool *pool, unsigned objects, bool reserve, struct pool_span **out)
{
    struct pool_headers *headers = &pool->headers;
    if (FAULT_POINT(FAULT_ALLOC))
        return -ENOMEM;
    unsigned bucket = bucket_for(sizeof(struct header_slot) + sizeof(struct pool_span) +
                                 (size_t)objects * sizeof(uint16_t));
    /* A free slot up to HEADER_REUSE_SPAN sizes larger before memory never used: as the
     * objects' sizes move (dense mode's bundles), the free lists of sizes no longer made would
     * otherwise hold memory that no header takes. */
    struct header_slot *slot = NULL;
    for (unsigned b = bucket; !slot && b < HEADER_BUCKETS && b <= bucket + HEADER_REUSE_SPAN; b++)
        slot = pop(headers, b);
    while (!slot) {
        size_t bytes = (size_t)bucket_units[bucket] * HEADER_UNIT;
        /* With a reserve, only what its thread faulted in (pool_headers_stock). */
        uint64_t at = carve(headers, bytes, reserve ? &headers->ready : &headers->mapped);
        if (at != UINT64_MAX) {
            slot = slot_at(headers, at);
            slot->unit = (uint32_t)(at / HEADER_UNIT);
            slot->bucket = bucket;
            break;
        }
        if (reserve)
            return -EAGAIN; /* the caller waits for the refiller (pool.c: make_header) */
        int rc = map_chunk(headers, atomic_load(&headers->mapped));
        if (rc < 0)
            return rc;
    }
    /* The refiller tops the stock up before it runs out. */
    if (reserve && atomic_load_explicit(&headers->ready, memory_order_relaxed) -
                           atomic_load_explicit(&headers->carved, memory_order_relaxed) <
                       stock_bytes(pool) / 2)
        pthread_cond_signal(&pool->reserve_wanted);
    *out = (struct pool_span *)(slot + 1);
    return 0;
}

void pool_header_free(struct pool *pool, struct pool_span *span)
{
    if (span)
        push(&pool->headers, (struct header_slot *)span - 1);
}

bool pool_headers_stock(struct pool *pool)
{
    struct pool_headers *headers = &pool->headers;
    uint64_t ready = atomic_load(&headers->ready);
    uint64_t carved = atomic_load(&headers->carved);
    if (carved > ready) /* carved without a reserve, as far as mapped: faulted in already */
        ready = carved;
    if (ready - carved >= stock_bytes(pool))
        return false;
    /* The next 64 KiB, or the rest of the chunk: never across chunks. */
    uint64_t step = 64u << 10;
    if (ready % HEADER_CHUNK_BYTES + step > HEADER_CHUNK_BYTES)
        step = HEADER_CHUNK_BYTES - ready % HEADER_CHUNK_BYTES;
    pthread_mutex_unlock(&pool->window_lock);
    bool added = false;
    uint64_t mapped = atomic_load(&headers->mapped);
    if (ready + step <= mapped ||
        (map_chunk(headers, mapped) == 0 && ready + step <= atomic_load(&headers->mapped))) {
        unsigned char *base = (unsigned char *)slot_at(headers, ready);
        if (madvise(base, step, MADV_POPULATE_WRITE) == 0)
            added = true;
        else if (errno == EINVAL) { /* before Linux 5.14 */
            for (uint64_t at = 0; at < step; at += PAGE_BYTES)
                ((volatile unsigned char *)base)[at] = 0;
            added = true;
        } /* else out of memory: the refiller looks again later */
        /* Only the refiller moves `ready` forward. */
        uint64_t was = atomic_load(&headers->ready);
        while (added && was < ready + step &&
               !atomic_compare_exchange_weak(&headers->ready, &was, ready + step))
            ;
    }
    pthread_mutex_lock(&pool->window_lock);
    if (added) {
        pool->reserve_dry = false;
        pthread_cond_broadcast(&pool->reserve_filled);
    }
    return added;
}
