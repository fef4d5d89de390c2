/* test_state_bundle.c - bundles kept in a device's state file (issue 29;
 * lib/bundle/bundle_records.c, lib/bundle/bundle.c's adoption): pages packed into bundles
 * read back after adoption with the bundle counters unchanged, their members leaving afterwards
 * free the records; a child SIGKILLed while it writes, discards, packs, splits and compacts: after
 * each adoption every page old or new and the counters exact (everything discarded leaves no
 * bundle, record or pool byte); a child killed at each point where a dedup reference joins a
 * bundle; a fault sweep of packing and adopting. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fault.h"
#include "recompress/recompress_bundle.h" /* the kill while a dedup reference joins a bundle */
#include "state/state.h"                  /* the layout, to look at the bundle records' region */
#include "state_util.h"

#define PAGE STATE_TEST_PAGE

/* Generations by kind: most pages text (bundled in few pieces: short records), one in four
 * binary that shrinks to half (a bundle of 16 of them takes more than 4 pieces: long
 * records), one in sixteen raw (never bundled). */
enum datagen_kind state_test_kind(uint32_t gen)
{
    if (gen % 16 == 15)
        return DATAGEN_RANDOM;
    return gen % 4 == 2 ? DATAGEN_HALF : DATAGEN_TEXT;
}

/* A generation of kind `kind` near `gen`. */
static uint32_t gen_of_kind(uint32_t gen, enum datagen_kind kind)
{
    while (state_test_kind(gen) != kind)
        gen++;
    return gen;
}

/* zstd at priority 1 and bundles of `group` (the group is not kept: set at each start). */
static void bundling(struct uzram *dev, unsigned group)
{
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 3), 0);
    assert_int_equal(uzram_set_recompress_group(dev, group), 0);
}

static void assert_bundles_equal(const struct uzram_stats *a, const struct uzram_stats *b)
{
    assert_int_equal(a->pages_stored, b->pages_stored);
    assert_int_equal(a->bundles, b->bundles);
    assert_int_equal(a->bundled_pages, b->bundled_pages);
    assert_int_equal(a->bundle_dead_pages, b->bundle_dead_pages);
    assert_int_equal(a->bundle_saved_bytes, b->bundle_saved_bytes);
    assert_int_equal(a->meta_data_size, b->meta_data_size);
    assert_int_equal(a->compr_data_size, b->compr_data_size);
    assert_int_equal(a->mem_used_total, b->mem_used_total);
}

/* Whether the state's bundle records region holds any data. */
static bool records_have_data(int fd)
{
    struct state_header header;
    assert_int_equal(pread(fd, &header, sizeof header, 0), (ssize_t)sizeof header);
    off_t data = lseek(fd, (off_t)header.bundle_offset, SEEK_DATA);
    return data >= 0 && (uint64_t)data < header.bundle_offset + header.bundle_bytes;
}

/* meta_data_size of the empty device: 0, or with dedup an empty index's (bundle_kills). */
static uint64_t empty_meta;

/* Every page discarded and the pool compacted: no page, bundle, record, dedup entry or pool
 * byte left. */
static void assert_all_gone(struct uzram *dev, uint64_t pages)
{
    struct uzram_stats stats = state_test_empty(dev, pages);
    assert_int_equal(stats.bundles, 0);
    assert_int_equal(stats.bundled_pages, 0);
    assert_int_equal(stats.bundle_dead_pages, 0);
    assert_int_equal(stats.bundle_saved_bytes, 0);
    assert_int_equal(stats.bundle_mem, 0);
    assert_int_equal(stats.dedup_entries, 0);
    assert_int_equal(stats.meta_data_size, empty_meta);
    assert_int_equal(stats.bd_objects, 0);
}

/* ---- a round trip ------------------------------------------------------------- */

#define TRIP_PAGES 1024u

static void test_state_bundle_round_trip(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, TRIP_PAGES);
    bundling(dev, 16);
    uint32_t *gens = calloc(TRIP_PAGES, sizeof *gens);
    for (uint64_t i = 0; i < TRIP_PAGES; i++)
        gens[i] =
            gen_of_kind((uint32_t)(i + 1) * 16, i / 16 % 4 == 1 ? DATAGEN_HALF : DATAGEN_TEXT) +
            (i % 64 == 63 ? 15 : 0);
    for (uint64_t i = 0; i < TRIP_PAGES; i++)
        state_test_write(dev, i, gens[i]);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, NULL), 0);
    /* some members dead before the handover */
    for (uint64_t i = 3; i < TRIP_PAGES; i += 37)
        state_test_write(dev, i, gens[i] = gens[i] + 4);
    struct uzram_stats before = test_stats(dev);
    assert_true(before.bundles > TRIP_PAGES / 32);
    assert_true(before.bundle_dead_pages > 0);
    /* records larger than the smallest (88 bytes; 120 or 184) among them */
    assert_true(before.meta_data_size > before.bundles * 88);
    assert_true(before.meta_data_size < before.bundles * 184);
    state_test_check(dev, gens, TRIP_PAGES);
    uzram_destroy(dev);

    assert_int_equal(uzram_adopt(fd, &dev), 0);
    struct uzram_stats after = test_stats(dev);
    assert_bundles_equal(&after, &before);
    state_test_check(dev, gens, TRIP_PAGES);
    /* handed over twice: the same again */
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    after = test_stats(dev);
    assert_bundles_equal(&after, &before);
    /* members leave: overwritten, discarded; the bundles more than half dead split */
    bundling(dev, 16);
    for (uint64_t i = 0; i < TRIP_PAGES; i += 2)
        state_test_write(dev, i, gens[i] = gens[i] + 16);
    assert_int_equal(uzram_discard(dev, 64 * PAGE, 64 * PAGE), 0);
    memset(gens + 64, 0, 64 * sizeof *gens);
    struct uzram_stats left = test_stats(dev);
    assert_true(left.bundle_dead_pages > before.bundle_dead_pages);
    assert_true(left.bundles < before.bundles); /* the discarded ones' records freed */
    state_test_check(dev, gens, TRIP_PAGES);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, NULL), 0);
    state_test_check(dev, gens, TRIP_PAGES);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    state_test_check(dev, gens, TRIP_PAGES);
    assert_all_gone(dev, TRIP_PAGES);
    assert_false(records_have_data(fd)); /* the records' chunks given back */
    uzram_destroy(dev);
    free(gens);
    close(fd);
}

/* A record's bytes stay in the file after its last member left: adoption does not take them
 * for a bundle (no slot names it); a slot naming a record the file does not hold, or a place
 * the record has not, is refused. */
static void test_state_bundle_records_checked(void **unused)
{
    (void)unused;
    uint32_t gens[64];
    for (uint64_t i = 0; i < 64; i++)
        gens[i] = gen_of_kind((uint32_t)i * 4 + 1, DATAGEN_TEXT);
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, 64);
    bundling(dev, 8);
    for (uint64_t i = 0; i < 64; i++)
        state_test_write(dev, i, gens[i]);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, NULL), 0);
    assert_int_equal(test_stats(dev).bundles, 8);
    for (uint64_t i = 0; i < 8; i++)
        state_test_write(dev, i, gens[i] = gens[i] + 4);
    struct uzram_stats before = test_stats(dev);
    assert_int_equal(before.bundles, 7);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    struct uzram_stats after = test_stats(dev);
    assert_bundles_equal(&after, &before);
    state_test_check(dev, gens, 64);
    uzram_destroy(dev);
    /* slot 9, a member, made to name record 4000 (a hole), then place 15 of its own */
    struct state_header header;
    assert_int_equal(pread(fd, &header, sizeof header, 0), (ssize_t)sizeof header);
    struct slot slot, bad;
    off_t at = (off_t)(header.table_offset + 9 * sizeof slot);
    assert_int_equal(pread(fd, &slot, sizeof slot, at), (ssize_t)sizeof slot);
    assert_int_equal(slot_info_state(slot.info), SLOT_BUNDLED);
    memcpy(&bad, &slot, sizeof slot);
    /* (their check bits made to match, so that the records' own checks are what refuses) */
    bad.value = (uint64_t)4000 << 4 | (slot.value & 15);
    bad.info = (slot.info & ~SLOT_CHECK_MASK) | slot_check(slot.info, bad.value);
    assert_int_equal(pwrite(fd, &bad, sizeof bad, at), (ssize_t)sizeof bad);
    assert_int_equal(uzram_adopt(fd, &dev), -EUCLEAN);
    assert_non_null(strstr(uzram_state_damage(), "bundle record the file does not hold"));
    bad.value = slot.value | 15;
    bad.info = (slot.info & ~SLOT_CHECK_MASK) | slot_check(slot.info, bad.value);
    assert_int_equal(pwrite(fd, &bad, sizeof bad, at), (ssize_t)sizeof bad);
    assert_int_equal(uzram_adopt(fd, &dev), -EUCLEAN);
    assert_non_null(strstr(uzram_state_damage(), "does not hold this page at the place"));
    assert_int_equal(pwrite(fd, &slot, sizeof slot, at), (ssize_t)sizeof slot);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    state_test_check(dev, gens, 64);
    assert_all_gone(dev, 64);
    uzram_destroy(dev);
    close(fd);
}

/* ---- SIGKILL at random moments ------------------------------------------------ */

#define KILL_PAGES 512u
#define KILL_ROUNDS 60u

_Static_assert(KILL_PAGES <= STATE_TEST_LOG_PAGES, "the log follows every page");

/* The child: adopt, then change pages until killed (its passes pack windows of 8 and split
 * bundles more than half dead; writeback takes bundled pages one by one). Exits 2 on a
 * failure. */
static void kill_child(int fd, struct state_test_log *log, uint64_t seed)
{
    struct uzram *dev;
    if (uzram_adopt(fd, &dev) != 0 || uzram_set_recompress_group(dev, 8) != 0)
        _exit(2);
    const struct state_test_mix mix = {.pages = KILL_PAGES,
                                       .writes = 65,
                                       .discards = 80,
                                       .zeroes = 80,
                                       .recompress = 90,
                                       .writeback = 95};
    state_test_run(dev, log, &mix, seed);
}

/* The parent after a kill: every page old or new, the levels what the pages are, the bundle
 * counters consistent. Returns whether a change was under way. */
static bool kill_check(struct uzram *dev, struct state_test_log *log)
{
    bool underway = false;
    uint64_t stored = 0;
    for (uint64_t i = 0; i < KILL_PAGES; i++) {
        underway |= atomic_load(&log->pending[i]) != STATE_TEST_NONE;
        uint32_t gen = state_test_settle(dev, log, i);
        stored += gen != 0;
    }
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.pages_stored, stored);
    assert_true(stats.bundled_pages <= stored);
    assert_true(stats.bundled_pages + stats.bundle_dead_pages <= 8 * stats.bundles);
    assert_true(stats.bundled_pages >= stats.bundles); /* each has a live member */
    assert_true(stats.bundle_mem >= 88 * stats.bundles);
    assert_true(stats.bundle_mem <= 184 * stats.bundles);
    assert_true(stats.meta_data_size >= stats.bundle_mem); /* and the dedup index's */
    assert_true(stats.mem_used_total >= stats.compr_data_size);
    return underway;
}

/* Every page text, packed into bundles: what each round starts from after a full discard. */
static void fill_and_pack(struct uzram *dev, struct state_test_log *log)
{
    for (uint64_t i = 0; i < KILL_PAGES; i++) {
        uint32_t gen = atomic_fetch_add(&log->next_gen, 1);
        state_test_write(dev, i, gen);
        atomic_store(&log->done[i], gen);
    }
    assert_int_equal(uzram_set_recompress_group(dev, 8), 0);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, NULL), 0);
    assert_true(test_stats(dev).bundles > KILL_PAGES / 16);
}

/* With dedup: the pages of even generations are one page wherever they are written. */
static uint64_t shared_index(uint64_t index, uint32_t gen)
{
    return gen % 2 ? index : 0;
}

/* KILL_ROUNDS kills of kill_child, the parent adopting and checking after each; with `dedup`
 * the device deduplicates too (bundles and the index kept in one state). */
static void bundle_kills(bool dedup)
{
    char folder[512], path[600];
    assert_int_equal(test_make_folder(folder, sizeof folder, "state-bundle"), 0);
    snprintf(path, sizeof path, "%s/store", folder);
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, KILL_PAGES);
    state_test_index_of = NULL;
    if (dedup) {
        assert_int_equal(uzram_set_dedup(dev, true), 0);
        state_test_index_of = shared_index;
    }
    empty_meta = test_stats(dev).meta_data_size;
    assert_int_equal(uzram_set_backing_dev(dev, path, 0), 0);
    bundling(dev, 8);
    struct state_test_log *log = state_test_log_new(sizeof *log);
    fill_and_pack(dev, log);
    uzram_destroy(dev);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, test_random_seed("state_bundle_survives_kills"));
    unsigned underway = 0, during[STATE_TEST_DOINGS] = {0}, backed = 0;
    for (unsigned round = 0; round < KILL_ROUNDS; round++) {
        pid_t child = state_test_fork(log);
        if (child == 0)
            kill_child(fd, log, datagen_rng_next(&rng));
        state_test_kill(child, log, (long)datagen_rng_below(&rng, 4000));
        assert_int_equal(uzram_adopt(fd, &dev), 0);
        during[atomic_load(&log->doing)]++;
        underway += kill_check(dev, log);
        backed += test_stats(dev).bd_objects > 0; /* pages written back, adopted */
        if (round % 20 == 19) {
            assert_all_gone(dev, KILL_PAGES);
            assert_false(records_have_data(fd));
            state_test_log_zeros(log);
            fill_and_pack(dev, log);
        }
        uzram_destroy(dev);
    }
    printf("%s%u kills: %u in writes or discards (%u with a page changing), %u in packing or "
           "splitting, %u in writeback, %u in compaction, %u between calls; %u adoptions with "
           "pages written back\n",
           dedup ? "with dedup: " : "", KILL_ROUNDS, during[STATE_TEST_CHANGE], underway,
           during[STATE_TEST_RECOMPRESS], during[STATE_TEST_WRITEBACK], during[STATE_TEST_COMPACT],
           during[STATE_TEST_BETWEEN], backed);
    /* (how many adoptions find pages written back varies with the timing: 0 to 32 in runs seen) */
    assert_true(during[STATE_TEST_RECOMPRESS] > 0 && during[STATE_TEST_WRITEBACK] > 0);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    assert_all_gone(dev, KILL_PAGES);
    uzram_destroy(dev);
    munmap(log, sizeof *log);
    close(fd);
    unlink(path);
    rmdir(folder);
    state_test_index_of = NULL;
    empty_meta = 0;
}

static void test_state_bundle_survives_kills(void **unused)
{
    (void)unused;
    bundle_kills(false);
}

/* Dedup and bundles in one state: a bundle's member may have been a shared page. */
static void test_state_bundle_dedup_survive_kills(void **unused)
{
    (void)unused;
    bundle_kills(true);
}

/* ---- killed while a dedup reference joins a bundle ----------------------------- */

#define JOIN_PAGES 16u

/* A child packing pages that are each a dedup entry's one reference (text and binary, two
 * windows of 8), killed at point `point` of recompress_bundle_test_kill_at; then adopted:
 * every page back, each an entry's or a bundle's and not both, and packing, discarding and
 * compaction go on to leave nothing. False when the packing passed fewer points. */
static bool join_killed_at(long point)
{
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, JOIN_PAGES);
    assert_int_equal(uzram_set_dedup(dev, true), 0);
    empty_meta = test_stats(dev).meta_data_size;
    bundling(dev, 8);
    uint32_t gens[JOIN_PAGES];
    for (uint64_t i = 0; i < JOIN_PAGES; i++) {
        gens[i] = gen_of_kind((uint32_t)i * 4 + 1, i % 3 ? DATAGEN_TEXT : DATAGEN_HALF);
        state_test_write(dev, i, gens[i]);
    }
    assert_int_equal(test_stats(dev).dedup_entries, JOIN_PAGES);
    uzram_destroy(dev);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        if (uzram_adopt(fd, &dev) != 0 || uzram_set_recompress_group(dev, 8) != 0)
            _exit(2);
        recompress_bundle_test_kill_at(point);
        _exit(uzram_recompress(dev, 0, 0, 0, 0, NULL) == 0 ? 3 : 2);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    assert_true(killed || (WIFEXITED(status) && WEXITSTATUS(status) == 3));
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    state_test_check(dev, gens, JOIN_PAGES);
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.pages_stored, JOIN_PAGES);
    assert_int_equal(stats.dedup_entries + stats.bundled_pages, JOIN_PAGES);
    assert_true(killed || stats.bundled_pages == JOIN_PAGES);
    bundling(dev, 8);
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, NULL), 0);
    state_test_check(dev, gens, JOIN_PAGES);
    assert_all_gone(dev, JOIN_PAGES);
    uzram_destroy(dev);
    close(fd);
    empty_meta = 0;
    return killed;
}

/* Killed at each point of packing's dedup references (issue 29: consistent at every instant):
 * before the fix, the entry's object was freed before the slot named the bundle, and a kill
 * there left a slot naming a freed object (adoption refused: -EINVAL, its span gone). */
static void test_state_bundle_dedup_join_killed(void **unused)
{
    (void)unused;
    long point = 1;
    while (join_killed_at(point))
        point++;
    printf("killed at %ld points of packing dedup references\n", point - 1);
    assert_int_equal(point - 1, 2 * JOIN_PAGES);
}

/* ---- faults ------------------------------------------------------------------------ */

/* Fault point `nth` armed while 64 pages are packed, then while they are adopted: packing
 * keeps every page as it was or bundles it, adoption fails with -ENOMEM or brings every page
 * and counter back. Whether a fault point was hit. */
static bool sweep_point(uint64_t nth, const uint32_t *gens)
{
    int fd = state_test_memfd();
    struct uzram *dev = state_test_device(fd, 64);
    bundling(dev, 8);
    for (unsigned i = 0; i < 64; i++)
        state_test_write(dev, i, gens[i]);
    fault_arm(nth);
    int rc = uzram_recompress(dev, 0, 0, 0, 0, NULL);
    uint64_t pack_hits = fault_hits();
    fault_disarm();
    assert_true(rc == 0 || pack_hits);
    state_test_check(dev, gens, 64);
    struct uzram_stats before = test_stats(dev);
    uzram_destroy(dev);
    uint64_t adopt_hits;
    dev = state_test_adopt_faulted(fd, nth, &adopt_hits);
    struct uzram_stats after = test_stats(dev);
    assert_bundles_equal(&after, &before);
    state_test_check(dev, gens, 64);
    assert_all_gone(dev, 64);
    uzram_destroy(dev);
    close(fd);
    return pack_hits || adopt_hits;
}

/* Each allocation and compression call of packing, then of adopting, failed in turn (fault
 * build). */
static void test_state_bundle_fault_sweep(void **unused)
{
    (void)unused;
    if (!fault_enabled())
        skip();
    uint32_t gens[64];
    for (unsigned i = 0; i < 64; i++)
        gens[i] = gen_of_kind(i * 4 + 1, i % 16 < 8 ? DATAGEN_TEXT : DATAGEN_HALF);
    uint64_t swept = 0;
    for (uint64_t nth = 1; sweep_point(nth, gens); nth++)
        swept++;
    printf("bundles packed and adopted: %llu fault points swept\n", (unsigned long long)swept);
    assert_true(swept > 0);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_bundle_round_trip),
        cmocka_unit_test(test_state_bundle_records_checked),
        cmocka_unit_test(test_state_bundle_survives_kills),
        cmocka_unit_test(test_state_bundle_dedup_survive_kills),
        cmocka_unit_test(test_state_bundle_dedup_join_killed),
        cmocka_unit_test(test_state_bundle_fault_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
