/* model_util.h - what the model tests (test_model.c) and the overlap tests (test_overlap.c)
 * share: their replay knobs, a device made from options, and the thread that compacts,
 * recompresses and writes back beside their threads. */
#ifndef UZRAM_TESTS_MODEL_UTIL_H
#define UZRAM_TESTS_MODEL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uzram.h"

/* $UZRAM_TEST_SEED, else `fallback`; $UZRAM_TEST_OPS, else `fallback` (a tenth of it under
 * valgrind). */
uint64_t test_seed(uint64_t fallback);
uint64_t test_ops(uint64_t fallback);

/* Operations a run does unless $UZRAM_TEST_OPS says otherwise (see test_model.c's top). */
#define DEFAULT_OPS 4000

/* Whether the page is one 8-byte word repeated (the test's own check, not the engine's). */
bool page_is_same_filled(const uint8_t *page);

/* The offset of the first byte where a and b differ, `length` if none. */
size_t first_difference(const uint8_t *a, const uint8_t *b, size_t length);

struct model_options {
    const char *name;
    const char *algorithm;
    bool same_filled;
    bool use_dedup;
    bool shared_contents;
    uint64_t disksize;
    /* Secondary algorithms for recompression, priority 1 and 2 (NULL: none
     * at that priority); a zstd one may get a trained dictionary. */
    const char *recompress[2];
    /* A backing file (in memory, test_attach_backing), and
     * writeback_when_full with it. */
    bool backing;
    bool when_full;
};

/* A device made as `options` say, or NULL after a message on stderr. */
struct uzram *make_device(const struct model_options *options);

/* The background thread (compactor_main): until `stop`, compaction, idle marking and
 * recompression by turns, writeback when `backing`, the clock moved on; `error` the last
 * unexpected failure. */
struct background {
    struct uzram *dev;
    volatile int stop; /* written by the main thread once, read with atomics */
    uint64_t compactions;
    uint64_t recompressions;
    bool backing; /* write back too */
    int error;
};
void *compactor_main(void *arg);

#endif
