/* store.c - the page store: the read, write, discard and extent paths over the page table
 * (slot.h locks and changes a slot; table.c owns the table's memory), idle marks, the clock of
 * ac_time, and the callbacks through which the pool's compaction and the dedup index reach
 * the pages' objects (store.h).
 * A whole-page write does its costly work (same-filled check, dedup lookup, compression,
 * allocation) before it takes the slot lock, which then only covers the swap of the old form
 * for the new; a partial write holds the lock throughout (see write_partial). A read of a page
 * on the backing store pins it and reads it without the lock (see read_held). */
#include "store/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backing/backing.h"
#include "bundle/bundle.h"
#include "codec/comp.h"
#include "dedup/dedup.h"
#include "device/device.h"
#include "pool/pool.h"
#include "state/state.h"
#include "store/same.h"
#include "store/slot.h"
#include "store/store_internal.h"

/* Scratch pages per thread: compression output, and the old page of a
 * partial write or a page that the caller wants only part of. */
static __thread unsigned char compress_buffer[UZRAM_PAGE_SIZE];
static __thread unsigned char page_buffer[UZRAM_PAGE_SIZE];

/* ---- clock ---------------------------------------------------------------- */

static int64_t monotonic_ticks(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return now.tv_sec * STORE_TICKS_PER_SECOND +
           now.tv_nsec / (1000000000 / STORE_TICKS_PER_SECOND);
}

void store_clock_start(struct uzram *dev)
{
    dev->clock_base = monotonic_ticks();
}

uint32_t store_now(struct uzram *dev)
{
    return (uint32_t)(monotonic_ticks() - dev->clock_base) +
           atomic_load_explicit(&dev->clock_skew, memory_order_relaxed);
}

#ifdef UZRAM_TEST_HOOKS
void store_test_advance_clock(struct uzram *dev, uint32_t seconds)
{
    atomic_fetch_add(&dev->clock_skew, seconds * STORE_TICKS_PER_SECOND);
}
#endif

/* ---- objects ------------------------------------------------------------- */

/* The bytes of the object store_load_object() last read from the backing store in this
 * thread (in backing_read()'s buffer: valid until this thread reads the backing store again). */
static __thread const void *backed_bytes;

int store_put_object(struct uzram *dev, const void *data, unsigned length, unsigned codec,
                     uint64_t owner, bool replacing, struct page_object *object)
{
    *object = (struct page_object){
        .state = length == UZRAM_PAGE_SIZE ? SLOT_HUGE : SLOT_COMPRESSED,
        .codec = length == UZRAM_PAGE_SIZE ? 0 : codec,
        .size = length,
    };
    int rc = pool_alloc(dev->pool, length, owner, &object->value);
    if (rc == -ENOSPC && replacing) {
        /* Recompression, which makes room: at the limit the holes of the objects it
         * replaced are gathered, and its object may take the pool past the limit by the holes
         * that are left and a span, within a bound (pool_replace_grace; zram does not hold
         * recompression to the limit at all). */
        store_compact_pool(dev);
        rc = pool_alloc_over(dev->pool, length, owner, pool_replace_grace(dev->pool),
                             &object->value);
    } else if (rc == -ENOSPC && pool_compact_due(dev->pool)) {
        /* A write refused at the limit while freed, discarded and overwritten pages left
         * holes in the spans: gathered here, as zsmalloc's shrinker does under pressure, and
         * tried once more. In the request's thread, as the shrinker runs in the thread that
         * reclaims, rather than by a thread of its own (the pool has one only under a reserve,
         * recompression only when set): pool_compact_due lets one writer do it every 100 ms,
         * and compaction works in bounded steps, so writers neither pile up nor stall a class. */
        store_compact_pool(dev);
        rc = pool_alloc(dev->pool, length, owner, &object->value);
    }
    if (rc < 0)
        return rc;
    memcpy(pool_map(dev->pool, object->value), data, length);
    counter_add(&dev->compr_data_size, length);
    return 0;
}

int store_compress(struct uzram *dev, unsigned priority, const void *page, void *out,
                   size_t capacity, unsigned *codec)
{
    int id = codec_table_acquire(&dev->codecs, priority);
    if (id < 0)
        return id;
    const struct codec_config *config = codec_table_get(&dev->codecs, (unsigned)id);
    int length =
        comp_compress_dict(config->algorithm, config->level, config->dict, page, out, capacity);
    if (length <= 0)
        codec_table_release(&dev->codecs, (unsigned)id);
    *codec = (unsigned)id;
    return length;
}

int store_compress_alone(struct uzram *dev, unsigned priority, const void *page, void *out,
                         unsigned *codec)
{
    int length = store_compress(dev, priority, page, out, HUGE_THRESHOLD - 1, codec);
    if (length == -ENOENT)
        length = store_compress(dev, 0, page, out, HUGE_THRESHOLD - 1, codec);
    if (length != 0)
        return length;
    memcpy(out, page, UZRAM_PAGE_SIZE);
    return UZRAM_PAGE_SIZE;
}

/* Compress `page` with the device's current algorithm and put the result
 * (or the raw page) in the pool, owned by `owner`. Fills `object` with a
 * COMPRESSED or HUGE form and counts compr_data_size. */
static int store_compress_page(struct uzram *dev, const void *page, uint64_t owner,
                               struct page_object *object)
{
    unsigned codec = 0;
    int length = store_compress(dev, 0, page, compress_buffer, HUGE_THRESHOLD - 1, &codec);
    if (length < 0)
        return length;
    int rc;
    /* Past mem_limit, writeback_when_full writes cold pages back until
     * this one fits (a bounded number of tries). */
    for (unsigned attempt = 0;; attempt++) {
        rc = length == 0 ? store_put_object(dev, page, UZRAM_PAGE_SIZE, 0, owner, false, object)
                         : store_put_object(dev, compress_buffer, (unsigned)length, codec, owner,
                                            false, object);
        if (rc != -ENOSPC || !dev->tier->make_room(dev, attempt))
            break;
    }
    if (rc < 0 && length > 0)
        codec_table_release(&dev->codecs, codec);
    return rc;
}

void store_free_object(struct uzram *dev, const struct page_object *object)
{
    if (object->state == SLOT_BACKED) {
        backing_free(device_backing(dev), object->value, object->size);
        counter_sub(&dev->bd_data_size, object->size);
        counter_sub(&dev->bd_objects, 1);
    } else {
        pool_free(dev->pool, object->value);
        counter_sub(&dev->compr_data_size, object->size);
    }
    if (object->size != UZRAM_PAGE_SIZE)
        codec_table_release(&dev->codecs, object->codec);
}

int store_decode(struct uzram *dev, const void *data, unsigned length, unsigned codec, void *page)
{
    if (length == UZRAM_PAGE_SIZE) {
        memcpy(page, data, UZRAM_PAGE_SIZE);
        return 0;
    }
    const struct codec_config *config = codec_table_get(&dev->codecs, codec);
    return comp_decompress_dict(config->algorithm, config->dict, data, length, page);
}

/* Decompress (or copy) a COMPRESSED, HUGE or BACKED object into `page`. A
 * BACKED one must be kept alive by the caller (slot locked, extent pinned,
 * or a dedup entry pinned) while it is read. */
static int store_load_object(struct uzram *dev, const struct page_object *object, void *page)
{
    if (object->state != SLOT_BACKED)
        return store_decode(dev, pool_map(dev->pool, object->value), object->size, object->codec,
                            page);
    const void *data;
    int rc = backing_read(device_backing(dev), object->value, object->size, &data);
    if (rc < 0)
        return -EIO;
    counter_add(&dev->events->bd_reads, 1);
    backed_bytes = data;
    return store_decode(dev, data, object->size, object->codec, page);
}

/* ---- objects of dedup entries ------------------------------------------------------ */

static int dedup_object_load(void *arg, const struct dedup_object *object, void *page)
{
    const struct page_object form = dedup_object_form(object);
    return store_load_object(arg, &form, page);
}

static void dedup_object_free(void *arg, const struct dedup_object *object)
{
    const struct page_object form = dedup_object_form(object);
    store_free_object(arg, &form);
}

/* (dedup_move) The pool names the entry's new id as the object's owner; an object on the
 * backing store has none there. */
static void dedup_object_rehome(void *arg, const struct dedup_object *object, uint32_t id)
{
    struct uzram *dev = arg;
    if (!(object->handle & OBJECT_BACKED))
        (void)pool_set_owner(dev->pool, object->handle, OWNER_DEDUP_BIT | id);
}

int store_dedup_create(struct uzram *dev, bool adopt, struct dedup **out)
{
    const struct dedup_object_ops ops = {
        .load = dedup_object_load,
        .free = dedup_object_free,
        .rehome = dedup_object_rehome,
        .arg = dev,
    };
    const struct state_region region = state_region(dev, STATE_DEDUP);
    const struct dedup_file file = {
        .fd = region.fd,
        .offset = region.offset,
        .limited = region.limited,
        .adopt = adopt,
        .lock_timeouts = &dev->events->state_lock_timeouts,
    };
    return dedup_create_in(dev->page_count, &ops, region.fd >= 0 ? &file : NULL, out);
}

_Static_assert(POOL_HANDLE_BITS <= 47 && BACKING_MAX_BYTES <= OBJECT_BACKED &&
                   OBJECT_BACKED < 1ull << DEDUP_HANDLE_BITS,
               "a dedup entry holds any pool handle, and any store offset with OBJECT_BACKED");
_Static_assert(CODEC_TABLE_MAX <= 1u << SLOT_CODEC_BITS &&
                   CODEC_TABLE_MAX <= 1u << DEDUP_CODEC_BITS,
               "slots and dedup entries hold any codec id");

/* ---- forms of a page ------------------------------------------------------ */

/* Raw pages count as huge wherever they are, in memory or written back. */
bool store_object_is_huge(struct uzram *dev, const struct page_object *object)
{
    if (object->state == SLOT_HUGE ||
        (object->state == SLOT_BACKED && object->size == UZRAM_PAGE_SIZE))
        return true;
    return object->state == SLOT_DEDUP && dedup_is_huge(device_dedup(dev), (uint32_t)object->value);
}

/* Count a form just published in a slot; `huge`: it is a raw page. */
static void account_new(struct uzram *dev, const struct page_object *object, bool huge)
{
    if (object->state == SLOT_EMPTY)
        return;
    counter_add(&dev->pages_stored, 1);
    if (object->state == SLOT_SAME) {
        counter_add(&dev->same_pages, 1);
        if (object->value == 0)
            counter_add(&dev->zero_pages, 1);
    }
    if (huge) {
        counter_add(&dev->huge_pages, 1);
        counter_add(&dev->events->huge_pages_since, 1);
    }
}

/* Release what a slot held before, after the slot no longer refers to it. */
static void release_old(struct uzram *dev, const struct page_object *old, bool huge)
{
    if (old->state == SLOT_EMPTY)
        return;
    counter_sub(&dev->pages_stored, 1);
    if (huge)
        counter_sub(&dev->huge_pages, 1);
    switch (old->state) {
    case SLOT_SAME:
        counter_sub(&dev->same_pages, 1);
        if (old->value == 0)
            counter_sub(&dev->zero_pages, 1);
        break;
    case SLOT_COMPRESSED:
    case SLOT_HUGE:
    case SLOT_BACKED:
        store_free_object(dev, old);
        break;
    case SLOT_DEDUP:
        dedup_put(device_dedup(dev), (uint32_t)old->value);
        break;
    case SLOT_BUNDLED:
        bundle_leave(dev, old->value);
        break;
    case SLOT_EMPTY:
        break;
    }
}

/* With dedup on: a reference to an equal page already stored, or else a new
 * entry that owns this page's object. In one direction: look up, compress
 * and allocate (no index lock held), insert. */
static int prepare_dedup(struct uzram *dev, struct dedup *dedup, const void *page,
                         struct page_object *object, bool *huge)
{
    struct dedup_lookup lookup;
    uint32_t id;
    if (!dedup_find(dedup, page, &lookup, &id)) {
        int rc = dedup_reserve(dedup, &lookup);
        if (rc < 0)
            return rc;
        struct page_object made;
        rc = store_compress_page(dev, page, OWNER_DEDUP_BIT | lookup.id, &made);
        if (rc < 0) {
            dedup_cancel(dedup, &lookup);
            return rc;
        }
        const struct dedup_object entry_object = {made.value, made.size, made.codec};
        id = dedup_insert(dedup, page, &lookup, &entry_object);
    }
    *object = (struct page_object){.state = SLOT_DEDUP, .value = id};
    *huge = dedup_is_huge(dedup, id);
    return 0;
}

/* Turn a whole page into the form it will be stored in: the same-filled
 * check, then dedup (when on), then compression into the pool. */
static int prepare_page(struct uzram *dev, uint64_t index, const void *page,
                        struct page_object *object, bool *huge)
{
    uint64_t word;
    *huge = false;
    if (atomic_load_explicit(&dev->same_filled, memory_order_relaxed) &&
        same_filled_check(page, &word)) {
        *object = (struct page_object){.state = SLOT_SAME, .value = word};
        return 0;
    }
    if (atomic_load_explicit(&dev->use_dedup, memory_order_acquire))
        return prepare_dedup(dev, device_dedup(dev), page, object, huge);
    int rc = store_compress_page(dev, page, index + 1, object);
    *huge = object->state == SLOT_HUGE;
    return rc;
}

/* One on the backing store too, with the lock held: a partial write does (see read_held for
 * reads). */
int store_load_locked(struct uzram *dev, struct slot *slot, void *page)
{
    struct page_object object;
    slot_get(slot, &object);
    switch (object.state) {
    case SLOT_EMPTY:
        memset(page, 0, UZRAM_PAGE_SIZE);
        return 0;
    case SLOT_SAME:
        same_filled_fill(page, object.value);
        return 0;
    case SLOT_COMPRESSED:
    case SLOT_HUGE:
    case SLOT_BACKED:
        return store_load_object(dev, &object, page);
    case SLOT_DEDUP:
        return dedup_read(device_dedup(dev), (uint32_t)object.value, page);
    case SLOT_BUNDLED:
        return bundle_read(dev, object.value, page);
    }
    return -EIO;
}

int store_copy_dedup_object(void *arg, const struct dedup_object *object)
{
    *(struct dedup_object *)arg = *object;
    return 0;
}

/* A page on the backing store is read without its slot lock, since a pread
 * may take long: the object is held alive instead, its extent pinned (and
 * its codec held) or a reference taken on its dedup entry, so that an
 * overwrite or discard meanwhile can neither free nor reuse it; the read
 * still returns the page as it was when it started, whole. With the slot
 * locked: true if the page is such a one, held in `held`. */
static bool hold_backed(struct uzram *dev, struct slot *slot, struct page_object *held)
{
    if (!device_backing(dev))
        return false;
    slot_get(slot, held);
    if (held->state == SLOT_BACKED) {
        backing_pin(device_backing(dev), held->value, held->size);
        if (held->size != UZRAM_PAGE_SIZE)
            codec_table_hold(&dev->codecs, held->codec);
        return true;
    }
    if (held->state != SLOT_DEDUP)
        return false;
    struct dedup *dedup = device_dedup(dev);
    struct dedup_object object;
    /* (failing, a pin that stayed held: read under the lock, where it fails too) */
    return dedup_with_object(dedup, (uint32_t)held->value, store_copy_dedup_object, &object) == 0 &&
           (object.handle & OBJECT_BACKED) && dedup_get(dedup, (uint32_t)held->value);
}

/* Bring a written-back page read again back into memory (see read_held): its object, whose
 * bytes the read just read from the backing store, goes into the pool and takes the place of
 * the one there if the slot still holds that (its extent is pinned: its offset names no
 * other object). The codec user passes from one form to the other. If anything is in the
 * way, the page stays on the backing store: nothing is lost. */
static void promote(struct uzram *dev, uint64_t index, const struct page_object *held)
{
    struct page_object made, now;
    if (store_put_object(dev, backed_bytes, held->size, held->codec, index + 1, false, &made) < 0)
        return;
    struct slot *slot = &dev->slots[index];
    bool same = false;
    if (slot_lock(dev, slot) == 0) {
        slot_get(slot, &now);
        same = now.state == SLOT_BACKED && now.value == held->value && now.size == held->size &&
               now.codec == held->codec && slot_set_form(dev, slot, &made) == 0;
        if (same) {
            backing_free(device_backing(dev), held->value, held->size);
            counter_sub(&dev->bd_data_size, held->size);
            counter_sub(&dev->bd_objects, 1);
        }
        slot_unlock(slot);
    }
    if (!same) {
        pool_free(dev->pool, made.value);
        counter_sub(&dev->compr_data_size, made.size);
    }
}

/* Read a page held by hold_backed(), without the slot lock, and let it go; `promote_index`:
 * the page's index when it comes back into memory (else UINT64_MAX). */
static int read_held(struct uzram *dev, const struct page_object *held, void *page,
                     uint64_t promote_index)
{
    if (held->state == SLOT_DEDUP) {
        struct dedup *dedup = device_dedup(dev);
        int rc = dedup_read(dedup, (uint32_t)held->value, page);
        dedup_put(dedup, (uint32_t)held->value);
        return rc;
    }
    int rc = store_load_object(dev, held, page);
    if (rc == 0 && promote_index != UINT64_MAX)
        promote(dev, promote_index, held);
    backing_unpin(device_backing(dev), held->value, held->size);
    if (held->size != UZRAM_PAGE_SIZE)
        codec_table_release(&dev->codecs, held->codec);
    return rc;
}

/* Let go of a form prepare_page() made that no slot took (nothing counted it as stored). */
static void drop_new(struct uzram *dev, const struct page_object *object)
{
    if (object->state == SLOT_DEDUP)
        dedup_put(device_dedup(dev), (uint32_t)object->value);
    else if (object->state == SLOT_COMPRESSED || object->state == SLOT_HUGE)
        store_free_object(dev, object);
}

/* Publish `object` (counted as raw when `huge`) in `slot`, then release
 * what the slot held: the one place a slot changes hands. The lock covers
 * only the swap and the counts; the old form is released after it, since
 * dropping its last reference may free a pool object. `locked`: the
 * caller already holds the slot lock (a partial write). The state the slot
 * had in *was; -EIO when a lock word of the state file stayed held (the
 * slot keeps its form, `object` is let go). */
static int slot_replace(struct uzram *dev, struct slot *slot, const struct page_object *object,
                        bool huge, bool locked, uint32_t now, enum slot_state *was)
{
    struct page_object old;
    int rc = locked ? 0 : slot_lock(dev, slot);
    if (rc == 0) {
        slot_get(slot, &old);
        /* dedup_is_huge needs the reference the slot still holds */
        bool old_huge = store_object_is_huge(dev, &old);
        slot_set_marks(dev, slot, 0, SLOT_IDLE | SLOT_INCOMPRESSIBLE);
        rc = slot_set(dev, slot, object, now);
        if (rc == 0)
            account_new(dev, object, huge);
        slot_unlock(slot);
        if (rc == 0)
            release_old(dev, &old, old_huge);
    }
    if (rc < 0)
        drop_new(dev, object);
    if (was)
        *was = rc == 0 ? old.state : SLOT_EMPTY;
    return rc;
}

/* Store a whole page in slot `index`. A failure leaves the old content in
 * place: nothing changes hands before the page is ready. `locked`: the
 * caller already holds the slot lock (partial writes). */
static int store_page(struct uzram *dev, uint64_t index, const void *page, bool locked,
                      uint32_t now)
{
    struct slot *slot = &dev->slots[index];
    struct page_object object;
    bool huge;
    int rc = prepare_page(dev, index, page, &object, &huge);
    if (rc < 0) {
        if (locked)
            slot_unlock(slot);
        return rc;
    }
    return slot_replace(dev, slot, &object, huge, locked, now, NULL);
}

/* Write part of a page: read the page, patch it, store it whole. The slot
 * lock is held from the read to the swap, so that two partial writes to
 * different sectors of one page cannot lose each other's data. So, unlike a
 * whole-page write, this one compresses under the lock, and with dedup on
 * hashes, compares candidates (decompressing them) and inserts under it
 * too: only readers and writers of this same page wait meanwhile. Dropping
 * the lock for that work would need a way to see on retaking it that the
 * slot did not change meanwhile, and its (state, handle) can come back
 * equal after two other writes (a freed handle is reused), so it is held.
 * Lock order is kept: slot, then dedup stripe and id locks, then a pool
 * class lock (dedup.h, pool.h). */
static int write_partial(struct uzram *dev, uint64_t index, unsigned offset, const void *data,
                         unsigned length, uint32_t now)
{
    struct slot *slot = &dev->slots[index];
    int rc = slot_lock(dev, slot);
    if (rc < 0)
        return rc;
    rc = store_load_locked(dev, slot, page_buffer);
    if (rc < 0) {
        slot_unlock(slot);
        return rc;
    }
    if (data)
        memcpy(page_buffer + offset, data, length);
    else
        memset(page_buffer + offset, 0, length);
    return store_page(dev, index, page_buffer, true, now);
}

static int discard_page(struct uzram *dev, uint64_t index)
{
    struct slot *slot = &dev->slots[index];
    if (slot_empty_at(dev, index))
        return 0;
    const struct page_object empty = {.state = SLOT_EMPTY};
    enum slot_state was;
    int rc = slot_replace(dev, slot, &empty, false, false, 0, &was);
    if (rc == 0 && was != SLOT_EMPTY)
        counter_add(&dev->events->notify_free, 1);
    return rc;
}

int store_discard_all(struct uzram *dev)
{
    int rc = 0;
    for (uint64_t index = 0; index < dev->page_count; index++)
        if (discard_page(dev, index) < 0)
            rc = -EIO;
    return rc;
}

/* ---- requests ------------------------------------------------------------- */

static int check_range(struct uzram *dev, uint64_t offset, uint64_t length)
{
    if (offset % UZRAM_SECTOR_SIZE || length % UZRAM_SECTOR_SIZE || offset > dev->disksize ||
        length > dev->disksize - offset) {
        counter_add(&dev->events->invalid_io, 1);
        return -EINVAL;
    }
    return 0;
}

/* The part of a request that falls in one page. */
struct page_part {
    uint64_t index;  /* page number */
    unsigned offset; /* first byte inside the page */
    unsigned length; /* bytes inside the page, 1..4096 */
};

static struct page_part page_part_at(uint64_t offset, uint64_t remaining)
{
    struct page_part part = {
        .index = offset / UZRAM_PAGE_SIZE,
        .offset = (unsigned)(offset % UZRAM_PAGE_SIZE),
    };
    uint64_t room = UZRAM_PAGE_SIZE - part.offset;
    part.length = (unsigned)(remaining < room ? remaining : room);
    return part;
}

int uzram_read(struct uzram *dev, uint64_t offset, void *buf, size_t length)
{
    int rc = check_range(dev, offset, length);
    uint32_t now = store_now(dev);
    unsigned char *out = buf;
    while (rc == 0 && length > 0) {
        struct page_part part = page_part_at(offset, length);
        unsigned chunk = part.length;
        struct slot *slot = &dev->slots[part.index];
        if (slot_empty_at(dev, part.index)) {
            memset(out, 0, chunk);
            offset += chunk;
            out += chunk;
            length -= chunk;
            continue;
        }
        unsigned char *page = chunk == UZRAM_PAGE_SIZE ? out : page_buffer;
        struct page_object held;
        if (slot_lock(dev, slot) < 0) {
            rc = -EIO;
            memset(page, 0, UZRAM_PAGE_SIZE);
        } else if (hold_backed(dev, slot, &held)) {
            /* A page read from the backing store a second time since it went there comes back
             * into memory when there is room: read twice, it is in use again; read once,
             * it may be a scan (a backup, a checksum) passing by, as the kernel's page
             * cache activates a page on its second access. */
            bool again = held.state == SLOT_BACKED && (slot_info(slot) & SLOT_REFERENCED) &&
                         dev->tier->room_to_promote(dev, held.size);
            slot_touch(dev, slot, now);
            slot_set_marks(dev, slot, held.state == SLOT_BACKED ? SLOT_REFERENCED : 0, 0);
            slot_unlock(slot);
            rc = read_held(dev, &held, page, again ? part.index : UINT64_MAX);
        } else {
            rc = store_load_locked(dev, slot, page);
            if (rc == 0)
                slot_touch(dev, slot, now);
            slot_unlock(slot);
        }
        if (page != out)
            memcpy(out, page + part.offset, chunk);
        if (rc < 0)
            counter_add(&dev->events->failed_reads, 1);
        offset += chunk;
        out += chunk;
        length -= chunk;
    }
    return rc;
}

/* Write `data` (NULL: zeros) over the range, page by page in order. */
static int write_range(struct uzram *dev, uint64_t offset, const unsigned char *data,
                       uint64_t length)
{
    int rc = 0;
    uint32_t now = store_now(dev);
    while (rc == 0 && length > 0) {
        struct page_part part = page_part_at(offset, length);
        unsigned chunk = part.length;
        if (chunk == UZRAM_PAGE_SIZE && data)
            rc = store_page(dev, part.index, data, false, now);
        else
            rc = write_partial(dev, part.index, part.offset, data, chunk, now);
        if (rc < 0)
            counter_add(&dev->events->failed_writes, 1);
        offset += chunk;
        if (data)
            data += chunk;
        length -= chunk;
    }
    return rc;
}

int uzram_write(struct uzram *dev, uint64_t offset, const void *buf, size_t length)
{
    int rc = check_range(dev, offset, length);
    return rc < 0 ? rc : write_range(dev, offset, buf, length);
}

/* Zero the range: whole pages are freed (or, keep_allocated, stored as the
 * zero word), partial pages are patched with zeros. */
static int zero_range(struct uzram *dev, uint64_t offset, uint64_t length, bool keep_allocated)
{
    int rc = check_range(dev, offset, length);
    while (rc == 0 && length > 0) {
        struct page_part part = page_part_at(offset, length);
        uint64_t index = part.index;
        unsigned chunk = part.length;
        if (chunk < UZRAM_PAGE_SIZE) {
            rc = write_range(dev, offset, NULL, chunk);
        } else if (keep_allocated) {
            const struct page_object zero = {.state = SLOT_SAME, .value = 0};
            rc = slot_replace(dev, &dev->slots[index], &zero, false, false, store_now(dev), NULL);
        } else {
            rc = discard_page(dev, index);
        }
        offset += chunk;
        length -= chunk;
    }
    return rc;
}

int uzram_discard(struct uzram *dev, uint64_t offset, uint64_t length)
{
    return zero_range(dev, offset, length, false);
}

int uzram_write_zeroes(struct uzram *dev, uint64_t offset, uint64_t length, bool keep_allocated)
{
    return zero_range(dev, offset, length, keep_allocated);
}

/* The extent flags of page `index`; -EIO for a slot lock of the state file held for good. */
static int extent_flags(struct uzram *dev, uint64_t index)
{
    struct slot *slot = &dev->slots[index];
    if (slot_empty_at(dev, index))
        return UZRAM_EXTENT_HOLE | UZRAM_EXTENT_ZERO;
    int rc = slot_lock(dev, slot);
    if (rc < 0)
        return rc;
    uint32_t info = slot_info(slot);
    int flags = 0;
    if (slot_info_state(info) == SLOT_EMPTY)
        flags = UZRAM_EXTENT_HOLE | UZRAM_EXTENT_ZERO;
    else if (slot_info_state(info) == SLOT_SAME && slot->value == 0)
        flags = UZRAM_EXTENT_ZERO;
    slot_unlock(slot);
    return flags;
}

int uzram_extent(struct uzram *dev, uint64_t offset, uint64_t length, uint64_t *run_length,
                 unsigned *flags)
{
    if (length == 0 || offset >= dev->disksize || length > dev->disksize - offset) {
        counter_add(&dev->events->invalid_io, 1);
        return -EINVAL;
    }
    uint64_t index = offset / UZRAM_PAGE_SIZE;
    int first = extent_flags(dev, index);
    if (first < 0)
        return first;
    uint64_t end = offset + length;
    uint64_t run_end = (index + 1) * UZRAM_PAGE_SIZE;
    while (run_end < end && extent_flags(dev, run_end / UZRAM_PAGE_SIZE) == first)
        run_end += UZRAM_PAGE_SIZE;
    *run_length = (run_end < end ? run_end : end) - offset;
    *flags = (unsigned)first;
    return 0;
}

/* ---- idle pages ------------------------------------------------------------- */

int uzram_mark_idle(struct uzram *dev, uint64_t min_age, uint64_t *marked)
{
    uint32_t now = store_now(dev), min_ticks = store_ticks(min_age);
    uint64_t count = 0;
    for (uint64_t index = 0; index < dev->page_count; index++) {
        struct slot *slot = &dev->slots[index];
        if (slot_empty_at(dev, index))
            continue;
        if (slot_lock(dev, slot) < 0) {
            if (marked)
                *marked = count;
            return -EIO;
        }
        uint32_t info = slot_info(slot);
        uint32_t ac_time = atomic_load_explicit(&slot->ac_time, memory_order_relaxed);
        /* ac_time ahead of now: a write that read the clock after this
         * scan did; it is as fresh as can be. */
        uint32_t age = ac_time > now ? 0 : now - ac_time;
        if (slot_info_state(info) != SLOT_EMPTY && !(info & SLOT_IDLE) && age >= min_ticks) {
            slot_set_marks(dev, slot, SLOT_IDLE, 0);
            count++;
        }
        slot_unlock(slot);
    }
    if (marked)
        *marked = count;
    return 0;
}

/* ---- compaction ------------------------------------------------------------ */

static bool owner_try_lock(void *arg, uint64_t owner, uint64_t handle)
{
    struct uzram *dev = arg;
    if (owner & OWNER_DEDUP_BIT) {
        struct dedup *dedup = device_dedup(dev);
        return dedup && dedup_try_lock_owner(dedup, (uint32_t)(owner & ~OWNER_DEDUP_BIT), handle);
    }
    if (owner & OWNER_BUNDLE_BIT)
        return bundle_try_lock_owner(dev, owner, handle);
    if (owner == 0 || owner > dev->page_count)
        return false;
    struct slot *slot = &dev->slots[owner - 1];
    if (!slot_trylock(slot))
        return false;
    enum slot_state state = slot_info_state(slot_info(slot));
    if ((state == SLOT_COMPRESSED || state == SLOT_HUGE) && slot->value == handle)
        return true;
    slot_unlock(slot);
    return false;
}

static bool owner_relocate(void *arg, uint64_t owner, uint64_t old_handle, uint64_t new_handle)
{
    struct uzram *dev = arg;
    if (owner & OWNER_DEDUP_BIT)
        return dedup_relocate(device_dedup(dev), (uint32_t)(owner & ~OWNER_DEDUP_BIT), new_handle);
    if (owner & OWNER_BUNDLE_BIT)
        return bundle_relocate(dev, owner, old_handle, new_handle);
    struct slot *slot = &dev->slots[owner - 1];
    bool moved = slot_set_value(dev, slot, new_handle) == 0;
    slot_unlock(slot);
    return moved;
}

uint64_t store_compact_pool(struct uzram *dev)
{
    const struct pool_owner_ops ops = {
        .try_lock_owner = owner_try_lock,
        .relocate = owner_relocate,
        .arg = dev,
    };
    uint64_t freed = pool_compact(dev->pool, &ops);
    counter_add(&dev->events->pages_compacted, freed);
    return freed;
}
