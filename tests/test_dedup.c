/* test_dedup.c - unit tests of deduplication: sharing, unsharing, collisions.
 * Uses the internal force-collision switch so only full comparison separates pages. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dedup/dedup.h"
#include "device/device.h"
#include "test_util.h"

#define DISK (16u << 20)
#define PAGE UZRAM_PAGE_SIZE

static void fill_page(unsigned char *page, uint64_t seed, enum datagen_kind kind)
{
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed);
    datagen_fill(&rng, kind, page, PAGE);
}

static void write_page(struct uzram *dev, uint64_t index, const unsigned char *page)
{
    assert_int_equal(uzram_write(dev, index * PAGE, page, PAGE), 0);
}

static void expect_page(struct uzram *dev, uint64_t index, const unsigned char *page)
{
    unsigned char back[PAGE];
    assert_int_equal(uzram_read(dev, index * PAGE, back, PAGE), 0);
    assert_memory_equal(back, page, PAGE);
}

/* The size the one shared object takes: what a single copy adds. */
static uint64_t single_copy_size(const unsigned char *page)
{
    struct uzram *dev = test_device(DISK, NULL, 1);
    write_page(dev, 0, page);
    uint64_t size = test_stats(dev).compr_data_size;
    uzram_destroy(dev);
    return size;
}

static void test_identical_pages_share(void **state)
{
    (void)state;
    unsigned char page[PAGE];
    fill_page(page, 1, DATAGEN_TEXT);
    uint64_t size = single_copy_size(page);
    struct uzram *dev = test_device(DISK, NULL, 1);
    uint64_t meta_before = test_stats(dev).meta_data_size;
    for (uint64_t i = 0; i < 10; i++)
        write_page(dev, i * 3, page);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.orig_data_size, 10 * PAGE);
    assert_int_equal(s.compr_data_size, size);
    assert_int_equal(s.dup_data_size, 9 * size);
    /* one entry, in the index's first chunk of entries: no memory more */
    assert_int_equal(s.meta_data_size, meta_before);
    assert_int_equal(s.dedup_entries, 1);
    for (uint64_t i = 0; i < 10; i++)
        expect_page(dev, i * 3, page);

    /* Discard, overwrite and write-zeroes each drop only their own reference. */
    assert_int_equal(uzram_discard(dev, 0, PAGE), 0);
    unsigned char other[PAGE];
    fill_page(other, 2, DATAGEN_HALF);
    write_page(dev, 3, other);
    assert_int_equal(uzram_write_zeroes(dev, 6 * PAGE, PAGE, true), 0);
    s = test_stats(dev);
    assert_int_equal(s.dup_data_size, 6 * size);
    for (uint64_t i = 3; i < 10; i++)
        expect_page(dev, i * 3, page);
    expect_page(dev, 3, other);

    /* The last reference frees the object and the index returns to start. */
    assert_int_equal(uzram_discard(dev, 0, DISK), 0);
    s = test_stats(dev);
    assert_int_equal(s.dup_data_size, 0);
    assert_int_equal(s.compr_data_size, 0);
    assert_int_equal(s.mem_used_total, 0);
    assert_int_equal(s.meta_data_size, meta_before);
    uzram_destroy(dev);
}

static void test_huge_pages_share(void **state)
{
    (void)state;
    unsigned char page[PAGE];
    fill_page(page, 3, DATAGEN_RANDOM);
    struct uzram *dev = test_device(DISK, NULL, 1);
    write_page(dev, 1, page);
    write_page(dev, 2, page);
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.compr_data_size, PAGE);
    assert_int_equal(s.dup_data_size, PAGE);
    assert_int_equal(s.huge_pages, 2);
    assert_int_equal(s.mem_used_total, PAGE);
    expect_page(dev, 2, page);
    write_page(dev, 1, (unsigned char[PAGE]){1});
    s = test_stats(dev);
    assert_int_equal(s.huge_pages, 1);
    assert_int_equal(s.dup_data_size, 0);
    expect_page(dev, 2, page);
    uzram_destroy(dev);
}

/* With every hash equal, pages that differ must still never be merged. */
static void test_forced_collisions_compare_in_full(void **state)
{
    (void)state;
    enum { CONTENTS = 24 };
    static unsigned char pages[CONTENTS][PAGE];
    struct uzram *dev = test_device(DISK, NULL, 1);
    dedup_force_collisions(dev->dedup, true);
    for (int c = 0; c < CONTENTS; c++) {
        fill_page(pages[c], 100 + c, c % 2 ? DATAGEN_TEXT : DATAGEN_RANDOM);
        /* pages that differ only in their last byte are the hardest case */
        if (c >= 20) {
            memcpy(pages[c], pages[c - 2], PAGE);
            pages[c][PAGE - 1] ^= (unsigned char)c;
        }
    }
    for (int round = 0; round < 3; round++)
        for (int c = 0; c < CONTENTS; c++)
            write_page(dev, (uint64_t)round * CONTENTS + c, pages[c]);
    for (int round = 0; round < 3; round++)
        for (int c = 0; c < CONTENTS; c++)
            expect_page(dev, (uint64_t)round * CONTENTS + c, pages[c]);
    struct uzram_stats s = test_stats(dev);
    assert_true(s.dedup_hash_collisions > 0);
    assert_int_equal(s.pages_stored, 3 * CONTENTS);
    /* every content is stored once; the other two rounds are duplicates */
    assert_int_equal(s.dup_data_size, 2 * s.compr_data_size);
    assert_int_equal(uzram_discard(dev, 0, DISK), 0);
    s = test_stats(dev);
    assert_int_equal(s.compr_data_size, 0);
    assert_int_equal(s.dup_data_size, 0);
    uzram_destroy(dev);
}

static void test_reset_and_setting(void **state)
{
    (void)state;
    unsigned char page[PAGE];
    fill_page(page, 5, DATAGEN_HALF);
    struct uzram *dev = test_device(DISK, NULL, 0);
    write_page(dev, 0, page);
    write_page(dev, 1, page);
    assert_int_equal(test_stats(dev).dup_data_size, 0);
    assert_int_equal(uzram_set_dedup(dev, true), -EBUSY);
    assert_int_equal(uzram_reset(dev), 0);
    assert_int_equal(uzram_set_dedup(dev, true), 0);
    write_page(dev, 0, page);
    write_page(dev, 1, page);
    struct uzram_stats s = test_stats(dev);
    assert_true(s.dup_data_size > 0);
    assert_true(s.meta_data_size > 0);
    assert_int_equal(uzram_reset(dev), 0);
    s = test_stats(dev);
    assert_int_equal(s.dup_data_size, 0);
    assert_int_equal(s.orig_data_size, 0);
    assert_int_equal(s.mem_used_total, 0);
    char text[64];
    assert_true(uzram_attr_get(dev, "use_dedup", text, sizeof text) > 0);
    assert_string_equal(text, "1\n");
    uzram_destroy(dev);
}

/* Compaction moves shared objects; every page that refers to them still
 * reads its content. */
static void test_compaction_moves_shared_objects(void **state)
{
    (void)state;
    enum { PAGES = 3000, CONTENTS = 300 };
    static unsigned char pages[CONTENTS][PAGE];
    struct uzram *dev = test_device(DISK, NULL, 1);
    for (int c = 0; c < CONTENTS; c++)
        fill_page(pages[c], 1000 + c, c % 3 ? DATAGEN_HALF : DATAGEN_TEXT);
    for (int i = 0; i < PAGES; i++)
        write_page(dev, (uint64_t)i, pages[i % CONTENTS]);
    /* Free every content but a scattered few: sparse pool pages remain. */
    for (int i = 0; i < PAGES; i++)
        if ((i % CONTENTS) % 7 != 0)
            assert_int_equal(uzram_discard(dev, (uint64_t)i * PAGE, PAGE), 0);
    uint64_t used = test_stats(dev).mem_used_total;
    uint64_t freed = 0;
    assert_int_equal(uzram_compact(dev, &freed), 0);
    struct uzram_stats s = test_stats(dev);
    assert_true(freed > 0);
    assert_int_equal(s.pages_compacted, freed);
    assert_int_equal(s.mem_used_total, used - freed * PAGE);
    for (int i = 0; i < PAGES; i++)
        if ((i % CONTENTS) % 7 == 0)
            expect_page(dev, (uint64_t)i, pages[i % CONTENTS]);
    uzram_destroy(dev);
}

/* Writers that store the same new page at the same moment must end up
 * sharing one object: the second to link notices the first and drops its
 * copy. Exactly one copy per content shows as dup = (writers - 1) x compr. */
#define RACE_WRITERS 4
#define RACE_ROUNDS 300

struct race {
    struct uzram *dev;
    pthread_barrier_t start;
    unsigned writer;
};

static void *race_writer(void *arg)
{
    struct race *race = arg;
    unsigned writer = __atomic_fetch_add(&race->writer, 1, __ATOMIC_RELAXED);
    unsigned char page[PAGE];
    for (uint64_t round = 0; round < RACE_ROUNDS; round++) {
        fill_page(page, 1000 + round, DATAGEN_TEXT);
        pthread_barrier_wait(&race->start);
        write_page(race->dev, round * RACE_WRITERS + writer, page);
    }
    return NULL;
}

static void test_concurrent_identical_writers_store_once(void **state)
{
    (void)state;
    struct race race = {.dev = test_device(DISK, NULL, 1)};
    pthread_t threads[RACE_WRITERS];
    pthread_barrier_init(&race.start, NULL, RACE_WRITERS);
    for (unsigned i = 0; i < RACE_WRITERS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, race_writer, &race), 0);
    for (unsigned i = 0; i < RACE_WRITERS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&race.start);

    struct uzram_stats s = test_stats(race.dev);
    assert_int_equal(s.pages_stored, RACE_WRITERS * RACE_ROUNDS);
    assert_true(s.compr_data_size > 0);
    assert_int_equal(s.dup_data_size, (RACE_WRITERS - 1) * s.compr_data_size);
    unsigned char page[PAGE];
    fill_page(page, 1000 + RACE_ROUNDS - 1, DATAGEN_TEXT);
    for (unsigned i = 0; i < RACE_WRITERS; i++)
        expect_page(race.dev, (RACE_ROUNDS - 1) * RACE_WRITERS + i, page);
    uzram_destroy(race.dev);
}

/* The index is sized to what is stored, not to the disk (issue 27): a 4 GiB disk holding 40000
 * unique pages costs at most 24 bytes of index a page (a disk-sized index took 46), and
 * compaction gives the growth back once they are gone. */
#define SPARSE_DISK (4ull << 30)
#define SPARSE_PAGES 40000u

static void test_index_sized_to_data(void **state)
{
    (void)state;
    struct uzram *dev = test_device(SPARSE_DISK, NULL, 1);
    uint64_t empty = test_stats(dev).meta_data_size;
    unsigned char page[PAGE];
    for (uint64_t i = 0; i < SPARSE_PAGES; i++) {
        fill_page(page, 5000 + i, DATAGEN_HALF);
        write_page(dev, i * 7, page); /* spread over the disk */
    }
    struct uzram_stats s = test_stats(dev);
    assert_int_equal(s.pages_stored, SPARSE_PAGES);
    assert_int_equal(s.dup_data_size, 0); /* all unique: one index entry each */
    assert_true(s.meta_data_size <= 24ull * SPARSE_PAGES);
    fill_page(page, 5000 + SPARSE_PAGES - 1, DATAGEN_HALF);
    expect_page(dev, (SPARSE_PAGES - 1) * 7, page);
    assert_int_equal(uzram_discard(dev, 0, SPARSE_DISK), 0);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    assert_int_equal(test_stats(dev).meta_data_size, empty);
    uzram_destroy(dev);
}

/* Compaction moves the index's entries down (issue 27): once most pages are gone, the ones
 * left are one or two a chunk of entries all over the index, and no chunk could go back
 * before. It moves them (a shared one with both its slots, a raw one too) into the lowest
 * chunk and gives the rest back; every page reads back, a new copy of a moved page still
 * finds its entry, and the pool's compaction still moves the objects of moved entries. */
#define SCATTER_DISK (256u << 20)
#define SCATTER_PAGES 24000u
#define SCATTER_STEP 1000u
#define SCATTER_SHARED 30000u /* where the second slot of each shared page is */

static void scatter_page(unsigned char *page, uint64_t i)
{
    fill_page(page, 9000 + i, i % (4 * SCATTER_STEP) == 0 ? DATAGEN_RANDOM : DATAGEN_HALF);
}

static void expect_scattered(struct uzram *dev)
{
    unsigned char page[PAGE];
    for (uint64_t i = 0; i < SCATTER_PAGES; i += SCATTER_STEP / 2) {
        scatter_page(page, i);
        expect_page(dev, i, page);
        if (i % SCATTER_STEP == 0)
            expect_page(dev, SCATTER_SHARED + i / SCATTER_STEP, page);
    }
}

static void test_compaction_moves_scattered_entries(void **state)
{
    (void)state;
    struct uzram *dev = test_device(SCATTER_DISK, NULL, 1);
    uint64_t empty = test_stats(dev).meta_data_size;
    unsigned char page[PAGE];
    for (uint64_t i = 0; i < SCATTER_PAGES; i++) {
        scatter_page(page, i);
        write_page(dev, i, page);
        if (i % SCATTER_STEP == 0) /* shared by a second slot */
            write_page(dev, SCATTER_SHARED + i / SCATTER_STEP, page);
    }
    for (uint64_t i = 0; i < SCATTER_PAGES; i++)
        if (i % (SCATTER_STEP / 2) != 0)
            assert_int_equal(uzram_discard(dev, i * PAGE, PAGE), 0);
    struct uzram_stats before = test_stats(dev);
    assert_int_equal(before.dedup_entries, 2 * SCATTER_PAGES / SCATTER_STEP);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    struct uzram_stats after = test_stats(dev);
    /* 48 entries in one chunk of 1024 (20 KiB), beside the empty index's; 23 chunks before */
    assert_true(after.meta_data_size <= empty + 24 * 1024);
    assert_true(before.meta_data_size >= empty + 20 * 20 * 1024);
    assert_int_equal(after.dedup_entries, before.dedup_entries);
    assert_int_equal(after.dup_data_size, before.dup_data_size);
    assert_int_equal(after.compr_data_size, before.compr_data_size);
    expect_scattered(dev);
    /* a copy of a moved page finds its entry */
    scatter_page(page, 7 * SCATTER_STEP + SCATTER_STEP / 2);
    write_page(dev, SCATTER_SHARED + 100, page);
    struct uzram_stats again = test_stats(dev);
    assert_int_equal(again.dedup_entries, after.dedup_entries);
    assert_true(again.dup_data_size > after.dup_data_size);
    /* the pool moves the objects of moved entries (their owner followed them) */
    for (uint64_t i = 0; i < SCATTER_PAGES; i += SCATTER_STEP)
        assert_int_equal(uzram_discard(dev, (i + SCATTER_STEP / 2) * PAGE, PAGE), 0);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    for (uint64_t i = 0; i < SCATTER_PAGES; i += SCATTER_STEP) {
        scatter_page(page, i);
        expect_page(dev, i, page);
        expect_page(dev, SCATTER_SHARED + i / SCATTER_STEP, page);
    }
    assert_int_equal(uzram_discard(dev, 0, SCATTER_DISK), 0);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    struct uzram_stats gone = test_stats(dev);
    assert_int_equal(gone.dedup_entries, 0);
    assert_int_equal(gone.dup_data_size, 0);
    assert_int_equal(gone.meta_data_size, empty);
    uzram_destroy(dev);
}

/* Compaction moves entries while writers share, unshare and discard them and readers check
 * them (run under TSan by `make tsan`): each worker owns every third page and keeps a model of
 * it; contents come from a small common set too, so that entries are shared across workers
 * and between moved and new slots. Every page reads back as its model says, during and after,
 * and once all is discarded the index holds nothing and takes what an empty one does. */
#define MOVING_WORKERS 3
#define MOVING_PAGES 12288u
#define MOVING_OPS 6000u

struct moving {
    struct uzram *dev;
    atomic_uint next_worker;
    atomic_uint done;
    uint64_t model[2 * MOVING_PAGES]; /* seed + 1 of each page, 0: empty; the second half
                                         is the main thread's */
};

static void *moving_worker(void *arg)
{
    struct moving *m = arg;
    unsigned worker = atomic_fetch_add(&m->next_worker, 1);
    uint64_t rng = 0x9e3779b97f4a7c15ull * (worker + 1);
    unsigned char page[PAGE], back[PAGE];
    for (unsigned op = 0; op < MOVING_OPS; op++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        uint64_t index = (rng >> 8) % (MOVING_PAGES / MOVING_WORKERS) * MOVING_WORKERS + worker;
        switch (rng % 4) {
        case 0: /* a common content: shared with other workers' pages */
        case 1: {
            uint64_t seed = rng % 4 == 0 ? 70000 + (rng >> 40) % 16 : 80000 + op * 8 + worker;
            fill_page(page, seed, DATAGEN_HALF);
            if (uzram_write(m->dev, index * PAGE, page, PAGE) != 0)
                abort();
            m->model[index] = seed + 1;
            break;
        }
        case 2:
            if (uzram_discard(m->dev, index * PAGE, PAGE) != 0)
                abort();
            m->model[index] = 0;
            break;
        default:
            if (uzram_read(m->dev, index * PAGE, back, PAGE) != 0)
                abort();
            if (m->model[index])
                fill_page(page, m->model[index] - 1, DATAGEN_HALF);
            else
                memset(page, 0, PAGE);
            if (memcmp(page, back, PAGE) != 0)
                abort();
        }
    }
    atomic_fetch_add(&m->done, 1);
    return NULL;
}

static void test_concurrent_index_compaction(void **state)
{
    (void)state;
    static struct moving m;
    memset(&m, 0, sizeof m);
    m.dev = test_device(2ull * MOVING_PAGES * PAGE, NULL, 1);
    uint64_t empty = test_stats(m.dev).meta_data_size;
    unsigned char page[PAGE];
    /* scattered survivors over twelve chunks of entries, some of them shared */
    for (uint64_t i = 0; i < MOVING_PAGES; i++) {
        fill_page(page, 60000 + i / 2, DATAGEN_HALF);
        write_page(m.dev, i, page);
        m.model[i] = 60000 + i / 2 + 1;
    }
    for (uint64_t i = 0; i < MOVING_PAGES; i++)
        if (i % 97 > 1) {
            assert_int_equal(uzram_discard(m.dev, i * PAGE, PAGE), 0);
            m.model[i] = 0;
        }
    pthread_t threads[MOVING_WORKERS];
    for (unsigned i = 0; i < MOVING_WORKERS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, moving_worker, &m), 0);
    /* meanwhile: more entries, scattered by discards, for each compaction to move (some of
     * them with a content the workers share) */
    for (uint64_t cycle = 0; atomic_load(&m.done) < MOVING_WORKERS || cycle < 2; cycle++) {
        uint64_t base = MOVING_PAGES + cycle % 8 * 1500;
        for (uint64_t i = base; i < base + 1500; i++) {
            uint64_t seed = i % 50 == 0 ? 70000 + i / 50 % 16 : 90000 + cycle * 1500 + i;
            fill_page(page, seed, DATAGEN_HALF);
            write_page(m.dev, i, page);
            m.model[i] = seed + 1;
        }
        for (uint64_t i = base; i < base + 1500; i++)
            if (i % 97 > 1) {
                assert_int_equal(uzram_discard(m.dev, i * PAGE, PAGE), 0);
                m.model[i] = 0;
            }
        assert_int_equal(uzram_compact(m.dev, NULL), 0);
    }
    for (unsigned i = 0; i < MOVING_WORKERS; i++)
        pthread_join(threads[i], NULL);
    assert_int_equal(uzram_compact(m.dev, NULL), 0);
    for (uint64_t i = 0; i < 2 * MOVING_PAGES; i++) {
        if (m.model[i])
            fill_page(page, m.model[i] - 1, DATAGEN_HALF);
        else
            memset(page, 0, PAGE);
        expect_page(m.dev, i, page);
    }
    assert_int_equal(uzram_discard(m.dev, 0, 2ull * MOVING_PAGES * PAGE), 0);
    assert_int_equal(uzram_compact(m.dev, NULL), 0);
    struct uzram_stats gone = test_stats(m.dev);
    assert_int_equal(gone.dedup_entries, 0);
    assert_int_equal(gone.dup_data_size, 0);
    assert_int_equal(gone.mem_used_total, 0);
    assert_int_equal(gone.meta_data_size, empty);
    uzram_destroy(m.dev);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_pages_share),
        cmocka_unit_test(test_huge_pages_share),
        cmocka_unit_test(test_forced_collisions_compare_in_full),
        cmocka_unit_test(test_reset_and_setting),
        cmocka_unit_test(test_compaction_moves_shared_objects),
        cmocka_unit_test(test_concurrent_identical_writers_store_once),
        cmocka_unit_test(test_index_sized_to_data),
        cmocka_unit_test(test_compaction_moves_scattered_entries),
        cmocka_unit_test(test_concurrent_index_compaction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
