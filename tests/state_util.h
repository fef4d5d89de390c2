/* state_util.h - helpers shared by the tests of a device's state file (test_state.c,
 * test_state_kept.c): the file, pages by generation written and read back, and the part of
 * the SIGKILL harness both run. */
#ifndef UZRAM_TEST_STATE_UTIL_H
#define UZRAM_TEST_STATE_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "test_util.h"

#define STATE_TEST_PAGE 4096u
/* A generation not under way (a kill log's pending entry). */
#define STATE_TEST_NONE UINT32_MAX

/* The kind of page generation `gen` (not 0) holds. Each test that links state_util.o
 * defines it: which kinds of page its devices store is the test's choice. */
enum datagen_kind state_test_kind(uint32_t gen);

/* The index datagen makes page `index` of generation `gen` at: its own by default, so that no
 * two pages are equal; a test whose pages share contents (dedup) points it elsewhere. */
extern uint64_t (*state_test_index_of)(uint64_t index, uint32_t gen);

/* Runs thread_main(args + t * size) in `threads` threads and joins them; a thread that returns
 * non-NULL (what failed) fails the test. */
void state_test_run_threads(void *(*thread_main)(void *), void *args, size_t size,
                            unsigned threads);

/* An empty memfd for a state; aborts the test on failure. */
int state_test_memfd(void);

/* A device of `pages` pages made in the state file `fd`, defaults otherwise. */
struct uzram *state_test_device(int fd, uint64_t pages);

/* The contents of page `index` at generation `gen`: 0 is a page of zeros, the others
 * datagen pages of state_test_kind(gen). */
void state_test_page(uint64_t index, uint32_t gen, unsigned char *page);

/* Write page `index` at generation `gen`. */
void state_test_write(struct uzram *dev, uint64_t index, uint32_t gen);

/* Pages 0 to `pages` - 1 read back as generations `gens`. */
void state_test_check(struct uzram *dev, const uint32_t *gens, uint64_t pages);

/* Pages 0 to `pages` - 1 discarded and the device compacted: nothing stored, no memory used
 * (asserted). Returns the stats then, for the caller's further checks. */
struct uzram_stats state_test_empty(struct uzram *dev, uint64_t pages);

/* A fault sweep (fault build; skipped elsewhere): a state made with `config` and adopted, the
 * first, second, ... allocation failing in either, until none fails. A failed call says
 * -ENOMEM and leaves the state as it was (made again from nothing: the file empty; adopted the
 * next time); pages 0 to `pages` - 1, written as generations `gens` between the two, read back
 * with the counts unchanged. Prints how many points were swept, `what` first. */
struct uzram_config;
void state_test_fault_sweep(const struct uzram_config *config, const uint32_t *gens, uint64_t pages,
                            const char *what);
/* Adopt the state in `fd` with fault point `nth` armed (fault build): when that fails, it
 * must fail with -ENOMEM, having hit a fault point, and adopting again without faults works.
 * The points hit by the armed try in *hits. */
struct uzram *state_test_adopt_faulted(int fd, uint64_t nth, uint64_t *hits);

/* ---- a child SIGKILLed at a random moment ---- */

/* The most pages a kill test follows. */
#define STATE_TEST_LOG_PAGES 1024u

/* What the child was doing, in memory it shares with the parent: per page the generation of
 * its last finished change and the one under way (STATE_TEST_NONE). A test's own log starts
 * with one and adds what else it counts. */
struct state_test_log {
    _Atomic uint32_t done[STATE_TEST_LOG_PAGES];
    _Atomic uint32_t pending[STATE_TEST_LOG_PAGES];
    _Atomic uint32_t next_gen; /* the generation of the next change */
    _Atomic uint32_t adopted;  /* the child has taken the state over */
    _Atomic uint32_t doing;    /* state_test_run's child: a STATE_TEST_ doing */
};

/* A log of `size` bytes (a struct that starts with a struct state_test_log, zeroed) shared
 * with the children: every page zeros, none changing, the first change generation 1. Free it
 * with munmap(log, size). */
void *state_test_log_new(size_t size);

/* Pages `first` to `first` + `count` - 1 begin (`end` false) or end a change to `gen`. */
void state_test_log_mark(struct state_test_log *log, uint64_t first, unsigned count, uint32_t gen,
                         bool end);

/* Every page is zeros again (the parent discarded them all). */
void state_test_log_zeros(struct state_test_log *log);

/* A child for the next round: 0 in the child, its pid in the parent. */
pid_t state_test_fork(struct state_test_log *log);

/* In the child: the state in `fd` adopted (exit 2 if it cannot be), the parent told, `rng`
 * seeded with `seed`. */
struct datagen_rng;
struct uzram *state_test_child_adopt(int fd, struct state_test_log *log, struct datagen_rng *rng,
                                     uint64_t seed);

/* A random step of a child: *op below 100, *count pages (1 to 8) from *first, all below
 * `pages`. */
void state_test_draw(struct datagen_rng *rng, uint64_t pages, unsigned *op, uint64_t *first,
                     unsigned *count);
/* What a kill child is doing (state_test_run's `doing`), for the parent to count. */
enum {
    STATE_TEST_BETWEEN,
    STATE_TEST_CHANGE,
    STATE_TEST_RECOMPRESS,
    STATE_TEST_COMPACT,
    STATE_TEST_WRITEBACK,
    STATE_TEST_DOINGS
};

/* A kill child's mix of changes to pages 0 to `pages` - 1, by a draw of 0..99: below
 * `writes` a page written, below `discards` 1..8 pages discarded, below `zeroes` written as
 * zeroes, below `recompress` a uzram_recompress() of `recompress_pages` pages at most (0: no
 * limit), below `writeback` 64 pages written back (a backing store attached; one full is no
 * failure), else a uzram_compact(). */
struct state_test_mix {
    uint64_t pages;
    unsigned writes, discards, zeroes, recompress, writeback;
    uint64_t recompress_pages;
};

/* A kill child that adopted `dev`: says so in the log, then changes pages as `mix` says,
 * drawn from `seed`, what it does in log->doing, until it is killed (exit 2 on a failure). */
_Noreturn void state_test_run(struct uzram *dev, struct state_test_log *log,
                              const struct state_test_mix *mix, uint64_t seed);

/* Let `child` run until it has adopted the state (or died), `pause_us` microseconds more,
 * then SIGKILL it and reap it, asserting that the kill is what ended it. */
void state_test_kill(pid_t child, struct state_test_log *log, long pause_us);

/* After a kill: page `index` reads as its last finished generation or, when a change was
 * under way, as the one pending; the log settled to what it holds, which is returned. */
uint32_t state_test_settle(struct uzram *dev, struct state_test_log *log, uint64_t index);

#endif
