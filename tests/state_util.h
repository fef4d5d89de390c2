/* state_util.h - helpers shared by the tests of a device's state file (test_state.c,
 * test_state_kept.c): the file, pages by generation written and read back, and the part of
 * the SIGKILL harness both run. */
#ifndef UZRAM_TEST_STATE_UTIL_H
#define UZRAM_TEST_STATE_UTIL_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "test_util.h"

#define STATE_TEST_PAGE 4096u
/* A generation not under way (a kill log's pending entry). */
#define STATE_TEST_NONE UINT32_MAX

/* The kind of page generation `gen` (not 0) holds. Each test that links state_util.o
 * defines it: which kinds of page its devices store is the test's choice. */
enum datagen_kind state_test_kind(uint32_t gen);

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

/* After a kill: page `index` reads as its last finished generation `*done` or, when a change
 * was under way, the one in `*pending`; both settled to what it holds, which is returned. */
uint32_t state_test_settle(struct uzram *dev, uint64_t index, _Atomic uint32_t *done,
                           _Atomic uint32_t *pending);

/* Let `child` run until it has set `*adopted` (or died), `pause_us` microseconds more, then
 * SIGKILL it and reap it, asserting that the kill is what ended it. */
void state_test_kill(pid_t child, _Atomic uint32_t *adopted, long pause_us);

#endif
