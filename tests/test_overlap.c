/* test_overlap.c - threads writing, discarding, reading (and resetting) overlapping ranges of
 * one device, each page self-describing so a reader tells a whole page from a mix; and threads
 * sharing sectors of pages. The model tests of one thread per range are test_model.c's. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
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

#include "model_util.h"
#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define SECTOR UZRAM_SECTOR_SIZE

/* ------------------------------------------------------------------------
 * Concurrent: overlapping ranges, whole-page verification
 * ---------------------------------------------------------------------- */

/*
 * Every page a writer stores is self-describing, so any reader can tell a
 * whole page from a mix:
 *   unique page:  header {UNIQUE_MAGIC, page index, thread, sequence, kind}
 *                 and a body generated from that header (regenerated and
 *                 compared in full by the reader);
 *   template:     one of a few fixed pages {TEMPLATE_MAGIC, number, ...}
 *                 (dedup runs: many pages share each one);
 *   same-filled:  a word whose top half is SAME_MARK and whose low half
 *                 names the page (or a template number for dedup runs);
 *   zeros:        never written, discarded, or write-zeroes.
 */
#define UNIQUE_MAGIC 0x757a72616d504731ull   /* "uzramPG1" */
#define TEMPLATE_MAGIC 0x757a72616d54504cull /* "uzramTPL" */
#define SAME_MARK 0x5a5aa5a5u
#define TEMPLATES 6
#define OVERLAP_PAGES 64

static uint8_t templates[TEMPLATES][PAGE];

struct overlap {
    struct uzram *dev;
    bool use_templates;
    bool with_reset;
    uint64_t seed;
    uint64_t ops;
    int failures;
    char message[256];
    pthread_mutex_t lock; /* only guards failures/message */
};

struct overlap_thread {
    struct overlap *shared;
    int id;
    int role; /* 0 writer, 1 discarder, 2 reader */
    struct datagen_rng rng;
    uint64_t sequence;
};

static void overlap_fail(struct overlap *o, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static void overlap_fail(struct overlap *o, const char *format, ...)
{
    va_list args;
    pthread_mutex_lock(&o->lock);
    if (__atomic_fetch_add(&o->failures, 1, __ATOMIC_RELAXED) == 0) {
        va_start(args, format);
        vsnprintf(o->message, sizeof o->message, format, args);
        va_end(args);
    }
    pthread_mutex_unlock(&o->lock);
}

static void unique_page(uint8_t *page, uint64_t page_index, uint64_t thread, uint64_t sequence,
                        uint64_t kind)
{
    uint64_t header[5] = {UNIQUE_MAGIC, page_index, thread, sequence, kind};
    struct datagen_rng rng;
    datagen_rng_seed(&rng, (page_index * 1000003u) ^ (thread << 48) ^ (sequence * 7919u));
    static const enum datagen_kind kinds[3] = {DATAGEN_TEXT, DATAGEN_HALF, DATAGEN_RANDOM};
    datagen_fill(&rng, kinds[kind % 3], page, PAGE);
    memcpy(page, header, sizeof header);
}

static void make_templates(void)
{
    for (int i = 0; i < TEMPLATES; i++) {
        unique_page(templates[i], 0, 0, (uint64_t)i, (uint64_t)i);
        uint64_t header[2] = {TEMPLATE_MAGIC, (uint64_t)i};
        memcpy(templates[i], header, sizeof header);
    }
}

/* The page a writer stores at `page_index`. */
static void overlap_content(struct overlap_thread *t, uint64_t page_index, uint8_t *page)
{
    uint64_t r = datagen_rng_below(&t->rng, 100);
    if (r < 10) {
        uint64_t low = t->shared->use_templates ? datagen_rng_below(&t->rng, 2) : page_index;
        uint64_t word = ((uint64_t)SAME_MARK << 32) | low;
        for (size_t i = 0; i < PAGE; i += 8)
            memcpy(page + i, &word, 8);
    } else if (t->shared->use_templates && r < 80) {
        memcpy(page, templates[datagen_rng_below(&t->rng, TEMPLATES)], PAGE);
    } else {
        unique_page(page, page_index, (uint64_t)t->id, t->sequence++,
                    datagen_rng_below(&t->rng, 3));
    }
}

/* True if `page` read at `page_index` is a whole page some writer stored. */
static bool overlap_page_ok(const struct overlap *o, uint64_t page_index, const uint8_t *page,
                            char *why, size_t why_size)
{
    uint64_t header[5];
    memcpy(header, page, sizeof header);
    if (page_is_same_filled(page)) {
        uint64_t word = header[0];
        if (word == 0)
            return true;
        uint64_t low = word & 0xffffffffu;
        bool ok = (word >> 32) == SAME_MARK && (o->use_templates ? low < 2 : low == page_index);
        if (!ok)
            snprintf(why, why_size, "same-filled page of unknown word 0x%016llx",
                     (unsigned long long)word);
        return ok;
    }
    if (header[0] == TEMPLATE_MAGIC && header[1] < TEMPLATES) {
        if (memcmp(page, templates[header[1]], PAGE) == 0)
            return true;
        snprintf(why, why_size, "template %llu differs at byte %zu", (unsigned long long)header[1],
                 first_difference(page, templates[header[1]], PAGE));
        return false;
    }
    if (header[0] == UNIQUE_MAGIC && header[1] == page_index) {
        uint8_t expected[PAGE];
        unique_page(expected, header[1], header[2], header[3], header[4]);
        if (memcmp(page, expected, PAGE) == 0)
            return true;
        snprintf(why, why_size, "page of thread %llu seq %llu differs at byte %zu (a mix)",
                 (unsigned long long)header[2], (unsigned long long)header[3],
                 first_difference(page, expected, PAGE));
        return false;
    }
    snprintf(why, why_size, "unrecognised header 0x%016llx 0x%016llx (a mix or wrong page)",
             (unsigned long long)header[0], (unsigned long long)header[1]);
    return false;
}

static void overlap_read_check(struct overlap_thread *t, uint64_t first, uint64_t count,
                               uint8_t *buf)
{
    struct overlap *o = t->shared;
    int rc = uzram_read(o->dev, first * PAGE, buf, count * PAGE);
    if (rc != 0) {
        overlap_fail(o, "thread %d: read of pages %llu+%llu returned %d", t->id,
                     (unsigned long long)first, (unsigned long long)count, rc);
        return;
    }
    for (uint64_t i = 0; i < count; i++) {
        char why[160];
        if (!overlap_page_ok(o, first + i, buf + i * PAGE, why, sizeof why)) {
            overlap_fail(o, "thread %d: page %llu is not whole: %s", t->id,
                         (unsigned long long)(first + i), why);
            return;
        }
    }
}

static void *overlap_thread_main(void *arg)
{
    struct overlap_thread *t = arg;
    struct overlap *o = t->shared;
    uint8_t *buf = malloc(8 * PAGE);
    if (!buf) {
        overlap_fail(o, "out of memory");
        return NULL;
    }
    for (uint64_t op = 0; op < o->ops && __atomic_load_n(&o->failures, __ATOMIC_RELAXED) == 0;
         op++) {
        uint64_t count = 1 + datagen_rng_below(&t->rng, 4);
        uint64_t first = datagen_rng_below(&t->rng, OVERLAP_PAGES - count + 1);
        int rc = 0;
        const char *what = "";
        switch (t->role) {
        case 0: /* writer, reading now and then */
            if (datagen_rng_below(&t->rng, 4) == 0) {
                overlap_read_check(t, first, count, buf);
                break;
            }
            for (uint64_t i = 0; i < count; i++)
                overlap_content(t, first + i, buf + i * PAGE);
            rc = uzram_write(o->dev, first * PAGE, buf, count * PAGE);
            what = "write";
            break;
        case 1: { /* discarder */
            uint64_t r = datagen_rng_below(&t->rng, 1000);
            if (o->with_reset && r < 5) {
                rc = uzram_reset(o->dev);
                what = "reset";
            } else if (r < 400) {
                rc = uzram_discard(o->dev, first * PAGE, count * PAGE);
                what = "discard";
            } else if (r < 600) {
                rc = uzram_write_zeroes(o->dev, first * PAGE, count * PAGE, false);
                what = "write_zeroes";
            } else if (r < 800) {
                rc = uzram_write_zeroes(o->dev, first * PAGE, count * PAGE, true);
                what = "write_zeroes keep";
            } else {
                overlap_read_check(t, first, count, buf);
            }
            break;
        }
        default: /* reader */
            overlap_read_check(t, first, count, buf);
            break;
        }
        if (rc != 0)
            overlap_fail(o, "thread %d: %s of pages %llu+%llu returned %d", t->id, what,
                         (unsigned long long)first, (unsigned long long)count, rc);
    }
    free(buf);
    return NULL;
}

static void run_overlap(const char *name, bool use_dedup, bool with_reset, uint64_t default_seed)
{
    struct model_options options = {name,
                                    "lz4",
                                    true,
                                    use_dedup,
                                    use_dedup,
                                    OVERLAP_PAGES * PAGE,
                                    {"zstd", "deflate"},
                                    .backing = true};
    struct overlap o;
    memset(&o, 0, sizeof o);
    pthread_mutex_init(&o.lock, NULL);
    o.dev = make_device(&options);
    assert_non_null(o.dev);
    o.use_templates = use_dedup;
    o.with_reset = with_reset;
    o.seed = test_seed(default_seed);
    o.ops = test_ops(DEFAULT_OPS) / 2;
    if (o.ops == 0)
        o.ops = 1;

    /* Two writers, a discarder and a reader, plus the compactor. */
    enum { N = 4 };
    static const int roles[N] = {0, 0, 1, 2};
    struct overlap_thread threads[N];
    pthread_t ids[N];
    struct background bg = {.dev = o.dev, .backing = true};
    /* the background recompressor too, as fast as it goes */
    assert_int_equal(uzram_set_recompress_rate(o.dev, 0), 0);
    assert_int_equal(uzram_set_recompress_idle(o.dev, 1), 0);
    pthread_t compactor;
    assert_int_equal(pthread_create(&compactor, NULL, compactor_main, &bg), 0);
    for (int i = 0; i < N; i++) {
        threads[i].shared = &o;
        threads[i].id = i + 1;
        threads[i].role = roles[i];
        threads[i].sequence = 0;
        datagen_rng_seed(&threads[i].rng, o.seed * 31 + (uint64_t)i);
        assert_int_equal(pthread_create(&ids[i], NULL, overlap_thread_main, &threads[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(ids[i], NULL);
    __atomic_store_n(&bg.stop, 1, __ATOMIC_RELEASE);
    pthread_join(compactor, NULL);
    if (bg.error != 0)
        overlap_fail(&o, "compactor saw error %d", bg.error);
    /* and the library's recompressor, whose pass keeps a dedup entry it works on alive */
    assert_int_equal(uzram_set_recompress_idle(o.dev, 0), 0);

    /* Quiet: every page whole, stats consistent, and a full discard brings
     * every stored-data counter back to zero. */
    if (o.failures == 0) {
        struct overlap_thread checker = {.shared = &o, .id = 0};
        uint8_t *buf = malloc(8 * PAGE);
        assert_non_null(buf);
        for (uint64_t p = 0; p < OVERLAP_PAGES; p += 8)
            overlap_read_check(&checker, p, 8, buf);
        free(buf);
        struct uzram_stats s = test_stats(o.dev);
        if (s.orig_data_size != s.pages_stored * PAGE || s.pages_stored > OVERLAP_PAGES ||
            s.same_pages > s.pages_stored || s.huge_pages + s.same_pages > s.pages_stored ||
            s.mem_used_total < s.compr_data_size || (!use_dedup && s.dup_data_size != 0))
            overlap_fail(&o,
                         "stats after the threads: pages_stored %llu orig %llu same %llu huge %llu "
                         "compr %llu mem_used_total %llu dup %llu",
                         (unsigned long long)s.pages_stored, (unsigned long long)s.orig_data_size,
                         (unsigned long long)s.same_pages, (unsigned long long)s.huge_pages,
                         (unsigned long long)s.compr_data_size,
                         (unsigned long long)s.mem_used_total, (unsigned long long)s.dup_data_size);
        int rc = uzram_discard(o.dev, 0, OVERLAP_PAGES * PAGE);
        s = test_stats(o.dev);
        if (rc != 0 || s.pages_stored != 0 || s.orig_data_size != 0 || s.compr_data_size != 0 ||
            s.same_pages != 0 || s.huge_pages != 0 || s.dup_data_size != 0 || s.mem_used_total != 0)
            overlap_fail(&o,
                         "after discarding everything (rc %d): pages_stored %llu orig %llu compr "
                         "%llu same %llu huge %llu dup %llu mem_used_total %llu",
                         rc, (unsigned long long)s.pages_stored,
                         (unsigned long long)s.orig_data_size,
                         (unsigned long long)s.compr_data_size, (unsigned long long)s.same_pages,
                         (unsigned long long)s.huge_pages, (unsigned long long)s.dup_data_size,
                         (unsigned long long)s.mem_used_total);
    }
    int failures = __atomic_load_n(&o.failures, __ATOMIC_RELAXED);
    if (failures != 0)
        fprintf(stderr, "[%s] FAILED, seed %llu (UZRAM_TEST_SEED=%llu): %s\n", name,
                (unsigned long long)o.seed, (unsigned long long)o.seed, o.message);
    uzram_destroy(o.dev);
    pthread_mutex_destroy(&o.lock);
    assert_int_equal(failures, 0);
}

static void test_concurrent_overlap(void **state)
{
    (void)state;
    run_overlap("concurrent_overlap", false, false, 3001);
}

static void test_concurrent_overlap_dedup(void **state)
{
    (void)state;
    run_overlap("concurrent_overlap_dedup", true, false, 3002);
}

static void test_concurrent_overlap_reset(void **state)
{
    (void)state;
    /* Reset racing with I/O is allowed (header): nothing may break. */
    run_overlap("concurrent_overlap_reset", true, true, 3003);
}

/* ------------------------------------------------------------------------
 * Concurrent: partial writes to shared pages
 * ---------------------------------------------------------------------- */

/*
 * Threads share every page but each owns some sectors of it: thread t owns
 * sectors t and t + SECTOR_OWNERS. Each writes only its own sectors, so the
 * engine's read-patch-write of a partial page must never lose another
 * thread's sector; each thread checks its sectors exactly, the main thread
 * checks everything at the end.
 */
#define SECTOR_OWNERS 4
#define SHARED_PAGES 16
#define SECTORS_PER_PAGE (PAGE / SECTOR)

struct sector_thread {
    struct uzram *dev;
    int id;
    uint64_t ops;
    uint64_t seed;
    uint8_t *model; /* the whole range; this thread touches only its sectors */
    int failures;
    char message[200];
};

static void *sector_thread_main(void *arg)
{
    struct sector_thread *t = arg;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, t->seed);
    uint8_t data[SECTOR];
    for (uint64_t op = 0; op < t->ops && t->failures == 0; op++) {
        uint64_t page = datagen_rng_below(&rng, SHARED_PAGES);
        uint64_t sector = (uint64_t)t->id + SECTOR_OWNERS * datagen_rng_below(&rng, 2);
        uint64_t offset = page * PAGE + sector * SECTOR;
        uint64_t r = datagen_rng_below(&rng, 10);
        if (r < 6) {
            enum datagen_kind kind = (enum datagen_kind)datagen_rng_below(&rng, DATAGEN_KIND_COUNT);
            datagen_fill(&rng, kind, data, SECTOR);
            int rc = uzram_write(t->dev, offset, data, SECTOR);
            if (rc != 0) {
                t->failures++;
                snprintf(t->message, sizeof t->message, "write at %llu returned %d",
                         (unsigned long long)offset, rc);
                break;
            }
            memcpy(t->model + offset, data, SECTOR);
        } else if (r < 7) {
            /* Zeroing one sector is a partial discard: read-patch-write too. */
            int rc = uzram_discard(t->dev, offset, SECTOR);
            if (rc != 0) {
                t->failures++;
                snprintf(t->message, sizeof t->message, "discard at %llu returned %d",
                         (unsigned long long)offset, rc);
                break;
            }
            memset(t->model + offset, 0, SECTOR);
        } else {
            int rc = uzram_read(t->dev, offset, data, SECTOR);
            if (rc != 0 || memcmp(data, t->model + offset, SECTOR) != 0) {
                t->failures++;
                snprintf(t->message, sizeof t->message,
                         "thread %d: sector at %llu (page %llu sector %llu) lost its data "
                         "(rc %d) at op %llu",
                         t->id, (unsigned long long)offset, (unsigned long long)page,
                         (unsigned long long)sector, rc, (unsigned long long)op);
                break;
            }
        }
    }
    return NULL;
}

static void run_shared_sectors(const char *name, bool use_dedup, uint64_t default_seed)
{
    struct model_options options = {
        name, "lz4", true, use_dedup, false, SHARED_PAGES * PAGE, {"zstd", NULL}, .backing = true};
    struct uzram *dev = make_device(&options);
    assert_non_null(dev);
    uint8_t *model = calloc(SHARED_PAGES, PAGE);
    assert_non_null(model);
    uint64_t seed = test_seed(default_seed);
    struct sector_thread threads[SECTOR_OWNERS];
    pthread_t ids[SECTOR_OWNERS];
    struct background bg = {.dev = dev, .backing = true};
    pthread_t compactor;
    assert_int_equal(pthread_create(&compactor, NULL, compactor_main, &bg), 0);
    for (int i = 0; i < SECTOR_OWNERS; i++) {
        threads[i] = (struct sector_thread){.dev = dev,
                                            .id = i,
                                            .seed = seed * 17 + (uint64_t)i,
                                            .ops = test_ops(DEFAULT_OPS),
                                            .model = model};
        assert_int_equal(pthread_create(&ids[i], NULL, sector_thread_main, &threads[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < SECTOR_OWNERS; i++) {
        pthread_join(ids[i], NULL);
        if (threads[i].failures) {
            fprintf(stderr, "[%s] FAILED, seed %llu (UZRAM_TEST_SEED=%llu): %s\n", name,
                    (unsigned long long)seed, (unsigned long long)seed, threads[i].message);
            failures++;
        }
    }
    __atomic_store_n(&bg.stop, 1, __ATOMIC_RELEASE);
    pthread_join(compactor, NULL);
    if (failures == 0) {
        uint8_t *got = malloc((size_t)SHARED_PAGES * PAGE);
        assert_non_null(got);
        assert_int_equal(uzram_read(dev, 0, got, (size_t)SHARED_PAGES * PAGE), 0);
        size_t at = first_difference(got, model, (size_t)SHARED_PAGES * PAGE);
        if (at != (size_t)SHARED_PAGES * PAGE) {
            fprintf(stderr, "[%s] FAILED, seed %llu: byte %zu (page %zu sector %zu) differs\n",
                    name, (unsigned long long)seed, at, at / PAGE, at % PAGE / SECTOR);
            failures++;
        }
        free(got);
    }
    assert_int_equal(bg.error, 0);
    uzram_destroy(dev);
    free(model);
    assert_int_equal(failures, 0);
}

static void test_concurrent_shared_sectors(void **state)
{
    (void)state;
    run_shared_sectors("concurrent_shared_sectors", false, 4001);
}

static void test_concurrent_shared_sectors_dedup(void **state)
{
    (void)state;
    run_shared_sectors("concurrent_shared_sectors_dedup", true, 4002);
}

/* The whole-page checker must itself tell a mix from a whole page, or the
 * overlapping tests above would prove nothing. */
static void test_overlap_checker(void **state)
{
    (void)state;
    struct overlap o;
    memset(&o, 0, sizeof o);
    uint8_t a[PAGE], b[PAGE], mix[PAGE];
    char why[160];
    unique_page(a, 7, 1, 10, 0);
    unique_page(b, 7, 2, 11, 2);
    assert_true(overlap_page_ok(&o, 7, a, why, sizeof why));
    assert_true(overlap_page_ok(&o, 7, b, why, sizeof why));
    assert_false(overlap_page_ok(&o, 8, a, why, sizeof why)); /* wrong page */
    for (size_t cut = 512; cut < PAGE; cut += 512) {
        memcpy(mix, a, cut);
        memcpy(mix + cut, b + cut, PAGE - cut);
        assert_false(overlap_page_ok(&o, 7, mix, why, sizeof why));
        memset(mix + cut, 0, PAGE - cut);
        assert_false(overlap_page_ok(&o, 7, mix, why, sizeof why));
    }
    memset(mix, 0, PAGE);
    assert_true(overlap_page_ok(&o, 7, mix, why, sizeof why));
    o.use_templates = true;
    assert_true(overlap_page_ok(&o, 3, templates[2], why, sizeof why));
    memcpy(mix, templates[2], PAGE);
    mix[PAGE - 1] ^= 1;
    assert_false(overlap_page_ok(&o, 3, mix, why, sizeof why));
}

/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    make_templates();
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overlap_checker),
        cmocka_unit_test(test_concurrent_overlap),
        cmocka_unit_test(test_concurrent_overlap_dedup),
        cmocka_unit_test(test_concurrent_overlap_reset),
        cmocka_unit_test(test_concurrent_shared_sectors),
        cmocka_unit_test(test_concurrent_shared_sectors_dedup),
    };
    return cmocka_run_group_tests_name("overlap", tests, NULL, NULL);
}
