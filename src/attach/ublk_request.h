/* ublk_request.h - what one request of the kernel's ublk driver does to the engine, and the
 * result its commit gives back to the driver. Kept apart from ublk.c's rings and threads (and
 * inline, so that a test links no io_uring) for tests/test_ublk_request.c, which serves
 * requests of every kind and size on a real engine without a kernel. */
#ifndef UZRAM_ATTACH_UBLK_REQUEST_H
#define UZRAM_ATTACH_UBLK_REQUEST_H

#include <errno.h>
#include <linux/ublk_cmd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uzram.h"

/* The result to commit for a request of `op` over `length` bytes that the engine answered
 * `rc` (0 or a negative errno) for. The driver (Linux 6.12's __ublk_complete_rq) fails a
 * request whose result is negative, takes a READ's or WRITE's as the bytes done, and ends
 * every other one (FLUSH, DISCARD, WRITE_ZEROES) as done at any result >= 0. So those say 0:
 * their length, which the advertised limits let reach 4 GiB - 4 KiB, is negative as an int
 * from 2 GiB on, and the driver failed such a request after the engine had done it. A READ or
 * WRITE is at most max_sectors (the request buffer), which an int holds. */
static inline int ublk_request_result(unsigned op, uint64_t length, int rc)
{
    if (rc < 0)
        return rc;
    if (op != UBLK_IO_OP_READ && op != UBLK_IO_OP_WRITE)
        return 0;
    return length <= INT32_MAX ? (int)length : -EINVAL;
}

/* A write to a swap device that found the pool at its memory limit: the kernel writes a swap
 * slot only from a page it holds in memory (a slot it has just taken, or the slot of a page it
 * read back and changed since), so what the range held is dead, and is dropped to make room
 * before the write is tried once more. Kernel zram, told of every slot freed, holds no such
 * pages; a ublk device hears only of whole free clusters (swapon --discard), and without this
 * a slot the kernel reused while its dead page still filled the limit could never be written. */
static inline int ublk_swap_rewrite(struct uzram *dev, uint64_t offset, const void *buffer,
                                    uint64_t length)
{
    int rc = uzram_discard(dev, offset, length);
    return rc < 0 ? rc : uzram_write(dev, offset, buffer, length);
}

/* Serve request `iod` on `dev`, its data in `buffer` of `buffer_bytes` (the tag's): the result
 * to commit. `swap`: a swap device's (attach --swap), whose writes at the memory limit drop
 * what their range held (ublk_swap_rewrite). A write-zeroes with UBLK_IO_F_NOUNMAP (the block
 * layer's REQ_NOUNMAP: BLKZEROOUT, which `blkdiscard -z` sends, and fallocate's ZERO_RANGE) keeps
 * its pages allocated, stored as zero pages, as NBD's NO_HOLE does; without it (fallocate's
 * PUNCH_HOLE) they are dropped as by a discard. The flag is a bit of op_flags itself, not of
 * ublksrv_get_flags()'s shifted value. */
static inline int ublk_request_serve(struct uzram *dev, bool read_only, bool swap,
                                     const struct ublksrv_io_desc *iod, void *buffer,
                                     size_t buffer_bytes)
{
    uint64_t offset = iod->start_sector << 9;
    uint64_t length = (uint64_t)iod->nr_sectors << 9;
    unsigned op = ublksrv_get_op(iod);
    int rc;
    switch (op) {
    case UBLK_IO_OP_READ:
        rc = length <= buffer_bytes ? uzram_read(dev, offset, buffer, length) : -EINVAL;
        break;
    case UBLK_IO_OP_WRITE:
        rc = read_only               ? -EROFS
             : length > buffer_bytes ? -EINVAL
                                     : uzram_write(dev, offset, buffer, length);
        if (rc == -ENOSPC && swap)
            rc = ublk_swap_rewrite(dev, offset, buffer, length);
        break;
    case UBLK_IO_OP_FLUSH:
        rc = 0;
        break;
    case UBLK_IO_OP_DISCARD:
        rc = read_only ? -EROFS : uzram_discard(dev, offset, length);
        break;
    case UBLK_IO_OP_WRITE_ZEROES:
        rc = read_only ? -EROFS
                       : uzram_write_zeroes(dev, offset, length,
                                            (iod->op_flags & UBLK_IO_F_NOUNMAP) != 0);
        break;
    default:
        rc = -EOPNOTSUPP;
    }
    return ublk_request_result(op, length, rc);
}

#endif
