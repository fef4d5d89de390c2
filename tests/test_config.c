/* test_config.c - unit tests of `uzram serve`'s configuration file reader (src/server/config.c):
 * a file of tens of thousands of sections or keys is read with about one comparison of names
 * a line (it took seconds when each new section was compared with every earlier one), and
 * sections and keys given twice are still found, naming both lines. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/config.h"
#include "test_util.h"

static char path[64];

/* Write `text` to a file of its own; returns its path. */
static const char *write_file(const char *text)
{
    snprintf(path, sizeof path, "/tmp/uzram-config-test.XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t length = strlen(text);
    assert_int_equal(write(fd, text, length), (ssize_t)length);
    close(fd);
    return path;
}

/* The text of `sections` sections [dN], each with `keys` keys kM = N. */
static char *many(unsigned sections, unsigned keys)
{
    size_t size = (size_t)sections * (16 + keys * 24) + 1, used = 0;
    char *text = malloc(size);
    assert_non_null(text);
    for (unsigned s = 0; s < sections; s++) {
        used += (size_t)snprintf(text + used, size - used, "[d%u]\n", s);
        for (unsigned k = 0; k < keys; k++)
            used += (size_t)snprintf(text + used, size - used, "k%u = %u\n", k, s);
    }
    return text;
}

static void test_many_sections(void **state)
{
    (void)state;
    const unsigned count = 58871; /* the file of issue 24: 8 s to read */
    char *text = many(count, 0);
    struct config *config = NULL;
    char error[512];
    assert_int_equal(config_load(write_file(text), &config, error, sizeof error), 0);
    unlink(path);
    assert_int_equal(config->section_count, count);
    /* a comparison of names per line, give or take collisions: not one per earlier section */
    if (config->comparisons > 4 * (size_t)count)
        fail_msg("%zu comparisons of names for %u sections", config->comparisons, count);
    const struct config_section *last = config_section(config, "d58870");
    assert_non_null(last);
    assert_int_equal(last->line, count);
    assert_int_equal(last->entry_count, 0);
    assert_non_null(config_section(config, "d0"));
    assert_null(config_section(config, "d58871"));
    assert_null(config_section(config, "d"));
    config_free(config);
    free(text);
}

static void test_many_keys(void **state)
{
    (void)state;
    const unsigned count = 40000;
    char *text = many(1, count);
    struct config *config = NULL;
    char error[512];
    assert_int_equal(config_load(write_file(text), &config, error, sizeof error), 0);
    unlink(path);
    assert_int_equal(config->sections[0].entry_count, count);
    if (config->comparisons > 4 * (size_t)count)
        fail_msg("%zu comparisons of names for %u keys", config->comparisons, count);
    config_free(config);
    free(text);
}

/* Twice is still found, with both lines, at the end of a large file too. */
static void test_twice(void **state)
{
    (void)state;
    char *base = many(3000, 2);
    size_t length = strlen(base);
    char *text = malloc(length + 64);
    assert_non_null(text);
    struct config *config = NULL;
    char error[512], expected[600];

    snprintf(text, length + 64, "%s[d17]\n", base);
    assert_int_equal(config_load(write_file(text), &config, error, sizeof error), -EINVAL);
    snprintf(expected, sizeof expected,
             "%s:9001: section [d17] again (first at line 52); one section per device", path);
    assert_string_equal(error, expected);
    unlink(path);

    snprintf(text, length + 64, "%sk2 = x\nk1 = y\n", base);
    assert_int_equal(config_load(write_file(text), &config, error, sizeof error), -EINVAL);
    snprintf(expected, sizeof expected, "%s:9002: key 'k1' again in [d2999] (first at line 9000)",
             path);
    assert_string_equal(error, expected);
    unlink(path);
    free(text);
    free(base);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_sections),
        cmocka_unit_test(test_many_keys),
        cmocka_unit_test(test_twice),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
