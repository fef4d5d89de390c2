/* pool_internal.h - the pool's state, shared by pool.c (spans, objects, accounting,
 * compaction), pool_reserve.c (the reserve's refiller thread) and the pool's other files
 * (pool_adopt.c, pool_headers.c, pool_limit.c); nothing outside lib/pool includes it. */
#ifndef UZRAM_POOL_INTERNAL_H
#define UZRAM_POOL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pool/pool.h"
#include "pool/pool_class.h"
#include "common/sums.h"

/* Address space: chunks of CHUNK_BYTES cut into windows, one per span (see pool.c). */
#define WINDOW_BYTES (MAX_SPAN_PAGES * PAGE_BYTES)
_Static_assert(WINDOW_BYTES == POOL_SPAN_MAX_BYTES, "pool.h says what a span is at most");
#define WINDOWS_PER_CHUNK_SHIFT 10u
#define WINDOWS_PER_CHUNK (1u << WINDOWS_PER_CHUNK_SHIFT)
#define CHUNK_BYTES ((size_t)WINDOWS_PER_CHUNK * WINDOW_BYTES) /* 64 MiB */
#define MAX_CHUNKS (1u << 16) /* 4 TiB of address space, 2^26 spans */
_Static_assert((uint64_t)MAX_CHUNKS *WINDOWS_PER_CHUNK == POOL_WINDOWS, "pool.h says the windows");

/* Fullness groups: spans less than 1/4, 2/4, 3/4 used, not full, full. */
#define GROUP_COUNT 5
#define GROUP_FULL 4

/* Windows the span cache can hold: 16 MiB of one-page spans, or a reserve of up to
 * POOL_RESERVE_MAX in whole windows besides. */
#define CACHE_ENTRIES (POOL_SPAN_CACHE_BYTES / PAGE_BYTES + POOL_RESERVE_MAX / WINDOW_BYTES)

/* Second level of the span table: one per chunk of address space. */
struct pool_chunk {
    unsigned char *base;
    _Atomic(struct pool_span *) spans[WINDOWS_PER_CHUNK];
};

struct pool_class {
    /* Protects everything below and the mutable fields of this class's
     * spans (lists, in_use, free list, headers of objects). */
    pthread_mutex_t lock;
    struct pool_span *groups[GROUP_COUNT];
    uint64_t span_count;
    uint64_t capacity; /* objects all its spans can hold */
    uint64_t object_count;
} __attribute__((aligned(64)));

/*
 * Lock order (outermost first):
 *   caller's page slot/dedup/owner locks -> one class lock.
 * Only one class lock is ever held at a time. window_lock is a leaf, never
 * held together with a class lock: spans are made and released outside
 * class locks, so mapping a chunk or madvise never stalls a class. Compaction holds a class
 * lock while calling owner callbacks, but only *tries* owner locks, so the
 * inverted order cannot deadlock. pool_map takes no lock at all: it reads
 * the span table through acquire loads of pointers published with release
 * stores.
 */
/* The most give-backs queued for the refiller (struct pool's `deferred`): each holds at most
 * a window (64 KiB) in memory until the refiller punches it; past it, the request's thread
 * punches itself. */
#define POOL_DEFERRED_MAX 1024

/* The memory of span headers (pool_headers.c): mappings of HEADER_CHUNK_BYTES, at most
 * HEADER_CHUNKS_MAX of them (the bound: past it a span fails with -ENOMEM), cut into slots of
 * HEADER_BUCKETS sizes, multiples of HEADER_UNIT; with a reserve, the refiller keeps
 * HEADER_STOCK_BYTES (more for a larger reserve: pool_headers.c) beyond the last slot faulted
 * in. */
#define HEADER_UNIT 16u
#define HEADER_BUCKETS 28u
#define HEADER_CHUNK_BYTES ((uint64_t)1 << 20)
#define HEADER_CHUNKS_MAX 4096u /* 4 GiB of headers: a pool of a terabyte of small objects */
#define HEADER_STOCK_BYTES (128u << 10)

struct pool_headers {
    _Atomic(unsigned char *) *chunks; /* HEADER_CHUNKS_MAX entries, mapped in order */
    /* Offsets in the chunks laid end to end: the end of the mapped chunks, of the memory the
     * refiller faulted in (with a reserve, slots are carved below it alone), of the slots
     * carved so far. */
    _Atomic uint64_t mapped, ready, carved;
    /* Per bucket, the free list's top: the first free slot's unit + 1 (0: none) in the low
     * 32 bits, a tag changed by every push and pop in the high 32 (pool_headers.c). */
    _Atomic uint64_t free[HEADER_BUCKETS];
    pthread_mutex_t grow_lock; /* a leaf: held while a chunk is mapped */
};

/* Set up and give back the headers' memory (every span's header with it). */
int pool_headers_init(struct pool_headers *headers);
void pool_headers_destroy(struct pool_headers *headers);

struct pool {
    struct pool_class classes[CLASS_COUNT];
    struct pool_headers headers;

    pthread_mutex_t window_lock;
    _Atomic(struct pool_chunk *) *chunks; /* MAX_CHUNKS entries */
    uint32_t chunk_count;                 /* under window_lock */
    uint32_t next_unused_window;          /* under window_lock: windows never used yet */
    uint32_t *free_windows;               /* under window_lock: stack of released windows */
    size_t free_window_count;
    size_t free_window_capacity;
    /* Span cache, under window_lock: windows of emptied spans whose first
     * `pages` pages are still resident (see POOL_SPAN_CACHE_BYTES), newest
     * last; cache_bytes is their total, also read without the lock. */
    struct cached_window {
        uint32_t window;
        uint32_t pages;
    } cache[CACHE_ENTRIES];
    size_t cache_count;
    _Atomic uint64_t cache_bytes;
    /* The reserve (pool_set_reserve()), under window_lock: the refiller thread keeps the cache
     * at reserve_target bytes, and waits on reserve_wanted; new spans take cached windows only,
     * and wait on reserve_filled for one. */
    _Atomic uint64_t reserve_target;
    /* The most pages a span waiting on reserve_filled wants (0: none waits): spans given back
     * under the reserve keep their size, so the cache may hold only windows too small for it,
     * and the refiller then faults the rest of one in. */
    unsigned reserve_need;
    pthread_cond_t reserve_wanted, reserve_filled;
    pthread_t refiller;
    bool refiller_running, refiller_stop;
    /* Set when a span's wait for the reserve timed out, cleared when the refiller caches a
     * window again: meanwhile a span that finds no window fails at once (the refiller is
     * itself waiting for memory, most likely on the very swap-out this pool is to take). */
    bool reserve_dry;
    bool refiller_paused; /* test builds: pool_reserve_pause() */
    /* Spans that failed for want of a reserve window (reserve_empty), and waits that timed
     * out (one per dry spell). */
    _Atomic uint64_t reserve_empty, reserve_timeouts;
    /* With a reserve, pages a request's thread gives back, for the refiller to punch or
     * madvise away (pool_give_back_deferred), oldest first; `free_window` puts the
     * window on the free stack after the punch, never before. */
    struct deferred_give {
        uint32_t window;
        uint16_t first, pages;
        bool free_window;
    } deferred[POOL_DEFERRED_MAX];
    size_t deferred_count;

    _Atomic uint64_t mem_used;
    _Atomic uint64_t mem_used_max;
    _Atomic uint64_t limit;
    /* A limit shared with other devices (uzram_set_group()), charged besides mem_used, and
     * what else was charged to it with the pool (group_fixed). */
    _Atomic(struct uzram_group *) group;
    uint64_t group_fixed;
    _Atomic uint64_t pages_compacted; /* read by the tests alone: pool_pages_compacted() */
    _Atomic uint64_t compact_gen;
    /* When a write the limit refused last compacted (pool_compact_due; CLOCK_MONOTONIC ns) */
    _Atomic uint64_t pressure_compact_ns;
    /* A pool in a state file (pool_set_file()): chunk k is the file's bytes from
     * file_offset + k * CHUNK_BYTES, mapped shared, and span_dir[window] says what span a
     * window holds (POOL_SPAN_DIR_ENTRY; 0 none), so that another process can adopt the
     * spans (pool_adopt.c). file_fd is -1 for a pool in anonymous memory. */
    int file_fd;
    uint64_t file_offset;
    _Atomic uint32_t *span_dir;
    uint64_t dir_offset;
};

#define OBJECT_INDEX_BITS 12u
#define OBJECT_INDEX_MASK ((1u << OBJECT_INDEX_BITS) - 1)
_Static_assert((((uint64_t)MAX_CHUNKS * WINDOWS_PER_CHUNK + 1) << OBJECT_INDEX_BITS) <=
                   1ull << POOL_HANDLE_BITS,
               "every handle is below 2^POOL_HANDLE_BITS");

/* Values of span->next_free[] besides the index of the next free object. */
#define OBJECT_ALLOCATED 0xffffu
#define FREE_LIST_END 0xfffeu

struct pool_span {
    struct pool_span *prev; /* fullness group list, under the class lock */
    struct pool_span *next;
    unsigned char *base;  /* first byte of the span's window; immutable */
    uint64_t huge_owner;  /* owner of the single object of a huge span */
    uint64_t compact_gen; /* last compaction round that tried to empty it */
    uint32_t window;      /* span id; immutable */
    uint16_t class_index; /* immutable */
    uint16_t pages;       /* immutable: the class's long or short span length */
    uint16_t objects;     /* immutable */
    uint16_t in_use;
    uint16_t free_head;
    uint8_t group;
    bool isolated; /* taken off the lists while compaction empties it */
    /* Per object: OBJECT_ALLOCATED or the next free object's index. */
    uint16_t next_free[];
};

static inline unsigned group_of(const struct pool_span *span)
{
    if (span->in_use >= span->objects)
        return GROUP_FULL;
    return span->in_use * 4u / span->objects;
}

static inline void list_unlink(struct pool_class *class, struct pool_span *span)
{
    if (span->prev)
        span->prev->next = span->next;
    else
        class->groups[span->group] = span->next;
    if (span->next)
        span->next->prev = span->prev;
    span->prev = span->next = NULL;
}

static inline void list_push(struct pool_class *class, struct pool_span *span, unsigned group)
{
    span->group = (uint8_t)group;
    span->prev = NULL;
    span->next = class->groups[group];
    if (span->next)
        span->next->prev = span;
    class->groups[group] = span;
}

/* The header of a span of `objects` objects, from a free slot or memory never used, taking
 * neither malloc's lock nor (`reserve`: from what the refiller faulted in alone) a page fault.
 * -ENOMEM: the bound is reached; -EAGAIN: with `reserve`, the refiller's stock is used up
 * (it is woken when the stock runs low). Lock-free: a request of a swap device never waits here for
 * a thread that may itself wait for memory. */
int pool_header_alloc(struct pool *pool, unsigned objects, bool reserve, struct pool_span **out);
void pool_header_free(struct pool *pool, struct pool_span *span);
/* The refiller's part: fault in the headers' memory up to HEADER_STOCK_BYTES beyond the
 * slots carved. window_lock held, dropped while it faults. Returns whether it added any. */
bool pool_headers_stock(struct pool *pool);

/* Reserve one more chunk of address space. Called with window_lock held. */
int pool_map_chunk(struct pool *pool);
/* Give cached windows back to the OS until at most `keep` bytes stay cached. Returns the
 * pages given back. */
uint64_t pool_drain_cache(struct pool *pool, uint64_t keep);
/* Give `pages` pages of `window`, from its page `first`, back to the system. */
void pool_give_pages_back(struct pool *pool, uint32_t window, unsigned first, unsigned pages);
/* The refiller's half of what request threads give back from a state file under a reserve:
 * punches every queued range, oldest first, and frees the windows that go with them. Called
 * with window_lock held, which it drops while it punches; returns with the queue empty. */
void pool_give_back_deferred(struct pool *pool);
/* A pool in a state file: allocate `pages` pages of `window` from its page `first`, and the
 * directory entry naming the window, in the file before they are touched. A write fault into
 * a full tmpfs kills the process (SIGBUS); fallocate() fails instead: -ENOSPC (-ENOMEM for
 * another failure). 0 for a pool in anonymous memory. */
int pool_hold_file_pages(struct pool *pool, uint32_t window, unsigned first, unsigned pages);
/* A span directory entry (never 0): the span's class + 1 in bits 16..31, its pages in bits
 * 0..7, and in bits 8..14 the CRC-7 of those (sums.h), which adoption checks. */
static inline uint32_t pool_span_dir_entry(unsigned class_index, unsigned pages)
{
    uint32_t entry = ((uint32_t)class_index + 1) << 16 | pages;
    const uint8_t bytes[3] = {(uint8_t)pages, (uint8_t)(entry >> 16), (uint8_t)(entry >> 24)};
    return entry | (uint32_t)sums_crc7(bytes, sizeof bytes) << 8;
}
/* The first byte of a window. */
unsigned char *pool_window_base(struct pool *pool, uint32_t window);
/* A span that finds the reserve short waits this long for the refiller (pool_reserve.c),
 * then fails, and so do the next ones at once until the refiller caches a window. */
#define POOL_RESERVE_WAIT_MS 2000u

#endif
