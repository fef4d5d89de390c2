/* test_state_dedup.c - a device with dedup in a state file (lib/dedup/dedup_adopt.c, the file half
 * of dedup_ids.c, state_adopt.c): made, left and adopted with every page read back and the
 * index's counters (entries, dup_data_size, meta_data_size) what they were; dedup switched on
 * after the device was made; a process killed in the middle of an index move, with the move's
 * page slots split between the entry's old id and its new one; and a process SIGKILLed many
 * times while it writes shared pages, discards, recompresses and compacts the pool and the
 * index, whose successor finds every page old or new, the entries and dup_data_size exact, and
 * nothing leaked. */
#include <errno.h>
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fault.h"
#include "state/state.h" /* the table's place, to damage a slot */
#include "state_util.h"
#include "store/compact_index.h" /* the kill in the middle of an index move */

#define PAGE STATE_TEST_PAGE

/* Generations cycle through the kinds of page (a same-filled word, text, half-compressible,
 * random: stored huge). */
enum datagen_kind state_test_kind(uint32_t gen)
{
    static const enum datagen_kind kinds[] = {DATAGEN_SAME, DATAGEN_TEXT, DATAGEN_HALF,
                                              DATAGEN_RANDOM, DATAGEN_TEXT};
    return kinds[gen % 5];
}

/* An even generation is the same page wherever it is written: dedup shares it. */
static uint64_t shared_index(uint64_t index, uint32_t gen)
{
    return gen % 2 ? index : 0;
}

static struct uzram_config dedup_config(uint64_t pages)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = pages * PAGE;
    config.use_dedup = true;
    return config;
}

static struct uzram *dedup_device(int fd, uint64_t pages)
{
    struct uzram_config config = dedup_config(pages);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    return dev;
}

/* meta_data_size of an empty index of a device of `pages` pages in a state file. */
static uint64_t empty_meta(uint64_t pages)
{
    int fd = state_test_memfd();
    struct uzram *dev = dedup_device(fd, pages);
    uint64_t meta = test_stats(dev).meta_data_size;
    uzram_destroy(dev);
    close(fd);
    return meta;
}

/* Everything discarded and compacted: nothing left, the index as an empty one. */
static void expect_empty(struct uzram *dev, uint64_t pages)
{
    struct uzram_stats s = state_test_empty(dev, pages);
    assert_int_equal(s.dedup_entries, 0);
    assert_int_equal(s.dup_data_size, 0);
    assert_int_equal(s.meta_data_size, empty_meta(pages));
}

static void expect_same_counts(const struct uzram_stats *after, const struct uzram_stats *before)
{
    assert_int_equal(after->pages_stored, before->pages_stored);
    assert_int_equal(after->compr_data_size, before->compr_data_size);
    assert_int_equal(after->same_pages, before->same_pages);
    assert_int_equal(after->huge_pages, before->huge_pages);
    assert_int_equal(after->dedup_entries, before->dedup_entries);
    assert_int_equal(after->dup_data_size, before->dup_data_size);
}

/* ---- made, destroyed, adopted ------------------------------------------------ */

/* `dev` destroyed and its state adopted: every page back, the counts, meta_data_size and
 * mem_used_total as they were. Returns the successor; *before, what they were. */
static struct uzram *hand_over(struct uzram *dev, int fd, const uint32_t *gens, uint64_t pages,
                               struct uzram_stats *before)
{
    *before = test_stats(dev);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    state_test_check(dev, gens, pages);
    struct uzram_stats after = test_stats(dev);
    expect_same_counts(&after, before);
    assert_int_equal(after.meta_data_size, before->meta_data_size);
    assert_int_equal(after.mem_used_total, before->mem_used_total);
    return dev;
}

static void test_state_dedup_round_trip(void **unused)
{
    (void)unused;
    const uint64_t pages = 4096;
    uint32_t *gens = calloc(pages, sizeof *gens);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 31);
    int fd = state_test_memfd();
    struct uzram *dev = dedup_device(fd, pages);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    for (unsigned n = 0; n < 6000; n++) {
        uint64_t index = datagen_rng_below(&rng, pages);
        /* few even generations (shared, many times each), many odd ones (unique) */
        gens[index] = n % 7 == 0 ? 0
                      : n % 2    ? (uint32_t)datagen_rng_below(&rng, 40) * 2 + 2
                                 : (uint32_t)datagen_rng_below(&rng, 1000) * 2 + 1;
        if (gens[index] == 0 && n % 3)
            assert_int_equal(uzram_discard(dev, index * PAGE, PAGE), 0);
        else
            state_test_write(dev, index, gens[index]);
    }
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, NULL), 0);
    /* entries left in high chunks moved down, emptied ones given back */
    for (uint64_t i = 0; i < pages; i += 2)
        if (gens[i] % 2) {
            gens[i] = 0;
            assert_int_equal(uzram_discard(dev, i * PAGE, PAGE), 0);
        }
    assert_int_equal(uzram_compact(dev, NULL), 0);
    struct uzram_stats after;
    dev = hand_over(dev, fd, gens, pages, &after);
    assert_true(after.dedup_entries > 40 && after.dup_data_size > 0);
    struct uzram_config now;
    assert_int_equal(uzram_get_config(dev, &now), 0);
    assert_true(now.use_dedup);
    struct uzram_state_info info;
    assert_int_equal(uzram_state_info(fd, &info), 0);
    assert_true(info.use_dedup);

    /* It goes on: a new shared page on an empty one (an entry more, its size stored), on four
     * more (four times its size not stored), all five discarded (back as it was). */
    const uint32_t fresh = 100002; /* even: shared; text */
    uint64_t empty[5], found = 0;
    for (uint64_t i = 0; i < pages && found < 5; i++)
        if (gens[i] == 0)
            empty[found++] = i;
    assert_int_equal(found, 5);
    state_test_write(dev, empty[0], gens[empty[0]] = fresh);
    struct uzram_stats one = test_stats(dev);
    uint64_t size = one.compr_data_size - after.compr_data_size;
    assert_true(size > 0 && size < PAGE);
    assert_int_equal(one.dedup_entries, after.dedup_entries + 1);
    assert_int_equal(one.dup_data_size, after.dup_data_size);
    for (unsigned k = 1; k < 5; k++)
        state_test_write(dev, empty[k], gens[empty[k]] = fresh);
    struct uzram_stats five = test_stats(dev);
    assert_int_equal(five.dedup_entries, one.dedup_entries);
    assert_int_equal(five.dup_data_size, one.dup_data_size + 4 * size);
    assert_int_equal(five.compr_data_size, one.compr_data_size);
    state_test_check(dev, gens, pages);
    for (unsigned k = 0; k < 5; k++)
        assert_int_equal(uzram_discard(dev, empty[k] * PAGE, PAGE), 0);
    struct uzram_stats none = test_stats(dev);
    expect_same_counts(&none, &after);
    free(gens);
    expect_empty(dev, pages);
    uzram_destroy(dev);
    close(fd);
}

/* Dedup switched on after the device was made in its file (the index made in the file then);
 * and off again, on an empty device: the successor's dedup is what the last setting was. */
static void test_state_dedup_switched(void **unused)
{
    (void)unused;
    uint32_t gens[256] = {0};
    const uint64_t pages = sizeof gens / sizeof gens[0];
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, pages);
    assert_int_equal(uzram_set_dedup(dev, true), 0);
    for (uint64_t i = 0; i < pages; i++)
        state_test_write(dev, i, gens[i] = i % 3 ? 2 * (uint32_t)(i % 4) + 2 : (uint32_t)i * 2 + 1);
    struct uzram_stats before;
    dev = hand_over(dev, fd, gens, pages, &before);
    assert_true(before.dup_data_size > 0);
    assert_int_equal(uzram_reset(dev), 0);
    assert_int_equal(uzram_set_dedup(dev, false), 0);
    uzram_destroy(dev);
    struct uzram_state_info info;
    assert_int_equal(uzram_state_info(fd, &info), 0);
    assert_false(info.use_dedup);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    struct uzram_config now;
    assert_int_equal(uzram_get_config(dev, &now), 0);
    assert_false(now.use_dedup);
    uzram_destroy(dev);
    close(fd);
}

/* A slot naming a dedup id the index never had (a damaged state, its check bits made to
 * match): adoption refuses with -EUCLEAN saying so, and with the slot put back every page is
 * there. */
static void test_state_dedup_bad_id_refused(void **unused)
{
    (void)unused;
    uint32_t gens[16];
    const uint64_t pages = sizeof gens / sizeof gens[0];
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, pages);
    assert_int_equal(uzram_set_dedup(dev, true), 0);
    for (uint64_t i = 0; i < pages; i++)
        state_test_write(dev, i, gens[i] = 2); /* one shared page */
    uzram_destroy(dev);
    struct state_header header;
    assert_int_equal(pread(fd, &header, sizeof header, 0), (ssize_t)sizeof header);
    struct slot slot;
    off_t at = (off_t)header.table_offset + 3 * (off_t)sizeof slot;
    assert_int_equal(pread(fd, &slot, sizeof slot, at), (ssize_t)sizeof slot);
    uint64_t id = slot.value;
    uint32_t info = slot.info;
    slot.value = 0x7fffff00u;
    slot.info = (info & ~SLOT_CHECK_MASK) | slot_check(info, slot.value);
    assert_int_equal(pwrite(fd, &slot, sizeof slot, at), (ssize_t)sizeof slot);
    assert_int_equal(uzram_adopt(fd, &dev), -EUCLEAN);
    assert_non_null(strstr(uzram_state_damage(), "table page 0 slot 3 (page 3 of the disk"));
    assert_non_null(strstr(uzram_state_damage(), "it names a dedup entry not in the index"));
    slot.value = id;
    slot.info = info;
    assert_int_equal(pwrite(fd, &slot, sizeof slot, at), (ssize_t)sizeof slot);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    state_test_check(dev, gens, pages);
    assert_int_equal(test_stats(dev).dedup_entries, 1);
    uzram_destroy(dev);
    close(fd);
}

/* Entries whose objects were written back to a backing store (dedup_replace to a place on it):
 * adopted with the store's blocks they name, every page back, the counts as they were; all
 * discarded, the store holds nothing. */
static void test_state_dedup_written_back(void **unused)
{
    (void)unused;
    char folder[512], path[600];
    assert_int_equal(test_make_folder(folder, sizeof folder, "state-dedup"), 0);
    snprintf(path, sizeof path, "%s/store", folder);
    int fd = state_test_memfd();
    uint32_t gens[512];
    const uint64_t pages = sizeof gens / sizeof gens[0];
    struct uzram *dev = dedup_device(fd, pages);
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
    for (uint64_t i = 0; i < pages; i++)
        state_test_write(dev, i,
                         gens[i] = i % 2 ? 2 * (uint32_t)(i % 6) + 2 : (uint32_t)i * 10 + 1);
    uint64_t written;
    assert_int_equal(uzram_writeback(dev, 0, 0, UINT64_MAX, &written), 0);
    struct uzram_stats before;
    dev = hand_over(dev, fd, gens, pages, &before);
    assert_true(written > 0 && before.bd_objects > 0 && before.dup_data_size > 0);
    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.bd_objects, before.bd_objects);
    assert_int_equal(after.bd_data_size, before.bd_data_size);
    assert_int_equal(after.bd_count, before.bd_count);
    assert_int_equal(after.bd_checksum_errors, 0);
    expect_empty(dev, pages);
    after = test_stats(dev);
    assert_int_equal(after.bd_objects, 0);
    assert_int_equal(after.bd_data_size, 0);
    uzram_destroy(dev);
    close(fd);
    unlink(path);
    rmdir(folder);
}

/* ---- killed in the middle of an index move ------------------------------------ */

#define MOVE_PAGES 2048u
#define MOVE_SHARED 40u /* entries, three pages each */

/* Entries with ids past the first chunk (1024 ids): its ids taken by unique pages written
 * first, then discarded; so index compaction moves them down. */
static void make_high_entries(struct uzram *dev, uint32_t *gens)
{
    for (uint64_t i = 1024; i < MOVE_PAGES; i++)
        state_test_write(dev, i, (uint32_t)i * 10 + 1); /* odd, text: unique */
    for (uint32_t e = 0; e < MOVE_SHARED; e++)
        for (uint64_t k = 0; k < 3; k++) {
            uint64_t index = e * 3 + k;
            state_test_write(dev, index, gens[index] = 1000 + 10 * e + 2 * (e % 4 + 1));
        }
    assert_int_equal(uzram_discard(dev, 1024 * PAGE, (MOVE_PAGES - 1024) * (uint64_t)PAGE), 0);
}

static void test_state_dedup_killed_in_move(void **unused)
{
    (void)unused;
    for (long updates = 1; updates <= 7; updates++) {
        int fd = state_test_memfd();
        struct uzram *dev = dedup_device(fd, MOVE_PAGES);
        uint32_t gens[MOVE_PAGES] = {0};
        make_high_entries(dev, gens);
        struct uzram_stats before = test_stats(dev);
        assert_int_equal(before.dedup_entries, MOVE_SHARED);
        uzram_destroy(dev);
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            if (uzram_adopt(fd, &dev) != 0)
                _exit(2);
            store_index_test_kill_after(updates);
            uzram_compact(dev, NULL);
            _exit(3); /* not killed: no move */
        }
        int status;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        assert_int_equal(uzram_adopt(fd, &dev), 0);
        state_test_check(dev, gens, MOVE_PAGES);
        struct uzram_stats after = test_stats(dev);
        expect_same_counts(&after, &before);
        /* the moves go on from there, and every page still reads back */
        assert_int_equal(uzram_compact(dev, NULL), 0);
        state_test_check(dev, gens, MOVE_PAGES);
        after = test_stats(dev);
        expect_same_counts(&after, &before);
        expect_empty(dev, MOVE_PAGES);
        uzram_destroy(dev);
        close(fd);
    }
}

/* ---- SIGKILL at random moments ------------------------------------------------ */

#define KILL_PAGES 1024u /* logged; the device has as many again for the filler */
#define KILL_ROUNDS 36u

struct kill_log {
    struct state_test_log pages;
    _Atomic uint32_t op;
};

enum { OP_BETWEEN, OP_CHANGE, OP_RECOMPRESS, OP_COMPACT, OP_COUNT };

/* A change of `count` pages from `first` to generation `gen` (0: discarded or zeroed). */
static int kill_change(struct uzram *dev, struct kill_log *log, uint64_t first, unsigned count,
                       uint32_t gen, unsigned op)
{
    static unsigned char pages[8 * PAGE];
    state_test_log_mark(&log->pages, first, count, gen, false);
    int rc;
    if (gen) {
        for (unsigned i = 0; i < count; i++)
            state_test_page(first + i, gen, pages + (size_t)i * PAGE);
        rc = uzram_write(dev, first * PAGE, pages, count * (uint64_t)PAGE);
    } else {
        rc = op % 2 ? uzram_discard(dev, first * PAGE, count * (uint64_t)PAGE)
                    : uzram_write_zeroes(dev, first * PAGE, count * (uint64_t)PAGE, true);
    }
    state_test_log_mark(&log->pages, first, count, gen, true);
    return rc;
}

/* The child: adopt, then change pages until killed: shared pages written to several pages at
 * once and copied from one page to another, discards, recompression, compaction. */
static void kill_child(int fd, struct kill_log *log, uint64_t seed)
{
    struct datagen_rng rng;
    struct uzram *dev = state_test_child_adopt(fd, &log->pages, &rng, seed);
    for (;;) {
        unsigned op, count;
        uint64_t first;
        state_test_draw(&rng, KILL_PAGES, &op, &first, &count);
        uint32_t gen = atomic_fetch_add(&log->pages.next_gen, 1);
        uint32_t copied = atomic_load(&log->pages.done[datagen_rng_below(&rng, KILL_PAGES)]);
        atomic_store(&log->op, op < 70 ? OP_CHANGE : op < 78 ? OP_RECOMPRESS : OP_COMPACT);
        int rc;
        if (op < 40)
            rc = kill_change(dev, log, first, count, gen, op);
        else if (op < 55)
            rc = kill_change(dev, log, first, 1, copied ? copied : gen, op);
        else if (op < 70)
            rc = kill_change(dev, log, first, count, 0, op);
        else if (op < 78)
            rc = uzram_recompress(dev, 0, 0, 8, 0, NULL);
        else
            rc = uzram_compact(dev, NULL);
        atomic_store(&log->op, OP_BETWEEN);
        if (rc != 0)
            _exit(2);
    }
}

static int key_order(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return *x < *y ? -1 : *x > *y;
}

/* The parent after a kill: every page old or new, the levels exactly what the pages are, the
 * entries one per content; then every copy of a content but one discarded: dup_data_size 0
 * (it was the copies' sizes exactly), the entries as many. */
static void kill_check(struct uzram *dev, struct kill_log *log)
{
    static uint64_t keys[KILL_PAGES];
    static uint64_t where[KILL_PAGES];
    uint64_t stored = 0, same = 0, huge = 0, dedup = 0;
    for (uint64_t i = 0; i < KILL_PAGES; i++) {
        uint32_t gen = state_test_settle(dev, &log->pages, i);
        uint64_t run;
        unsigned flags;
        assert_int_equal(uzram_extent(dev, i * PAGE, PAGE, &run, &flags), 0);
        if (flags & UZRAM_EXTENT_HOLE)
            continue;
        stored++;
        bool is_same = gen == 0 || state_test_kind(gen) == DATAGEN_SAME;
        same += is_same;
        huge += gen != 0 && state_test_kind(gen) == DATAGEN_RANDOM;
        if (!is_same)
            keys[dedup++] = (uint64_t)gen << 32 | shared_index(i, gen) << 11 | i;
    }
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.pages_stored, stored);
    assert_int_equal(stats.same_pages, same);
    assert_int_equal(stats.huge_pages, huge);
    qsort(keys, dedup, sizeof *keys, key_order);
    uint64_t entries = 0, extra = 0;
    for (uint64_t k = 0; k < dedup; k++) {
        bool again = k > 0 && keys[k] >> 11 == keys[k - 1] >> 11;
        entries += !again;
        if (again)
            where[extra++] = keys[k] & 2047;
    }
    assert_int_equal(stats.dedup_entries, entries);
    assert_true((stats.dup_data_size == 0) == (extra == 0));
    for (uint64_t k = 0; k < extra; k++) {
        assert_int_equal(uzram_discard(dev, where[k] * PAGE, PAGE), 0);
        atomic_store(&log->pages.done[where[k]], 0);
    }
    stats = test_stats(dev);
    assert_int_equal(stats.dedup_entries, entries);
    assert_int_equal(stats.dup_data_size, 0);
    assert_true(stats.mem_used_total >= stats.compr_data_size);
}

/* Shared pages, and entries past the first chunk of ids for index compaction to move (see
 * make_high_entries), the filler on the pages past the log. */
static void kill_setup(struct uzram *dev, struct kill_log *log, struct datagen_rng *rng, bool high)
{
    /* chunk 0's ids all taken (they are handed out lowest first): the next entries past it */
    for (uint64_t i = KILL_PAGES; high && i < 2 * KILL_PAGES; i++) {
        if (i % 64 == 0 && test_stats(dev).dedup_entries >= 1024 + 16)
            break;
        state_test_write(dev, i, (uint32_t)i * 10 + 1); /* odd, text: unique */
    }
    for (unsigned n = 0; n < 48; n++) {
        uint64_t index = datagen_rng_below(rng, KILL_PAGES);
        uint32_t gen = atomic_fetch_add(&log->pages.next_gen, 1);
        if (n % 2)
            gen = (uint32_t)datagen_rng_below(rng, 12) * 2 + 2; /* a few contents, shared */
        state_test_write(dev, index, gen);
        atomic_store(&log->pages.done[index], gen);
    }
    assert_int_equal(uzram_discard(dev, KILL_PAGES * (uint64_t)PAGE, KILL_PAGES * (uint64_t)PAGE),
                     0);
}

/* Wait (2 s at most) until the child is compacting: a compaction is a short target for a kill
 * at a random moment (a quarter of a millisecond on this disk's index), and every run must
 * kill some children in one; every other round's kill comes just after this. */
static void wait_for_compaction(struct kill_log *log)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (atomic_load(&log->op) != OP_COMPACT && now.tv_sec - start.tv_sec < 2);
}

static void test_state_dedup_survives_kills(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram *dev = dedup_device(fd, 2 * KILL_PAGES);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    uzram_destroy(dev);
    struct kill_log *log = state_test_log_new(sizeof *log);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, test_random_seed("state_dedup_survives_kills"));
    unsigned during[OP_COUNT] = {0};
    for (unsigned round = 0; round < KILL_ROUNDS; round++) {
        assert_int_equal(uzram_adopt(fd, &dev), 0);
        kill_setup(dev, log, &rng, round % 3 == 0); /* the filler takes time */
        uzram_destroy(dev);
        atomic_store(&log->op, OP_BETWEEN); /* not the last child's */
        pid_t child = state_test_fork(&log->pages);
        if (child == 0)
            kill_child(fd, log, datagen_rng_next(&rng));
        if (round % 2 == 1)
            wait_for_compaction(log);
        state_test_kill(child, &log->pages,
                        (long)datagen_rng_below(&rng, round % 2 == 1 ? 20 : 4000));
        assert_int_equal(uzram_adopt(fd, &dev), 0);
        during[atomic_load(&log->op)]++;
        kill_check(dev, log);
        if (round % 12 == 11) {
            expect_empty(dev, 2 * KILL_PAGES); /* nothing leaked */
            state_test_log_zeros(&log->pages);
        }
        uzram_destroy(dev);
    }
    printf("%u kills: %u in writes or discards, %u in recompression, %u in compaction, "
           "%u between calls\n",
           KILL_ROUNDS, during[OP_CHANGE], during[OP_RECOMPRESS], during[OP_COMPACT],
           during[OP_BETWEEN]);
    assert_true(during[OP_CHANGE] > 0 && during[OP_COMPACT] > 0);
    munmap(log, sizeof *log);
    close(fd);
}

/* ---- writers in parallel ---------------------------------------------------------- */

#define CONCURRENT_THREADS 4u
#define CONCURRENT_PAGES 512u /* per thread, interleaved */

struct writer {
    struct uzram *dev;
    unsigned id;
    uint32_t gens[CONCURRENT_PAGES];
};

/* Shared pages (few even generations: every thread writes them) and unique ones, discards;
 * thread 0 also recompresses and compacts the pool and the index now and then. */
static void *concurrent_writer(void *arg)
{
    struct writer *w = arg;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, w->id + 7);
    for (unsigned n = 0; n < 2000; n++) {
        unsigned slot = (unsigned)datagen_rng_below(&rng, CONCURRENT_PAGES);
        uint64_t index = (uint64_t)slot * CONCURRENT_THREADS + w->id;
        uint32_t gen = n % 9 == 0 ? 0
                       : n % 2    ? (uint32_t)datagen_rng_below(&rng, 16) * 2 + 2
                                  : (uint32_t)datagen_rng_below(&rng, 500) * 2 + 1;
        unsigned char page[PAGE];
        state_test_page(index, gen, page);
        int rc = gen ? uzram_write(w->dev, index * PAGE, page, PAGE)
                     : uzram_discard(w->dev, index * PAGE, PAGE);
        if (rc != 0)
            return "write failed";
        w->gens[slot] = gen;
        if (w->id == 0 && n % 400 == 0 &&
            (uzram_recompress(w->dev, 0, 0, 64, 0, NULL) != 0 || uzram_compact(w->dev, NULL) != 0))
            return "recompress or compact failed";
    }
    return NULL;
}

/* Four writers sharing pages and intent records with recompression and compaction (pool and
 * index) on a device with dedup in a state file; after quiesce, adopted: every page back, the
 * counts as they were (TSan runs it). */
static void test_state_dedup_concurrent_writers(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram *dev = dedup_device(fd, CONCURRENT_THREADS * CONCURRENT_PAGES);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    static struct writer writers[CONCURRENT_THREADS];
    for (unsigned t = 0; t < CONCURRENT_THREADS; t++)
        writers[t] = (struct writer){.dev = dev, .id = t};
    state_test_run_threads(concurrent_writer, writers, sizeof writers[0], CONCURRENT_THREADS);
    static uint32_t gens[CONCURRENT_THREADS * CONCURRENT_PAGES];
    for (unsigned t = 0; t < CONCURRENT_THREADS; t++)
        for (unsigned slot = 0; slot < CONCURRENT_PAGES; slot++)
            gens[(uint64_t)slot * CONCURRENT_THREADS + t] = writers[t].gens[slot];
    assert_int_equal(uzram_state_quiesce(dev), 0);
    struct uzram_stats before;
    dev = hand_over(dev, fd, gens, CONCURRENT_THREADS * CONCURRENT_PAGES, &before);
    assert_true(before.dup_data_size > 0);
    uzram_destroy(dev);
    close(fd);
}

/* ---- allocation failures ------------------------------------------------------------ */

/* Each allocation of making a state with dedup and of adopting it fails once: the call says
 * -ENOMEM and the state stays as it was (only in the fault build). */
static void test_state_dedup_fault_sweep(void **unused)
{
    (void)unused;
    uint32_t gens[64];
    for (unsigned i = 0; i < 64; i++)
        gens[i] = i % 3 ? i % 4 * 2 + 2 : i * 2 + 1;
    const struct uzram_config config = dedup_config(64);
    state_test_fault_sweep(&config, gens, 64, "state with dedup, create and adopt");
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    state_test_index_of = shared_index;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_dedup_round_trip),
        cmocka_unit_test(test_state_dedup_switched),
        cmocka_unit_test(test_state_dedup_bad_id_refused),
        cmocka_unit_test(test_state_dedup_written_back),
        cmocka_unit_test(test_state_dedup_killed_in_move),
        cmocka_unit_test(test_state_dedup_survives_kills),
        cmocka_unit_test(test_state_dedup_concurrent_writers),
        cmocka_unit_test(test_state_dedup_fault_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
