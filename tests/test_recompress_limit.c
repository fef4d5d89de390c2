/* test_recompress_limit.c - recompression of a device whose pool is exactly at mem_limit: a
 * pass by request recompresses (nearly) every page an unlimited twin does, the pool never goes
 * past the limit by more than the bound pool.h states (pool_replace_grace_max), and every page
 * reads back as written. (A pass at the limit used to stop at its first page once the one span
 * it might go past the limit was full, and every later pass the same.) */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pool/pool.h" /* pool_replace_grace_max */
#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
/* A pool of about 30 MiB: larger than the bound, so that a pass that went past the limit
 * by much more than the holes it left would show. */
#define PAGES 16384u

/* Text and binary pages of varying compressibility, so that their objects, and the holes the
 * recompressed ones leave, spread over many size classes. */
static unsigned char *write_mixed(struct uzram *dev, uint64_t seed)
{
    unsigned char *data = malloc((size_t)PAGES * PAGE);
    assert_non_null(data);
    for (unsigned i = 0; i < PAGES; i++)
        datagen_page(seed, i % 3 == 0 ? DATAGEN_HALF : DATAGEN_TEXT, i, data + (size_t)i * PAGE);
    /* Written in a scattered order: the objects of a span belong to pages far apart, so a
     * pass, which goes through the pages in order, empties no span for a long time. */
    for (unsigned i = 0; i < PAGES; i++) {
        unsigned p = (unsigned)((uint64_t)i * 2741u % PAGES);
        test_write_pages(dev, p, data + (size_t)p * PAGE, 1);
    }
    return data;
}

static struct uzram *recompressing_device(void)
{
    struct uzram *dev = test_device((uint64_t)PAGES * PAGE, "lz4", 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 3), 0);
    return dev;
}

static void test_recompress_at_exact_limit(void **state)
{
    (void)state;
    uint64_t seed = test_random_seed("recompress_limit");
    /* What a pass recompresses with no limit: the measure of "most pages". */
    struct uzram *twin = recompressing_device();
    unsigned char *data = write_mixed(twin, seed);
    struct uzram_recompress_result free_run = {0};
    assert_int_equal(uzram_recompress(twin, 0, 0, 0, 0, &free_run), 0);
    uzram_destroy(twin);
    free(data);
    assert_true(free_run.pages_recompressed >= PAGES / 2);

    struct uzram *dev = recompressing_device();
    data = write_mixed(dev, seed);
    uint64_t used = test_stats(dev).mem_used_total;
    assert_int_equal(uzram_set_mem_limit(dev, used), 0);
    assert_int_equal(uzram_reset_mem_used_max(dev), 0);
    struct uzram_recompress_result result = {0};
    int rc = uzram_recompress(dev, 0, 0, 0, 0, &result);
    struct uzram_stats after = test_stats(dev);
    uint64_t bound = pool_replace_grace_max();
    print_message("limit %llu bytes (the pool's own): %llu of %llu pages recompressed (%llu with "
                  "no limit), rc %d; pool at most %llu bytes past the limit (bound %llu), %llu "
                  "bytes after the pass\n",
                  (unsigned long long)used, (unsigned long long)result.pages_recompressed,
                  (unsigned long long)result.pages_tried,
                  (unsigned long long)free_run.pages_recompressed, rc,
                  (unsigned long long)(after.mem_used_max > used ? after.mem_used_max - used : 0),
                  (unsigned long long)bound, (unsigned long long)after.mem_used_total);
    assert_int_equal(rc, 0);
    assert_true(result.pages_recompressed >= free_run.pages_recompressed / 10 * 9);
    assert_true(after.mem_used_max <= used + bound);
    /* what the pass saved is given back: the pool ends below the limit it started at */
    assert_true(after.mem_used_total < used);
    test_expect_pages(dev, 0, data, PAGES);

    /* A second pass finds the pages done, and the data holds. */
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, &result), 0);
    assert_true(test_stats(dev).mem_used_max <= used + bound);
    test_expect_pages(dev, 0, data, PAGES);
    uzram_destroy(dev);
    free(data);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recompress_at_exact_limit),
    };
    return cmocka_run_group_tests_name("recompress_limit", tests, NULL, NULL);
}
