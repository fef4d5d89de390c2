/* dedup_move.c - index compaction, the index's half: move a live entry to a free id in a lower
 * chunk, so that the chunks its entries leave can be given back (dedup_trim). The store's
 * half (compact_index.c) finds the page slots that name an entry and holds them locked. */
#include <errno.h>

#include "dedup/dedup.h"
#include "dedup/dedup_ids.h"

uint32_t dedup_compact_from(struct dedup *dedup)
{
    uint32_t from = UINT32_MAX;
    if (!dedup)
        return from;
    pthread_mutex_lock(&dedup->id_lock);
    if (!atomic_load(&dedup->reserved)) {
        /* the chunks that hold every id handed out, and one more of room */
        uint64_t used = 0;
        for (size_t c = 0; c < dedup->chunk_count; c++)
            used += dedup->chunk_used[c];
        size_t keep = (size_t)(used >> dedup->chunk_shift) + 1;
        for (size_t c = keep; c < dedup->chunk_count; c++)
            if (dedup->chunk_used[c]) { /* a chunk past them still in use */
                from = (uint32_t)((uint64_t)keep << dedup->chunk_shift);
                break;
            }
    }
    pthread_mutex_unlock(&dedup->id_lock);
    return from;
}

/* Put `to` in `from`'s place in its chain. Stripe locked. */
static void chain_swap(struct dedup *dedup, struct dedup_stripe *stripe, uint32_t from, uint32_t to)
{
    struct dedup_entry *entry = entry_at(dedup, from);
    uint32_t *link = &stripe->buckets[tag_bucket(stripe, entry->hash_tag)];
    while (*link && *link != from + 1)
        link = &entry_at(dedup, *link - 1)->next;
    if (*link) /* linked (an entry whose insert found an equal one never is) */
        *link = to + 1;
}

int dedup_move(struct dedup *dedup, uint32_t id, uint32_t refs, uint32_t *moved)
{
    struct dedup_entry *entry = entry_at(dedup, id);
    int rc;
    uint32_t to = dedup_id_alloc(dedup, id >> dedup->chunk_shift, &rc);
    if (to == UINT32_MAX)
        return -ENOSPC;
    pthread_mutex_lock(&dedup->move_lock); /* released by dedup_move_done() */
    struct dedup_stripe *stripe = tag_stripe(dedup, entry->hash_tag);
    pthread_mutex_lock(&stripe->lock);
    /* Exactly the callers' references, no reader, no move: then nobody else holds the id
     * (every holder holds a reference), and MOVING keeps compaction of the pool, a
     * replacement and a writer's candidate reference off it (they wait, or try later). */
    uint32_t state = refs;
    if (refs == 0 ||
        !atomic_compare_exchange_strong_explicit(&entry->state, &state, refs | MOVING,
                                                 memory_order_acquire, memory_order_relaxed)) {
        pthread_mutex_unlock(&stripe->lock);
        pthread_mutex_unlock(&dedup->move_lock);
        dedup_id_free(dedup, to);
        return -EBUSY;
    }
    struct dedup_entry *target = entry_at(dedup, to);
    struct dedup_object object;
    entry_get_object(entry, &object);
    entry_set_object(target, &object);
    target->hash_tag = entry->hash_tag;
    target->next = entry->next;
    atomic_store_explicit(&target->state, refs | MOVING, memory_order_relaxed);
    /* The new entry whole before the record that lets a successor point the slots at it
     * (dedup_ids.h); the record before any slot changes (the caller's, after this returns). */
    uint64_t move = (id + 1) | (uint64_t)(to + 1) << 32;
    dedup->saved->move_sum = sums_64(&move, sizeof move);
    atomic_store_explicit(&dedup->saved->move, move, memory_order_seq_cst);
    chain_swap(dedup, stripe, id, to);
    pthread_mutex_unlock(&stripe->lock);
    /* The pool names the object's owner for its compaction: `to` from now on. It asks owners
     * under the object's class lock, which this takes: no compaction is still looking at
     * `id` once it returns. */
    if (dedup->ops.rehome)
        dedup->ops.rehome(dedup->ops.arg, &object, to);
    atomic_store_explicit(&target->state, refs, memory_order_release);
    atomic_store_explicit(&entry->state, 0, memory_order_release);
    *moved = to;
    return 0;
}

void dedup_move_done(struct dedup *dedup, uint32_t id)
{
    /* the record cleared before `id` can be handed out again: else a successor could point a
     * slot naming a new entry there at the moved one */
    atomic_store_explicit(&dedup->saved->move, 0, memory_order_seq_cst);
    dedup->saved->move_sum = 0;
    pthread_mutex_unlock(&dedup->move_lock);
    dedup_id_free(dedup, id);
}
