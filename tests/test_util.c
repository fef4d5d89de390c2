/* test_util.c - shared helpers for the unit and model tests.
 * Seeded data generators (so runs repeat) and a few assertions on devices. */
#include "test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

void test_rng_seed(struct test_rng *rng, uint64_t seed)
{
    /* splitmix64 so that small seeds still give well-mixed states */
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    rng->state = (z ^ (z >> 31)) | 1;
}

uint64_t test_rng_next(struct test_rng *rng)
{
    uint64_t x = rng->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return x * 0x2545f4914f6cdd1dull;
}

uint64_t test_rng_below(struct test_rng *rng, uint64_t bound)
{
    return bound ? test_rng_next(rng) % bound : 0;
}

const char *test_data_kind_name(enum test_data_kind kind)
{
    static const char *const names[] = {"zero", "same", "text", "half", "random"};
    return kind < TEST_DATA_KIND_COUNT ? names[kind] : "?";
}

static void fill_text(struct test_rng *rng, unsigned char *out, size_t length)
{
    static const char *const words[] = {
        "the",    "page", "memory", "of",       "a",      "compressed", "block",
        "device", "is",   "kept",   "in",       "RAM",    "and",        "served",
        "over",   "NBD",  "to",     "clients",  "which",  "write",      "read",
        "data",   "with", "zram",   "kernel",   "swap",   "build",      "tree",
        "object", "file", "source", "function", "return", "int",        "struct",
    };
    size_t n = sizeof words / sizeof words[0];
    size_t pos = 0;
    while (pos < length) {
        const char *w = words[test_rng_below(rng, n)];
        size_t len = strlen(w);
        for (size_t i = 0; i < len && pos < length; i++)
            out[pos++] = (unsigned char)w[i];
        if (pos < length)
            out[pos++] = test_rng_below(rng, 12) == 0 ? '\n' : ' ';
    }
}

/* Half the bytes come from a 16-symbol alphabet in runs, half are random:
 * lz4 shrinks such pages to roughly 50-60%. */
static void fill_half(struct test_rng *rng, unsigned char *out, size_t length)
{
    size_t pos = 0;
    while (pos < length) {
        size_t run = 8 + test_rng_below(rng, 24);
        if (test_rng_below(rng, 2)) {
            unsigned char c = (unsigned char)test_rng_below(rng, 16);
            for (size_t i = 0; i < run && pos < length; i++)
                out[pos++] = c;
        } else {
            for (size_t i = 0; i < run && pos < length; i++)
                out[pos++] = (unsigned char)test_rng_next(rng);
        }
    }
}

void test_fill(struct test_rng *rng, enum test_data_kind kind, void *buf, size_t length)
{
    unsigned char *out = buf;
    switch (kind) {
    case TEST_DATA_ZERO:
        memset(out, 0, length);
        break;
    case TEST_DATA_SAME: {
        uint64_t word = test_rng_next(rng) | 1;
        for (size_t i = 0; i < length; i++)
            out[i] = (unsigned char)(word >> (8 * (i % 8)));
        break;
    }
    case TEST_DATA_TEXT:
        fill_text(rng, out, length);
        break;
    case TEST_DATA_HALF:
        fill_half(rng, out, length);
        break;
    case TEST_DATA_RANDOM:
    default:
        for (size_t i = 0; i < length; i++)
            out[i] = (unsigned char)test_rng_next(rng);
        break;
    }
}

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
