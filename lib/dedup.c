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
 * Each unique stored object has one entry (20 bytes). Entries live in one
 * array reserved at creation (backed by memory only as far as it is used);
 * an entry's id is its index. Buckets hold id + 1 of the first entry of a
 * chain (0: empty); the chain is linked through `next` (also id + 1).
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
 * Locks: one stripe mutex covers the chains of the buckets that map to it
 * and is held only to walk or change a chain, never while compressing,
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

#define STRIPE_COUNT 256

struct dedup {
    struct dedup_entry *entries;
    uint64_t capacity;
    uint32_t *buckets;
    uint64_t bucket_mask;
    struct dedup_object_ops ops;
    pthread_mutex_t stripes[STRIPE_COUNT];
    /* Under each stripe: how many entries were ever linked into its buckets,
     * so a writer can tell whether one arrived while it was compressing. */
    uint64_t stripe_inserts[STRIPE_COUNT];

    pthread_mutex_t id_lock;
    uint32_t free_head;  /* id + 1 of a free entry, linked through next */
    uint64_t high_water; /* ids below this have been handed out */

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

static size_t entries_bytes(uint64_t capacity)
{
    return capacity * sizeof(struct dedup_entry);
}

int dedup_create(uint64_t page_count, const struct dedup_object_ops *ops, struct dedup **out)
{
    struct dedup *dedup = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *dedup);
    if (!dedup)
        return -ENOMEM;
    /* Live entries never exceed pages stored plus writers in flight. */
    uint64_t capacity = page_count + 4096;
    if (capacity > UINT32_MAX - 1)
        capacity = UINT32_MAX - 1;
    uint64_t bucket_count = 1024;
    while (bucket_count < page_count / 4)
        bucket_count *= 2;
    dedup->capacity = capacity;
    dedup->bucket_mask = bucket_count - 1;
    dedup->ops = *ops;
    dedup->entries = FAULT_POINT(FAULT_ALLOC)
                         ? MAP_FAILED
                         : mmap(NULL, entries_bytes(capacity), PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (dedup->entries == MAP_FAILED)
        goto fail_entries;
    dedup->buckets = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(bucket_count, sizeof *dedup->buckets);
    if (!dedup->buckets)
        goto fail_buckets;
    for (int i = 0; i < STRIPE_COUNT; i++)
        pthread_mutex_init(&dedup->stripes[i], NULL);
    pthread_mutex_init(&dedup->id_lock, NULL);
    *out = dedup;
    return 0;

fail_buckets:
    munmap(dedup->entries, entries_bytes(capacity));
fail_entries:
    free(dedup);
    return -ENOMEM;
}

void dedup_destroy(struct dedup *dedup)
{
    if (!dedup)
        return;
    for (int i = 0; i < STRIPE_COUNT; i++)
        pthread_mutex_destroy(&dedup->stripes[i]);
    pthread_mutex_destroy(&dedup->id_lock);
    free(dedup->buckets);
    munmap(dedup->entries, entries_bytes(dedup->capacity));
    free(dedup);
}

/* Make the index's pages present (MADV_POPULATE_WRITE, Linux 5.14; an older kernel keeps
 * faulting them in as used). Entries and buckets are zero until written, and writers may be
 * running: the pages are made present without being written. */
void dedup_prefault(struct dedup *dedup)
{
    const uintptr_t page = 4096;
    (void)madvise(dedup->entries, entries_bytes(dedup->capacity), 23 /* MADV_POPULATE_WRITE */);
    uintptr_t start = ((uintptr_t)dedup->buckets + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)(dedup->buckets + dedup->bucket_mask + 1)) & ~(page - 1);
    if (end > start)
        (void)madvise((void *)start, end - start, 23 /* MADV_POPULATE_WRITE */);
}

uint64_t dedup_entry_size(void)
{
    return sizeof(struct dedup_entry);
}

uint64_t dedup_meta_size(struct dedup *dedup)
{
    if (!dedup)
        return 0;
    return sizeof *dedup + (dedup->bucket_mask + 1) * sizeof *dedup->buckets +
           atomic_load_explicit(&dedup->live_entries, memory_order_relaxed) *
               sizeof(struct dedup_entry);
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

static struct dedup_entry *entry_at(struct dedup *dedup, uint32_t id)
{
    return &dedup->entries[id];
}

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

static pthread_mutex_t *bucket_stripe(struct dedup *dedup, uint64_t bucket)
{
    return &dedup->stripes[bucket % STRIPE_COUNT];
}

static uint32_t id_alloc(struct dedup *dedup)
{
    uint32_t id = UINT32_MAX;
    pthread_mutex_lock(&dedup->id_lock);
    if (dedup->free_head) {
        id = dedup->free_head - 1;
        dedup->free_head = entry_at(dedup, id)->next;
    } else if (dedup->high_water < dedup->capacity) {
        id = (uint32_t)dedup->high_water++;
    }
    pthread_mutex_unlock(&dedup->id_lock);
    return id;
}

static void id_free(struct dedup *dedup, uint32_t id)
{
    pthread_mutex_lock(&dedup->id_lock);
    entry_at(dedup, id)->next = dedup->free_head;
    dedup->free_head = id + 1;
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
 * the comparison. *inserts_seen is the stripe's insert count when the walk
 * began: entries linked later were not looked at. */
static uint32_t find_equal(struct dedup *dedup, const void *page, uint64_t bucket, uint32_t tag,
                           uint64_t *inserts_seen)
{
    pthread_mutex_t *stripe = bucket_stripe(dedup, bucket);
    pthread_mutex_lock(stripe);
    *inserts_seen = dedup->stripe_inserts[bucket % STRIPE_COUNT];
    uint32_t id = next_candidate(dedup, dedup->buckets[bucket], tag);
    pthread_mutex_unlock(stripe);
    while (id != UINT32_MAX) {
        if (entry_equals(dedup, entry_at(dedup, id), page))
            return id;
        atomic_fetch_add_explicit(&dedup->hash_collisions, 1, memory_order_relaxed);
        pthread_mutex_lock(stripe);
        uint32_t next = next_candidate(dedup, entry_at(dedup, id)->next, tag);
        pthread_mutex_unlock(stripe);
        dedup_put(dedup, id);
        id = next;
    }
    return UINT32_MAX;
}

bool dedup_find(struct dedup *dedup, const void *page, struct dedup_lookup *lookup, uint32_t *id)
{
    uint64_t hash = page_hash(dedup, page);
    lookup->tag = (uint32_t)(hash >> 32);
    lookup->bucket = lookup->tag & dedup->bucket_mask;
    lookup->id = UINT32_MAX;
    *id = find_equal(dedup, page, lookup->bucket, lookup->tag, &lookup->inserts_seen);
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

    uint64_t bucket = lookup->bucket;
    uint64_t inserts_seen = lookup->inserts_seen;
    pthread_mutex_t *stripe = bucket_stripe(dedup, bucket);
    uint64_t *inserts = &dedup->stripe_inserts[bucket % STRIPE_COUNT];
    for (;;) {
        pthread_mutex_lock(stripe);
        if (*inserts == inserts_seen) {
            entry->next = dedup->buckets[bucket];
            dedup->buckets[bucket] = id + 1;
            (*inserts)++;
            pthread_mutex_unlock(stripe);
            return id;
        }
        pthread_mutex_unlock(stripe);
        /* Someone linked an entry into this stripe while we compressed:
         * perhaps the same page, written at the same moment elsewhere. Look
         * again (without the lock: comparing decompresses) before adding a
         * second copy; our unlinked entry goes the way of any last reference. */
        uint32_t other = find_equal(dedup, page, bucket, lookup->tag, &inserts_seen);
        if (other != UINT32_MAX) {
            dedup_put(dedup, id);
            return other;
        }
    }
}

void dedup_put(struct dedup *dedup, uint32_t id)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    if (entry_change_refs(dedup, entry, -1) > 1)
        return;

    /* Last reference: nobody can take a new one (refs is 0), so unlink,
     * wait for a compaction that may be moving the object, and free. */
    uint64_t bucket = entry->hash_tag & dedup->bucket_mask;
    pthread_mutex_t *stripe = bucket_stripe(dedup, bucket);
    pthread_mutex_lock(stripe);
    uint32_t *link = &dedup->buckets[bucket];
    while (*link && *link != id + 1)
        link = &entry_at(dedup, *link - 1)->next;
    if (*link)
        *link = entry->next;
    pthread_mutex_unlock(stripe);

    unsigned spins = 0;
    while (state_moving(atomic_load_explicit(&entry->state, memory_order_acquire)))
        lock_backoff(&spins);
    struct dedup_object object;
    entry_get_object(entry, &object);
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
    if (id >= dedup->capacity)
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
