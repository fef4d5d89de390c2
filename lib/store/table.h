/* table.h - the page table's memory (internal; table.c): mapped lazily at create, unmapped at
 * destroy, faulted in ahead of need under a reserve, its pages whose slots are all empty given
 * back by uzram_compact(). */
#ifndef UZRAM_TABLE_H
#define UZRAM_TABLE_H

#include <stdint.h>

struct uzram;

/* The bytes of the table of dev->page_count slots: what a group charges a member as it joins
 * and the table_mem statistic. */
uint64_t table_bytes(const struct uzram *dev);

/* Map the table of dev->page_count slots into dev->slots: 0 or -ENOMEM. */
int table_map(struct uzram *dev);

/* Unmap it (destroy). */
void table_unmap(struct uzram *dev);

/* Make the whole table present without writing to it (uzram_set_mem_reserve). */
void table_prefault(struct uzram *dev);

/* Give back the pages of the table whose slots are all empty: how many. */
uint64_t table_give_back(struct uzram *dev);

#endif
