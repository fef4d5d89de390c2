/* test_util.c - shared helpers for the unit and model tests.
 * The name filter that lets one binary run only its concurrent tests; backing files. */
#include "test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>

#include <cmocka.h>

void test_apply_filter(int argc, char **argv)
{
    static char pattern[256];
    const char *filter = argc > 1 ? argv[1] : getenv("UZRAM_TEST_FILTER");
    if (!filter || !*filter)
        return;
    if (strpbrk(filter, "*?"))
        snprintf(pattern, sizeof pattern, "%s", filter);
    else
        snprintf(pattern, sizeof pattern, "*%s*", filter);
    cmocka_set_test_filter(pattern);
}

int test_make_folder(char *folder, size_t size, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(folder, size, "%s/uzram-%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    return mkdtemp(folder) ? 0 : -1;
}

int test_attach_backing(struct uzram *dev, int memory)
{
    const char *tmp = getenv("TMPDIR");
    struct stat st;
    const char *folder =
        memory && stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
            ? "/dev/shm"
        : tmp && *tmp ? tmp
                      : "/tmp";
    char path[512];
    snprintf(path, sizeof path, "%s/uzram-test.XXXXXX", folder);
    int fd = mkstemp(path);
    if (fd < 0)
        return -errno;
    close(fd);
    int rc = uzram_set_backing_dev(dev, path, 0);
    unlink(path);
    return rc;
}

uint64_t test_random_seed(const char *what)
{
    const char *text = getenv("UZRAM_TEST_SEED");
    uint64_t seed;
    if (text && *text) {
        seed = strtoull(text, NULL, 0);
    } else {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        seed = ((uint64_t)now.tv_sec * 1000000007u) ^ (uint64_t)now.tv_nsec ^
               ((uint64_t)getpid() << 32);
    }
    fprintf(stderr, "%s: seed %llu (UZRAM_TEST_SEED=%llu replays it)\n", what,
            (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

void test_fill_kind(uint64_t seed, enum datagen_kind kind, void *buf, size_t length)
{
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed);
    datagen_fill(&rng, kind, buf, length);
}

void test_fill_word(void *page, uint64_t word)
{
    for (size_t i = 0; i < UZRAM_PAGE_SIZE; i += 8)
        memcpy((uint8_t *)page + i, &word, 8);
}

void test_write_pages(struct uzram *dev, uint64_t first_page, const void *buf, size_t pages)
{
    assert_int_equal(uzram_write(dev, first_page * UZRAM_PAGE_SIZE, buf, pages * UZRAM_PAGE_SIZE),
                     0);
}

void test_expect_pages(struct uzram *dev, uint64_t first_page, const void *expected, size_t pages)
{
    uint8_t *got = malloc(pages * UZRAM_PAGE_SIZE);
    assert_non_null(got);
    assert_int_equal(uzram_read(dev, first_page * UZRAM_PAGE_SIZE, got, pages * UZRAM_PAGE_SIZE),
                     0);
    assert_memory_equal(got, expected, pages * UZRAM_PAGE_SIZE);
    free(got);
}

void test_expect_zero_pages(struct uzram *dev, uint64_t first_page, size_t pages)
{
    uint8_t *zeros = calloc(pages, UZRAM_PAGE_SIZE);
    assert_non_null(zeros);
    test_expect_pages(dev, first_page, zeros, pages);
    free(zeros);
}

int test_parse_fields(const char *line, uint64_t *fields, int max)
{
    int count = 0;
    const char *p = line;
    size_t length = strlen(line);
    assert_true(length > 0);
    assert_int_equal(line[length - 1], '\n');
    assert_true(strchr(line, '\n') == line + length - 1); /* one line */
    while (*p && *p != '\n') {
        while (*p == ' ')
            p++;
        if (*p == '\n' || !*p)
            break;
        if (*p < '0' || *p > '9')
            fail_msg("field %d does not start with a digit: \"%s\"", count, line);
        char *end;
        uint64_t value = strtoull(p, &end, 10);
        if (*end != ' ' && *end != '\n')
            fail_msg("field %d is not a plain number: \"%s\"", count, line);
        if (count < max)
            fields[count] = value;
        count++;
        p = end;
    }
    return count;
}

int test_setup_device(void **state)
{
    *state = test_device((uint64_t)TEST_DEVICE_PAGES * UZRAM_PAGE_SIZE, NULL, 0);
    return 0;
}

int test_teardown_device(void **state)
{
    uzram_destroy(*state);
    return 0;
}
