/* file_extents.h - the parts of a sparse file that hold data (internal; file_extents.c), found
 * with lseek(SEEK_DATA/SEEK_HOLE) so that its holes are never read: reading a hole of shared
 * memory would make it memory. */
#ifndef UZRAM_FILE_EXTENTS_H
#define UZRAM_FILE_EXTENTS_H

#include <stdint.h>

/* Call `each` for every extent [from, to) of data of `fd` within [start, end), in order, while
 * it returns 0: 0, what `each` returned, or -errno of lseek. */
int file_each_data(int fd, uint64_t start, uint64_t end,
                   int (*each)(void *arg, uint64_t from, uint64_t to), void *arg);

#endif
