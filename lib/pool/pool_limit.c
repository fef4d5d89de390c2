/* pool_limit.c - the pool at its limit: the holes compaction can gather (pool_hole_bytes), how
 * far an object that replaces larger ones may take the pool past the limit
 * (pool_replace_grace), and when a write refused there should compact first
 * (pool_compact_due). pool.c allocates, frees and compacts; this file only decides. */
#include <stdatomic.h>
#include <time.h>

#include "pool/pool.h"
#include "pool/pool_internal.h"

uint64_t pool_hole_bytes(struct pool *pool)
{
    const struct class_shape *all = pool_class_shapes();
    uint64_t holes = 0;
    /* The huge class has none: a span of one object goes when it does. */
    for (unsigned i = 0; i < NORMAL_CLASSES; i++) {
        if (all[i].home != i)
            continue;
        struct pool_class *class = &pool->classes[i];
        pthread_mutex_lock(&class->lock);
        holes += (class->capacity - class->object_count) * all[i].footprint;
        pthread_mutex_unlock(&class->lock);
    }
    return holes;
}

/* Compaction empties a span of a class once the class's free objects fill one of its spans
 * (pool.c, compact_one_span), so the holes it cannot gather are less than one span of each
 * class: 191 classes, 5.6 MiB with the classes of pool_class.c. */
static uint64_t holes_left_max(void)
{
    static _Atomic uint64_t computed;
    uint64_t bytes = atomic_load_explicit(&computed, memory_order_relaxed);
    if (bytes)
        return bytes;
    const struct class_shape *all = pool_class_shapes();
    for (unsigned i = 0; i < NORMAL_CLASSES; i++)
        if (all[i].home == i)
            bytes += (uint64_t)all[i].pages * PAGE_BYTES;
    atomic_store_explicit(&computed, bytes, memory_order_relaxed);
    return bytes;
}

uint64_t pool_replace_grace_max(void)
{
    return POOL_SPAN_MAX_BYTES + holes_left_max();
}

/*
 * The grace of a replacing object: one span (the first new span of a pass at the limit, before
 * anything it replaced is freed) and the holes the pool has now, which the replaced objects
 * left and compaction gathers. So the pool goes past the limit only by holes and a span: what
 * it holds besides holes (objects and span tails) stays within the limit and a span, and every
 * replacement, which frees more than it takes, makes more room. A pass at the limit therefore
 * keeps going as long as its objects shrink, whatever classes its holes are spread over
 * (with a span alone it stopped once that span was full, before a class had a span of holes
 * for compaction to give back). At most pool_replace_grace_max(): with more holes than that,
 * some class has a span of them, and compaction (which the store runs before it asks for the
 * grace) gives it back.
 */
uint64_t pool_replace_grace(struct pool *pool)
{
    uint64_t grace = POOL_SPAN_MAX_BYTES + pool_hole_bytes(pool);
    uint64_t most = pool_replace_grace_max();
    return grace < most ? grace : most;
}

/* A write refused at the limit compacts at most once per PRESSURE_COMPACT_NS for all
 * writers of the pool: a compaction that gathered little is not tried again by every refused
 * write, and one that gathered much leaves room for the writes after it anyway. */
#define PRESSURE_COMPACT_NS 100000000u
/* ... and only when holes are at least this share of the pool's memory (1 / N): below it,
 * compaction has little to give back. */
#define PRESSURE_HOLES_SHARE 8u

static uint64_t monotonic_ns(void)
{
    struct timespec now;
    /* coarse: cheap on every refused write, and a few ms off are nothing beside 100 ms */
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

bool pool_compact_due(struct pool *pool)
{
    uint64_t now = monotonic_ns();
    uint64_t last = atomic_load_explicit(&pool->pressure_compact_ns, memory_order_relaxed);
    if (last != 0 && now - last < PRESSURE_COMPACT_NS)
        return false;
    /* One writer claims the turn; the others go on (their writes refused) without waiting. */
    if (!atomic_compare_exchange_strong_explicit(&pool->pressure_compact_ns, &last, now,
                                                 memory_order_relaxed, memory_order_relaxed))
        return false;
    uint64_t holes = pool_hole_bytes(pool);
    return holes >= POOL_SPAN_MAX_BYTES && holes >= pool_mem_used(pool) / PRESSURE_HOLES_SHARE;
}
