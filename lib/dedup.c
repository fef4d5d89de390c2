/* dedup.c - content index that lets identical pages share one stored object.
 * XXH3 hash, every same-hash candidate compared in full, 20-byte entries. */
#include "dedup.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "backoff.h"
#include "fault.h"
#include "uzram.h"

/*
 * Each unique stored object has one entry (20 bytes), in chunks (below); an
 * entry's id is its place. Buckets hold id + 1 of the first entry of a chain
 * (0: empty); the chain is linked through `next` (also id + 1).
 *
 * `size_codec` packs the object's size and codec:
 *   bits  0..11  size - 1, 0..4095 (4095: a raw page)
 *   bits 12..15  codec id
 * `state` packs the reference count, reader pins and a moving bit:
 *   bits  0..19  references: one per page slot that shares the object, plus
 *                one per writer that is comparing it as a candidate
 *   bits 20..30  pins: readers decompressing the object right now
 *   bit  31      MOVING: compaction is copying the object elsewhere
 * Readers pin only while they hold a reference; compaction sets MOVING only
 * when there are references and no pins, so an object is never moved under
 * a reader and never freed while it moves. Recompression (dedup_replace)
 * swaps the object under MOVING the same way. A change of the references
 * also holds MOVING for a moment, so that it counts dup_data_size with the
 * size the object has at that instant (entry_change_refs). The accessors
 * below are the only way into either word.
 *
 * Locks: one stripe mutex covers its buckets (their array, and the chains)
 * and is held only to walk, change or resize them, never while compressing,
 * decompressing or comparing. id_lock covers the free-id list. Order: a
 * page slot lock, then a stripe, then id_lock, then a pool class lock.
 */
struct dedup_entry {
    uint32_t handle_low;  /* pool handle bits 0..31 */
    uint16_t handle_high; /* pool handle bits 32..47 */
    _Atomic uint16_t size_codec;
    _Atomic uint32_t state;
    uint32_t next;
    uint32_t hash_tag; /* top 32 bits of the content hash; low bits pick the bucket */
};
_Static_assert(sizeof(struct dedup_entry) == 20, "dedup entries are 20 bytes");
_Static_assert(DEDUP_HANDLE_BITS == 32 + 16, "an entry keeps handles of DEDUP_HANDLE_BITS");

#define SIZE_MASK 0xfffu
#define CODEC_SHIFT 12
_Static_assert(CODEC_SHIFT + DEDUP_CODEC_BITS == 16, "size and codec fill size_codec");

#define REF_MASK 0xfffffu
#define REF_MAX REF_MASK
#define PIN_ONE (1u << 20)
#define PIN_MASK (0x7ffu << 20)
#define MOVING (1u << 31)

static inline unsigned entry_size(const struct dedup_entry *entry)
{
    return (atomic_load_explicit(&entry->size_codec, memory_order_relaxed) & SIZE_MASK) + 1u;
}
static inline uint64_t entry_handle(const struct dedup_entry *entry)
{
    return entry->handle_low | (uint64_t)entry->handle_high << 32;
}
static inline void entry_set_handle(struct dedup_entry *entry, uint64_t handle)
{
    entry->handle_low = (uint32_t)handle;
    entry->handle_high = (uint16_t)(handle >> 32);
}
static inline void entry_get_object(const struct dedup_entry *entry, struct dedup_object *object)
{
    object->handle = entry_handle(entry);
    object->size = entry_size(entry);
    object->codec =
        (unsigned)atomic_load_explicit(&entry->size_codec, memory_order_relaxed) >> CODEC_SHIFT;
}
static inline void entry_set_object(struct dedup_entry *entry, const struct dedup_object *object)
{
    entry_set_handle(entry, object->handle);
    atomic_store_explicit(&entry->size_codec,
                          (uint16_t)((object->size - 1) | object->codec << CODEC_SHIFT),
                          memory_order_relaxed);
}

static inline uint32_t state_refs(uint32_t state)
{
    return state & REF_MASK;
}
static inline bool state_pins_full(uint32_t state)
{
    return (state & PIN_MASK) == PIN_MASK;
}
static inline bool state_pinned_or_moving(uint32_t state)
{
    return (state & (PIN_MASK | MOVING)) != 0;
}
static inline bool state_moving(uint32_t state)
{
    return (state & MOVING) != 0;
}

/*
 * Storage, sized to what is stored and grown as it fills:
 *  - entries live in chunks of 2^chunk_shift (at least 1024 entries: 20 KiB, five whole
 *    pages), mapped as ids reach them; an id is chunk number and place. The directory of
 *    chunks is sized to the disk (8 + 4 bytes a chunk, at most ~4096 chunks).
 *  - the buckets are split among the stripes by the low STRIPE_BITS of the tag: each stripe
 *    is a hash table of its own, whose bucket array doubles (under the stripe's lock alone)
 *    when its chains pass MAX_LOAD entries on average, so that no growth stops the others.
 *    A bucket costs 4 bytes for 1.5 to 3 entries.
 * Under a pool reserve (dedup_prefault) the index is made as large as the disk needs at once
 * and faulted in, and then neither grows nor gives back: a write never faults memory in.
 * dedup_trim (compaction, reset) gives back every chunk none of whose ids is handed out (past
 * the last id in use, and holes below it: bundling takes most entries out of the index, all
 * over it) and shrinks the bucket arrays of stripes that emptied. A new id comes from the free
 * list, else from a hole mapped again (ids stay dense), else from the high water mark.
 */
#define STRIPE_BITS 8
#define STRIPE_COUNT (1u << STRIPE_BITS)
#define MAX_LOAD 3u
#define MIN_BUCKETS 2u
#define CHUNK_MIN_SHIFT 10
#define CHUNKS_MAX 4096u
/* What malloc adds to a block it hands out (glibc: an 8-byte header, 16-byte rounding),
 * counted with each bucket array so that meta_data_size is what the index takes. */
#define MALLOC_OVERHEAD 16u

struct dedup_stripe {
    _Alignas(64) pthread_mutex_t lock; /* one cache line a stripe */
    uint32_t *buckets;                 /* id + 1 of a chain's first entry; 0: empty */
    uint32_t bucket_mask;              /* bucket count - 1 (a power of two) */
    uint32_t entries;                  /* linked into this stripe's chains */
    /* How many entries were ever linked into this stripe, so a writer can tell whether one
     * arrived while it was compressing. */
    uint64_t inserts;
};

struct dedup {
    struct dedup_stripe stripes[STRIPE_COUNT];
    struct dedup_object_ops ops;
    uint64_t capacity;    /* ids below this may be handed out */
    unsigned chunk_shift; /* entries per chunk: 1 << chunk_shift */
    size_t chunk_count;
    _Atomic(struct dedup_entry *) *chunks; /* NULL: not mapped */

    pthread_mutex_t id_lock;
    uint32_t *chunk_used; /* ids handed out in each chunk */
    uint32_t free_head;   /* id + 1 of a free entry, linked through next */
    uint64_t high_water;  /* ids below this have been handed out */
    uint64_t holes;       /* chunks below the last one in use that dedup_trim unmapped */

    _Atomic bool reserved; /* made full size and faulted in: no growth, no giveback */
    _Atomic uint64_t mem_bytes;
    _Atomic uint64_t live_entries;
    _Atomic uint64_t dup_data_size;
    _Atomic uint64_t hash_collisions;
#ifdef UZRAM_TEST_HOOKS
    _Atomic bool force_collisions;
#endif
};

/* Comparison needs its own page: the caller's page may be the store's
 * scratch page. */
static __thread unsigned char compare_buffer[UZRAM_PAGE_SIZE];

static size_t chunk_bytes(const struct dedup *dedup)
{
    return sizeof(struct dedup_entry) << dedup->chunk_shift;
}

static size_t buckets_bytes(uint64_t mask)
{
    return (mask + 1) * sizeof(uint32_t) + MALLOC_OVERHEAD;
}

static struct dedup_entry *entry_at(struct dedup *dedup, uint32_t id)
{
    struct dedup_entry *chunk =
        atomic_load_explicit(&dedup->chunks[id >> dedup->chunk_shift], memory_order_acquire);
    return &chunk[id & ((1u << dedup->chunk_shift) - 1)];
}

/* Map chunk `c` if it is not. id_lock held (or the index not yet shared). */
static int chunk_map(struct dedup *dedup, size_t c)
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

/* Unmap chunk `c`, none of whose ids is handed out. id_lock held. */
static void chunk_unmap(struct dedup *dedup, size_t c)
{
    struct dedup_entry *chunk = atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed);
    if (!chunk)
        return;
    atomic_store_explicit(&dedup->chunks[c], NULL, memory_order_relaxed);
    munmap(chunk, chunk_bytes(dedup));
    atomic_fetch_sub_explicit(&dedup->mem_bytes, chunk_bytes(dedup), memory_order_relaxed);
}

static uint32_t tag_bucket(const struct dedup_stripe *stripe, uint32_t tag)
{
    return (tag >> STRIPE_BITS) & stripe->bucket_mask;
}

static struct dedup_stripe *tag_stripe(struct dedup *dedup, uint32_t tag)
{
    return &dedup->stripes[tag & (STRIPE_COUNT - 1)];
}

/* Give the stripe `mask` + 1 buckets, relinking its entries. A chain keeps its order (each
 * old chain is reversed, then its entries pushed onto their new chains), so that a writer
 * that dropped the lock while holding a reference on an entry goes on from it and still
 * meets, after it, every entry with its tag that it had not seen. Stripe locked. False (the
 * stripe unchanged, its chains longer) if there is no memory. */
static bool stripe_resize(struct dedup *dedup, struct dedup_stripe *stripe, uint32_t mask)
{
    uint32_t *fresh = FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(((size_t)mask + 1) * sizeof *fresh);
    if (!fresh)
        return false;
    for (uint64_t i = 0; i <= mask; i++)
        fresh[i] = 0;
    for (uint64_t b = 0; stripe->buckets && b <= stripe->bucket_mask; b++) {
        uint32_t reversed = 0, link = stripe->buckets[b];
        while (link) {
            struct dedup_entry *entry = entry_at(dedup, link - 1);
            uint32_t next = entry->next;
            entry->next = reversed;
            reversed = link;
            link = next;
        }
        while (reversed) {
            struct dedup_entry *entry = entry_at(dedup, reversed - 1);
            uint32_t next = entry->next;
            uint32_t bucket = (entry->hash_tag >> STRIPE_BITS) & mask;
            entry->next = fresh[bucket];
            fresh[bucket] = reversed;
            reversed = next;
        }
    }
    if (stripe->buckets)
        atomic_fetch_sub_explicit(&dedup->mem_bytes, buckets_bytes(stripe->bucket_mask),
                                  memory_order_relaxed);
    free(stripe->buckets);
    stripe->buckets = fresh;
    stripe->bucket_mask = mask;
    atomic_fetch_add_explicit(&dedup->mem_bytes, buckets_bytes(mask), memory_order_relaxed);
    return true;
}

/* The bucket mask a stripe of `entries` entries would have grown to. */
static uint32_t mask_for(uint64_t entries)
{
    uint64_t count = MIN_BUCKETS;
    while (entries > MAX_LOAD * count && count < (UINT32_MAX >> STRIPE_BITS))
        count *= 2;
    return (uint32_t)(count - 1);
}

static void index_free(struct dedup *dedup)
{
    for (unsigned i = 0; i < STRIPE_COUNT; i++) {
        pthread_mutex_destroy(&dedup->stripes[i].lock);
        free(dedup->stripes[i].buckets);
    }
    pthread_mutex_destroy(&dedup->id_lock);
    for (size_t c = 0; dedup->chunks && c < dedup->chunk_count; c++)
        chunk_unmap(dedup, c);
    free(dedup->chunks);
    free(dedup->chunk_used);
    free(dedup);
}

int dedup_create(uint64_t page_count, const struct dedup_object_ops *ops, struct dedup **out)
{
    struct dedup *dedup =
        FAULT_POINT(FAULT_ALLOC) ? NULL : aligned_alloc(_Alignof(struct dedup), sizeof *dedup);
    if (!dedup)
        return -ENOMEM;
    memset(dedup, 0, sizeof *dedup);
    for (unsigned i = 0; i < STRIPE_COUNT; i++)
        pthread_mutex_init(&dedup->stripes[i].lock, NULL);
    pthread_mutex_init(&dedup->id_lock, NULL);
    /* Live entries never exceed pages stored plus writers in flight. */
    uint64_t capacity = page_count + 4096;
    if (capacity > UINT32_MAX - 1)
        capacity = UINT32_MAX - 1;
    dedup->capacity = capacity;
    dedup->ops = *ops;
    dedup->chunk_shift = CHUNK_MIN_SHIFT;
    while ((capacity >> dedup->chunk_shift) >= CHUNKS_MAX)
        dedup->chunk_shift++;
    dedup->chunk_count =
        (size_t)((capacity + (1u << dedup->chunk_shift) - 1) >> dedup->chunk_shift);
    dedup->chunks =
        FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(dedup->chunk_count, sizeof *dedup->chunks);
    dedup->chunk_used =
        FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(dedup->chunk_count, sizeof *dedup->chunk_used);
    atomic_init(&dedup->mem_bytes,
                sizeof *dedup + dedup->chunk_count * (sizeof *dedup->chunks +
                                                      sizeof *dedup->chunk_used + MALLOC_OVERHEAD));
    int rc = dedup->chunks && dedup->chunk_used ? chunk_map(dedup, 0) : -ENOMEM;
    for (unsigned i = 0; rc == 0 && i < STRIPE_COUNT; i++)
        if (!stripe_resize(dedup, &dedup->stripes[i], MIN_BUCKETS - 1))
            rc = -ENOMEM;
    if (rc < 0) {
        index_free(dedup);
        return rc;
    }
    *out = dedup;
    return 0;
}

void dedup_destroy(struct dedup *dedup)
{
    if (dedup)
        index_free(dedup);
}

static int hole_fill(struct dedup *dedup);

/* Make the index as large as the disk can need and its pages present (MADV_POPULATE_WRITE,
 * Linux 5.14; an older kernel faults them in as used), then stop it growing or giving back.
 * Writers may be running: each part changes under its own lock, and pages are made present
 * without being written. */
void dedup_prefault(struct dedup *dedup)
{
    /* set under id_lock, which dedup_trim() reads it under: no trim undoes this */
    pthread_mutex_lock(&dedup->id_lock);
    atomic_store(&dedup->reserved, true);
    while (dedup->holes && hole_fill(dedup) == 0) /* their ids back on the free list */
        ;
    for (size_t c = 0; c < dedup->chunk_count; c++)
        if (chunk_map(dedup, c) == 0)
            (void)madvise(atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed),
                          chunk_bytes(dedup), 23 /* MADV_POPULATE_WRITE */);
    pthread_mutex_unlock(&dedup->id_lock);
    /* the buckets are written whole as they are made: present */
    uint32_t mask = mask_for(dedup->capacity / STRIPE_COUNT + 1);
    for (unsigned i = 0; i < STRIPE_COUNT; i++) {
        struct dedup_stripe *stripe = &dedup->stripes[i];
        pthread_mutex_lock(&stripe->lock);
        if (stripe->bucket_mask < mask)
            (void)stripe_resize(dedup, stripe, mask);
        pthread_mutex_unlock(&stripe->lock);
    }
}

/* Map the lowest hole again, its ids on the free list (the lowest first). id_lock held. */
static int hole_fill(struct dedup *dedup)
{
    size_t c = 1;
    while (c < dedup->chunk_count && atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed))
        c++;
    int rc = c < dedup->chunk_count ? chunk_map(dedup, c) : -ENOENT;
    if (rc < 0)
        return rc;
    uint32_t first = (uint32_t)(c << dedup->chunk_shift);
    for (uint32_t id = first + (1u << dedup->chunk_shift); id-- > first;) {
        entry_at(dedup, id)->next = dedup->free_head;
        dedup->free_head = id + 1;
    }
    dedup->holes--;
    return 0;
}

/* Whether dedup_trim unmaps chunk `c` below the last chunk in use, `last`: none of its ids is
 * handed out (the first chunk stays). id_lock held. */
static bool chunk_idle(const struct dedup *dedup, size_t c, size_t last)
{
    return c > 0 && c < last && dedup->chunk_used[c] == 0 &&
           atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed);
}

/* Unmap the idle chunks below the last one in use, their ids dropped from the free list.
 * id_lock held. */
static void holes_cut(struct dedup *dedup)
{
    if (dedup->high_water == 0)
        return;
    size_t last = (size_t)((dedup->high_water - 1) >> dedup->chunk_shift);
    uint32_t *link = &dedup->free_head;
    while (*link) {
        struct dedup_entry *entry = entry_at(dedup, *link - 1);
        if (chunk_idle(dedup, (size_t)((*link - 1) >> dedup->chunk_shift), last))
            *link = entry->next;
        else
            link = &entry->next;
    }
    for (size_t c = 1; c < last; c++)
        if (chunk_idle(dedup, c, last)) {
            chunk_unmap(dedup, c);
            dedup->holes++;
        }
}

/* Drop ids at and past `keep` from the free list, and unmap their chunks. id_lock held. */
static void ids_cut(struct dedup *dedup, uint64_t keep)
{
    uint32_t *link = &dedup->free_head;
    while (*link) {
        struct dedup_entry *entry = entry_at(dedup, *link - 1);
        if (*link - 1 >= keep)
            *link = entry->next;
        else
            link = &entry->next;
    }
    for (size_t c = (size_t)(keep >> dedup->chunk_shift); c < dedup->chunk_count; c++) {
        if (c < (size_t)((dedup->high_water + (1u << dedup->chunk_shift) - 1) >>
                         dedup->chunk_shift) &&
            !atomic_load_explicit(&dedup->chunks[c], memory_order_relaxed))
            dedup->holes--; /* a hole below the old high water mark, now past the new one */
        chunk_unmap(dedup, c);
    }
    dedup->high_water = keep;
}

void dedup_trim(struct dedup *dedup)
{
    if (!dedup)
        return;
    pthread_mutex_lock(&dedup->id_lock);
    if (atomic_load(&dedup->reserved)) {
        pthread_mutex_unlock(&dedup->id_lock);
        return;
    }
    uint64_t keep = dedup->high_water;
    while (keep > 0) {
        size_t c = (size_t)((keep - 1) >> dedup->chunk_shift);
        if (c == 0 || dedup->chunk_used[c])
            break;
        keep = (uint64_t)c << dedup->chunk_shift;
    }
    if (keep < dedup->high_water)
        ids_cut(dedup, keep);
    holes_cut(dedup);
    pthread_mutex_unlock(&dedup->id_lock);
    for (unsigned i = 0; i < STRIPE_COUNT; i++) {
        struct dedup_stripe *stripe = &dedup->stripes[i];
        pthread_mutex_lock(&stripe->lock);
        uint32_t mask = mask_for(stripe->entries);
        if (mask < stripe->bucket_mask && !atomic_load(&dedup->reserved))
            (void)stripe_resize(dedup, stripe, mask);
        pthread_mutex_unlock(&stripe->lock);
    }
}

uint64_t dedup_entry_size(void)
{
    return sizeof(struct dedup_entry);
}

uint64_t dedup_entry_cost(void)
{
    /* its entry, and its share of a bucket: 4 bytes for 1.5 to 3 entries */
    return sizeof(struct dedup_entry) + 2;
}

uint64_t dedup_meta_size(struct dedup *dedup)
{
    return dedup ? atomic_load_explicit(&dedup->mem_bytes, memory_order_relaxed) : 0;
}

uint64_t dedup_entries(struct dedup *dedup)
{
    return dedup ? atomic_load_explicit(&dedup->live_entries, memory_order_relaxed) : 0;
}

uint64_t dedup_dup_data_size(struct dedup *dedup)
{
    return dedup ? atomic_load_explicit(&dedup->dup_data_size, memory_order_relaxed) : 0;
}

uint64_t dedup_hash_collisions(struct dedup *dedup)
{
    return dedup ? atomic_load_explicit(&dedup->hash_collisions, memory_order_relaxed) : 0;
}

void dedup_reset_counters(struct dedup *dedup)
{
    if (dedup)
        atomic_store_explicit(&dedup->hash_collisions, 0, memory_order_relaxed);
}

#ifdef UZRAM_TEST_HOOKS
void dedup_force_collisions(struct dedup *dedup, bool on)
{
    atomic_store(&dedup->force_collisions, on);
}
#endif

/* ---- entries ---------------------------------------------------------------- */

/* Add `delta` (+1 or -1) to the references and count dup_data_size: every
 * reference past the first counts the object's size, including a writer's
 * while it compares. MOVING is held for the change, so that the size counted
 * is the one the object has while the count changes, even when
 * recompression swaps the object for a smaller one. A +1 is refused (0) when
 * the entry is dead or full. Returns the references before the change. */
static uint32_t entry_change_refs(struct dedup *dedup, struct dedup_entry *entry, int delta)
{
    unsigned spins = 0;
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    for (;;) {
        uint32_t refs = state_refs(state);
        if (delta > 0 && (refs == 0 || refs == REF_MAX))
            return 0;
        if (state_moving(state)) {
            lock_backoff(&spins);
            state = atomic_load_explicit(&entry->state, memory_order_relaxed);
            continue;
        }
        uint32_t next = (delta > 0 ? state + 1 : state - 1) | MOVING;
        if (atomic_compare_exchange_weak_explicit(&entry->state, &state, next, memory_order_acquire,
                                                  memory_order_relaxed))
            break;
    }
    uint32_t refs = state_refs(state);
    if (delta > 0)
        atomic_fetch_add_explicit(&dedup->dup_data_size, entry_size(entry), memory_order_relaxed);
    else if (refs > 1)
        atomic_fetch_sub_explicit(&dedup->dup_data_size, entry_size(entry), memory_order_relaxed);
    atomic_fetch_and_explicit(&entry->state, ~MOVING, memory_order_release);
    return refs;
}

/* Take a reference if the entry is alive. */
static bool entry_get_ref(struct dedup *dedup, struct dedup_entry *entry)
{
    return entry_change_refs(dedup, entry, +1) != 0;
}

static void entry_pin(struct dedup_entry *entry)
{
    unsigned spins = 0;
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    for (;;) {
        if (state_moving(state) || state_pins_full(state)) {
            lock_backoff(&spins);
            state = atomic_load_explicit(&entry->state, memory_order_relaxed);
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&entry->state, &state, state + PIN_ONE,
                                                  memory_order_acquire, memory_order_relaxed))
            return;
    }
}

static void entry_unpin(struct dedup_entry *entry)
{
    atomic_fetch_sub_explicit(&entry->state, PIN_ONE, memory_order_release);
}

/* Load the entry's page through the store, pinned so that compaction does
 * not move the object meanwhile. */
static int entry_load(struct dedup *dedup, struct dedup_entry *entry, void *page,
                      struct dedup_object *copy)
{
    struct dedup_object object;
    entry_pin(entry);
    entry_get_object(entry, &object);
    int rc = dedup->ops.load(dedup->ops.arg, &object, page);
    entry_unpin(entry);
    if (copy)
        *copy = object;
    return rc;
}

static uint32_t id_alloc(struct dedup *dedup)
{
    uint32_t id = UINT32_MAX;
    pthread_mutex_lock(&dedup->id_lock);
    if (!dedup->free_head && dedup->holes)
        (void)hole_fill(dedup);
    if (dedup->free_head) {
        id = dedup->free_head - 1;
        dedup->free_head = entry_at(dedup, id)->next;
    } else if (dedup->high_water < dedup->capacity &&
               chunk_map(dedup, (size_t)(dedup->high_water >> dedup->chunk_shift)) == 0) {
        id = (uint32_t)dedup->high_water++;
    }
    if (id != UINT32_MAX)
        dedup->chunk_used[id >> dedup->chunk_shift]++;
    pthread_mutex_unlock(&dedup->id_lock);
    return id;
}

static void id_free(struct dedup *dedup, uint32_t id)
{
    pthread_mutex_lock(&dedup->id_lock);
    entry_at(dedup, id)->next = dedup->free_head;
    dedup->free_head = id + 1;
    dedup->chunk_used[id >> dedup->chunk_shift]--;
    pthread_mutex_unlock(&dedup->id_lock);
}

/* ---- lookup and insert --------------------------------------------------------- */

/* From chain position `link` (id + 1) on, the first entry with `tag` on
 * which a reference could be taken; UINT32_MAX if none. Stripe locked. */
static uint32_t next_candidate(struct dedup *dedup, uint32_t link, uint32_t tag)
{
    for (; link; link = entry_at(dedup, link - 1)->next) {
        struct dedup_entry *entry = entry_at(dedup, link - 1);
        if (entry->hash_tag == tag && entry_get_ref(dedup, entry))
            return link - 1;
    }
    return UINT32_MAX;
}

static bool entry_equals(struct dedup *dedup, struct dedup_entry *entry, const void *page)
{
    return entry_load(dedup, entry, compare_buffer, NULL) == 0 &&
           memcmp(compare_buffer, page, UZRAM_PAGE_SIZE) == 0;
}

static uint64_t page_hash(struct dedup *dedup, const void *page)
{
#ifdef UZRAM_TEST_HOOKS
    if (atomic_load_explicit(&dedup->force_collisions, memory_order_relaxed))
        return 0;
#else
    (void)dedup;
#endif
    return XXH3_64bits(page, UZRAM_PAGE_SIZE);
}

/* Walk the candidates one at a time: holding a reference keeps an entry
 * linked, so the walk can go on from it after the stripe was dropped for
 * the comparison (a resize meanwhile keeps chains in order). *inserts_seen is
 * the stripe's insert count when the walk began: entries linked later were
 * not looked at. */
static uint32_t find_equal(struct dedup *dedup, const void *page, uint32_t tag,
                           uint64_t *inserts_seen)
{
    struct dedup_stripe *stripe = tag_stripe(dedup, tag);
    pthread_mutex_lock(&stripe->lock);
    *inserts_seen = stripe->inserts;
    uint32_t id = next_candidate(dedup, stripe->buckets[tag_bucket(stripe, tag)], tag);
    pthread_mutex_unlock(&stripe->lock);
    while (id != UINT32_MAX) {
        if (entry_equals(dedup, entry_at(dedup, id), page))
            return id;
        atomic_fetch_add_explicit(&dedup->hash_collisions, 1, memory_order_relaxed);
        pthread_mutex_lock(&stripe->lock);
        uint32_t next = next_candidate(dedup, entry_at(dedup, id)->next, tag);
        pthread_mutex_unlock(&stripe->lock);
        dedup_put(dedup, id);
        id = next;
    }
    return UINT32_MAX;
}

bool dedup_find(struct dedup *dedup, const void *page, struct dedup_lookup *lookup, uint32_t *id)
{
    uint64_t hash = page_hash(dedup, page);
    lookup->tag = (uint32_t)(hash >> 32);
    lookup->id = UINT32_MAX;
    *id = find_equal(dedup, page, lookup->tag, &lookup->inserts_seen);
    return *id != UINT32_MAX;
}

int dedup_reserve(struct dedup *dedup, struct dedup_lookup *lookup)
{
    lookup->id = FAULT_POINT(FAULT_ALLOC) ? UINT32_MAX : id_alloc(dedup);
    return lookup->id == UINT32_MAX ? -ENOMEM : 0;
}

void dedup_cancel(struct dedup *dedup, const struct dedup_lookup *lookup)
{
    id_free(dedup, lookup->id);
}

uint32_t dedup_insert(struct dedup *dedup, const void *page, const struct dedup_lookup *lookup,
                      const struct dedup_object *object)
{
    uint32_t id = lookup->id;
    struct dedup_entry *entry = entry_at(dedup, id);
    assert(object->handle >> DEDUP_HANDLE_BITS == 0 && object->size >= 1 &&
           object->size - 1 <= SIZE_MASK && object->codec >> DEDUP_CODEC_BITS == 0);
    entry_set_object(entry, object);
    entry->hash_tag = lookup->tag;
    atomic_store_explicit(&entry->state, 1, memory_order_release);
    atomic_fetch_add_explicit(&dedup->live_entries, 1, memory_order_relaxed);

    uint64_t inserts_seen = lookup->inserts_seen;
    struct dedup_stripe *stripe = tag_stripe(dedup, lookup->tag);
    for (;;) {
        pthread_mutex_lock(&stripe->lock);
        if (stripe->inserts == inserts_seen) {
            uint32_t *head = &stripe->buckets[tag_bucket(stripe, lookup->tag)];
            entry->next = *head;
            *head = id + 1;
            stripe->inserts++;
            /* Past MAX_LOAD a chain: twice the buckets (else, with no memory or under a
             * reserve, longer chains). */
            if (++stripe->entries > MAX_LOAD * ((uint64_t)stripe->bucket_mask + 1) &&
                stripe->bucket_mask < (UINT32_MAX >> STRIPE_BITS) &&
                !atomic_load_explicit(&dedup->reserved, memory_order_relaxed))
                (void)stripe_resize(dedup, stripe, stripe->bucket_mask * 2 + 1);
            pthread_mutex_unlock(&stripe->lock);
            return id;
        }
        pthread_mutex_unlock(&stripe->lock);
        /* Someone linked an entry into this stripe while we compressed:
         * perhaps the same page, written at the same moment elsewhere. Look
         * again (without the lock: comparing decompresses) before adding a
         * second copy; our unlinked entry goes the way of any last reference. */
        uint32_t other = find_equal(dedup, page, lookup->tag, &inserts_seen);
        if (other != UINT32_MAX) {
            dedup_put(dedup, id);
            return other;
        }
    }
}

/* Unlink entry `id`, whose references are gone (0 set by the caller), and give back its id.
 * Waits for a compaction that may still be moving its object. Returns the object. */
static void entry_unlink(struct dedup *dedup, uint32_t id, struct dedup_object *object)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    struct dedup_stripe *stripe = tag_stripe(dedup, entry->hash_tag);
    pthread_mutex_lock(&stripe->lock);
    uint32_t *link = &stripe->buckets[tag_bucket(stripe, entry->hash_tag)];
    while (*link && *link != id + 1)
        link = &entry_at(dedup, *link - 1)->next;
    if (*link) {
        *link = entry->next;
        stripe->entries--;
    }
    pthread_mutex_unlock(&stripe->lock);

    unsigned spins = 0;
    while (state_moving(atomic_load_explicit(&entry->state, memory_order_acquire)))
        lock_backoff(&spins);
    entry_get_object(entry, object);
}

bool dedup_sole(struct dedup *dedup, uint32_t id)
{
    uint32_t state = atomic_load_explicit(&entry_at(dedup, id)->state, memory_order_relaxed);
    return state_refs(state) == 1;
}

bool dedup_take_sole(struct dedup *dedup, uint32_t id,
                     bool (*accept)(void *arg, const struct dedup_object *object), void *arg)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    /* Exactly the caller's reference, no reader, no move: MOVING then keeps every other
     * user out (a writer's candidate reference, a pin, compaction, a replacement) while
     * `accept` looks at the object. */
    uint32_t state = 1;
    if (!atomic_compare_exchange_strong_explicit(&entry->state, &state, 1 | MOVING,
                                                 memory_order_acquire, memory_order_relaxed))
        return false;
    struct dedup_object object;
    entry_get_object(entry, &object);
    if (!accept(arg, &object)) {
        atomic_fetch_and_explicit(&entry->state, ~MOVING, memory_order_release);
        return false;
    }
    /* No reference left: no writer can take one (entry_get_ref refuses 0), so it goes
     * the way of a last dedup_put, its page now the caller's. */
    atomic_store_explicit(&entry->state, 0, memory_order_release);
    entry_unlink(dedup, id, &object);
    dedup->ops.free(dedup->ops.arg, &object);
    atomic_fetch_sub_explicit(&dedup->live_entries, 1, memory_order_relaxed);
    id_free(dedup, id);
    return true;
}

void dedup_put(struct dedup *dedup, uint32_t id)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    if (entry_change_refs(dedup, entry, -1) > 1)
        return;

    /* Last reference: nobody can take a new one (refs is 0), so unlink,
     * wait for a compaction that may be moving the object, and free. */
    struct dedup_object object;
    entry_unlink(dedup, id, &object);
    dedup->ops.free(dedup->ops.arg, &object);
    atomic_fetch_sub_explicit(&dedup->live_entries, 1, memory_order_relaxed);
    id_free(dedup, id);
}

int dedup_read(struct dedup *dedup, uint32_t id, void *page)
{
    return entry_load(dedup, entry_at(dedup, id), page, NULL);
}

int dedup_read_object(struct dedup *dedup, uint32_t id, void *page, struct dedup_object *object)
{
    return entry_load(dedup, entry_at(dedup, id), page, object);
}

bool dedup_get(struct dedup *dedup, uint32_t id)
{
    return entry_get_ref(dedup, entry_at(dedup, id));
}

bool dedup_replace(struct dedup *dedup, uint32_t id, const struct dedup_object *expected,
                   const struct dedup_object *object, struct dedup_object *old)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    assert(object->handle >> DEDUP_HANDLE_BITS == 0 && object->size >= 1 &&
           object->size - 1 <= SIZE_MASK && object->codec >> DEDUP_CODEC_BITS == 0);
    /* Like compaction: no reader decoding it, then MOVING keeps new readers
     * and reference changes out while the object changes. */
    unsigned spins = 0;
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    for (;;) {
        if (state_pinned_or_moving(state)) {
            lock_backoff(&spins);
            state = atomic_load_explicit(&entry->state, memory_order_relaxed);
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&entry->state, &state, state | MOVING,
                                                  memory_order_acquire, memory_order_relaxed))
            break;
    }
    entry_get_object(entry, old);
    /* Another recompression may have replaced it meanwhile; compaction
     * moving it changes only the handle. */
    bool same = old->size == expected->size && old->codec == expected->codec;
    if (same) {
        entry_set_object(entry, object);
        uint64_t others = state_refs(state) - 1;
        atomic_fetch_add_explicit(&dedup->dup_data_size, others * object->size,
                                  memory_order_relaxed);
        atomic_fetch_sub_explicit(&dedup->dup_data_size, others * old->size, memory_order_relaxed);
    }
    atomic_fetch_and_explicit(&entry->state, ~MOVING, memory_order_release);
    return same;
}

int dedup_with_object(struct dedup *dedup, uint32_t id,
                      int (*fn)(void *arg, const struct dedup_object *object), void *arg)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    struct dedup_object object;
    entry_pin(entry);
    entry_get_object(entry, &object);
    int rc = fn(arg, &object);
    entry_unpin(entry);
    return rc;
}

bool dedup_is_huge(struct dedup *dedup, uint32_t id)
{
    return entry_size(entry_at(dedup, id)) == UZRAM_PAGE_SIZE;
}

/* ---- compaction hooks ----------------------------------------------------------- */

bool dedup_try_lock_owner(struct dedup *dedup, uint32_t id, uint64_t handle)
{
    if (id >= dedup->capacity ||
        !atomic_load_explicit(&dedup->chunks[id >> dedup->chunk_shift], memory_order_acquire))
        return false;
    struct dedup_entry *entry = entry_at(dedup, id);
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    if (state_refs(state) == 0 || state_pinned_or_moving(state))
        return false;
    if (!atomic_compare_exchange_strong_explicit(&entry->state, &state, state | MOVING,
                                                 memory_order_acquire, memory_order_relaxed))
        return false;
    if (entry_handle(entry) == handle)
        return true;
    atomic_fetch_and_explicit(&entry->state, ~MOVING, memory_order_release);
    return false;
}

void dedup_relocate(struct dedup *dedup, uint32_t id, uint64_t new_handle)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    entry_set_handle(entry, new_handle);
    atomic_fetch_and_explicit(&entry->state, ~MOVING, memory_order_release);
}
