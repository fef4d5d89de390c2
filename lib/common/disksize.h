/* disksize.h - the disk sizes uzram_create() takes (internal). */
#ifndef UZRAM_DISKSIZE_H
#define UZRAM_DISKSIZE_H

#include <stdint.h>

#include "uzram.h"

/* 0, -EINVAL (0, not whole pages, past 2^44 pages) or -E2BIG (its page table would take
 * more than 1/UZRAM_TABLE_MEMORY_SHARE of the machine's memory, as zram's allocation of its
 * table would fail). */
int disksize_check(uint64_t disksize);

#endif
