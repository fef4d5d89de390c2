/* test_comp.c - unit tests of the compression backends (lib/codec/comp.c) and the public codec API.
 * Round trips, exact capacity limits, hostile input to the decoders, names, levels, threads. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <libdeflate.h>
#include <lz4.h>
#include <lzo/lzo1x.h>
#define ZSTD_STATIC_LINKING_ONLY /* for the magicless format uzram stores */
#include <zstd.h>

#include "codec/comp.h"
#include "test_util.h"
/* for uzram_codec_*, in uzram.h's static-linking-only part */
#define UZRAM_STATIC_LINKING_ONLY
#include "uzram.h"

#define PAGE 4096
#define GUARD 64
#define GUARD_BYTE 0xa5

/* The levels worth trying for an algorithm: min, default and max, or just
 * 0 for an algorithm without levels. Returns how many were stored. */
static int test_levels(int id, int levels[3])
{
    int min, max, dflt;
    comp_levels(id, &min, &max, &dflt);
    if (min == 0 && max == 0) {
        levels[0] = 0;
        return 1;
    }
    levels[0] = min;
    levels[1] = dflt;
    levels[2] = max;
    return 3;
}

/* Whether a page of `kind` may come out no smaller: random data, and any
 * data under lz4's larger accelerations (its level), which trade the ratio
 * away for speed until, at the top, hardly a match is looked for. */
static bool may_not_shrink(int id, int level, enum datagen_kind kind)
{
    return kind == DATAGEN_RANDOM || (id == COMP_LZ4 && level > 1);
}

static const enum datagen_kind round_trip_kinds[] = {
    DATAGEN_ZERO, DATAGEN_SAME, DATAGEN_TEXT, DATAGEN_HALF, DATAGEN_RANDOM,
};

static void test_round_trip_all(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 1);
    unsigned char page[PAGE], back[PAGE], out[2 * PAGE];
    for (size_t k = 0; k < sizeof round_trip_kinds / sizeof round_trip_kinds[0]; k++) {
        enum datagen_kind kind = round_trip_kinds[k];
        datagen_fill(&rng, kind, page, PAGE);
        for (int id = 0; id < COMP_COUNT; id++) {
            int levels[3];
            int count = test_levels(id, levels);
            for (int l = 0; l < count; l++) {
                int level = comp_resolve_level(id, levels[l]);
                assert_true(level >= 0);
                /* Room for any expansion: always succeeds and round-trips. */
                int length = comp_compress(id, level, page, out, sizeof out);
                assert_true(length > 0);
                memset(back, 0x11, sizeof back);
                assert_int_equal(comp_decompress_dict(id, NULL, out, (size_t)length, back), 0);
                assert_memory_equal(page, back, PAGE);

                /* The way the store calls it: only if it saves something. */
                length = comp_compress(id, level, page, out, PAGE - 1);
                if (may_not_shrink(id, level, kind)) {
                    /* Random data cannot shrink, but a shorter result must
                     * still be a valid one. */
                    if (length != 0) {
                        assert_in_range(length, 1, PAGE - 1);
                        assert_int_equal(comp_decompress_dict(id, NULL, out, (size_t)length, back),
                                         0);
                        assert_memory_equal(page, back, PAGE);
                    }
                    continue;
                }
                /* Every level of every backend shrinks the other kinds. */
                assert_in_range(length, 1, PAGE - 1);
                assert_int_equal(comp_decompress_dict(id, NULL, out, (size_t)length, back), 0);
                assert_memory_equal(page, back, PAGE);
            }
        }
    }
}

/* Zero, text and half-compressible pages really compress, at the default
 * level of every backend. */
static void test_compresses(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 2);
    unsigned char page[PAGE], out[2 * PAGE];
    for (int id = 0; id < COMP_COUNT; id++) {
        int level = comp_resolve_level(id, 0);
        datagen_fill(&rng, DATAGEN_ZERO, page, PAGE);
        int zero = comp_compress(id, level, page, out, sizeof out);
        assert_in_range(zero, 1, 64);
        datagen_fill(&rng, DATAGEN_TEXT, page, PAGE);
        int text = comp_compress(id, level, page, out, sizeof out);
        datagen_fill(&rng, DATAGEN_HALF, page, PAGE);
        int half = comp_compress(id, level, page, out, sizeof out);
        assert_in_range(text, 1, PAGE * 3 / 5);
        assert_in_range(half, 1, PAGE * 4 / 5);
    }
}

/* A result must fit in `capacity` exactly: one byte less gives 0, the exact
 * length succeeds, and nothing is ever written past dst + capacity. */
static void test_capacity_limits(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 3);
    unsigned char page[PAGE], back[PAGE], full[2 * PAGE];
    static const enum datagen_kind kinds[] = {DATAGEN_ZERO, DATAGEN_TEXT, DATAGEN_HALF,
                                              DATAGEN_RANDOM};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        datagen_fill(&rng, kinds[k], page, PAGE);
        for (int id = 0; id < COMP_COUNT; id++) {
            int levels[3];
            int count = test_levels(id, levels);
            for (int l = 0; l < count; l++) {
                int level = comp_resolve_level(id, levels[l]);
                int length = comp_compress(id, level, page, full, sizeof full);
                assert_true(length > 0);
                size_t capacities[] = {0,
                                       1,
                                       2,
                                       7,
                                       16,
                                       (size_t)length / 2,
                                       (size_t)length - 1,
                                       (size_t)length,
                                       (size_t)length + 1,
                                       PAGE - 1};
                for (size_t c = 0; c < sizeof capacities / sizeof capacities[0]; c++) {
                    size_t capacity = capacities[c];
                    /* Exact-size heap buffer plus guard: ASan catches any
                     * write past the guard, the guard bytes catch the rest. */
                    unsigned char *dst = malloc(capacity + GUARD);
                    assert_non_null(dst);
                    memset(dst, GUARD_BYTE, capacity + GUARD);
                    int rc = comp_compress(id, level, page, dst, capacity);
                    for (size_t g = 0; g < GUARD; g++)
                        assert_int_equal(dst[capacity + g], GUARD_BYTE);
                    if (capacity < (size_t)length) {
                        assert_int_equal(rc, 0);
                    } else {
                        assert_int_equal(rc, length);
                        assert_memory_equal(dst, full, (size_t)length);
                        assert_int_equal(comp_decompress_dict(id, NULL, dst, (size_t)rc, back), 0);
                        assert_memory_equal(back, page, PAGE);
                    }
                    free(dst);
                }
            }
        }
    }
}

/* Decode `length` bytes copied into an exact-size heap buffer, so that ASan
 * sees any read past the end. */
static int decompress_exact(int id, const unsigned char *src, size_t length, unsigned char *page)
{
    unsigned char *copy = malloc(length ? length : 1);
    assert_non_null(copy);
    memcpy(copy, src, length);
    int rc = comp_decompress_dict(id, NULL, copy, length, page);
    free(copy);
    return rc;
}

static void test_decompress_truncated(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 4);
    unsigned char page[PAGE], back[PAGE], out[2 * PAGE];
    static const enum datagen_kind kinds[] = {DATAGEN_ZERO, DATAGEN_TEXT, DATAGEN_HALF,
                                              DATAGEN_RANDOM};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        datagen_fill(&rng, kinds[k], page, PAGE);
        for (int id = 0; id < COMP_COUNT; id++) {
            int length = comp_compress(id, comp_resolve_level(id, 0), page, out, sizeof out);
            assert_true(length > 1);
            /* Every proper prefix is rejected. */
            for (int cut = 0; cut < length; cut += cut < 16 || cut > length - 16 ? 1 : 37)
                assert_int_equal(decompress_exact(id, out, (size_t)cut, back), -EIO);
            /* So is trailing garbage after a complete stream. */
            for (int extra = 1; extra <= 8; extra++) {
                for (int i = 0; i < extra; i++)
                    out[length + i] = (unsigned char)datagen_rng_next(&rng);
                assert_int_equal(decompress_exact(id, out, (size_t)(length + extra), back), -EIO);
            }
            /* The intact stream still decodes. */
            assert_int_equal(decompress_exact(id, out, (size_t)length, back), 0);
            assert_memory_equal(back, page, PAGE);
        }
    }
    assert_int_equal(comp_decompress_dict(COMP_LZ4, NULL, NULL, 0, back), -EIO);
}

/* Flipped bytes may still decode to some page (a changed literal is valid
 * data), but must never crash, read or write out of bounds, or give anything
 * other than 0 or -EIO. */
static void test_decompress_corrupted(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 5);
    unsigned char page[PAGE], back[PAGE], out[2 * PAGE], bad[2 * PAGE];
    static const enum datagen_kind kinds[] = {DATAGEN_ZERO, DATAGEN_TEXT, DATAGEN_HALF};
    int rejected[COMP_COUNT] = {0};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        datagen_fill(&rng, kinds[k], page, PAGE);
        for (int id = 0; id < COMP_COUNT; id++) {
            int length = comp_compress(id, comp_resolve_level(id, 0), page, out, sizeof out);
            assert_true(length > 0);
            for (int trial = 0; trial < 300; trial++) {
                memcpy(bad, out, (size_t)length);
                int flips = 1 + (int)datagen_rng_below(&rng, 4);
                for (int f = 0; f < flips; f++) {
                    size_t at = datagen_rng_below(&rng, (uint64_t)length);
                    /* Headers are at the start: hit them more often. */
                    if (trial % 3 == 0)
                        at = datagen_rng_below(&rng, length < 8 ? (uint64_t)length : 8);
                    bad[at] ^= (unsigned char)(1 + datagen_rng_below(&rng, 255));
                }
                int rc = decompress_exact(id, bad, (size_t)length, back);
                assert_true(rc == 0 || rc == -EIO);
                rejected[id] += rc == -EIO;
            }
        }
    }
    for (int id = 0; id < COMP_COUNT; id++)
        assert_true(rejected[id] > 0);
}

static void test_decompress_garbage(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 6);
    unsigned char back[PAGE], garbage[2 * PAGE];
    for (int id = 0; id < COMP_COUNT; id++) {
        for (int trial = 0; trial < 400; trial++) {
            size_t length = 1 + datagen_rng_below(&rng, sizeof garbage);
            if (trial % 2)
                length = 1 + datagen_rng_below(&rng, 64);
            datagen_fill(&rng, trial % 4 == 3 ? DATAGEN_HALF : DATAGEN_RANDOM, garbage, length);
            int rc = decompress_exact(id, garbage, length, back);
            assert_true(rc == 0 || rc == -EIO);
        }
    }
}

/* Valid streams of the right format that decode to less or more than one
 * page are rejected: a page is exactly 4096 bytes. Made with the libraries
 * directly, in the format uzram stores. */
static size_t make_stream(int id, const unsigned char *data, size_t size, unsigned char *out,
                          size_t capacity)
{
    switch (id) {
    case COMP_LZO: {
        static unsigned char work[LZO1X_1_MEM_COMPRESS];
        lzo_uint length = capacity;
        assert_int_equal(lzo_init(), LZO_E_OK);
        assert_int_equal(lzo1x_1_compress(data, size, out, &length, work), LZO_E_OK);
        return length;
    }
    case COMP_LZ4:
    case COMP_LZ4HC:
        return (size_t)LZ4_compress_default((const char *)data, (char *)out, (int)size,
                                            (int)capacity);
    case COMP_ZSTD: {
        ZSTD_CCtx *cctx = ZSTD_createCCtx();
        assert_non_null(cctx);
        assert_false(
            ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_format, ZSTD_f_zstd1_magicless)));
        assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0)));
        size_t length = ZSTD_compress2(cctx, out, capacity, data, size);
        assert_false(ZSTD_isError(length));
        ZSTD_freeCCtx(cctx);
        return length;
    }
    case COMP_DEFLATE: {
        struct libdeflate_compressor *compressor = libdeflate_alloc_compressor(6);
        assert_non_null(compressor);
        size_t length = libdeflate_deflate_compress(compressor, data, size, out, capacity);
        libdeflate_free_compressor(compressor);
        return length;
    }
    default:
        fail();
        return 0;
    }
}

static void test_decompress_wrong_size(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 7);
    static unsigned char data[3 * PAGE], out[4 * PAGE];
    unsigned char back[PAGE];
    datagen_fill(&rng, DATAGEN_TEXT, data, sizeof data);
    static const size_t sizes[] = {1, 2048, PAGE - 1, PAGE, PAGE + 1, 2 * PAGE, 3 * PAGE};
    for (int id = 0; id < COMP_COUNT; id++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t length = make_stream(id, data, sizes[s], out, sizeof out);
            assert_true(length > 0);
            int rc = decompress_exact(id, out, length, back);
            if (sizes[s] == PAGE) {
                /* The control: a page made outside comp.c decodes too. */
                assert_int_equal(rc, 0);
                assert_memory_equal(back, data, PAGE);
            } else {
                assert_int_equal(rc, -EIO);
            }
        }
    }
}

static void test_names(void **state)
{
    (void)state;
    static const char *const names[COMP_COUNT] = {"lzo", "lz4", "lz4hc", "zstd", "deflate"};
    for (int id = 0; id < COMP_COUNT; id++) {
        assert_int_equal(comp_find(names[id]), id);
        assert_string_equal(comp_name(id), names[id]);
    }
    assert_int_equal(comp_find("lz5"), -ENOENT);
    assert_int_equal(comp_find(""), -ENOENT);
    assert_int_equal(comp_find("LZ4"), -ENOENT);
    assert_int_equal(comp_find("lz4 "), -ENOENT);
    assert_int_equal(comp_find("lzo-rle"), -ENOENT);
    assert_int_equal(comp_find(NULL), -ENOENT);

    int min, max, dflt;
    assert_int_equal(uzram_algorithm_levels("nope", &min, &max, &dflt), -ENOENT);
    /* lz4's level is its acceleration, as in the kernel's lz4 backend */
    assert_int_equal(uzram_algorithm_levels("lz4", &min, &max, &dflt), 0);
    assert_int_equal(min, 1);
    assert_int_equal(max, 65537);
    assert_int_equal(dflt, 1);
    assert_int_equal(uzram_algorithm_levels("lzo", &min, &max, &dflt), 0);
    assert_int_equal(max, 0);
    assert_int_equal(uzram_algorithm_levels("lz4hc", &min, &max, &dflt), 0);
    assert_int_equal(min, 3);
    assert_int_equal(max, 12);
    assert_int_equal(dflt, 9);
    assert_int_equal(uzram_algorithm_levels("zstd", &min, &max, &dflt), 0);
    assert_int_equal(min, 1);
    assert_int_equal(max, ZSTD_maxCLevel());
    assert_int_equal(dflt, 3);
    assert_int_equal(uzram_algorithm_levels("deflate", &min, &max, &dflt), 0);
    assert_int_equal(min, 1);
    assert_int_equal(max, 12);
    assert_int_equal(dflt, 6);
}

static void test_levels_resolve(void **state)
{
    (void)state;
    for (int id = 0; id < COMP_COUNT; id++) {
        int min, max, dflt;
        comp_levels(id, &min, &max, &dflt);
        assert_int_equal(comp_resolve_level(id, 0), dflt);
        assert_int_equal(comp_resolve_level(id, max + 1), -EINVAL);
        assert_int_equal(comp_resolve_level(id, min - 1 == 0 ? -1 : min - 1), -EINVAL);
        if (max < 1000)
            assert_int_equal(comp_resolve_level(id, 1000), -EINVAL);
        if (max != 0) {
            assert_int_equal(comp_resolve_level(id, min), min);
            assert_int_equal(comp_resolve_level(id, max), max);
        } else {
            assert_int_equal(comp_resolve_level(id, 1), -EINVAL);
        }
    }
    assert_int_equal(comp_resolve_level(COMP_COUNT, 0), -EINVAL);
    assert_int_equal(comp_resolve_level(-1, 0), -EINVAL);

    /* The same checks through the public codec. */
    struct uzram_codec *codec = (struct uzram_codec *)1;
    assert_int_equal(uzram_codec_open("zstd", ZSTD_maxCLevel() + 1, &codec), -EINVAL);
    assert_int_equal(uzram_codec_open("zstd", -1, &codec), -EINVAL);
    assert_null(codec);
    assert_int_equal(uzram_codec_open("lz4", 65538, &codec), -EINVAL);
    assert_int_equal(uzram_codec_open("lz4hc", 2, &codec), -EINVAL);
    assert_int_equal(uzram_codec_open("deflate", 13, &codec), -EINVAL);
    assert_int_equal(uzram_codec_open("xz", 0, &codec), -ENOENT);
    assert_int_equal(uzram_codec_open(NULL, 0, &codec), -ENOENT);
    assert_int_equal(uzram_codec_open("lz4", 0, NULL), -EINVAL);
}

static void test_algorithm_list(void **state)
{
    (void)state;
    char buf[128];
    const char *all = "lzo lz4 lz4hc zstd deflate";
    int n = uzram_algorithm_list(NULL, buf, sizeof buf);
    assert_int_equal(n, (int)strlen(all));
    assert_string_equal(buf, all);
    assert_int_equal(uzram_algorithm_list("lz4", buf, sizeof buf), (int)strlen(all) + 2);
    assert_string_equal(buf, "lzo [lz4] lz4hc zstd deflate");
    assert_int_equal(uzram_algorithm_list("lzo", buf, sizeof buf), (int)strlen(all) + 2);
    assert_string_equal(buf, "[lzo] lz4 lz4hc zstd deflate");
    assert_int_equal(uzram_algorithm_list("deflate", buf, sizeof buf), (int)strlen(all) + 2);
    assert_string_equal(buf, "lzo lz4 lz4hc zstd [deflate]");
    assert_int_equal(uzram_algorithm_list("zst", buf, sizeof buf), (int)strlen(all));
    assert_string_equal(buf, all);

    /* Exactly enough room (length + NUL) works; one byte less is -ERANGE. */
    size_t need = strlen("lzo lz4 lz4hc [zstd] deflate") + 1;
    assert_int_equal(uzram_algorithm_list("zstd", buf, need), (int)need - 1);
    assert_string_equal(buf, "lzo lz4 lz4hc [zstd] deflate");
    for (size_t size = 0; size < need; size++)
        assert_int_equal(uzram_algorithm_list("zstd", buf, size), -ERANGE);
    assert_int_equal(uzram_algorithm_list("zstd", NULL, 0), -ERANGE);
}

static void test_codec(void **state)
{
    (void)state;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 8);
    unsigned char page[PAGE], back[PAGE], out[2 * PAGE];
    static const char *const names[] = {"lzo", "lz4", "lz4hc", "zstd", "deflate"};
    datagen_fill(&rng, DATAGEN_TEXT, page, PAGE);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        struct uzram_codec *codec = NULL;
        assert_int_equal(uzram_codec_open(names[i], 0, &codec), 0);
        assert_non_null(codec);
        int length = uzram_codec_compress(codec, page, out, PAGE - 1);
        assert_in_range(length, 1, PAGE - 1);
        /* A failed attempt may leave partial output: use another buffer. */
        unsigned char small[PAGE];
        assert_int_equal(uzram_codec_compress(codec, page, small, (size_t)length - 1), 0);
        assert_int_equal(uzram_codec_decompress(codec, out, (size_t)length, back), 0);
        assert_memory_equal(page, back, PAGE);
        assert_int_equal(uzram_codec_decompress(codec, out, (size_t)length / 2, back), -EIO);
        uzram_codec_close(codec);
    }
    uzram_codec_close(NULL);

    /* Codecs at different levels of one algorithm, used alternately by one
     * thread (libdeflate remakes its per-level compressor). */
    struct uzram_codec *fast = NULL, *best = NULL;
    assert_int_equal(uzram_codec_open("deflate", 1, &fast), 0);
    assert_int_equal(uzram_codec_open("deflate", 12, &best), 0);
    for (int round = 0; round < 4; round++) {
        struct uzram_codec *codec = round % 2 ? best : fast;
        int length = uzram_codec_compress(codec, page, out, sizeof out);
        assert_true(length > 0);
        assert_int_equal(uzram_codec_decompress(round % 2 ? fast : best, out, (size_t)length, back),
                         0);
        assert_memory_equal(page, back, PAGE);
    }
    uzram_codec_close(fast);
    uzram_codec_close(best);
}

/* Several threads at once, each with its own contexts made on first use and
 * freed when it exits (LeakSanitizer checks that). Failures are counted and
 * checked by the main thread, as cmocka's asserts are not thread-safe. */
#define THREADS 4
#define THREAD_ROUND_TRIPS 2000

struct thread_result {
    uint64_t seed;
    int failures;
    int stored;
};

static void *round_trip_thread(void *arg)
{
    struct thread_result *result = arg;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, result->seed);
    unsigned char page[PAGE], back[PAGE], out[PAGE];
    static const enum datagen_kind kinds[] = {DATAGEN_ZERO, DATAGEN_SAME, DATAGEN_TEXT,
                                              DATAGEN_HALF, DATAGEN_RANDOM};
    for (int i = 0; i < THREAD_ROUND_TRIPS; i++) {
        int id = (int)datagen_rng_below(&rng, COMP_COUNT);
        int min, max, dflt;
        comp_levels(id, &min, &max, &dflt);
        int level = dflt;
        /* Now and then another level, to switch per-level contexts; the
         * slowest levels rarely, to keep the test quick. */
        uint64_t pick = datagen_rng_below(&rng, 16);
        if (max != 0 && pick == 0)
            level = max;
        else if (max != 0 && pick < 4)
            level = min > 0 ? min : 1;
        enum datagen_kind kind = kinds[datagen_rng_below(&rng, 5)];
        datagen_fill(&rng, kind, page, PAGE);
        int length = comp_compress(id, level, page, out, PAGE - 1);
        if (length < 0) {
            result->failures++;
            continue;
        }
        if (length == 0) {
            if (!may_not_shrink(id, level, kind))
                result->failures++;
            continue;
        }
        if (comp_decompress_dict(id, NULL, out, (size_t)length, back) != 0 ||
            memcmp(page, back, PAGE))
            result->failures++;
        else
            result->stored++;
    }
    return NULL;
}

/* uzram_huge_threshold() is the engine's own rule, not a figure beside it:
 * a page whose lz4 form is shorter is stored compressed, one whose form is
 * that long or longer is stored raw. Pages of every compressibility near
 * the threshold, each measured with the codec and then written. */
static void test_huge_threshold_is_the_engines(void **state)
{
    (void)state;
    const size_t threshold = uzram_huge_threshold();
    assert_int_equal(threshold, PAGE - PAGE / 8 + 1);
    assert_true(uzram_pool_object_cost(threshold) == PAGE);
    assert_true(uzram_pool_object_cost(threshold - 1) < PAGE);

    struct uzram *dev = test_device(1024 * PAGE, "lz4", 0);
    struct uzram_codec *codec;
    assert_int_equal(uzram_codec_open("lz4", 0, &codec), 0);
    static unsigned char page[PAGE], out[2 * PAGE];
    unsigned just_below = 0, at = 0;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 11);
    for (uint64_t i = 0; i < 1024; i++) {
        /* 14..18% of the page in runs: lz4 keeps about 3500..3700 bytes */
        datagen_fill_compressible(&rng, 14 + (unsigned)(i % 5), page, PAGE);
        int length = uzram_codec_compress(codec, page, out, sizeof out);
        assert_true(length > 0);
        uint64_t huge_before = test_stats(dev).huge_pages;
        assert_int_equal(uzram_write(dev, i * PAGE, page, PAGE), 0);
        bool huge = test_stats(dev).huge_pages == huge_before + 1;
        if (huge != ((size_t)length >= threshold))
            fail_msg("lz4 length %d, threshold %zu: stored %s", length, threshold,
                     huge ? "raw" : "compressed");
        just_below += (size_t)length == threshold - 1;
        at += (size_t)length == threshold;
    }
    /* the pages that tell an off-by-one apart */
    print_message("pages of threshold - 1 bytes: %u, of threshold bytes: %u\n", just_below, at);
    assert_true(just_below > 0 && at > 0);
    uzram_codec_close(codec);
    uzram_destroy(dev);
}

static void test_concurrent_threads(void **state)
{
    (void)state;
    pthread_t threads[THREADS];
    struct thread_result results[THREADS];
    for (int t = 0; t < THREADS; t++) {
        results[t] = (struct thread_result){.seed = 100 + (uint64_t)t};
        assert_int_equal(pthread_create(&threads[t], NULL, round_trip_thread, &results[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        assert_int_equal(pthread_join(threads[t], NULL), 0);
        assert_int_equal(results[t].failures, 0);
        assert_true(results[t].stored > THREAD_ROUND_TRIPS / 2);
    }
}

/* Spans (a bundle's pages in one frame): every prefix of whole pages decodes to those pages,
 * with and without a dictionary, and page frames still decode after it (the context's
 * settings come back); a frame cut short, another algorithm or a wrong size is refused. */
/* A frame in memory as a span decoder's source; records how far the decoder asked. */
struct span_memory {
    const unsigned char *frame;
    size_t asked; /* end of the furthest bytes asked for */
};

static const void *span_memory_bytes(void *arg, size_t offset, size_t count)
{
    struct span_memory *memory = arg;
    if (offset + count > memory->asked)
        memory->asked = offset + count;
    return memory->frame + offset;
}

/* Decode `want` bytes of a frame of `length` bytes from a fresh begin. */
static int span_decode(struct comp_span_decoder *decoder, const struct comp_dict *dict,
                       struct span_memory *memory, size_t length, void *out, size_t out_length,
                       size_t want)
{
    struct comp_span_source source = {length, span_memory_bytes, memory};
    int rc = comp_span_begin(decoder, COMP_ZSTD, dict);
    return rc < 0 ? rc : comp_span_decode(decoder, &source, out, out_length, want);
}

static void test_span(void **state)
{
    (void)state;
    enum { PAGES = 8 };
    static unsigned char pages[PAGES * PAGE], frame[PAGES * PAGE + 1], out[PAGES * PAGE];
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 11);
    for (unsigned k = 0; k < PAGES; k++)
        datagen_fill(&rng, k % 2 ? DATAGEN_TEXT : DATAGEN_HALF, pages + k * PAGE, PAGE);
    struct comp_dict *dict = NULL;
    assert_int_equal(comp_dict_create(COMP_ZSTD, 7, pages, 2 * PAGE, &dict), 0);
    unsigned char page_frame[PAGE], page_out[PAGE];
    int page_length = comp_compress(COMP_ZSTD, 7, pages, page_frame, sizeof page_frame);
    assert_true(page_length > 0);
    struct comp_span_decoder *decoder = NULL;
    assert_int_equal(comp_span_decoder_new(&decoder), 0);
    for (int with_dict = 0; with_dict < 2; with_dict++) {
        const struct comp_dict *d = with_dict ? dict : NULL;
        /* blocks of one page: a read decodes exactly up to its page */
        int length = comp_compress_span_blocks(COMP_ZSTD, 7, d, pages, sizeof pages, PAGE, frame,
                                               sizeof frame);
        assert_true(length > 0 && length < (int)sizeof pages);
        size_t asked_before = 0;
        for (unsigned want = 1; want <= PAGES; want++) {
            /* from the start: the pages up to want, and only the frame's bytes up to them */
            struct span_memory memory = {frame, 0};
            memset(out, 0, sizeof out);
            assert_int_equal(span_decode(decoder, d, &memory, (size_t)length, out, sizeof out,
                                         (size_t)want * PAGE),
                             0);
            assert_memory_equal(out, pages, (size_t)want * PAGE);
            assert_int_equal(comp_span_decoded(decoder), (size_t)want * PAGE);
            assert_true(memory.asked > asked_before);
            assert_true(want == PAGES ? memory.asked == (size_t)length
                                      : memory.asked < (size_t)length);
            asked_before = memory.asked;
        }
        /* going on from where the last call stopped, a page decoded between calls */
        struct span_memory memory = {frame, 0};
        struct comp_span_source source = {(size_t)length, span_memory_bytes, &memory};
        memset(out, 0, sizeof out);
        assert_int_equal(comp_span_begin(decoder, COMP_ZSTD, d), 0);
        for (unsigned want = 1; want <= PAGES; want += 3) {
            assert_int_equal(
                comp_span_decode(decoder, &source, out, sizeof out, (size_t)want * PAGE), 0);
            assert_int_equal(
                comp_decompress_dict(COMP_ZSTD, NULL, page_frame, (size_t)page_length, page_out),
                0);
            assert_memory_equal(page_out, pages, PAGE);
        }
        assert_int_equal(comp_span_decode(decoder, &source, out, sizeof out, sizeof out), 0);
        assert_memory_equal(out, pages, sizeof out);
        /* a page already decoded: nothing more is read */
        size_t asked = memory.asked;
        assert_int_equal(comp_span_decode(decoder, &source, out, sizeof out, PAGE), 0);
        assert_int_equal(memory.asked, asked);
        /* the whole of a frame cut short, one with a byte after it, one giving more than
         * out_length: -EIO, and the decoder wants a new begin */
        memory = (struct span_memory){frame, 0};
        assert_int_equal(
            span_decode(decoder, d, &memory, (size_t)length / 2, out, sizeof out, sizeof out),
            -EIO);
        assert_int_equal(comp_span_decoded(decoder), 0);
        assert_int_equal(comp_span_decode(decoder, &source, out, sizeof out, PAGE), -EINVAL);
        frame[length] = 0;
        assert_int_equal(
            span_decode(decoder, d, &memory, (size_t)length + 1, out, sizeof out, sizeof out),
            -EIO);
        assert_int_equal(span_decode(decoder, d, &memory, (size_t)length, out, sizeof out - PAGE,
                                     sizeof out - PAGE),
                         -EIO);
        /* hostile bytes: an error or some output, never a write past out (ASan) */
        for (unsigned trial = 0; trial < 200; trial++) {
            unsigned char bad[PAGES * PAGE];
            memcpy(bad, frame, (size_t)length);
            bad[datagen_rng_next(&rng) % (unsigned)length] ^=
                (unsigned char)(1u << (datagen_rng_next(&rng) % 8));
            struct span_memory hostile = {bad, 0};
            int rc = span_decode(decoder, d, &hostile, (size_t)length, out, sizeof out,
                                 (1 + trial % PAGES) * (size_t)PAGE);
            assert_true(rc == 0 || rc == -EIO);
            assert_true(hostile.asked <= (size_t)length);
        }
        /* too small to hold it: 0; a page after a failed span compresses as before */
        assert_int_equal(comp_compress_span(COMP_ZSTD, 7, d, pages, sizeof pages, frame, 16), 0);
        assert_int_equal(comp_compress(COMP_ZSTD, 7, pages, out, PAGE), page_length);
    }
    /* the engine's cut: a quarter of the pages a block, at least one; 8 pages in blocks of two,
     * where a read of page 0 decodes the block, both pages */
    assert_int_equal(comp_span_block(3 * PAGE), PAGE);
    assert_int_equal(comp_span_block(7 * PAGE), PAGE);
    assert_int_equal(comp_span_block(16 * PAGE), 4 * PAGE);
    int length = comp_compress_span(COMP_ZSTD, 7, dict, pages, sizeof pages, frame, sizeof frame);
    assert_true(length > 0);
    struct span_memory blocks = {frame, 0};
    assert_int_equal(span_decode(decoder, dict, &blocks, (size_t)length, out, sizeof out, PAGE), 0);
    assert_int_equal(comp_span_decoded(decoder), 2 * PAGE);
    assert_memory_equal(out, pages, 2 * PAGE);
    assert_int_equal(comp_compress_span_blocks(COMP_ZSTD, 7, dict, pages, sizeof pages, PAGE - 1,
                                               frame, sizeof frame),
                     -EINVAL);
    assert_int_equal(comp_compress_span(COMP_LZ4, 1, NULL, pages, sizeof pages, frame, PAGE),
                     -EINVAL);
    assert_int_equal(comp_span_begin(decoder, COMP_LZ4, NULL), -EINVAL);
    struct span_memory memory = {frame, 0};
    assert_int_equal(span_decode(decoder, NULL, &memory, 10, out, PAGE, 2 * PAGE), -EINVAL);
    assert_int_equal(span_decode(decoder, NULL, &memory, 10, out, PAGE, 0), -EINVAL);
    comp_span_decoder_free(decoder);
    comp_dict_free(dict);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_all),
        cmocka_unit_test(test_compresses),
        cmocka_unit_test(test_capacity_limits),
        cmocka_unit_test(test_decompress_truncated),
        cmocka_unit_test(test_decompress_corrupted),
        cmocka_unit_test(test_decompress_garbage),
        cmocka_unit_test(test_decompress_wrong_size),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_levels_resolve),
        cmocka_unit_test(test_algorithm_list),
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_huge_threshold_is_the_engines),
        cmocka_unit_test(test_concurrent_threads),
        cmocka_unit_test(test_span),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
