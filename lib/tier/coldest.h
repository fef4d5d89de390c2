/* coldest.h - which pages writeback takes first when memory is full (internal; coldest.c). */
#ifndef UZRAM_COLDEST_H
#define UZRAM_COLDEST_H

#include <stdint.h>

struct uzram;

/* Under writeback's lock: the last access (store_now()) at or before which a page in memory
 * counts as cold when the pool is full: that of the oldest sixteenth of the pages in memory,
 * estimated from a sample of slots spread over the table, from *sample_start, which moves on
 * with each call. `now` when nothing is in memory. */
uint32_t coldest_cutoff(struct uzram *dev, uint64_t *sample_start, uint32_t now);

#endif
