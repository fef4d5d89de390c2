/* test_tiering.c - unit tests of the two tiers under load (issue 24): a reset stops the
 * passes begun before it, writeback_limit counts page by page, the coldest pages go to the
 * backing store first while pages in use stay, a written-back page read again comes back,
 * and recompression runs at mem_limit. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "device/device.h"  /* slots */
#include "store/store.h"    /* store_test_advance_clock */
#include "tier/writeback.h" /* writeback_test_no_thread */
#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE

/* A device of `pages` pages with a backing file in memory, a memory limit and writeback
 * when full; `thread`: with the library's thread (else writes make room alone, at
 * moments the test decides). The contents written are kept in `model`. */
struct tiers {
    struct uzram *dev;
    uint64_t pages;
    unsigned char *model;
};

static void tiers_open_on(struct tiers *t, uint64_t pages, uint64_t limit, bool thread, bool memory)
{
    t->pages = pages;
    t->dev = test_device(pages * PAGE, "lz4", false);
    t->model = calloc(pages, PAGE);
    assert_non_null(t->model);
    if (!thread)
        writeback_test_no_thread(t->dev);
    assert_int_equal(test_attach_backing(t->dev, memory), 0);
    assert_int_equal(uzram_set_mem_limit(t->dev, limit), 0);
    assert_int_equal(uzram_set_writeback_when_full(t->dev, true), 0);
}

static void tiers_open(struct tiers *t, uint64_t pages, uint64_t limit, bool thread)
{
    tiers_open_on(t, pages, limit, thread, true);
}

static void tiers_close(struct tiers *t)
{
    uzram_destroy(t->dev);
    free(t->model);
}

static int tiers_write_kind(struct tiers *t, uint64_t index, uint64_t seed, enum datagen_kind kind)
{
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed * 7919 + index);
    unsigned char *page = t->model + index * PAGE;
    datagen_fill(&rng, kind, page, PAGE);
    return uzram_write(t->dev, index * PAGE, page, PAGE);
}

static int tiers_write(struct tiers *t, uint64_t index, uint64_t seed)
{
    return tiers_write_kind(t, index, seed, DATAGEN_TEXT);
}

static void tiers_read(struct tiers *t, uint64_t index)
{
    unsigned char page[PAGE];
    assert_int_equal(uzram_read(t->dev, index * PAGE, page, PAGE), 0);
    assert_memory_equal(page, t->model + index * PAGE, PAGE);
}

static enum slot_state state_of(struct tiers *t, uint64_t index)
{
    return slot_info_state(atomic_load(&t->dev->slots[index].info));
}

static bool in_memory(struct tiers *t, uint64_t index)
{
    enum slot_state state = state_of(t, index);
    return state == SLOT_COMPRESSED || state == SLOT_HUGE;
}

/* ---- the coldest first -------------------------------------------------------------- */

/* A hot set read throughout stays in memory while cold pages, and pages written since but
 * not read, go to the store. The hot set sits at the start of the table, where a sweep in
 * table order would take it first. Between two rounds of writes the hot set is read, so
 * that at each moment a page has to go, pages older than the hot set are in memory. */
static void test_coldest_first(void **state)
{
    (void)state;
    struct tiers t;
    tiers_open(&t, 4096, 256 * 1024, false);
    /* memory holds about 90 of these pages */
    const uint64_t hot = 20, cold_first = 100, cold_end = 400, rounds = 100, step = 10;
    for (uint64_t i = cold_first; i < cold_end; i++)
        assert_int_equal(tiers_write(&t, i, 1), 0);
    store_test_advance_clock(t.dev, 10);
    for (uint64_t i = 0; i < hot; i++)
        assert_int_equal(tiers_write(&t, i, 2), 0);
    for (uint64_t round = 0; round < rounds; round++) {
        store_test_advance_clock(t.dev, 1);
        for (uint64_t i = 0; i < hot; i++)
            tiers_read(&t, i);
        store_test_advance_clock(t.dev, 1);
        for (uint64_t i = 0; i < step; i++)
            assert_int_equal(tiers_write(&t, cold_end + round * step + i, 3), 0);
    }
    struct uzram_stats s = test_stats(t.dev);
    assert_true(s.bd_objects > (cold_end - cold_first) + step * rounds / 2);
    for (uint64_t i = 0; i < hot; i++)
        if (!in_memory(&t, i))
            fail_msg("hot page %llu was written back (state %d); %llu pages on the store",
                     (unsigned long long)i, state_of(&t, i), (unsigned long long)s.bd_objects);
    for (uint64_t i = cold_first; i < cold_end; i++)
        if (state_of(&t, i) != SLOT_BACKED)
            fail_msg("cold page %llu is still in memory", (unsigned long long)i);
    for (uint64_t i = 0; i < cold_end + rounds * step; i++)
        tiers_read(&t, i);
    tiers_close(&t);
}

/* ---- back into memory -------------------------------------------------------------- */

/* A written-back page read a second time comes back into memory when there is room; read
 * once it stays on the store (a scan passing by), and without room it stays too. */
static void test_read_again_comes_back(void **state)
{
    (void)state;
    struct tiers t;
    tiers_open(&t, 2048, 256 * 1024, false);
    for (uint64_t i = 0; i < 1024; i++)
        assert_int_equal(tiers_write(&t, i, 4), 0);
    assert_int_equal(state_of(&t, 0), SLOT_BACKED);
    assert_int_equal(state_of(&t, 1), SLOT_BACKED);

    /* the pool at the limit: read twice, page 0 stays on the store */
    assert_int_equal(uzram_set_mem_limit(t.dev, test_stats(t.dev).mem_used_total), 0);
    tiers_read(&t, 0);
    tiers_read(&t, 0);
    assert_int_equal(state_of(&t, 0), SLOT_BACKED);
    assert_int_equal(uzram_set_mem_limit(t.dev, 256 * 1024), 0);

    /* room: most pages away */
    assert_int_equal(uzram_discard(t.dev, 512 * PAGE, 512 * PAGE), 0);
    memset(t.model + 512 * PAGE, 0, 512 * PAGE);
    assert_int_equal(uzram_compact(t.dev, NULL), 0);
    struct uzram_stats before = test_stats(t.dev);
    assert_true(before.mem_used_total + 128 * 1024 < 256 * 1024);

    /* page 1, read once: still on the store; read again: in memory, read from there */
    tiers_read(&t, 1);
    assert_int_equal(state_of(&t, 1), SLOT_BACKED);
    tiers_read(&t, 1);
    assert_true(in_memory(&t, 1));
    struct uzram_stats after = test_stats(t.dev);
    assert_int_equal(after.bd_objects, before.bd_objects - 1);
    assert_int_equal(after.bd_reads, before.bd_reads + 2);
    assert_true(after.compr_data_size > before.compr_data_size);
    assert_int_equal(after.pages_stored, before.pages_stored);
    for (int i = 0; i < 5; i++)
        tiers_read(&t, 1);
    assert_int_equal(test_stats(t.dev).bd_reads, after.bd_reads);
    /* page 0, marked by its reads while there was no room, comes back at its next read */
    tiers_read(&t, 0);
    assert_true(in_memory(&t, 0));
    for (uint64_t i = 0; i < 1024; i++)
        tiers_read(&t, i);
    tiers_close(&t);
}

/* ---- recompression at the limit ------------------------------------------------------ */

/* recompress type=idle makes room: it runs with the pool at mem_limit, where a write
 * fails. */
static void test_recompress_at_limit(void **state)
{
    (void)state;
    const uint64_t limit = 512 * 1024;
    struct uzram *dev = test_device(8u << 20, "lz4", false);
    assert_int_equal(uzram_set_mem_limit(dev, limit), 0);
    unsigned char *model = calloc(2048, PAGE);
    assert_non_null(model);
    uint64_t pages = 0;
    int rc = 0;
    while (rc == 0 && pages < 2048) {
        struct datagen_rng rng;
        datagen_rng_seed(&rng, 100 + pages);
        datagen_fill(&rng, DATAGEN_TEXT, model + pages * PAGE, PAGE);
        rc = uzram_write(dev, pages * PAGE, model + pages * PAGE, PAGE);
        pages += rc == 0;
    }
    assert_int_equal(rc, -ENOSPC);
    memset(model + pages * PAGE, 0, PAGE);
    assert_int_equal(uzram_attr_set(dev, "recomp_algorithm", "algo=zstd"), 0);
    assert_int_equal(uzram_attr_set(dev, "idle", "all"), 0);
    struct uzram_stats before = test_stats(dev);
    assert_int_equal(uzram_attr_set(dev, "recompress", "type=idle"), 0);
    struct uzram_stats after = test_stats(dev);
    assert_true(after.recomp_pages > pages / 2);
    assert_true(after.compr_data_size < before.compr_data_size);
    assert_true(after.mem_used_total <= limit + 64 * 1024);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    assert_true(test_stats(dev).mem_used_total < before.mem_used_total);
    unsigned char *back = malloc(pages * PAGE);
    assert_non_null(back);
    assert_int_equal(uzram_read(dev, 0, back, pages * PAGE), 0);
    assert_memory_equal(back, model, pages * PAGE);
    /* and there is room for more writes again */
    assert_int_equal(uzram_write(dev, pages * PAGE, model, PAGE), 0);
    free(back);
    free(model);
    uzram_destroy(dev);
}

/* ---- reset and the passes begun before it ---------------------------------------------- */

struct passer {
    struct uzram *dev;
    _Atomic int round; /* the round to run a pass for; -1: leave */
    _Atomic int started, done;
};

/* One writeback pass over the whole disk per round, when the test says. */
static void *passer_main(void *arg)
{
    struct passer *p = arg;
    for (int round = 0;; round++) {
        while (atomic_load(&p->round) >= 0 && atomic_load(&p->round) < round)
            sched_yield();
        if (atomic_load(&p->round) < 0)
            return NULL;
        atomic_store(&p->started, round + 1);
        uzram_writeback(p->dev, 0, 0, UINT64_MAX, NULL);
        atomic_store(&p->done, round + 1);
    }
}

/* zram: a reset sets writeback_limit to 0. After reset, limit 3 and a fill past mem_limit,
 * exactly 3 pages are written back, and no more later: no pass begun before the reset (a
 * writeback by request, busy with the pages of before when the reset comes; the thread's)
 * goes on after it with what it knew before, and every pass checks the limit page by page.
 * The fill writes ahead of where the pass by request was. Ten times in a row. */
static void test_concurrent_reset_limit(void **state)
{
    (void)state;
    struct tiers t;
    /* on a real file system: batches take their time to write */
    tiers_open_on(&t, 8192, 512 * 1024, true, false);
    struct passer passer = {.dev = t.dev, .round = 0};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, passer_main, &passer), 0);
    for (int round = 0; round < 10; round++) {
        assert_int_equal(uzram_set_writeback_limit_enable(t.dev, false), 0);
        assert_int_equal(uzram_set_mem_limit(t.dev, 0), 0);
        for (uint64_t i = 0; i < 4096; i++)
            assert_int_equal(tiers_write_kind(&t, i, 5 + (uint64_t)round, DATAGEN_RANDOM), 0);
        atomic_store(&passer.round, round);
        while (atomic_load(&passer.started) <= round)
            sched_yield();
        usleep(2000); /* the pass is writing back the pages of before */
        assert_int_equal(uzram_reset(t.dev), 0);
        assert_int_equal(uzram_set_mem_limit(t.dev, 512 * 1024), 0);
        assert_int_equal(uzram_set_writeback_limit_enable(t.dev, true), 0);
        assert_int_equal(uzram_set_writeback_limit(t.dev, 3), 0);
        int rc = 0;
        for (uint64_t i = 4096; i < t.pages && rc == 0; i++)
            rc = tiers_write(&t, i, 50 + (uint64_t)round);
        assert_int_equal(rc, -ENOSPC);
        while (atomic_load(&passer.done) <= round)
            sched_yield();
        struct uzram_stats s = test_stats(t.dev);
        if (s.bd_writes != 3)
            fail_msg("round %d: %llu pages written back with writeback_limit 3", round,
                     (unsigned long long)s.bd_writes);
        assert_int_equal(s.writeback_limit, 0);
        assert_true(s.bd_objects <= 3);
        usleep(20000);
        assert_int_equal(test_stats(t.dev).bd_writes, 3);
        assert_int_equal(uzram_reset(t.dev), 0);
    }
    atomic_store(&passer.round, -1);
    pthread_join(thread, NULL);
    struct uzram_stats s = test_stats(t.dev);
    assert_int_equal(s.pages_stored + s.bd_objects + s.bd_writes, 0);
    tiers_close(&t);
}

struct limited_pass {
    struct uzram *dev;
    uint64_t written;
    int rc;
};

static void *limited_pass_main(void *arg)
{
    struct limited_pass *p = arg;
    p->rc = uzram_writeback(p->dev, 0, 0, UINT64_MAX, &p->written);
    return NULL;
}

/* writeback_limit lowered while a pass runs counts at once (zram checks it page by page):
 * the pass ends within a batch or two of the change, not at the limit it began with. */
static void test_concurrent_limit_lowered(void **state)
{
    (void)state;
    struct tiers t;
    tiers_open_on(&t, 8192, 0, false, false);
    for (uint64_t i = 0; i < 4096; i++)
        assert_int_equal(tiers_write_kind(&t, i, 6, DATAGEN_RANDOM), 0);
    assert_int_equal(uzram_set_writeback_limit(t.dev, 2000), 0);
    assert_int_equal(uzram_set_writeback_limit_enable(t.dev, true), 0);
    struct limited_pass pass = {.dev = t.dev};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, limited_pass_main, &pass), 0);
    while (test_stats(t.dev).bd_writes == 0)
        sched_yield();
    assert_int_equal(uzram_set_writeback_limit(t.dev, 3), 0);
    uint64_t at_change = test_stats(t.dev).bd_writes;
    pthread_join(thread, NULL);
    assert_int_equal(pass.rc, -EIO);
    struct uzram_stats s = test_stats(t.dev);
    /* the batch being filled (at most 64 pages taken under the old limit), then 3 */
    if (s.bd_writes > at_change + 64 + 3)
        fail_msg("%llu pages written back, %llu when the limit went from 2000 to 3",
                 (unsigned long long)s.bd_writes, (unsigned long long)at_change);
    assert_int_equal(s.writeback_limit, 0);
    for (uint64_t i = 0; i < 4096; i += 7)
        tiers_read(&t, i);
    tiers_close(&t);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_coldest_first),
        cmocka_unit_test(test_read_again_comes_back),
        cmocka_unit_test(test_recompress_at_limit),
        cmocka_unit_test(test_concurrent_reset_limit),
        cmocka_unit_test(test_concurrent_limit_lowered),
    };
    return cmocka_run_group_tests_name("tiering", tests, NULL, NULL);
}
