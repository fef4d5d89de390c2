/* test_pool_reserve.c - unit tests of the pool's reserve (lib/pool/pool_reserve.c, uzram serve
 * --swap): its thread fills and refills it, a dry reserve fails spans at once, and the thread
 * runs below the threads that make spans from it. */
#include <dirent.h>
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pool/pool.h"
#include "pool/pool_reserve.h"
#include "test_util.h"

static struct pool *new_pool(void)
{
    struct pool *pool = NULL;
    assert_int_equal(pool_create(&pool), 0);
    assert_non_null(pool);
    return pool;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Wait (at most 10 s) until the span cache holds at least `bytes`. */
static bool cache_reaches(struct pool *pool, uint64_t bytes)
{
    for (double end = seconds_now() + 10; seconds_now() < end;) {
        if (pool_span_cache_bytes(pool) >= bytes)
            return true;
        usleep(1000);
    }
    return false;
}

#define RESERVE_OBJECTS 3000u

/* The reserve (uzram serve --swap): its thread fills it and refills it while new spans are
 * made from it (named concurrent: TSan runs it), objects read back, pool memory with the
 * reserve never passes the limit, and at the limit an allocation fails at once instead of
 * waiting for a reserve that cannot come. */
static void test_reserve_concurrent(void **state)
{
    (void)state;
    struct pool *pool = new_pool();
    assert_int_equal(pool_set_reserve(pool, POOL_RESERVE_MAX + 1), -EINVAL);
    assert_int_equal(pool_set_reserve(pool, 1 << 20), 0);
    assert_true(cache_reaches(pool, 1 << 20));

    uint64_t *handles = calloc(RESERVE_OBJECTS, sizeof *handles);
    assert_non_null(handles);
    for (unsigned i = 0; i < RESERVE_OBJECTS; i++) {
        size_t size = 200 + (i * 37) % 3000; /* spans of many classes and lengths */
        assert_int_equal(pool_alloc(pool, size, i + 1, &handles[i]), 0);
        test_fill_kind(i, DATAGEN_TEXT, pool_map(pool, handles[i]), size);
    }
    assert_true(pool_mem_used(pool) > (3u << 20));
    assert_true(cache_reaches(pool, 1 << 20)); /* refilled */
    unsigned char expected[4096];
    for (unsigned i = 0; i < RESERVE_OBJECTS; i++) {
        size_t size = 200 + (i * 37) % 3000;
        test_fill_kind(i, DATAGEN_TEXT, expected, size);
        assert_memory_equal(pool_map(pool, handles[i]), expected, size);
    }

    /* A limit 2 MiB above what is used: the reserve stays under it, and so does every
     * allocation; the first that does not fit fails without waiting out the reserve. */
    uint64_t limit = pool_mem_used(pool) + (2u << 20);
    pool_set_limit(pool, limit);
    uint64_t handle;
    int rc = 0;
    double start = 0;
    for (unsigned i = 0; rc == 0 && i < 100000; i++) {
        start = seconds_now();
        rc = pool_alloc(pool, 3000, RESERVE_OBJECTS + i + 1, &handle);
        assert_true(pool_mem_used(pool) + pool_span_cache_bytes(pool) <= limit);
    }
    assert_true(rc == -ENOSPC || rc == -ENOMEM);
    assert_true(seconds_now() - start < 1.0);
    free(handles);
    pool_destroy(pool); /* stops the reserve's thread */
}

/* The reserve runs dry (serve --swap under memory exhaustion: its thread is stuck faulting
 * memory in): the first span that finds no window waits for the thread and fails; the next
 * ones fail at once, without a wait of their own (one timeout for the whole dry spell), each
 * counted; once the thread caches a window again, spans are made from it. */
static void test_reserve_dry(void **state)
{
    (void)state;
    enum { MOST = 100000, AFTER = 5 };
    struct pool *pool = new_pool();
    assert_int_equal(pool_set_reserve(pool, 1 << 20), 0);
    assert_true(cache_reaches(pool, 1 << 20));
    pool_reserve_pause(pool, true); /* as if stuck in reclaim */
    uint64_t *handles = calloc(MOST, sizeof *handles);
    assert_non_null(handles);
    unsigned stored = 0;
    int rc = 0;
    while (rc == 0 && stored < MOST) {
        rc = pool_alloc(pool, 3000, stored + 1, &handles[stored]);
        if (rc == 0)
            stored++;
    }
    assert_int_equal(rc, -ENOMEM);
    assert_true(stored > 0 && stored < MOST);
    struct pool_reserve_counts counts;
    pool_reserve_counts(pool, &counts);
    assert_int_equal(counts.timeouts, 1);
    assert_int_equal(counts.empty, 1);

    uint64_t handle;
    for (unsigned i = 0; i < AFTER; i++)
        assert_int_equal(pool_alloc(pool, 3000, MOST + 1, &handle), -ENOMEM);
    pool_reserve_counts(pool, &counts);
    assert_int_equal(counts.timeouts, 1); /* none of them waited it out again */
    assert_int_equal(counts.empty, 1 + AFTER);
    assert_true(counts.dry);

    pool_reserve_pause(pool, false);
    for (double end = seconds_now() + 10; counts.dry && seconds_now() < end; usleep(1000))
        pool_reserve_counts(pool, &counts);
    assert_false(counts.dry);
    assert_int_equal(pool_alloc(pool, 3000, MOST + 1, &handle), 0);
    pool_reserve_counts(pool, &counts);
    assert_int_equal(counts.timeouts, 1);
    assert_int_equal(counts.empty, 1 + AFTER);
    pool_free(pool, handle);
    for (unsigned i = 0; i < stored; i++)
        pool_free(pool, handles[i]);
    pool_reserve_reset_counts(pool);
    pool_reserve_counts(pool, &counts);
    assert_int_equal(counts.empty + counts.timeouts, 0);
    free(handles);
    pool_destroy(pool);
}

/* The id of this process's thread named `name`, or 0. */
static pid_t thread_named(const char *name)
{
    DIR *tasks = opendir("/proc/self/task");
    assert_non_null(tasks);
    pid_t found = 0;
    struct dirent *entry;
    while (found == 0 && (entry = readdir(tasks)) != NULL) {
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", entry->d_name);
        FILE *file = fopen(path, "re");
        if (file == NULL)
            continue;
        if (fgets(comm, sizeof comm, file) != NULL && strcmp(strtok(comm, "\n"), name) == 0)
            found = (pid_t)atoi(entry->d_name);
        fclose(file);
    }
    closedir(tasks);
    return found;
}

/* The policy and priority of the reserve's thread, made by a thread of `policy` at
 * `priority`; false where that is refused (no CAP_SYS_NICE). */
static bool reserve_thread_policy(int policy, int priority, int *got, int *got_priority)
{
    struct sched_param param = {.sched_priority = priority}, normal = {0};
    int rc = pthread_setschedparam(pthread_self(), policy, &param);
    if (rc == EPERM)
        return false;
    assert_int_equal(rc, 0);
    struct pool *pool = new_pool();
    rc = pool_set_reserve(pool, 1 << 20);
    assert_int_equal(pthread_setschedparam(pthread_self(), SCHED_OTHER, &normal), 0);
    assert_int_equal(rc, 0);
    assert_true(cache_reaches(pool, 1 << 20)); /* the thread is past its start */
    pid_t refiller = thread_named("uzram-reserve");
    assert_true(refiller > 0);
    *got = sched_getscheduler(refiller);
    assert_int_equal(sched_getparam(refiller, &param), 0);
    *got_priority = param.sched_priority;
    pool_destroy(pool);
    return true;
}

/* serve --swap runs its threads SCHED_FIFO at 2; the reserve's thread, made by one of them,
 * runs at 1: real-time, its faults may take pages below the min watermark, but a thread that
 * serves a request preempts it (at the same priority, its faults spinning in reclaim kept the
 * thread that completes swap-outs off a one-CPU guest for minutes). Made by a thread at the
 * lowest real-time priority it runs SCHED_OTHER, and a normal creator's stays normal. */
static void test_reserve_thread_below_creator(void **state)
{
    (void)state;
    int policy, priority;
    if (!reserve_thread_policy(SCHED_FIFO, 2, &policy, &priority))
        skip();
    assert_int_equal(policy, SCHED_FIFO);
    assert_int_equal(priority, 1);
    assert_true(reserve_thread_policy(SCHED_FIFO, 1, &policy, &priority));
    assert_int_equal(policy, SCHED_OTHER);
    assert_true(reserve_thread_policy(SCHED_OTHER, 0, &policy, &priority));
    assert_int_equal(policy, SCHED_OTHER);
}

/* The blocks of `fd` (st_blocks, 512 bytes each). */
static long long file_blocks(int fd)
{
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    return (long long)st.st_blocks;
}

/* A pool in a state file with a reserve: the spans a thread frees are punched out of the file
 * by the reserve's thread, never by the thread that frees. A punch takes the file's inode
 * lock, which the reserve's thread holds while it allocates the file's pages, and under swap
 * pressure that allocation waits for the swap-out the freeing thread is serving
 * (tests/vm/ublk-restart.sh swap hung so). With the reserve's thread paused (as if stuck in
 * such an allocation) the frees return and the file keeps its blocks; once it is back they go,
 * and the windows are used again. */
static void test_reserve_file_punched_by_refiller(void **state)
{
    (void)state;
    enum { OBJECTS = 14000, SIZE = 3000 };
    int fd = memfd_create("pool-state", MFD_CLOEXEC);
    assert_true(fd >= 0);
    size_t dir_bytes = POOL_WINDOWS * sizeof(uint32_t);
    assert_int_equal(ftruncate(fd, (off_t)(POOL_FILE_BYTES + dir_bytes)), 0);
    _Atomic uint32_t *dir =
        mmap(NULL, dir_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)POOL_FILE_BYTES);
    assert_true(dir != MAP_FAILED);
    struct pool *pool = new_pool();
    pool_set_file(pool, fd, 0, dir, POOL_FILE_BYTES);
    assert_int_equal(pool_set_reserve(pool, 1 << 20), 0);
    assert_true(cache_reaches(pool, 1 << 20));
    uint64_t *handles = calloc(OBJECTS, sizeof *handles);
    assert_non_null(handles);
    for (unsigned i = 0; i < OBJECTS; i++) {
        assert_int_equal(pool_alloc(pool, SIZE, i + 1, &handles[i]), 0);
        memset(pool_map(pool, handles[i]), (int)(i & 0xff), SIZE);
    }
    pool_reserve_pause(pool, true);
    /* The thread may be punching what the allocations queued (the tails of reserve windows
     * longer than their spans) when it is paused: until that punch ends, the file shrinks. */
    long long before = file_blocks(fd);
    for (double end = seconds_now() + 5; seconds_now() < end;) {
        usleep(100000);
        long long now = file_blocks(fd);
        if (now == before)
            break;
        before = now;
    }
    for (unsigned i = 0; i < OBJECTS; i++)
        pool_free(pool, handles[i]);
    /* Beyond the span cache (16 MiB + the reserve) the spans were given back: not one punched */
    assert_int_equal(file_blocks(fd), before);
    pool_reserve_pause(pool, false);
    long long want = before - (long long)((uint64_t)(OBJECTS * SIZE - (24u << 20)) / 512);
    for (double end = seconds_now() + 10; file_blocks(fd) > want && seconds_now() < end;)
        usleep(1000);
    assert_true(file_blocks(fd) <= want);
    for (unsigned i = 0; i < OBJECTS; i++) { /* the windows come back into use */
        assert_int_equal(pool_alloc(pool, SIZE, i + 1, &handles[i]), 0);
        memset(pool_map(pool, handles[i]), (int)(i & 0xff), SIZE);
    }
    unsigned char expected[SIZE];
    for (unsigned i = 0; i < OBJECTS; i++) {
        memset(expected, (int)(i & 0xff), SIZE);
        assert_memory_equal(pool_map(pool, handles[i]), expected, SIZE);
        pool_free(pool, handles[i]);
    }
    free(handles);
    pool_destroy(pool);
    munmap(dir, dir_bytes);
    close(fd);
}

/* Span headers under a reserve come from memory the reserve's thread faulted in ahead
 * (lib/pool/pool_headers.c), not from malloc, as much as the reserve's windows can take: with
 * that thread paused, spans of the class with the largest headers (256 objects of 16 bytes)
 * made from a 64 MiB reserve fail with -ENOMEM only once its windows are used up, the
 * failure counted as reserve_empty; once the thread is back, spans are made again. */
static void test_reserve_headers_last(void **state)
{
    (void)state;
    enum { MOST = 1100 * 256 };
    struct pool *pool = new_pool();
    assert_int_equal(pool_set_reserve(pool, POOL_RESERVE_MAX), 0);
    assert_true(cache_reaches(pool, POOL_RESERVE_MAX));
    pool_reserve_pause(pool, true);
    uint64_t *handles = calloc(MOST + 1, sizeof *handles);
    assert_non_null(handles);
    unsigned stored = 0;
    int rc = 0;
    while (rc == 0 && stored < MOST) {
        rc = pool_alloc(pool, 8, stored + 1, &handles[stored]);
        if (rc == 0)
            stored++;
    }
    assert_int_equal(rc, -ENOMEM);
    assert_int_equal(pool_span_cache_bytes(pool), 0); /* the windows ran out, not the headers */
    assert_int_equal(stored, POOL_RESERVE_MAX / (64 << 10) * 256);
    struct pool_reserve_counts counts;
    pool_reserve_counts(pool, &counts);
    assert_int_equal(counts.empty, 1);
    pool_reserve_pause(pool, false);
    for (double end = seconds_now() + 10; rc != 0 && seconds_now() < end; usleep(1000))
        rc = pool_alloc(pool, 8, stored + 1, &handles[stored]);
    assert_int_equal(rc, 0);
    stored++;
    for (unsigned i = 0; i < stored; i++)
        pool_free(pool, handles[i]);
    free(handles);
    pool_destroy(pool);
}

/* How many of the pages holding `count` addresses are resident (mincore). */
static unsigned resident_pages(unsigned char *const *at, unsigned count)
{
    unsigned resident = 0;
    for (unsigned i = 0; i < count; i++) {
        unsigned char in_core = 0;
        void *page = (void *)((uintptr_t)at[i] & ~(uintptr_t)4095);
        assert_int_equal(mincore(page, 4096, &in_core), 0);
        resident += in_core & 1;
    }
    return resident;
}

/* A pool in anonymous memory with a reserve: the pages of the spans a thread frees are given
 * back (madvise) by the reserve's thread, never by the thread that frees. madvise takes the
 * address space's lock, which the reserve's thread holds while it faults pages in, in reclaim
 * under swap pressure, and behind which another thread's munmap (the recompressor's) queued
 * and stopped the freeing thread (tests/vm/swap-memory.sh dense stalled so). With the
 * reserve's thread paused the frees return and the pages stay; once it is back they go. */
static void test_reserve_pages_given_back_by_refiller(void **state)
{
    (void)state;
    enum { OBJECTS = 14000, SIZE = 3000 };
    struct pool *pool = new_pool();
    assert_int_equal(pool_set_reserve(pool, 1 << 20), 0);
    assert_true(cache_reaches(pool, 1 << 20));
    uint64_t *handles = calloc(OBJECTS, sizeof *handles);
    unsigned char **at = calloc(OBJECTS, sizeof *at);
    assert_non_null(handles);
    assert_non_null(at);
    for (unsigned i = 0; i < OBJECTS; i++) {
        assert_int_equal(pool_alloc(pool, SIZE, i + 1, &handles[i]), 0);
        at[i] = pool_map(pool, handles[i]);
        memset(at[i], (int)(i & 0xff), SIZE);
    }
    pool_reserve_pause(pool, true);
    unsigned before = resident_pages(at, OBJECTS);
    for (unsigned i = 0; i < OBJECTS; i++)
        pool_free(pool, handles[i]);
    /* Beyond the reserve the spans were given back: not one page by this thread */
    assert_int_equal(resident_pages(at, OBJECTS), before);
    pool_reserve_pause(pool, false);
    for (double end = seconds_now() + 10;
         resident_pages(at, OBJECTS) > before / 4 && seconds_now() < end;)
        usleep(1000);
    assert_true(resident_pages(at, OBJECTS) <= before / 4);
    free(at);
    free(handles);
    pool_destroy(pool);
}

int main(int argc, char **argv)
{
    test_apply_filter(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reserve_concurrent),
        cmocka_unit_test(test_reserve_dry),
        cmocka_unit_test(test_reserve_thread_below_creator),
        cmocka_unit_test(test_reserve_file_punched_by_refiller),
        cmocka_unit_test(test_reserve_pages_given_back_by_refiller),
        cmocka_unit_test(test_reserve_headers_last),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
