/* test_util.h - shared helpers for the unit and model tests.
 * Devices made and read in one line, the test filter, and the seeded data generator. */
#ifndef UZRAM_TEST_UTIL_H
#define UZRAM_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "uzram.h"

/* Page contents come from the programs' seeded generator (src/common/datagen.h):
 * one generator serves the bench, the estimate tests and the unit tests. */
#include "common/datagen.h"

/* Run only the tests whose names match argv[1] or $UZRAM_TEST_FILTER: a
 * cmocka glob, or a bare word such as "concurrent" meaning "*concurrent*"
 * (`make tsan` runs the concurrent tests this way). */
void test_apply_filter(int argc, char **argv);

/* Make a device of `disksize` bytes with `algorithm` (NULL: lz4) and dedup
 * on or off; aborts the test on failure. Inline so that tests of internal
 * parts (pool, comp) link without the rest of the engine. */
static inline struct uzram *test_device(uint64_t disksize, const char *algorithm, int use_dedup)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = disksize;
    if (algorithm)
        config.comp_algorithm = algorithm;
    config.use_dedup = use_dedup != 0;
    struct uzram *dev = NULL;
    int rc = uzram_create(&config, &dev);
    if (rc != 0) {
        fprintf(stderr, "uzram_create(%llu, %s, dedup=%d) failed: %d\n",
                (unsigned long long)disksize, algorithm ? algorithm : "lz4", use_dedup, rc);
        abort();
    }
    return dev;
}

/* A folder of the test's own (several test runs may run at once), "uzram-NAME.XXXXXX" in
 * $TMPDIR or /tmp, made with mkdtemp, into `folder`. Returns 0, or -1. */
int test_make_folder(char *folder, size_t size, const char *name);

/* Attach a backing file of its own to `dev`: made with mkstemp, attached
 * (uzram_set_backing_dev) and unlinked at once, the open store keeping it.
 * `memory`: in /dev/shm when it is there (tmpfs: no O_DIRECT, no disk
 * latency), for tests that go through the store thousands of times; else
 * in $TMPDIR or /tmp, on a real file system. Returns what attaching
 * returned, or -errno of making the file. */
int test_attach_backing(struct uzram *dev, int memory);

/* The seed of a test's random choices: $UZRAM_TEST_SEED when set (a failure replayed),
 * else one from the clock and the pid; printed on stderr with `what` either way, so that a
 * failure's output names the seed that replays it. */
uint64_t test_random_seed(const char *what);

/* Page contents and whole-page I/O that asserts: `length` bytes of datagen `kind` from
 * `seed`; a page of one 8-byte word; `pages` pages written from, or read and compared with,
 * `buf` at page `first_page` (zero bytes: test_expect_zero_pages). */
void test_fill_kind(uint64_t seed, enum datagen_kind kind, void *buf, size_t length);
void test_fill_word(void *page, uint64_t word);
void test_write_pages(struct uzram *dev, uint64_t first_page, const void *buf, size_t pages);
void test_expect_pages(struct uzram *dev, uint64_t first_page, const void *expected, size_t pages);
void test_expect_zero_pages(struct uzram *dev, uint64_t first_page, size_t pages);

/* Split a '\n'-terminated line of space-separated decimal numbers (mm_stat, io_stat), every
 * field all digits (else the test fails); the first `max` in `fields`. Returns how many. */
int test_parse_fields(const char *line, uint64_t *fields, int max);

/* cmocka fixtures: a device of TEST_DEVICE_PAGES pages (lz4, no dedup) in *state, and its
 * end. */
#define TEST_DEVICE_PAGES 256u
int test_setup_device(void **state);
int test_teardown_device(void **state);

/* Statistics snapshot; aborts on failure. */
static inline struct uzram_stats test_stats(struct uzram *dev)
{
    struct uzram_stats stats;
    if (uzram_get_stats(dev, &stats, sizeof stats) != 0)
        abort();
    return stats;
}

#endif
