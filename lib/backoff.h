/* backoff.h - the wait step of the engine's spin locks (page slots, dedup pins) (internal).
 * Spin briefly, then yield: a holder may have been preempted on a machine with few cores. */
#ifndef UZRAM_BACKOFF_H
#define UZRAM_BACKOFF_H

#include <sched.h>

static inline void lock_backoff(unsigned *spins)
{
    if (++*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        sched_yield();
    }
}

#endif
