/* test_state_kept.c - what a read needs besides the page table and the pool, kept in a
 * device's state file (issue 29; lib/state_dict.c): zstd dictionaries, given and trained,
 * made again at adoption; a trained one kept, a pending one trained later; an entry freed
 * leaves nothing in the file and its id made again with other bytes reads right. A child
 * SIGKILLed while it writes, recompresses with dictionaries and changes them: after each
 * adoption every page old or new and the counters exact. */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fault.h"
#include "state.h" /* the layout, to look at the dictionary region */
#include "test_util.h"

#define PAGE 4096u
#define NONE UINT32_MAX

static int state_memfd(void)
{
    int fd = memfd_create("uzram-test-kept", MFD_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

static struct uzram *make_in(int fd, uint64_t pages)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = pages * PAGE;
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    return dev;
}

/* Page `index` at generation `gen`: 0 zeros, else text (what dictionaries are for). */
static void page_of(uint64_t index, uint32_t gen, unsigned char *page)
{
    if (gen == 0)
        memset(page, 0, PAGE);
    else
        datagen_page(gen, DATAGEN_TEXT, index, page);
}

static void write_gen(struct uzram *dev, uint64_t index, uint32_t gen)
{
    unsigned char page[PAGE];
    page_of(index, gen, page);
    assert_int_equal(uzram_write(dev, index * PAGE, page, PAGE), 0);
}

static void check_pages(struct uzram *dev, const uint32_t *gens, uint64_t pages)
{
    unsigned char want[PAGE], got[PAGE];
    for (uint64_t i = 0; i < pages; i++) {
        page_of(i, gens[i], want);
        assert_int_equal(uzram_read(dev, i * PAGE, got, PAGE), 0);
        assert_memory_equal(got, want, PAGE);
    }
}

/* Whether the state's dictionary region holds any data. */
static bool dict_region_has_data(int fd)
{
    struct state_header header;
    assert_int_equal(pread(fd, &header, sizeof header, 0), (ssize_t)sizeof header);
    off_t data = lseek(fd, (off_t)header.dict_offset, SEEK_DATA);
    return data >= 0 && (uint64_t)data < header.dict_offset + header.dict_bytes;
}

/* Raw content for a dictionary: a text page of its own generation. */
static void raw_dict(uint32_t gen, unsigned char *dict)
{
    datagen_page(gen, DATAGEN_TEXT, 7, dict);
}

static void test_kept_dictionaries_round_trip(void **unused)
{
    (void)unused;
    const uint64_t pages = 1024;
    int fd = state_memfd();
    struct uzram *dev = make_in(fd, pages);
    uint32_t *gens = calloc(pages, sizeof *gens);
    for (uint64_t i = 0; i < pages; i++)
        write_gen(dev, i, gens[i] = i % 9 == 0 ? 0 : 1 + (uint32_t)(i % 3));
    /* priority 1: trained from the pages now; priority 2: given */
    static unsigned char dict[PAGE];
    raw_dict(99, dict);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, NULL, 4096), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 2, "zstd", 0), 0);
    assert_int_equal(uzram_set_algorithm_params(dev, 2, 0, dict, sizeof dict), 0);
    struct uzram_recompress_result result;
    assert_int_equal(uzram_recompress(dev, 0, 0, pages / 2, 1, &result), 0);
    assert_true(result.pages_recompressed > 0);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 2, &result), 0);
    assert_true(result.pages_recompressed > 0);
    char before_attr[512], after_attr[512];
    assert_true(uzram_attr_get(dev, "algorithm_params", before_attr, sizeof before_attr) > 0);
    assert_non_null(strstr(before_attr, "dict=auto (trained"));
    struct uzram_stats before = test_stats(dev);
    assert_true(before.dict_mem > 2 * PAGE);
    uzram_destroy(dev);

    assert_int_equal(uzram_adopt(fd, &dev), 0);
    check_pages(dev, gens, pages);
    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.pages_stored, before.pages_stored);
    assert_int_equal(after.compr_data_size, before.compr_data_size);
    assert_int_equal(after.dict_mem, before.dict_mem);
    assert_int_equal(after.mem_used_total, before.mem_used_total);
    assert_true(uzram_attr_get(dev, "algorithm_params", after_attr, sizeof after_attr) > 0);
    assert_string_equal(after_attr, before_attr);

    /* New settings; every page rewritten: the old entries go, and nothing of them stays. */
    raw_dict(98, dict);
    assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, dict, sizeof dict), 0);
    for (uint64_t i = 0; i < pages; i++)
        write_gen(dev, i, gens[i] = 4);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, NULL, 0), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 2, NULL, 0), 0);
    assert_int_equal(test_stats(dev).dict_mem, 0);
    assert_false(dict_region_has_data(fd));
    /* An id made again, with other bytes: its pages read back after another adoption. */
    raw_dict(97, dict);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, dict, sizeof dict), 0);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 1, &result), 0);
    assert_true(result.pages_recompressed > 0);
    assert_true(dict_region_has_data(fd));
    before = test_stats(dev);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    check_pages(dev, gens, pages);
    assert_int_equal(test_stats(dev).dict_mem, before.dict_mem);
    uzram_destroy(dev);
    free(gens);
    close(fd);
}

/* dict=auto set before enough pages are stored: adopted still waiting, trained by the first
 * recompression after, and that dictionary kept by the next adoption (not trained again). */
static void test_kept_dictionary_pending(void **unused)
{
    (void)unused;
    const uint64_t pages = 512;
    int fd = state_memfd();
    struct uzram *dev = make_in(fd, pages);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, NULL, 4096), 0);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    char attr[512];
    assert_true(uzram_attr_get(dev, "algorithm_params", attr, sizeof attr) > 0);
    assert_non_null(strstr(attr, "dict=auto (to be trained, up to 4096 bytes)"));
    uint32_t gens[512];
    for (uint64_t i = 0; i < pages; i++)
        write_gen(dev, i, gens[i] = 5);
    struct uzram_recompress_result result;
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, &result), 0);
    assert_true(result.pages_recompressed > 0);
    struct uzram_stats before = test_stats(dev);
    assert_true(before.dict_mem > 0);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    check_pages(dev, gens, pages);
    assert_true(uzram_attr_get(dev, "algorithm_params", attr, sizeof attr) > 0);
    assert_non_null(strstr(attr, "dict=auto (trained"));
    assert_int_equal(test_stats(dev).dict_mem, before.dict_mem);
    uzram_destroy(dev);
    close(fd);
}

/* ---- SIGKILL at random moments ------------------------------------------------ */

#define KILL_PAGES 512u
#define KILL_ROUNDS 40u

/* What the child is doing, in memory shared with the parent: per page the generation of its
 * last finished change and the one under way (NONE). */
struct kill_log {
    _Atomic uint32_t done[KILL_PAGES];
    _Atomic uint32_t pending[KILL_PAGES];
    _Atomic uint32_t next_gen;
    _Atomic uint32_t adopted;
    _Atomic uint32_t dict_changes;
};

static void log_mark(struct kill_log *log, uint64_t first, unsigned count, uint32_t gen, bool end)
{
    for (unsigned i = 0; i < count; i++) {
        if (end)
            atomic_store(&log->done[first + i], gen);
        atomic_store(&log->pending[first + i], end ? NONE : gen);
    }
}

/* One of three dictionaries for priority 1: two given, one trained. */
static int change_dictionary(struct uzram *dev, unsigned which)
{
    static unsigned char dict[PAGE];
    raw_dict(90 + which, dict);
    int rc = which == 2 ? uzram_set_algorithm_params(dev, 1, 0, NULL, 4096)
                        : uzram_set_algorithm_params(dev, 1, 0, dict, sizeof dict);
    return rc == -ENOSPC ? 0 : rc; /* every id in use by stored pages: a later change */
}

/* The child: adopt, then change pages until killed. Exits 2 on a failure. */
static void kill_child(int fd, struct kill_log *log, uint64_t seed)
{
    struct uzram *dev;
    if (uzram_adopt(fd, &dev) != 0)
        _exit(2);
    atomic_store(&log->adopted, 1);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed);
    unsigned char page[PAGE];
    for (;;) {
        unsigned op = (unsigned)datagen_rng_below(&rng, 100);
        uint64_t first = datagen_rng_below(&rng, KILL_PAGES);
        unsigned count = 1 + (unsigned)datagen_rng_below(&rng, 8);
        if (first + count > KILL_PAGES)
            count = (unsigned)(KILL_PAGES - first);
        uint32_t gen = atomic_fetch_add(&log->next_gen, 1);
        int rc = 0;
        if (op < 60) {
            log_mark(log, first, 1, gen, false);
            page_of(first, gen, page);
            rc = uzram_write(dev, first * PAGE, page, PAGE);
            log_mark(log, first, 1, gen, true);
        } else if (op < 70) {
            log_mark(log, first, count, 0, false);
            rc = uzram_discard(dev, first * PAGE, count * (uint64_t)PAGE);
            log_mark(log, first, count, 0, true);
        } else if (op < 90) {
            rc = uzram_recompress(dev, 0, 0, 32, 0, NULL);
        } else if (op < 94) {
            rc = uzram_compact(dev, NULL);
        } else {
            rc = change_dictionary(dev, (unsigned)datagen_rng_below(&rng, 3));
            atomic_fetch_add(&log->dict_changes, 1);
        }
        if (rc != 0)
            _exit(2);
    }
}

/* The parent after a kill: every page old or new, pages_stored exactly the pages stored. */
static void kill_check(struct uzram *dev, struct kill_log *log)
{
    unsigned char got[PAGE], want[PAGE];
    uint64_t stored = 0;
    for (uint64_t i = 0; i < KILL_PAGES; i++) {
        assert_int_equal(uzram_read(dev, i * PAGE, got, PAGE), 0);
        uint32_t gen = atomic_load(&log->done[i]), pending = atomic_load(&log->pending[i]);
        page_of(i, gen, want);
        if (memcmp(got, want, PAGE) != 0) {
            assert_true(pending != NONE);
            page_of(i, pending, want);
            assert_memory_equal(got, want, PAGE);
            gen = pending;
        }
        atomic_store(&log->done[i], gen);
        atomic_store(&log->pending[i], NONE);
        uint64_t run;
        unsigned flags;
        assert_int_equal(uzram_extent(dev, i * PAGE, PAGE, &run, &flags), 0);
        stored += !(flags & UZRAM_EXTENT_HOLE);
    }
    assert_int_equal(test_stats(dev).pages_stored, stored);
}

/* Everything discarded and the dictionaries' setting dropped: no byte left, in memory or in
 * the file's dictionary region; then the setting back for the next child. */
static void kill_drain(struct uzram *dev, int fd, struct kill_log *log)
{
    assert_int_equal(uzram_discard(dev, 0, KILL_PAGES * (uint64_t)PAGE), 0);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, NULL, 0), 0);
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.pages_stored, 0);
    assert_int_equal(stats.dict_mem, 0);
    assert_int_equal(stats.mem_used_total, 0);
    assert_false(dict_region_has_data(fd));
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, NULL, 4096), 0);
    for (unsigned i = 0; i < KILL_PAGES; i++)
        atomic_store(&log->done[i], 0);
}

static void test_kept_dictionaries_survive_kills(void **unused)
{
    (void)unused;
    int fd = state_memfd();
    struct uzram *dev = make_in(fd, KILL_PAGES);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, NULL, 4096), 0);
    uzram_destroy(dev);
    struct kill_log *log =
        mmap(NULL, sizeof *log, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(log != MAP_FAILED);
    for (unsigned i = 0; i < KILL_PAGES; i++)
        atomic_init(&log->pending[i], NONE);
    atomic_init(&log->next_gen, 1);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, (uint64_t)time(NULL));
    for (unsigned round = 0; round < KILL_ROUNDS; round++) {
        atomic_store(&log->adopted, 0);
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0)
            kill_child(fd, log, datagen_rng_next(&rng));
        while (!atomic_load(&log->adopted) && waitpid(child, NULL, WNOHANG) == 0)
            sched_yield();
        struct timespec pause = {0, (long)(2000 + datagen_rng_below(&rng, 20000)) * 1000};
        nanosleep(&pause, NULL);
        kill(child, SIGKILL);
        int status;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        assert_int_equal(uzram_adopt(fd, &dev), 0);
        kill_check(dev, log);
        if (round % 10 == 9)
            kill_drain(dev, fd, log);
        uzram_destroy(dev);
    }
    printf("%u kills, %u dictionary changes\n", KILL_ROUNDS, atomic_load(&log->dict_changes));
    assert_true(atomic_load(&log->dict_changes) > 0);
    munmap(log, sizeof *log);
    close(fd);
}

/* ---- allocation failures ------------------------------------------------------------ */

/* Each allocation of setting a dictionary and of adopting a state that has one fails once:
 * the call fails, nothing stored is lost, and the next call works. Fault build only. */
static void test_kept_fault_sweep(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    static unsigned char dict[PAGE];
    raw_dict(95, dict);
    uint32_t gens[64];
    for (unsigned i = 0; i < 64; i++)
        gens[i] = i % 4 ? 2 : 0;
    uint64_t swept = 0;
    for (uint64_t nth = 1;; nth++) {
        int fd = state_memfd();
        struct uzram *dev = make_in(fd, 64);
        for (unsigned i = 0; i < 64; i++)
            write_gen(dev, i, gens[i]);
        assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
        fault_arm(nth);
        int rc = uzram_set_algorithm_params(dev, 1, 0, dict, sizeof dict);
        uint64_t set_hits = fault_hits();
        fault_disarm();
        if (set_hits) {
            assert_int_equal(rc, -ENOMEM);
            assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, dict, sizeof dict), 0);
        } else
            assert_int_equal(rc, 0);
        assert_int_equal(uzram_recompress(dev, 0, 0, 0, 1, NULL), 0);
        uzram_destroy(dev);
        fault_arm(nth);
        rc = uzram_adopt(fd, &dev);
        uint64_t adopt_hits = fault_hits();
        fault_disarm();
        if (adopt_hits) {
            assert_int_equal(rc, -ENOMEM);
            assert_int_equal(uzram_adopt(fd, &dev), 0);
        } else
            assert_int_equal(rc, 0);
        check_pages(dev, gens, 64);
        uzram_destroy(dev);
        close(fd);
        if (!set_hits && !adopt_hits)
            break;
        swept++;
    }
    printf("dictionary set and adopt: %llu fault points swept\n", (unsigned long long)swept);
    assert_true(swept > 0);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_dictionaries_round_trip),
        cmocka_unit_test(test_kept_dictionary_pending),
        cmocka_unit_test(test_kept_dictionaries_survive_kills),
        cmocka_unit_test(test_kept_fault_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
