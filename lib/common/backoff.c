/* backoff.c - the deadline of a wait on a lock word in a state file (backoff.h): the clock, read
 * once a wait has lasted LOCK_WAIT_SPINS steps, each gap between readings counted up to
 * LOCK_WAIT_STEP_NS. */
#include "common/backoff.h"

#include <stdatomic.h>
#include <time.h>

static _Atomic uint64_t deadline_ns = (uint64_t)LOCK_WAIT_SECONDS * 1000000000u;

bool lock_wait_in_time(struct lock_wait *wait)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    if (wait->last != 0) {
        uint64_t gap = ns - wait->last;
        wait->waited += gap < LOCK_WAIT_STEP_NS ? gap : LOCK_WAIT_STEP_NS;
    }
    wait->last = ns;
    return wait->waited < atomic_load_explicit(&deadline_ns, memory_order_relaxed);
}

#ifdef UZRAM_TEST_HOOKS
void lock_wait_test_deadline(unsigned milliseconds)
{
    atomic_store(&deadline_ns, milliseconds ? (uint64_t)milliseconds * 1000000u
                                            : (uint64_t)LOCK_WAIT_SECONDS * 1000000000u);
}
#endif
