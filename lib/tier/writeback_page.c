/* writeback_page.c - one page's writeback: a look at its slot without the lock passes over
 * most pages; then, under the lock, its object (or its dedup entry's, with a reference taken)
 * is copied for the batch, and once the batch is written the slot takes the object's place
 * on the backing store if it still holds the same bytes. Compaction of the backing store moves
 * a written-back object the same way. The batches are writeback_batch.c's; the passes and
 * the thread writeback.c's. */
#include "tier/writeback_page.h"

#include <errno.h>
#include <string.h>

#include "backing/backing.h"
#include "bundle/bundle.h"
#include "pool/pool.h"
#include "store/slot.h"
#include "store/store_internal.h"

/* Whether `filter` takes a page with this info and ac_time at `now`,
 * leaving out huge-ness (it needs the slot locked for a dedup reference):
 * checked once without the lock (to pass over most pages cheaply) and again
 * with it. Only pages whose object is in memory go. */
static bool writeback_takes(const struct writeback_filter *filter, uint32_t info, uint32_t ac_time,
                            uint32_t now)
{
    enum slot_state state = slot_info_state(info);
    if (filter->relocate)
        return state == SLOT_BACKED || state == SLOT_DEDUP;
    if (state != SLOT_COMPRESSED && state != SLOT_HUGE && state != SLOT_DEDUP &&
        state != SLOT_BUNDLED)
        return false;
    if ((filter->type & UZRAM_WRITEBACK_IDLE) && !(info & SLOT_IDLE))
        return false;
    if ((filter->type & UZRAM_WRITEBACK_INCOMPRESSIBLE) && !(info & SLOT_INCOMPRESSIBLE))
        return false;
    if ((filter->type & UZRAM_WRITEBACK_HUGE) &&
        (state == SLOT_COMPRESSED || state == SLOT_BUNDLED))
        return false;
    return filter->min_age == 0 || (ac_time <= now && now - ac_time >= filter->min_age);
}

struct entry_copy {
    struct uzram *dev;
    void *bytes;
    struct dedup_object *object;
    bool relocate;
};

/* Copy `size` bytes of the object at `offset` on the backing store; false if the
 * read fails (the object stays where it is). */
static bool copy_backed(struct uzram *dev, uint64_t offset, unsigned size, void *bytes)
{
    const void *data;
    if (backing_read(device_backing(dev), offset, size, &data) < 0)
        return false;
    memcpy(bytes, data, size);
    return true;
}

/* dedup_with_object(): copy an entry's object that is in memory (or,
 * relocating, one in a sparse block of the backing store). */
static int copy_entry_bytes(void *arg, const struct dedup_object *object)
{
    struct entry_copy *copy = arg;
    bool backed = object->handle & OBJECT_BACKED;
    uint64_t offset = object->handle & ~OBJECT_BACKED;
    if (backed != copy->relocate)
        return 0;
    if (backed && (!backing_sparse(device_backing(copy->dev), offset, object->size) ||
                   !copy_backed(copy->dev, offset, object->size, copy->bytes)))
        return 0;
    if (!backed)
        memcpy(copy->bytes, pool_map(copy->dev->pool, object->handle), object->size);
    *copy->object = *object;
    return (int)object->size;
}

/* Writeback holds its lock while it locks slots, and a writer holding a
 * slot lock may be waiting for that lock (to make room): so writeback never
 * waits for a slot lock without bound. `patient`: try for a while, spinning
 * then yielding; else once. */
static bool slot_lock_for_writeback(struct slot *slot, bool patient)
{
    unsigned spins = 0;
    while (!slot_trylock(slot)) {
        if (!patient || spins >= 256)
            return false;
        lock_backoff(&spins);
    }
    return true;
}

/* A page of a bundle leaves it when it is written back: the object written is the page
 * compressed alone (store_compress_alone), and the item holds the bundle (so that its
 * record names no other one until the item is published or dropped) and a user of that
 * codec. The slot is locked on entry and unlocked here. */
static int take_bundled(struct uzram *dev, struct slot *slot, struct writeback_item *item,
                        void *bytes)
{
    struct bundle *bundle = bundle_of(dev, item->value);
    bundle_hold(bundle);
    slot_unlock(slot);
    static __thread unsigned char page[UZRAM_PAGE_SIZE];
    unsigned codec = 0;
    int length = bundle_read(dev, item->value, page);
    if (length == 0)
        length = store_compress_alone(dev, bundle_priority(dev, bundle), page, bytes, &codec);
    if (length <= 0) {
        bundle_put(dev, bundle);
        return 0; /* the page stays in its bundle */
    }
    item->codec = (unsigned)length == UZRAM_PAGE_SIZE ? 0 : codec;
    item->size = (unsigned)length;
    return length;
}

/* Let go of what take_bundled() holds. */
static void drop_bundled(struct uzram *dev, struct writeback_item *item)
{
    if (item->size != UZRAM_PAGE_SIZE)
        codec_table_release(&dev->codecs, item->codec);
    bundle_put(dev, bundle_of(dev, item->value));
}

/* The written copy of a bundle's page takes its place if the slot still names the same
 * member (held: no other bundle has its record); the page leaves the bundle. */
static bool publish_bundled(struct uzram *dev, struct writeback_item *item, bool wait)
{
    struct slot *slot = &dev->slots[item->index];
    bool same = false;
    if (slot_lock_for_writeback(slot, wait)) {
        /* The codec user passes to the written-back form. */
        const struct page_object backed = {SLOT_BACKED, item->offset, item->codec, item->size};
        same = slot_info_state(slot_info(slot)) == SLOT_BUNDLED && slot->value == item->value &&
               slot_set_form(dev, slot, &backed) == 0;
        if (same) {
            counter_add(&dev->bd_objects, 1);
            counter_add(&dev->bd_data_size, item->size);
            if (item->size == UZRAM_PAGE_SIZE)
                counter_add(&dev->huge_pages, 1); /* a raw page on the backing store */
        }
        slot_unlock(slot);
    }
    if (same) {
        bundle_leave(dev, item->value);
        bundle_put(dev, bundle_of(dev, item->value));
    } else {
        drop_bundled(dev, item);
    }
    return same;
}

int writeback_page_take(struct uzram *dev, uint64_t index, const struct writeback_filter *filter,
                        uint32_t now, bool wait, struct writeback_item *item, void *bytes)
{
    struct slot *slot = &dev->slots[index];
    uint32_t peek = atomic_load_explicit(&slot->info, memory_order_relaxed) & ~SLOT_LOCK;
    if (peek == 0 ||
        !writeback_takes(filter, peek, atomic_load_explicit(&slot->ac_time, memory_order_relaxed),
                         now))
        return 0;
    if (!slot_lock_for_writeback(slot, wait))
        return -EBUSY;
    struct page_object old;
    slot_get(slot, &old);
    if (!writeback_takes(filter, slot_info(slot),
                         atomic_load_explicit(&slot->ac_time, memory_order_relaxed), now) ||
        ((filter->type & UZRAM_WRITEBACK_HUGE) && !store_object_is_huge(dev, &old))) {
        slot_unlock(slot);
        return 0;
    }
    *item = (struct writeback_item){
        .index = index,
        .state = old.state,
        .value = old.value,
        .codec = old.codec,
        .size = old.size,
    };
    if (old.state == SLOT_BACKED) {
        /* Compaction: the extent stays pinned until the move is published
         * or dropped, so that it is not reused meanwhile, and its offset
         * still names this object when the slot is checked again. */
        struct backing *backing = device_backing(dev);
        bool sparse = backing_sparse(backing, old.value, old.size);
        if (sparse)
            backing_pin(backing, old.value, old.size);
        slot_unlock(slot);
        if (!sparse)
            return 0;
        if (!copy_backed(dev, old.value, old.size, bytes)) {
            backing_unpin(backing, old.value, old.size);
            return 0;
        }
        return (int)old.size;
    }
    if (old.state == SLOT_BUNDLED)
        return take_bundled(dev, slot, item, bytes);
    if (old.state != SLOT_DEDUP) {
        memcpy(bytes, pool_map(dev->pool, old.value), old.size);
        slot_unlock(slot);
        return (int)old.size;
    }
    /* A dedup entry goes once for all the pages that share it: work on our
     * own reference, without the slot lock. */
    struct dedup *dedup = device_dedup(dev);
    uint32_t id = (uint32_t)old.value;
    bool referenced = dedup_get(dedup, id);
    slot_unlock(slot);
    if (!referenced)
        return 0;
    struct entry_copy copy = {dev, bytes, &item->entry, filter->relocate};
    int size = dedup_with_object(dedup, id, copy_entry_bytes, &copy);
    if (size <= 0) /* already written back, not in a sparse block, or its state held */
        dedup_put(dedup, id);
    return size < 0 ? 0 : size;
}

bool writeback_page_in_memory(struct uzram *dev, uint64_t index)
{
    struct slot *slot = &dev->slots[index];
    enum slot_state state =
        slot_info_state(atomic_load_explicit(&slot->info, memory_order_relaxed));
    if (state != SLOT_DEDUP)
        return state == SLOT_COMPRESSED || state == SLOT_HUGE || state == SLOT_BUNDLED;
    if (!slot_trylock(slot))
        return false;
    struct dedup_object object = {.handle = OBJECT_BACKED};
    if (slot_info_state(slot_info(slot)) == SLOT_DEDUP)
        dedup_with_object(device_dedup(dev), (uint32_t)slot->value, store_copy_dedup_object,
                          &object);
    slot_unlock(slot);
    return !(object.handle & OBJECT_BACKED);
}

/* A written-back object of `size` bytes left memory. */
static void account_written_back(struct uzram *dev, unsigned size)
{
    counter_sub(&dev->compr_data_size, size);
    counter_add(&dev->bd_objects, 1);
    counter_add(&dev->bd_data_size, size);
}

/* Compaction moved a page's object on the backing store: the slot takes the new
 * place if it still holds the old one (pinned since it was copied, so the
 * offset cannot name another object now). */
static bool publish_moved(struct uzram *dev, struct writeback_item *item, bool wait)
{
    struct backing *backing = device_backing(dev);
    struct slot *slot = &dev->slots[item->index];
    bool same = false;
    if (slot_lock_for_writeback(slot, wait)) {
        struct page_object now;
        slot_get(slot, &now);
        same = now.state == SLOT_BACKED && now.value == item->value && now.size == item->size &&
               now.codec == item->codec && slot_set_value(dev, slot, item->offset) == 0;
        slot_unlock(slot);
    }
    if (same)
        backing_free(backing, item->value, item->size);
    backing_unpin(backing, item->value, item->size);
    return same;
}

bool writeback_page_publish(struct uzram *dev, struct writeback_item *item, const void *bytes,
                            bool wait)
{
    if (item->state == SLOT_DEDUP) {
        struct dedup *dedup = device_dedup(dev);
        uint32_t id = (uint32_t)item->value;
        const struct dedup_object backed = {OBJECT_BACKED | item->offset, item->entry.size,
                                            item->entry.codec};
        struct dedup_object old;
        /* Compaction may have moved it meanwhile; recompression may have
         * replaced it (then it is not the object written). Only writeback
         * (this pass) moves an entry's object on the backing store. */
        bool done = dedup_replace(dedup, id, &item->entry, &backed, &old);
        if (done && (old.handle & OBJECT_BACKED)) {
            backing_free(device_backing(dev), old.handle & ~OBJECT_BACKED, old.size);
        } else if (done) {
            account_written_back(dev, old.size);
            pool_free(dev->pool, old.handle);
        }
        dedup_put(dedup, id);
        return done;
    }
    if (item->state == SLOT_BACKED)
        return publish_moved(dev, item, wait);
    if (item->state == SLOT_BUNDLED)
        return publish_bundled(dev, item, wait);
    struct slot *slot = &dev->slots[item->index];
    if (!slot_lock_for_writeback(slot, wait))
        return false;
    /* The same bytes with the same codec are the same page: a handle alone
     * could have been freed and reused for another page meanwhile. */
    struct page_object now;
    slot_get(slot, &now);
    /* The codec user passes to the written-back form. */
    const struct page_object backed = {SLOT_BACKED, item->offset, now.codec, now.size};
    bool same = now.state == item->state && now.size == item->size && now.codec == item->codec &&
                memcmp(pool_map(dev->pool, now.value), bytes, now.size) == 0 &&
                slot_set_form(dev, slot, &backed) == 0;
    if (same)
        account_written_back(dev, now.size);
    slot_unlock(slot);
    if (same)
        pool_free(dev->pool, now.value);
    return same;
}

void writeback_page_drop(struct uzram *dev, struct writeback_item *item)
{
    if (item->state == SLOT_DEDUP)
        dedup_put(device_dedup(dev), (uint32_t)item->value);
    else if (item->state == SLOT_BACKED)
        backing_unpin(device_backing(dev), item->value, item->size);
    else if (item->state == SLOT_BUNDLED)
        drop_bundled(dev, item);
}
