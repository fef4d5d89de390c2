/* test_sizes.c - unit tests of src/common/sizes.c: "50%" sizes and zram-generator's size
 * expressions, with the values zram-generator's own tests expect (src/config.rs there). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/sizes.h"
#include "test_util.h"

static double eval_ok(const char *text, double ram)
{
    const struct sizes_variable variables[] = {{"ram", ram}, {"two", 2}};
    char error[256] = "";
    double value = -1;
    int rc = sizes_eval(text, variables, 2, &value, error, sizeof error);
    if (rc != 0)
        fail_msg("'%s': %s", text, error);
    return value;
}

static void eval_fails(const char *text, const char *message_part)
{
    const struct sizes_variable variables[] = {{"ram", 100}};
    char error[256] = "";
    double value;
    assert_int_equal(sizes_eval(text, variables, 1, &value, error, sizeof error), -EINVAL);
    if (strstr(error, message_part) == NULL)
        fail_msg("'%s': error '%s' lacks '%s'", text, error, message_part);
}

static void test_zram_generator_examples(void **state)
{
    (void)state;
    /* zram-generator's test_eval_size_expression* cases. */
    assert_true(eval_ok("0.5 * ram", 100) == 50);
    assert_true(eval_ok("0.5 * ram * two", 100) == 100);
    assert_true(eval_ok("500", 5000) == 500);
    assert_true(eval_ok("500k", 5000) == 500000);
    assert_true(eval_ok("32G", 5000) == 32e9);
    assert_true(eval_ok("min(ram / 2, 4096)", 100) == 50);
    assert_true(eval_ok("min(ram / 2, 4096)", 10000) == 4096);
    assert_true(eval_ok("min(0.5 * ram, 4000)", 3000) == 1500);
    assert_true(isnan(eval_ok("(ram-100)/0", 100)));
    assert_true(isinf(eval_ok("(ram-99)/0", 100)));
    /* Its man page's piecewise example: 1:1 up to 4G, then 1:2, at most 32G. */
    const char *piecewise = "min(min(ram, 4096) + max(ram - 4096, 0) / 2, 32 * 1024)";
    assert_true(eval_ok(piecewise, 2048) == 2048);
    assert_true(eval_ok(piecewise, 8192) == 6144);
    assert_true(eval_ok(piecewise, 65536 + 4096) == 32768);
}

static void test_operators(void **state)
{
    (void)state;
    assert_true(eval_ok("1 + 2 * 3", 0) == 7);
    assert_true(eval_ok("(1 + 2) * 3", 0) == 9);
    assert_true(eval_ok("10 - 4 - 3", 0) == 3);
    assert_true(eval_ok("100 / 10 / 5", 0) == 2);
    assert_true(eval_ok("7 % 4", 0) == 3);
    assert_true(eval_ok("2 ^ 3 ^ 2", 0) == 512);
    assert_true(eval_ok("-2 ^ 2", 0) == -4);
    assert_true(eval_ok("-(ram)", 8) == -8);
    assert_true(eval_ok("max(1, ram, 3)", 8) == 8);
    assert_true(eval_ok("min(4)", 8) == 4);
    assert_true(eval_ok("int(2.7) + ceil(2.1) + floor(2.9) + round(2.5) + abs(-1)", 0) == 11);
    assert_true(eval_ok("  ram/4  ", 1024) == 256);
}

static void test_bad_expressions(void **state)
{
    (void)state;
    eval_fails("ram *", "unexpected end");
    eval_fails("min(ram, 4", "expected ',' or ')'");
    eval_fails("(ram", "expected ')'");
    eval_fails("rams / 2", "unknown variable");
    eval_fails("sin(ram)", "unknown function");
    eval_fails("abs(1, 2)", "one argument");
    eval_fails("max()", "max() needs an argument");
    eval_fails("ram 2", "unexpected text");
    eval_fails("1..2", "bad number");
    eval_fails("ram $ 2", "unexpected text");
}

/* TIMES copies of `part` between `before` and `after`, in a buffer the caller frees. */
static char *repeated(const char *before, const char *part, size_t times, const char *after)
{
    size_t head = strlen(before), step = strlen(part), tail = strlen(after);
    char *text = malloc(head + step * times + tail + 1);
    assert_non_null(text);
    memcpy(text, before, head);
    for (size_t i = 0; i < times; i++)
        memcpy(text + head + i * step, part, step);
    memcpy(text + head + step * times, after, tail + 1);
    return text;
}

/* TIMES `open`, 1, TIMES `close`: evaluates to 1 or -1 when `ok`, else refused as too deep. */
static void check_nesting(const char *open, const char *close, size_t times, bool ok)
{
    char *opened = repeated("", open, times, "1");
    char *text = repeated(opened, close, times, "");
    free(opened);
    if (ok)
        assert_true(fabs(eval_ok(text, 0)) == 1);
    else
        eval_fails(text, "nested more than 32 deep");
    free(text);
}

/* zram-generator (fasteval) refuses more than 32 levels and 4096 characters; the old parser
 * recursed without a bound (100,000 signs or parentheses overflowed its stack). */
static void test_nesting_limits(void **state)
{
    (void)state;
    const size_t deep = 100000;
    char *text = repeated("", "-", deep, "1");
    eval_fails(text, "longer than 4096 characters (100001;");
    free(text);
    text = repeated("", "(", deep, "");
    eval_fails(text, "longer than 4096 characters");
    free(text);
    check_nesting("(", ")", 32, true);
    check_nesting("(", ")", 33, false);
    check_nesting("min(", ")", 32, true);
    check_nesting("abs(", ")", 33, false);
    check_nesting("(-", ")", 16, true); /* 16 parentheses, 15 signs: "-1" is one number */
    check_nesting("(-", ")", 17, false);
    check_nesting("- ", "", 32, true);
    check_nesting("- ", "", 33, false);
    check_nesting("-", "", 33, true); /* the last sign is the number's */
    check_nesting("-", "", 34, false);
    text = repeated("", "-", 4000, "1");
    eval_fails(text, "nested more than 32 deep");
    free(text);
    /* '^' nests no deeper in fasteval; 4096 characters of it evaluate (and do not overflow). */
    text = repeated("", "1^", 2047, "1");
    assert_int_equal(strlen(text), 4095);
    assert_true(eval_ok(text, 0) == 1);
    free(text);
    text = repeated("1", "+1", 2048, "");
    assert_int_equal(strlen(text), 4097);
    eval_fails(text, "longer than 4096 characters");
    free(text);
}

static void test_percent(void **state)
{
    (void)state;
    uint64_t ram, bytes;
    assert_int_equal(sizes_ram_bytes(NULL, &ram), 0);
    assert_true(ram > 0 && ram % 1024 == 0);
    assert_int_equal(sizes_parse("50%", &bytes), 0);
    assert_true(bytes == ram / 4096 / 2 * 4096);
    assert_int_equal(sizes_parse("12.5%", &bytes), 0);
    assert_true(bytes == ram / 4096 * 125 / 1000 * 4096);
    assert_int_equal(sizes_parse("1000%", &bytes), 0);
    assert_true(bytes == ram / 4096 * 10 * 4096);
    assert_int_equal(sizes_parse("512M", &bytes), 0);
    assert_true(bytes == 512ull << 20);
    assert_int_equal(sizes_parse("1001%", &bytes), -ERANGE);
    assert_int_equal(sizes_parse("%", &bytes), -EINVAL);
    assert_int_equal(sizes_parse("5.%", &bytes), -EINVAL);
    assert_int_equal(sizes_parse(".5%", &bytes), -EINVAL);
    assert_int_equal(sizes_parse("1.2345%", &bytes), -EINVAL);
    assert_int_equal(sizes_parse("-5%", &bytes), -EINVAL);
    assert_int_equal(sizes_parse("5x%", &bytes), -EINVAL);
}

static void test_meminfo_root(void **state)
{
    (void)state;
    char root[] = "/tmp/uzram-test-sizes.XXXXXX", path[256];
    assert_non_null(mkdtemp(root));
    snprintf(path, sizeof path, "%s/proc", root);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    FILE *file = fopen(path, "w");
    assert_non_null(file);
    fputs("MemFree:          721288 kB\nMemTotal:        8013220 kB\n", file);
    fclose(file);
    uint64_t bytes = 0;
    assert_int_equal(sizes_ram_bytes(root, &bytes), 0);
    assert_true(bytes == 8013220ull * 1024);
    file = fopen(path, "w");
    fputs("MemTotala:        8013220 kB\n", file);
    fclose(file);
    assert_int_equal(sizes_ram_bytes(root, &bytes), -ENOENT);
    unlink(path);
    snprintf(path, sizeof path, "%s/proc", root);
    rmdir(path);
    rmdir(root);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zram_generator_examples),
        cmocka_unit_test(test_operators),
        cmocka_unit_test(test_bad_expressions),
        cmocka_unit_test(test_nesting_limits),
        cmocka_unit_test(test_percent),
        cmocka_unit_test(test_meminfo_root),
    };
    test_apply_filter(argc, argv);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
