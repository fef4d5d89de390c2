/* disksize.c - the disk sizes a device may have: whole pages, at most 2^44 of them, and a page
 * table (UZRAM_TABLE_BYTES_PER_PAGE a page) within a share of the machine's memory. */
#include "common/disksize.h"

#include <errno.h>
#include <unistd.h>

/* 2^44 pages of 4 KiB is 64 PiB: far past any machine, and slot values
 * and dedup ids stay well inside their bit fields. */
#define MAX_PAGE_COUNT (1ull << 44)

int disksize_check(uint64_t disksize)
{
    if (disksize == 0 || disksize % UZRAM_PAGE_SIZE || disksize / UZRAM_PAGE_SIZE > MAX_PAGE_COUNT)
        return -EINVAL;
    /* The table is mapped lazily, but a client writing one page in every 256 makes it all
     * resident: what zram's vmalloc of the table would refuse, refused here. */
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    uint64_t memory = pages > 0 && page_size > 0 ? (uint64_t)pages * (uint64_t)page_size : 0;
    uint64_t table = disksize / UZRAM_PAGE_SIZE * UZRAM_TABLE_BYTES_PER_PAGE;
    return memory != 0 && table > memory / UZRAM_TABLE_MEMORY_SHARE ? -E2BIG : 0;
}
