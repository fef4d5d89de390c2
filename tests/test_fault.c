/* test_fault.c - fault injection sweep: each allocation and compression call of a realistic
 * workload fails in turn; the call must report it and the device must stay exact and consistent. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tier/writeback.h" /* writeback_test_no_thread */
#include "common/fault.h"
#include "test_util.h"

/*
 * How it works: the workload below is deterministic (its operations come
 * from a seeded generator that does not depend on results). It is run with
 * fault_arm(1), fault_arm(2), ... : run n makes the n-th fault point it
 * reaches fail, once. The sweep ends with the first run that reaches fewer
 * than n points, so every point the workload reaches has failed once.
 *
 * Each run uses a fresh thread, so that the per-thread compression contexts
 * are made (and their creation can fail) in every run. The whole-device
 * reads that check the outcome run in a second thread of the run, so they
 * never make the worker's decompression context ahead of the workload.
 *
 * After every operation, with injection paused:
 *  - a call during which a fault was injected returned a negative errno
 *    (except where the engine may absorb it, see absorbable()), and a call
 *    without one succeeded;
 *  - the device reads back, page by page in request order, as the new
 *    content up to some page and the old content from there on
 *    (include/uzram.h: "the pages before it hold the new data, that page
 *    and the ones after it keep their old content"); all pages outside the
 *    request are unchanged;
 *  - orig_data_size == pages_stored * 4096, pages_stored equals the pages
 *    that are not holes, and the smaller counters fit inside it;
 *  - failed_writes / failed_reads counted exactly the failed calls.
 * At the end everything is discarded, and then every size counter and
 * mem_used_total must be 0 and meta_data_size back to its empty value: a
 * failure that leaked an object, an id or a span would show here (and an
 * ASan build's leak checker sees leaked metadata).
 *
 * Environment: UZRAM_FAULT_VERBOSE=1 prints each injected site.
 */

#define PAGE UZRAM_PAGE_SIZE
#define SECTOR UZRAM_SECTOR_SIZE
#define DEVICE_PAGES 32u
#define DEVICE_BYTES ((uint64_t)DEVICE_PAGES * PAGE)
#define WORKLOAD_OPS 60
#define SHARED_PAGES 4
#define MAX_RUNS 100000u

struct sweep_config {
    const char *algorithm;
    bool use_dedup;
    uint64_t seed;
    /* Secondary algorithms (priority 1, 2; NULL: none): the workload then
     * marks pages idle and recompresses them, and with `dictionary` sets a
     * dictionary to train for priority 1 (zstd). */
    const char *recompress[2];
    bool dictionary;
    /* A backing file: the workload writes pages back (reads and partial
     * writes then go to the file); `when_full` with a pool of a third of
     * the disk, so writes make room by writing back, themselves (the
     * library's thread stays off: its work would come at random moments). */
    bool backing;
    bool when_full;
    /* Recompression packs bundles of this many pages (0: off); the workload then
     * recompresses more often, beside writeback when `backing`. */
    unsigned group;
};

struct run_result {
    bool hit;            /* a fault was injected in this run */
    bool absorbed;       /* ... and the call still succeeded */
    uint64_t calls;      /* fault points reached */
    const char *site;    /* where it was injected */
    unsigned failed_ops; /* calls that returned an error */
    uint64_t bundled;    /* the most pages seen bundled after a recompression */
};

/* Failures print the run and operation, then abort: the workload runs in
 * its own thread, where cmocka's longjmp-based asserts must not be used. */
struct run_context {
    const struct sweep_config *config;
    uint64_t nth;
    int op;
    const char *op_name;
};

static void fail_run(const struct run_context *ctx, const char *fmt, ...)
{
    va_list args;
    fprintf(stderr,
            "FAIL %s dedup=%d seed=%llu fault n=%llu op %d (%s), site %s: ", ctx->config->algorithm,
            ctx->config->use_dedup, (unsigned long long)ctx->config->seed,
            (unsigned long long)ctx->nth, ctx->op, ctx->op_name,
            fault_last_site() ? fault_last_site() : "none");
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fputc('\n', stderr);
    abort();
}

#define CHECK(ctx, cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail_run((ctx), __VA_ARGS__);                                                          \
    } while (0)

/* ---- the model ---------------------------------------------------------- */

struct run_state {
    struct run_context ctx;
    struct uzram *dev;
    struct datagen_rng rng;
    uint8_t model[DEVICE_BYTES];    /* what the device holds */
    uint8_t expected[DEVICE_BYTES]; /* what it holds if the current call succeeds */
    uint8_t actual[DEVICE_BYTES];
    uint8_t shared[SHARED_PAGES][PAGE]; /* contents that dedup shares */
    uint8_t buffer[8 * PAGE];
    uint64_t meta_baseline;
    /* the checker thread: read_all() hands it a buffer and waits */
    pthread_t checker;
    sem_t check_go, check_done;
    uint8_t *check_out;
    int check_rc;
    bool check_quit;
    uint64_t failed_writes;
    uint64_t failed_reads;
    struct run_result result;
};

static void *checker_thread(void *arg)
{
    struct run_state *state = arg;
    for (;;) {
        while (sem_wait(&state->check_go) != 0)
            ;
        if (state->check_quit)
            return NULL;
        state->check_rc = uzram_read(state->dev, 0, state->check_out, DEVICE_BYTES);
        sem_post(&state->check_done);
    }
}

/* Read the whole device (faults paused) in the checker thread. */
static void read_all(struct run_state *state, uint8_t *out)
{
    state->check_out = out;
    sem_post(&state->check_go);
    while (sem_wait(&state->check_done) != 0)
        ;
    CHECK(&state->ctx, state->check_rc == 0, "read of the whole device failed: %d",
          state->check_rc);
}

static struct uzram_stats stats_of(struct run_state *state)
{
    struct uzram_stats stats;
    CHECK(&state->ctx, uzram_get_stats(state->dev, &stats, sizeof stats) == 0, "stats");
    return stats;
}

static void check_stats(struct run_state *state)
{
    struct run_context *ctx = &state->ctx;
    struct uzram_stats s = stats_of(state);
    uint64_t not_holes = 0;
    for (uint64_t page = 0; page < DEVICE_PAGES; page++) {
        uint64_t run;
        unsigned flags;
        CHECK(ctx, uzram_extent(state->dev, page * PAGE, PAGE, &run, &flags) == 0, "extent");
        if (!(flags & UZRAM_EXTENT_HOLE))
            not_holes++;
    }
    CHECK(ctx, s.orig_data_size == s.pages_stored * PAGE, "orig_data_size %llu != %llu pages",
          (unsigned long long)s.orig_data_size, (unsigned long long)s.pages_stored);
    CHECK(ctx, s.pages_stored == not_holes, "pages_stored %llu but %llu pages are not holes",
          (unsigned long long)s.pages_stored, (unsigned long long)not_holes);
    CHECK(ctx, s.same_pages <= s.pages_stored && s.zero_pages <= s.same_pages,
          "same_pages %llu zero_pages %llu pages_stored %llu", (unsigned long long)s.same_pages,
          (unsigned long long)s.zero_pages, (unsigned long long)s.pages_stored);
    CHECK(ctx, s.huge_pages + s.same_pages <= s.pages_stored, "huge_pages %llu",
          (unsigned long long)s.huge_pages);
    CHECK(ctx, s.compr_data_size <= s.mem_used_total, "compr_data_size %llu > mem_used %llu",
          (unsigned long long)s.compr_data_size, (unsigned long long)s.mem_used_total);
    CHECK(ctx, (s.compr_data_size == 0) == (s.mem_used_total == 0),
          "compr_data_size %llu but mem_used_total %llu", (unsigned long long)s.compr_data_size,
          (unsigned long long)s.mem_used_total);
    if (!state->ctx.config->use_dedup)
        CHECK(ctx,
              s.dup_data_size == 0 && s.meta_data_size == s.bundle_mem &&
                  (s.bundle_mem == 0) == (s.bundles == 0),
              "dedup counters without dedup (meta_data_size %llu: bundles' records only)",
              (unsigned long long)s.meta_data_size);
    CHECK(ctx, s.failed_writes == state->failed_writes, "failed_writes %llu, expected %llu",
          (unsigned long long)s.failed_writes, (unsigned long long)state->failed_writes);
    CHECK(ctx, s.failed_reads == state->failed_reads, "failed_reads %llu, expected %llu",
          (unsigned long long)s.failed_reads, (unsigned long long)state->failed_reads);
}

/* Where a fault may be injected without the call failing: a comparison of
 * dedup candidates that cannot decompress treats the candidate as different
 * and stores the page anew, which is correct (just less shared). */
static bool absorbable(const char *site)
{
    /* Also: a dictionary that a recompression pass fails to train (or retrain) stays
     * as it was, and the pass goes on without the new one (uzram.h); a candidate
     * on the backing store that cannot be read is different too, and
     * compaction of the backing store leaves an object it cannot read or write
     * where it is. */
    /* And: a pass that cannot have its bundle buffers goes on page by page; writeback
     * leaves a bundled page it cannot decompress in its bundle (bundle.c,
     * recompress_bundle.c). */
    return site && (strstr(site, "comp.c") != NULL || strstr(site, "recompress.c") != NULL ||
                    strstr(site, "recompress_dict.c") != NULL ||
                    strstr(site, "backing.c") != NULL || strstr(site, "bundle.c") != NULL);
}

/* After a write-like call on [offset, offset + length): check the outcome
 * against the model and make the model follow. `writes`: a failure counts
 * in failed_writes. */
static void settle(struct run_state *state, int rc, uint64_t hits_before, uint64_t offset,
                   uint64_t length, bool writes)
{
    struct run_context *ctx = &state->ctx;
    bool hit = fault_hits() != hits_before;
    fault_pause(true);
    if (hit) {
        state->result.hit = true;
        state->result.site = fault_last_site();
        if (rc == 0) {
            CHECK(ctx, absorbable(fault_last_site()), "fault injected but the call succeeded");
            state->result.absorbed = true;
        }
    } else {
        CHECK(ctx, rc == 0, "call failed with %d without an injected fault", rc);
    }
    if (rc < 0) {
        /* -ENOSPC: a write that could not make room, as writing back failed */
        CHECK(ctx, rc == -ENOMEM || rc == -EIO || (ctx->config->when_full && rc == -ENOSPC),
              "unexpected error %d", rc);
        state->result.failed_ops++;
        if (writes)
            state->failed_writes++;
    }

    read_all(state, state->actual);
    uint64_t first = offset / PAGE;
    uint64_t end = length ? (offset + length + PAGE - 1) / PAGE : first;
    if (rc == 0) {
        CHECK(ctx, memcmp(state->actual, state->expected, DEVICE_BYTES) == 0,
              "content differs from the model after a successful call");
    } else {
        for (uint64_t page = 0; page < DEVICE_PAGES; page++) {
            if (page >= first && page < end)
                continue;
            CHECK(ctx, memcmp(state->actual + page * PAGE, state->model + page * PAGE, PAGE) == 0,
                  "page %llu outside the failed request changed", (unsigned long long)page);
        }
        bool in_new_part = true;
        for (uint64_t page = first; page < end; page++) {
            const uint8_t *now = state->actual + page * PAGE;
            bool is_new = memcmp(now, state->expected + page * PAGE, PAGE) == 0;
            bool is_old = memcmp(now, state->model + page * PAGE, PAGE) == 0;
            if (in_new_part && !is_new)
                in_new_part = false;
            if (!in_new_part)
                CHECK(ctx, is_old, "page %llu is neither the old content nor, in order, the new",
                      (unsigned long long)page);
        }
    }
    memcpy(state->model, state->actual, DEVICE_BYTES);
    check_stats(state);
    fault_pause(false);
}

/* ---- operations ------------------------------------------------------------ */

static void fill_content(struct run_state *state, uint8_t *buf, size_t length)
{
    for (size_t done = 0; done < length; done += PAGE) {
        size_t chunk = length - done < PAGE ? length - done : PAGE;
        uint64_t choice = datagen_rng_below(&state->rng, 10);
        if (choice < 4) {
            memcpy(buf + done, state->shared[datagen_rng_below(&state->rng, SHARED_PAGES)], chunk);
        } else {
            static const enum datagen_kind kinds[] = {DATAGEN_ZERO, DATAGEN_SAME,   DATAGEN_TEXT,
                                                      DATAGEN_HALF, DATAGEN_RANDOM, DATAGEN_TEXT};
            datagen_fill(&state->rng, kinds[choice - 4], buf + done, chunk);
        }
    }
}

static void op_write(struct run_state *state, uint64_t offset, uint64_t length)
{
    fill_content(state, state->buffer, length);
    memcpy(state->expected, state->model, DEVICE_BYTES);
    memcpy(state->expected + offset, state->buffer, length);
    uint64_t hits = fault_hits();
    int rc = uzram_write(state->dev, offset, state->buffer, length);
    settle(state, rc, hits, offset, length, true);
}

static void op_zero(struct run_state *state, uint64_t offset, uint64_t length, int how)
{
    memcpy(state->expected, state->model, DEVICE_BYTES);
    memset(state->expected + offset, 0, length);
    uint64_t hits = fault_hits();
    int rc = how == 0 ? uzram_discard(state->dev, offset, length)
                      : uzram_write_zeroes(state->dev, offset, length, how == 2);
    settle(state, rc, hits, offset, length, true);
}

static void op_read(struct run_state *state, uint64_t offset, uint64_t length)
{
    uint64_t hits = fault_hits();
    int rc = uzram_read(state->dev, offset, state->buffer, length);
    bool hit = fault_hits() != hits;
    fault_pause(true);
    if (rc == 0) {
        CHECK(&state->ctx, memcmp(state->buffer, state->model + offset, length) == 0,
              "read differs from the model");
    } else {
        /* -EIO: the backing store could not be read */
        CHECK(&state->ctx, hit && (rc == -ENOMEM || rc == -EIO), "read failed with %d (fault %d)",
              rc, hit);
        state->failed_reads++;
        state->result.failed_ops++;
    }
    /* every fault a read meets fails it: it has nothing to fall back on */
    CHECK(&state->ctx, !hit || rc < 0, "a read met a fault and succeeded");
    if (hit) {
        state->result.hit = true;
        state->result.site = fault_last_site();
    }
    check_stats(state);
    fault_pause(false);
}

/* Mark everything idle and recompress (all priorities in turn, or one). */
static void op_recompress(struct run_state *state, unsigned priority)
{
    memcpy(state->expected, state->model, DEVICE_BYTES);
    uint64_t hits = fault_hits();
    int rc = uzram_mark_idle(state->dev, 0, NULL);
    if (rc == 0)
        rc = uzram_recompress(state->dev, UZRAM_RECOMPRESS_IDLE, 0, 0, priority, NULL);
    if (rc == -ENOENT) /* nothing at that priority */
        rc = 0;
    settle(state, rc, hits, 0, 0, false);
    fault_pause(true);
    uint64_t bundled = stats_of(state).bundled_pages;
    if (bundled > state->result.bundled)
        state->result.bundled = bundled;
    fault_pause(false);
}

/* dict=auto for priority 1: trained now if the pages allow, else by a
 * later recompression. */
static void op_dictionary(struct run_state *state)
{
    memcpy(state->expected, state->model, DEVICE_BYTES);
    uint64_t hits = fault_hits();
    int rc = uzram_set_algorithm_params(state->dev, 1, 0, NULL, 1024);
    settle(state, rc, hits, 0, 0, false);
}

/* Write back pages of some type from some part of the disk: a failure
 * leaves them all in memory, as they were. */
static void op_writeback(struct run_state *state)
{
    static const unsigned types[] = {0, UZRAM_WRITEBACK_IDLE, UZRAM_WRITEBACK_HUGE};
    unsigned type = types[datagen_rng_below(&state->rng, 3)];
    uint64_t first = datagen_rng_below(&state->rng, DEVICE_PAGES);
    memcpy(state->expected, state->model, DEVICE_BYTES);
    uint64_t hits = fault_hits();
    int rc = uzram_mark_idle(state->dev, 0, NULL);
    if (rc == 0)
        rc = uzram_writeback(state->dev, type, first, first + 16, NULL);
    settle(state, rc, hits, 0, 0, false);
}

static void op_compact(struct run_state *state)
{
    memcpy(state->expected, state->model, DEVICE_BYTES);
    uint64_t hits = fault_hits();
    int rc = uzram_compact(state->dev, NULL);
    settle(state, rc, hits, 0, 0, false);
}

/* A sector-aligned range of 1..8 pages worth of sectors, within the disk. */
static void random_range(struct run_state *state, bool whole_pages, uint64_t *offset,
                         uint64_t *length)
{
    if (whole_pages) {
        uint64_t pages = 1 + datagen_rng_below(&state->rng, 4);
        *offset = datagen_rng_below(&state->rng, DEVICE_PAGES - pages + 1) * PAGE;
        *length = pages * PAGE;
    } else {
        uint64_t sectors = 1 + datagen_rng_below(&state->rng, 3 * PAGE / SECTOR);
        uint64_t total = DEVICE_BYTES / SECTOR;
        *offset = datagen_rng_below(&state->rng, total - sectors + 1) * SECTOR;
        *length = sectors * SECTOR;
    }
}

static void workload(struct run_state *state)
{
    struct run_context *ctx = &state->ctx;
    uint64_t offset, length;

    /* Fill most of the device, then mix overwrites, partial writes,
     * discards and zeroing, reads and compactions. */
    for (ctx->op = 0; ctx->op < WORKLOAD_OPS; ctx->op++) {
        uint64_t choice = datagen_rng_below(&state->rng, 100);
        if (ctx->op < 12) {
            ctx->op_name = "fill";
            random_range(state, true, &offset, &length);
            op_write(state, offset, length);
        } else if (choice < 35) {
            ctx->op_name = "overwrite";
            random_range(state, true, &offset, &length);
            op_write(state, offset, length);
        } else if (choice < 55) {
            ctx->op_name = "partial write";
            random_range(state, false, &offset, &length);
            op_write(state, offset, length);
        } else if (choice < 70) {
            ctx->op_name = "discard";
            random_range(state, datagen_rng_below(&state->rng, 2), &offset, &length);
            op_zero(state, offset, length, 0);
        } else if (choice < 77) {
            ctx->op_name = "write_zeroes";
            random_range(state, false, &offset, &length);
            op_zero(state, offset, length, 1 + (int)datagen_rng_below(&state->rng, 2));
        } else if (choice < 92) {
            ctx->op_name = "read";
            random_range(state, datagen_rng_below(&state->rng, 2), &offset, &length);
            op_read(state, offset, length);
        } else if (ctx->config->group && choice < 95) {
            ctx->op_name = "recompress";
            op_recompress(state, (unsigned)datagen_rng_below(&state->rng, 2));
        } else if (ctx->config->backing && choice >= 96) {
            ctx->op_name = "writeback";
            op_writeback(state);
        } else if (choice < 96 || !ctx->config->recompress[0]) {
            ctx->op_name = "compact";
            op_compact(state);
        } else if (ctx->config->dictionary && ctx->op > 20 && choice == 96) {
            ctx->op_name = "dictionary";
            op_dictionary(state);
        } else {
            ctx->op_name = "recompress";
            op_recompress(state, (unsigned)datagen_rng_below(&state->rng, 3));
        }
    }
}

/* One run with the nth fault point failing; in its own thread. */
static void *run_thread(void *arg)
{
    struct run_state *state = arg;
    const struct sweep_config *config = state->ctx.config;
    state->ctx.op = -1;
    state->ctx.op_name = "create";
    datagen_rng_seed(&state->rng, config->seed);
    for (int i = 0; i < SHARED_PAGES; i++)
        datagen_fill(&state->rng, i % 2 ? DATAGEN_HALF : DATAGEN_TEXT, state->shared[i], PAGE);

    /* The device is made before arming: making it is swept separately. */
    state->dev = test_device(DEVICE_BYTES, config->algorithm, config->use_dedup);
    for (unsigned i = 0; i < 2; i++)
        if (config->recompress[i])
            CHECK(&state->ctx,
                  uzram_set_recomp_algorithm(state->dev, i + 1, config->recompress[i], 0) == 0,
                  "secondary algorithm");
    CHECK(&state->ctx, uzram_set_recompress_group(state->dev, config->group) == 0, "group");
    if (config->backing) {
        CHECK(&state->ctx, test_attach_backing(state->dev, true) == 0, "backing store");
        writeback_test_no_thread(state->dev);
        if (config->when_full) {
            CHECK(&state->ctx, uzram_set_writeback_when_full(state->dev, true) == 0, "when full");
            CHECK(&state->ctx, uzram_set_mem_limit(state->dev, DEVICE_BYTES / 3) == 0, "limit");
        }
    }
    state->meta_baseline = stats_of(state).meta_data_size;
    memset(state->model, 0, DEVICE_BYTES);
    sem_init(&state->check_go, 0, 0);
    sem_init(&state->check_done, 0, 0);
    CHECK(&state->ctx, pthread_create(&state->checker, NULL, checker_thread, state) == 0,
          "checker thread");

    fault_arm(state->ctx.nth);
    workload(state);
    state->result.calls = fault_calls();
    fault_disarm();

    /* Drop everything: all memory must come back. */
    state->ctx.op_name = "final discard";
    CHECK(&state->ctx, uzram_discard(state->dev, 0, DEVICE_BYTES) == 0, "final discard");
    uzram_compact(state->dev, NULL);
    /* the settings drop their dictionaries too: then nothing is left */
    for (unsigned priority = 1; priority <= UZRAM_RECOMPRESS_PRIORITY_MAX; priority++)
        uzram_set_recomp_algorithm(state->dev, priority, NULL, 0);
    struct uzram_stats s = stats_of(state);
    CHECK(&state->ctx,
          s.orig_data_size == 0 && s.pages_stored == 0 && s.compr_data_size == 0 &&
              s.dup_data_size == 0 && s.same_pages == 0 && s.zero_pages == 0 && s.huge_pages == 0 &&
              s.mem_used_total == 0,
          "after discarding everything: orig %llu compr %llu dup %llu same %llu huge %llu "
          "mem_used %llu",
          (unsigned long long)s.orig_data_size, (unsigned long long)s.compr_data_size,
          (unsigned long long)s.dup_data_size, (unsigned long long)s.same_pages,
          (unsigned long long)s.huge_pages, (unsigned long long)s.mem_used_total);
    CHECK(&state->ctx, s.bd_objects == 0 && s.bd_data_size == 0 && s.bd_count == 0,
          "after discarding everything: bd_objects %llu bd_data_size %llu bd_count %llu",
          (unsigned long long)s.bd_objects, (unsigned long long)s.bd_data_size,
          (unsigned long long)s.bd_count);
    CHECK(&state->ctx, s.meta_data_size == state->meta_baseline,
          "meta_data_size %llu, empty index has %llu", (unsigned long long)s.meta_data_size,
          (unsigned long long)state->meta_baseline);
    read_all(state, state->actual);
    for (uint64_t i = 0; i < DEVICE_BYTES; i++)
        CHECK(&state->ctx, state->actual[i] == 0, "byte %llu not zero after discard",
              (unsigned long long)i);
    state->check_quit = true;
    sem_post(&state->check_go);
    pthread_join(state->checker, NULL);
    sem_destroy(&state->check_go);
    sem_destroy(&state->check_done);
    uzram_destroy(state->dev);
    return NULL;
}

static struct run_result run_once(const struct sweep_config *config, uint64_t nth)
{
    struct run_state *state = calloc(1, sizeof *state);
    assert_non_null(state);
    state->ctx.config = config;
    state->ctx.nth = nth;
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, run_thread, state), 0);
    assert_int_equal(pthread_join(thread, NULL), 0);
    struct run_result result = state->result;
    free(state);
    return result;
}

static bool verbose(void)
{
    const char *value = getenv("UZRAM_FAULT_VERBOSE");
    return value && *value && strcmp(value, "0") != 0;
}

/* Total fault points failed over all sweeps, for the summary line. */
static uint64_t total_swept;

static void sweep(const struct sweep_config *config)
{
    if (!fault_enabled())
        skip();
    uint64_t nth;
    unsigned absorbed = 0, failed = 0;
    uint64_t reached = 0, bundled = 0;
    for (nth = 1; nth < MAX_RUNS; nth++) {
        struct run_result result = run_once(config, nth);
        if (!result.hit) {
            reached = result.calls;
            bundled = result.bundled;
            break;
        }
        failed += result.failed_ops > 0;
        absorbed += result.absorbed;
        if (verbose())
            printf("  n=%llu fault at %s%s\n", (unsigned long long)nth, result.site,
                   result.absorbed ? " (absorbed)" : "");
    }
    assert_true(nth < MAX_RUNS);
    assert_int_equal(reached, nth - 1);
    total_swept += nth - 1;
    printf("%s dedup=%d: %llu fault points swept (%u calls failed, %u absorbed)", config->algorithm,
           config->use_dedup, (unsigned long long)(nth - 1), failed, absorbed);
    if (config->group)
        printf("; at most %llu pages bundled in the run without a fault",
               (unsigned long long)bundled);
    printf("\n");
    /* the run without a fault did bundle: the sweep went through packing */
    if (config->group)
        assert_true(bundled > 0);
}

static void test_sweep_lz4(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){.algorithm = "lz4", .use_dedup = false, .seed = 11});
}

static void test_sweep_lz4_dedup(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){.algorithm = "lz4", .use_dedup = true, .seed = 12});
}

static void test_sweep_zstd_dedup(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){.algorithm = "zstd", .use_dedup = true, .seed = 13});
}

static void test_sweep_deflate(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){.algorithm = "deflate", .use_dedup = false, .seed = 14});
}

static void test_sweep_lzo_dedup(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){.algorithm = "lzo", .use_dedup = true, .seed = 15});
}

/* Recompression: every allocation and compression of a pass fails in turn,
 * and the page keeps its old form. */
static void test_sweep_recompress(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){
        .algorithm = "lz4", .use_dedup = false, .seed = 16, .recompress = {"zstd", "deflate"}});
}

/* Writeback: every allocation, compression and I/O of the backing store
 * fails in turn, in writeback by request, in writes that make room, in
 * reads and partial writes of written-back pages and in dedup comparisons
 * with them: a failed write to the store leaves the pages in memory, a
 * failed read is that read's -EIO, and nothing else changes. */
static void test_sweep_writeback_when_full(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){
        .algorithm = "lz4", .use_dedup = false, .seed = 18, .backing = true, .when_full = true});
}

static void test_sweep_writeback_dedup(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){
        .algorithm = "zstd", .use_dedup = true, .seed = 19, .backing = true, .when_full = true});
}

static void test_sweep_recompress_dedup_dictionary(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){.algorithm = "lzo",
                                 .use_dedup = true,
                                 .seed = 17,
                                 .recompress = {"zstd", "lz4hc"},
                                 .dictionary = true});
}

/* Bundles: every allocation and compression of packing, splitting, reading and writing
 * back bundles fails in turn; a failed packing leaves every page as it was. */
static void test_sweep_bundle(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){.algorithm = "lz4",
                                 .use_dedup = false,
                                 .seed = 20,
                                 .recompress = {"zstd"},
                                 .backing = true,
                                 .group = 4});
}

/* Bundles under dedup: pages whose dedup entry no other page shares leave the index as they
 * are bundled (dedup_take_sole); each failure leaves every page, and the index, as it was. */
static void test_sweep_bundle_dedup(void **unused)
{
    (void)unused;
    sweep(&(struct sweep_config){.algorithm = "lz4",
                                 .use_dedup = true,
                                 .seed = 22,
                                 .recompress = {"zstd"},
                                 .backing = true,
                                 .group = 4});
}

/* Making a device and switching dedup on allocate too: each failure must
 * give -ENOMEM, leave no half-made device and leak nothing (the ASan
 * build's leak check sees leaks). `late_dedup`: dedup is switched on after
 * creation instead of at it. Returns the points swept. */
static uint64_t sweep_create(bool late_dedup)
{
    uint64_t nth;
    for (nth = 1; nth < 1000; nth++) {
        struct uzram_config config;
        uzram_config_init(&config);
        config.disksize = DEVICE_BYTES;
        config.use_dedup = !late_dedup;
        struct uzram *dev = NULL;
        fault_arm(nth);
        int rc = uzram_create(&config, &dev);
        if (rc == 0 && late_dedup) {
            rc = uzram_set_dedup(dev, true);
            if (rc < 0) {
                struct uzram_config now;
                uzram_get_config(dev, &now);
                assert_false(now.use_dedup);
                assert_int_equal(test_stats(dev).meta_data_size, 0);
            }
        } else if (rc < 0) {
            assert_null(dev);
        }
        uint64_t hits = fault_hits();
        fault_disarm();
        if (hits)
            assert_int_equal(rc, -ENOMEM);
        else
            assert_int_equal(rc, 0);
        if (dev) {
            /* Whatever failed, the device works. */
            uint8_t page[PAGE], back[PAGE];
            memset(page, 0x5a, sizeof page);
            page[7] = 1;
            assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
            assert_int_equal(uzram_read(dev, 0, back, PAGE), 0);
            assert_memory_equal(page, back, PAGE);
            uzram_destroy(dev);
        }
        if (!hits)
            break;
    }
    assert_true(nth < 1000);
    return nth - 1;
}

static void test_sweep_create(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    uint64_t early = sweep_create(false);
    uint64_t late = sweep_create(true);
    total_swept += early + late;
    printf("create with dedup: %llu fault points swept; create, then dedup on: %llu\n",
           (unsigned long long)early, (unsigned long long)late);
}

/* Attaching a backing store and starting the writeback thread allocate
 * too: each failure must give -ENOMEM (-EAGAIN for the thread), leave the
 * device as it was (no store; the setting off) and leak nothing. */
static void test_sweep_attach(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    uint64_t nth;
    for (nth = 1; nth < 1000; nth++) {
        struct uzram *dev = test_device(DEVICE_BYTES, "lz4", false);
        fault_arm(nth);
        int rc = test_attach_backing(dev, true);
        int thread_rc = rc == 0 ? uzram_set_writeback_when_full(dev, true) : 0;
        uint64_t hits = fault_hits();
        fault_disarm();
        char path[64];
        int length = uzram_get_backing_dev(dev, path, sizeof path);
        if (rc < 0) {
            assert_int_equal(rc, -ENOMEM);
            assert_int_equal(length, 4); /* "none" */
        }
        if (thread_rc < 0) {
            assert_int_equal(thread_rc, -EAGAIN);
            char value[16];
            assert_true(uzram_attr_get(dev, "writeback_when_full", value, sizeof value) > 0);
            assert_string_equal(value, "0\n");
        }
        assert_int_equal(hits != 0, rc < 0 || thread_rc < 0);
        /* whatever failed, the device works, and writes back once it has a store */
        if (rc < 0)
            assert_int_equal(test_attach_backing(dev, true), 0);
        uint8_t page[PAGE], back[PAGE];
        memset(page, 0x5a, sizeof page);
        page[9] = 1;
        assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
        uint64_t written = 0;
        assert_int_equal(uzram_writeback(dev, 0, 0, UINT64_MAX, &written), 0);
        assert_int_equal(written, 1);
        assert_int_equal(uzram_read(dev, 0, back, PAGE), 0);
        assert_memory_equal(page, back, PAGE);
        uzram_destroy(dev);
        if (!hits)
            break;
    }
    assert_true(nth < 1000);
    total_swept += nth - 1;
    printf("attach a backing store, start the writeback thread: %llu fault points swept\n",
           (unsigned long long)(nth - 1));
}

/* The kind mask: with only compression armed, the first write fails with
 * -EIO from the compressor, and no allocation is failed. */
static void test_compress_only(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    struct uzram *dev = test_device(DEVICE_BYTES, "lz4", false);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 3);
    uint8_t page[PAGE];
    datagen_fill(&rng, DATAGEN_TEXT, page, PAGE);
    fault_arm_kinds(1, FAULT_COMPRESS);
    assert_int_equal(uzram_write(dev, 0, page, PAGE), -EIO);
    assert_int_equal(fault_hits(), 1);
    assert_int_equal(fault_calls(), 1);
    assert_non_null(strstr(fault_last_site(), "comp.c"));
    assert_int_equal(uzram_write(dev, 0, page, PAGE), 0);
    fault_disarm();
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.failed_writes, 1);
    assert_int_equal(s.pages_stored, 1);
    uzram_destroy(dev);
}

/* Runs last: lists the distinct sites that failed over the whole binary. */
static void test_report_sites(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    unsigned count = fault_site_count();
    printf("%llu fault points swept in total, at %u distinct sites:\n",
           (unsigned long long)total_swept, count);
    for (unsigned i = 0; i < count; i++)
        printf("  %s\n", fault_site_name(i));
    assert_true(count > 0);
}

/* Accept "concurrent" as well as a cmocka glob, as the other tests do;
 * nothing here is concurrent, so the TSan stage does not run this binary.
 * Without fault injection every case skips, and scripts/run-tests.sh then
 * reports the binary as SKIP with the line printed below. */
int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    if (!fault_enabled())
        printf("SKIP: fault injection not built in (needs -DUZRAM_FAULT_INJECTION; "
               "make fault-check builds and runs it)\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compress_only),
        cmocka_unit_test(test_sweep_create),
        cmocka_unit_test(test_sweep_lz4),
        cmocka_unit_test(test_sweep_lz4_dedup),
        cmocka_unit_test(test_sweep_zstd_dedup),
        cmocka_unit_test(test_sweep_deflate),
        cmocka_unit_test(test_sweep_lzo_dedup),
        cmocka_unit_test(test_sweep_recompress),
        cmocka_unit_test(test_sweep_recompress_dedup_dictionary),
        cmocka_unit_test(test_sweep_writeback_when_full),
        cmocka_unit_test(test_sweep_writeback_dedup),
        cmocka_unit_test(test_sweep_bundle),
        cmocka_unit_test(test_sweep_bundle_dedup),
        cmocka_unit_test(test_sweep_attach),
        cmocka_unit_test(test_report_sites),
    };
    return cmocka_run_group_tests_name("fault", tests, NULL, NULL);
}
