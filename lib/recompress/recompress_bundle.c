/* recompress_bundle.c - a recompression pass's work on bundles (recompress_bundle.h): packing
 * a window of idle neighbours into one bundle, and splitting a bundle more than half dead.
 * The bundles themselves are bundle.c's; one page's recompression is recompress_page.c's. */
#include "recompress/recompress_bundle.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bundle/bundle.h"
#include "codec/comp.h"
#include "dedup/dedup.h"
#include "common/fault.h"
#include "pool/pool.h"
#include "store/slot.h"
#include "store/store_internal.h"

struct bundle_work {
    unsigned char copies[BUNDLE_MAX_PAGES][UZRAM_PAGE_SIZE]; /* the members' objects */
    unsigned char pages[BUNDLE_MAX_PAGES * UZRAM_PAGE_SIZE]; /* their pages, in order */
    unsigned char frame[BUNDLE_MAX_PAGES * UZRAM_PAGE_SIZE]; /* the bundle's object */
    struct page_object old[BUNDLE_MAX_PAGES];                /* the members' forms */
    uint8_t offsets[BUNDLE_MAX_PAGES];
};

struct bundle_work *bundle_work_new(void)
{
    return FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(sizeof(struct bundle_work));
}

void bundle_work_free(struct bundle_work *work)
{
    free(work);
}

/* Whether a page may join a bundle: stored compressed on its own, or through a dedup entry
 * (which gather() takes only if no other page shares it), and taken by the plan. */
static bool bundle_takes(const struct recompress_plan *plan, uint32_t info, uint32_t ac_time,
                         uint32_t now)
{
    enum slot_state state = slot_info_state(info);
    return (state == SLOT_COMPRESSED || state == SLOT_DEDUP) &&
           recompress_plan_takes(plan, info, ac_time, now);
}

static bool slot_takes(const struct recompress_plan *plan, struct slot *slot, uint32_t info,
                       uint32_t now)
{
    return bundle_takes(plan, info, atomic_load_explicit(&slot->ac_time, memory_order_relaxed),
                        now);
}

/* A dedup entry's object as gather() copied it, or as publish() compares it. */
struct entry_copy {
    struct uzram *dev;
    unsigned char *bytes;
    struct page_object *form; /* SLOT_DEDUP, the entry's id, its object's size and codec */
};

/* (dedup_with_object) Copy an entry's object if it is compressed in the pool. */
static int copy_entry_object(void *arg, const struct dedup_object *object)
{
    struct entry_copy *copy = arg;
    if ((object->handle & OBJECT_BACKED) || object->size >= UZRAM_PAGE_SIZE)
        return -1; /* written back, or raw: never bundled */
    copy->form->size = object->size;
    copy->form->codec = object->codec;
    memcpy(copy->bytes, pool_map(copy->dev->pool, object->handle), object->size);
    return 0;
}

/* (dedup_take_sole) The entry still holds the bytes gather() copied. */
static bool entry_object_same(void *arg, const struct dedup_object *object)
{
    const struct entry_copy *copy = arg;
    return !(object->handle & OBJECT_BACKED) && object->size == copy->form->size &&
           object->codec == copy->form->codec &&
           memcmp(pool_map(copy->dev->pool, object->handle), copy->bytes, object->size) == 0;
}

/* Copy the object of a locked slot that may join into `bytes`, its form into *old. A dedup
 * reference may join only if it is its entry's one reference (a shared page is never
 * bundled). False: it does not join. */
static bool copy_member(struct uzram *dev, struct slot *slot, struct page_object *old,
                        unsigned char *bytes)
{
    slot_get(slot, old);
    if (old->state != SLOT_DEDUP) {
        memcpy(bytes, pool_map(dev->pool, old->value), old->size);
        return true;
    }
    struct dedup *dedup = device_dedup(dev);
    struct entry_copy copy = {dev, bytes, old};
    return dedup_sole(dedup, (uint32_t)old->value) &&
           dedup_with_object(dedup, (uint32_t)old->value, copy_entry_object, &copy) == 0;
}

/* Copy the objects of the window's pages that may join (each under its slot lock), and
 * decode them into work->pages. Returns how many, or a negative errno. */
static int gather(struct uzram *dev, uint64_t first, unsigned span,
                  const struct recompress_plan *plan, uint32_t now, struct bundle_work *work)
{
    unsigned count = 0;
    int rc = 0;
    for (unsigned offset = 0; offset < span; offset++) {
        struct slot *slot = &dev->slots[first + offset];
        if (slot_seems_empty(slot))
            continue;
        rc = slot_lock(dev, slot);
        if (rc < 0)
            break;
        if (slot_takes(plan, slot, slot_info(slot), now) &&
            copy_member(dev, slot, &work->old[count], work->copies[count])) {
            /* keeps the dictionary alive for the decoding, whatever the page does meanwhile */
            codec_table_hold(&dev->codecs, work->old[count].codec);
            work->offsets[count++] = (uint8_t)offset;
        }
        slot_unlock(slot);
    }
    for (unsigned k = 0; k < count; k++) {
        const struct page_object *old = &work->old[k];
        if (rc == 0)
            rc = store_decode(dev, work->copies[k], old->size, old->codec,
                              work->pages + (size_t)k * UZRAM_PAGE_SIZE);
        codec_table_release(&dev->codecs, old->codec);
    }
    return rc < 0 ? rc : (int)count;
}

/* The codec a bundle is made with: the plan's last priority whose algorithm is zstd (the
 * strongest setting, as the last one tried page by page), with a user taken; -ENOENT: none. */
static int bundle_codec_acquire(struct uzram *dev, const struct recompress_plan *plan)
{
    for (unsigned priority = plan->last; priority >= plan->first && priority > 0; priority--) {
        int id = codec_table_acquire(&dev->codecs, priority);
        if (id < 0)
            continue;
        if (codec_table_get(&dev->codecs, (unsigned)id)->algorithm == COMP_ZSTD)
            return id;
        codec_table_release(&dev->codecs, (unsigned)id);
    }
    return -ENOENT;
}

#ifdef UZRAM_TEST_HOOKS
static _Atomic long kill_at = -1;

void recompress_bundle_test_kill_at(long points)
{
    atomic_store(&kill_at, points);
}

/* A point of recompress_bundle_test_kill_at (only a dedup reference's pass through it counts). */
static void test_kill_point(bool dedup)
{
    long left = atomic_load(&kill_at);
    if (dedup && left > 0 && atomic_fetch_sub(&kill_at, 1) == 1)
        raise(SIGKILL);
}
#else
static void test_kill_point(bool dedup)
{
    (void)dedup;
}
#endif

/* Whether a locked slot still holds the bytes gather() copied for member k; a dedup
 * reference's entry is then taken (dedup_take_sole, *taken set: the caller drops it once the
 * slot names the bundle), if it is still the entry's only reference. */
static bool still_same(struct uzram *dev, const struct page_object *now,
                       const struct page_object *old, unsigned char *copied, bool *taken)
{
    *taken = false;
    if (old->state == SLOT_DEDUP) {
        struct entry_copy copy = {dev, copied, (struct page_object *)old};
        *taken = now->state == SLOT_DEDUP && now->value == old->value &&
                 dedup_take_sole(device_dedup(dev), (uint32_t)old->value, entry_object_same, &copy);
        return *taken;
    }
    return now->state == old->state && now->size == old->size && now->codec == old->codec &&
           memcmp(pool_map(dev->pool, now->value), copied, now->size) == 0;
}

/* Swap the bundle into each member's slot that still holds the bytes that were packed (as
 * recompress_page.c's swap: a handle alone could have been freed and reused); what the
 * objects of those that joined took in *single_bytes. */
static unsigned publish(struct uzram *dev, uint64_t first, struct bundle *bundle, unsigned count,
                        struct bundle_work *work, unsigned *single_bytes)
{
    unsigned joined = 0;
    *single_bytes = 0;
    for (unsigned k = 0; k < count; k++) {
        struct slot *slot = &dev->slots[first + work->offsets[k]];
        const struct page_object *old = &work->old[k];
        if (slot_lock(dev, slot) < 0)
            continue; /* a word of the state file held for good: it stays as it is */
        struct page_object now;
        slot_get(slot, &now);
        bool taken;
        bool same = still_same(dev, &now, old, work->copies[k], &taken);
        if (same) {
            struct page_object form;
            bundle_member_form(bundle, k, &form);
            test_kill_point(taken);
            same = slot_set_form(dev, slot, &form) == 0;
            if (!same && taken)
                dedup_untake(device_dedup(dev), (uint32_t)old->value);
        }
        if (same) {
            bundle_join(dev, bundle, k);
            *single_bytes += old->size;
            test_kill_point(taken);
            /* the entry's object freed only now that no slot names it (issue 29: a kill at
             * any instant leaves a state adoption takes, every page whole) */
            if (taken)
                dedup_drop_taken(device_dedup(dev), (uint32_t)old->value);
        }
        slot_unlock(slot);
        if (same && !taken)
            store_free_object(dev, &now);
        joined += same;
    }
    return joined;
}

int recompress_bundle_window(struct uzram *dev, uint64_t first, const struct recompress_plan *plan,
                             uint32_t now, struct recompress_tally *tally)
{
    struct bundle_work *work = plan->work;
    if (plan->group < 2 || !work || plan->threshold || (plan->mode & RECOMPRESS_HUGE))
        return 0;
    unsigned span = plan->group;
    if (span > dev->page_count - first)
        span = (unsigned)(dev->page_count - first);
    unsigned candidates = 0; /* a look without the locks passes over most windows */
    for (unsigned offset = 0; offset < span; offset++) {
        struct slot *slot = &dev->slots[first + offset];
        uint32_t peek = atomic_load_explicit(&slot->info, memory_order_relaxed) & ~SLOT_LOCK;
        candidates += peek != 0 && slot_takes(plan, slot, peek, now);
    }
    if (candidates < 2)
        return 0;
    int count = gather(dev, first, span, plan, now, work);
    if (count < 2)
        return count < 0 ? count : 0;
    int codec = bundle_codec_acquire(dev, plan);
    if (codec < 0)
        return 0;
    unsigned single = 0;
    double single_cost = 0;
    for (int k = 0; k < count; k++) {
        single += work->old[k].size;
        single_cost += pool_object_cost(work->old[k].size);
    }
    const struct codec_config *config = codec_table_get(&dev->codecs, (unsigned)codec);
    int length = comp_compress_span(config->algorithm, config->level, config->dict, work->pages,
                                    (size_t)count * UZRAM_PAGE_SIZE, work->frame, single - 1);
    tally->tried += (unsigned)count;
    struct bundle *bundle = NULL;
    if (length > 0 && bundle_cost((unsigned)length) < single_cost) {
        int rc = bundle_create(dev, work->frame, (unsigned)length, (unsigned)codec, first,
                               work->offsets, (unsigned)count, &bundle);
        length = rc < 0 ? rc : length;
    } else if (length > 0) {
        length = 0; /* no smaller than the pages alone */
    }
    if (!bundle) {
        codec_table_release(&dev->codecs, (unsigned)codec);
        return length < 0 ? length : 0;
    }
    unsigned joined_bytes;
    unsigned joined = publish(dev, first, bundle, (unsigned)count, work, &joined_bytes);
    bundle_seal(dev, bundle, joined_bytes);
    tally->bundled += joined;
    tally->bundles += joined > 0;
    return 0;
}

/* Put the member at `place` of a held bundle into an object of its own, if its slot still
 * names it. */
static int split_member(struct uzram *dev, struct bundle *bundle, unsigned place,
                        struct bundle_work *work)
{
    uint64_t value = bundle_value(bundle, place);
    int rc = bundle_read(dev, value, work->pages);
    unsigned codec = 0;
    int length = rc < 0 ? rc
                        : store_compress_alone(dev, bundle_priority(dev, bundle), work->pages,
                                               work->frame, &codec);
    if (length < 0)
        return length;
    uint64_t index = bundle_page_index(bundle, place);
    struct page_object made;
    rc = store_put_object(dev, work->frame, (unsigned)length, codec, index + 1, true, &made);
    if (rc < 0) {
        if (length != UZRAM_PAGE_SIZE)
            codec_table_release(&dev->codecs, codec);
        return rc;
    }
    struct slot *slot = &dev->slots[index];
    rc = slot_lock(dev, slot);
    if (rc < 0) {
        store_free_object(dev, &made);
        return rc;
    }
    bool same = slot_info_state(slot_info(slot)) == SLOT_BUNDLED && slot->value == value &&
                (rc = slot_set_form(dev, slot, &made)) == 0;
    if (same && made.state == SLOT_HUGE)
        counter_add(&dev->huge_pages, 1);
    slot_unlock(slot);
    if (same)
        bundle_leave(dev, value);
    else
        store_free_object(dev, &made);
    return rc;
}

int recompress_bundle_split(struct uzram *dev, uint64_t index, const struct recompress_plan *plan,
                            struct recompress_tally *tally)
{
    struct slot *slot = &dev->slots[index];
    uint32_t peek = atomic_load_explicit(&slot->info, memory_order_relaxed) & ~SLOT_LOCK;
    if (slot_info_state(peek) != SLOT_BUNDLED || !plan->work)
        return 0;
    int rc = slot_lock(dev, slot);
    if (rc < 0)
        return rc;
    struct bundle *bundle = NULL;
    /* A bundle made with a dictionary a retraining replaced is split too: its pages are
     * packed again with the newer one by the next pass (recompress_dict.c). */
    if (slot_info_state(slot_info(slot)) == SLOT_BUNDLED &&
        (bundle_mostly_dead(bundle_of(dev, slot->value)) ||
         (plan->stale_dicts >> bundle_codec(bundle_of(dev, slot->value)) & 1u))) {
        bundle = bundle_of(dev, slot->value);
        bundle_hold(bundle); /* its record names no other bundle while we work */
    }
    slot_unlock(slot);
    if (!bundle)
        return 0;
    uint32_t live = bundle_live(bundle);
    for (unsigned place = 0; place < bundle_count(bundle) && rc == 0; place++)
        if (live & (1u << place)) {
            rc = split_member(dev, bundle, place, plan->work);
            tally->split += rc == 0;
        }
    bundle_put(dev, bundle);
    return rc;
}
