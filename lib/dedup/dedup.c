/* dedup.c - content index that lets identical pages share one stored object.
 * XXH3 hash, every same-hash candidate compared in full, 20-byte entries. */
#include "dedup/dedup.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "common/backoff.h"
#include "dedup/dedup_ids.h"
#include "common/fault.h"
#include "uzram.h"

/* Comparison needs its own page: the caller's page may be the store's
 * scratch page. */
static __thread unsigned char compare_buffer[UZRAM_PAGE_SIZE];

static size_t buckets_bytes(uint64_t mask)
{
    return (mask + 1) * sizeof(uint32_t) + MALLOC_OVERHEAD;
}

/* Give the stripe `mask` + 1 buckets, relinking its entries. A chain keeps its order (each
 * old chain is reversed, then its entries pushed onto their new chains), so that a writer
 * that dropped the lock while holding a reference on an entry goes on from it and still
 * meets, after it, every entry with its tag that it had not seen. Stripe locked. False (the
 * stripe unchanged, its chains longer) if there is no memory. */
static bool stripe_resize(struct dedup *dedup, struct dedup_stripe *stripe, uint32_t mask)
{
    if (!dedup_stripe_resize(dedup, stripe, mask))
        return false;
    dedup->saved->masks[stripe - dedup->stripes] = mask; /* a successor makes as many */
    return true;
}

bool dedup_stripe_resize(struct dedup *dedup, struct dedup_stripe *stripe, uint32_t mask)
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
    pthread_mutex_destroy(&dedup->move_lock);
    dedup_ids_unmap(dedup); /* a file's index stays in it as it is */
    free(dedup->chunks);
    free(dedup->chunk_used);
    free(dedup->chunk_free);
    free(dedup);
}

/* Ids below the capacity in chunks of 1 << *shift entries, *count of them (at most
 * CHUNKS_MAX). */
static uint64_t index_shape(uint64_t page_count, unsigned *shift, size_t *count)
{
    /* Live entries never exceed pages stored plus writers in flight. */
    uint64_t capacity = page_count + 4096;
    if (capacity > UINT32_MAX - 1)
        capacity = UINT32_MAX - 1;
    *shift = CHUNK_MIN_SHIFT;
    while ((capacity >> *shift) >= CHUNKS_MAX)
        (*shift)++;
    *count = (size_t)((capacity + (1u << *shift) - 1) >> *shift);
    return capacity;
}

uint64_t dedup_file_bytes(uint64_t page_count)
{
    unsigned shift;
    size_t count;
    index_shape(page_count, &shift, &count);
    return DEDUP_SAVED_BYTES + ((uint64_t)count * sizeof(struct dedup_entry) << shift);
}

/* The parts a new index is made of, but the entries past chunk 0: fresh, or (adopted) with
 * the bucket counts the saved part names made by dedup_adopt_begin. */
static int index_make(struct dedup *dedup)
{
    bool adopt = dedup->file.fd >= 0 && dedup->file.adopt;
    if (dedup->file.fd >= 0 && !adopt)
        /* what an index made earlier in the file left (its device adopted without dedup) */
        (void)fallocate(dedup->file.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        (off_t)dedup->file.offset,
                        (off_t)(DEDUP_SAVED_BYTES + dedup->chunk_count * chunk_bytes(dedup)));
    int rc =
        dedup->chunks && dedup->chunk_used && dedup->chunk_free ? dedup_saved_map(dedup) : -ENOMEM;
    if (rc == 0)
        rc = dedup_chunk_map(dedup, 0);
    for (unsigned i = 0; rc == 0 && i < STRIPE_COUNT; i++)
        if (adopt ? !dedup_stripe_resize(dedup, &dedup->stripes[i], MIN_BUCKETS - 1)
                  : !stripe_resize(dedup, &dedup->stripes[i], MIN_BUCKETS - 1))
            rc = -ENOMEM;
    return rc;
}

int dedup_create_in(uint64_t page_count, const struct dedup_object_ops *ops,
                    const struct dedup_file *file, struct dedup **out)
{
    struct dedup *dedup =
        FAULT_POINT(FAULT_ALLOC) ? NULL : aligned_alloc(_Alignof(struct dedup), sizeof *dedup);
    if (!dedup)
        return -ENOMEM;
    memset(dedup, 0, sizeof *dedup);
    for (unsigned i = 0; i < STRIPE_COUNT; i++)
        pthread_mutex_init(&dedup->stripes[i].lock, NULL);
    pthread_mutex_init(&dedup->id_lock, NULL);
    pthread_mutex_init(&dedup->move_lock, NULL);
    dedup->file = file ? *file : (struct dedup_file){.fd = -1};
    dedup->capacity = index_shape(page_count, &dedup->chunk_shift, &dedup->chunk_count);
    dedup->ops = *ops;
    dedup->chunks =
        FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(dedup->chunk_count, sizeof *dedup->chunks);
    dedup->chunk_used =
        FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(dedup->chunk_count, sizeof *dedup->chunk_used);
    dedup->chunk_free =
        FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(dedup->chunk_count, sizeof *dedup->chunk_free);
    atomic_init(&dedup->mem_bytes,
                sizeof *dedup +
                    dedup->chunk_count * (sizeof *dedup->chunks + sizeof *dedup->chunk_used +
                                          sizeof *dedup->chunk_free) +
                    3 * MALLOC_OVERHEAD);
    int rc = index_make(dedup);
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

/* Make the index as large as the disk can need and its pages present (MADV_POPULATE_WRITE,
 * Linux 5.14; an older kernel faults them in as used), then stop it growing or giving back.
 * Writers may be running: each part changes under its own lock, and pages are made present
 * without being written. */
void dedup_prefault(struct dedup *dedup)
{
    /* set under id_lock, which dedup_trim() reads it under: no trim undoes this */
    pthread_mutex_lock(&dedup->id_lock);
    atomic_store(&dedup->reserved, true);
    dedup_holes_fill(dedup); /* their ids back on the free lists */
    for (size_t c = 0; c < dedup->chunk_count; c++)
        if (dedup_chunk_map(dedup, c) == 0)
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

void dedup_trim(struct dedup *dedup)
{
    if (!dedup)
        return;
    pthread_mutex_lock(&dedup->id_lock);
    if (atomic_load(&dedup->reserved)) {
        pthread_mutex_unlock(&dedup->id_lock);
        return;
    }
    dedup_ids_trim(dedup);
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

#ifdef UZRAM_TEST_HOOKS
uint64_t dedup_entry_size(void)
{
    return sizeof(struct dedup_entry);
}
#endif

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

/* entry_change_refs() when MOVING stayed held past the deadline (the index in a state file,
 * backoff.h): nothing changed. */
#define REFS_TIMED_OUT UINT32_MAX

/* Add `delta` (+1 or -1) to the references and count dup_data_size: every
 * reference past the first counts the object's size, including a writer's
 * while it compares. MOVING is held for the change, so that the size counted
 * is the one the object has while the count changes, even when
 * recompression swaps the object for a smaller one. A +1 is refused (0) when
 * the entry is dead or full. Returns the references before the change, or
 * REFS_TIMED_OUT (counted). */
static uint32_t entry_change_refs(struct dedup *dedup, struct dedup_entry *entry, int delta)
{
    struct lock_wait wait = dedup_lock_wait(dedup);
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    for (;;) {
        uint32_t refs = state_refs(state);
        if (delta > 0 && (refs == 0 || refs == REF_MAX))
            return 0;
        if (state_moving(state)) {
            if (!lock_wait(&wait)) {
                dedup_lock_timeout(dedup);
                return REFS_TIMED_OUT;
            }
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

/* Take a reference if the entry is alive (and its state not held for good). */
static bool entry_get_ref(struct dedup *dedup, struct dedup_entry *entry)
{
    uint32_t refs = entry_change_refs(dedup, entry, +1);
    return refs != 0 && refs != REFS_TIMED_OUT;
}

/* False: MOVING stayed held past the deadline (counted), not pinned. */
static bool entry_pin(struct dedup *dedup, struct dedup_entry *entry)
{
    struct lock_wait wait = dedup_lock_wait(dedup);
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    for (;;) {
        if (state_moving(state) || state_pins_full(state)) {
            if (!lock_wait(&wait)) {
                dedup_lock_timeout(dedup);
                return false;
            }
            state = atomic_load_explicit(&entry->state, memory_order_relaxed);
            continue;
        }
        if (atomic_compare_exchange_weak_explicit(&entry->state, &state, state + PIN_ONE,
                                                  memory_order_acquire, memory_order_relaxed))
            return true;
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
    if (!entry_pin(dedup, entry))
        return -EIO;
    entry_get_object(entry, &object);
    int rc = dedup->ops.load(dedup->ops.arg, &object, page);
    entry_unpin(entry);
    if (copy)
        *copy = object;
    return rc;
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
    int rc = -ENOMEM;
    lookup->id =
        FAULT_POINT(FAULT_ALLOC) ? UINT32_MAX : dedup_id_alloc(dedup, dedup->chunk_count, &rc);
    return lookup->id == UINT32_MAX ? rc : 0;
}

void dedup_cancel(struct dedup *dedup, const struct dedup_lookup *lookup)
{
    dedup_id_free(dedup, lookup->id);
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

/* Unlink entry `id`, whose references are gone (0 set by the caller). Waits for a compaction
 * that may still be moving its object: returns the object to free, or false when MOVING
 * stayed held past the deadline (counted): the object and the id are then left as they are
 * (memory lost until the next adoption, not data). */
static bool entry_unlink(struct dedup *dedup, uint32_t id, struct dedup_object *object)
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

    struct lock_wait wait = dedup_lock_wait(dedup);
    while (state_moving(atomic_load_explicit(&entry->state, memory_order_acquire)))
        if (!lock_wait(&wait)) {
            dedup_lock_timeout(dedup);
            return false;
        }
    entry_get_object(entry, object);
    return true;
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
     * `accept` looks at the object, and until dedup_drop_taken. */
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
    return true;
}

void dedup_untake(struct dedup *dedup, uint32_t id)
{
    atomic_fetch_and_explicit(&entry_at(dedup, id)->state, ~MOVING, memory_order_release);
}

void dedup_drop_taken(struct dedup *dedup, uint32_t id)
{
    /* No reference left: no writer can take one (entry_get_ref refuses 0), so it goes
     * the way of a last dedup_put. */
    struct dedup_entry *entry = entry_at(dedup, id);
    atomic_store_explicit(&entry->state, 0, memory_order_release);
    struct dedup_object object;
    if (!entry_unlink(dedup, id, &object))
        return;
    dedup->ops.free(dedup->ops.arg, &object);
    atomic_fetch_sub_explicit(&dedup->live_entries, 1, memory_order_relaxed);
    dedup_id_free(dedup, id);
}

void dedup_put(struct dedup *dedup, uint32_t id)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    /* (REFS_TIMED_OUT: the reference stays, its object lost until the next adoption) */
    if (entry_change_refs(dedup, entry, -1) > 1)
        return;

    /* Last reference: nobody can take a new one (refs is 0), so unlink,
     * wait for a compaction that may be moving the object, and free. */
    struct dedup_object object;
    if (!entry_unlink(dedup, id, &object))
        return;
    dedup->ops.free(dedup->ops.arg, &object);
    atomic_fetch_sub_explicit(&dedup->live_entries, 1, memory_order_relaxed);
    dedup_id_free(dedup, id);
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
    struct lock_wait wait = dedup_lock_wait(dedup);
    uint32_t state = atomic_load_explicit(&entry->state, memory_order_relaxed);
    for (;;) {
        if (state_pinned_or_moving(state)) {
            if (!lock_wait(&wait)) {
                dedup_lock_timeout(dedup);
                return false; /* not replaced */
            }
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
    struct dedup_record *record = same ? dedup_record_begin(dedup, id) : NULL;
    same = record != NULL;
    if (same) {
        entry_set_object(entry, object);
        dedup_record_end(record);
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
    if (!entry_pin(dedup, entry))
        return -EIO;
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

bool dedup_relocate(struct dedup *dedup, uint32_t id, uint64_t new_handle)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    struct dedup_record *record = dedup_record_begin(dedup, id);
    if (record) {
        entry_set_handle(entry, new_handle);
        dedup_record_end(record);
    }
    atomic_fetch_and_explicit(&entry->state, ~MOVING, memory_order_release);
    return record != NULL;
}
