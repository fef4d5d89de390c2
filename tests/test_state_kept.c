/* test_state_kept.c - what a read needs besides the page table and the pool, kept in a
 * device's state file (issue 29; lib/state/state_dict.c, lib/state/state_backing.c): zstd
 * dictionaries, given and trained, made again at adoption (a trained one kept, a pending one
 * trained later; an entry freed leaves nothing in the file, its id made again with other bytes
 * reads right); a backing store opened again by its path with its checksums, its map made from the
 * table. Children SIGKILLed while they recompress with dictionaries and change them, or
 * write pages back and read them in: after each adoption every page old or new and the
 * counters exact. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fault.h"
#include "state/state.h" /* the layout, to look at the dictionary region */
#include "state_util.h"

#define PAGE STATE_TEST_PAGE

/* Every page not zeros is text (what dictionaries are for). */
enum datagen_kind state_test_kind(uint32_t gen)
{
    (void)gen;
    return DATAGEN_TEXT;
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
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, pages);
    uint32_t *gens = calloc(pages, sizeof *gens);
    for (uint64_t i = 0; i < pages; i++)
        state_test_write(dev, i, gens[i] = i % 9 == 0 ? 0 : 1 + (uint32_t)(i % 3));
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
    state_test_check(dev, gens, pages);
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
        state_test_write(dev, i, gens[i] = 4);
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
    state_test_check(dev, gens, pages);
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
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, pages);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, NULL, 4096), 0);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    char attr[512];
    assert_true(uzram_attr_get(dev, "algorithm_params", attr, sizeof attr) > 0);
    assert_non_null(strstr(attr, "dict=auto (to be trained, up to 4096 bytes)"));
    uint32_t gens[512];
    for (uint64_t i = 0; i < pages; i++)
        state_test_write(dev, i, gens[i] = 5);
    struct uzram_recompress_result result;
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, &result), 0);
    assert_true(result.pages_recompressed > 0);
    struct uzram_stats before = test_stats(dev);
    assert_true(before.dict_mem > 0);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    state_test_check(dev, gens, pages);
    assert_true(uzram_attr_get(dev, "algorithm_params", attr, sizeof attr) > 0);
    assert_non_null(strstr(attr, "dict=auto (trained"));
    assert_int_equal(test_stats(dev).dict_mem, before.dict_mem);
    uzram_destroy(dev);
    close(fd);
}

/* Bytes in the dictionary region of an id whose record says unused: what a process killed
 * after it wrote a dictionary's bytes but before it saved the entry as used leaves (or
 * between a free's record and the region's emptying). Nothing names them: adoption empties
 * the region, else nothing would and they would stay for the file's life. */
static void test_kept_dictionary_orphan_emptied(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, 64);
    state_test_write(dev, 0, 3);
    uzram_destroy(dev);
    struct state_header header;
    assert_int_equal(pread(fd, &header, sizeof header, 0), (ssize_t)sizeof header);
    const unsigned id = CODEC_TABLE_MAX - 1;
    assert_int_equal(header.codecs[id].used, 0);
    static unsigned char dict[PAGE];
    raw_dict(96, dict);
    off_t at = (off_t)(header.dict_offset + (uint64_t)id * STATE_DICT_BYTES);
    assert_int_equal(pwrite(fd, dict, sizeof dict, at), (ssize_t)sizeof dict);
    assert_true(dict_region_has_data(fd));
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    assert_false(dict_region_has_data(fd));
    uint32_t gens[64] = {3};
    state_test_check(dev, gens, 64);
    uzram_destroy(dev);
    close(fd);
}

/* ---- SIGKILL at random moments ------------------------------------------------ */

#define KILL_PAGES 512u
#define KILL_ROUNDS 30u

_Static_assert(KILL_PAGES <= STATE_TEST_LOG_PAGES, "the log follows every page");

/* What the child is doing, in memory shared with the parent. */
struct kill_log {
    struct state_test_log pages;
    _Atomic uint32_t dict_changes;
    _Atomic uint32_t in_special; /* the child is in a recompression or writeback pass */
};

/* What the child does besides writes, discards and compaction: recompress with dictionaries
 * and change them, or write pages back to the backing store and read them in again. */
enum kill_mode { KILL_DICTIONARIES, KILL_WRITEBACK };

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
static void kill_child(int fd, struct kill_log *log, uint64_t seed, enum kill_mode mode)
{
    struct uzram *dev;
    if (uzram_adopt(fd, &dev) != 0)
        _exit(2);
    atomic_store(&log->pages.adopted, 1);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed);
    unsigned char page[PAGE];
    /* Every other child starts with its special operation: a kill comes 1-13 ms after the
     * adoption, and where a recompression pass takes that long (an ASan build, where it may
     * train a dictionary first) a child would otherwise rarely reach a dictionary change. */
    bool special_first = mode == KILL_DICTIONARIES && (seed & 1);
    for (;;) {
        unsigned op = special_first ? 99 : (unsigned)datagen_rng_below(&rng, 100);
        special_first = false;
        uint64_t first = datagen_rng_below(&rng, KILL_PAGES);
        unsigned count = 1 + (unsigned)datagen_rng_below(&rng, 8);
        if (first + count > KILL_PAGES)
            count = (unsigned)(KILL_PAGES - first);
        uint32_t gen = atomic_fetch_add(&log->pages.next_gen, 1);
        int rc = 0;
        if (op < 60) {
            state_test_log_mark(&log->pages, first, 1, gen, false);
            state_test_page(first, gen, page);
            rc = uzram_write(dev, first * PAGE, page, PAGE);
            state_test_log_mark(&log->pages, first, 1, gen, true);
        } else if (op < 70) {
            state_test_log_mark(&log->pages, first, count, 0, false);
            rc = uzram_discard(dev, first * PAGE, count * (uint64_t)PAGE);
            state_test_log_mark(&log->pages, first, count, 0, true);
        } else if (op < 90 && mode == KILL_DICTIONARIES) {
            atomic_store(&log->in_special, 1);
            rc = uzram_recompress(dev, 0, 0, 32, 0, NULL);
            atomic_store(&log->in_special, 0);
        } else if (op < 90) {
            atomic_store(&log->in_special, 1);
            rc = uzram_writeback(dev, 0, first,
                                 first + 63 < KILL_PAGES ? first + 63 : KILL_PAGES - 1, NULL);
            atomic_store(&log->in_special, 0);
            rc = rc == -ENOSPC ? 0 : rc;
        } else if (op < 94) {
            rc = uzram_compact(dev, NULL);
        } else if (mode == KILL_DICTIONARIES) {
            rc = change_dictionary(dev, (unsigned)datagen_rng_below(&rng, 3));
            atomic_fetch_add(&log->dict_changes, 1);
        } else {
            rc = uzram_read(dev, first * PAGE, page, PAGE); /* brought back into memory */
            atomic_fetch_add(&log->dict_changes, 1);
        }
        if (rc != 0)
            _exit(2);
    }
}

/* The parent after a kill: every page old or new, pages_stored exactly the pages stored. */
static void kill_check(struct uzram *dev, struct kill_log *log)
{
    uint64_t stored = 0;
    for (uint64_t i = 0; i < KILL_PAGES; i++) {
        state_test_settle(dev, &log->pages, i);
        uint64_t run;
        unsigned flags;
        assert_int_equal(uzram_extent(dev, i * PAGE, PAGE, &run, &flags), 0);
        stored += !(flags & UZRAM_EXTENT_HOLE);
    }
    assert_int_equal(test_stats(dev).pages_stored, stored);
}

/* The file as the killed child left it: each setting names a record that says used (else
 * adoption refuses the state with -EINVAL). */
static void kill_settings_check(int fd)
{
    struct state_header header;
    assert_int_equal(pread(fd, &header, sizeof header, 0), (ssize_t)sizeof header);
    for (unsigned p = 0; p <= CODEC_TABLE_PRIORITY_MAX; p++) {
        int id = header.setting[p];
        if (id >= 0) {
            assert_in_range(id, 0, CODEC_TABLE_MAX - 1);
            assert_int_equal(header.codecs[id].used, 1);
        }
    }
}

/* Everything discarded and the dictionaries' setting dropped: no byte left, in memory, in
 * the file's dictionary region or on the backing store; then the setting back. */
static void kill_drain(struct uzram *dev, int fd, struct kill_log *log)
{
    assert_int_equal(uzram_discard(dev, 0, KILL_PAGES * (uint64_t)PAGE), 0);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, NULL, 0), 0);
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.pages_stored, 0);
    assert_int_equal(stats.dict_mem, 0);
    assert_int_equal(stats.mem_used_total, 0);
    assert_int_equal(stats.bd_objects, 0);
    assert_int_equal(stats.bd_data_size, 0);
    assert_int_equal(stats.bd_count, 0);
    assert_false(dict_region_has_data(fd));
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, NULL, 4096), 0);
    state_test_log_zeros(&log->pages);
}

/* KILL_ROUNDS SIGKILLs of a child adopting the state in `fd` and working in `mode`, and up to
 * twice as many more until one lands in the middle of a recompression or writeback pass (a
 * kill's moment is random: on a loaded machine 30 once found none); the parent adopts after
 * each and checks. Returns the child's special operations, and in `*during` those kills. */
static unsigned kill_rounds(int fd, enum kill_mode mode, unsigned *during)
{
    *during = 0;
    struct kill_log *log = state_test_log_new(sizeof *log);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, test_random_seed(mode == KILL_DICTIONARIES ? "dictionaries_survive"
                                                                      : "backing_survives"));
    for (unsigned round = 0; round < KILL_ROUNDS || (*during == 0 && round < 3 * KILL_ROUNDS);
         round++) {
        pid_t child = state_test_fork(&log->pages);
        if (child == 0)
            kill_child(fd, log, datagen_rng_next(&rng), mode);
        state_test_kill(child, &log->pages, (long)(1000 + datagen_rng_below(&rng, 12000)));
        *during += atomic_exchange(&log->in_special, 0);
        kill_settings_check(fd);
        struct uzram *dev;
        assert_int_equal(uzram_adopt(fd, &dev), 0);
        kill_check(dev, log);
        if (round % 10 == 9)
            kill_drain(dev, fd, log);
        uzram_destroy(dev);
    }
    unsigned special = atomic_load(&log->dict_changes);
    munmap(log, sizeof *log);
    return special;
}

static void test_kept_dictionaries_survive_kills(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, KILL_PAGES);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, NULL, 4096), 0);
    uzram_destroy(dev);
    unsigned during, changes = kill_rounds(fd, KILL_DICTIONARIES, &during);
    printf("%u kills or more (%u in recompression), %u dictionary changes\n", KILL_ROUNDS, during,
           changes);
    assert_true(changes > 0 && during > 0);
    close(fd);
}

/* ---- the backing store ------------------------------------------------------- */

/* A backing file of the test's own, not unlinked: adoption opens it again by its name. */
static void backing_path_make(char *folder, size_t size, char *path, size_t path_size)
{
    assert_int_equal(test_make_folder(folder, size, "state-kept"), 0);
    snprintf(path, path_size, "%s/store", folder);
}

static void backing_path_remove(const char *folder, const char *path)
{
    unlink(path);
    rmdir(folder);
}

static void test_kept_backing_round_trip(void **unused)
{
    (void)unused;
    const uint64_t pages = 1024;
    char folder[512], path[600], got[700];
    backing_path_make(folder, sizeof folder, path, sizeof path);
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, pages);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
    uint32_t *gens = calloc(pages, sizeof *gens);
    for (uint64_t i = 0; i < pages; i++)
        state_test_write(dev, i, gens[i] = i % 7 == 0 ? 0 : 1 + (uint32_t)(i % 4));
    uint64_t written;
    assert_int_equal(uzram_writeback(dev, 0, 0, UINT64_MAX, &written), 0);
    assert_true(written > pages / 2);
    for (uint64_t i = 0; i < pages; i += 10) /* some back in memory, some new */
        state_test_write(dev, i, gens[i] = 9);
    struct uzram_stats before = test_stats(dev);
    assert_true(before.bd_objects > 0 && before.bd_count > 0);
    uzram_destroy(dev);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_blocks > 0); /* the destroyed device left its pages on the store */
    /* A block no slot names but with bytes in it, as a writeback cut short by a kill leaves
     * one: adoption frees it and punches its hole, so the disk space comes back. */
    int store = open(path, O_RDWR);
    assert_true(store >= 0);
    off_t hole = lseek(store, 0, SEEK_HOLE);
    printf("store: %lld bytes, first hole at %lld\n", (long long)st.st_size, (long long)hole);
    assert_true(hole >= 0 && hole % PAGE == 0 && hole + PAGE <= st.st_size);
    unsigned char junk[PAGE];
    memset(junk, 0xa5, sizeof junk);
    assert_int_equal(pwrite(store, junk, PAGE, hole), PAGE);
    assert_int_equal(lseek(store, hole, SEEK_DATA), hole);

    assert_int_equal(uzram_adopt(fd, &dev), 0);
    off_t data = lseek(store, hole, SEEK_DATA);
    assert_true(data < 0 || data >= hole + PAGE); /* punched again */
    close(store);
    state_test_check(dev, gens, pages);
    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.pages_stored, before.pages_stored);
    assert_int_equal(after.compr_data_size, before.compr_data_size);
    assert_int_equal(after.huge_pages, before.huge_pages);
    assert_int_equal(after.bd_objects, before.bd_objects);
    assert_int_equal(after.bd_data_size, before.bd_data_size);
    assert_int_equal(after.bd_count, before.bd_count);
    assert_int_equal(after.bd_checksum_errors, 0);
    assert_true(uzram_get_backing_dev(dev, got, sizeof got) > 0);
    char *absolute = realpath(path, NULL);
    assert_string_equal(got, absolute);
    free(absolute);
    /* Writes, writeback and discards go on; all discarded, the store holds nothing. */
    for (uint64_t i = 1; i < pages; i += 10)
        state_test_write(dev, i, gens[i] = 11);
    assert_int_equal(uzram_writeback(dev, 0, 0, UINT64_MAX, NULL), 0);
    state_test_check(dev, gens, pages);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    state_test_check(dev, gens, pages);
    assert_int_equal(uzram_discard(dev, 0, pages * PAGE), 0);
    struct uzram_stats empty = test_stats(dev);
    assert_int_equal(empty.bd_objects, 0);
    assert_int_equal(empty.bd_count, 0);
    uzram_destroy(dev);

    /* A store that is not the one recorded: refused, the state kept for the right one. */
    assert_int_equal(truncate(path, 8 * PAGE), 0);
    assert_int_equal(uzram_adopt(fd, &dev), -ESTALE);
    backing_path_remove(folder, path);
    assert_int_equal(uzram_adopt(fd, &dev), -ENOENT);
    assert_int_equal(stat(path, &st), -1); /* not made again */
    free(gens);
    close(fd);
}

static void test_kept_backing_survives_kills(void **unused)
{
    (void)unused;
    char folder[512], path[600];
    backing_path_make(folder, sizeof folder, path, sizeof path);
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, KILL_PAGES);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    uzram_destroy(dev);
    unsigned during, reads = kill_rounds(fd, KILL_WRITEBACK, &during);
    printf("%u kills or more (%u in writeback), %u reads of pages\n", KILL_ROUNDS, during, reads);
    assert_true(reads > 0 && during > 0);
    backing_path_remove(folder, path);
    close(fd);
}

/* ---- in parallel ---------------------------------------------------------------- */

#define PARALLEL_PAGES 256u

struct parallel {
    struct uzram *dev;
    unsigned id; /* 0, 1: writers of their own half; 2: recompression and dictionaries; 3:
                    writeback and reads */
    uint32_t gens[PARALLEL_PAGES];
};

static void *parallel_worker(void *arg)
{
    struct parallel *w = arg;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, w->id + 7);
    unsigned char page[PAGE];
    for (unsigned n = 0; n < 400; n++) {
        uint64_t index = datagen_rng_below(&rng, PARALLEL_PAGES / 2) * 2 + (w->id & 1);
        int rc = 0;
        if (w->id < 2) {
            uint32_t gen = 1 + (uint32_t)datagen_rng_below(&rng, 300);
            state_test_page(index, gen, page);
            rc = uzram_write(w->dev, index * PAGE, page, PAGE);
            w->gens[index] = gen;
        } else if (w->id == 2) {
            rc = n % 50 == 0 ? change_dictionary(w->dev, n / 50 % 3)
                             : uzram_recompress(w->dev, 0, 0, 16, 0, NULL);
        } else {
            rc = n % 2 ? uzram_writeback(w->dev, 0, index, index + 31, NULL)
                       : uzram_read(w->dev, index * PAGE, page, PAGE);
            rc = rc == -ENOSPC ? 0 : rc;
        }
        if (rc != 0)
            return "failed";
    }
    return NULL;
}

/* Writers, recompression switching dictionaries and writeback with reads at once on a state
 * device with a backing store (TSan runs it); quiesced and adopted, every page back. */
static void test_kept_concurrent(void **unused)
{
    (void)unused;
    char folder[512], path[600];
    backing_path_make(folder, sizeof folder, path, sizeof path);
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, PARALLEL_PAGES);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    static struct parallel workers[4];
    pthread_t threads[4];
    for (unsigned t = 0; t < 4; t++) {
        workers[t] = (struct parallel){.dev = dev, .id = t};
        assert_int_equal(pthread_create(&threads[t], NULL, parallel_worker, &workers[t]), 0);
    }
    for (unsigned t = 0; t < 4; t++) {
        void *failed;
        assert_int_equal(pthread_join(threads[t], &failed), 0);
        assert_null(failed);
    }
    uint32_t gens[PARALLEL_PAGES];
    for (unsigned i = 0; i < PARALLEL_PAGES; i++)
        gens[i] = workers[i & 1].gens[i];
    struct uzram_stats before = test_stats(dev);
    assert_int_equal(uzram_state_quiesce(dev), 0);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    state_test_check(dev, gens, PARALLEL_PAGES);
    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.pages_stored, before.pages_stored);
    assert_int_equal(after.bd_objects, before.bd_objects);
    assert_int_equal(after.dict_mem, before.dict_mem);
    uzram_destroy(dev);
    backing_path_remove(folder, path);
    close(fd);
}

/* ---- allocation failures ------------------------------------------------------------ */

/* After a call made with a fault point armed, whose result is `rc`: its hits (disarmed),
 * and the call failed with -ENOMEM if there were any, else worked. */
static uint64_t armed_hits(int rc)
{
    uint64_t hits = fault_hits();
    fault_disarm();
    if (hits)
        assert_int_equal(rc, -ENOMEM);
    else
        assert_int_equal(rc, 0);
    return hits;
}

/* Each allocation of setting a dictionary, attaching a backing store and adopting a state
 * that has both fails once: the call fails, nothing stored is lost, and the next call works.
 * Fault build only. */
static void test_kept_fault_sweep(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    static unsigned char dict[PAGE];
    raw_dict(95, dict);
    char folder[512], path[600];
    backing_path_make(folder, sizeof folder, path, sizeof path);
    uint32_t gens[64];
    for (unsigned i = 0; i < 64; i++)
        gens[i] = i % 4 ? 2 : 0;
    uint64_t swept = 0;
    for (uint64_t nth = 1;; nth++) {
        unlink(path);
        int fd = state_test_memfd();
        struct uzram *dev = state_test_device(fd, 64);
        fault_arm(nth);
        uint64_t hits = armed_hits(uzram_set_backing_dev(dev, path, 0));
        if (hits)
            assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
        for (unsigned i = 0; i < 64; i++)
            state_test_write(dev, i, gens[i]);
        assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
        fault_arm(nth);
        uint64_t set_hits = armed_hits(uzram_set_algorithm_params(dev, 1, 0, dict, sizeof dict));
        if (set_hits)
            assert_int_equal(uzram_set_algorithm_params(dev, 1, 0, dict, sizeof dict), 0);
        assert_int_equal(uzram_recompress(dev, 0, 0, 0, 1, NULL), 0);
        assert_int_equal(uzram_writeback(dev, 0, 0, 31, NULL), 0);
        uzram_destroy(dev);
        fault_arm(nth);
        uint64_t adopt_hits = armed_hits(uzram_adopt(fd, &dev));
        if (adopt_hits)
            assert_int_equal(uzram_adopt(fd, &dev), 0);
        state_test_check(dev, gens, 64);
        uzram_destroy(dev);
        close(fd);
        if (!hits && !set_hits && !adopt_hits)
            break;
        swept++;
    }
    backing_path_remove(folder, path);
    printf("dictionary, backing store and adopt: %llu fault points swept\n",
           (unsigned long long)swept);
    assert_true(swept > 0);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_dictionaries_round_trip),
        cmocka_unit_test(test_kept_dictionary_pending),
        cmocka_unit_test(test_kept_dictionary_orphan_emptied),
        cmocka_unit_test(test_kept_dictionaries_survive_kills),
        cmocka_unit_test(test_kept_backing_round_trip),
        cmocka_unit_test(test_kept_backing_survives_kills),
        cmocka_unit_test(test_kept_concurrent),
        cmocka_unit_test(test_kept_fault_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
