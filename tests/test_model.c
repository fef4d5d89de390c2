/* test_model.c - model-based random test of the engine against a plain in-memory array.
 * Random I/O, resets, compaction, memory limits, recompression and writeback to a backing file,
 * single-threaded and multi-threaded. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model.h"
#include "model_util.h"
#include "test_util.h"

/*
 * Environment knobs, so a failure found once can be replayed:
 *   UZRAM_TEST_SEED    seed of the random operations (printed on failure)
 *   UZRAM_TEST_OPS     operations per single-threaded run (per thread when
 *                      threaded; concurrent tests use a quarter of it)
 *   UZRAM_TEST_FILTER  run only tests whose name contains this (or matches
 *                      it as a glob); argv[1] does the same. `make tsan`
 *                      passes "concurrent".
 */

/* ------------------------------------------------------------------------
 * Single-threaded runs
 * ---------------------------------------------------------------------- */

static void run_single(const struct model_options *options, uint64_t default_seed)
{
    struct model m;
    memset(&m, 0, sizeof m);
    m.name = options->name;
    m.dev = make_device(options);
    assert_non_null(m.dev);
    m.seed = test_seed(default_seed);
    datagen_rng_seed(&m.rng, m.seed);
    m.base = 0;
    m.length = options->disksize;
    m.pages = m.length / PAGE;
    m.data = calloc(1, m.length);
    m.state = calloc(1, m.pages);
    assert_non_null(m.data);
    assert_non_null(m.state);
    m.same_filled = options->same_filled;
    m.use_dedup = options->use_dedup;
    m.shared_contents = options->shared_contents;
    m.recompress = options->recompress[0] != NULL;
    m.backing = options->backing;
    m.when_full = options->when_full;
    m.whole_device = true;
    model_buffers(&m);

    model_run(&m, test_ops(DEFAULT_OPS));
    if (!m.failed) {
        snprintf(m.op_text, sizeof m.op_text, "final stats check");
        check_stats(&m);
        /* End empty: every counter of stored data must come back to 0. */
        if (m.limit_active)
            op_mem_limit(&m);
        op_discard_all(&m);
    }
    struct uzram_stats last = test_stats(m.dev);
    m.written_back += last.bd_writes;
    m.read_back += last.bd_reads;
    if (getenv("UZRAM_TEST_VERBOSE"))
        fprintf(stderr,
                "[%s] seed %llu: %llu failed requests since the last reset, %llu resets, "
                "%llu pages compacted, %llu pages written back and %llu read back\n",
                m.name, (unsigned long long)m.seed, (unsigned long long)m.failed_requests,
                (unsigned long long)m.resets, (unsigned long long)m.compacted_pages,
                (unsigned long long)m.written_back, (unsigned long long)m.read_back);
    bool failed = m.failed;
    uzram_destroy(m.dev);
    model_free_buffers(&m);
    free(m.data);
    free(m.state);
    assert_false(failed);
}

#define MIB (1024ull * 1024ull)

static void test_model_lz4(void **state)
{
    (void)state;
    struct model_options o = {"model_lz4",         "lz4",          true, false, false, 8 * MIB,
                              {"zstd", "deflate"}, .backing = true};
    run_single(&o, 1001);
}

static void test_model_lz4hc(void **state)
{
    (void)state;
    struct model_options o = {"model_lz4hc",       "lz4hc",         true, false, false, 8 * MIB,
                              {"deflate", "zstd"}, .backing = false};
    run_single(&o, 1002);
}

static void test_model_zstd(void **state)
{
    (void)state;
    struct model_options o = {
        "model_zstd",    "zstd",           true, false, false, 8 * MIB, {"lz4hc", "lzo"},
        .backing = true, .when_full = true};
    run_single(&o, 1003);
}

static void test_model_lzo(void **state)
{
    (void)state;
    struct model_options o = {"model_lzo",     "lzo",           true, false, false, 8 * MIB,
                              {"zstd", "lz4"}, .backing = false};
    run_single(&o, 1004);
}

static void test_model_deflate(void **state)
{
    (void)state;
    struct model_options o = {"model_deflate", "deflate",       true, false, false, 8 * MIB,
                              {"lzo", "zstd"}, .backing = false};
    run_single(&o, 1005);
}

static void test_model_no_same_filled(void **state)
{
    (void)state;
    struct model_options o = {"model_no_same_filled", "lz4",           false, false, false, 8 * MIB,
                              {"lz4hc", NULL},        .backing = false};
    run_single(&o, 1006);
}

static void test_model_dedup(void **state)
{
    (void)state;
    struct model_options o = {"model_dedup",     "lz4",          true, true, true, 8 * MIB,
                              {"zstd", "lz4hc"}, .backing = true};
    run_single(&o, 1007);
}

static void test_model_dedup_zstd_unique(void **state)
{
    (void)state;
    /* Dedup on but mostly unique pages: the index under churn. */
    struct model_options o = {
        "model_dedup_zstd_unique", "zstd",           true, true, false, 8 * MIB, {"deflate", NULL},
        .backing = true,           .when_full = true};
    run_single(&o, 1008);
}

/* ------------------------------------------------------------------------
 * Concurrent: disjoint ranges, exact verification per thread
 * ---------------------------------------------------------------------- */

#define THREADS 4

struct model_thread {
    struct model model;
    uint64_t ops;
};

static void *model_thread_main(void *arg)
{
    struct model_thread *t = arg;
    model_run(&t->model, t->ops);
    return NULL;
}

static void run_disjoint(const struct model_options *options, uint64_t default_seed)
{
    struct uzram *dev = make_device(options);
    assert_non_null(dev);
    uint64_t pages = options->disksize / PAGE;
    uint8_t *data = calloc(1, options->disksize);
    uint8_t *states = calloc(1, pages);
    assert_non_null(data);
    assert_non_null(states);
    uint64_t seed = test_seed(default_seed);
    uint64_t ops = test_ops(DEFAULT_OPS) / 4;
    if (ops == 0)
        ops = 1;

    struct model_thread threads[THREADS];
    pthread_t ids[THREADS];
    uint64_t region_pages = pages / THREADS;
    for (int i = 0; i < THREADS; i++) {
        struct model *m = &threads[i].model;
        memset(m, 0, sizeof *m);
        m->name = options->name;
        m->dev = dev;
        m->seed = seed + (uint64_t)i;
        datagen_rng_seed(&m->rng, m->seed);
        m->base = (uint64_t)i * region_pages * PAGE;
        m->length = region_pages * PAGE;
        m->pages = region_pages;
        m->data = data + m->base;
        m->state = states + (uint64_t)i * region_pages;
        m->same_filled = options->same_filled;
        m->use_dedup = options->use_dedup;
        m->shared_contents = options->shared_contents;
        m->recompress = options->recompress[0] != NULL;
        m->dictionary_done = i != 0; /* one thread trains */
        m->backing = options->backing;
        m->when_full = options->when_full;
        m->whole_device = false;
        model_buffers(m);
        threads[i].ops = ops;
    }

    struct background bg = {.dev = dev, .backing = options->backing};
    /* With writeback when full, a pool of a quarter of the disk: writes
     * make room all the time. */
    if (options->when_full)
        assert_int_equal(uzram_set_mem_limit(dev, options->disksize / 4), 0);
    pthread_t compactor;
    assert_int_equal(pthread_create(&compactor, NULL, compactor_main, &bg), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&ids[i], NULL, model_thread_main, &threads[i]), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(ids[i], NULL);
    __atomic_store_n(&bg.stop, 1, __ATOMIC_RELEASE);
    pthread_join(compactor, NULL);
    /* quiet from here: the library's writeback thread too */
    assert_int_equal(uzram_set_writeback_when_full(dev, false), 0);
    assert_int_equal(uzram_set_mem_limit(dev, 0), 0);

    bool failed = false;
    for (int i = 0; i < THREADS; i++) {
        if (threads[i].model.failed)
            fprintf(stderr, "thread %d failed (seed %llu)\n", i,
                    (unsigned long long)threads[i].model.seed);
        failed |= threads[i].model.failed;
        model_free_buffers(&threads[i].model);
    }
    if (bg.error != 0) {
        fprintf(stderr, "compactor thread saw error %d\n", bg.error);
        failed = true;
    }

    /* Quiet now: the whole device as one model, with exact stats checks. */
    if (!failed) {
        struct model whole;
        memset(&whole, 0, sizeof whole);
        whole.name = options->name;
        whole.dev = dev;
        whole.seed = seed;
        datagen_rng_seed(&whole.rng, seed);
        whole.base = 0;
        whole.length = region_pages * THREADS * PAGE;
        whole.pages = region_pages * THREADS;
        whole.data = data;
        whole.state = states;
        whole.same_filled = options->same_filled;
        whole.use_dedup = options->use_dedup;
        whole.shared_contents = options->shared_contents;
        whole.backing = options->backing;
        whole.whole_device = true;
        model_buffers(&whole);
        verify_all(&whole);
        snprintf(whole.op_text, sizeof whole.op_text, "stats check after threads");
        check_stats(&whole);
        /* The region may not cover the last pages; discard the full disk. */
        whole.length = options->disksize;
        whole.pages = pages;
        if (!whole.failed)
            op_discard_all(&whole);
        failed = whole.failed;
        model_free_buffers(&whole);
    }
    uzram_destroy(dev);
    free(data);
    free(states);
    assert_false(failed);
}

static void test_concurrent_disjoint(void **state)
{
    (void)state;
    struct model_options o = {
        "concurrent_disjoint", "lz4", true, false, false, 8 * MIB, {"zstd", NULL}, .backing = true,
        .when_full = true};
    run_disjoint(&o, 2001);
}

static void test_concurrent_disjoint_zstd(void **state)
{
    (void)state;
    struct model_options o = {
        "concurrent_disjoint_zstd", "zstd",          true, false, false, 8 * MIB,
        {"deflate", "lz4"},         .backing = false};
    run_disjoint(&o, 2002);
}

static void test_concurrent_disjoint_dedup(void **state)
{
    (void)state;
    /* Threads share objects across their regions through the dedup index. */
    struct model_options o = {"concurrent_disjoint_dedup",
                              "lz4",
                              true,
                              true,
                              true,
                              8 * MIB,
                              {"zstd", NULL},
                              .backing = true,
                              .when_full = true};
    run_disjoint(&o, 2003);
}

int main(int argc, char **argv)
{
    make_dedup_set();
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_lz4),
        cmocka_unit_test(test_model_lz4hc),
        cmocka_unit_test(test_model_zstd),
        cmocka_unit_test(test_model_lzo),
        cmocka_unit_test(test_model_deflate),
        cmocka_unit_test(test_model_no_same_filled),
        cmocka_unit_test(test_model_dedup),
        cmocka_unit_test(test_model_dedup_zstd_unique),
        cmocka_unit_test(test_concurrent_disjoint),
        cmocka_unit_test(test_concurrent_disjoint_zstd),
        cmocka_unit_test(test_concurrent_disjoint_dedup),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
