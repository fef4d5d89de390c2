/* test_dedup_index.c - unit tests of the dedup index itself (lib/dedup/dedup.c), over a fake store:
 * growth past many steps, lookups and removes while it grows, reference counts, memory per
 * entry, giveback, the reserve's fixed size, concurrency (TSan) and failed allocations. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "dedup/dedup.h"
#include "common/fault.h"
#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define MAX_KEYS 120000u

/* The fake store: the object of key k has handle k, and its page is k in its first 8 bytes,
 * zeros after. It counts the frees of each object, to check the references. */
static _Atomic unsigned freed[MAX_KEYS];
static _Atomic uint64_t frees_total;

static void key_page(uint64_t key, unsigned char *page)
{
    memset(page, 0, PAGE);
    memcpy(page, &key, sizeof key);
}

static int fake_load(void *arg, const struct dedup_object *object, void *page)
{
    (void)arg;
    key_page(object->handle, page);
    return 0;
}

static void fake_free(void *arg, const struct dedup_object *object)
{
    (void)arg;
    atomic_fetch_add(&freed[object->handle], 1);
    atomic_fetch_add(&frees_total, 1);
}

static const struct dedup_object_ops fake_ops = {.load = fake_load, .free = fake_free};

static void reset_fake(void)
{
    for (unsigned i = 0; i < MAX_KEYS; i++)
        atomic_store(&freed[i], 0);
    atomic_store(&frees_total, 0);
}

/* A reference on key's entry: the one stored, or a new one. Sets *made when this call made
 * the object. Returns the entry's id, or UINT32_MAX if no id could be reserved. */
static uint32_t take(struct dedup *dedup, uint64_t key, bool *made)
{
    unsigned char page[PAGE];
    key_page(key, page);
    struct dedup_lookup lookup;
    uint32_t id;
    *made = false;
    if (dedup_find(dedup, page, &lookup, &id))
        return id;
    if (dedup_reserve(dedup, &lookup) < 0)
        return UINT32_MAX;
    const struct dedup_object object = {.handle = key, .size = 100, .codec = 0};
    *made = true;
    return dedup_insert(dedup, page, &lookup, &object);
}

static void expect_key(struct dedup *dedup, uint32_t id, uint64_t key)
{
    unsigned char want[PAGE], got[PAGE];
    key_page(key, want);
    assert_int_equal(dedup_read(dedup, id, got), 0);
    assert_memory_equal(got, want, PAGE);
}

/* Inserts past every growth step (chunks of entries, bucket doublings), with earlier keys
 * looked up between them, extra references taken and dropped, half the keys removed while it
 * grows; then the memory per entry, and everything back at the end. */
static void test_growth(void **unused)
{
    (void)unused;
    reset_fake();
    static uint32_t ids[MAX_KEYS];
    struct dedup *dedup;
    assert_int_equal(dedup_create_in(MAX_KEYS, &fake_ops, NULL, &dedup), 0);
    uint64_t empty = dedup_meta_size(dedup), last = empty;
    unsigned growths = 0;
    for (uint64_t key = 0; key < 100000; key++) {
        bool made;
        ids[key] = take(dedup, key, &made);
        assert_true(made);
        growths += dedup_meta_size(dedup) != last;
        last = dedup_meta_size(dedup);
        /* an earlier key is found, on the same entry, with its page */
        uint64_t earlier = (key * 7919) % (key + 1);
        if (earlier % 3 == 1 && earlier < key)
            earlier--; /* removed below when key passed it */
        uint32_t again = take(dedup, earlier, &made);
        assert_false(made);
        assert_int_equal(again, ids[earlier]);
        expect_key(dedup, again, earlier);
        dedup_put(dedup, again);
        /* every third key removed as the index grows: nothing else goes with it */
        if (key % 3 == 2) {
            dedup_put(dedup, ids[key - 1]);
            assert_int_equal(atomic_load(&freed[key - 1]), 1);
        }
        /* memory per entry, at the scale of a real image and past it */
        uint64_t entries = dedup_entries(dedup);
        if (entries >= 40000 && key % 1000 == 0)
            assert_true(dedup_meta_size(dedup) <= 24 * entries);
    }
    assert_true(growths > 100);
    assert_int_equal(dedup_entries(dedup), 100000 - 100000 / 3);

    /* References: one object, however many share it, freed once by the last. */
    assert_true(dedup_get(dedup, ids[0]) && dedup_get(dedup, ids[0]));
    dedup_put(dedup, ids[0]);
    dedup_put(dedup, ids[0]);
    assert_int_equal(atomic_load(&freed[0]), 0);
    for (uint64_t key = 0; key < 100000; key++) {
        if (key % 3 == 1)
            continue;
        expect_key(dedup, ids[key], key);
        dedup_put(dedup, ids[key]);
    }
    for (uint64_t key = 0; key < 100000; key++)
        assert_int_equal(atomic_load(&freed[key]), 1);
    assert_int_equal(dedup_entries(dedup), 0);
    assert_true(dedup_meta_size(dedup) > empty);
    /* compaction gives back all the growth */
    dedup_trim(dedup);
    assert_int_equal(dedup_meta_size(dedup), empty);
    /* and it grows again */
    bool made;
    uint32_t id = take(dedup, 5, &made);
    assert_true(made);
    expect_key(dedup, id, 5);
    dedup_put(dedup, id);
    dedup_destroy(dedup);
}

/* Bundling takes most entries out of the index, all over it: trim gives back each chunk none of
 * whose ids is in use, not only those past the last one; new entries fill those holes first
 * (ids stay dense), and a reserve made afterwards can still hand out every id. */
#define HOLE_PAGES 20000u
#define CHUNK_ENTRIES 1024u /* the smallest chunk, which a disk of HOLE_PAGES gets */
static void test_trim_holes(void **unused)
{
    (void)unused;
    reset_fake();
    static uint32_t ids[MAX_KEYS];
    const uint64_t kept[] = {0, 1, 10500, HOLE_PAGES - 1}; /* chunks 0, 10 and the last */
    struct dedup *dedup;
    assert_int_equal(dedup_create_in(HOLE_PAGES, &fake_ops, NULL, &dedup), 0);
    uint64_t empty = dedup_meta_size(dedup);
    bool made;
    for (uint64_t key = 0; key < HOLE_PAGES; key++) {
        ids[key] = take(dedup, key, &made);
        assert_true(made);
    }
    for (uint64_t key = 0; key < HOLE_PAGES; key++)
        if (key != kept[0] && key != kept[1] && key != kept[2] && key != kept[3])
            dedup_put(dedup, ids[key]);
    dedup_trim(dedup);
    /* chunk 0 is always there: the two others alone stay */
    assert_int_equal(dedup_meta_size(dedup), empty + 2 * CHUNK_ENTRIES * dedup_entry_size());
    for (unsigned k = 0; k < 4; k++)
        expect_key(dedup, ids[kept[k]], kept[k]);
    /* new keys take the free ids of the chunks still there, then the holes, lowest first */
    uint64_t next = HOLE_PAGES;
    for (; next < 2 * HOLE_PAGES - 4; next++) {
        ids[next] = take(dedup, next, &made);
        assert_true(made);
        assert_true(ids[next] < HOLE_PAGES);
    }
    for (uint64_t key = HOLE_PAGES; key < next; key++)
        expect_key(dedup, ids[key], key);
    for (unsigned k = 0; k < 4; k++)
        expect_key(dedup, ids[kept[k]], kept[k]);
    /* holes again, then a reserve: every id up to the capacity can still be had */
    for (uint64_t key = HOLE_PAGES; key < next; key++)
        if (key % CHUNK_ENTRIES != 7)
            dedup_put(dedup, ids[key]);
    dedup_trim(dedup);
    uint64_t holed = dedup_meta_size(dedup);
    dedup_prefault(dedup);
    assert_true(dedup_meta_size(dedup) > holed);
    uint64_t live = dedup_entries(dedup);
    for (uint64_t key = next; live < HOLE_PAGES + 4096; key++, live++) {
        assert_true(key < MAX_KEYS);
        ids[key] = take(dedup, key, &made);
        assert_int_not_equal(ids[key], UINT32_MAX);
        assert_true(made);
        expect_key(dedup, ids[key], key);
    }
    dedup_destroy(dedup);
}

/* Under a reserve the index is whole from the start: writes change none of its memory, and
 * trim gives none back. */
static void test_reserve_fixed_size(void **unused)
{
    (void)unused;
    reset_fake();
    static uint32_t ids[20000];
    struct dedup *dedup;
    assert_int_equal(dedup_create_in(20000, &fake_ops, NULL, &dedup), 0);
    uint64_t small = dedup_meta_size(dedup);
    dedup_prefault(dedup);
    uint64_t whole = dedup_meta_size(dedup);
    assert_true(whole > small);
    bool made;
    for (uint64_t key = 0; key < 20000; key++) {
        ids[key] = take(dedup, key, &made);
        assert_true(made);
        assert_int_equal(dedup_meta_size(dedup), whole);
    }
    for (uint64_t key = 0; key < 20000; key++)
        dedup_put(dedup, ids[key]);
    dedup_trim(dedup);
    assert_int_equal(dedup_meta_size(dedup), whole);
    dedup_destroy(dedup);
}

/* Writers that share some keys and own others, while the index grows and compaction trims
 * it: each finds the page it asked for; every object made is freed once. */
#define RACE_THREADS 4
#define RACE_OWN 3000u
#define RACE_SHARED 600u
#define RACE_ROUNDS 3

struct race {
    struct dedup *dedup;
    unsigned index;
    _Atomic uint64_t *made;
    _Atomic bool *stop;
};

static void *race_writer(void *arg)
{
    struct race *race = arg;
    static _Thread_local uint32_t ids[RACE_OWN + RACE_SHARED];
    for (unsigned round = 0; round < RACE_ROUNDS; round++) {
        for (unsigned i = 0; i < RACE_OWN + RACE_SHARED; i++) {
            uint64_t key = i < RACE_SHARED ? i : RACE_SHARED + race->index * RACE_OWN + i;
            bool made;
            ids[i] = take(race->dedup, key, &made);
            assert_true(ids[i] != UINT32_MAX);
            if (made)
                atomic_fetch_add(race->made, 1);
            expect_key(race->dedup, ids[i], key);
            /* some dropped at once, so that ids are freed and taken again while it grows */
            if (i % 5 == 0)
                dedup_put(race->dedup, ids[i]);
        }
        for (unsigned i = 0; i < RACE_OWN + RACE_SHARED; i++)
            if (i % 5 != 0)
                dedup_put(race->dedup, ids[i]);
    }
    return NULL;
}

static void *race_trimmer(void *arg)
{
    struct race *race = arg;
    while (!atomic_load(race->stop))
        dedup_trim(race->dedup);
    return NULL;
}

static void test_concurrent_growth(void **unused)
{
    (void)unused;
    reset_fake();
    struct dedup *dedup;
    assert_int_equal(
        dedup_create_in(RACE_THREADS * RACE_OWN + RACE_SHARED + 4096, &fake_ops, NULL, &dedup), 0);
    uint64_t empty = dedup_meta_size(dedup);
    _Atomic uint64_t made = 0;
    _Atomic bool stop = false;
    struct race races[RACE_THREADS + 1];
    pthread_t threads[RACE_THREADS + 1];
    for (unsigned t = 0; t <= RACE_THREADS; t++) {
        races[t] = (struct race){.dedup = dedup, .index = t, .made = &made, .stop = &stop};
        assert_int_equal(pthread_create(&threads[t], NULL,
                                        t < RACE_THREADS ? race_writer : race_trimmer, &races[t]),
                         0);
    }
    for (unsigned t = 0; t < RACE_THREADS; t++)
        pthread_join(threads[t], NULL);
    atomic_store(&stop, true);
    pthread_join(threads[RACE_THREADS], NULL);
    assert_int_equal(dedup_entries(dedup), 0);
    assert_int_equal(atomic_load(&frees_total), atomic_load(&made));
    dedup_trim(dedup);
    assert_int_equal(dedup_meta_size(dedup), empty);
    dedup_destroy(dedup);
}

/* Every allocation of the index fails once in turn (the fault build): creation fails cleanly,
 * a write whose id cannot be had fails, a growth that cannot be had leaves the index as it
 * was (longer chains); every page stored reads back, and every object is freed once. */
#define FAULT_KEYS 1100u /* past the first chunk of 1024 entries, and stripe doublings */

/* The sites that failed while entries were added (not while the index was made). */
static const char *write_sites[8];
static unsigned write_site_count;

static void note_write_site(const char *site)
{
    for (unsigned i = 0; i < write_site_count; i++)
        if (strcmp(write_sites[i], site) == 0)
            return;
    if (write_site_count < 8)
        write_sites[write_site_count++] = site;
}

/* The end of a fault run: at most one entry failed, every entry is gone, each object was freed
 * once. */
static void fault_run_end(struct dedup *dedup, unsigned missing, uint64_t made_count)
{
    assert_true(missing <= 1);
    assert_int_equal(dedup_entries(dedup), 0);
    assert_int_equal(atomic_load(&frees_total), made_count);
    dedup_destroy(dedup);
}

static bool fault_run(uint64_t nth)
{
    static uint32_t ids[FAULT_KEYS];
    reset_fake();
    fault_arm_kinds(nth, FAULT_ALLOC);
    struct dedup *dedup;
    if (dedup_create_in(FAULT_KEYS, &fake_ops, NULL, &dedup) < 0) {
        fault_disarm();
        assert_int_equal(fault_hits(), 1);
        return true;
    }
    uint64_t made_count = 0;
    for (uint64_t key = 0; key < FAULT_KEYS; key++) {
        bool made;
        ids[key] = take(dedup, key, &made);
        made_count += made;
    }
    fault_disarm();
    bool hit = fault_hits() != 0;
    if (hit)
        note_write_site(fault_last_site());
    unsigned missing = 0;
    for (uint64_t key = 0; key < FAULT_KEYS; key++) {
        if (ids[key] == UINT32_MAX) {
            missing++;
            continue;
        }
        expect_key(dedup, ids[key], key);
        bool made;
        uint32_t again = take(dedup, key, &made);
        assert_false(made);
        assert_int_equal(again, ids[key]);
        dedup_put(dedup, again);
        dedup_put(dedup, ids[key]);
    }
    fault_run_end(dedup, missing, made_count);
    return hit;
}

static void test_fault_every_allocation(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    uint64_t nth = 1;
    while (fault_run(nth))
        nth++;
    /* the sweep reached past the last fault point, and the index's sites all failed once */
    assert_true(nth > FAULT_KEYS);
    unsigned sites = 0;
    for (unsigned i = 0; i < fault_site_count(); i++)
        if (strstr(fault_site_name(i), "dedup.c")) {
            printf("  %s\n", fault_site_name(i));
            sites++;
        }
    printf("%llu fault points swept, %u sites of dedup.c\n", (unsigned long long)nth - 1, sites);
    /* create: the index, the chunk directory, the chunk counts, the first chunk, the first
     * buckets; and as entries are added: a new chunk, a doubling, an id */
    assert_true(sites >= 6);
    for (unsigned i = 0; i < write_site_count; i++)
        printf("  failed while adding entries: %s\n", write_sites[i]);
    assert_int_equal(write_site_count, 3);
}

/* The same while a hole is mapped again (test_trim_holes): a failed id leaves the index as it
 * was, and every entry reads back. */
#define HOLE_FAULT_PAGES (3 * CHUNK_ENTRIES)
#define HOLE_FAULT_KEYS 64u /* the first maps the hole again */
static bool hole_fault_run(uint64_t nth)
{
    static uint32_t ids[HOLE_FAULT_PAGES + HOLE_FAULT_KEYS];
    reset_fake();
    struct dedup *dedup;
    assert_int_equal(dedup_create_in(HOLE_FAULT_PAGES, &fake_ops, NULL, &dedup), 0);
    bool made;
    uint64_t made_count = 0;
    for (uint64_t key = 0; key < HOLE_FAULT_PAGES; key++) {
        ids[key] = take(dedup, key, &made);
        made_count += made;
    }
    for (uint64_t key = 0; key < HOLE_FAULT_PAGES; key++)
        if (ids[key] / CHUNK_ENTRIES == 1) { /* chunk 1 empties: a hole */
            dedup_put(dedup, ids[key]);
            ids[key] = UINT32_MAX;
        }
    dedup_trim(dedup);
    fault_arm_kinds(nth, FAULT_ALLOC);
    for (uint64_t key = HOLE_FAULT_PAGES; key < HOLE_FAULT_PAGES + HOLE_FAULT_KEYS; key++) {
        ids[key] = take(dedup, key, &made);
        made_count += made;
    }
    fault_disarm();
    bool hit = fault_hits() != 0;
    unsigned missing = 0;
    for (uint64_t key = 0; key < HOLE_FAULT_PAGES + HOLE_FAULT_KEYS; key++)
        if (ids[key] != UINT32_MAX) {
            expect_key(dedup, ids[key], key);
            dedup_put(dedup, ids[key]);
        } else {
            missing += key >= HOLE_FAULT_PAGES; /* chunk 1's old keys are gone on purpose */
        }
    fault_run_end(dedup, missing, made_count);
    return hit;
}

static void test_fault_hole_fill(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    uint64_t nth = 1;
    while (hole_fault_run(nth))
        nth++;
    printf("%llu fault points swept while a hole was mapped again\n", (unsigned long long)nth - 1);
    assert_true(nth > 2); /* the id, the hole's chunk */
}

/* Moving an entry down (dedup_move, index compaction) while the id it would take is in a hole
 * whose mapping fails: the move fails with -ENOSPC and the entry stays as it was, found by
 * its content and read back; one that succeeds is found at its new id. */
#define MOVE_FAULT_PAGES (3 * CHUNK_ENTRIES)
static bool move_fault_run(uint64_t nth)
{
    static uint32_t ids[MOVE_FAULT_PAGES];
    reset_fake();
    struct dedup *dedup;
    assert_int_equal(dedup_create_in(MOVE_FAULT_PAGES, &fake_ops, NULL, &dedup), 0);
    bool made;
    for (uint64_t key = 0; key < MOVE_FAULT_PAGES; key++) {
        ids[key] = take(dedup, key, &made);
        assert_true(made);
    }
    /* chunk 0 stays full, chunk 1 empties (a hole once trimmed), chunk 2 keeps 2 entries */
    for (uint64_t key = 0; key < MOVE_FAULT_PAGES; key++)
        if (ids[key] >= CHUNK_ENTRIES && (ids[key] < 2 * CHUNK_ENTRIES || ids[key] % 500 != 0)) {
            dedup_put(dedup, ids[key]);
            ids[key] = UINT32_MAX;
        }
    dedup_trim(dedup);
    assert_int_equal(dedup_compact_from(dedup), 2 * CHUNK_ENTRIES);
    fault_arm_kinds(nth, FAULT_ALLOC);
    int failed = 0;
    for (uint64_t key = 0; key < MOVE_FAULT_PAGES; key++) {
        uint32_t to;
        if (ids[key] == UINT32_MAX || ids[key] < 2 * CHUNK_ENTRIES)
            continue;
        int rc = dedup_move(dedup, ids[key], 1, &to);
        if (rc == 0) {
            assert_true(to < ids[key]);
            dedup_move_done(dedup, ids[key]);
            ids[key] = to;
        } else {
            assert_int_equal(rc, -ENOSPC);
            failed++;
        }
    }
    fault_disarm();
    bool hit = fault_hits() != 0;
    assert_true(failed <= (hit ? 1 : 0));
    for (uint64_t key = 0; key < MOVE_FAULT_PAGES; key++)
        if (ids[key] != UINT32_MAX) {
            expect_key(dedup, ids[key], key);
            uint32_t again = take(dedup, key, &made);
            assert_int_equal(again, ids[key]); /* its chain leads to it */
            dedup_put(dedup, again);
            dedup_put(dedup, ids[key]);
        }
    fault_run_end(dedup, 0, MOVE_FAULT_PAGES);
    return hit;
}

static void test_fault_move(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    uint64_t nth = 1;
    while (move_fault_run(nth))
        nth++;
    printf("%llu fault points swept while entries moved down\n", (unsigned long long)nth - 1);
    assert_true(nth > 1); /* the hole's chunk */
}

/* Index compaction of a device (compact_index.c): each allocation it makes fails in turn;
 * whatever moved or not, every page reads back and the index's counts hold. */
#define COMPACT_FAULT_PAGES 2048u
static bool compact_fault_run(uint64_t nth)
{
    struct uzram *dev = test_device((uint64_t)COMPACT_FAULT_PAGES * PAGE, "lz4", 1);
    unsigned char page[PAGE], back[PAGE];
    for (uint64_t i = 0; i < COMPACT_FAULT_PAGES; i++) {
        key_page(i, page);
        assert_int_equal(uzram_write(dev, i * PAGE, page, PAGE), 0);
    }
    for (uint64_t i = 0; i < COMPACT_FAULT_PAGES; i++)
        if (i % 300 != 0)
            assert_int_equal(uzram_discard(dev, i * PAGE, PAGE), 0);
    uint64_t entries = test_stats(dev).dedup_entries;
    fault_arm_kinds(nth, FAULT_ALLOC);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    fault_disarm();
    bool hit = fault_hits() != 0;
    for (uint64_t i = 0; i < COMPACT_FAULT_PAGES; i += 300) {
        key_page(i, page);
        assert_int_equal(uzram_read(dev, i * PAGE, back, PAGE), 0);
        assert_memory_equal(back, page, PAGE);
    }
    assert_int_equal(test_stats(dev).dedup_entries, entries);
    assert_int_equal(uzram_discard(dev, 0, (uint64_t)COMPACT_FAULT_PAGES * PAGE), 0);
    assert_int_equal(test_stats(dev).dedup_entries, 0);
    uzram_destroy(dev);
    return hit;
}

static void test_fault_index_compaction(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    uint64_t nth = 1;
    while (compact_fault_run(nth))
        nth++;
    bool listed = false; /* the list of slots failed once */
    for (unsigned i = 0; i < fault_site_count(); i++)
        listed = listed || strstr(fault_site_name(i), "compact_index.c") != NULL;
    printf("%llu fault points swept in index compaction\n", (unsigned long long)nth - 1);
    assert_true(listed);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_trim_holes),
        cmocka_unit_test(test_reserve_fixed_size),
        cmocka_unit_test(test_concurrent_growth),
        cmocka_unit_test(test_fault_every_allocation),
        cmocka_unit_test(test_fault_hole_fill),
        cmocka_unit_test(test_fault_move),
        cmocka_unit_test(test_fault_index_compaction),
    };
    return cmocka_run_group_tests_name("dedup_index", tests, NULL, NULL);
}
