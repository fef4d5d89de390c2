/* test_same.c - unit tests of same-filled page detection and fill (lib/store/same.c).
 * Every word position, unaligned pages, and the fast scan against the plain forward scan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/same.h"
#include "test_util.h"
/* for uzram_page_same_filled, in uzram.h's static-linking-only part */
#define UZRAM_STATIC_LINKING_ONLY
#include "uzram.h"

#define PAGE 4096
#define WORDS (PAGE / 8)

static void put_word(unsigned char *page, size_t index, uint64_t word)
{
    memcpy(page + index * 8, &word, 8);
}

static void fill_words(unsigned char *page, uint64_t word)
{
    for (size_t i = 0; i < WORDS; i++)
        put_word(page, i, word);
}

/* The plain forward scan, word by word, that the fast check must agree with. */
static bool same_filled_check_forward(const void *page, uint64_t *word)
{
    const unsigned char *bytes = page;
    uint64_t first, next;
    memcpy(&first, bytes, 8);
    for (size_t i = 1; i < WORDS; i++) {
        memcpy(&next, bytes + i * 8, 8);
        if (next != first)
            return false;
    }
    *word = first;
    return true;
}

/* Words worth trying: zero, all ones, bytes that differ, a single bit at
 * either end, and random ones. */
static uint64_t interesting_word(struct datagen_rng *rng, int i)
{
    static const uint64_t fixed[] = {
        0,
        ~0ull,
        0x0102030405060708ull,
        0x8000000000000000ull,
        1,
        0xdeadbeefcafef00dull,
        0x00000000ffffffffull,
        0xffffffff00000000ull,
        0x5a5a5a5a5a5a5a5aull,
    };
    if (i < (int)(sizeof fixed / sizeof fixed[0]))
        return fixed[i];
    return datagen_rng_next(rng);
}

/* The fast check, the forward check and the public wrapper all answer the
 * same, and agree with a byte comparison. Returns that answer. */
static bool check_all(const unsigned char *page, uint64_t expected_word)
{
    uint64_t fast = ~expected_word, forward = ~expected_word, public_word = ~expected_word;
    bool is_fast = same_filled_check(page, &fast);
    bool is_forward = same_filled_check_forward(page, &forward);
    bool is_public = uzram_page_same_filled(page, &public_word);
    assert_int_equal(is_fast, is_forward);
    assert_int_equal(is_fast, is_public);
    if (is_fast) {
        assert_true(fast == expected_word);
        assert_true(forward == expected_word);
        assert_true(public_word == expected_word);
    }
    return is_fast;
}

static void test_same_filled_words(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 1);
    unsigned char *page = aligned_alloc(64, PAGE);
    assert_non_null(page);
    for (int i = 0; i < 200; i++) {
        uint64_t word = interesting_word(&rng, i);
        fill_words(page, word);
        assert_true(check_all(page, word));
    }
    free(page);
}

/* A page that differs from the repeated word in one word only, at every
 * position, and in every byte of that word, is not same-filled. */
static void test_every_position_detected(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 2);
    unsigned char *page = aligned_alloc(64, PAGE);
    assert_non_null(page);
    for (int w = 0; w < 12; w++) {
        uint64_t word = interesting_word(&rng, w);
        for (size_t pos = 0; pos < WORDS; pos++) {
            fill_words(page, word);
            uint64_t other = word ^ (1ull << ((pos + (size_t)w) % 64));
            put_word(page, pos, other);
            uint64_t got = 12345;
            assert_false(same_filled_check(page, &got));
            assert_int_equal(got, 12345); /* untouched on false */
            assert_false(same_filled_check_forward(page, &got));
            assert_false(uzram_page_same_filled(page, &got));
        }
        /* One differing byte at every byte position. */
        for (size_t at = 0; at < PAGE; at++) {
            fill_words(page, word);
            page[at] ^= 0x40;
            uint64_t got;
            assert_false(same_filled_check(page, &got));
        }
    }
    free(page);
}

/* Pages at odd addresses (NBD buffers need not be aligned). The bytes
 * around the page differ from it, so reading outside would change answers;
 * ASan catches reads outside the allocation. */
static void test_unaligned(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 3);
    static const size_t offsets[] = {1, 3, 5, 7, 8, 13, 16, 31, 33};
    for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
        size_t offset = offsets[o];
        unsigned char *buf = malloc(PAGE + offset);
        assert_non_null(buf);
        unsigned char *page = buf + offset;
        for (int i = 0; i < 20; i++) {
            uint64_t word = interesting_word(&rng, i);
            memset(buf, 0x77, offset);
            fill_words(page, word);
            assert_true(check_all(page, word));
            size_t pos = datagen_rng_below(&rng, PAGE);
            page[pos] ^= 1;
            assert_false(check_all(page, word));
            page[pos] ^= 1;
            same_filled_fill(page, ~word);
            assert_true(check_all(page, ~word));
            for (size_t b = 0; b < offset; b++)
                assert_int_equal(buf[b], 0x77);
        }
        free(buf);
    }
}

static void test_fill_round_trip(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 4);
    unsigned char *buf = malloc(PAGE + 2 * 64);
    assert_non_null(buf);
    for (size_t offset = 0; offset < 16; offset++) {
        for (int i = 0; i < 16; i++) {
            uint64_t word = interesting_word(&rng, i);
            memset(buf, 0xee, PAGE + 2 * 64);
            unsigned char *page = buf + 64 + offset;
            same_filled_fill(page, word);
            for (size_t w = 0; w < WORDS; w++) {
                uint64_t got;
                memcpy(&got, page + w * 8, 8);
                assert_true(got == word);
            }
            /* Nothing written outside the page. */
            for (size_t b = 0; b < 64 + offset; b++)
                assert_int_equal(buf[b], 0xee);
            for (size_t b = 64 + offset + PAGE; b < PAGE + 2 * 64; b++)
                assert_int_equal(buf[b], 0xee);
            assert_true(check_all(page, word));
        }
    }
    free(buf);
}

/* Random pages of every kind, and same-filled pages with a few random
 * changes, give the same answer from both scans. */
static void test_agrees_with_forward(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 5);
    unsigned char *page = aligned_alloc(64, PAGE);
    assert_non_null(page);
    int same = 0, different = 0;
    for (int i = 0; i < 4000; i++) {
        enum datagen_kind kind = (enum datagen_kind)datagen_rng_below(&rng, DATAGEN_KIND_COUNT);
        datagen_fill(&rng, kind, page, PAGE);
        uint64_t word;
        memcpy(&word, page, 8);
        if (i % 2 && (kind == DATAGEN_ZERO || kind == DATAGEN_SAME)) {
            int changes = (int)datagen_rng_below(&rng, 3);
            for (int c = 0; c < changes; c++)
                page[datagen_rng_below(&rng, PAGE)] ^=
                    (unsigned char)(1 + datagen_rng_below(&rng, 255));
        }
        if (check_all(page, word))
            same++;
        else
            different++;
    }
    assert_true(same > 100);
    assert_true(different > 100);
    free(page);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_filled_words),   cmocka_unit_test(test_every_position_detected),
        cmocka_unit_test(test_unaligned),           cmocka_unit_test(test_fill_round_trip),
        cmocka_unit_test(test_agrees_with_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
