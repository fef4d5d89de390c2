/* test_memory_bounds.c - memory a device takes outside its pool is counted and bounded
 * (issue 23): the page table, 16 bytes per 4 KiB page, which a client writing one page in
 * every 256 makes resident, is refused past a share of the machine's memory, shown in
 * table_mem and charged whole to a group's limit (serve --server-mem-limit); under a pool
 * reserve it and the dedup index are faulted in ahead of need. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE

/* The page table (16 bytes per page, filled as pages are written: one write per 256 pages
 * makes it all resident) is bounded by a share of the machine's memory, counted in
 * table_mem, and charged whole to a group as the device joins. */
static void test_page_table_bounded(void **state)
{
    (void)state;
    uint64_t memory = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t most_pages = memory / UZRAM_TABLE_MEMORY_SHARE / UZRAM_TABLE_BYTES_PER_PAGE;
    struct uzram_config config;
    struct uzram *dev = NULL;
    uzram_config_init(&config);
    config.disksize = (most_pages + 1) * PAGE;
    assert_int_equal(uzram_create(&config, &dev), -E2BIG);
    config.disksize = 1ull << 50; /* 1 PiB: a 4 TiB table */
    assert_int_equal(uzram_create(&config, &dev), -E2BIG);
    if (most_pages < (16ull << 30) / PAGE)
        skip(); /* the rest wants 16 GiB devices: a machine of 1 GiB or more */
    config.disksize = 16ull << 30;
    assert_int_equal(uzram_create(&config, &dev), 0);
    assert_int_equal(test_stats(dev).table_mem, 64ull << 20);
    assert_int_equal(test_stats(dev).mem_used_total, 0);
    struct uzram *big = NULL;
    config.disksize = 64ull << 30;
    assert_int_equal(uzram_create(&config, &big), 0);
    /* a 256 MiB table does not fit under 100 MiB; a 64 MiB one does, and counts */
    struct uzram_group *group;
    struct uzram_group_stats gs;
    assert_int_equal(uzram_group_create(100ull << 20, &group), 0);
    assert_int_equal(uzram_set_group(big, group), -ENOSPC);
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_int_equal(gs.mem_used, 0);
    assert_int_equal(gs.devices, 0);
    assert_int_equal(uzram_set_group(dev, group), 0);
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_int_equal(gs.mem_used, 64ull << 20);
    /* so a write that would take the group past its limit fails, as with pool memory */
    uint8_t page[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 77);
    datagen_fill(&rng, DATAGEN_RANDOM, page, PAGE);
    assert_int_equal(uzram_group_set_mem_limit(group, 64ull << 20), 0); /* the table fills it */
    assert_int_equal(uzram_write(dev, 0, page, PAGE), -ENOSPC);
    uzram_destroy(dev);
    assert_int_equal(uzram_group_get_stats(group, &gs), 0);
    assert_int_equal(gs.mem_used, 0);
    assert_int_equal(uzram_group_destroy(group), 0);
    uzram_destroy(big);
}

static uint64_t resident_bytes(void)
{
    unsigned long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%lu %lu", &size, &resident), 2);
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Under a pool reserve (serve --swap) the memory a write may touch outside the pool is
 * faulted in ahead of need: the page table (4 MiB for 1 GiB) and the dedup index (20 bytes
 * an entry, 5.3 MiB), whichever of reserve and dedup comes first. */
static void test_reserve_faults_tables_in(void **state)
{
    (void)state;
    const uint64_t table = (1ull << 30) / PAGE * UZRAM_TABLE_BYTES_PER_PAGE;
    const uint64_t entries = ((1ull << 30) / PAGE + 4096) * 20;
    for (int reserve_first = 0; reserve_first <= 1; reserve_first++) {
        struct uzram_config config;
        struct uzram *dev = NULL;
        uzram_config_init(&config);
        config.disksize = 1ull << 30;
        assert_int_equal(uzram_create(&config, &dev), 0);
        uint64_t before = resident_bytes();
        if (reserve_first) {
            assert_int_equal(uzram_set_mem_reserve(dev, 1 << 20), 0);
            before = resident_bytes();
            assert_int_equal(uzram_set_dedup(dev, true), 0);
            assert_true(resident_bytes() - before >= entries);
        } else {
            assert_int_equal(uzram_set_dedup(dev, true), 0);
            assert_int_equal(uzram_set_mem_reserve(dev, 1 << 20), 0);
            assert_true(resident_bytes() - before >= table + entries);
        }
        uzram_destroy(dev);
    }
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page_table_bounded),
        cmocka_unit_test(test_reserve_faults_tables_in),
    };
    return cmocka_run_group_tests_name("memory bounds", tests, NULL, NULL);
}
