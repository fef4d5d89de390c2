/* swap_guard.c - `serve --swap` at its memory limit: a bound on the livelock that follows. Once
 * the pool is full every swap-out to the device fails (ENOSPC); Linux keeps the page, marks it
 * dirty again and retries it, and goes on reclaiming whatever else it can (the page cache of
 * the running programs, refaulted at once) for as long as the swap area has free slots, which
 * it takes as room. No OOM kill comes, and the program that needs the memory makes no
 * progress: tests/vm/swap.sh --limit saw it for minutes, with kernel zram at its mem_limit too.
 * The guard ends that: when every second for SWAP_GUARD_SECONDS a swap-out failed at the limit
 * and memory pressure stalled tasks for most of the second, it asks the kernel's OOM killer to
 * end one task (sysrq f), which takes the one its own rules pick (never this server: its
 * oom_score_adj is -1000). Run by the heap's keeper (swap.c) every HEAP_KEEP_MS. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"

/* How long the stall must last by default (--swap-stall-limit): long enough that a burst of failed
 * swap-outs while the program frees memory, or while the kernel turns to other pages, is not taken
 * for one; short enough to end a livelock well before the kernel's hung task reports (120 s). */
#define SWAP_GUARD_SECONDS 30
/* PSI "some" share of each of those seconds (at least one task waiting on memory): a program
 * whose working set fits in memory, while background reclaim fails to swap out cold pages at
 * the limit, is not stalled, and is left alone. */
#define SWAP_GUARD_PRESSURE_PERCENT 50

#define PRESSURE_PATH "/proc/pressure/memory"
#define SYSRQ_PATH "/proc/sysrq-trigger"

/* --swap-stall-limit's seconds; 0: the guard never acts. */
static unsigned guard_limit = SWAP_GUARD_SECONDS;

/* Writes refused for lack of room (ENOSPC), by every queue of every swap device. */
static _Atomic uint64_t nospace_writes;

/* The guard's state, touched only by the keeper's thread. */
static struct {
    bool started, off;
    int pressure_fd, sysrq_fd;
    struct timespec last;
    uint64_t last_writes, last_some_us;
    double stalled_seconds;
} guard = {.pressure_fd = -1, .sysrq_fd = -1};

void swap_guard_set_limit(unsigned seconds)
{
    guard_limit = seconds;
}

void swap_guard_note_nospace(void)
{
    atomic_fetch_add_explicit(&nospace_writes, 1, memory_order_relaxed);
}

/* PSI's "some" total (microseconds any task waited on memory since boot), or -1. Read through
 * one descriptor kept open: reading it again allocates nothing while memory is short. */
static int64_t pressure_some_us(int fd)
{
    char text[256];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return -1;
    text[n] = '\0';
    const char *total = strstr(text, "total=");
    return strncmp(text, "some ", 5) == 0 && total != NULL ? strtoll(total + 6, NULL, 10) : -1;
}

static double seconds_between(const struct timespec *from, const struct timespec *to)
{
    return (double)(to->tv_sec - from->tv_sec) + (double)(to->tv_nsec - from->tv_nsec) / 1e9;
}

/* Open what the guard reads and writes; without either it stays off, and says so once. */
static void guard_start(void)
{
    guard.started = true;
    guard.pressure_fd = open(PRESSURE_PATH, O_RDONLY | O_CLOEXEC);
    int64_t some = guard.pressure_fd >= 0 ? pressure_some_us(guard.pressure_fd) : -1;
    const char *why = some >= 0 ? NULL : guard.pressure_fd >= 0 ? "no PSI line" : strerror(errno);
    guard.sysrq_fd = why == NULL ? open(SYSRQ_PATH, O_WRONLY | O_CLOEXEC) : -1;
    if (why == NULL && guard.sysrq_fd < 0)
        why = strerror(errno);
    if (why != NULL) {
        fprintf(stderr, "uzram: --swap: no bound on a stall at the memory limit: %s: %s\n",
                some < 0 ? PRESSURE_PATH : SYSRQ_PATH, why);
        guard.off = true;
        return;
    }
    guard.last_some_us = (uint64_t)some;
    guard.last_writes = atomic_load(&nospace_writes);
    clock_gettime(CLOCK_MONOTONIC, &guard.last);
}

void swap_guard_tick(void)
{
    if (guard_limit == 0)
        return;
    if (!guard.started)
        guard_start();
    if (guard.off)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double elapsed = seconds_between(&guard.last, &now);
    if (elapsed < 1.0)
        return;
    int64_t some = pressure_some_us(guard.pressure_fd);
    uint64_t writes = atomic_load(&nospace_writes);
    if (some < 0)
        some = (int64_t)guard.last_some_us;
    double pressed = (double)((uint64_t)some - guard.last_some_us) / 1e6 / elapsed;
    bool failing = writes != guard.last_writes;
    guard.stalled_seconds = failing && pressed * 100 >= SWAP_GUARD_PRESSURE_PERCENT
                                ? guard.stalled_seconds + elapsed
                                : 0;
    guard.last = now;
    guard.last_writes = writes;
    guard.last_some_us = (uint64_t)some;
    if (guard.stalled_seconds < guard_limit)
        return;
    guard.stalled_seconds = 0;
    int rc = pwrite(guard.sysrq_fd, "f", 1, 0) == 1 ? 0 : errno;
    fprintf(stderr,
            "uzram: --swap: for %u s swap-outs failed at the memory limit every second while "
            "tasks waited on memory (%.0f%% of the last second): %s\n",
            guard_limit, pressed * 100,
            rc == 0 ? "asked the kernel's OOM killer to end a task (sysrq f)" : strerror(rc));
}
