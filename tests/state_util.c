/* state_util.c - helpers shared by the tests of a device's state file (see state_util.h). */
#include "state_util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/fault.h"

int state_test_memfd(void)
{
    int fd = memfd_create("uzram-test-state", MFD_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

struct uzram *state_test_device(int fd, uint64_t pages)
{
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = pages * STATE_TEST_PAGE;
    struct uzram *dev;
    assert_int_equal(uzram_create_in(&config, fd, &dev), 0);
    return dev;
}

uint64_t (*state_test_index_of)(uint64_t index, uint32_t gen);

void state_test_page(uint64_t index, uint32_t gen, unsigned char *page)
{
    if (gen == 0)
        memset(page, 0, STATE_TEST_PAGE);
    else
        datagen_page(gen, state_test_kind(gen),
                     state_test_index_of ? state_test_index_of(index, gen) : index, page);
}

void state_test_write(struct uzram *dev, uint64_t index, uint32_t gen)
{
    unsigned char page[STATE_TEST_PAGE];
    state_test_page(index, gen, page);
    assert_int_equal(uzram_write(dev, index * STATE_TEST_PAGE, page, STATE_TEST_PAGE), 0);
}

void state_test_check(struct uzram *dev, const uint32_t *gens, uint64_t pages)
{
    unsigned char want[STATE_TEST_PAGE], got[STATE_TEST_PAGE];
    for (uint64_t i = 0; i < pages; i++) {
        state_test_page(i, gens[i], want);
        assert_int_equal(uzram_read(dev, i * STATE_TEST_PAGE, got, STATE_TEST_PAGE), 0);
        assert_memory_equal(got, want, STATE_TEST_PAGE);
    }
}

struct uzram *state_test_adopt_faulted(int fd, uint64_t nth, uint64_t *hits)
{
    struct uzram *dev = NULL;
    fault_arm(nth);
    int rc = uzram_adopt(fd, &dev);
    *hits = fault_hits();
    fault_disarm();
    if (*hits) {
        assert_int_equal(rc, -ENOMEM);
        assert_int_equal(uzram_adopt(fd, &dev), 0);
    } else
        assert_int_equal(rc, 0);
    return dev;
}

void *state_test_log_new(size_t size)
{
    struct state_test_log *log =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(log != MAP_FAILED);
    for (unsigned i = 0; i < STATE_TEST_LOG_PAGES; i++)
        atomic_init(&log->pending[i], STATE_TEST_NONE);
    atomic_init(&log->next_gen, 1);
    return log;
}

void state_test_log_mark(struct state_test_log *log, uint64_t first, unsigned count, uint32_t gen,
                         bool end)
{
    for (unsigned i = 0; i < count; i++) {
        if (end)
            atomic_store(&log->done[first + i], gen);
        atomic_store(&log->pending[first + i], end ? STATE_TEST_NONE : gen);
    }
}

void state_test_log_zeros(struct state_test_log *log)
{
    for (unsigned i = 0; i < STATE_TEST_LOG_PAGES; i++)
        atomic_store(&log->done[i], 0);
}

/* One change of a kill child's mix: the call's return. */
static int run_change(struct uzram *dev, struct state_test_log *log,
                      const struct state_test_mix *mix, unsigned op, uint64_t first, unsigned count)
{
    uint64_t at = first * STATE_TEST_PAGE, bytes = count * (uint64_t)STATE_TEST_PAGE;
    int rc;
    if (op < mix->writes) {
        unsigned char page[STATE_TEST_PAGE];
        uint32_t gen = atomic_fetch_add(&log->next_gen, 1);
        state_test_log_mark(log, first, 1, gen, false);
        state_test_page(first, gen, page);
        rc = uzram_write(dev, at, page, STATE_TEST_PAGE);
        state_test_log_mark(log, first, 1, gen, true);
    } else {
        state_test_log_mark(log, first, count, 0, false);
        rc = op < mix->discards ? uzram_discard(dev, at, bytes)
                                : uzram_write_zeroes(dev, at, bytes, true);
        state_test_log_mark(log, first, count, 0, true);
    }
    return rc;
}

void state_test_run(struct uzram *dev, struct state_test_log *log, const struct state_test_mix *mix,
                    uint64_t seed)
{
    atomic_store(&log->adopted, 1);
    struct datagen_rng rng;
    datagen_rng_seed(&rng, seed);
    for (;;) {
        unsigned op = (unsigned)datagen_rng_below(&rng, 100);
        uint64_t first = datagen_rng_below(&rng, mix->pages);
        unsigned count = 1 + (unsigned)datagen_rng_below(&rng, 8);
        if (first + count > mix->pages)
            count = (unsigned)(mix->pages - first);
        int rc;
        atomic_store(&log->doing, op < mix->zeroes       ? STATE_TEST_CHANGE
                                  : op < mix->recompress ? STATE_TEST_RECOMPRESS
                                  : op < mix->writeback  ? STATE_TEST_WRITEBACK
                                                         : STATE_TEST_COMPACT);
        if (op < mix->zeroes)
            rc = run_change(dev, log, mix, op, first, count);
        else if (op < mix->recompress)
            rc = uzram_recompress(dev, 0, 0, mix->recompress_pages, 0, NULL);
        else if (op < mix->writeback)
            rc = uzram_writeback(dev, 0, first,
                                 first + 63 < mix->pages ? first + 63 : mix->pages - 1, NULL);
        else
            rc = uzram_compact(dev, NULL);
        rc = rc == -ENOSPC && op >= mix->recompress && op < mix->writeback ? 0 : rc;
        atomic_store(&log->doing, STATE_TEST_BETWEEN);
        if (rc != 0)
            _exit(2);
    }
}

pid_t state_test_fork(struct state_test_log *log)
{
    atomic_store(&log->adopted, 0);
    pid_t child = fork();
    assert_true(child >= 0);
    return child;
}

struct uzram *state_test_child_adopt(int fd, struct state_test_log *log, struct datagen_rng *rng,
                                     uint64_t seed)
{
    struct uzram *dev;
    if (uzram_adopt(fd, &dev) != 0)
        _exit(2);
    atomic_store(&log->adopted, 1);
    datagen_rng_seed(rng, seed);
    return dev;
}

void state_test_draw(struct datagen_rng *rng, uint64_t pages, unsigned *op, uint64_t *first,
                     unsigned *count)
{
    *op = (unsigned)datagen_rng_below(rng, 100);
    *first = datagen_rng_below(rng, pages);
    *count = 1 + (unsigned)datagen_rng_below(rng, 8);
    if (*first + *count > pages)
        *count = (unsigned)(pages - *first);
}

void state_test_kill(pid_t child, struct state_test_log *log, long pause_us)
{
    while (!atomic_load(&log->adopted) && waitpid(child, NULL, WNOHANG) == 0)
        sched_yield();
    struct timespec pause = {0, pause_us * 1000};
    nanosleep(&pause, NULL);
    kill(child, SIGKILL);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

uint32_t state_test_settle(struct uzram *dev, struct state_test_log *log, uint64_t index)
{
    unsigned char got[STATE_TEST_PAGE], want[STATE_TEST_PAGE];
    assert_int_equal(uzram_read(dev, index * STATE_TEST_PAGE, got, STATE_TEST_PAGE), 0);
    uint32_t gen = atomic_load(&log->done[index]), pending = atomic_load(&log->pending[index]);
    state_test_page(index, gen, want);
    if (memcmp(got, want, STATE_TEST_PAGE) != 0) {
        assert_true(pending != STATE_TEST_NONE);
        state_test_page(index, pending, want);
        assert_memory_equal(got, want, STATE_TEST_PAGE);
        gen = pending;
    }
    /* the child's change is over, one way or the other */
    atomic_store(&log->done[index], gen);
    atomic_store(&log->pending[index], STATE_TEST_NONE);
    return gen;
}

struct uzram_stats state_test_empty(struct uzram *dev, uint64_t pages)
{
    assert_int_equal(uzram_discard(dev, 0, pages * STATE_TEST_PAGE), 0);
    assert_int_equal(uzram_compact(dev, NULL), 0);
    struct uzram_stats empty = test_stats(dev);
    assert_int_equal(empty.pages_stored, 0);
    assert_int_equal(empty.compr_data_size, 0);
    assert_int_equal(empty.mem_used_total, 0);
    return empty;
}

static bool state_test_fault_round(uint64_t nth, const struct uzram_config *config,
                                   const uint32_t *gens, uint64_t pages)
{
    int fd = state_test_memfd();
    struct uzram *dev = NULL;
    fault_arm(nth);
    int rc = uzram_create_in(config, fd, &dev);
    uint64_t made_hits = fault_hits();
    fault_disarm();
    if (made_hits) {
        assert_int_equal(rc, -ENOMEM);
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        assert_int_equal(st.st_size, 0);
        assert_int_equal(uzram_create_in(config, fd, &dev), 0);
    } else
        assert_int_equal(rc, 0);
    for (uint64_t i = 0; i < pages; i++)
        state_test_write(dev, i, gens[i]);
    struct uzram_stats before = test_stats(dev);
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
    state_test_check(dev, gens, pages);
    struct uzram_stats after = test_stats(dev);
    assert_int_equal(after.pages_stored, before.pages_stored);
    assert_int_equal(after.compr_data_size, before.compr_data_size);
    assert_int_equal(after.dedup_entries, before.dedup_entries);
    assert_int_equal(after.dup_data_size, before.dup_data_size);
    uzram_destroy(dev);
    close(fd);
    return made_hits || adopt_hits;
}

void state_test_fault_sweep(const struct uzram_config *config, const uint32_t *gens, uint64_t pages,
                            const char *what)
{
    if (!fault_enabled())
        skip();
    uint64_t swept = 0;
    while (state_test_fault_round(swept + 1, config, gens, pages))
        swept++;
    printf("%s: %llu fault points swept\n", what, (unsigned long long)swept);
    assert_true(swept > 0);
}

void state_test_run_threads(void *(*thread_main)(void *), void *args, size_t size, unsigned threads)
{
    pthread_t ids[threads];
    for (unsigned t = 0; t < threads; t++)
        assert_int_equal(pthread_create(&ids[t], NULL, thread_main, (char *)args + t * size), 0);
    for (unsigned t = 0; t < threads; t++) {
        void *failed;
        assert_int_equal(pthread_join(ids[t], &failed), 0);
        assert_null(failed);
    }
}
