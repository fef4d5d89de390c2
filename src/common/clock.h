/* clock.h - the one clock the program's deadlines and timings are on: CLOCK_MONOTONIC, which
 * no change of the wall clock moves. The util_ prefix marks the program's own helpers (not
 * libuzram's). */
#ifndef UZRAM_COMMON_CLOCK_H
#define UZRAM_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC now, in nanoseconds. */
static inline uint64_t util_now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000 + (uint64_t)now.tv_nsec;
}

/* CLOCK_MONOTONIC now, in milliseconds: what deadlines (`deadline_ms`) are given in. */
static inline uint64_t util_now_ms(void)
{
    return util_now_ns() / 1000000;
}

#endif
