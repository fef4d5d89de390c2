/* fault.h - fault injection points for the engine's allocations, compression calls and
 * backing-store I/O.
 * FAULT_POINT(kind) is the constant 0 unless a test build has -DUZRAM_FAULT_INJECTION. */
#ifndef UZRAM_FAULT_H
#define UZRAM_FAULT_H

#include <stdbool.h>
#include <stdint.h>

/*
 * A fault point guards one place where the engine can fail for a reason
 * outside its control: an allocation (malloc, mmap, a dedup id, a
 * compression context), a compression call, or an I/O of the backing store
 * (a disk that fails). Written as
 *
 *     ptr = FAULT_POINT(FAULT_ALLOC) ? NULL : malloc(size);
 *     if (FAULT_POINT(FAULT_COMPRESS)) return -EIO;
 *
 * so that the injected failure takes the very error path a real one would.
 *
 * In a fault build a test arms a global countdown with fault_arm(n): the
 * n-th fault point reached afterwards (counting only the kinds armed, from
 * any thread) fails, once; every other call goes through. Sweeping n = 1,
 * 2, 3, ... over a deterministic workload until a run ends with
 * fault_hits() == 0 makes every reachable site fail once.
 *
 * Elsewhere the macro is 0 and the compiler drops the branch. The functions
 * below are test hooks: they exist only in the test archive (libuzram-test.a,
 * built with -DUZRAM_TEST_HOOKS), where without -DUZRAM_FAULT_INJECTION they
 * do nothing, so every test links either way. libuzram.a and libuzram.so
 * have none of them.
 */

enum fault_kind {
    FAULT_ALLOC = 1u,    /* memory: malloc, mmap, dedup ids, contexts */
    FAULT_COMPRESS = 2u, /* a compression call reports a library error */
    FAULT_IO = 4u,       /* a read or write of the backing store fails (EIO) */
    FAULT_ANY = 7u,
};

/* Only test builds have the countdown (fault.c is built into the test
 * archive alone), so only they may turn the points on. */
#if defined(UZRAM_FAULT_INJECTION) && defined(UZRAM_TEST_HOOKS)
#define FAULT_STRINGIFY2(x) #x
#define FAULT_STRINGIFY(x) FAULT_STRINGIFY2(x)
#define FAULT_POINT(kind) fault_fire((kind), __FILE__ ":" FAULT_STRINGIFY(__LINE__))
#else
#define FAULT_POINT(kind) 0
#endif

/* True if this build was made with -DUZRAM_FAULT_INJECTION. */
bool fault_enabled(void);

/* Make the nth fault point of a kind in `kinds` (a mask of enum fault_kind)
 * fail; nth counts from 1. fault_arm(n) is fault_arm_kinds(n, FAULT_ANY).
 * Resets the call and hit counters. */
void fault_arm(uint64_t nth);
void fault_arm_kinds(uint64_t nth, unsigned kinds);

/* Stop injecting; the counters keep their values. */
void fault_disarm(void);

/* While paused, fault points neither count nor fail: a test checks the
 * device between operations without moving the countdown. */
void fault_pause(bool paused);

/* Failures injected since the last arm (0 or 1). */
uint64_t fault_hits(void);

/* Fault points of an armed kind reached since the last arm, failed or not. */
uint64_t fault_calls(void);

/* Site ("file:line") of the last injected failure, or NULL. */
const char *fault_last_site(void);

/* Distinct sites that have failed at least once since the program started:
 * how many, and the name of the i-th. */
unsigned fault_site_count(void);
const char *fault_site_name(unsigned index);

/* Called by FAULT_POINT: true if this call must fail. */
bool fault_fire(unsigned kind, const char *site);

#endif
