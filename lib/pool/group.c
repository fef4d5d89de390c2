/* group.c - a memory limit shared by several devices: the accounting that every member's
 * pool adds to its own (pool.c calls group_reserve/group_release) and the uzram_group_* calls.
 * A device joins through uzram_set_group() (settings.c), which charges its page table here. */
#include "pool/group.h"

#include <errno.h>
#include <stdlib.h>

#include "common/fault.h"

int group_reserve(struct uzram_group *group, uint64_t bytes, uint64_t grace)
{
    uint64_t limit = atomic_load_explicit(&group->limit, memory_order_relaxed);
    uint64_t used = atomic_load_explicit(&group->used, memory_order_relaxed);
    do {
        if (limit != 0 && used + bytes > limit + grace)
            return -ENOSPC;
    } while (!atomic_compare_exchange_weak_explicit(&group->used, &used, used + bytes,
                                                    memory_order_relaxed, memory_order_relaxed));
    uint64_t now = used + bytes;
    uint64_t peak = atomic_load_explicit(&group->used_max, memory_order_relaxed);
    while (peak < now &&
           !atomic_compare_exchange_weak_explicit(&group->used_max, &peak, now,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    return 0;
}

void group_release(struct uzram_group *group, uint64_t bytes)
{
    atomic_fetch_sub_explicit(&group->used, bytes, memory_order_relaxed);
}

int uzram_group_create(uint64_t mem_limit, struct uzram_group **out)
{
    if (!out)
        return -EINVAL;
    struct uzram_group *group = FAULT_POINT(FAULT_ALLOC) ? NULL : calloc(1, sizeof *group);
    if (!group)
        return -ENOMEM;
    atomic_init(&group->limit, mem_limit);
    *out = group;
    return 0;
}

int uzram_group_destroy(struct uzram_group *group)
{
    if (!group)
        return 0;
    if (atomic_load(&group->members) != 0)
        return -EBUSY;
    free(group);
    return 0;
}

int uzram_group_set_mem_limit(struct uzram_group *group, uint64_t bytes)
{
    if (!group)
        return -EINVAL;
    atomic_store(&group->limit, bytes);
    return 0;
}

int uzram_group_get_stats(struct uzram_group *group, struct uzram_group_stats *stats)
{
    if (!group || !stats)
        return -EINVAL;
    *stats = (struct uzram_group_stats){
        .mem_used = atomic_load(&group->used),
        .mem_limit = atomic_load(&group->limit),
        .mem_used_max = atomic_load(&group->used_max),
        .devices = atomic_load(&group->members),
    };
    return 0;
}
