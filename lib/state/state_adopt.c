/* state_adopt.c - a device taken over from a state file left by a process that ended or was
 * killed: the changes that process had half done undone (intent records), every slot lock it
 * held let go, and from the page table the pool's spans and accounting, the codec table's
 * users and the level counters made again. Nothing else needs a log: see state.h.
 * Damage (sums.h): each record is checked before it is used, each slot as it is counted, and
 * the first damage found ends the adoption with -EUCLEAN and where it is (sums_damage) before
 * anything is punched or freed: what was changed by then (changes undone, locks let go) any
 * adoption does, and the state keeps every page it held. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "backing/backing.h"
#include "bundle/bundle.h"
#include "codec/comp.h"
#include "dedup/dedup.h"
#include "common/file_extents.h"
#include "pool/pool.h"
#include "state/state.h"
#include "common/sums.h"

/* The codec table as the header has it, each entry with no user yet but its settings', its
 * dictionary made again from the file (dict=auto: the one trained before, not retrained). */
static int restore_codecs(struct uzram *dev)
{
    const struct state_header *header = dev->state->header;
    for (unsigned id = 0; id < CODEC_TABLE_MAX; id++) {
        const struct state_codec *saved = &header->codecs[id];
        if (!saved->used)
            continue;
        if (saved->sum !=
            sums_32((const char *)saved + STATE_CODEC_SUMMED_FROM, STATE_CODEC_SUMMED_BYTES))
            return sums_damage("header: codec record %u (bytes %zu to %zu) does not match its sum",
                               id, offsetof(struct state_header, codecs[id]),
                               offsetof(struct state_header, codecs[id + 1]) - 1);
        char name[sizeof saved->algorithm + 1] = {0};
        memcpy(name, saved->algorithm, sizeof saved->algorithm);
        int algorithm = comp_find(name);
        if (algorithm < 0 || saved->priority > CODEC_TABLE_PRIORITY_MAX)
            return -EPROTONOSUPPORT; /* an algorithm this build does not have */
        struct codec_config config = {.algorithm = algorithm,
                                      .level = saved->level,
                                      .priority = saved->priority,
                                      .dict_auto = saved->dict_auto != 0,
                                      .dict_size = saved->dict_size,
                                      .trainings = saved->trainings,
                                      .trained_pages = saved->trained_pages};
        int rc = state_load_dict(dev->state, id, algorithm, saved->level, &config.dict);
        if (rc < 0)
            return rc;
        codec_table_restore(&dev->codecs, id, &config, config.dict ? saved->dict_bytes : 0);
    }
    for (unsigned p = 0; p <= CODEC_TABLE_PRIORITY_MAX; p++) {
        int id = header->setting[p];
        if (id >= CODEC_TABLE_MAX || (id >= 0 && !header->codecs[id].used) || (p == 0 && id < 0))
            return sums_damage("header: the setting of priority %u names codec record %d, which "
                               "is not in use",
                               p, id);
        if (id >= 0)
            codec_table_restore_setting(&dev->codecs, p, (unsigned)id);
    }
    return 0;
}

/* The dictionary regions of the entries the header does not say used, emptied: bytes a
 * killed process wrote for an entry it never saved as used, or left of one it had saved as
 * freed; nothing names them, and nothing else would free them. Only once the state was found
 * whole: a damaged record could say unused of an entry pages use. */
static int forget_unused_dicts(struct uzram *dev)
{
    for (unsigned id = 0; id < CODEC_TABLE_MAX; id++)
        if (!dev->state->header->codecs[id].used)
            state_forget_dict(dev->state, id);
    return 0;
}

/* Each change a killed process left half done: the slot's old form back (its object was not
 * freed: that comes after the record is cleared). Every record is checked first (sums.h). */
static int undo_intents(struct uzram *dev)
{
    struct state_file *state = dev->state;
    for (unsigned i = 0; i < STATE_INTENTS; i++) {
        struct state_intent *intent = &state->intents[i];
        uint64_t slot_number = atomic_load(&intent->slot);
        if (slot_number == 0)
            continue;
        if (intent->sum != sums_32((const char *)intent + STATE_INTENT_SUMMED_FROM,
                                   STATE_INTENT_SUMMED_BYTES) ||
            slot_number > dev->page_count)
            return sums_damage(
                "intent record %u (bytes %llu to %llu): %s", i,
                (unsigned long long)(STATE_INTENTS_OFFSET + i * sizeof *intent),
                (unsigned long long)(STATE_INTENTS_OFFSET + (i + 1) * sizeof *intent - 1),
                slot_number > dev->page_count ? "it names a page past the disk"
                                              : "it does not match its sum");
    }
    for (unsigned i = 0; i < STATE_INTENTS; i++) {
        struct state_intent *intent = &state->intents[i];
        uint64_t slot_number = atomic_load(&intent->slot);
        if (slot_number != 0) {
            struct slot *slot = &dev->slots[slot_number - 1];
            slot->value = intent->value;
            atomic_store(&slot->ac_time, intent->ac_time);
            atomic_store(&slot->info, intent->info);
        }
        atomic_store(&intent->slot, 0);
        intent->sum = 0;
        atomic_store(&intent->lock, 0);
    }
    return 0;
}

/* An object a slot or a dedup entry owns (`owner` in the pool's terms): in the pool or on the
 * backing store, its codec held, counted. -EINVAL, *why saying it, for one that cannot be. */
static int adopt_object(struct uzram *dev, const struct page_object *object, uint64_t owner,
                        const char **why)
{
    unsigned size = object->size, codec = object->codec;
    *why = "its object's size is out of range, or its codec not in use";
    if (size == 0 || size > UZRAM_PAGE_SIZE ||
        (size != UZRAM_PAGE_SIZE && !dev->codecs.entries[codec].used))
        return -EINVAL;
    if (object->state == SLOT_BACKED) {
        struct backing *backing = device_backing(dev);
        *why = "its object is not on the backing store (none, or past its end, or named twice)";
        if (!backing || !backing_adopt_fits(backing, object->value, size))
            return -EINVAL;
        backing_adopt_object(backing, object->value, size);
        counter_add(&dev->bd_objects, 1);
        counter_add(&dev->bd_data_size, size);
    } else {
        *why = "it says raw (huge) with a compressed size, or the other way round";
        if ((object->state == SLOT_HUGE) != (size == UZRAM_PAGE_SIZE))
            return -EINVAL;
        int rc = pool_adopt_object(dev->pool, object->value, owner, size, why);
        if (rc < 0)
            return rc;
        counter_add(&dev->compr_data_size, size);
    }
    if (size != UZRAM_PAGE_SIZE)
        codec_table_hold(&dev->codecs, codec);
    return 0;
}

/* A slot that names a dedup entry: a reference counted, the entry's object adopted with its
 * first (the entry its owner). Its check bits are for `value`, or, when an index move was
 * under way from it, for the move's new id (state_slot_rename writes them first). */
static int adopt_dedup_slot(struct uzram *dev, uint64_t index, uint32_t info, uint64_t value,
                            bool *huge, const char **why)
{
    struct dedup *dedup = device_dedup(dev);
    *why = "it names a dedup entry, and the device has no dedup index";
    if (!dedup || value > UINT32_MAX)
        return -EINVAL;
    uint32_t id = (uint32_t)value;
    struct dedup_object object;
    int rc = dedup_adopt_ref(dedup, &id, &object);
    *why = "it names a dedup entry not in the index";
    if (rc < 0)
        return rc;
    *why = "its check bits do not match its form";
    if ((info & SLOT_CHECK_MASK) != slot_check(info, value) &&
        (id == value || (info & SLOT_CHECK_MASK) != slot_check(info, id)))
        return -EINVAL;
    if (id != value) /* an index move finished (dedup_adopt_ref) */
        state_slot_rename(dev, &dev->slots[index], id);
    *huge = dedup_is_huge(dedup, id);
    if (rc == 0)
        return 0;
    const struct page_object form = dedup_object_form(&object);
    return adopt_object(dev, &form, OWNER_DEDUP_BIT | id, why);
}

/* One slot found in the table: unlocked, checked, and counted with its object. -EINVAL, *why
 * saying it, for a damaged one. */
static int adopt_slot(struct uzram *dev, uint64_t index, struct slot *slot, const char **why)
{
    uint32_t info = atomic_load_explicit(&slot->info, memory_order_relaxed);
    if (info & SLOT_LOCK)
        atomic_store_explicit(&dev->slots[index].info, info &= ~SLOT_LOCK, memory_order_relaxed);
    if (info == 0)
        return slot->value == 0 ? 0 : (*why = "it is empty with a value", -EINVAL);
    *why = "its check bits do not match its form";
    if (slot_info_state(info) != SLOT_DEDUP &&
        (info & SLOT_CHECK_MASK) != slot_check(info, slot->value))
        return -EINVAL;
    struct page_object object;
    object.state = slot_info_state(info);
    object.size = slot_info_size(info);
    object.codec = slot_info_codec(info);
    object.value = slot->value;
    bool huge = object.size == UZRAM_PAGE_SIZE;
    int rc = 0;
    switch (object.state) {
    case SLOT_SAME:
        counter_add(&dev->same_pages, 1);
        if (slot->value == 0)
            counter_add(&dev->zero_pages, 1);
        huge = false;
        break;
    case SLOT_COMPRESSED:
    case SLOT_HUGE:
    case SLOT_BACKED:
        rc = adopt_object(dev, &object, index + 1, why);
        break;
    case SLOT_DEDUP:
        rc = adopt_dedup_slot(dev, index, info, slot->value, &huge, why);
        break;
    case SLOT_EMPTY:
        *why = "it is empty with marks or a value";
        return -EINVAL;
    case SLOT_BUNDLED:
        rc = bundle_adopt_member(dev, index, slot->value, object.codec, why);
        huge = false;
        break;
    default:
        *why = "its state is none a slot has";
        return -EINVAL;
    }
    if (rc < 0)
        return rc;
    counter_add(&dev->pages_stored, 1);
    if (huge)
        counter_add(&dev->huge_pages, 1);
    if (info & SLOT_IDLE)
        counter_add(&dev->idle_pages, 1);
    if (info & SLOT_INCOMPRESSIBLE)
        counter_add(&dev->incompressible_pages, 1);
    return 0;
}

/* The slots of one extent of the table's data (its other pages are holes: empty slots),
 * and their pages marked written. Read with pread, a page of slots at a time: through the
 * mapping, each page would cost a fault now, besides the one its first access costs later. */
static int adopt_extent(void *arg, uint64_t from, uint64_t to)
{
    struct uzram *dev = arg;
    uint64_t base = dev->state->header->table_offset;
    uint64_t first = (from - base) / 4096, last = (to - base + 4095) / 4096;
    struct slot slots[STATE_SLOTS_PER_PAGE];
    for (uint64_t page = first; page < last; page++) {
        atomic_fetch_or(&dev->state->written[page / 64], 1ull << (page % 64));
        if (pread(dev->state->fd, slots, sizeof slots, (off_t)(base + page * 4096)) !=
            (ssize_t)sizeof slots)
            return -EIO;
        for (uint64_t i = 0; i < STATE_SLOTS_PER_PAGE; i++) {
            uint64_t index = page * STATE_SLOTS_PER_PAGE + i;
            const char *why = "";
            int rc = index < dev->page_count ? adopt_slot(dev, index, &slots[i], &why) : 0;
            if (rc == -EINVAL)
                rc = sums_damage(
                    "table page %llu slot %llu (page %llu of the disk, bytes %llu "
                    "to %llu): %s",
                    (unsigned long long)page, (unsigned long long)i, (unsigned long long)index,
                    (unsigned long long)(base + index * sizeof(struct slot)),
                    (unsigned long long)(base + (index + 1) * sizeof(struct slot) - 1), why);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* The dedup index before the slots (dedup_adopt.c): half-changed objects put back from its
 * records, references and pins forgotten. */
static int dedup_begin(struct uzram *dev)
{
    return device_dedup(dev) ? dedup_adopt_begin(device_dedup(dev)) : 0;
}

/* and after them: the entries no slot named freed, and the object an index move left named by
 * the old id as its pool owner named by the new one. */
static int dedup_end(struct uzram *dev)
{
    if (!device_dedup(dev))
        return 0;
    bool moved;
    uint32_t id;
    struct dedup_object object;
    int rc = dedup_adopt_finish(device_dedup(dev), &moved, &id, &object);
    if (rc == 0 && moved && !(object.handle & OBJECT_BACKED))
        rc = pool_set_owner(dev->pool, object.handle, OWNER_DEDUP_BIT | id);
    return rc;
}

/* The backing store's blocks no slot named punched. */
static int backing_end(struct uzram *dev)
{
    if (device_backing(dev))
        backing_adopt_finish(device_backing(dev));
    return 0;
}

/* The pool's spans no slot's object is in given back (pool_adopt.c). */
static int pool_end(struct uzram *dev)
{
    return pool_adopt_finish(dev->pool);
}

/* Each part of the device the state holds adopts through one row: `begin` before the page
 * table's slots are walked (its records checked, the part made again from them; nothing
 * punched or freed), `end` once every slot was adopted (what no slot named given back), in
 * the reverse order. The slots, in between, each name their object's part (adopt_slot). The
 * first failure ends the adoption. FORMAT.md has the order and why. */
static const struct adopt_part {
    int (*begin)(struct uzram *dev);
    int (*end)(struct uzram *dev);
} adopt_parts[] = {
    {restore_codecs, forget_unused_dicts}, /* codec table, dictionaries */
    {undo_intents, NULL},                  /* slots half changed */
    {state_backing_adopt, backing_end},    /* first: the slots that name it make its map */
    {dedup_begin, dedup_end},
    {bundle_records_adopt_start, NULL}, /* chunks held, which slots then claim records of */
    {NULL, pool_end},
};
#define ADOPT_PARTS (sizeof adopt_parts / sizeof adopt_parts[0])

int state_rebuild(struct uzram *dev)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ADOPT_PARTS; i++)
        if (adopt_parts[i].begin)
            rc = adopt_parts[i].begin(dev);
    const struct state_header *header = dev->state->header;
    if (rc == 0)
        rc = file_each_data(dev->state->fd, header->table_offset,
                            header->table_offset + header->table_bytes, adopt_extent, dev);
    for (size_t i = ADOPT_PARTS; rc == 0 && i-- > 0;)
        if (adopt_parts[i].end)
            rc = adopt_parts[i].end(dev);
    codec_table_restore_done(&dev->codecs);
    return rc;
}
