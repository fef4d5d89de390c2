/* test_settings_concurrent.c - settings changed while writers run: stress tests for the
 * races of issue 11 (a torn algorithm/level pair, the dedup index published unordered). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"

#define PAGE UZRAM_PAGE_SIZE
#define WRITERS 2
#define DISK_SIZE ((uint64_t)WRITERS * 64 * PAGE)

/*
 * zram takes comp_algorithm and the dedup switch only while the device is
 * empty, and so does uzram: a device is empty again once every page is
 * discarded. Writers that store a page, read it back and discard it leave
 * the device empty most of the time, so a changer thread gets its settings
 * through while writes are in flight. Each writer keeps to its own pages.
 */
struct race {
    struct uzram *dev;
    _Atomic bool stop;
    _Atomic uint64_t writes;
    _Atomic uint64_t failed_writes; /* a write that returned an error */
    _Atomic uint64_t bad_reads;     /* a page that did not read back as written */
    _Atomic int first_error;
};

struct writer {
    struct race *race;
    unsigned index;
};

static void *writer_main(void *arg)
{
    struct writer *writer = arg;
    struct race *race = writer->race;
    unsigned char page[PAGE], back[PAGE];
    for (uint64_t n = 0; !atomic_load(&race->stop); n++) {
        /* text pages: every algorithm at every level keeps them well under
         * the huge threshold, so a page stored raw means a wrong level */
        uint64_t index = writer->index * 64 + n % 64;
        datagen_page(writer->index + 1, DATAGEN_TEXT, n % 16, page);
        int rc = uzram_write(race->dev, index * PAGE, page, PAGE);
        atomic_fetch_add(&race->writes, 1);
        if (rc != 0) {
            int none = 0;
            atomic_compare_exchange_strong(&race->first_error, &none, rc);
            atomic_fetch_add(&race->failed_writes, 1);
            continue;
        }
        if (uzram_read(race->dev, index * PAGE, back, PAGE) != 0 || memcmp(back, page, PAGE))
            atomic_fetch_add(&race->bad_reads, 1);
        if (uzram_discard(race->dev, index * PAGE, PAGE) != 0)
            atomic_fetch_add(&race->bad_reads, 1);
    }
    return NULL;
}

static void start_writers(struct race *race, pthread_t *threads, struct writer *writers)
{
    for (unsigned i = 0; i < WRITERS; i++) {
        writers[i] = (struct writer){race, i};
        assert_int_equal(pthread_create(&threads[i], NULL, writer_main, &writers[i]), 0);
    }
}

static void stop_writers(struct race *race, pthread_t *threads)
{
    atomic_store(&race->stop, true);
    for (unsigned i = 0; i < WRITERS; i++)
        pthread_join(threads[i], NULL);
}

/* Issue 11, item 6: the algorithm and its level change as one. Flipping
 * between zstd at level 22 and deflate (levels 1..12) and lz4 (no levels):
 * a writer that saw deflate with zstd's level 22 failed with ENOMEM, one that
 * saw deflate with lz4's level 0 stored compressible pages raw (libdeflate's
 * level 0 only stores). */
static void test_concurrent_algorithm_and_level(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int level;
    } settings[] = {{"zstd", 22}, {"deflate", 0}, {"lz4", 0}, {"deflate", 1}};
    enum { WRITES = 10000 };
    struct race race = {.dev = test_device(DISK_SIZE, NULL, 0)};
    pthread_t threads[WRITERS];
    struct writer writers[WRITERS];
    start_writers(&race, threads, writers);
    unsigned changed = 0;
    while (atomic_load(&race.writes) < WRITES) {
        unsigned s = changed % (sizeof settings / sizeof settings[0]);
        int rc = uzram_set_algorithm(race.dev, settings[s].name, settings[s].level);
        if (rc == 0)
            changed++;
        else
            assert_int_equal(rc, -EBUSY);
    }
    stop_writers(&race, threads);

    struct uzram_stats stats = test_stats(race.dev);
    print_message("%u changes during %llu writes; %llu writes failed (first error %d), "
                  "%llu pages stored raw\n",
                  changed, (unsigned long long)atomic_load(&race.writes),
                  (unsigned long long)atomic_load(&race.failed_writes),
                  atomic_load(&race.first_error), (unsigned long long)stats.huge_pages_since);
    /* the race is only tested if the settings did change under the writers */
    assert_true(changed > WRITES / 10);
    assert_int_equal(atomic_load(&race.failed_writes), 0);
    assert_int_equal(stats.failed_writes, 0);
    assert_int_equal(stats.huge_pages_since, 0);
    assert_int_equal(atomic_load(&race.bad_reads), 0);
    uzram_destroy(race.dev);
}

/* Issue 11, item 7: the dedup index, made when dedup is first switched on,
 * is published so that a writer which sees the switch also sees the whole
 * index (ThreadSanitizer reported the unordered publication). A fresh device
 * per round, because the index is only made once per device. */
static void test_concurrent_dedup_switched_on(void **state)
{
    (void)state;
    enum { ROUNDS = 4, WRITES_AFTER = 2000 };
    for (unsigned round = 0; round < ROUNDS; round++) {
        struct race race = {.dev = test_device(DISK_SIZE, NULL, 0)};
        pthread_t threads[WRITERS];
        struct writer writers[WRITERS];
        start_writers(&race, threads, writers);
        int rc;
        while ((rc = uzram_set_dedup(race.dev, true)) == -EBUSY)
            ;
        assert_int_equal(rc, 0);
        uint64_t switched_at = atomic_load(&race.writes);
        while (atomic_load(&race.writes) < switched_at + WRITES_AFTER)
            sched_yield();
        stop_writers(&race, threads);

        assert_int_equal(atomic_load(&race.failed_writes), 0);
        assert_int_equal(atomic_load(&race.bad_reads), 0);
        struct uzram_config config;
        uzram_get_config(race.dev, &config);
        assert_true(config.use_dedup);
        /* the index is in use: its memory shows in meta_data_size */
        assert_true(test_stats(race.dev).meta_data_size > 0);
        uzram_destroy(race.dev);
    }
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_algorithm_and_level),
        cmocka_unit_test(test_concurrent_dedup_switched_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
