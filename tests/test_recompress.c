/* test_recompress.c - unit tests of idle tracking and recompression: the idle marks and
 * last-access times, the `idle` attribute, and what they count in the statistics. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "recompress/recompress.h" /* recompressor_test_passes */
#include "store/store.h"           /* store_test_advance_clock */
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

/* ---- recompression ------------------------------------------------------ */

/* A page lz4 cannot shrink (no repeats) but an entropy coder halves: random
 * letters from a 16-symbol alphabet. */
static void fill_low_entropy(unsigned char *page, uint64_t seed)
{
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed);
    for (size_t i = 0; i < PAGE; i++)
        page[i] = (unsigned char)('a' + datagen_rng_below(&rng, 16));
}

#define SET_PAGES 96

/* Text and half-compressible pages, a same-filled one, a random one, and
 * low-entropy ones (raw under lz4); returns what was written. */
static void write_set(struct uzram *dev, unsigned char *model)
{
    for (uint64_t i = 0; i < SET_PAGES; i++) {
        unsigned char *page = model + i * PAGE;
        if (i % 8 == 7)
            fill_low_entropy(page, i);
        else
            fill_page(page, 1000 + i,
                      i == 3   ? DATAGEN_SAME
                      : i == 5 ? DATAGEN_RANDOM
                      : i % 2  ? DATAGEN_TEXT
                               : DATAGEN_HALF);
    }
    assert_int_equal(uzram_write(dev, 0, model, SET_PAGES * PAGE), 0);
}

static void expect_set(struct uzram *dev, const unsigned char *model)
{
    unsigned char *back = malloc(SET_PAGES * PAGE);
    assert_non_null(back);
    assert_int_equal(uzram_read(dev, 0, back, SET_PAGES * PAGE), 0);
    for (uint64_t i = 0; i < SET_PAGES; i++)
        if (memcmp(back + i * PAGE, model + i * PAGE, PAGE) != 0)
            fail_msg("page %llu differs after recompression", (unsigned long long)i);
    free(back);
}

static const char *const algorithms[] = {"lz4", "lzo", "lz4hc", "zstd", "deflate"};
#define ALGORITHM_COUNT (sizeof algorithms / sizeof algorithms[0])

/* Every pair of primary and secondary algorithm, dedup off and on: pages
 * read back exact, memory does not grow, the counters add up. */
static void test_recompress_pairs(void **state)
{
    (void)state;
    unsigned char *model = malloc(SET_PAGES * PAGE);
    assert_non_null(model);
    for (size_t p = 0; p < ALGORITHM_COUNT; p++)
        for (size_t q = 0; q < ALGORITHM_COUNT; q++)
            for (int dedup = 0; dedup <= 1; dedup++) {
                struct uzram *dev = test_device(DISK, algorithms[p], dedup);
                assert_int_equal(uzram_set_recomp_algorithm(dev, 1, algorithms[q], 0), 0);
                write_set(dev, model);
                struct uzram_stats before = test_stats(dev);
                assert_int_equal(uzram_mark_idle(dev, 0, NULL), 0);
                struct uzram_recompress_result result;
                assert_int_equal(uzram_recompress(dev, UZRAM_RECOMPRESS_IDLE, 0, 0, 0, &result), 0);
                struct uzram_stats after = test_stats(dev);
                expect_set(dev, model);
                if (after.compr_data_size > before.compr_data_size)
                    fail_msg("%s -> %s: compr_data_size grew %llu -> %llu", algorithms[p],
                             algorithms[q], (unsigned long long)before.compr_data_size,
                             (unsigned long long)after.compr_data_size);
                assert_int_equal(after.recomp_pages, result.pages_recompressed);
                assert_int_equal(after.recomp_bytes, result.bytes_before);
                assert_int_equal(after.recomp_saved_bytes,
                                 result.bytes_before - result.bytes_after);
                assert_int_equal(before.compr_data_size - after.compr_data_size,
                                 result.bytes_before - result.bytes_after);
                assert_int_equal(after.incompressible_pages, result.pages_incompressible);
                assert_true(result.pages_recompressed + result.pages_incompressible <=
                            result.pages_tried);
                assert_int_equal(after.pages_stored, before.pages_stored);
                /* zstd after anything weaker shrinks the text pages */
                if (strcmp(algorithms[q], "zstd") == 0 && strcmp(algorithms[p], "zstd") != 0)
                    assert_true(result.pages_recompressed > SET_PAGES / 4);
                /* a second pass finds nothing left to do */
                assert_int_equal(uzram_recompress(dev, UZRAM_RECOMPRESS_IDLE, 0, 0, 0, &result), 0);
                assert_int_equal(result.pages_recompressed, 0);
                /* every page can still be rewritten and discarded to nothing */
                write_set(dev, model);
                expect_set(dev, model);
                assert_int_equal(uzram_discard(dev, 0, DISK), 0);
                struct uzram_stats empty = test_stats(dev);
                assert_int_equal(empty.compr_data_size, 0);
                assert_int_equal(empty.mem_used_total, 0);
                assert_int_equal(empty.incompressible_pages, 0);
                uzram_destroy(dev);
            }
    free(model);
}

/* type=, threshold=, max_pages=, and same-filled pages left alone. */
static void test_recompress_types(void **state)
{
    (void)state;
    unsigned char *model = malloc(SET_PAGES * PAGE);
    assert_non_null(model);
    struct uzram *dev = test_device(DISK, "lz4", 0);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, NULL), -ENOENT); /* none set */
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    write_set(dev, model);
    uint64_t huge = test_stats(dev).huge_pages;
    assert_true(huge >= SET_PAGES / 8); /* the low-entropy pages, and the random one */
    struct uzram_recompress_result result;
    /* nothing is idle yet */
    assert_int_equal(uzram_recompress(dev, UZRAM_RECOMPRESS_IDLE, 0, 0, 0, &result), 0);
    assert_int_equal(result.pages_tried, 0);
    /* huge: the low-entropy pages now fit, the random one is incompressible */
    assert_int_equal(uzram_recompress(dev, UZRAM_RECOMPRESS_HUGE, 0, 0, 0, &result), 0);
    assert_int_equal(result.pages_tried, huge);
    assert_int_equal(result.pages_recompressed, huge - 1);
    assert_int_equal(result.pages_incompressible, 1);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.huge_pages, 1);
    assert_int_equal(s.incompressible_pages, 1);
    expect_set(dev, model);
    /* huge_idle: none idle yet; then max_pages stops after 5 tries */
    assert_int_equal(
        uzram_recompress(dev, UZRAM_RECOMPRESS_IDLE | UZRAM_RECOMPRESS_HUGE, 0, 0, 0, &result), 0);
    assert_int_equal(result.pages_tried, 0);
    assert_int_equal(uzram_mark_idle(dev, 0, NULL), 0);
    assert_int_equal(uzram_recompress(dev, 0, 0, 5, 0, &result), 0);
    assert_int_equal(result.pages_tried, 5);
    /* threshold: only objects of at least 2000 bytes, and only to below it */
    assert_int_equal(uzram_recompress(dev, 0, 2000, 0, 0, &result), 0);
    assert_true(result.pages_tried > 0);
    assert_true(result.bytes_after < 2000 * result.pages_recompressed + 1);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, &result), 0);
    expect_set(dev, model);
    /* the same-filled page is never recompressed nor marked */
    s = test_stats(dev);
    assert_int_equal(s.same_pages, 1);
    assert_int_equal(s.incompressible_pages, 1);
    assert_int_equal(uzram_recompress(dev, 4, 0, 0, 0, NULL), -EINVAL);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 4, NULL), -EINVAL);
    assert_int_equal(uzram_recompress(dev, 0, 4097, 0, 0, NULL), -EINVAL);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 2, NULL), -ENOENT);
    /* a write clears the incompressible mark */
    write_page(dev, 5, DATAGEN_TEXT, 5);
    assert_int_equal(test_stats(dev).incompressible_pages, 0);
    uzram_destroy(dev);
    free(model);
}

/* Priorities: 1 (lz4hc) is tried before 2 (zstd); a page stored by 2 is not
 * taken by a pass of priority 1; a setting changed under stored pages keeps
 * them readable. */
static void test_recompress_priorities(void **state)
{
    (void)state;
    unsigned char *model = malloc(SET_PAGES * PAGE);
    assert_non_null(model);
    struct uzram *dev = test_device(DISK, "lz4", 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "lz4hc", 12), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 2, "zstd", 19), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 0, "zstd", 0), -EINVAL);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 4, "zstd", 0), -EINVAL);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 99), -EINVAL);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "xz", 0), -ENOENT);
    write_set(dev, model);
    struct uzram_recompress_result result;
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 2, &result), 0);
    uint64_t by_zstd = result.pages_recompressed;
    assert_true(by_zstd > 0);
    assert_int_equal(result.pages_incompressible, 0); /* one priority: never marks */
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 1, &result), 0);
    /* the pages zstd stored are above priority 1: not tried */
    assert_true(result.pages_tried + by_zstd <= SET_PAGES);
    /* settings change under the stored pages, which stay readable */
    assert_int_equal(uzram_set_recomp_algorithm(dev, 2, "deflate", 0), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, NULL, 0), 0);
    expect_set(dev, model);
    char text[512];
    assert_true(uzram_attr_get(dev, "recomp_algorithm", text, sizeof text) > 0);
    assert_non_null(strstr(text, "#2: "));
    assert_non_null(strstr(text, "[deflate]"));
    assert_null(strstr(text, "#1: "));
    uzram_destroy(dev);
    free(model);
}

/* A shared object is recompressed once for all its references, and dedup
 * keeps finding it. */
static void test_recompress_dedup(void **state)
{
    (void)state;
    struct uzram *dev = test_device(DISK, "lz4", 1);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    unsigned char page[PAGE];
    fill_page(page, 7, DATAGEN_TEXT);
    for (uint64_t i = 0; i < 10; i++)
        assert_int_equal(uzram_write(dev, i * PAGE, page, PAGE), 0);
    struct uzram_stats before = test_stats(dev);
    assert_int_equal(before.dup_data_size, 9 * before.compr_data_size);
    struct uzram_recompress_result result;
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, &result), 0);
    assert_int_equal(result.pages_recompressed, 1);
    struct uzram_stats after = test_stats(dev);
    assert_true(after.compr_data_size < before.compr_data_size);
    assert_int_equal(after.dup_data_size, 9 * after.compr_data_size);
    assert_int_equal(after.recomp_saved_bytes, before.compr_data_size - after.compr_data_size);
    /* the same page written again still finds the (recompressed) entry */
    assert_int_equal(uzram_write(dev, 20 * PAGE, page, PAGE), 0);
    struct uzram_stats again = test_stats(dev);
    assert_int_equal(again.compr_data_size, after.compr_data_size);
    assert_int_equal(again.dup_data_size, 10 * after.compr_data_size);
    for (uint64_t i = 0; i < 10; i++) {
        unsigned char back[PAGE];
        assert_int_equal(uzram_read(dev, i * PAGE, back, PAGE), 0);
        assert_memory_equal(back, page, PAGE);
    }
    assert_int_equal(uzram_discard(dev, 0, DISK), 0);
    struct uzram_stats empty = test_stats(dev);
    assert_int_equal(empty.dup_data_size, 0);
    assert_int_equal(empty.compr_data_size, 0);
    uzram_destroy(dev);
}

/* Dictionaries: trained from stored pages (dict=auto) or loaded; counted in
 * mem_used_total while any page needs them, freed with the last one. */
static void test_recompress_dictionaries(void **state)
{
    (void)state;
    enum { PAGES_WRITTEN = 512 };
    unsigned char *model = malloc(PAGES_WRITTEN * PAGE);
    assert_non_null(model);
    for (uint64_t i = 0; i < PAGES_WRITTEN; i++)
        fill_page(model + i * PAGE, 5000 + i, i % 3 ? DATAGEN_TEXT : DATAGEN_HALF);
    for (int dedup = 0; dedup <= 1; dedup++) {
        struct uzram *dev = test_device(DISK, "lz4", dedup);
        assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
        /* empty device: dict=auto waits for pages */
        assert_int_equal(uzram_attr_set(dev, "algorithm_params", "priority=1 level=7 dict=auto"),
                         0);
        assert_int_equal(test_stats(dev).dict_mem, 0);
        char text[512];
        assert_true(uzram_attr_get(dev, "algorithm_params", text, sizeof text) > 0);
        assert_non_null(strstr(text, "priority=1 algo=zstd level=7 dict=auto (to be trained"));
        assert_int_equal(uzram_write(dev, 0, model, PAGES_WRITTEN * PAGE), 0);
        uint64_t pool = test_stats(dev).mem_used_total;
        struct uzram_recompress_result result;
        assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, &result), 0);
        /* the old objects left holes in the pool: compaction gives them back */
        assert_int_equal(uzram_compact(dev, NULL), 0);
        struct uzram_stats s = test_stats(dev);
        assert_true(s.dict_mem > 0);
        assert_true(result.pages_recompressed > PAGES_WRITTEN / 2);
        /* the pool holds less; the dictionary is counted on top */
        assert_true(s.mem_used_total - s.dict_mem < pool);
        assert_true(s.mem_used_max >= s.mem_used_total);
        assert_true(uzram_attr_get(dev, "algorithm_params", text, sizeof text) > 0);
        assert_non_null(strstr(text, "dict=auto (trained"));
        unsigned char *back = malloc(PAGES_WRITTEN * PAGE);
        assert_non_null(back);
        assert_int_equal(uzram_read(dev, 0, back, PAGES_WRITTEN * PAGE), 0);
        assert_memory_equal(back, model, PAGES_WRITTEN * PAGE);
        /* the setting moves on; the pages keep their dictionary */
        assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "deflate", 0), 0);
        assert_int_equal(test_stats(dev).dict_mem, s.dict_mem);
        assert_int_equal(uzram_read(dev, 0, back, PAGES_WRITTEN * PAGE), 0);
        assert_memory_equal(back, model, PAGES_WRITTEN * PAGE);
        /* the last page made with it goes, and the dictionary with it */
        assert_int_equal(uzram_discard(dev, 0, DISK), 0);
        assert_int_equal(test_stats(dev).dict_mem, 0);
        assert_int_equal(test_stats(dev).mem_used_total, 0);
        free(back);
        uzram_destroy(dev);
    }
    /* dict=PATH: raw content as a dictionary; and what is refused */
    struct uzram *dev = test_device(DISK, "lz4", 0);
    char path[] = "/tmp/uzram-test-dict-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, model + PAGE, 8 * PAGE), 8 * PAGE);
    close(fd);
    char value[128];
    snprintf(value, sizeof value, "priority=1 dict=%s", path);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", value), -ENOENT); /* no #1 yet */
    assert_int_equal(uzram_attr_set(dev, "recomp_algorithm", "algo=zstd priority=1"), 0);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", value), 0);
    assert_true(test_stats(dev).dict_mem > 8 * PAGE);
    assert_int_equal(uzram_write(dev, 0, model, 64 * PAGE), 0);
    assert_int_equal(uzram_attr_set(dev, "recompress", "type=huge_idle"), 0);
    assert_int_equal(uzram_attr_set(dev, "idle", "all"), 0);
    assert_int_equal(uzram_attr_set(dev, "recompress", "type=idle algo=zstd"), 0);
    assert_true(test_stats(dev).recomp_pages > 32);
    unsigned char back[PAGE];
    for (uint64_t i = 0; i < 64; i++) {
        assert_int_equal(uzram_read(dev, i * PAGE, back, PAGE), 0);
        assert_memory_equal(back, model + i * PAGE, PAGE);
    }
    unlink(path);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", value), -ENOENT); /* file gone */
    assert_int_equal(uzram_attr_set(dev, "recomp_algorithm", "algo=lz4hc priority=2"), 0);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", "priority=2 dict=auto"), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", "priority=1 dict_size=100"), -EINVAL);
    /* the primary's level only while empty */
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", "priority=0 level=3"), -EBUSY);
    uzram_destroy(dev);
    free(model);
}

/* Bad values are refused, and each writable attribute says what it takes. */
static void test_recompress_attributes(void **state)
{
    (void)state;
    struct uzram *dev = test_device(DISK, NULL, 0);
    static const struct {
        const char *name, *value;
    } bad[] = {
        {"recomp_algorithm", "zstd"},
        {"recomp_algorithm", "algo=zstd priority=0"},
        {"recomp_algorithm", "algo=zstd priority=4"},
        {"recomp_algorithm", "algo=zstd level=x"},
        {"recomp_algorithm", "algo=zstd color=red"},
        {"recompress", "type=cold"},
        {"recompress", "threshold=4097"},
        {"recompress", "max_pages=-1"},
        {"recompress", "priority=9"},
        {"recompress", "idle"},
        {"recompress_idle", "soon"},
        {"recompress_rate", "-5"},
        {"algorithm_params", "priority=5 level=1"},
        {"algorithm_params", "level"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (uzram_attr_set(dev, bad[i].name, bad[i].value) != -EINVAL)
            fail_msg("%s '%s' not refused with EINVAL", bad[i].name, bad[i].value);
    assert_int_equal(uzram_attr_set(dev, "recompress", "algo=zstd"), -ENOENT);
    const char *names = uzram_attr_names();
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", names);
    for (char *save = NULL, *name = strtok_r(copy, " ", &save); name;
         name = strtok_r(NULL, " ", &save)) {
        char buf[64];
        bool writable = uzram_attr_set(dev, name, "\x01") != -EACCES;
        (void)buf;
        if (writable != (uzram_attr_usage(name) != NULL))
            fail_msg("attribute %s: writable %d but usage %s", name, writable,
                     uzram_attr_usage(name) ? uzram_attr_usage(name) : "(none)");
    }
    assert_null(uzram_attr_usage("nosuch"));
    char text[64];
    assert_int_equal(uzram_attr_set(dev, "recompress_rate", "1000"), 0);
    assert_true(uzram_attr_get(dev, "recompress_rate", text, sizeof text) > 0);
    assert_string_equal(text, "1000\n");
    assert_true(uzram_attr_get(dev, "recompress_idle", text, sizeof text) > 0);
    assert_string_equal(text, "0\n");
    uzram_destroy(dev);
}

/* A device for the background thread, with a secondary algorithm, no rate limit and the set
 * written (into `model`, SET_PAGES pages). */
static struct uzram *background_device(unsigned char *model)
{
    struct uzram *dev = test_device(DISK, "lz4", 1);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    assert_int_equal(uzram_set_recompress_rate(dev, 0), 0);
    write_set(dev, model);
    return dev;
}

/* The background thread: it recompresses pages unused for long enough, by
 * itself; reset pauses it, setting 0 and destroy stop it. */
static void test_concurrent_recompress_background(void **state)
{
    (void)state;
    unsigned char *model = malloc(SET_PAGES * PAGE);
    assert_non_null(model);
    struct uzram *dev = background_device(model);
    assert_int_equal(uzram_set_recompress_idle(dev, 60), 0);
    /* nothing is 60 s old: the first pass leaves everything */
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    assert_int_equal(test_stats(dev).recomp_pages, 0);
    store_test_advance_clock(dev, 61);
    assert_int_equal(uzram_set_recompress_idle(dev, 60), 0); /* wakes it */
    /* up to 2 min: the thread runs nicer than the test, within 20% of a CPU, and on a loaded
     * machine (TSan lane, 2 cores) its first page may be long in coming */
    for (int i = 0; i < 600 && test_stats(dev).recomp_pages == 0; i++)
        nanosleep(&pause, NULL);
    assert_true(test_stats(dev).recomp_pages > 0);
    expect_set(dev, model);
    /* reset while it runs, then more data, then destroy with it running */
    assert_int_equal(uzram_reset(dev), 0);
    assert_int_equal(test_stats(dev).recomp_pages, 0);
    write_set(dev, model);
    expect_set(dev, model);
    char text[64];
    assert_true(uzram_attr_get(dev, "recompress_idle", text, sizeof text) > 0);
    assert_string_equal(text, "60\n");
    assert_int_equal(uzram_attr_set(dev, "recompress_idle", "0"), 0);
    assert_int_equal(uzram_attr_set(dev, "recompress_idle", "1"), 0);
    uzram_destroy(dev);
    free(model);
}

/* The background thread waits half its idle time between passes: a pass by request, which
 * signals the thread's condition as it ends (for a reset waiting on it), does not start one.
 * (It did, a pass per request: the thread ran passes back to back beside a loop of requests.) */
static void test_concurrent_recompress_background_interval(void **state)
{
    (void)state;
    unsigned char *model = malloc(SET_PAGES * PAGE);
    assert_non_null(model);
    struct uzram *dev = background_device(model);
    /* the first pass, at once (waited for): nothing is 60 s old */
    assert_int_equal(uzram_set_recompress_idle(dev, 60), 0);
    struct timespec step = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 12000 && recompressor_test_passes(dev) == 0; i++)
        nanosleep(&step, NULL);
    assert_int_equal(recompressor_test_passes(dev), 1);
    /* everything is old enough now, but the next pass is 30 s away; requests (on pages
     * not marked idle: they change nothing) come and go meanwhile */
    store_test_advance_clock(dev, 61);
    for (int i = 0; i < 20; i++) {
        struct uzram_recompress_result result;
        assert_int_equal(uzram_recompress(dev, UZRAM_RECOMPRESS_IDLE, 0, 0, 0, &result), 0);
        assert_int_equal(result.pages_recompressed, 0);
        nanosleep(&step, NULL);
    }
    assert_int_equal(recompressor_test_passes(dev), 1);
    assert_int_equal(test_stats(dev).recomp_pages, 0);
    /* a new setting still starts a pass at once */
    assert_int_equal(uzram_set_recompress_idle(dev, 60), 0);
    for (int i = 0; i < 12000 && recompressor_test_passes(dev) == 1; i++)
        nanosleep(&step, NULL);
    assert_int_equal(recompressor_test_passes(dev), 2);
    assert_true(test_stats(dev).recomp_pages > 0);
    expect_set(dev, model);
    uzram_destroy(dev);
    free(model);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_all),
        cmocka_unit_test(test_idle_age),
        cmocka_unit_test(test_idle_attribute),
        cmocka_unit_test(test_recompress_pairs),
        cmocka_unit_test(test_recompress_types),
        cmocka_unit_test(test_recompress_priorities),
        cmocka_unit_test(test_recompress_dedup),
        cmocka_unit_test(test_recompress_dictionaries),
        cmocka_unit_test(test_recompress_attributes),
        cmocka_unit_test(test_concurrent_recompress_background),
        cmocka_unit_test(test_concurrent_recompress_background_interval),
    };
    return cmocka_run_group_tests_name("recompress", tests, NULL, NULL);
}
