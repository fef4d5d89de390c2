/* test_recompress.c - unit tests of idle tracking and recompression: the idle marks and
 * last-access times, the `idle` attribute, and what they count in the statistics. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "device.h"
#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define DISK (4u << 20)
#define PAGES (DISK / PAGE)

static void fill_page(unsigned char *page, uint64_t seed, enum datagen_kind kind)
{
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed);
    datagen_fill(&rng, kind, page, PAGE);
}

static void write_page(struct uzram *dev, uint64_t index, enum datagen_kind kind, uint64_t seed)
{
    unsigned char page[PAGE];
    fill_page(page, seed, kind);
    assert_int_equal(uzram_write(dev, index * PAGE, page, PAGE), 0);
}

static void read_page(struct uzram *dev, uint64_t index)
{
    unsigned char page[PAGE];
    assert_int_equal(uzram_read(dev, index * PAGE, page, PAGE), 0);
}

static uint64_t idle_pages(struct uzram *dev)
{
    return test_stats(dev).idle_pages;
}

/* Every kind of stored page: compressed, same-filled, zero, raw (huge),
 * and (dedup on) two references to one object. */
static uint64_t write_kinds(struct uzram *dev, uint64_t first)
{
    static const enum datagen_kind kinds[] = {DATAGEN_TEXT, DATAGEN_HALF,   DATAGEN_SAME,
                                              DATAGEN_ZERO, DATAGEN_RANDOM, DATAGEN_TEXT};
    uint64_t n = sizeof kinds / sizeof kinds[0];
    for (uint64_t i = 0; i < n; i++)
        write_page(dev, first + i, kinds[i], i == n - 1 ? first : first + i);
    return n;
}

static void test_idle_all(void **state)
{
    (void)state;
    for (int dedup = 0; dedup <= 1; dedup++) {
        struct uzram *dev = test_device(DISK, NULL, dedup);
        uint64_t stored = write_kinds(dev, 10);
        assert_int_equal(idle_pages(dev), 0);
        uint64_t marked = 99;
        assert_int_equal(uzram_mark_idle(dev, 0, &marked), 0);
        assert_int_equal(marked, stored);
        assert_int_equal(idle_pages(dev), stored);
        /* marking again marks nothing new */
        assert_int_equal(uzram_mark_idle(dev, 0, &marked), 0);
        assert_int_equal(marked, 0);

        /* a read, a whole write, a partial write and a discard each clear one */
        read_page(dev, 10);
        assert_int_equal(idle_pages(dev), stored - 1);
        read_page(dev, 10); /* already clear */
        assert_int_equal(idle_pages(dev), stored - 1);
        write_page(dev, 11, DATAGEN_TEXT, 99);
        assert_int_equal(idle_pages(dev), stored - 2);
        unsigned char sector[UZRAM_SECTOR_SIZE] = {1};
        assert_int_equal(uzram_write(dev, 12 * PAGE + 512, sector, sizeof sector), 0);
        assert_int_equal(idle_pages(dev), stored - 3);
        assert_int_equal(uzram_discard(dev, 13 * PAGE, PAGE), 0);
        assert_int_equal(idle_pages(dev), stored - 4);
        /* a read of a never-written page marks or clears nothing */
        read_page(dev, 200);
        assert_int_equal(idle_pages(dev), stored - 4);

        /* pages still idle read back intact */
        unsigned char page[PAGE], back[PAGE];
        fill_page(page, 14, DATAGEN_RANDOM);
        assert_int_equal(uzram_read(dev, 14 * PAGE, back, PAGE), 0);
        assert_memory_equal(page, back, PAGE);

        assert_int_equal(uzram_reset(dev), 0);
        assert_int_equal(idle_pages(dev), 0);
        uzram_destroy(dev);
    }
}

static void test_idle_age(void **state)
{
    (void)state;
    struct uzram *dev = test_device(DISK, NULL, 0);
    for (uint64_t i = 0; i < 8; i++)
        write_page(dev, i, DATAGEN_TEXT, i);
    store_test_advance_clock(dev, 100);
    for (uint64_t i = 8; i < 12; i++)
        write_page(dev, i, DATAGEN_HALF, i);
    read_page(dev, 0); /* accessed now: not idle for 50 s */
    uint64_t marked;
    assert_int_equal(uzram_mark_idle(dev, 50, &marked), 0);
    assert_int_equal(marked, 7);
    assert_int_equal(idle_pages(dev), 7);
    /* 30 s later: the younger pages are 30 s old, page 0 too */
    store_test_advance_clock(dev, 30);
    assert_int_equal(uzram_mark_idle(dev, 31, &marked), 0);
    assert_int_equal(marked, 0);
    assert_int_equal(uzram_mark_idle(dev, 30, &marked), 0);
    assert_int_equal(marked, 5);
    assert_int_equal(idle_pages(dev), 12);
    uzram_destroy(dev);
}

static void test_idle_attribute(void **state)
{
    (void)state;
    struct uzram *dev = test_device(DISK, NULL, 0);
    uint64_t stored = write_kinds(dev, 0);
    char buf[64];
    assert_int_equal(uzram_attr_get(dev, "idle", buf, sizeof buf), -EACCES);
    assert_int_equal(uzram_attr_set(dev, "idle", "60"), 0);
    assert_int_equal(idle_pages(dev), 0);
    store_test_advance_clock(dev, 61);
    assert_int_equal(uzram_attr_set(dev, "idle", "60\n"), 0);
    assert_int_equal(idle_pages(dev), stored);
    read_page(dev, 0);
    assert_int_equal(uzram_attr_set(dev, "idle", "all\n"), 0);
    assert_int_equal(idle_pages(dev), stored);
    static const char *const bad[] = {"",     "0",  "-1", "al",
                                      "all2", "1s", " 5", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (uzram_attr_set(dev, "idle", bad[i]) != -EINVAL)
            fail_msg("idle '%s' accepted", bad[i]);
    /* idle_pages is in debug_stat and the JSON form */
    char text[2048];
    assert_true(uzram_attr_get(dev, "debug_stat", text, sizeof text) > 0);
    assert_non_null(strstr(text, "idle_pages: 6\n"));
    assert_true(uzram_attr_get(dev, "stat_json", text, sizeof text) > 0);
    assert_non_null(strstr(text, "\"idle_pages\": 6"));
    uzram_destroy(dev);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_all),
        cmocka_unit_test(test_idle_age),
        cmocka_unit_test(test_idle_attribute),
    };
    return cmocka_run_group_tests_name("recompress", tests, NULL, NULL);
}
