/* dedup.c - content index that lets identical pages share one stored object.
 * XXH3 hash, every same-hash candidate compared in full, 20-byte entries. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "dedup.h"
#include "fault.h"
#include "pool.h"

/*
 * Each unique stored object has one entry (20 bytes). Entries live in one
 * array reserved at creation (backed by memory only as far as it is used);
 * an entry's id is its index. Buckets hold id + 1 of the first entry of a
 * chain (0: empty); the chain is linked through `next` (also id + 1).
 *
 * `state` packs the reference count, reader pins and a moving bit:
 *   bits  0..19  references: one per page slot that shares the object, plus
 *                one per writer that is comparing it as a candidate
 *   bits 20..30  pins: readers decompressing the object right now
 *   bit  31      MOVING: compaction is copying the object elsewhere
 * Readers pin only while they hold a reference; compaction sets MOVING only
 * when there are references and no pins, so an object is never moved under
 * a reader and never freed while it moves.
 *
 * Locks: one stripe mutex covers the chains of the buckets that map to it
 * and is held only to walk or change a chain, never while compressing,
 * decompressing or comparing. id_lock covers the free-id list. Order: a
 * page slot lock, then a stripe, then id_lock, then a pool class lock.
 */
struct dedup_entry {
    uint32_t handle_low;  /* pool handle bits 0..31 */
    uint16_t handle_high; /* pool handle bits 32..47 */
    uint16_t size_algo;   /* bits 0..12 object size (4096: raw page), 13..15 algorithm */
    _Atomic uint32_t state;
    uint32_t next;
    uint32_t hash_tag; /* top 32 bits of the content hash; low bits pick the bucket */
};
_Static_assert(sizeof(struct dedup_entry) == 20, "dedup entries are 20 bytes");

#define REF_MASK 0xfffffu
#define REF_MAX REF_MASK
#define PIN_ONE (1u << 20)
#define PIN_MASK (0x7ffu << 20)
#define MOVING (1u << 31)

#define STRIPE_COUNT 256

struct dedup {
    struct dedup_entry *entries;
    uint64_t capacity;
    uint32_t *buckets;
    uint64_t bucket_mask;
    pthread_mutex_t stripes[STRIPE_COUNT];
    /* Under each stripe: how many entries were ever linked into its buckets,
     * so a writer can tell whether one arrived while it was compressing. */
    uint64_t stripe_inserts[STRIPE_COUNT];

    pthread_mutex_t id_lock;
    uint32_t free_head;  /* id + 1 of a free entry, linked through next */
    uint64_t high_water; /* ids below this have been handed out */

    _Atomic uint64_t live_entries;
    _Atomic bool force_collisions;
};

/* Comparison needs its own page: store.c's scratch page may hold the very
 * page being stored. */
static __thread unsigned char compare_buffer[UZRAM_PAGE_SIZE];

static size_t entries_bytes(uint64_t capacity)
{
    return capacity * sizeof(struct dedup_entry);
}

int dedup_create(uint64_t page_count, struct dedup **out)
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

void dedup_force_collisions(struct dedup *dedup, bool on)
{
    atomic_store(&dedup->force_collisions, on);
}

/* ---- entries ---------------------------------------------------------------- */

static struct dedup_entry *entry_at(struct dedup *dedup, uint32_t id)
{
    return &dedup->entries[id];
}

static void entry_object(const struct dedup_entry *entry, struct page_object *object)
{
    unsigned size = entry->size_algo & 0x1fffu;
    object->value = entry->handle_low | ((uint64_t)entry->handle_high << 32);
    object->size = size;
    object->algo = entry->size_algo >> 13;
    object->state = size == UZRAM_PAGE_SIZE ? SLOT_HUGE : SLOT_COMPRESSED;
}

static void entry_set_handle(struct dedup_entry *entry, uint64_t handle)
{
    entry->handle_low = (uint32_t)handle;
    entry->handle_high = (uint16_t)(handle >> 32);
}

/* Take a reference if the entry is alive. Every reference past the first
 * counts in dup_data_size, including a writer's while it compares, so that
 * dedup_put() can always subtract what it drops. */
static bool entry_get_ref(struct uzram *dev, struct dedup_entry *entry)
{
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    do {
        uint32_t refs = state & REF_MASK;
        if (refs == 0 || refs == REF_MAX)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&entry->state, &state, state + 1,
                                                    memory_order_acquire, memory_order_relaxed));
    counter_add(&dev->dup_data_size, entry->size_algo & 0x1fffu);
    return true;
}

static void entry_pin(struct dedup_entry *entry)
{
    unsigned spins = 0;
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    for (;;) {
        if ((state & MOVING) || (state & PIN_MASK) == PIN_MASK) {
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

/* ---- lookup and store ---------------------------------------------------------- */

/* From chain position `link` (id + 1) on, the first entry with `tag` on
 * which a reference could be taken; UINT32_MAX if none. Stripe locked. */
static uint32_t next_candidate(struct uzram *dev, uint32_t link, uint32_t tag)
{
    struct dedup *dedup = device_dedup(dev);
    for (; link; link = entry_at(dedup, link - 1)->next) {
        struct dedup_entry *entry = entry_at(dedup, link - 1);
        if (entry->hash_tag == tag && entry_get_ref(dev, entry))
            return link - 1;
    }
    return UINT32_MAX;
}

static bool entry_equals(struct uzram *dev, struct dedup_entry *entry, const void *page)
{
    struct page_object object;
    bool equal = false;
    entry_pin(entry);
    entry_object(entry, &object);
    if (object.state == SLOT_HUGE)
        equal = memcmp(pool_map(dev->pool, object.value), page, UZRAM_PAGE_SIZE) == 0;
    else if (store_load_object(dev, &object, compare_buffer) == 0)
        equal = memcmp(compare_buffer, page, UZRAM_PAGE_SIZE) == 0;
    entry_unpin(entry);
    return equal;
}

static uint64_t page_hash(struct dedup *dedup, const void *page)
{
    if (atomic_load_explicit(&dedup->force_collisions, memory_order_relaxed))
        return 0;
    return XXH3_64bits(page, UZRAM_PAGE_SIZE);
}

/* Walk the candidates one at a time: holding a reference keeps an entry
 * linked, so the walk can go on from it after the stripe was dropped for
 * the comparison. *inserts_seen is the stripe's insert count when the walk
 * began: entries linked later were not looked at. */
static uint32_t find_equal(struct uzram *dev, const void *page, uint64_t bucket, uint32_t tag,
                           uint64_t *inserts_seen)
{
    struct dedup *dedup = device_dedup(dev);
    pthread_mutex_t *stripe = bucket_stripe(dedup, bucket);
    pthread_mutex_lock(stripe);
    *inserts_seen = dedup->stripe_inserts[bucket % STRIPE_COUNT];
    uint32_t id = next_candidate(dev, dedup->buckets[bucket], tag);
    pthread_mutex_unlock(stripe);
    while (id != UINT32_MAX) {
        if (entry_equals(dev, entry_at(dedup, id), page))
            return id;
        counter_add(&dev->dedup_hash_collisions, 1);
        pthread_mutex_lock(stripe);
        uint32_t next = next_candidate(dev, entry_at(dedup, id)->next, tag);
        pthread_mutex_unlock(stripe);
        dedup_put(dev, id);
        id = next;
    }
    return UINT32_MAX;
}

int dedup_store(struct uzram *dev, const void *page, uint32_t *id_out, bool *huge)
{
    struct dedup *dedup = device_dedup(dev);
    uint64_t hash = page_hash(dedup, page);
    uint32_t tag = (uint32_t)(hash >> 32);
    uint64_t bucket = tag & dedup->bucket_mask;
    uint64_t inserts_seen;

    uint32_t id = find_equal(dev, page, bucket, tag, &inserts_seen);
    if (id != UINT32_MAX) {
        *id_out = id;
        *huge = dedup_is_huge(dev, id);
        return 0;
    }

    id = FAULT_POINT(FAULT_ALLOC) ? UINT32_MAX : id_alloc(dedup);
    if (id == UINT32_MAX)
        return -ENOMEM;
    struct page_object object;
    int rc = store_compress_page(dev, page, OWNER_DEDUP_BIT | id, &object);
    if (rc < 0) {
        id_free(dedup, id);
        return rc;
    }
    struct dedup_entry *entry = entry_at(dedup, id);
    entry_set_handle(entry, object.value);
    entry->size_algo = (uint16_t)(object.size | (object.algo << 13));
    entry->hash_tag = tag;
    atomic_store_explicit(&entry->state, 1, memory_order_release);
    atomic_fetch_add_explicit(&dedup->live_entries, 1, memory_order_relaxed);

    pthread_mutex_t *stripe = bucket_stripe(dedup, bucket);
    uint64_t *inserts = &dedup->stripe_inserts[bucket % STRIPE_COUNT];
    for (;;) {
        pthread_mutex_lock(stripe);
        if (*inserts == inserts_seen) {
            entry->next = dedup->buckets[bucket];
            dedup->buckets[bucket] = id + 1;
            (*inserts)++;
            pthread_mutex_unlock(stripe);
            break;
        }
        pthread_mutex_unlock(stripe);
        /* Someone linked an entry into this stripe while we compressed:
         * perhaps the same page, written at the same moment elsewhere. Look
         * again (without the lock: comparing decompresses) before adding a
         * second copy; our unlinked entry goes the way of any last reference. */
        uint32_t other = find_equal(dev, page, bucket, tag, &inserts_seen);
        if (other != UINT32_MAX) {
            dedup_put(dev, id);
            *id_out = other;
            *huge = dedup_is_huge(dev, other);
            return 0;
        }
    }
    *id_out = id;
    *huge = object.state == SLOT_HUGE;
    return 0;
}

void dedup_put(struct uzram *dev, uint32_t id)
{
    struct dedup *dedup = device_dedup(dev);
    struct dedup_entry *entry = entry_at(dedup, id);
    unsigned size = entry->size_algo & 0x1fffu;
    uint32_t before = atomic_fetch_sub_explicit(&entry->state, 1, memory_order_acq_rel);
    if ((before & REF_MASK) > 1) {
        counter_sub(&dev->dup_data_size, size);
        return;
    }

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
    while (atomic_load_explicit(&entry->state, memory_order_acquire) & MOVING)
        lock_backoff(&spins);
    struct page_object object;
    entry_object(entry, &object);
    store_free_object(dev, &object);
    atomic_fetch_sub_explicit(&dedup->live_entries, 1, memory_order_relaxed);
    id_free(dedup, id);
}

int dedup_read(struct uzram *dev, uint32_t id, void *page)
{
    struct dedup_entry *entry = entry_at(device_dedup(dev), id);
    struct page_object object;
    entry_pin(entry);
    entry_object(entry, &object);
    int rc = store_load_object(dev, &object, page);
    entry_unpin(entry);
    return rc;
}

bool dedup_is_huge(struct uzram *dev, uint32_t id)
{
    return (entry_at(device_dedup(dev), id)->size_algo & 0x1fffu) == UZRAM_PAGE_SIZE;
}

/* ---- compaction hooks ----------------------------------------------------------- */

bool dedup_try_lock_owner(struct uzram *dev, uint32_t id, uint64_t handle)
{
    struct dedup *dedup = device_dedup(dev);
    if (!dedup || id >= dedup->capacity)
        return false;
    struct dedup_entry *entry = entry_at(dedup, id);
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    if ((state & REF_MASK) == 0 || (state & (PIN_MASK | MOVING)))
        return false;
    if (!atomic_compare_exchange_strong_explicit(&entry->state, &state, state | MOVING,
                                                 memory_order_acquire, memory_order_relaxed))
        return false;
    struct page_object object;
    entry_object(entry, &object);
    if (object.value == handle)
        return true;
    atomic_fetch_and_explicit(&entry->state, ~MOVING, memory_order_release);
    return false;
}

void dedup_relocate(struct uzram *dev, uint32_t id, uint64_t new_handle)
{
    struct dedup_entry *entry = entry_at(device_dedup(dev), id);
    entry_set_handle(entry, new_handle);
    atomic_fetch_and_explicit(&entry->state, ~MOVING, memory_order_release);
}
