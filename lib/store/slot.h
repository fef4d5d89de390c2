/* slot.h - locking and changing a page slot (internal): the primitives store.c, the per-page
 * halves of recompression and writeback, and table.c change slots with. The slot's layout is
 * device.h's. */
#ifndef UZRAM_SLOT_H
#define UZRAM_SLOT_H

#include "device/device.h"
#include "state/state.h"

/* ---- slot lock ---------------------------------------------------------- */

/* 0, or -EIO when the lock, a word of the state file, stayed held past the deadline
 * (backoff.h; counted): the caller gives up what it was doing, the slot untouched. */
__attribute__((warn_unused_result)) static inline int slot_lock(struct uzram *dev,
                                                                struct slot *slot)
{
    struct lock_wait wait = device_lock_wait(dev);
    for (;;) {
        uint32_t info = atomic_load_explicit(&slot->info, memory_order_relaxed);
        if (!(info & SLOT_LOCK) &&
            atomic_compare_exchange_weak_explicit(&slot->info, &info, info | SLOT_LOCK,
                                                  memory_order_acquire, memory_order_relaxed))
            return 0;
        if (!lock_wait(&wait))
            return device_lock_timeout(dev);
    }
}

static inline bool slot_trylock(struct slot *slot)
{
    uint32_t info = atomic_load_explicit(&slot->info, memory_order_relaxed);
    return !(info & SLOT_LOCK) &&
           atomic_compare_exchange_strong_explicit(&slot->info, &info, info | SLOT_LOCK,
                                                   memory_order_acquire, memory_order_relaxed);
}

static inline void slot_unlock(struct slot *slot)
{
    atomic_fetch_and_explicit(&slot->info, ~SLOT_LOCK, memory_order_release);
}

/* An empty slot is recognised without taking its lock: locking writes to
 * the table, which would back the table of a sparse disk with memory. */
static inline bool slot_seems_empty(struct slot *slot)
{
    return atomic_load_explicit(&slot->info, memory_order_acquire) == 0;
}

/* Slot `index` is empty, known without reading a table page never written (state.h). */
static inline bool slot_empty_at(struct uzram *dev, uint64_t index)
{
    return state_slot_unwritten(dev, index) || slot_seems_empty(&dev->slots[index]);
}

/* Only with the lock held. */
static inline uint32_t slot_info(struct slot *slot)
{
    return atomic_load_explicit(&slot->info, memory_order_relaxed) & ~SLOT_LOCK;
}

/* Write a locked slot: the one place a slot's form changes. With a state file through an
 * intent record (state.h), so that a process killed in the middle leaves it restorable: 0, or
 * -EIO when the record's lock stayed held past the deadline (the slot unchanged: the caller
 * keeps what it held and lets go of what it made). */
__attribute__((warn_unused_result)) static inline int
slot_write(struct uzram *dev, struct slot *slot, uint32_t info, uint32_t ac_time, uint64_t value)
{
    if (dev->state)
        return state_slot_write(dev, slot, info, ac_time, value);
    slot->value = value;
    atomic_store_explicit(&slot->ac_time, ac_time, memory_order_relaxed);
    atomic_store_explicit(&slot->info, info, memory_order_relaxed);
    return 0;
}

/* Publish a new form, accessed at `now`, with no marks (IDLE,
 * INCOMPRESSIBLE): they belong to the form the slot held before. 0 or -EIO (slot_write). */
__attribute__((warn_unused_result)) static inline int
slot_set(struct uzram *dev, struct slot *slot, const struct page_object *object, uint32_t now)
{
    return slot_write(dev, slot,
                      slot_info_make(object->state, object->codec, object->size) | SLOT_LOCK, now,
                      object->value);
}

/* Put another form of the page a locked slot holds in its place (moved to or from the
 * backing store, or recompressed): not an access, so the marks IDLE and INCOMPRESSIBLE and
 * ac_time stay. 0 or -EIO (slot_write). */
__attribute__((warn_unused_result)) static inline int
slot_set_form(struct uzram *dev, struct slot *slot, const struct page_object *object)
{
    uint32_t marks = slot_info(slot) & (SLOT_IDLE | SLOT_INCOMPRESSIBLE);
    return slot_write(
        dev, slot, slot_info_make(object->state, object->codec, object->size) | marks | SLOT_LOCK,
        atomic_load_explicit(&slot->ac_time, memory_order_relaxed), object->value);
}

/* The same object somewhere else (compaction moved it, or writeback placed it). 0 or -EIO
 * (slot_write). */
__attribute__((warn_unused_result)) static inline int
slot_set_value(struct uzram *dev, struct slot *slot, uint64_t value)
{
    return slot_write(dev, slot, atomic_load_explicit(&slot->info, memory_order_relaxed),
                      atomic_load_explicit(&slot->ac_time, memory_order_relaxed), value);
}

/* A locked slot that names dedup entry `from` points at `to`, where an index move put it
 * (compact_index.c): without an intent record, as the index's move record is what a process
 * killed meanwhile leaves (adoption points every slot naming `from` at `to`), so that this
 * never fails. */
static inline void slot_set_moved(struct uzram *dev, struct slot *slot, uint64_t to)
{
    if (dev->state)
        state_slot_rename(dev, slot, to);
    else
        slot->value = to;
}

static inline void slot_get(struct slot *slot, struct page_object *object)
{
    uint32_t info = slot_info(slot);
    object->state = slot_info_state(info);
    object->codec = slot_info_codec(info);
    object->size = slot_info_size(info);
    object->value = slot->value;
}

/* Change the marks of a locked slot, keeping idle_pages and
 * incompressible_pages in step. */
static inline void slot_set_marks(struct uzram *dev, struct slot *slot, uint32_t set,
                                  uint32_t clear)
{
    uint32_t info = atomic_load_explicit(&slot->info, memory_order_relaxed);
    uint32_t next = (info | set) & ~clear;
    if (next == info)
        return;
    atomic_store_explicit(&slot->info, next, memory_order_relaxed);
    uint32_t gained = next & ~info, lost = info & ~next;
    if (gained & SLOT_IDLE)
        counter_add(&dev->idle_pages, 1);
    if (lost & SLOT_IDLE)
        counter_sub(&dev->idle_pages, 1);
    if (gained & SLOT_INCOMPRESSIBLE)
        counter_add(&dev->incompressible_pages, 1);
    if (lost & SLOT_INCOMPRESSIBLE)
        counter_sub(&dev->incompressible_pages, 1);
}

/* A locked slot was read at `now`: no longer idle. */
static inline void slot_touch(struct uzram *dev, struct slot *slot, uint32_t now)
{
    atomic_store_explicit(&slot->ac_time, now, memory_order_relaxed);
    slot_set_marks(dev, slot, 0, SLOT_IDLE);
}

#endif
