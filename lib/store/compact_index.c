/* compact_index.c - index compaction, the store's half: walk the page table for the slots that
 * name the dedup entries worth moving (dedup_compact_from), hold each entry's slots locked
 * while the index moves it (dedup_move), and point them at its new id. */
#include "store/compact_index.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "dedup/dedup.h"
#include "device/device.h"
#include "common/fault.h"
#include "store/slot.h"

/* Slots named per walk: an entry whose slots do not all fit is split in two by id range. */
#define NAMERS_MAX 8192u

struct namer {
    uint32_t id;
    uint64_t index;
};

static int namer_order(const void *a, const void *b)
{
    const struct namer *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The slots that name an entry with an id in [lo, hi), in list; -1 if there are more than
 * NAMERS_MAX. A slot's state is peeked at without its lock (a dedup reference is rare among
 * a disk's pages); its value is read under it. */
static long collect(struct uzram *dev, uint64_t lo, uint64_t hi, struct namer *list)
{
    long count = 0;
    for (uint64_t index = 0; index < dev->page_count; index++) {
        struct slot *slot = &dev->slots[index];
        if (slot_empty_at(dev, index) ||
            slot_info_state(atomic_load_explicit(&slot->info, memory_order_relaxed) & ~SLOT_LOCK) !=
                SLOT_DEDUP)
            continue;
        if (slot_lock(dev, slot) < 0)
            continue; /* (a word of the state file held for good: that slot is left) */
        uint64_t id = slot->value;
        bool named = slot_info_state(slot_info(slot)) == SLOT_DEDUP && id >= lo && id < hi;
        slot_unlock(slot);
        if (!named)
            continue;
        if (count == NAMERS_MAX)
            return -1;
        list[count++] = (struct namer){(uint32_t)id, index};
    }
    return count;
}

#ifdef UZRAM_TEST_HOOKS
static _Atomic long kill_after = -1;

void store_index_test_kill_after(long updates)
{
    atomic_store(&kill_after, updates);
}

static void test_kill_point(void)
{
    long left = atomic_load(&kill_after);
    if (left >= 0 && atomic_fetch_sub(&kill_after, 1) == 1)
        raise(SIGKILL);
}
#else
static void test_kill_point(void)
{
}
#endif

/* Move entry list[0].id, named by the `count` slots in list: all locked (the first waited
 * for, the others only tried: this thread holds several slot locks at once, so it must not
 * wait on a second one), still naming it, and its references exactly theirs. */
static bool move_entry(struct uzram *dev, struct dedup *dedup, const struct namer *list,
                       size_t count)
{
    size_t locked = 0;
    bool named = true;
    while (named && locked < count) {
        struct slot *slot = &dev->slots[list[locked].index];
        if (locked == 0 ? slot_lock(dev, slot) < 0 : !slot_trylock(slot))
            break;
        locked++;
        named = slot_info_state(slot_info(slot)) == SLOT_DEDUP && slot->value == list[0].id;
    }
    uint32_t to = 0;
    bool moved =
        named && locked == count && dedup_move(dedup, list[0].id, (uint32_t)count, &to) == 0;
    for (size_t k = 0; moved && k < locked; k++) {
        slot_set_moved(dev, &dev->slots[list[k].index], to);
        test_kill_point();
    }
    if (moved) /* every slot names `to`: the old id given back */
        dedup_move_done(dedup, list[0].id);
    for (size_t k = 0; k < locked; k++)
        slot_unlock(&dev->slots[list[k].index]);
    return moved;
}

uint64_t store_compact_index(struct uzram *dev)
{
    struct dedup *dedup = device_dedup(dev);
    uint64_t lo = dedup_compact_from(dedup);
    if (lo == UINT32_MAX)
        return 0;
    struct namer *list = FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(NAMERS_MAX * sizeof *list);
    if (!list)
        return 0;
    uint64_t moved = 0, end = dev->page_count + UINT64_C(4096) + 1, hi = end;
    while (lo < end) {
        long count = collect(dev, lo, hi, list);
        if (count < 0 && hi - lo > 1) { /* too many slots: the lower half of the ids first */
            hi = lo + (hi - lo) / 2;
            continue;
        }
        /* (count < 0 with one id: an entry shared by more slots than a walk names stays) */
        qsort(list, count < 0 ? 0 : (size_t)count, sizeof *list, namer_order);
        for (long first = 0, next; first < count; first = next) {
            for (next = first + 1; next < count && list[next].id == list[first].id; next++)
                ;
            moved += move_entry(dev, dedup, list + first, (size_t)(next - first));
        }
        lo = hi;
        hi = end;
    }
    free(list);
    dedup_trim(dedup);
    return moved;
}
