/* recompress_page.c - one page's recompression: a look at its slot without the lock passes over
 * most pages; then its object is copied under the lock, decoded and compressed again outside
 * it with the secondary algorithms in turn, and swapped in under the lock if the slot still
 * holds the same bytes. A dedup entry is recompressed once for all the pages that share it.
 * The passes, settings and thread are recompress.c's. */
#include "recompress/recompress_page.h"

#include <errno.h>
#include <string.h>

#include "dedup/dedup.h"
#include "pool/pool.h"
#include "store/slot.h"
#include "store/store.h"
#include "store/store_internal.h"

/* Recompression's own buffers: the old object's bytes, its page, and the new object. */
static __thread unsigned char old_copy[UZRAM_PAGE_SIZE];
static __thread unsigned char old_page[UZRAM_PAGE_SIZE];
static __thread unsigned char new_object[UZRAM_PAGE_SIZE];

/* The priority of the codec that made an object of `size` bytes: 0 (the
 * primary) for a raw page. */
static unsigned object_priority(struct uzram *dev, unsigned size, unsigned codec)
{
    return size == UZRAM_PAGE_SIZE ? 0 : codec_table_get(&dev->codecs, codec)->priority;
}

/* Whether an object made with `codec` (slot info `info`) is tried again at its own priority:
 * a retraining replaced its dictionary since, and the newer one was not tried on it yet, or
 * was, but the page's share of the older one has doubled since (plan->retry_kept). */
static bool dict_stale(const struct recompress_plan *plan, unsigned size, unsigned codec,
                       uint32_t info)
{
    return size != UZRAM_PAGE_SIZE && (plan->stale_dicts >> codec & 1u) &&
           (!(info & SLOT_DICT_KEPT) || (plan->retry_kept >> codec & 1u));
}

/* What an object on a replaced dictionary may grow by when it moves to the newer one: its
 * share of the older dictionary's memory, which goes once every object has moved (a page
 * kept on it keeps all of it). */
static uint64_t stale_allowance(const struct recompress_plan *plan, unsigned codec, bool stale)
{
    return stale ? plan->stale_share[codec] : 0;
}

/* The priority below which recompression does not go for such an object. */
static unsigned tried_from(struct uzram *dev, unsigned size, unsigned codec, bool stale)
{
    unsigned priority = object_priority(dev, size, codec);
    return stale && priority > 0 ? priority - 1 : priority;
}

bool recompress_plan_takes(const struct recompress_plan *plan, uint32_t info, uint32_t ac_time,
                           uint32_t now)
{
    enum slot_state state = slot_info_state(info);
    if (state != SLOT_COMPRESSED && state != SLOT_HUGE && state != SLOT_DEDUP)
        return false; /* empty, or same-filled: nothing to gain */
    if (info & SLOT_INCOMPRESSIBLE)
        return false;
    if ((plan->mode & RECOMPRESS_IDLE) && !(info & SLOT_IDLE))
        return false;
    if ((plan->mode & RECOMPRESS_HUGE) && state != SLOT_HUGE)
        return false;
    if (plan->min_age && (ac_time > now || now - ac_time < plan->min_age))
        return false;
    if (plan->threshold && state != SLOT_DEDUP && slot_info_size(info) < plan->threshold)
        return false;
    return true;
}

/* Compress `page` again with the plan's priorities above `current`, in
 * order, until one gives an object that takes less pool memory than
 * `old_size` plus `allowance` bytes (and is below the threshold). Returns its length (in
 * new_object, with a user on *codec), 0 when none did, or a negative
 * errno. *tried counts the algorithms tried. */
static int recompress_smaller(struct uzram *dev, const struct recompress_plan *plan,
                              const void *page, unsigned old_size, unsigned current,
                              uint64_t allowance, unsigned *codec, unsigned *tried,
                              uint64_t *growth)
{
    size_t capacity = old_size == UZRAM_PAGE_SIZE ? HUGE_THRESHOLD - 1 : old_size - 1;
    /* Off a replaced dictionary (an allowance): any size below huge, so that what moving it
     * would cost is known when it does not pay (*growth: the least of what they cost beyond the
     * old object; a page, when none fit). */
    if (allowance && old_size != UZRAM_PAGE_SIZE)
        capacity = HUGE_THRESHOLD - 1;
    *growth = UZRAM_PAGE_SIZE;
    if (plan->threshold && plan->threshold - 1 < capacity)
        capacity = plan->threshold - 1;
    double old_cost = pool_object_cost(old_size) + (double)allowance;
    for (unsigned priority = plan->first; priority <= plan->last; priority++) {
        if (priority <= current)
            continue;
        int length = store_compress(dev, priority, page, new_object, capacity, codec);
        if (length == -ENOENT)
            continue; /* no algorithm at this priority */
        ++*tried;
        if (length <= 0) {
            if (length < 0)
                return length;
            continue;
        }
        double cost = pool_object_cost((size_t)length);
        if (cost < old_cost)
            return length;
        double beyond = cost - pool_object_cost(old_size);
        if (beyond < (double)*growth)
            *growth = beyond > 0 ? (uint64_t)beyond : 0;
        codec_table_release(&dev->codecs, *codec);
    }
    return 0;
}

/* Mark a page whose every secondary algorithm failed to shrink it (SLOT_INCOMPRESSIBLE), or
 * whose older dictionary's object the newer one did not shrink (SLOT_DICT_KEPT), if the slot
 * still holds the form that was tried. */
static void mark_unshrunk(struct uzram *dev, struct slot *slot, const struct page_object *old,
                          bool stale, struct recompress_tally *tally)
{
    if (slot_lock(dev, slot) < 0)
        return; /* unmarked: tried again by a later pass */
    struct page_object now;
    slot_get(slot, &now);
    if (now.state == old->state && now.value == old->value && now.size == old->size &&
        now.codec == old->codec)
        slot_set_marks(dev, slot, stale ? SLOT_DICT_KEPT : SLOT_INCOMPRESSIBLE, 0);
    slot_unlock(slot);
    if (stale)
        tally->dict_kept++;
    else
        tally->incompressible++;
}

/* Swap the slot's object for `made` if the slot still holds the same bytes
 * that were recompressed: neither rewritten nor discarded meanwhile (a
 * handle alone could have been freed and reused, so the bytes decide; and
 * equal bytes with the same codec are the same page). The marks and ac_time
 * stay: the page was not accessed. Returns whether it swapped. */
static bool swap_recompressed(struct uzram *dev, struct slot *slot, const struct page_object *old,
                              const struct page_object *made)
{
    if (slot_lock(dev, slot) < 0)
        return false;
    struct page_object now;
    slot_get(slot, &now);
    bool same = now.state == old->state && now.size == old->size && now.codec == old->codec &&
                memcmp(pool_map(dev->pool, now.value), old_copy, now.size) == 0 &&
                slot_set_form(dev, slot, made) == 0;
    if (same && now.state == SLOT_HUGE)
        counter_sub(&dev->huge_pages, 1);
    slot_unlock(slot);
    if (same)
        store_free_object(dev, &now);
    return same;
}

/* The work on a dedup reference: recompress the entry's object once for
 * every page that shares it. The slot is locked on entry and unlocked here. */
static int recompress_dedup(struct uzram *dev, struct slot *slot, const struct page_object *old,
                            const struct recompress_plan *plan, struct recompress_tally *tally)
{
    uint32_t info = slot_info(slot);
    struct dedup *dedup = device_dedup(dev);
    uint32_t id = (uint32_t)old->value;
    /* A raw entry stays raw: the huge count of every page sharing it
     * follows from it. */
    bool take = !dedup_is_huge(dedup, id) && dedup_get(dedup, id);
    slot_unlock(slot);
    if (!take)
        return 0;
    /* An object on the backing store stays there as it is. */
    struct dedup_object expected;
    int rc = dedup_with_object(dedup, id, store_copy_dedup_object, &expected);
    if (rc < 0 || (expected.handle & OBJECT_BACKED)) {
        dedup_put(dedup, id);
        return rc;
    }
    rc = dedup_read_object(dedup, id, old_page, &expected);
    bool stale = dict_stale(plan, expected.size, expected.codec, info);
    unsigned current = tried_from(dev, expected.size, expected.codec, stale);
    if (rc < 0 || (plan->threshold && expected.size < plan->threshold) || current >= plan->last) {
        dedup_put(dedup, id);
        return rc;
    }
    unsigned codec = 0, tried = 0;
    uint64_t growth;
    int length =
        recompress_smaller(dev, plan, old_page, expected.size, current,
                           stale_allowance(plan, expected.codec, stale), &codec, &tried, &growth);
    if (length > 0) {
        struct page_object made;
        rc = store_put_object(dev, new_object, (unsigned)length, codec, OWNER_DEDUP_BIT | id, true,
                              &made);
        if (rc < 0) {
            codec_table_release(&dev->codecs, codec);
        } else {
            const struct dedup_object object = {made.value, made.size, made.codec};
            struct dedup_object replaced;
            if (dedup_replace(dedup, id, &expected, &object, &replaced)) {
                /* Written back meanwhile: the copy on the backing store goes. */
                const struct page_object form = dedup_object_form(&replaced);
                store_free_object(dev, &form);
                tally->recompressed++;
                tally->bytes_before += expected.size;
                tally->bytes_after += made.size;
            } else {
                store_free_object(dev, &made);
            }
        }
    } else if (length == 0 && tried > 0 && (plan->marks_incompressible || stale)) {
        mark_unshrunk(dev, slot, old, stale, tally);
        if (stale)
            tally->kept_growth[expected.codec] += growth;
    }
    dedup_put(dedup, id);
    tally->tried += tried > 0;
    return length < 0 ? length : rc;
}

int recompress_page(struct uzram *dev, uint64_t index, const struct recompress_plan *plan,
                    uint32_t now, struct recompress_tally *tally)
{
    if (state_slot_unwritten(dev, index))
        return 0;
    struct slot *slot = &dev->slots[index];
    uint32_t peek = atomic_load_explicit(&slot->info, memory_order_relaxed) & ~SLOT_LOCK;
    if (peek == 0 ||
        !recompress_plan_takes(plan, peek,
                               atomic_load_explicit(&slot->ac_time, memory_order_relaxed), now))
        return 0;
    int rc = slot_lock(dev, slot);
    if (rc < 0)
        return rc;
    struct page_object old;
    slot_get(slot, &old);
    if (!recompress_plan_takes(plan, slot_info(slot),
                               atomic_load_explicit(&slot->ac_time, memory_order_relaxed), now)) {
        slot_unlock(slot);
        return 0;
    }
    if (old.state == SLOT_DEDUP)
        return recompress_dedup(dev, slot, &old, plan, tally);
    bool stale = dict_stale(plan, old.size, old.codec, slot_info(slot));
    unsigned current = tried_from(dev, old.size, old.codec, stale);
    if (current >= plan->last) {
        slot_unlock(slot);
        return 0;
    }
    /* Work on a copy, without the lock: writes and reads of the page go on
     * meanwhile. The codec user keeps a dictionary alive for the decoding
     * even if the page is rewritten meanwhile. */
    memcpy(old_copy, pool_map(dev->pool, old.value), old.size);
    if (old.state == SLOT_COMPRESSED)
        codec_table_hold(&dev->codecs, old.codec);
    slot_unlock(slot);
    rc = store_decode(dev, old_copy, old.size, old.codec, old_page);
    uint64_t allowance = stale_allowance(plan, old.codec, stale);
    if (old.state == SLOT_COMPRESSED)
        codec_table_release(&dev->codecs, old.codec);
    if (rc < 0)
        return rc;

    unsigned codec = 0, tried = 0;
    uint64_t growth;
    int length = recompress_smaller(dev, plan, old_page, old.size, current, allowance, &codec,
                                    &tried, &growth);
    tally->tried += tried > 0;
    if (length < 0)
        return length;
    if (length == 0) {
        if (tried > 0 && (plan->marks_incompressible || stale))
            mark_unshrunk(dev, slot, &old, stale, tally);
        if (tried > 0 && stale)
            tally->kept_growth[old.codec] += growth;
        return 0;
    }
    struct page_object made;
    rc = store_put_object(dev, new_object, (unsigned)length, codec, index + 1, true, &made);
    if (rc < 0) {
        codec_table_release(&dev->codecs, codec);
        return rc;
    }
    if (!swap_recompressed(dev, slot, &old, &made)) {
        store_free_object(dev, &made);
        return 0;
    }
    tally->recompressed++;
    tally->bytes_before += old.size;
    tally->bytes_after += made.size;
    return 0;
}

int recompress_sample_page(struct uzram *dev, uint64_t index, void *page)
{
    struct slot *slot = &dev->slots[index];
    if (slot_empty_at(dev, index))
        return 0;
    if (slot_lock(dev, slot) < 0)
        return 0; /* not sampled */
    enum slot_state state = slot_info_state(slot_info(slot));
    int rc = 0;
    /* bundled pages too: with recompress_group most idle pages are, and a retraining that
     * left them out would learn from the newest pages only */
    if (state == SLOT_COMPRESSED || state == SLOT_BUNDLED ||
        (state == SLOT_DEDUP && !dedup_is_huge(device_dedup(dev), (uint32_t)slot->value)))
        rc = store_load_locked(dev, slot, page) < 0 ? 0 : 1;
    slot_unlock(slot);
    return rc;
}
