/* model_util.c - what the model and overlap tests share (see model_util.h). */
#include "model_util.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h" /* store_test_advance_clock */
#include "test_util.h"

/* Under valgrind (make valgrind) the same runs would take minutes: test_ops() gives fewer
 * operations there. The header is macros only, nothing to link. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() RUNNING_ON_VALGRIND
#endif
#endif
#ifndef UNDER_VALGRIND
#define UNDER_VALGRIND() 0
#endif

#define PAGE UZRAM_PAGE_SIZE

static uint64_t env_u64(const char *name, uint64_t fallback)
{
    const char *text = getenv(name);
    if (!text || !*text)
        return fallback;
    return strtoull(text, NULL, 0);
}

uint64_t test_seed(uint64_t fallback)
{
    return env_u64("UZRAM_TEST_SEED", fallback);
}

uint64_t test_ops(uint64_t fallback)
{
    if (UNDER_VALGRIND())
        fallback /= 10;
    return env_u64("UZRAM_TEST_OPS", fallback);
}

bool page_is_same_filled(const uint8_t *page)
{
    /* A page is one 8-byte word repeated exactly when it equals itself
     * shifted by 8 bytes; an independent check, not the engine's. */
    return memcmp(page, page + 8, PAGE - 8) == 0;
}

size_t first_difference(const uint8_t *a, const uint8_t *b, size_t length)
{
    for (size_t i = 0; i < length; i++)
        if (a[i] != b[i])
            return i;
    return length;
}

struct uzram *make_device(const struct model_options *options)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = options->disksize;
    config.comp_algorithm = options->algorithm ? options->algorithm : "lz4";
    config.same_filled = options->same_filled;
    config.use_dedup = options->use_dedup;
    struct uzram *dev = NULL;
    int rc = uzram_create(&config, &dev);
    if (rc != 0) {
        fprintf(stderr, "uzram_create(%s) failed: %d\n", options->name, rc);
        return NULL;
    }
    for (unsigned i = 0; i < 2; i++)
        if (options->recompress[i] &&
            (rc = uzram_set_recomp_algorithm(dev, i + 1, options->recompress[i], 0)) != 0) {
            fprintf(stderr, "uzram_set_recomp_algorithm(%s) failed: %d\n", options->name, rc);
            uzram_destroy(dev);
            return NULL;
        }
    if (options->backing && ((rc = test_attach_backing(dev, true)) != 0 ||
                             (rc = uzram_set_writeback_when_full(dev, options->when_full)) != 0)) {
        fprintf(stderr, "backing store for %s: %d\n", options->name, rc);
        uzram_destroy(dev);
        return NULL;
    }
    return dev;
}

void *compactor_main(void *arg)
{
    struct background *bg = arg;
    while (!__atomic_load_n(&bg->stop, __ATOMIC_ACQUIRE)) {
        uint64_t freed = 0;
        int rc = uzram_compact(bg->dev, &freed);
        if (rc != 0)
            bg->error = rc;
        struct uzram_stats s;
        if (uzram_get_stats(bg->dev, &s, sizeof s) != 0)
            bg->error = -EINVAL;
        bg->compactions++;
        /* Every device here has a secondary algorithm: mark everything idle
         * and recompress it by turns, one priority or all, while the test's
         * threads write, read, discard and reset. */
        unsigned turn = (unsigned)(bg->recompressions++ % 4);
        if ((rc = uzram_mark_idle(bg->dev, 0, NULL)) != 0)
            bg->error = rc;
        rc = uzram_recompress(bg->dev, turn == 3 ? UZRAM_RECOMPRESS_HUGE : UZRAM_RECOMPRESS_IDLE, 0,
                              0, turn % 3, NULL);
        /* (a device with a mem_limit may have no room for a new object) */
        if (rc != 0 && rc != -ENOENT && rc != -ENOSPC)
            bg->error = rc;
        /* Write back by turns: idle pages, huge ones, a range of any, all
         * (the store may fill: -ENOSPC). */
        static const unsigned writeback_types[] = {UZRAM_WRITEBACK_IDLE, UZRAM_WRITEBACK_HUGE, 0,
                                                   0};
        struct uzram_config config;
        uzram_get_config(bg->dev, &config);
        uint64_t pages = config.disksize / PAGE;
        uint64_t first = turn == 2 ? bg->compactions * 7 % pages : 0;
        if (bg->backing &&
            (rc = uzram_writeback(bg->dev, writeback_types[turn], first,
                                  turn == 2 ? first + 63 : UINT64_MAX, NULL)) != 0 &&
            rc != -ENOSPC)
            bg->error = rc;
        /* and time flies, for the library's own recompressor where the
         * test started it (pages unused for 1 s) */
        store_test_advance_clock(bg->dev, 1);
        sched_yield();
    }
    return NULL;
}
