/* test_limits.c - unit tests of memory limits and compaction (libuzram's public contract):
 * mem_limit on one device, a group's limit shared by several (and devices joining it while
 * others write), and compaction giving pool pages back with every page intact, by request or
 * when a write the limit refuses finds the pool full of holes. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define DISK_PAGES TEST_DEVICE_PAGES /* the fixture test_setup_device() makes */
#define DISK_SIZE ((uint64_t)DISK_PAGES * PAGE)

/* ------------------------------------------------------------------------
 * Memory limit
 * ---------------------------------------------------------------------- */

static void test_mem_limit(void **state)
{
    struct uzram *dev = *state;
    uint8_t old_page[PAGE], new_pages[3 * PAGE];
    test_fill_kind(1, DATAGEN_TEXT, old_page, PAGE);
    test_write_pages(dev, 10, old_page, 1);
    test_write_pages(dev, 11, old_page, 1);
    test_write_pages(dev, 12, old_page, 1);
    struct uzram_stats s0 = test_stats(dev);
    assert_true(s0.mem_used_total > 0);

    /* No room for one more pool page: a huge page cannot be stored. */
    assert_int_equal(uzram_set_mem_limit(dev, s0.mem_used_total), 0);
    assert_int_equal(test_stats(dev).mem_limit, s0.mem_used_total);
    test_fill_kind(2, DATAGEN_RANDOM, new_pages, PAGE);
    assert_int_equal(uzram_write(dev, 10 * PAGE, new_pages, PAGE), -ENOSPC);
    test_expect_pages(dev, 10, old_page, 1);
    struct uzram_stats s1 = test_stats(dev);
    assert_int_equal(s1.failed_writes, s0.failed_writes + 1);
    assert_true(s1.mem_used_total <= s0.mem_used_total);
    assert_int_equal(s1.pages_stored, 3);

    /* In a multi-page write, pages are written in order: the same-filled
     * first page (no pool memory) lands, the huge second one fails, and the
     * third keeps its old content although it would have fitted. */
    test_fill_word(new_pages, 0x5555555555555555ull);
    test_fill_kind(3, DATAGEN_RANDOM, new_pages + PAGE, PAGE);
    test_fill_word(new_pages + 2 * PAGE, 0x6666666666666666ull);
    assert_int_equal(uzram_write(dev, 10 * PAGE, new_pages, 3 * PAGE), -ENOSPC);
    test_expect_pages(dev, 10, new_pages, 1);
    test_expect_pages(dev, 11, old_page, 1);
    test_expect_pages(dev, 12, old_page, 1);
    struct uzram_stats s2 = test_stats(dev);
    assert_true(s2.failed_writes >= s1.failed_writes + 1);
    assert_true(s2.mem_used_total <= s0.mem_used_total);

    /* Raising the limit lets the same write through. */
    assert_int_equal(uzram_set_mem_limit(dev, 0), 0);
    assert_int_equal(uzram_write(dev, 10 * PAGE, new_pages, 3 * PAGE), 0);
    test_expect_pages(dev, 10, new_pages, 3);
    assert_int_equal(test_stats(dev).mem_limit, 0);

    /* A limit well above use admits writes until the pool is full; no
     * write may take it past the limit, and every failed page reads old. */
    struct uzram_stats s3 = test_stats(dev);
    uint64_t limit = s3.mem_used_total + 16 * PAGE;
    assert_int_equal(uzram_set_mem_limit(dev, limit), 0);
    uint8_t page[PAGE];
    int failures = 0;
    for (unsigned p = 20; p < 60; p++) {
        test_fill_kind(100 + p, DATAGEN_RANDOM, page, PAGE);
        int rc = uzram_write(dev, p * PAGE, page, PAGE);
        if (rc == 0) {
            test_expect_pages(dev, p, page, 1);
        } else {
            assert_int_equal(rc, -ENOSPC);
            test_expect_zero_pages(dev, p, 1);
            failures++;
        }
        assert_true(test_stats(dev).mem_used_total <= limit);
    }
    assert_true(failures > 0);
    assert_true(failures < 40);
}

/* A group's limit (uzram serve --server-mem-limit) holds over several devices: a write to
 * any of them that would pass it fails with -ENOSPC like a device's own limit, what the
 * others free is room for all, and the group counts its devices' pool memory and tables. */
static void test_group_mem_limit(void **state)
{
    (void)state;
    struct uzram_group *group;
    assert_int_equal(uzram_group_create(24 * PAGE, &group), 0);
    struct uzram *a = test_device(1 << 20, NULL, 0), *b = test_device(1 << 20, NULL, 0);
    assert_int_equal(uzram_set_group(a, group), 0);
    assert_int_equal(uzram_set_group(b, group), 0);
    assert_int_equal(uzram_set_group(a, group), -EBUSY);  /* once */
    assert_int_equal(uzram_group_destroy(group), -EBUSY); /* while devices are in it */
    struct uzram_group_stats gs;
    const uint64_t T = test_stats(a).table_mem + test_stats(b).table_mem; /* 4 KiB each */
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_int_equal(gs.devices, 2);
    assert_int_equal(gs.mem_limit, 24 * PAGE);

    uint8_t page[PAGE];
    unsigned written_a = 0, written_b = 0;
    for (unsigned p = 0; p < 64; p++) {
        test_fill_kind(500 + p, DATAGEN_RANDOM, page, PAGE);
        int rc = uzram_write(a, p * PAGE, page, PAGE);
        if (rc == -ENOSPC)
            break;
        assert_int_equal(rc, 0);
        written_a++;
    }
    assert_true(written_a > 0 && written_a < 64);
    /* a filled the group: b has no limit of its own and still cannot store a huge page. */
    test_fill_kind(900, DATAGEN_RANDOM, page, PAGE);
    assert_int_equal(uzram_write(b, 0, page, PAGE), -ENOSPC);
    test_expect_zero_pages(b, 0, 1);
    assert_int_equal(test_stats(b).failed_writes, 1);
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_true(gs.mem_used <= 24 * PAGE);
    assert_int_equal(gs.mem_used - T, test_stats(a).mem_used_total + test_stats(b).mem_used_total);

    /* What a frees is b's to use. */
    assert_int_equal(uzram_discard(a, 0, (uint64_t)written_a * PAGE), 0);
    for (unsigned p = 0; p < written_a / 2; p++) {
        test_fill_kind(700 + p, DATAGEN_RANDOM, page, PAGE);
        assert_int_equal(uzram_write(b, p * PAGE, page, PAGE), 0);
        written_b++;
    }
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_int_equal(gs.mem_used - T, test_stats(a).mem_used_total + test_stats(b).mem_used_total);
    assert_true(gs.mem_used_max >= gs.mem_used);

    /* No limit: anything fits; a destroyed device gives its memory back and leaves. */
    assert_int_equal(uzram_group_set_mem_limit(group, 0), 0);
    test_fill_kind(901, DATAGEN_RANDOM, page, PAGE);
    assert_int_equal(uzram_write(a, 63 * PAGE, page, PAGE), 0);
    uint64_t b_used = test_stats(b).mem_used_total + T / 2;
    uzram_destroy(a);
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_int_equal(gs.devices, 1);
    assert_int_equal(gs.mem_used, b_used);
    uzram_destroy(b);
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_int_equal(gs.mem_used, 0);
    assert_int_equal(uzram_group_destroy(group), 0);
    assert_int_equal(uzram_group_create(0, NULL), -EINVAL);
}

/* Writers on two devices of one group at once never take the group past its limit (TSan
 * runs this one). */
struct group_writer {
    struct uzram *dev;
    unsigned seed;
    int failures;
};

static void *group_writer_main(void *arg)
{
    struct group_writer *w = arg;
    uint8_t page[PAGE];
    for (unsigned round = 0; round < 4; round++) {
        for (unsigned p = 0; p < 48; p++) {
            test_fill_kind(w->seed + round * 100 + p, DATAGEN_RANDOM, page, PAGE);
            int rc = uzram_write(w->dev, p * PAGE, page, PAGE);
            if (rc == -ENOSPC)
                w->failures++;
            else if (rc != 0)
                return (void *)1;
        }
        if (uzram_discard(w->dev, 0, 48 * PAGE) != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_group_concurrent(void **state)
{
    (void)state;
    struct uzram_group *group;
    assert_int_equal(uzram_group_create(40 * PAGE, &group), 0);
    struct group_writer writers[2] = {{test_device(1 << 20, NULL, 0), 1000, 0},
                                      {test_device(1 << 20, NULL, 0), 5000, 0}};
    pthread_t threads[2];
    /* Both join before either writes: a join charges the page table whole, and a writer
     * already filling the group's 40 pages could leave no room for it (-ENOSPC). */
    for (int i = 0; i < 2; i++)
        assert_int_equal(uzram_set_group(writers[i].dev, group), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, group_writer_main, &writers[i]), 0);
    for (int i = 0; i < 2; i++) {
        void *result;
        assert_int_equal(pthread_join(threads[i], &result), 0);
        assert_null(result);
    }
    struct uzram_group_stats gs;
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_true(gs.mem_used_max <= 40 * PAGE);
    assert_true(writers[0].failures + writers[1].failures > 0);
    for (int i = 0; i < 2; i++)
        uzram_destroy(writers[i].dev);
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_int_equal(gs.mem_used, 0);
    assert_int_equal(uzram_group_destroy(group), 0);
}

/* ------------------------------------------------------------------------
 * Compaction
 * ---------------------------------------------------------------------- */

static void test_compaction(void **state)
{
    (void)state;
    enum { PAGES = 2048 };
    struct uzram *dev = test_device((uint64_t)PAGES * PAGE, NULL, 0);
    uint8_t *content = malloc((size_t)PAGES * PAGE);
    assert_non_null(content);
    /* Mixed compressibility, so objects land in many size classes. */
    for (unsigned p = 0; p < PAGES; p++)
        test_fill_kind(p, p % 3 == 0 ? DATAGEN_HALF : DATAGEN_TEXT, content + (size_t)p * PAGE,
                       PAGE);
    assert_int_equal(uzram_write(dev, 0, content, (size_t)PAGES * PAGE), 0);
    struct uzram_stats s0 = test_stats(dev);

    /* Free three of every four pages (not aligned with the classes'
     * packing), leaving every pool page sparse. */
    for (unsigned p = 0; p < PAGES; p++) {
        if (p % 4 != 1) {
            assert_int_equal(uzram_discard(dev, (uint64_t)p * PAGE, PAGE), 0);
            memset(content + (size_t)p * PAGE, 0, PAGE);
        }
    }
    struct uzram_stats s1 = test_stats(dev);
    assert_int_equal(s1.pages_stored, PAGES / 4);
    assert_true(s1.mem_used_total < s0.mem_used_total);
    assert_true(s1.mem_used_total > 2 * s1.compr_data_size); /* fragmented */

    uint64_t freed = 0;
    assert_int_equal(uzram_compact(dev, &freed), 0);
    struct uzram_stats s2 = test_stats(dev);
    assert_true(freed > 0);
    assert_int_equal(s2.pages_compacted, s1.pages_compacted + freed);
    assert_int_equal(s2.mem_used_total, s1.mem_used_total - freed * PAGE);
    assert_true(s2.mem_used_total < s1.mem_used_total * 2 / 3);
    assert_int_equal(s2.compr_data_size, s1.compr_data_size);
    assert_true(s2.mem_used_total >= s2.compr_data_size);
    assert_int_equal(s2.pages_stored, s1.pages_stored);

    uint8_t *got = malloc((size_t)PAGES * PAGE);
    assert_int_equal(uzram_read(dev, 0, got, (size_t)PAGES * PAGE), 0);
    assert_memory_equal(got, content, (size_t)PAGES * PAGE);

    /* A second compaction finds (almost) nothing, and data still holds. */
    uint64_t freed_again = 0;
    assert_int_equal(uzram_compact(dev, &freed_again), 0);
    assert_true(freed_again <= freed / 4);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    assert_int_equal(uzram_read(dev, 0, got, (size_t)PAGES * PAGE), 0);
    assert_memory_equal(got, content, (size_t)PAGES * PAGE);

    /* Writes after compaction reuse the room. */
    assert_int_equal(uzram_write(dev, 0, content + PAGE, PAGE), 0);
    test_expect_pages(dev, 0, content + PAGE, 1);
    free(got);
    free(content);
    uzram_destroy(dev);
}

/* A device filled to its limit, then mostly discarded, has its memory in holes: a write the
 * limit refuses compacts the pool and goes through (pages_compacted moves), as zsmalloc is
 * compacted by its shrinker under pressure. (Nothing compacted: every write that needed a new
 * span was refused while three quarters of the pool were holes.) */
static void test_limit_compacts_holes(void **state)
{
    (void)state;
    enum { PAGES = 8192 };
    struct uzram *dev = test_device((uint64_t)PAGES * PAGE, NULL, 0);
    uint8_t *content = malloc((size_t)PAGES * PAGE);
    assert_non_null(content);
    uint64_t seed = test_random_seed("limit_holes");
    for (unsigned p = 0; p < PAGES; p++)
        test_fill_kind(seed + p, p % 3 == 0 ? DATAGEN_HALF : DATAGEN_TEXT,
                       content + (size_t)p * PAGE, PAGE);
    assert_int_equal(uzram_write(dev, 0, content, (size_t)PAGES * PAGE), 0);
    uint64_t limit = test_stats(dev).mem_used_total;
    assert_int_equal(uzram_set_mem_limit(dev, limit), 0);
    /* Three of every four pages go: what spans they emptied is room, the rest holes. */
    for (unsigned p = 0; p < PAGES; p++)
        if (p % 4 != 1) {
            assert_int_equal(uzram_discard(dev, (uint64_t)p * PAGE, PAGE), 0);
            memset(content + (size_t)p * PAGE, 0, PAGE);
        }
    struct uzram_stats s0 = test_stats(dev);
    /* Incompressible pages, a span of their own each: first the room the emptied spans left,
     * then as much again, a quarter of the limit, which only the holes can give. */
    uint64_t room = (limit - s0.mem_used_total) / PAGE;
    uint64_t count = room + limit / PAGE / 4;
    assert_true(count < PAGES / 2);
    unsigned failed = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t p = i * 2; /* discarded slots: 0, 2, 4, ... */
        uint8_t *page = content + (size_t)p * PAGE;
        test_fill_kind(seed + PAGES + p, DATAGEN_RANDOM, page, PAGE);
        int rc = uzram_write(dev, p * PAGE, page, PAGE);
        if (rc != 0) {
            assert_int_equal(rc, -ENOSPC);
            memset(page, 0, PAGE);
            failed++;
        }
        assert_true(test_stats(dev).mem_used_total <= limit);
    }
    struct uzram_stats s1 = test_stats(dev);
    print_message("limit %llu bytes, %llu after the discards (%llu of objects): %llu writes of a "
                  "page, %u refused, %llu pages compacted\n",
                  (unsigned long long)limit, (unsigned long long)s0.mem_used_total,
                  (unsigned long long)s0.compr_data_size, (unsigned long long)count, failed,
                  (unsigned long long)(s1.pages_compacted - s0.pages_compacted));
    assert_int_equal(failed, 0);
    assert_true(s1.pages_compacted > s0.pages_compacted);
    assert_true(s1.mem_used_total <= limit);
    test_expect_pages(dev, 0, content, PAGES);
    free(content);
    uzram_destroy(dev);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mem_limit, test_setup_device, test_teardown_device),
        cmocka_unit_test(test_group_mem_limit),
        cmocka_unit_test(test_group_concurrent),
        cmocka_unit_test(test_compaction),
        cmocka_unit_test(test_limit_compacts_holes),
    };
    return cmocka_run_group_tests_name("limits", tests, NULL, NULL);
}
