/* test_util.h - shared helpers for the unit and model tests.
 * Seeded data generators (so runs repeat) and a few assertions on devices. */
#ifndef UZRAM_TEST_UTIL_H
#define UZRAM_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "uzram.h"

/* xorshift64* generator: deterministic for a seed, never returns the same
 * stream for different seeds. */
struct test_rng {
    uint64_t state;
};
void test_rng_seed(struct test_rng *rng, uint64_t seed);
uint64_t test_rng_next(struct test_rng *rng);
/* Uniform in [0, bound). */
uint64_t test_rng_below(struct test_rng *rng, uint64_t bound);

/* Kinds of page content the tests and benches draw from. */
enum test_data_kind {
    TEST_DATA_ZERO,   /* all zero bytes */
    TEST_DATA_SAME,   /* one random non-zero 8-byte word repeated */
    TEST_DATA_TEXT,   /* English-like words: compresses about 2-3x */
    TEST_DATA_HALF,   /* about 50% compressible binary */
    TEST_DATA_RANDOM, /* incompressible: stored huge */
    TEST_DATA_KIND_COUNT
};
const char *test_data_kind_name(enum test_data_kind kind);

/* Fill `length` bytes with data of `kind` from `rng`. */
void test_fill(struct test_rng *rng, enum test_data_kind kind, void *buf, size_t length);

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

/* Statistics snapshot; aborts on failure. */
static inline struct uzram_stats test_stats(struct uzram *dev)
{
    struct uzram_stats stats;
    if (uzram_get_stats(dev, &stats, sizeof stats) != 0)
        abort();
    return stats;
}

#endif
