/* compact_index.h - index compaction, the store's half (internal; compact_index.c). */
#ifndef UZRAM_COMPACT_INDEX_H
#define UZRAM_COMPACT_INDEX_H

#include <stdint.h>

struct uzram;

/* Move the dedup index's entries from its sparse high chunks down to free ids below
 * (dedup_move), each with every page slot that names it held locked, and then give the
 * emptied chunks back (dedup_trim). An entry another thread holds a reference on stays
 * where it is, for a later pass. Nothing under a pool reserve or without dedup. Returns the
 * entries moved. */
uint64_t store_compact_index(struct uzram *dev);

#ifdef UZRAM_TEST_HOOKS
/* Test builds: the process SIGKILLs itself once `updates` more page slots have been pointed at
 * a moved entry's new id (a move's slots split between the old id and the new; negative: never),
 * as a kill at that instant would leave it for a successor (test_state_dedup.c). */
void store_index_test_kill_after(long updates);
#endif

#endif
