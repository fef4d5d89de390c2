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

/* Serve request `iod` on `dev`, its data in `buffer` of `buffer_bytes` (the tag's): the result
 * to commit. A write-zeroes with UBLK_IO_F_NOUNMAP (the block layer's REQ_NOUNMAP: BLKZEROOUT,
 * which `blkdiscard -z` sends, and fallocate's ZERO_RANGE) keeps its pages allocated, stored
 * as zero pages, as NBD's NO_HOLE does; without it (fallocate's PUNCH_HOLE) they are dropped
 * as by a discard. The flag is a bit of op_flags itself, not of ublksrv_get_flags()'s shifted
 * value. */
static inline int ublk_request_serve(struct uzram *dev, bool read_only,
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
