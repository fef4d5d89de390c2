/* dedup_adopt.c - the dedup index adopted from a state file left by a process that ended or was
 * killed: the entries are the file's; each object it had half changed put back (records),
 * references counted again from the page slots that name the entries (none trusted from the
 * file: nor pins, nor moves), the index move under way finished, and from what is named the
 * chains, free ids and counters made again. See dedup_ids.h for what the file keeps. */
#include <errno.h>

#include "dedup/dedup.h"
#include "dedup/dedup_ids.h"

static bool id_mapped(struct dedup *dedup, uint64_t id)
{
    return id < dedup->high_water &&
           atomic_load_explicit(&dedup->chunks[id >> dedup->chunk_shift], memory_order_relaxed);
}

/* Whether `id`, below the high water mark, is in a chunk mapped; else *id moves to the last id
 * of its chunk (a loop's next id is the next chunk's first). */
static bool chunk_mapped(struct dedup *dedup, uint64_t *id)
{
    if (atomic_load_explicit(&dedup->chunks[*id >> dedup->chunk_shift], memory_order_relaxed))
        return true;
    *id |= (1ull << dedup->chunk_shift) - 1;
    return false;
}

int dedup_adopt_begin(struct dedup *dedup)
{
    int rc = dedup_ids_adopt_map(dedup);
    if (rc < 0)
        return rc;
    struct dedup_saved *saved = dedup->saved;
    /* Damage first, before anything changes. */
    for (unsigned r = 0; r < DEDUP_RECORDS; r++) {
        struct dedup_record *record = &saved->records[r];
        uint32_t id = atomic_load_explicit(&record->id, memory_order_relaxed);
        if (id != 0 && (record->sum != sums_32((const char *)record + DEDUP_RECORD_SUMMED_FROM,
                                               DEDUP_RECORD_SUMMED_BYTES) ||
                        !id_mapped(dedup, id - 1)))
            return sums_damage(
                "dedup change record %u (bytes %llu to %llu): %s", r,
                (unsigned long long)(dedup->file.offset + offsetof(struct dedup_saved, records[r])),
                (unsigned long long)(dedup->file.offset +
                                     offsetof(struct dedup_saved, records[r + 1]) - 1),
                id_mapped(dedup, id - 1) ? "it does not match its sum"
                                         : "it names no entry of the index");
    }
    uint64_t move = atomic_load_explicit(&saved->move, memory_order_relaxed);
    if (move && (saved->move_sum != sums_64(&move, sizeof move) ||
                 !id_mapped(dedup, (uint32_t)move - 1) || !id_mapped(dedup, (move >> 32) - 1)))
        return sums_damage(
            "dedup move record (bytes %llu to %llu): %s",
            (unsigned long long)(dedup->file.offset + offsetof(struct dedup_saved, move)),
            (unsigned long long)(dedup->file.offset + offsetof(struct dedup_saved, move_sum) +
                                 sizeof saved->move_sum - 1),
            saved->move_sum != sums_64(&move, sizeof move) ? "it does not match its sum"
                                                           : "it names an entry not in the index");
    /* An object being changed: the old one back (freed only after its record was cleared). */
    for (unsigned r = 0; r < DEDUP_RECORDS; r++) {
        struct dedup_record *record = &saved->records[r];
        uint32_t id = atomic_load_explicit(&record->id, memory_order_relaxed);
        if (id != 0) {
            struct dedup_entry *entry = entry_at(dedup, id - 1);
            entry_set_handle(entry, record->object & ((1ull << 48) - 1));
            atomic_store_explicit(&entry->size_codec, (uint16_t)(record->object >> 48),
                                  memory_order_relaxed);
        }
        atomic_store_explicit(&record->id, 0, memory_order_relaxed);
        record->sum = 0;
        atomic_store_explicit(&record->lock, 0, memory_order_relaxed);
    }
    /* References, pins and moves of the process gone: counted again from the slots. */
    for (uint64_t id = 0; id < dedup->high_water; id++)
        if (chunk_mapped(dedup, &id))
            atomic_store_explicit(&entry_at(dedup, (uint32_t)id)->state, 0, memory_order_relaxed);
    return 0;
}

int dedup_adopt_ref(struct dedup *dedup, uint32_t *id, struct dedup_object *object)
{
    uint64_t move = atomic_load_explicit(&dedup->saved->move, memory_order_relaxed);
    if (move && *id == (uint32_t)move - 1)
        *id = (uint32_t)(move >> 32) - 1; /* the move finished */
    if (!id_mapped(dedup, *id))
        return -EINVAL;
    struct dedup_entry *entry = entry_at(dedup, *id);
    uint32_t refs = state_refs(atomic_load_explicit(&entry->state, memory_order_relaxed));
    if (refs == REF_MAX)
        return -EINVAL;
    atomic_store_explicit(&entry->state, refs + 1, memory_order_relaxed);
    if (refs) {
        atomic_fetch_add_explicit(&dedup->dup_data_size, entry_size(entry), memory_order_relaxed);
        return 0;
    }
    atomic_fetch_add_explicit(&dedup->live_entries, 1, memory_order_relaxed);
    entry_get_object(entry, object);
    return 1;
}

/* Each stripe with the bucket count it had (a fresh one's if the file names none that can be)
 * and its entries linked. */
static int link_entries(struct dedup *dedup)
{
    for (unsigned i = 0; i < STRIPE_COUNT; i++) {
        struct dedup_stripe *stripe = &dedup->stripes[i];
        uint32_t mask = dedup->saved->masks[i];
        if ((mask & (mask + 1)) != 0 || mask < MIN_BUCKETS - 1 ||
            mask > (UINT32_MAX >> STRIPE_BITS))
            mask = MIN_BUCKETS - 1;
        if (mask != stripe->bucket_mask && !dedup_stripe_resize(dedup, stripe, mask))
            return -ENOMEM;
        dedup->saved->masks[i] = mask;
    }
    for (uint64_t id = 0; id < dedup->high_water; id++) {
        if (!chunk_mapped(dedup, &id))
            continue;
        struct dedup_entry *entry = entry_at(dedup, (uint32_t)id);
        if (!state_refs(atomic_load_explicit(&entry->state, memory_order_relaxed)))
            continue;
        struct dedup_stripe *stripe = tag_stripe(dedup, entry->hash_tag);
        uint32_t *head = &stripe->buckets[tag_bucket(stripe, entry->hash_tag)];
        entry->next = *head;
        *head = (uint32_t)id + 1;
        stripe->entries++;
        stripe->inserts++;
    }
    return 0;
}

int dedup_adopt_finish(struct dedup *dedup, bool *moved, uint32_t *id, struct dedup_object *object)
{
    int rc = link_entries(dedup);
    if (rc < 0)
        return rc;
    dedup_ids_adopt_free(dedup);
    uint64_t move = atomic_load_explicit(&dedup->saved->move, memory_order_relaxed);
    *moved = false;
    if (move) {
        *id = (uint32_t)(move >> 32) - 1;
        struct dedup_entry *entry = entry_at(dedup, *id);
        *moved = state_refs(atomic_load_explicit(&entry->state, memory_order_relaxed)) != 0;
        entry_get_object(entry, object);
    }
    /* cleared last: until then a successor of this process finishes the move again */
    atomic_store_explicit(&dedup->saved->move, 0, memory_order_seq_cst);
    return 0;
}
