/* test_io.c - deterministic unit tests of the public I/O contract of libuzram.
 * Reads, writes, discards, write-zeroes, extents, limits, compaction and reset, each exact. */
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
#define SECTOR UZRAM_SECTOR_SIZE
#define DISK_PAGES TEST_DEVICE_PAGES /* the fixture test_setup_device() makes */
#define DISK_SIZE ((uint64_t)DISK_PAGES * PAGE)

/* ------------------------------------------------------------------------
 * Fixtures and helpers
 * ---------------------------------------------------------------------- */

/* Read the whole disk. */
static uint8_t *read_disk(struct uzram *dev)
{
    uint8_t *disk = malloc(DISK_SIZE);
    assert_non_null(disk);
    assert_int_equal(uzram_read(dev, 0, disk, DISK_SIZE), 0);
    return disk;
}

/* ------------------------------------------------------------------------
 * Basic reads and writes
 * ---------------------------------------------------------------------- */

static void test_fresh_device_reads_zeros(void **state)
{
    struct uzram *dev = *state;
    uint8_t *disk = read_disk(dev);
    uint8_t *zeros = calloc(1, DISK_SIZE);
    assert_memory_equal(disk, zeros, DISK_SIZE);
    free(disk);
    free(zeros);

    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.pages_stored, 0);
    assert_int_equal(s.orig_data_size, 0);
    assert_int_equal(s.mem_used_total, 0);
    assert_int_equal(s.invalid_io, 0);

    uint64_t run = 0;
    unsigned flags = 0;
    assert_int_equal(uzram_extent(dev, 0, DISK_SIZE, &run, &flags), 0);
    assert_int_equal(flags, UZRAM_EXTENT_HOLE | UZRAM_EXTENT_ZERO);
    assert_int_equal(run, DISK_SIZE);
}

static void test_whole_pages_roundtrip(void **state)
{
    struct uzram *dev = *state;
    uint8_t page[PAGE];
    /* One page of each kind, at scattered offsets, including the last. */
    uint64_t where[DATAGEN_KIND_COUNT] = {3, 17, 100, 200, DISK_PAGES - 1};
    for (int kind = 0; kind < DATAGEN_KIND_COUNT; kind++) {
        test_fill_kind(10 + kind, kind, page, PAGE);
        test_write_pages(dev, where[kind], page, 1);
    }
    for (int kind = 0; kind < DATAGEN_KIND_COUNT; kind++) {
        test_fill_kind(10 + kind, kind, page, PAGE);
        test_expect_pages(dev, where[kind], page, 1);
    }
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.pages_stored, DATAGEN_KIND_COUNT);
    assert_int_equal(s.orig_data_size, DATAGEN_KIND_COUNT * PAGE);

    /* A multi-page write of mixed kinds, and its read in one call. */
    uint8_t *many = malloc(16 * PAGE);
    for (int i = 0; i < 16; i++)
        test_fill_kind(50 + i, (enum datagen_kind)(i % DATAGEN_KIND_COUNT), many + i * PAGE, PAGE);
    test_write_pages(dev, 30, many, 16);
    test_expect_pages(dev, 30, many, 16);
    /* Neighbours untouched. */
    test_expect_zero_pages(dev, 29, 1);
    test_expect_zero_pages(dev, 46, 1);
    free(many);
}

static void test_partial_pages(void **state)
{
    struct uzram *dev = *state;
    uint8_t expected[2][PAGE];
    uint8_t piece[SECTOR];

    /* Page 5 starts with text, page 6 empty; patch every sector of each. */
    test_fill_kind(1, DATAGEN_TEXT, expected[0], PAGE);
    test_write_pages(dev, 5, expected[0], 1);
    memset(expected[1], 0, PAGE);
    for (int p = 0; p < 2; p++) {
        for (unsigned sector = 0; sector < PAGE / SECTOR; sector++) {
            test_fill_kind(100 + p * 8 + sector, sector % 2 ? DATAGEN_RANDOM : DATAGEN_HALF, piece,
                           SECTOR);
            uint64_t offset = (5 + p) * PAGE + sector * SECTOR;
            assert_int_equal(uzram_write(dev, offset, piece, SECTOR), 0);
            memcpy(expected[p] + sector * SECTOR, piece, SECTOR);
            test_expect_pages(dev, 5 + p, expected[p], 1);
            /* The piece alone reads back too. */
            uint8_t got[SECTOR];
            assert_int_equal(uzram_read(dev, offset, got, SECTOR), 0);
            assert_memory_equal(got, piece, SECTOR);
        }
    }

    /* A write across the page boundary: last sector of 5, first two of 6. */
    uint8_t cross[3 * SECTOR];
    test_fill_kind(7, DATAGEN_TEXT, cross, sizeof cross);
    assert_int_equal(uzram_write(dev, 6 * PAGE - SECTOR, cross, sizeof cross), 0);
    memcpy(expected[0] + PAGE - SECTOR, cross, SECTOR);
    memcpy(expected[1], cross + SECTOR, 2 * SECTOR);
    test_expect_pages(dev, 5, expected, 2);

    /* Partial reads across the boundary. */
    uint8_t got[5 * SECTOR];
    assert_int_equal(uzram_read(dev, 5 * PAGE + 5 * SECTOR, got, sizeof got), 0);
    assert_memory_equal(got, (uint8_t *)expected + 5 * SECTOR, sizeof got);

    /* A partial write making a page same-filled turns it into a same page. */
    uint8_t word_page[PAGE];
    test_fill_word(word_page, 0x0102030405060708ull);
    test_write_pages(dev, 9, word_page, 1);
    struct uzram_stats before = test_stats(dev);
    assert_int_equal(uzram_write(dev, 9 * PAGE + SECTOR, word_page, SECTOR), 0);
    test_expect_pages(dev, 9, word_page, 1);
    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.same_pages, before.same_pages);
    assert_int_equal(after.pages_stored, before.pages_stored);
}

/* ------------------------------------------------------------------------
 * Invalid requests
 * ---------------------------------------------------------------------- */

static void test_invalid_io(void **state)
{
    struct uzram *dev = *state;
    uint8_t *content = malloc(DISK_SIZE);
    for (unsigned p = 0; p < DISK_PAGES; p += 2)
        test_fill_kind(p, (enum datagen_kind)(p % DATAGEN_KIND_COUNT), content + p * PAGE, PAGE);
    memset(content + PAGE, 0, PAGE);
    for (unsigned p = 1; p < DISK_PAGES; p += 2)
        memset(content + p * PAGE, 0, PAGE);
    assert_int_equal(uzram_write(dev, 0, content, DISK_SIZE), 0);
    struct uzram_stats before = test_stats(dev);
    assert_int_equal(before.invalid_io, 0);

    uint8_t *buf = malloc(2 * PAGE);
    memset(buf, 0xab, 2 * PAGE);
    struct {
        uint64_t offset;
        uint64_t length;
    } bad[] = {
        {1, SECTOR},                      /* misaligned offset */
        {511, SECTOR},                    /* misaligned offset */
        {PAGE + 100, PAGE},               /* misaligned offset */
        {0, 100},                         /* misaligned length */
        {0, PAGE + 1},                    /* misaligned length */
        {DISK_SIZE, SECTOR},              /* starts at the end */
        {DISK_SIZE - SECTOR, 2 * SECTOR}, /* runs past the end */
        {DISK_SIZE + PAGE, PAGE},         /* far past the end */
        {UINT64_MAX - 511, SECTOR},       /* offset + length wraps to 0 */
        {UINT64_MAX - 4095, PAGE},        /* wraps too */
        {PAGE, UINT64_MAX - 511},         /* length wraps the sum */
    };
    size_t cases = sizeof bad / sizeof bad[0];
    uint64_t expected_invalid = 0;
    for (size_t i = 0; i < cases; i++) {
        uint64_t offset = bad[i].offset, length = bad[i].length;
        /* Reads and writes get a buffer only as long as the 2-page one:
         * larger lengths are rejected before the buffer is touched. */
        size_t io_length = (size_t)length;
        assert_int_equal(uzram_read(dev, offset, buf, io_length), -EINVAL);
        assert_int_equal(uzram_write(dev, offset, buf, io_length), -EINVAL);
        assert_int_equal(uzram_discard(dev, offset, length), -EINVAL);
        assert_int_equal(uzram_write_zeroes(dev, offset, length, false), -EINVAL);
        assert_int_equal(uzram_write_zeroes(dev, offset, length, true), -EINVAL);
        expected_invalid += 5;
        struct uzram_stats s = test_stats(dev);
        if (s.invalid_io != expected_invalid)
            fail_msg("case %zu (offset %llu length %llu): invalid_io %llu, expected %llu", i,
                     (unsigned long long)offset, (unsigned long long)length,
                     (unsigned long long)s.invalid_io, (unsigned long long)expected_invalid);
    }
    /* The read buffer was never written into. */
    for (size_t i = 0; i < 2 * PAGE; i++)
        assert_int_equal(buf[i], 0xab);

    /* Extent: unaligned offsets are fine, out of range is not. */
    uint64_t run;
    unsigned flags;
    assert_int_equal(uzram_extent(dev, DISK_SIZE, 1, &run, &flags), -EINVAL);
    assert_int_equal(uzram_extent(dev, DISK_SIZE - 1, 2, &run, &flags), -EINVAL);
    assert_int_equal(uzram_extent(dev, 0, 0, &run, &flags), -EINVAL);
    assert_int_equal(uzram_extent(dev, UINT64_MAX - 10, 20, &run, &flags), -EINVAL);
    assert_int_equal(uzram_extent(dev, 10, UINT64_MAX - 5, &run, &flags), -EINVAL);
    expected_invalid += 5;

    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.invalid_io, expected_invalid);
    assert_int_equal(after.pages_stored, before.pages_stored);
    assert_int_equal(after.orig_data_size, before.orig_data_size);
    assert_int_equal(after.compr_data_size, before.compr_data_size);
    assert_int_equal(after.same_pages, before.same_pages);
    assert_int_equal(after.huge_pages, before.huge_pages);
    assert_int_equal(after.failed_writes, before.failed_writes);
    assert_int_equal(after.failed_reads, 0);
    assert_int_equal(after.notify_free, before.notify_free);

    uint8_t *disk = read_disk(dev);
    assert_memory_equal(disk, content, DISK_SIZE);
    free(disk);
    free(buf);
    free(content);
}

static void test_zero_length_io(void **state)
{
    /* The header does not say what a zero-length request does; the
     * expectation here is "nothing, successfully" (as a block device does
     * with an empty request), and it is not counted as invalid. */
    struct uzram *dev = *state;
    uint8_t page[PAGE];
    test_fill_kind(3, DATAGEN_TEXT, page, PAGE);
    test_write_pages(dev, 1, page, 1);
    struct uzram_stats before = test_stats(dev);
    uint8_t buf[SECTOR];
    memset(buf, 0x5c, sizeof buf);
    assert_int_equal(uzram_read(dev, PAGE, buf, 0), 0);
    assert_int_equal(uzram_write(dev, PAGE, buf, 0), 0);
    assert_int_equal(uzram_discard(dev, PAGE, 0), 0);
    assert_int_equal(uzram_write_zeroes(dev, PAGE, 0, true), 0);
    assert_int_equal(uzram_write_zeroes(dev, 0, 0, false), 0);
    for (size_t i = 0; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0x5c);
    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.invalid_io, before.invalid_io);
    assert_int_equal(after.pages_stored, before.pages_stored);
    test_expect_pages(dev, 1, page, 1);
}

/* ------------------------------------------------------------------------
 * Discard and write-zeroes
 * ---------------------------------------------------------------------- */

static void test_discard(void **state)
{
    struct uzram *dev = *state;
    uint8_t pages[8 * PAGE];
    for (int i = 0; i < 8; i++)
        test_fill_kind(20 + i, i % 2 ? DATAGEN_TEXT : DATAGEN_HALF, pages + i * PAGE, PAGE);
    test_write_pages(dev, 10, pages, 8);
    struct uzram_stats s0 = test_stats(dev);
    assert_int_equal(s0.pages_stored, 8);

    /* Whole pages 11 and 12: freed. */
    assert_int_equal(uzram_discard(dev, 11 * PAGE, 2 * PAGE), 0);
    memset(pages + PAGE, 0, 2 * PAGE);
    struct uzram_stats s1 = test_stats(dev);
    assert_int_equal(s1.pages_stored, 6);
    assert_int_equal(s1.orig_data_size, 6 * PAGE);
    assert_true(s1.compr_data_size < s0.compr_data_size);
    assert_true(s1.notify_free >= s0.notify_free + 2);
    test_expect_zero_pages(dev, 11, 2);
    test_expect_pages(dev, 10, pages, 1);
    test_expect_pages(dev, 13, pages + 3 * PAGE, 5);
    uint64_t run;
    unsigned flags;
    assert_int_equal(uzram_extent(dev, 11 * PAGE, 2 * PAGE, &run, &flags), 0);
    assert_int_equal(flags, UZRAM_EXTENT_HOLE | UZRAM_EXTENT_ZERO);
    assert_int_equal(run, 2 * PAGE);

    /* Sectors 2..5 of page 13: zeroed in place, the page stays stored. */
    assert_int_equal(uzram_discard(dev, 13 * PAGE + 2 * SECTOR, 4 * SECTOR), 0);
    memset(pages + 3 * PAGE + 2 * SECTOR, 0, 4 * SECTOR);
    test_expect_pages(dev, 13, pages + 3 * PAGE, 1);
    struct uzram_stats s2 = test_stats(dev);
    assert_int_equal(s2.pages_stored, 6);

    /* Partial, whole, whole, partial: from the last sector of 14 to the
     * first sector of 17. */
    assert_int_equal(uzram_discard(dev, 15 * PAGE - SECTOR, 2 * PAGE + 2 * SECTOR), 0);
    memset(pages + 5 * PAGE - SECTOR, 0, 2 * PAGE + 2 * SECTOR);
    test_expect_pages(dev, 10, pages, 8);
    struct uzram_stats s3 = test_stats(dev);
    assert_int_equal(s3.pages_stored, 4); /* 10, 13, 14, 17 */

    /* Discarding never-written space is harmless. */
    assert_int_equal(uzram_discard(dev, 100 * PAGE, 10 * PAGE), 0);
    struct uzram_stats s4 = test_stats(dev);
    assert_int_equal(s4.pages_stored, 4);

    /* Discarding everything frees everything. */
    assert_int_equal(uzram_discard(dev, 0, DISK_SIZE), 0);
    struct uzram_stats s5 = test_stats(dev);
    assert_int_equal(s5.pages_stored, 0);
    assert_int_equal(s5.orig_data_size, 0);
    assert_int_equal(s5.compr_data_size, 0);
    assert_int_equal(s5.mem_used_total, 0);
    test_expect_zero_pages(dev, 0, DISK_PAGES);
}

static void test_write_zeroes(void **state)
{
    struct uzram *dev = *state;
    uint8_t pages[4 * PAGE];
    for (int i = 0; i < 4; i++)
        test_fill_kind(40 + i, DATAGEN_TEXT, pages + i * PAGE, PAGE);
    test_write_pages(dev, 20, pages, 4);
    struct uzram_stats s0 = test_stats(dev);
    assert_int_equal(s0.same_pages, 0);

    /* keep_allocated: pages stay stored, as zero same-filled pages. */
    assert_int_equal(uzram_write_zeroes(dev, 20 * PAGE, 2 * PAGE, true), 0);
    test_expect_zero_pages(dev, 20, 2);
    test_expect_pages(dev, 22, pages + 2 * PAGE, 2);
    struct uzram_stats s1 = test_stats(dev);
    assert_int_equal(s1.pages_stored, 4);
    assert_int_equal(s1.same_pages, 2);
    assert_int_equal(s1.zero_pages, 2);
    assert_true(s1.compr_data_size < s0.compr_data_size);
    uint64_t run;
    unsigned flags;
    assert_int_equal(uzram_extent(dev, 20 * PAGE, 2 * PAGE, &run, &flags), 0);
    assert_int_equal(flags, UZRAM_EXTENT_ZERO);
    assert_int_equal(run, 2 * PAGE);

    /* keep_allocated on never-written pages stores zero pages there too. */
    assert_int_equal(uzram_write_zeroes(dev, 60 * PAGE, 3 * PAGE, true), 0);
    struct uzram_stats s2 = test_stats(dev);
    assert_int_equal(s2.pages_stored, 7);
    assert_int_equal(s2.same_pages, 5);
    assert_int_equal(s2.mem_used_total, s1.mem_used_total);
    assert_int_equal(uzram_extent(dev, 60 * PAGE, 3 * PAGE, &run, &flags), 0);
    assert_int_equal(flags, UZRAM_EXTENT_ZERO);
    assert_int_equal(run, 3 * PAGE);

    /* Not keep_allocated: freed like a discard. */
    assert_int_equal(uzram_write_zeroes(dev, 20 * PAGE, 4 * PAGE, false), 0);
    test_expect_zero_pages(dev, 20, 4);
    struct uzram_stats s3 = test_stats(dev);
    assert_int_equal(s3.pages_stored, 3);
    assert_int_equal(s3.same_pages, 3);
    assert_int_equal(s3.compr_data_size, 0);
    assert_int_equal(s3.mem_used_total, 0);
    assert_int_equal(uzram_extent(dev, 20 * PAGE, 4 * PAGE, &run, &flags), 0);
    assert_int_equal(flags, UZRAM_EXTENT_HOLE | UZRAM_EXTENT_ZERO);

    /* Partial pages at the ends are zeroed in place. */
    test_write_pages(dev, 30, pages, 3);
    assert_int_equal(uzram_write_zeroes(dev, 30 * PAGE + 3 * SECTOR, PAGE + 2 * SECTOR, true), 0);
    memset(pages + 3 * SECTOR, 0, PAGE + 2 * SECTOR);
    test_expect_pages(dev, 30, pages, 3);
}

/* ------------------------------------------------------------------------
 * Same-filled and huge pages
 * ---------------------------------------------------------------------- */

static void test_same_filled_pages(void **state)
{
    struct uzram *dev = *state;
    static const uint64_t words[] = {
        0, UINT64_MAX, 0x0123456789abcdefull, 0xdeadbeef00000000ull, 0xaaaaaaaaaaaaaaaaull, 1,
    };
    size_t n = sizeof words / sizeof words[0];
    uint8_t page[PAGE];
    for (size_t i = 0; i < n; i++) {
        test_fill_word(page, words[i]);
        test_write_pages(dev, 40 + i, page, 1);
    }
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.pages_stored, n);
    assert_int_equal(s.orig_data_size, n * PAGE);
    assert_int_equal(s.same_pages, n);
    assert_int_equal(s.zero_pages, 1);
    assert_int_equal(s.compr_data_size, 0);
    assert_int_equal(s.mem_used_total, 0);
    assert_int_equal(s.huge_pages, 0);
    for (size_t i = 0; i < n; i++) {
        test_fill_word(page, words[i]);
        test_expect_pages(dev, 40 + i, page, 1);
    }
    /* A same-filled page with a non-zero word is data, not a zero extent. */
    uint64_t run;
    unsigned flags;
    assert_int_equal(uzram_extent(dev, 41 * PAGE, PAGE, &run, &flags), 0);
    assert_int_equal(flags, 0);
    assert_int_equal(uzram_extent(dev, 40 * PAGE, PAGE, &run, &flags), 0);
    assert_int_equal(flags, UZRAM_EXTENT_ZERO);

    /* Almost same-filled: last word differs, a middle byte differs. Both
     * must be stored as data and read back exactly. */
    test_fill_word(page, 0x1111111111111111ull);
    page[PAGE - 1] = 0x12;
    test_write_pages(dev, 50, page, 1);
    test_expect_pages(dev, 50, page, 1);
    test_fill_word(page, 0x1111111111111111ull);
    page[2049] = 0x13;
    test_write_pages(dev, 51, page, 1);
    test_expect_pages(dev, 51, page, 1);
    test_fill_word(page, 0x1111111111111111ull);
    page[3] = 0x14;
    test_write_pages(dev, 52, page, 1);
    test_expect_pages(dev, 52, page, 1);
    s = test_stats(dev);
    assert_int_equal(s.same_pages, n);
    assert_int_equal(s.pages_stored, n + 3);
    assert_true(s.mem_used_total > 0);

    /* Overwriting a same page with data and back moves the counter. */
    test_fill_kind(9, DATAGEN_TEXT, page, PAGE);
    test_write_pages(dev, 42, page, 1);
    assert_int_equal(test_stats(dev).same_pages, n - 1);
    test_fill_word(page, 77);
    test_write_pages(dev, 50, page, 1);
    assert_int_equal(test_stats(dev).same_pages, n);
}

static void test_same_filled_off(void **state)
{
    (void)state;
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK_SIZE;
    config.same_filled = false;
    struct uzram *dev = NULL;
    assert_int_equal(uzram_create(&config, &dev), 0);
    uint8_t page[PAGE];
    test_fill_word(page, 0x4242424242424242ull);
    test_write_pages(dev, 0, page, 1);
    test_expect_pages(dev, 0, page, 1);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.same_pages, 0);
    assert_int_equal(s.pages_stored, 1);
    assert_true(s.compr_data_size > 0);
    assert_true(s.mem_used_total > 0);
    uzram_destroy(dev);
}

static void test_huge_pages(void **state)
{
    struct uzram *dev = *state;
    enum { N = 5 };
    uint8_t pages[N * PAGE];
    test_fill_kind(1, DATAGEN_RANDOM, pages, sizeof pages);
    test_write_pages(dev, 70, pages, N);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.huge_pages, N);
    assert_int_equal(s.huge_pages_since, N);
    assert_int_equal(s.compr_data_size, N * PAGE);
    assert_true(s.mem_used_total >= N * PAGE);
    test_expect_pages(dev, 70, pages, N);

    /* Overwrite two with compressible data: huge_pages drops, since stays. */
    uint8_t text[2 * PAGE];
    test_fill_kind(2, DATAGEN_TEXT, text, sizeof text);
    test_write_pages(dev, 70, text, 2);
    s = test_stats(dev);
    assert_int_equal(s.huge_pages, N - 2);
    assert_int_equal(s.huge_pages_since, N);
    assert_true(s.compr_data_size < N * PAGE);

    /* Overwriting a huge page with another huge page counts once more. */
    test_fill_kind(3, DATAGEN_RANDOM, pages, PAGE);
    test_write_pages(dev, 72, pages, 1);
    s = test_stats(dev);
    assert_int_equal(s.huge_pages, N - 2);
    assert_int_equal(s.huge_pages_since, N + 1);
    test_expect_pages(dev, 72, pages, 1);

    /* A partial write into a huge page keeps it readable. */
    uint8_t sector[SECTOR];
    test_fill_kind(4, DATAGEN_RANDOM, sector, SECTOR);
    assert_int_equal(uzram_write(dev, 72 * PAGE + 3 * SECTOR, sector, SECTOR), 0);
    memcpy(pages + 3 * SECTOR, sector, SECTOR);
    test_expect_pages(dev, 72, pages, 1);

    /* Discarding the huge pages brings huge_pages to 0, since stays. */
    assert_int_equal(uzram_discard(dev, 70 * PAGE, N * PAGE), 0);
    s = test_stats(dev);
    assert_int_equal(s.huge_pages, 0);
    assert_true(s.huge_pages_since >= N + 1);
    assert_int_equal(s.mem_used_total, 0);
}

/* ------------------------------------------------------------------------
 * Settings
 * ---------------------------------------------------------------------- */

static void expect_settings(struct uzram *dev, int expected)
{
    assert_int_equal(uzram_set_algorithm(dev, "zstd", 0), expected);
    assert_int_equal(uzram_set_same_filled(dev, true), expected);
    assert_int_equal(uzram_set_dedup(dev, false), expected);
    /* mem_limit is accepted at any time. */
    assert_int_equal(uzram_set_mem_limit(dev, 1 << 20), 0);
    assert_int_equal(uzram_set_mem_limit(dev, 0), 0);
}

static void test_settings_busy(void **state)
{
    struct uzram *dev = *state;
    expect_settings(dev, 0);
    struct uzram_config config;
    assert_int_equal(uzram_get_config(dev, &config), 0);
    assert_string_equal(config.comp_algorithm, "zstd");
    assert_int_equal(config.disksize, DISK_SIZE);

    uint8_t page[PAGE];
    test_fill_kind(1, DATAGEN_TEXT, page, PAGE);
    test_write_pages(dev, 3, page, 1);
    expect_settings(dev, -EBUSY);
    /* The failed calls changed nothing. */
    assert_int_equal(uzram_set_algorithm(dev, "lzo", 0), -EBUSY);
    assert_int_equal(uzram_get_config(dev, &config), 0);
    assert_string_equal(config.comp_algorithm, "zstd");
    test_expect_pages(dev, 3, page, 1);

    /* A zero page is still a page the device holds. */
    assert_int_equal(uzram_discard(dev, 3 * PAGE, PAGE), 0);
    assert_int_equal(uzram_write_zeroes(dev, 5 * PAGE, PAGE, true), 0);
    expect_settings(dev, -EBUSY);

    /* Once everything is discarded, the settings are accepted again. */
    assert_int_equal(uzram_write_zeroes(dev, 0, DISK_SIZE, false), 0);
    expect_settings(dev, 0);

    /* And after a reset. */
    test_write_pages(dev, 7, page, 1);
    expect_settings(dev, -EBUSY);
    assert_int_equal(uzram_reset(dev), 0);
    expect_settings(dev, 0);

    /* Bad values. */
    assert_int_equal(uzram_set_algorithm(dev, "nosuch", 0), -ENOENT);
    int min, max, dflt;
    assert_int_equal(uzram_algorithm_levels("zstd", &min, &max, &dflt), 0);
    assert_int_equal(uzram_set_algorithm(dev, "zstd", max + 1), -EINVAL);
    assert_int_equal(uzram_set_algorithm(dev, "zstd", max), 0);
    assert_int_equal(uzram_get_config(dev, &config), 0);
    assert_int_equal(config.comp_level, max);
    /* The device works with the settings it accepted. */
    test_write_pages(dev, 7, page, 1);
    test_expect_pages(dev, 7, page, 1);
}

/* ------------------------------------------------------------------------
 * Extents
 * ---------------------------------------------------------------------- */

static void expect_extent(struct uzram *dev, uint64_t offset, uint64_t length,
                          uint64_t expected_run, unsigned expected_flags)
{
    uint64_t run = 0;
    unsigned flags = 99;
    int rc = uzram_extent(dev, offset, length, &run, &flags);
    if (rc != 0 || run != expected_run || flags != expected_flags)
        fail_msg("extent(%llu, %llu): rc %d run %llu flags %u, expected run %llu flags %u",
                 (unsigned long long)offset, (unsigned long long)length, rc,
                 (unsigned long long)run, flags, (unsigned long long)expected_run, expected_flags);
}

static void test_extent(void **state)
{
    struct uzram *dev = *state;
    const unsigned HZ = UZRAM_EXTENT_HOLE | UZRAM_EXTENT_ZERO;
    const unsigned Z = UZRAM_EXTENT_ZERO;
    uint8_t page[PAGE];
    /* Layout: 0 hole, 1 data, 2 zero (write_zeroes keep), 3-5 data,
     * 6-7 hole, 8 same-filled non-zero, 9 zero page written as data,
     * 10.. hole to the end. */
    test_fill_kind(1, DATAGEN_TEXT, page, PAGE);
    test_write_pages(dev, 1, page, 1);
    test_write_pages(dev, 3, page, 1);
    test_write_pages(dev, 4, page, 1);
    test_fill_kind(2, DATAGEN_RANDOM, page, PAGE);
    test_write_pages(dev, 5, page, 1);
    assert_int_equal(uzram_write_zeroes(dev, 2 * PAGE, PAGE, true), 0);
    test_fill_word(page, 0x0101010101010101ull);
    test_write_pages(dev, 8, page, 1);
    memset(page, 0, PAGE);
    test_write_pages(dev, 9, page, 1);

    expect_extent(dev, 0, DISK_SIZE, PAGE, HZ);
    expect_extent(dev, PAGE, DISK_SIZE - PAGE, PAGE, 0);
    expect_extent(dev, 2 * PAGE, DISK_SIZE - 2 * PAGE, PAGE, Z);
    expect_extent(dev, 3 * PAGE, DISK_SIZE - 3 * PAGE, 3 * PAGE, 0);
    expect_extent(dev, 6 * PAGE, DISK_SIZE - 6 * PAGE, 2 * PAGE, HZ);
    expect_extent(dev, 8 * PAGE, DISK_SIZE - 8 * PAGE, PAGE, 0);
    expect_extent(dev, 9 * PAGE, DISK_SIZE - 9 * PAGE, PAGE, Z);
    expect_extent(dev, 10 * PAGE, DISK_SIZE - 10 * PAGE, DISK_SIZE - 10 * PAGE, HZ);

    /* Unaligned offsets: the run ends where the page's status changes. */
    expect_extent(dev, PAGE + 100, DISK_SIZE - PAGE - 100, PAGE - 100, 0);
    expect_extent(dev, 3 * PAGE + 1, DISK_SIZE - 3 * PAGE - 1, 3 * PAGE - 1, 0);
    expect_extent(dev, 7, 100, 100, HZ);
    expect_extent(dev, DISK_SIZE - 1, 1, 1, HZ);

    /* run_length is capped at length. */
    expect_extent(dev, 3 * PAGE, PAGE, PAGE, 0);
    expect_extent(dev, 3 * PAGE, 100, 100, 0);
    expect_extent(dev, 6 * PAGE + 10, 5000, 5000, HZ);
    expect_extent(dev, 6 * PAGE + 10, 2 * PAGE, 2 * PAGE - 10, HZ);
    expect_extent(dev, 12 * PAGE, 3 * PAGE, 3 * PAGE, HZ);

    /* Discard turns data back into a hole. */
    assert_int_equal(uzram_discard(dev, 3 * PAGE, 3 * PAGE), 0);
    expect_extent(dev, 3 * PAGE, DISK_SIZE - 3 * PAGE, 5 * PAGE, HZ);
}

/* ------------------------------------------------------------------------
 * Reset
 * ---------------------------------------------------------------------- */

static void test_reset(void **state)
{
    (void)state;
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK_SIZE;
    config.comp_algorithm = "zstd";
    config.comp_level = 5;
    config.same_filled = true;
    struct uzram *dev = NULL;
    assert_int_equal(uzram_create(&config, &dev), 0);

    uint8_t *content = malloc(64 * PAGE);
    for (unsigned p = 0; p < 64; p++)
        test_fill_kind(p, (enum datagen_kind)(p % DATAGEN_KIND_COUNT), content + p * PAGE, PAGE);
    test_write_pages(dev, 0, content, 64);
    assert_int_equal(uzram_discard(dev, 0, 8 * PAGE), 0);
    assert_int_equal(uzram_read(dev, 1, content, SECTOR), -EINVAL);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    struct uzram_stats s0 = test_stats(dev);
    uint64_t limit = s0.mem_used_total;
    assert_int_equal(uzram_set_mem_limit(dev, limit), 0);
    test_fill_kind(999, DATAGEN_RANDOM, content, PAGE);
    assert_int_equal(uzram_write(dev, 100 * PAGE, content, PAGE), -ENOSPC);
    s0 = test_stats(dev);
    assert_true(s0.pages_stored > 0);
    assert_true(s0.invalid_io > 0);
    assert_true(s0.failed_writes > 0);
    assert_true(s0.notify_free > 0);
    assert_true(s0.huge_pages_since > 0);

    assert_int_equal(uzram_reset(dev), 0);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.orig_data_size, 0);
    assert_int_equal(s.compr_data_size, 0);
    assert_int_equal(s.mem_used_total, 0);
    assert_int_equal(s.mem_limit, limit);
    assert_int_equal(s.mem_used_max, 0);
    assert_int_equal(s.same_pages, 0);
    assert_int_equal(s.pages_compacted, 0);
    assert_int_equal(s.huge_pages, 0);
    assert_int_equal(s.huge_pages_since, 0);
    assert_int_equal(s.dup_data_size, 0);
    assert_int_equal(s.failed_reads, 0);
    assert_int_equal(s.failed_writes, 0);
    assert_int_equal(s.invalid_io, 0);
    assert_int_equal(s.notify_free, 0);
    assert_int_equal(s.dedup_hash_collisions, 0);
    assert_int_equal(s.pages_stored, 0);
    assert_int_equal(s.zero_pages, 0);

    struct uzram_config after;
    assert_int_equal(uzram_get_config(dev, &after), 0);
    assert_string_equal(after.comp_algorithm, "zstd");
    assert_int_equal(after.comp_level, 5);
    assert_true(after.same_filled);
    assert_false(after.use_dedup);
    assert_int_equal(after.disksize, DISK_SIZE);
    assert_int_equal(after.mem_limit, limit);

    test_expect_zero_pages(dev, 0, DISK_PAGES);
    uint64_t run;
    unsigned flags;
    assert_int_equal(uzram_extent(dev, 0, DISK_SIZE, &run, &flags), 0);
    assert_int_equal(flags, UZRAM_EXTENT_HOLE | UZRAM_EXTENT_ZERO);
    assert_int_equal(run, DISK_SIZE);

    /* Usable again, with the same settings. */
    assert_int_equal(uzram_set_mem_limit(dev, 0), 0);
    test_fill_kind(5, DATAGEN_TEXT, content, PAGE);
    test_write_pages(dev, 3, content, 1);
    test_expect_pages(dev, 3, content, 1);
    free(content);
    uzram_destroy(dev);
}

static void test_create_errors(void **state)
{
    (void)state;
    struct uzram_config config;
    struct uzram *dev = NULL;
    uzram_config_init(&config);
    assert_int_equal(config.disksize, 0);
    assert_true(config.same_filled);
    assert_false(config.use_dedup);
    assert_int_equal(config.mem_limit, 0);
    assert_int_equal(uzram_create(&config, &dev), -EINVAL); /* disksize 0 */
    config.disksize = PAGE + SECTOR;
    assert_int_equal(uzram_create(&config, &dev), -EINVAL);
    config.disksize = DISK_SIZE;
    assert_int_equal(uzram_create(NULL, &dev), -EINVAL);
    assert_int_equal(uzram_create(&config, NULL), -EINVAL);
    config.comp_algorithm = "nosuch";
    assert_int_equal(uzram_create(&config, &dev), -ENOENT);
    config.comp_algorithm = "zstd";
    config.comp_level = 1000;
    assert_int_equal(uzram_create(&config, &dev), -EINVAL);
    config.comp_level = 0;
    config.mem_limit = 1 << 20;
    /* room for later settings: zero from uzram_config_init(); a value there
     * is a setting this library does not have, refused rather than ignored */
    for (size_t i = 0; i < sizeof config.reserved / sizeof config.reserved[0]; i++)
        assert_true(config.reserved[i] == 0);
    config.reserved[3] = 1;
    assert_int_equal(uzram_create(&config, &dev), -EINVAL);
    config.reserved[3] = 0;
    assert_int_equal(uzram_create(&config, &dev), 0);
    assert_int_equal(test_stats(dev).mem_limit, 1 << 20);
    /* uzram_get_config() gives back what was set, `reserved` zero */
    struct uzram_config back;
    memset(&back, 0xff, sizeof back);
    assert_int_equal(uzram_get_config(dev, &back), 0);
    assert_string_equal(back.comp_algorithm, "zstd");
    assert_true(back.disksize == DISK_SIZE && back.mem_limit == 1 << 20 && back.same_filled &&
                !back.use_dedup && back.comp_level == 3);
    for (size_t i = 0; i < sizeof back.reserved / sizeof back.reserved[0]; i++)
        assert_true(back.reserved[i] == 0);
    uzram_destroy(dev);
    uzram_destroy(NULL);
}

/* The version the header names is the library's, in both forms. */
static void test_version(void **state)
{
    (void)state;
    assert_int_equal(uzram_version_number(), UZRAM_VERSION_NUMBER);
    assert_string_equal(uzram_version(), UZRAM_VERSION_STRING);
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", UZRAM_VERSION_MAJOR, UZRAM_VERSION_MINOR,
             UZRAM_VERSION_PATCH);
    assert_string_equal(uzram_version(), expected);
    assert_int_equal(UZRAM_VERSION_NUMBER,
                     UZRAM_VERSION_MAJOR * 10000 + UZRAM_VERSION_MINOR * 100 + UZRAM_VERSION_PATCH);
}

#define DEVICE_TEST(name)                                                                          \
    cmocka_unit_test_setup_teardown(name, test_setup_device, test_teardown_device)

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        DEVICE_TEST(test_fresh_device_reads_zeros),
        DEVICE_TEST(test_whole_pages_roundtrip),
        DEVICE_TEST(test_partial_pages),
        DEVICE_TEST(test_invalid_io),
        DEVICE_TEST(test_zero_length_io),
        DEVICE_TEST(test_discard),
        DEVICE_TEST(test_write_zeroes),
        DEVICE_TEST(test_same_filled_pages),
        cmocka_unit_test(test_same_filled_off),
        DEVICE_TEST(test_huge_pages),
        DEVICE_TEST(test_settings_busy),
        DEVICE_TEST(test_extent),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_version),
    };
    return cmocka_run_group_tests_name("io", tests, NULL, NULL);
}
