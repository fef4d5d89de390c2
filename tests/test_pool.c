/* test_pool.c - unit tests of the size-class pool (lib/pool/pool.c).
 * Sizes, accounting, limit, compaction with owner callbacks, and threads. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sys/mman.h>

#include "pool/pool.h"
#include "test_util.h"

#define PAGE 4096u

/* Byte `i` of the pattern written into an object: depends on a per-object
 * seed so that an object copied to the wrong place is caught. */
static unsigned char pattern_byte(uint32_t seed, size_t i)
{
    return (unsigned char)((seed >> ((i & 3) * 8)) + i * 31u + (i >> 8));
}

static void fill_pattern(void *dst, size_t size, uint32_t seed)
{
    unsigned char *p = dst;
    for (size_t i = 0; i < size; i++)
        p[i] = pattern_byte(seed, i);
}

static bool check_pattern(const void *src, size_t size, uint32_t seed)
{
    const unsigned char *p = src;
    for (size_t i = 0; i < size; i++)
        if (p[i] != pattern_byte(seed, i))
            return false;
    return true;
}

static struct pool *new_pool(void)
{
    struct pool *pool = NULL;
    assert_int_equal(pool_create(&pool), 0);
    assert_non_null(pool);
    return pool;
}

static void test_invalid_arguments(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    uint64_t handle = 0;
    assert_int_equal(pool_alloc(pool, 0, 1, &handle), -EINVAL);
    assert_int_equal(pool_alloc(pool, POOL_MAX_OBJECT + 1, 1, &handle), -EINVAL);
    assert_int_equal(pool_alloc(pool, 100, 0, &handle), -EINVAL);
    assert_int_equal(pool_alloc(pool, 100, 1, NULL), -EINVAL);
    assert_int_equal(pool_mem_used(pool), 0);
    pool_destroy(pool);
}

/* One object of every size 1..4096 alive at once, each with its own
 * pattern, then all verified and freed. */
static void test_every_size(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    uint64_t *handles = calloc(POOL_MAX_OBJECT + 1, sizeof *handles);
    assert_non_null(handles);
    for (size_t size = 1; size <= POOL_MAX_OBJECT; size++) {
        assert_int_equal(pool_alloc(pool, size, size, &handles[size]), 0);
        assert_true(handles[size] != 0);
        assert_true(handles[size] < (1ull << POOL_HANDLE_BITS));
        void *p = pool_map(pool, handles[size]);
        assert_non_null(p);
        assert_true(((uintptr_t)p & 7) == 0);
        fill_pattern(p, size, (uint32_t)size * 2654435761u);
        assert_true(pool_mem_used(pool) % PAGE == 0);
    }
    for (size_t size = 1; size <= POOL_MAX_OBJECT; size++)
        for (size_t other = size + 1; other <= POOL_MAX_OBJECT && other < size + 4; other++)
            assert_true(handles[size] != handles[other]);
    for (size_t size = 1; size <= POOL_MAX_OBJECT; size++)
        assert_true(
            check_pattern(pool_map(pool, handles[size]), size, (uint32_t)size * 2654435761u));
    /* Free in a different order than allocated. */
    for (size_t size = 2; size <= POOL_MAX_OBJECT; size += 2)
        pool_free(pool, handles[size]);
    for (size_t size = 1; size <= POOL_MAX_OBJECT; size += 2)
        assert_true(
            check_pattern(pool_map(pool, handles[size]), size, (uint32_t)size * 2654435761u));
    for (size_t size = 1; size <= POOL_MAX_OBJECT; size += 2)
        pool_free(pool, handles[size]);
    assert_int_equal(pool_mem_used(pool), 0);
    free(handles);
    pool_destroy(pool);
}

/* Allocate objects of `size` until mem_used grows; returns how many. */
static size_t fill_until_growth(struct pool *pool, size_t size, uint64_t *handles, size_t count)
{
    uint64_t before = pool_mem_used(pool);
    while (pool_mem_used(pool) == before) {
        assert_true(count < 8192);
        assert_int_equal(pool_alloc(pool, size, 7, &handles[count]), 0);
        count++;
    }
    return count;
}

/* mem_used grows by whole spans: the first object of a class costs one
 * span, the next ones are free until the span is full. A class's first two
 * spans are short ones; from the third on, a span's bytes divided by its
 * object count is pool_object_cost(). */
static void test_mem_used_moves_by_spans(void **state)
{
    (void)state;
    static const size_t sizes[] = {1,    8,    9,    100,  500,  1000, 1500, 2047,
                                   2500, 3000, 3500, 4000, 4088, 4089, 4096};
    struct pool *pool = new_pool();
    uint64_t *handles = calloc(8192, sizeof *handles);
    assert_non_null(handles);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t size = sizes[s];
        size_t count = fill_until_growth(pool, size, handles, 0);
        uint64_t small_bytes = pool_mem_used(pool);
        assert_true(small_bytes >= PAGE && small_bytes <= 16 * PAGE);
        assert_true(small_bytes % PAGE == 0);
        /* the object after the first span is full opens a second short one */
        size_t first_span = fill_until_growth(pool, size, handles, count) - 1;
        assert_int_equal(pool_mem_used(pool), 2 * small_bytes);
        count = first_span + 1;
        /* fill the second short span; the next object opens a long one */
        count = fill_until_growth(pool, size, handles, count);
        uint64_t long_bytes = pool_mem_used(pool) - 2 * small_bytes;
        assert_true(long_bytes >= small_bytes && long_bytes <= 16 * PAGE);
        size_t long_start = count - 1;
        count = fill_until_growth(pool, size, handles, count);
        size_t per_span = count - 1 - long_start;
        double cost = pool_object_cost(size);
        assert_true(cost * per_span > long_bytes - 0.5 && cost * per_span < long_bytes + 0.5);
        assert_true(cost >= (double)size);
        /* freeing the lone object of the newest span gives it back */
        uint64_t before = pool_mem_used(pool);
        pool_free(pool, handles[count - 1]);
        assert_true(pool_mem_used(pool) < before);
        for (size_t i = 0; i + 1 < count; i++)
            pool_free(pool, handles[i]);
        assert_int_equal(pool_mem_used(pool), 0);
    }
    free(handles);
    pool_destroy(pool);
}

static void test_mem_used_max(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    uint64_t handles[64];
    assert_int_equal(pool_mem_used_max(pool), 0);
    for (int i = 0; i < 64; i++)
        assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[i]), 0);
    assert_int_equal(pool_mem_used(pool), 64 * PAGE);
    assert_int_equal(pool_mem_used_max(pool), 64 * PAGE);
    for (int i = 0; i < 40; i++)
        pool_free(pool, handles[i]);
    assert_int_equal(pool_mem_used(pool), 24 * PAGE);
    assert_int_equal(pool_mem_used_max(pool), 64 * PAGE);
    pool_reset_mem_used_max(pool);
    assert_int_equal(pool_mem_used_max(pool), 24 * PAGE);
    for (int i = 0; i < 10; i++)
        assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[i]), 0);
    assert_int_equal(pool_mem_used_max(pool), 34 * PAGE);
    for (int i = 0; i < 10; i++)
        pool_free(pool, handles[i]);
    for (int i = 40; i < 64; i++)
        pool_free(pool, handles[i]);
    assert_int_equal(pool_mem_used(pool), 0);
    assert_int_equal(pool_mem_used_max(pool), 34 * PAGE);
    pool_destroy(pool);
}

static void test_limit(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    uint64_t handles[32];
    pool_set_limit(pool, 10 * PAGE);
    for (int i = 0; i < 10; i++)
        assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[i]), 0);
    uint64_t handle;
    assert_int_equal(pool_alloc(pool, PAGE, 1, &handle), -ENOSPC);
    /* a small object needs a new span too: refused as well */
    assert_int_equal(pool_alloc(pool, 100, 1, &handle), -ENOSPC);
    assert_int_equal(pool_mem_used(pool), 10 * PAGE);
    pool_free(pool, handles[0]);
    assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[0]), 0);
    assert_int_equal(pool_alloc(pool, PAGE, 1, &handle), -ENOSPC);
    pool_set_limit(pool, 12 * PAGE);
    assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[10]), 0);
    assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[11]), 0);
    assert_int_equal(pool_alloc(pool, PAGE, 1, &handle), -ENOSPC);
    pool_set_limit(pool, 0);
    assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[12]), 0);
    assert_int_equal(pool_mem_used(pool), 13 * PAGE);
    assert_true(pool_mem_used_max(pool) <= 13 * PAGE);
    for (int i = 0; i < 13; i++)
        pool_free(pool, handles[i]);
    assert_int_equal(pool_mem_used(pool), 0);
    pool_destroy(pool);
}

static void test_object_cost(void **state)
{
    (void)state;
    assert_true(pool_object_cost(PAGE) == (double)PAGE);
    for (size_t size = 1; size <= POOL_MAX_OBJECT; size++) {
        double cost = pool_object_cost(size);
        assert_true(cost >= (double)size);
        assert_true(cost <= (double)PAGE);
    }
    /* Mid sizes (compressed pages): within 4% of the object plus its 8-byte
     * header; the 16-byte class rounding alone costs up to 15 bytes. */
    for (size_t size = 512; size <= 3584; size++) {
        double ratio = pool_object_cost(size) / (double)(size + 8);
        assert_true(ratio >= 1.0);
        assert_true(ratio < 1.04);
    }
}

/* Whether the page at `p` is resident (mincore). */
static bool resident(const void *p)
{
    unsigned char vec = 0;
    void *page = (void *)((uintptr_t)p & ~(uintptr_t)(PAGE - 1));
    assert_int_equal(mincore(page, PAGE, &vec), 0);
    return vec & 1;
}

static bool no_owner(void *arg, uint64_t owner, uint64_t handle)
{
    (void)arg, (void)owner, (void)handle;
    fail_msg("compaction of an empty pool asked for an owner");
    return false;
}

static bool no_relocate(void *arg, uint64_t owner, uint64_t old_handle, uint64_t new_handle)
{
    (void)arg, (void)owner, (void)old_handle, (void)new_handle;
    return true;
}

/* Emptied spans stay resident in the span cache (not in mem_used), the next
 * spans reuse them, the cache is bounded, kept within the limit and emptied
 * by compaction. */
static void test_span_cache(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    enum { N = 64 };
    uint64_t handles[N];
    unsigned char *pages[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[i]), 0);
        pages[i] = pool_map(pool, handles[i]);
        fill_pattern(pages[i], PAGE, (uint32_t)i);
    }
    for (int i = 0; i < N; i++)
        pool_free(pool, handles[i]);
    assert_int_equal(pool_mem_used(pool), 0);
    assert_int_equal(pool_span_cache_bytes(pool), N * PAGE);
    for (int i = 0; i < N; i++)
        assert_true(resident(pages[i]));

    /* The next spans take the cached pages: nothing new is touched. */
    for (int i = 0; i < N; i++) {
        assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[i]), 0);
        unsigned char *p = pool_map(pool, handles[i]);
        bool reused = false;
        for (int j = 0; j < N; j++)
            reused |= p == pages[j];
        assert_true(reused);
        fill_pattern(p, PAGE, (uint32_t)i + 1000);
    }
    assert_int_equal(pool_span_cache_bytes(pool), 0);
    assert_int_equal(pool_mem_used(pool), N * PAGE);
    for (int i = 0; i < N; i++)
        assert_true(check_pattern(pool_map(pool, handles[i]), PAGE, (uint32_t)i + 1000));

    /* A cached window serves a span of another length too. */
    for (int i = 0; i < N; i++)
        pool_free(pool, handles[i]);
    uint64_t small;
    assert_int_equal(pool_alloc(pool, 300, 7, &small), 0);
    fill_pattern(pool_map(pool, small), 300, 7);
    assert_true(check_pattern(pool_map(pool, small), 300, 7));
    assert_true(pool_span_cache_bytes(pool) < N * PAGE);
    pool_free(pool, small);

    /* Compaction gives the cache back to the OS. */
    struct pool_owner_ops ops = {no_owner, no_relocate, NULL};
    pool_compact(pool, &ops);
    assert_int_equal(pool_span_cache_bytes(pool), 0);
    assert_int_equal(pool_mem_used(pool), 0);
    for (int i = 0; i < N; i++)
        assert_false(resident(pages[i]));

    /* Bounded: POOL_SPAN_CACHE_BYTES at most. */
    size_t many = POOL_SPAN_CACHE_BYTES / PAGE + 100;
    uint64_t *lots = malloc(many * sizeof *lots);
    assert_non_null(lots);
    for (size_t i = 0; i < many; i++)
        assert_int_equal(pool_alloc(pool, PAGE, 1, &lots[i]), 0);
    for (size_t i = 0; i < many; i++)
        pool_free(pool, lots[i]);
    assert_int_equal(pool_span_cache_bytes(pool), POOL_SPAN_CACHE_BYTES);
    assert_int_equal(pool_mem_used(pool), 0);
    pool_compact(pool, &ops);
    assert_int_equal(pool_span_cache_bytes(pool), 0);
    free(lots);

    /* Within the limit: used + cached never above it. */
    pool_set_limit(pool, 10 * PAGE);
    for (int i = 0; i < 10; i++)
        assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[i]), 0);
    for (int i = 0; i < 4; i++)
        pool_free(pool, handles[i]);
    assert_int_equal(pool_mem_used(pool) + pool_span_cache_bytes(pool), 10 * PAGE);
    pool_set_limit(pool, 8 * PAGE);
    pool_free(pool, handles[4]);
    assert_int_equal(pool_mem_used(pool), 5 * PAGE);
    assert_true(pool_mem_used(pool) + pool_span_cache_bytes(pool) <= 8 * PAGE);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pool_alloc(pool, PAGE, 1, &handles[i]), 0);
    uint64_t over;
    assert_int_equal(pool_alloc(pool, PAGE, 1, &over), -ENOSPC);
    assert_true(pool_mem_used(pool) + pool_span_cache_bytes(pool) <= 8 * PAGE);
    pool_destroy(pool);
}

/* Owners for the compaction tests: owner i (1-based) refers to entry i. */
struct owner_entry {
    pthread_mutex_t lock;
    uint64_t handle; /* 0: owns nothing */
    uint32_t size;
    uint32_t seed;
    uint32_t moves;
};

struct owner_table {
    struct owner_entry *entries;
    size_t count;
    int refuse_modulo; /* >0: owners divisible by it refuse to be locked */
    atomic_uint refused;
};

static bool table_try_lock(void *arg, uint64_t owner, uint64_t handle)
{
    struct owner_table *table = arg;
    if (owner == 0 || owner > table->count)
        fail_msg("compaction asked for unknown owner %llu", (unsigned long long)owner);
    if (table->refuse_modulo > 0 && owner % (uint64_t)table->refuse_modulo == 0) {
        atomic_fetch_add(&table->refused, 1);
        return false;
    }
    struct owner_entry *entry = &table->entries[owner - 1];
    if (pthread_mutex_trylock(&entry->lock) != 0)
        return false;
    if (entry->handle != handle) {
        pthread_mutex_unlock(&entry->lock);
        return false;
    }
    return true;
}

static bool table_relocate(void *arg, uint64_t owner, uint64_t old_handle, uint64_t new_handle)
{
    struct owner_table *table = arg;
    struct owner_entry *entry = &table->entries[owner - 1];
    if (entry->handle != old_handle)
        fail_msg("relocate of a handle the owner does not hold");
    entry->handle = new_handle;
    entry->moves++;
    pthread_mutex_unlock(&entry->lock);
    return true;
}

static void table_init(struct owner_table *table, size_t count)
{
    table->entries = calloc(count, sizeof *table->entries);
    assert_non_null(table->entries);
    table->count = count;
    table->refuse_modulo = 0;
    atomic_init(&table->refused, 0);
    for (size_t i = 0; i < count; i++)
        pthread_mutex_init(&table->entries[i].lock, NULL);
}

static void table_fini(struct owner_table *table)
{
    for (size_t i = 0; i < table->count; i++)
        pthread_mutex_destroy(&table->entries[i].lock);
    free(table->entries);
}

static struct pool_owner_ops table_ops(struct owner_table *table)
{
    struct pool_owner_ops ops = {
        .try_lock_owner = table_try_lock,
        .relocate = table_relocate,
        .arg = table,
    };
    return ops;
}

#define COMPACT_OBJECTS 6000

/* Allocate COMPACT_OBJECTS of a few sizes, free a random 70%. */
static void fill_and_thin(struct pool *pool, struct owner_table *table, uint64_t seed)
{
    static const uint32_t sizes[] = {24, 300, 1100, 1900, 2700, 3400, 4096};
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed);
    for (size_t i = 0; i < table->count; i++) {
        struct owner_entry *entry = &table->entries[i];
        entry->size = sizes[datagen_rng_below(&rng, sizeof sizes / sizeof sizes[0])];
        entry->size -= (uint32_t)datagen_rng_below(&rng, 8);
        entry->seed = (uint32_t)datagen_rng_next(&rng);
        assert_int_equal(pool_alloc(pool, entry->size, i + 1, &entry->handle), 0);
        fill_pattern(pool_map(pool, entry->handle), entry->size, entry->seed);
    }
    for (size_t i = 0; i < table->count; i++) {
        struct owner_entry *entry = &table->entries[i];
        if (datagen_rng_below(&rng, 100) < 70) {
            pool_free(pool, entry->handle);
            entry->handle = 0;
        }
    }
}

static void verify_and_free_all(struct pool *pool, struct owner_table *table)
{
    for (size_t i = 0; i < table->count; i++) {
        struct owner_entry *entry = &table->entries[i];
        if (!entry->handle)
            continue;
        assert_true(check_pattern(pool_map(pool, entry->handle), entry->size, entry->seed));
        pool_free(pool, entry->handle);
        entry->handle = 0;
    }
    assert_int_equal(pool_mem_used(pool), 0);
}

static void test_compact(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    struct owner_table table;
    table_init(&table, COMPACT_OBJECTS);
    fill_and_thin(pool, &table, 42);
    struct pool_owner_ops ops = table_ops(&table);

    uint64_t before = pool_mem_used(pool);
    uint64_t freed = pool_compact(pool, &ops);
    uint64_t after = pool_mem_used(pool);
    assert_true(freed > 0);
    assert_true(after < before);
    assert_int_equal(before - after, freed * PAGE);
    assert_int_equal(pool_pages_compacted(pool), freed);
    size_t moved = 0;
    for (size_t i = 0; i < table.count; i++) {
        struct owner_entry *entry = &table.entries[i];
        if (!entry->handle)
            continue;
        moved += entry->moves;
        assert_true(check_pattern(pool_map(pool, entry->handle), entry->size, entry->seed));
    }
    assert_true(moved > 0);

    /* Sum of the survivors' costs in full spans: after compaction the pool
     * holds at most a few partly filled spans per class more than that. */
    double ideal = 0;
    for (size_t i = 0; i < table.count; i++)
        if (table.entries[i].handle)
            ideal += pool_object_cost(table.entries[i].size);
    assert_true((double)after <= ideal + 8 * 16.0 * PAGE * 4);

    /* A second round finds little or nothing, and the counter adds up. */
    uint64_t freed_again = pool_compact(pool, &ops);
    assert_int_equal(pool_pages_compacted(pool), freed + freed_again);
    verify_and_free_all(pool, &table);
    table_fini(&table);
    pool_destroy(pool);
}

/* pool_limit.c's decisions: a freed object's footprint adds to the holes; the grace of a
 * replacing object is a span and the holes, within pool_replace_grace_max(), and lets it past
 * a limit the pool is at; a refused write compacts only with holes, and one every 100 ms. */
static void test_limit_decisions(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    uint64_t first, second, third;
    assert_int_equal(pool_alloc(pool, 1000, 1, &first), 0);
    assert_int_equal(pool_alloc(pool, 1000, 2, &second), 0);
    assert_int_equal(pool_alloc(pool, 1000, 3, &third), 0);
    uint64_t holes = pool_hole_bytes(pool);
    pool_free(pool, first);
    uint64_t footprint = pool_hole_bytes(pool) - holes;
    assert_true(footprint >= 1000 + 8 && footprint < 2 * 1000);
    pool_free(pool, second);
    assert_int_equal(pool_hole_bytes(pool), holes + 2 * footprint);
    assert_int_equal(pool_replace_grace(pool), POOL_SPAN_MAX_BYTES + holes + 2 * footprint);
    /* a span of each class and one more: 5.7 MiB with the classes of pool_class.c */
    assert_true(pool_replace_grace_max() > 100 * POOL_SPAN_MAX_BYTES / 2);
    assert_true(pool_replace_grace_max() < (6u << 20));
    /* At the limit a new span is refused, but not to a replacing object. */
    pool_set_limit(pool, pool_mem_used(pool));
    uint64_t huge;
    assert_int_equal(pool_alloc(pool, 4096, 4, &huge), -ENOSPC);
    assert_int_equal(pool_alloc_over(pool, 4096, 4, pool_replace_grace(pool), &huge), 0);
    pool_free(pool, huge);
    pool_free(pool, third);
    pool_set_limit(pool, 0);

    struct owner_table table;
    table_init(&table, COMPACT_OBJECTS);
    fill_and_thin(pool, &table, 7);
    assert_true(pool_hole_bytes(pool) >= pool_mem_used(pool) / 2);
    uint64_t grace = POOL_SPAN_MAX_BYTES + pool_hole_bytes(pool);
    assert_int_equal(pool_replace_grace(pool),
                     grace < pool_replace_grace_max() ? grace : pool_replace_grace_max());
    struct timespec claimed, asked;
    clock_gettime(CLOCK_MONOTONIC, &claimed);
    assert_true(pool_compact_due(pool));
    bool again = pool_compact_due(pool);
    clock_gettime(CLOCK_MONOTONIC, &asked);
    /* taken: the next writer does not compact (unless this thread lost the CPU for 100 ms) */
    if ((asked.tv_sec - claimed.tv_sec) * 1000000000l + asked.tv_nsec - claimed.tv_nsec < 90000000l)
        assert_false(again);
    struct timespec turn = {0, 120 * 1000 * 1000};
    nanosleep(&turn, NULL);
    assert_true(pool_compact_due(pool));
    struct pool_owner_ops ops = table_ops(&table);
    assert_true(pool_compact(pool, &ops) > 0);
    assert_true(pool_hole_bytes(pool) < pool_replace_grace_max());
    verify_and_free_all(pool, &table);
    table_fini(&table);
    assert_int_equal(pool_hole_bytes(pool), 0);
    nanosleep(&turn, NULL);
    assert_false(pool_compact_due(pool)); /* no holes */
    pool_destroy(pool);
}

static void test_compact_with_refusals(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    struct owner_table table;
    table_init(&table, COMPACT_OBJECTS);
    fill_and_thin(pool, &table, 7);
    table.refuse_modulo = 3;
    uint64_t *old_handles = calloc(table.count, sizeof *old_handles);
    assert_non_null(old_handles);
    for (size_t i = 0; i < table.count; i++)
        old_handles[i] = table.entries[i].handle;
    struct pool_owner_ops ops = table_ops(&table);

    uint64_t before = pool_mem_used(pool);
    uint64_t freed = pool_compact(pool, &ops);
    assert_int_equal(before - pool_mem_used(pool), freed * PAGE);
    assert_int_equal(pool_pages_compacted(pool), freed);
    assert_true(atomic_load(&table.refused) > 0);
    for (size_t i = 0; i < table.count; i++) {
        struct owner_entry *entry = &table.entries[i];
        if (!entry->handle)
            continue;
        if ((i + 1) % 3 == 0) {
            assert_int_equal(entry->moves, 0);
            assert_true(entry->handle == old_handles[i]);
        }
        assert_true(check_pattern(pool_map(pool, entry->handle), entry->size, entry->seed));
    }

    /* Once the owners agree, the rest can be compacted too. */
    table.refuse_modulo = 0;
    pool_compact(pool, &ops);
    for (size_t i = 0; i < table.count; i++) {
        struct owner_entry *entry = &table.entries[i];
        if (entry->handle)
            assert_true(check_pattern(pool_map(pool, entry->handle), entry->size, entry->seed));
    }
    verify_and_free_all(pool, &table);
    free(old_handles);
    table_fini(&table);
    pool_destroy(pool);
}

/* Objects still allocated at destroy time are released with the pool
 * (ASan/LSan would report a leak otherwise). */
static void test_destroy_with_live_objects(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    uint64_t handle;
    for (size_t size = 1; size <= POOL_MAX_OBJECT; size += 37)
        assert_int_equal(pool_alloc(pool, size, 1, &handle), 0);
    assert_true(pool_mem_used(pool) > 0);
    pool_destroy(pool);
}

#define THREAD_WORKERS 4
#define OWNERS_PER_WORKER 256
#define WORKER_STEPS 12000

struct thread_test {
    struct pool *pool;
    struct owner_table table;
    atomic_int workers_left;
    atomic_uint failures;
};

struct worker_arg {
    struct thread_test *test;
    unsigned id;
};

static void *worker_main(void *opaque)
{
    struct worker_arg *arg = opaque;
    struct thread_test *test = arg->test;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 1000 + arg->id);
    size_t first = (size_t)arg->id * OWNERS_PER_WORKER;
    for (unsigned step = 0; step < WORKER_STEPS; step++) {
        size_t index = first + datagen_rng_below(&rng, OWNERS_PER_WORKER);
        struct owner_entry *entry = &test->table.entries[index];
        pthread_mutex_lock(&entry->lock);
        uint64_t handle = entry->handle;
        if (handle) {
            if (!check_pattern(pool_map(test->pool, handle), entry->size, entry->seed))
                atomic_fetch_add(&test->failures, 1);
            bool drop = datagen_rng_below(&rng, 3) != 0;
            if (drop)
                entry->handle = 0;
            pthread_mutex_unlock(&entry->lock);
            if (drop)
                pool_free(test->pool, handle);
            continue;
        }
        pthread_mutex_unlock(&entry->lock);
        /* Mostly mid-size objects like compressed pages, some extremes. */
        uint32_t size = datagen_rng_below(&rng, 8) == 0
                            ? (uint32_t)(1 + datagen_rng_below(&rng, POOL_MAX_OBJECT))
                            : (uint32_t)(800 + datagen_rng_below(&rng, 2400));
        uint32_t seed = (uint32_t)datagen_rng_next(&rng);
        if (pool_alloc(test->pool, size, index + 1, &handle) != 0) {
            atomic_fetch_add(&test->failures, 1);
            continue;
        }
        /* Written before the owner publishes it: compaction cannot move an
         * object its owner does not refer to yet. */
        fill_pattern(pool_map(test->pool, handle), size, seed);
        pthread_mutex_lock(&entry->lock);
        entry->handle = handle;
        entry->size = size;
        entry->seed = seed;
        pthread_mutex_unlock(&entry->lock);
    }
    atomic_fetch_sub(&test->workers_left, 1);
    return NULL;
}

static void *compactor_main(void *opaque)
{
    struct thread_test *test = opaque;
    struct pool_owner_ops ops = table_ops(&test->table);
    uint64_t total = 0;
    while (atomic_load(&test->workers_left) > 0) {
        total += pool_compact(test->pool, &ops);
        sched_yield();
    }
    total += pool_compact(test->pool, &ops);
    if (total != pool_pages_compacted(test->pool))
        atomic_fetch_add(&test->failures, 1);
    return NULL;
}

/* A number from /proc/self/status ("VmRSS:"), in KiB; lines of /proc/self/maps. */
static long self_status_kib(const char *key)
{
    FILE *status = fopen("/proc/self/status", "r");
    char line[256];
    long value = -1;
    while (status != NULL && fgets(line, sizeof line, status))
        if (strncmp(line, key, strlen(key)) == 0)
            value = atol(line + strlen(key));
    if (status != NULL)
        fclose(status);
    return value;
}

static long self_mappings(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    long lines = 0;
    for (int c; maps != NULL && (c = fgetc(maps)) != EOF;)
        lines += c == '\n';
    if (maps != NULL)
        fclose(maps);
    return lines;
}

/* The body of test_locked_memory_goes_back, in a child process (mlockall changes the
 * whole process): 0 when freed spans leave RSS, 77 when memory cannot be locked here. */
static int locked_memory_child(void)
{
    enum { OBJECTS = 12288, SIZE = 2800 }; /* ~35 MiB of spans */
    static uint64_t handles[OBJECTS];
    if (mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) < 0)
        return 77;
    /* AddressSanitizer makes mlockall() a no-op: nothing is locked, nothing to check. */
    if (self_status_kib("VmLck:") <= 0)
        return 77;
    struct pool *pool = NULL;
    if (pool_create(&pool) < 0)
        return 2;
    for (int round = 0; round < 3; round++) {
        long maps_before = self_mappings();
        for (uint32_t i = 0; i < OBJECTS; i++) {
            if (pool_alloc(pool, SIZE, i + 1, &handles[i]) < 0)
                return 3;
            fill_pattern(pool_map(pool, handles[i]), SIZE, i);
        }
        long full = self_status_kib("VmRSS:");
        for (uint32_t i = 0; i < OBJECTS; i++)
            pool_free(pool, handles[i]);
        long empty = self_status_kib("VmRSS:");
        long locked = self_status_kib("VmLck:");
        fprintf(stderr,
                "round %d: VmRSS %ld kB full, %ld kB after freeing; VmLck %ld kB; %ld -> %ld "
                "mappings\n",
                round, full, empty, locked, maps_before, self_mappings());
        /* All but the span cache (kept resident on purpose, at most
         * POOL_SPAN_CACHE_BYTES) leaves RSS. */
        long cached = (long)(pool_span_cache_bytes(pool) / 1024);
        if (locked <= 0 || full - empty + cached < 28 * 1024 || pool_mem_used(pool) != 0 ||
            cached > (long)(POOL_SPAN_CACHE_BYTES / 1024))
            return 4;
        /* Freed spans are mapped over, not split off for ever: the count stays put. */
        if (self_mappings() > maps_before + 8)
            return 5;
    }
    pool_destroy(pool);
    return 0;
}

/* Under mlockall() (`uzram serve --swap`), madvise(MADV_DONTNEED) refuses locked pages: the
 * pool must still give freed spans back, or a swap device would never shrink. */
static void test_locked_memory_goes_back(void **state)
{
    (void)state;
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(locked_memory_child());
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        skip(); /* no CAP_IPC_LOCK and too small a RLIMIT_MEMLOCK, or ASan's no-op mlockall */
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_concurrent_threads(void **state)
{
    (void)state;
    struct thread_test test;
    test.pool = new_pool();
    table_init(&test.table, THREAD_WORKERS * OWNERS_PER_WORKER);
    atomic_init(&test.workers_left, THREAD_WORKERS);
    atomic_init(&test.failures, 0);

    pthread_t workers[THREAD_WORKERS];
    struct worker_arg args[THREAD_WORKERS];
    pthread_t compactor;
    for (unsigned i = 0; i < THREAD_WORKERS; i++) {
        args[i].test = &test;
        args[i].id = i;
        assert_int_equal(pthread_create(&workers[i], NULL, worker_main, &args[i]), 0);
    }
    assert_int_equal(pthread_create(&compactor, NULL, compactor_main, &test), 0);
    for (unsigned i = 0; i < THREAD_WORKERS; i++)
        pthread_join(workers[i], NULL);
    pthread_join(compactor, NULL);
    assert_int_equal(atomic_load(&test.failures), 0);

    verify_and_free_all(test.pool, &test.table);
    assert_true(pool_mem_used_max(test.pool) > 0);
    table_fini(&test.table);
    pool_destroy(test.pool);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_every_size),
        cmocka_unit_test(test_mem_used_moves_by_spans),
        cmocka_unit_test(test_mem_used_max),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_span_cache),
        cmocka_unit_test(test_object_cost),
        cmocka_unit_test(test_compact),
        cmocka_unit_test(test_limit_decisions),
        cmocka_unit_test(test_compact_with_refusals),
        cmocka_unit_test(test_destroy_with_live_objects),
        cmocka_unit_test(test_locked_memory_goes_back),
        cmocka_unit_test(test_concurrent_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
