/* backoff.h - the wait step of the engine's spin locks (page slots, dedup pins) (internal),
 * and the deadline of a wait on a lock word in a state file (backoff.c).
 * Spin briefly, then yield: a holder may have been preempted on a machine with few cores. */
#ifndef UZRAM_BACKOFF_H
#define UZRAM_BACKOFF_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

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

/*
 * A wait on a lock word that lives in a state file (state.h: slot locks, intent records,
 * the dedup index's entries and records, bundle records). Another process of the user, or
 * damage, may have written the word, and a word held for good must not stall a request (and
 * with it the server's stop) for ever: such a wait ends, false, once the word stayed held
 * LOCK_WAIT_SECONDS of wall time, far longer than any holder keeps one (a few stores, one
 * page's work; a holder preempted for seconds included); the caller then fails with -EIO and
 * counts it (state_lock_timeouts). The clock (vDSO, a fraction of a step's sched_yield) is
 * read only after LOCK_WAIT_SPINS steps, then at each: a wait that ends in time costs what
 * lock_backoff() costs, and one that does not ends on time however long a yield takes on a
 * busy machine. The time between two readings counts at most LOCK_WAIT_STEP_NS: a process
 * stopped (SIGSTOP, a debugger, a frozen cgroup) and continued has not waited meanwhile, its
 * holders did not run either. A word in anonymous memory (a device without a state file) has
 * no deadline: `bounded` false.
 */
#define LOCK_WAIT_SECONDS 10
#define LOCK_WAIT_SPINS 1024u
#define LOCK_WAIT_STEP_NS 1000000000u

struct lock_wait {
    unsigned spins;
    bool bounded;
    uint64_t last;   /* CLOCK_MONOTONIC ns of the last reading; 0: none yet */
    uint64_t waited; /* ns counted since the first reading */
};

/* The slow half of lock_wait(): false once the deadline passed (backoff.c). */
bool lock_wait_in_time(struct lock_wait *wait);

/* One step of a wait: false when it has to end (the word held past the deadline). */
static inline bool lock_wait(struct lock_wait *wait)
{
    lock_backoff(&wait->spins);
    if (!wait->bounded || wait->spins < LOCK_WAIT_SPINS)
        return true;
    return lock_wait_in_time(wait);
}

#ifdef UZRAM_TEST_HOOKS
/* Tests: the deadline in milliseconds (0: LOCK_WAIT_SECONDS again), so that a test of a word
 * held for good ends in a moment. */
void lock_wait_test_deadline(unsigned milliseconds);
#endif

#endif
