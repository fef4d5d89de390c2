/* test_state.c - a device's state in a shareable file (lib/state/state.c, state_adopt.c,
 * pool_adopt.c): made, left and adopted with every page read back; format versions and live
 * owners refused with the file unchanged; reads of a fresh disk that cost the file nothing;
 * bundles, which the file cannot keep, refused (dedup: test_state_dedup.c); and a process SIGKILLed
 * hundreds of times in the middle of writes, discards, recompression and compaction, whose
 * successor finds every page old or new and the accounting exact. */
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fault.h"
#include "state/state.h" /* the header's layout, to damage it */
#include "state_util.h"

#define PAGE STATE_TEST_PAGE
#define MIB (1ull << 20)
/* the span directory: a 4-byte entry per 64 KiB window of the pool (pool.h) */
#define POOL_DIR_BYTES ((1ull << 26) * 4)

static struct uzram_config config_of(uint64_t disksize)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = disksize;
    return config;
}

/* Generations cycle through the kinds of page (a same-filled word, text, half-compressible,
 * random: stored huge). */
enum datagen_kind state_test_kind(uint32_t gen)
{
    static const enum datagen_kind kinds[] = {DATAGEN_SAME, DATAGEN_TEXT, DATAGEN_HALF,
                                              DATAGEN_RANDOM, DATAGEN_TEXT};
    return kinds[gen % 5];
}

/* ---- made, destroyed, adopted ------------------------------------------------ */

static void test_state_round_trip(void **unused)
{
    (void)unused;
    const uint64_t pages = 4096;
    int fd = state_test_memfd();
    struct uzram_config config = config_of(pages * PAGE);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    uint32_t *gens = calloc(pages, sizeof *gens);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, 29);
    for (unsigned n = 0; n < 6000; n++) {
        uint64_t index = datagen_rng_below(&rng, pages);
        gens[index] = n % 7 == 0 ? 0 : (uint32_t)datagen_rng_below(&rng, 1000) + 1;
        if (gens[index] == 0 && n % 2)
            assert_int_equal(uzram_discard(dev, index * PAGE, PAGE), 0);
        else
            state_test_write(dev, index, gens[index]);
    }
    assert_int_equal(uzram_recompress(dev, 0, 0, 0, 0, NULL), 0);
    size_t area_size;
    char *area = uzram_state_area(dev, &area_size);
    assert_non_null(area);
    assert_int_equal(area_size, 4096);
    strcpy(area, "export=x ublk=3");
    assert_int_equal(uzram_set_mem_limit(dev, 512 * MIB), 0);
    struct uzram_stats before = test_stats(dev);
    uzram_destroy(dev);

    struct uzram_state_info info;
    assert_int_equal(uzram_state_info(fd, &info), 0);
    assert_int_equal(info.disksize, pages * PAGE);
    assert_int_equal(info.owner_pid, 0);
    assert_true(info.clean);
    assert_string_equal(info.comp_algorithm, "lz4");

    assert_int_equal(uzram_adopt(fd, &dev), 0);
    state_test_check(dev, gens, pages);
    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.pages_stored, before.pages_stored);
    assert_int_equal(after.compr_data_size, before.compr_data_size);
    assert_int_equal(after.same_pages, before.same_pages);
    assert_int_equal(after.zero_pages, before.zero_pages);
    assert_int_equal(after.huge_pages, before.huge_pages);
    assert_int_equal(after.mem_used_total, before.mem_used_total);
    /* the counters of events go on where they were (they were 0 after adoption before) */
    assert_true(before.notify_free > 0 && before.recomp_pages > 0 && before.huge_pages_since > 0);
    assert_int_equal(after.notify_free, before.notify_free);
    assert_int_equal(after.recomp_pages, before.recomp_pages);
    assert_int_equal(after.recomp_bytes, before.recomp_bytes);
    assert_int_equal(after.recomp_saved_bytes, before.recomp_saved_bytes);
    assert_int_equal(after.huge_pages_since, before.huge_pages_since);
    assert_int_equal(after.invalid_io, before.invalid_io);
    assert_string_equal(uzram_state_area(dev, &area_size), "export=x ublk=3");
    struct uzram_config now;
    assert_int_equal(uzram_get_config(dev, &now), 0);
    assert_string_equal(now.comp_algorithm, "lz4");
    assert_int_equal(now.mem_limit, 512 * MIB);
    assert_int_equal(uzram_state_info(fd, &info), 0);
    assert_int_equal(info.owner_pid, getpid());

    /* The adopted device goes on: writes, and everything discarded leaves nothing. */
    for (uint64_t i = 0; i < 64; i++)
        state_test_write(dev, i, gens[i] = (uint32_t)i + 3);
    state_test_check(dev, gens, pages);
    state_test_empty(dev, pages);
    uzram_destroy(dev);
    free(gens);
    close(fd);
}

/* The counters of events are in the state: a process SIGKILLed right after its last events
 * leaves them counted, and a reset zeroes them as zram's does. */
static void test_state_events_survive_kill(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram_config config = config_of(64 * PAGE);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    for (uint64_t i = 0; i < 8; i++)
        state_test_write(dev, i, (uint32_t)i + 1);
    uzram_destroy(dev);
    int done[2];
    assert_int_equal(pipe(done), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        unsigned char page[PAGE];
        if (uzram_adopt(fd, &dev) != 0)
            _exit(2);
        for (int i = 0; i < 5; i++) /* misaligned: invalid_io */
            if (uzram_read(dev, 1, page, PAGE) != -EINVAL)
                _exit(2);
        for (uint64_t i = 0; i < 3; i++) /* notify_free */
            if (uzram_discard(dev, i * PAGE, PAGE) != 0)
                _exit(2);
        if (write(done[1], "", 1) != 1)
            _exit(2);
        pause();
    }
    char byte;
    assert_int_equal(read(done[0], &byte, 1), 1);
    kill(child, SIGKILL);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.invalid_io, 5);
    assert_int_equal(stats.notify_free, 3);
    assert_int_equal(stats.pages_stored, 5);
    assert_int_equal(uzram_reset(dev), 0);
    stats = test_stats(dev);
    assert_int_equal(stats.invalid_io, 0);
    assert_int_equal(stats.notify_free, 0);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0); /* zeroed in the state too */
    assert_int_equal(test_stats(dev).invalid_io, 0);
    uzram_destroy(dev);
    close(done[0]);
    close(done[1]);
    close(fd);
}

/* struct uzram_state_info's layout is ABI: a field added goes where nothing moves (use_dedup
 * went before comp_algorithm at first, moving it a byte). */
_Static_assert(offsetof(struct uzram_state_info, disksize) == 8 &&
                   offsetof(struct uzram_state_info, owner_pid) == 16 &&
                   offsetof(struct uzram_state_info, comp_algorithm) == 22 &&
                   offsetof(struct uzram_state_info, reserved) == 48 &&
                   sizeof(struct uzram_state_info) == 112,
               "uzram_state_info's fields stay where programs built before find them");

/* ---- refusals ------------------------------------------------------------------ */

static void read_header(int fd, unsigned char *copy, size_t size)
{
    assert_int_equal(pread(fd, copy, size, 0), (ssize_t)size);
}

static void test_state_version_refused(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram_config config = config_of(16 * MIB);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    state_test_write(dev, 5, 11);
    uzram_destroy(dev);
    uint32_t version;
    const off_t at = offsetof(struct state_header, version);
    assert_int_equal(pread(fd, &version, sizeof version, at), sizeof version);
    uint32_t later = version + 1;
    assert_int_equal(pwrite(fd, &later, sizeof later, at), sizeof later);
    static unsigned char before[65536], after[65536];
    read_header(fd, before, sizeof before);
    assert_int_equal(uzram_adopt(fd, &dev), -EPROTONOSUPPORT);
    struct uzram_state_info info;
    assert_int_equal(uzram_state_info(fd, &info), -EPROTONOSUPPORT);
    assert_int_equal(info.version, later);
    assert_int_equal(info.supported_version, version);
    read_header(fd, after, sizeof after);
    assert_memory_equal(before, after, sizeof before);

    /* Version 1 (before dictionaries and the backing store were kept), version 2 (before
     * the dedup index was) and version 3 (before the check bits and sums) are other versions. */
    for (uint32_t old = 1; old <= 3; old++) {
        assert_int_equal(pwrite(fd, &old, sizeof old, at), sizeof old);
        assert_int_equal(uzram_adopt(fd, &dev), -EPROTONOSUPPORT);
        assert_int_equal(uzram_state_info(fd, &info), -EPROTONOSUPPORT);
        assert_int_equal(info.version, old);
    }

    /* Put back, it adopts. */
    assert_int_equal(pwrite(fd, &version, sizeof version, at), sizeof version);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    uint32_t gens[8] = {0, 0, 0, 0, 0, 11, 0, 0};
    state_test_check(dev, gens, 8);
    uzram_destroy(dev);
    close(fd);

    /* Not a state at all; and a file not empty for a new one. */
    fd = state_test_memfd();
    assert_int_equal(uzram_adopt(fd, &dev), -EINVAL);
    assert_int_equal(write(fd, "not a state", 11), 11);
    assert_int_equal(uzram_adopt(fd, &dev), -EINVAL);
    assert_int_equal(uzram_state_info(fd, &info), -EINVAL);
    assert_int_equal(uzram_create_in(&config, fd, &dev), -EEXIST);
    close(fd);
}

static void set_owner(int fd, int32_t pid)
{
    assert_int_equal(pwrite(fd, &pid, sizeof pid, offsetof(struct state_header, owner_pid)),
                     sizeof pid);
}

static void test_state_owner_alive_refused(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram_config config = config_of(16 * MIB);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    state_test_write(dev, 1, 2);
    uzram_destroy(dev);
    /* A live process (the parent of this one) has it: refused. */
    set_owner(fd, (int32_t)getppid());
    struct uzram_state_info info;
    assert_int_equal(uzram_state_info(fd, &info), 0);
    assert_true(info.owner_alive);
    assert_int_equal(uzram_adopt(fd, &dev), -EBUSY);
    /* A child that adopted it and lives: refused; killed, taken. */
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    set_owner(fd, 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        struct uzram *mine;
        char byte = uzram_adopt(fd, &mine) == 0 ? 'y' : 'n';
        if (write(ready[1], &byte, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char byte = 0;
    assert_int_equal(read(ready[0], &byte, 1), 1);
    assert_int_equal(byte, 'y');
    assert_int_equal(uzram_adopt(fd, &dev), -EBUSY);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* This process itself (a server that re-executed itself keeps its pid): taken. */
    set_owner(fd, (int32_t)getpid());
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    uint32_t gens[2] = {0, 2};
    state_test_check(dev, gens, 2);
    uzram_destroy(dev);
    close(ready[0]);
    close(ready[1]);
    close(fd);
}

static void test_state_keeps_dedup_and_bundles(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram_config config = config_of(16 * MIB);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    assert_int_equal(uzram_set_dedup(dev, true), 0);         /* the index is kept */
    assert_int_equal(uzram_set_recompress_group(dev, 4), 0); /* bundles are kept */
    uzram_destroy(dev);
    close(fd);
    /* Without a state file, no area. */
    dev = test_device(16 * MIB, NULL, 0);
    size_t size = 1;
    assert_null(uzram_state_area(dev, &size));
    assert_int_equal(size, 0);
    assert_int_equal(uzram_state_quiesce(dev), -EINVAL);
    uzram_destroy(dev);
}

/* ---- a fresh disk read whole costs the file nothing -------------------------- */

static uint64_t file_blocks(int fd)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    return (uint64_t)st.st_blocks;
}

static void test_state_sparse_reads(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    const uint64_t disksize = 1024 * MIB;
    struct uzram_config config = config_of(disksize);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    uint64_t fresh = file_blocks(fd);
    unsigned char *buf = malloc(MIB);
    for (uint64_t at = 0; at < disksize; at += MIB)
        assert_int_equal(uzram_read(dev, at, buf, MIB), 0);
    uint64_t run;
    unsigned flags;
    assert_int_equal(uzram_extent(dev, 0, disksize, &run, &flags), 0);
    assert_int_equal(run, disksize);
    assert_int_equal(uzram_mark_idle(dev, 0, NULL), 0);
    assert_int_equal(uzram_discard(dev, 0, disksize), 0);
    assert_int_equal(file_blocks(fd), fresh);
    /* A page written takes a table page and a span; discarded and compacted, both go back. */
    state_test_write(dev, 100000, 3);
    assert_true(file_blocks(fd) >= fresh + 2 * PAGE / 512);
    assert_int_equal(uzram_discard(dev, 100000 * (uint64_t)PAGE, PAGE), 0);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    /* (what stays is an intent record's page and the span directory's: bounded, 36 KiB
     * and 4 KiB a 64 MiB of pool) */
    assert_int_equal(lseek(fd, STATE_DIR_OFFSET + POOL_DIR_BYTES, SEEK_DATA), -1);
    assert_int_equal(errno, ENXIO);
    free(buf);
    uzram_destroy(dev);
    close(fd);
}

/* ---- a reserve left to the successor -------------------------------------------- */

/* Bytes of the state file in memory, once they are at least `least` and no longer grow (the
 * reserve's thread fills its windows in the background: on a loaded machine it may not run
 * for a while, so "no growth for 20 ms" alone read a reserve half made). Waits at most 10 s
 * for `least`. */
static uint64_t settled_bytes(int fd, uint64_t least)
{
    uint64_t last = 0, now = file_blocks(fd) * 512;
    for (int i = 0; i < 500 && now < least; i++) {
        usleep(20 * 1000);
        now = file_blocks(fd) * 512;
    }
    for (int i = 0; i < 1000 && now != last; i++) {
        usleep(20 * 1000);
        last = now;
        now = file_blocks(fd) * 512;
    }
    return now;
}

/* The pool reserve (serve --swap) is in the state file: its whole windows outlive the owner
 * and its successor keeps them (a server that crashed under memory pressure leaves them to the
 * next, which must not fault that memory in again), then gives back what lies beyond the
 * reserve it sets itself, for its own start (serve's SUCCESSOR_MEMORY). */
static void test_state_reserve_kept(void **unused)
{
    (void)unused;
    const uint64_t pages = 1024;
    int fd = state_test_memfd();
    struct uzram_config config = config_of(pages * PAGE);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    uint32_t *gens = calloc(pages, sizeof *gens);
    for (uint64_t i = 0; i < pages; i += 3)
        state_test_write(dev, i, gens[i] = (uint32_t)i + 1);
    uint64_t stored = settled_bytes(fd, 0);
    assert_int_equal(uzram_set_mem_reserve(dev, 8 * MIB), 0);
    uint64_t with_reserve = settled_bytes(fd, stored + 8 * MIB);
    assert_true(with_reserve >= stored + 8 * MIB);
    uzram_destroy(dev); /* as a crash leaves it: nothing given back */
    assert_int_equal(file_blocks(fd) * 512, with_reserve);

    assert_int_equal(uzram_adopt(fd, &dev), 0);
    assert_true(file_blocks(fd) * 512 + MIB > with_reserve); /* the reserve's windows kept */
    state_test_check(dev, gens, pages);
    assert_int_equal(uzram_set_mem_reserve(dev, 2 * MIB), 0);
    uint64_t given_back = settled_bytes(fd, stored + 2 * MIB);
    assert_true(given_back + 5 * MIB < with_reserve); /* beyond 2 MiB: back to the system */
    assert_true(given_back >= stored + 2 * MIB);
    /* New spans come from the windows kept: the pages written read back. */
    for (uint64_t i = 1; i < pages; i += 3)
        state_test_write(dev, i, gens[i] = (uint32_t)i + 7);
    state_test_check(dev, gens, pages);
    assert_int_equal(uzram_set_mem_reserve(dev, 0), 0);
    uzram_destroy(dev);
    free(gens);
    close(fd);
}

/* ---- SIGKILL at random moments ------------------------------------------------ */

#define KILL_PAGES 1024u
#define KILL_ROUNDS 200u

_Static_assert(KILL_PAGES <= STATE_TEST_LOG_PAGES, "the log follows every page");

/* The child: adopt, then change pages until killed. Exits 2 on a failure. */
static void kill_child(int fd, struct state_test_log *log, uint64_t seed)
{
    struct uzram *dev;
    if (uzram_adopt(fd, &dev) != 0)
        _exit(2);
    const struct state_test_mix mix = {.pages = KILL_PAGES,
                                       .writes = 70,
                                       .discards = 80,
                                       .zeroes = 85,
                                       .recompress = 90,
                                       .writeback = 90,
                                       .recompress_pages = 8};
    state_test_run(dev, log, &mix, seed);
}

/* The parent after a kill: every page old or new, the levels exactly what the pages are.
 * Returns whether a change was under way. */
static bool kill_check(struct uzram *dev, struct state_test_log *log)
{
    bool underway = false;
    uint64_t stored = 0, same = 0, huge = 0;
    for (uint64_t i = 0; i < KILL_PAGES; i++) {
        underway |= atomic_load(&log->pending[i]) != STATE_TEST_NONE;
        uint32_t gen = state_test_settle(dev, log, i);
        uint64_t run;
        unsigned flags;
        assert_int_equal(uzram_extent(dev, i * PAGE, PAGE, &run, &flags), 0);
        if (!(flags & UZRAM_EXTENT_HOLE)) {
            stored++;
            same += gen == 0 || state_test_kind(gen) == DATAGEN_SAME;
            huge += gen != 0 && state_test_kind(gen) == DATAGEN_RANDOM;
        }
    }
    struct uzram_stats stats = test_stats(dev);
    assert_int_equal(stats.pages_stored, stored);
    assert_int_equal(stats.same_pages, same);
    assert_int_equal(stats.huge_pages, huge);
    assert_true(stats.mem_used_total >= stats.compr_data_size);
    return underway;
}

static void test_state_survives_kills(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram_config config = config_of(KILL_PAGES * (uint64_t)PAGE);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    assert_int_equal(uzram_set_recomp_algorithm(dev, 1, "zstd", 0), 0);
    uzram_destroy(dev);
    struct state_test_log *log = state_test_log_new(sizeof *log);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, test_random_seed("state_survives_kills"));
    unsigned underway = 0, during[STATE_TEST_DOINGS] = {0};
    for (unsigned round = 0; round < KILL_ROUNDS; round++) {
        pid_t child = state_test_fork(log);
        if (child == 0)
            kill_child(fd, log, datagen_rng_next(&rng));
        state_test_kill(child, log, (long)datagen_rng_below(&rng, 5000));
        assert_int_equal(uzram_adopt(fd, &dev), 0);
        during[atomic_load(&log->doing)]++;
        underway += kill_check(dev, log);
        if (round % 50 == 49 || round == KILL_ROUNDS - 1) {
            /* Nothing leaks: every page discarded, the pool gives everything back. */
            assert_int_equal(uzram_discard(dev, 0, config.disksize), 0);
            assert_int_equal(uzram_compact(dev, NULL), 0);
            struct uzram_stats stats = test_stats(dev);
            assert_int_equal(stats.pages_stored, 0);
            assert_int_equal(stats.compr_data_size, 0);
            assert_int_equal(stats.mem_used_total, 0);
            state_test_log_zeros(log);
        }
        uzram_destroy(dev);
    }
    /* The kills came in the middle of changes (not all between them). */
    printf("%u kills: %u in writes or discards (%u with a page changing), %u in recompression, "
           "%u in compaction, %u between calls\n",
           KILL_ROUNDS, during[STATE_TEST_CHANGE], underway, during[STATE_TEST_RECOMPRESS],
           during[STATE_TEST_COMPACT], during[STATE_TEST_BETWEEN]);
    assert_true(underway >= KILL_ROUNDS / 10);
    assert_true(during[STATE_TEST_RECOMPRESS] > 0 && during[STATE_TEST_COMPACT] > 0);
    munmap(log, sizeof *log);
    close(fd);
}

/* ---- writers in parallel ---------------------------------------------------------- */

#define CONCURRENT_THREADS 4u
#define CONCURRENT_PAGES 1024u /* per thread, interleaved: threads share intent records */

struct writer {
    struct uzram *dev;
    unsigned id;
    uint32_t gens[CONCURRENT_PAGES];
};

static void *concurrent_writer(void *arg)
{
    struct writer *w = arg;
    struct datagen_rng rng;
    datagen_rng_seed(&rng, w->id + 1);
    unsigned char page[PAGE];
    for (unsigned n = 0; n < 3000; n++) {
        unsigned slot = (unsigned)datagen_rng_below(&rng, CONCURRENT_PAGES);
        uint64_t index = (uint64_t)slot * CONCURRENT_THREADS + w->id;
        uint32_t gen = n % 9 == 0 ? 0 : (uint32_t)datagen_rng_below(&rng, 500) + 1;
        int rc;
        if (gen == 0) {
            rc = uzram_discard(w->dev, index * PAGE, PAGE);
        } else {
            state_test_page(index, gen, page);
            rc = uzram_write(w->dev, index * PAGE, page, PAGE);
        }
        if (rc != 0)
            return "write failed";
        w->gens[slot] = gen;
        if (w->id == 0 && n % 500 == 0 && uzram_compact(w->dev, NULL) != 0)
            return "compact failed";
    }
    return NULL;
}

static void test_state_concurrent_writers(void **unused)
{
    (void)unused;
    int fd = state_test_memfd();
    struct uzram_config config = config_of(CONCURRENT_THREADS * CONCURRENT_PAGES * (uint64_t)PAGE);
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    static struct writer writers[CONCURRENT_THREADS];
    for (unsigned t = 0; t < CONCURRENT_THREADS; t++)
        writers[t] = (struct writer){.dev = dev, .id = t};
    state_test_run_threads(concurrent_writer, writers, sizeof writers[0], CONCURRENT_THREADS);
    struct uzram_stats before = test_stats(dev);
    assert_int_equal(uzram_state_quiesce(dev), 0);
    uzram_destroy(dev);
    assert_int_equal(uzram_adopt(fd, &dev), 0);
    static uint32_t gens[CONCURRENT_THREADS * CONCURRENT_PAGES];
    for (unsigned t = 0; t < CONCURRENT_THREADS; t++)
        for (unsigned slot = 0; slot < CONCURRENT_PAGES; slot++)
            gens[(uint64_t)slot * CONCURRENT_THREADS + t] = writers[t].gens[slot];
    state_test_check(dev, gens, CONCURRENT_THREADS * CONCURRENT_PAGES);
    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.pages_stored, before.pages_stored);
    assert_int_equal(after.compr_data_size, before.compr_data_size);
    uzram_destroy(dev);
    close(fd);
}

/* ---- allocation failures ------------------------------------------------------------ */

/* Each allocation of making a state and of adopting one fails once: the call says -ENOMEM,
 * and the state stays as it was: made again from nothing, or adopted the next time with every
 * page. Only in the fault build (make fault-check). */
static void test_state_fault_sweep(void **unused)
{
    (void)unused;
    uint32_t gens[64];
    for (unsigned i = 0; i < 64; i++)
        gens[i] = i % 3 ? i + 1 : 0;
    const struct uzram_config config = config_of(64 * PAGE);
    state_test_fault_sweep(&config, gens, 64, "state create and adopt");
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_state_events_survive_kill),
        cmocka_unit_test(test_state_version_refused),
        cmocka_unit_test(test_state_owner_alive_refused),
        cmocka_unit_test(test_state_keeps_dedup_and_bundles),
        cmocka_unit_test(test_state_sparse_reads),
        cmocka_unit_test(test_state_reserve_kept),
        cmocka_unit_test(test_state_survives_kills),
        cmocka_unit_test(test_state_concurrent_writers),
        cmocka_unit_test(test_state_fault_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
