/* file_extents.c - the data extents of a sparse file (see file_extents.h). */
#include "common/file_extents.h"

#include <errno.h>
#include <unistd.h>

int file_each_data(int fd, uint64_t start, uint64_t end,
                   int (*each)(void *arg, uint64_t from, uint64_t to), void *arg)
{
    uint64_t at = start;
    while (at < end) {
        off_t data = lseek(fd, (off_t)at, SEEK_DATA);
        if (data < 0)
            return errno == ENXIO ? 0 : -errno;
        if ((uint64_t)data >= end)
            return 0;
        off_t hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0)
            return -errno;
        uint64_t to = (uint64_t)hole < end ? (uint64_t)hole : end;
        int rc = each(arg, (uint64_t)data, to);
        if (rc)
            return rc;
        at = to;
    }
    return 0;
}
