/* test_attr.c - unit tests of the zram-style attributes by name (uzram_attr_get/set: every
 * name readable, the statistics they show against the text forms, the algorithm, its
 * parameters, the switches, mem_limit, mem_used_max, compact and reset) and of size parsing. */
#include <errno.h>
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
#define DISK_SIZE ((uint64_t)TEST_DEVICE_PAGES * PAGE) /* test_setup_device() */

/* ------------------------------------------------------------------------
 * Attributes
 * ---------------------------------------------------------------------- */

static int attr_get(struct uzram *dev, const char *name, char *buf, size_t size)
{
    int rc = uzram_attr_get(dev, name, buf, size);
    if (rc > 0) {
        assert_int_equal((size_t)rc, strlen(buf));
        assert_int_equal(buf[rc - 1], '\n');
    }
    return rc;
}

static uint64_t attr_number(struct uzram *dev, const char *name)
{
    char buf[256];
    int rc = attr_get(dev, name, buf, sizeof buf);
    if (rc <= 0)
        fail_msg("attr_get(%s) returned %d", name, rc);
    char *end;
    uint64_t value = strtoull(buf, &end, 10);
    if (end == buf || *end != '\n')
        fail_msg("attribute %s is not one number: \"%s\"", name, buf);
    return value;
}

static void test_attr_names_readable(void **state)
{
    struct uzram *dev = *state;
    const char *names = uzram_attr_names();
    assert_non_null(names);
    static const char *const documented[] = {
        "disksize",    "initstate", "comp_algorithm", "algorithm_params",
        "same_filled", "use_dedup", "mem_limit",      "mem_used_max",
        "mm_stat",     "io_stat",   "debug_stat",     "stat_json",
        "compact",     "reset",
    };
    char list[1024];
    snprintf(list, sizeof list, " %s ", names);
    for (size_t i = 0; i < sizeof documented / sizeof documented[0]; i++) {
        char word[64];
        snprintf(word, sizeof word, " %s ", documented[i]);
        if (!strstr(list, word))
            fail_msg("uzram_attr_names() lacks \"%s\": \"%s\"", documented[i], names);
    }

    char copy[1024];
    snprintf(copy, sizeof copy, "%s", names);
    int count = 0;
    for (char *save = NULL, *name = strtok_r(copy, " ", &save); name;
         name = strtok_r(NULL, " ", &save)) {
        char buf[2048];
        int rc = attr_get(dev, name, buf, sizeof buf);
        if (strcmp(name, "compact") == 0 || strcmp(name, "reset") == 0 ||
            strcmp(name, "idle") == 0 || strcmp(name, "recompress") == 0 ||
            strcmp(name, "writeback") == 0) {
            if (rc != -EACCES)
                fail_msg("attr_get(%s) returned %d, expected -EACCES", name, rc);
        } else if (rc <= 0) {
            fail_msg("attr_get(%s) returned %d", name, rc);
        }
        count++;
    }
    assert_true(count >= 14);

    char buf[64];
    assert_int_equal(uzram_attr_get(dev, "nosuch", buf, sizeof buf), -ENOENT);
    assert_int_equal(uzram_attr_set(dev, "nosuch", "1"), -ENOENT);
    assert_int_equal(uzram_attr_get(dev, "", buf, sizeof buf), -ENOENT);
    /* Too small a buffer. */
    assert_int_equal(uzram_attr_get(dev, "mm_stat", buf, 4), -ERANGE);
    assert_int_equal(uzram_attr_get(dev, "stat_json", buf, sizeof buf), -ERANGE);

    assert_int_equal(attr_number(dev, "disksize"), DISK_SIZE);
    /* Read-only attributes refuse writes. */
    static const char *const read_only[] = {"mm_stat",   "io_stat",   "debug_stat", "bd_stat",
                                            "stat_json", "initstate", "disksize"};
    for (size_t i = 0; i < sizeof read_only / sizeof read_only[0]; i++) {
        int rc = uzram_attr_set(dev, read_only[i], "1");
        if (rc != -EACCES)
            fail_msg("attr_set(%s) returned %d, expected -EACCES", read_only[i], rc);
    }
}

static void test_attr_stats_match_formats(void **state)
{
    struct uzram *dev = *state;
    uint8_t page[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 1);
    datagen_fill(&rng, DATAGEN_TEXT, page, PAGE);
    assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
    assert_int_equal(uzram_read(dev, 1, page, 512), -EINVAL);

    struct uzram_stats s = test_stats(dev);
    char expected[2048], got[2048];
    assert_true(uzram_format_mm_stat(&s, expected, sizeof expected) > 0);
    assert_true(attr_get(dev, "mm_stat", got, sizeof got) > 0);
    assert_string_equal(got, expected);
    assert_true(uzram_format_io_stat(&s, expected, sizeof expected) > 0);
    assert_true(attr_get(dev, "io_stat", got, sizeof got) > 0);
    assert_string_equal(got, expected);
    assert_true(uzram_format_json(&s, expected, sizeof expected) > 0);
    assert_true(attr_get(dev, "stat_json", got, sizeof got) > 0);
    assert_string_equal(got, expected);
    uint64_t fields[16];
    assert_true(attr_get(dev, "io_stat", got, sizeof got) > 0);
    assert_int_equal(test_parse_fields(got, fields, 16), 4);
    assert_int_equal(fields[2], 1); /* the one invalid read */
}

static void test_attr_comp_algorithm(void **state)
{
    struct uzram *dev = *state;
    char buf[256];
    assert_true(attr_get(dev, "comp_algorithm", buf, sizeof buf) > 0);
    assert_non_null(strstr(buf, "[lz4]"));
    assert_null(strstr(buf, "[zstd]"));
    /* Exactly one name in brackets. */
    assert_null(strchr(strchr(buf, '[') + 1, '['));

    assert_int_equal(uzram_attr_set(dev, "comp_algorithm", "zstd"), 0);
    assert_true(attr_get(dev, "comp_algorithm", buf, sizeof buf) > 0);
    assert_non_null(strstr(buf, "[zstd]"));
    assert_null(strstr(buf, "[lz4]"));
    /* The list matches uzram_algorithm_list(). */
    char list[256];
    int length = uzram_algorithm_list("zstd", list, sizeof list);
    assert_true(length > 0);
    assert_int_equal(strncmp(buf, list, (size_t)length - (list[length - 1] == '\n')), 0);
    assert_int_equal(uzram_algorithm_list("zstd", list, 3), -ERANGE);

    int rc = uzram_attr_set(dev, "comp_algorithm", "nosuch");
    assert_true(rc == -ENOENT || rc == -EINVAL);

    uint8_t page[PAGE];
    memset(page, 'x', PAGE);
    page[100] = 'y';
    assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
    assert_int_equal(uzram_attr_set(dev, "comp_algorithm", "lz4"), -EBUSY);
    assert_true(attr_get(dev, "comp_algorithm", buf, sizeof buf) > 0);
    assert_non_null(strstr(buf, "[zstd]"));

    /* reset "1" drops the data and lets the setting through again. */
    assert_int_equal(uzram_attr_set(dev, "reset", "1"), 0);
    assert_int_equal(test_stats(dev).pages_stored, 0);
    assert_int_equal(uzram_attr_set(dev, "comp_algorithm", "lz4"), 0);
    assert_true(attr_get(dev, "comp_algorithm", buf, sizeof buf) > 0);
    assert_non_null(strstr(buf, "[lz4]"));
}

static void test_attr_algorithm_params(void **state)
{
    struct uzram *dev = *state;
    int min, max, dflt;
    assert_int_equal(uzram_algorithm_levels("zstd", &min, &max, &dflt), 0);
    assert_true(min <= dflt && dflt <= max);
    assert_int_equal(uzram_algorithm_levels("nosuch", &min, &max, &dflt), -ENOENT);
    assert_int_equal(uzram_attr_set(dev, "comp_algorithm", "zstd"), 0);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", "level=5"), 0);
    struct uzram_config config;
    assert_int_equal(uzram_get_config(dev, &config), 0);
    assert_string_equal(config.comp_algorithm, "zstd");
    assert_int_equal(config.comp_level, 5);
    char buf[256];
    assert_true(attr_get(dev, "algorithm_params", buf, sizeof buf) > 0);
    assert_non_null(strstr(buf, "5"));

    char text[32];
    snprintf(text, sizeof text, "level=%d", max + 1);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", text), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", "level="), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", "level=abc"), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", "bogus"), -EINVAL);
    assert_int_equal(uzram_get_config(dev, &config), 0);
    assert_int_equal(config.comp_level, 5);

    /* The level is used: data still round-trips. */
    uint8_t page[PAGE], got[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 3);
    datagen_fill(&rng, DATAGEN_TEXT, page, PAGE);
    assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
    assert_int_equal(uzram_read(dev, 0, got, PAGE), 0);
    assert_memory_equal(got, page, PAGE);
    assert_int_equal(uzram_attr_set(dev, "algorithm_params", "level=3"), -EBUSY);
}

static void test_attr_switches(void **state)
{
    struct uzram *dev = *state;
    char buf[64];
    assert_int_equal(attr_number(dev, "use_dedup"), 0);
    assert_int_equal(attr_number(dev, "same_filled"), 1);
    assert_int_equal(uzram_attr_set(dev, "use_dedup", "1"), 0);
    assert_int_equal(attr_number(dev, "use_dedup"), 1);
    struct uzram_config config;
    assert_int_equal(uzram_get_config(dev, &config), 0);
    assert_true(config.use_dedup);
    assert_int_equal(uzram_attr_set(dev, "use_dedup", "0"), 0);
    assert_int_equal(attr_number(dev, "use_dedup"), 0);
    assert_int_equal(uzram_attr_set(dev, "use_dedup", "2"), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "use_dedup", "abc"), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "use_dedup", ""), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "same_filled", "0"), 0);
    assert_int_equal(attr_number(dev, "same_filled"), 0);
    assert_int_equal(uzram_attr_set(dev, "same_filled", "1"), 0);
    assert_int_equal(uzram_attr_set(dev, "same_filled", "yes please"), -EINVAL);

    uint8_t page[PAGE];
    memset(page, 0, PAGE);
    assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
    assert_int_equal(uzram_attr_set(dev, "use_dedup", "1"), -EBUSY);
    assert_int_equal(uzram_attr_set(dev, "same_filled", "0"), -EBUSY);
    assert_int_equal(attr_number(dev, "use_dedup"), 0);
    assert_int_equal(uzram_attr_get(dev, "use_dedup", buf, sizeof buf), 2);
}

static void test_attr_mem_limit(void **state)
{
    struct uzram *dev = *state;
    assert_int_equal(attr_number(dev, "mem_limit"), 0);
    assert_int_equal(uzram_attr_set(dev, "mem_limit", "64M"), 0);
    assert_int_equal(attr_number(dev, "mem_limit"), 67108864ull);
    assert_int_equal(test_stats(dev).mem_limit, 67108864ull);
    assert_int_equal(uzram_attr_set(dev, "mem_limit", "1G"), 0);
    assert_int_equal(attr_number(dev, "mem_limit"), 1ull << 30);
    assert_int_equal(uzram_attr_set(dev, "mem_limit", "4096"), 0);
    assert_int_equal(attr_number(dev, "mem_limit"), 4096);
    assert_int_equal(uzram_attr_set(dev, "mem_limit", "512K"), 0);
    assert_int_equal(attr_number(dev, "mem_limit"), 512 * 1024);
    assert_int_equal(uzram_attr_set(dev, "mem_limit", "abc"), -EINVAL);
    assert_int_equal(uzram_attr_set(dev, "mem_limit", "-5"), -EINVAL);
    assert_int_equal(attr_number(dev, "mem_limit"), 512 * 1024);

    /* Changeable while data is stored. */
    uint8_t page[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 4);
    datagen_fill(&rng, DATAGEN_TEXT, page, PAGE);
    assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
    assert_int_equal(uzram_attr_set(dev, "mem_limit", "2T"), 0);
    assert_int_equal(attr_number(dev, "mem_limit"), 2ull << 40);
    assert_int_equal(uzram_attr_set(dev, "mem_limit", "0"), 0);
    assert_int_equal(attr_number(dev, "mem_limit"), 0);
}

static void test_attr_mem_used_max(void **state)
{
    struct uzram *dev = *state;
    enum { PAGES = 32 };
    uint8_t *pages = malloc(PAGES * PAGE);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 5);
    datagen_fill(&rng, DATAGEN_RANDOM, pages, PAGES * PAGE);
    assert_int_equal(uzram_write(dev, 0, pages, PAGES * PAGE), 0);
    assert_int_equal(uzram_discard(dev, 0, (PAGES - 2) * PAGE), 0);
    struct uzram_stats s = test_stats(dev);
    assert_true(s.mem_used_max > s.mem_used_total);
    assert_int_equal(attr_number(dev, "mem_used_max"), s.mem_used_max);

    assert_int_equal(uzram_attr_set(dev, "mem_used_max", "5"), -EINVAL);
    assert_int_equal(attr_number(dev, "mem_used_max"), s.mem_used_max);
    assert_int_equal(uzram_attr_set(dev, "mem_used_max", "0"), 0);
    s = test_stats(dev);
    assert_int_equal(s.mem_used_max, s.mem_used_total);
    assert_int_equal(attr_number(dev, "mem_used_max"), s.mem_used_total);
    free(pages);
}

static void test_attr_compact_reset(void **state)
{
    struct uzram *dev = *state;
    uint8_t page[PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 6);
    for (unsigned p = 0; p < 64; p++) {
        datagen_fill(&rng, DATAGEN_TEXT, page, PAGE);
        assert_int_equal(uzram_write(dev, (uint64_t)p * PAGE, page, PAGE), 0);
    }
    for (unsigned p = 0; p < 64; p += 2)
        assert_int_equal(uzram_discard(dev, (uint64_t)p * PAGE, PAGE), 0);
    assert_int_equal(uzram_attr_set(dev, "compact", "1"), 0);
    assert_int_equal(uzram_attr_set(dev, "compact", "anything"), 0);
    char buf[64];
    assert_int_equal(uzram_attr_get(dev, "compact", buf, sizeof buf), -EACCES);
    assert_int_equal(uzram_attr_get(dev, "reset", buf, sizeof buf), -EACCES);

    assert_int_equal(uzram_attr_set(dev, "mem_limit", "1M"), 0);
    assert_int_equal(uzram_attr_set(dev, "reset", "1"), 0);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.pages_stored, 0);
    assert_int_equal(s.orig_data_size, 0);
    assert_int_equal(s.mem_used_total, 0);
    assert_int_equal(s.mem_limit, 1 << 20);
    assert_int_equal(s.pages_compacted, 0);
    assert_int_equal(uzram_read(dev, PAGE, page, PAGE), 0);
    for (unsigned i = 0; i < PAGE; i++)
        assert_int_equal(page[i], 0);
}

/* ------------------------------------------------------------------------
 * Size parsing
 * ---------------------------------------------------------------------- */

static void expect_size(const char *text, int expected_rc, uint64_t expected)
{
    uint64_t bytes = 12345;
    int rc = uzram_parse_size(text, &bytes);
    if (rc != expected_rc || (rc == 0 && bytes != expected))
        fail_msg("uzram_parse_size(\"%s\"): rc %d bytes %llu, expected rc %d bytes %llu", text, rc,
                 (unsigned long long)bytes, expected_rc, (unsigned long long)expected);
}

static void test_parse_size(void **state)
{
    (void)state;
    expect_size("4096", 0, 4096);
    expect_size("4K", 0, 4096);
    expect_size("512K", 0, 512 * 1024);
    expect_size("1.5M", 0, 1572864);
    expect_size("2G", 0, 2ull << 30);
    expect_size("1T", 0, 1ull << 40);
    expect_size("1.5G", 0, 3ull << 29);
    expect_size("0", 0, 0);
    expect_size("4KiB", 0, 4096);
    expect_size("4KB", 0, 4096);
    expect_size("64MiB", 0, 64ull << 20);
    /* Plain integers are exact, beyond a double's 53 bits too. */
    expect_size("9007199254740993", 0, 9007199254740993ull);
    expect_size("18446744073709551615", 0, UINT64_MAX);
    expect_size("", -EINVAL, 0);
    expect_size("abc", -EINVAL, 0);
    /* a trailing space once folded into strchr(units, 0) and a 1024^7 multiplier */
    expect_size("4096 ", 0, 4096);
    expect_size("0 ", 0, 0);
    expect_size("2K ", 0, 2048);
    expect_size("5X", -EINVAL, 0);
    expect_size("-1", -EINVAL, 0);
    expect_size("K", -EINVAL, 0);
    expect_size("4 K", -EINVAL, 0);
    expect_size("4KX", -EINVAL, 0);
    expect_size("99999999999999999999", -ERANGE, 0);
    expect_size("18446744073709551616", -ERANGE, 0);
    expect_size("16777216T", -ERANGE, 0); /* 2^64 */
    expect_size("17179869184G", -ERANGE, 0);
}

#define DEVICE_TEST(name)                                                                          \
    cmocka_unit_test_setup_teardown(name, test_setup_device, test_teardown_device)

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        DEVICE_TEST(test_attr_names_readable), DEVICE_TEST(test_attr_stats_match_formats),
        DEVICE_TEST(test_attr_comp_algorithm), DEVICE_TEST(test_attr_algorithm_params),
        DEVICE_TEST(test_attr_switches),       DEVICE_TEST(test_attr_mem_limit),
        DEVICE_TEST(test_attr_mem_used_max),   DEVICE_TEST(test_attr_compact_reset),
        cmocka_unit_test(test_parse_size),
    };
    return cmocka_run_group_tests_name("attr", tests, NULL, NULL);
}
