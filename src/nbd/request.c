/* request.c - what an NBD request may be: the transmission flags offered to a session, the
 * check of each request against what the session agreed, and engine errors on the wire. */
#include <errno.h>

#include "nbd/exports.h"
#include "nbd/limits.h"
#include "nbd/protocol.h"
#include "nbd/request.h"
#include "nbd/session.h"

uint16_t nbd_transmission_flags(const struct nbd_export *export, const struct nbd_session *s)
{
    uint16_t flags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
                     NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_CAN_MULTI_CONN |
                     NBD_FLAG_SEND_CACHE | NBD_FLAG_SEND_FAST_ZERO;

    if (export->read_only)
        flags |= NBD_FLAG_READ_ONLY;
    /* The spec forbids SEND_DF unless structured replies were negotiated. */
    if (s->structured)
        flags |= NBD_FLAG_SEND_DF;
    return flags;
}

uint32_t nbd_errno_to_wire(int err)
{
    switch (err) {
    case 0:
        return 0;
    case EPERM:
    case EROFS:
        return NBD_EPERM;
    case ENOMEM:
        return NBD_ENOMEM;
    case EINVAL:
        return NBD_EINVAL;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return NBD_ENOSPC;
    case EOVERFLOW:
        return NBD_EOVERFLOW;
    case ENOTSUP:
        return NBD_ENOTSUP;
    case ESHUTDOWN:
        return NBD_ESHUTDOWN;
    default:
        return NBD_EIO;
    }
}

const char *nbd_command_name(uint16_t type)
{
    static const char *const names[] = {"READ", "WRITE", "DISC",         "FLUSH",
                                        "TRIM", "CACHE", "WRITE_ZEROES", "BLOCK_STATUS"};
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown command";
}

const char *nbd_wire_error_name(uint32_t error)
{
    switch (error) {
    case NBD_EPERM:
        return "EPERM";
    case NBD_EIO:
        return "EIO";
    case NBD_ENOMEM:
        return "ENOMEM";
    case NBD_EINVAL:
        return "EINVAL";
    case NBD_ENOSPC:
        return "ENOSPC";
    case NBD_EOVERFLOW:
        return "EOVERFLOW";
    case NBD_ENOTSUP:
        return "ENOTSUP";
    default:
        return "error";
    }
}

uint32_t nbd_check_request(const struct nbd_session *s, bool read_only, const struct nbd_request *r,
                           const char **reason)
{
    /* FUA must be accepted on every command once SEND_FUA is advertised. */
    uint16_t allowed = NBD_CMD_FLAG_FUA;
    bool ranged = true, writes = false;
    const char *unused;

    if (reason == NULL)
        reason = &unused;
    switch (r->type) {
    case NBD_CMD_READ:
        if (s->structured)
            allowed |= NBD_CMD_FLAG_DF;
        break;
    case NBD_CMD_WRITE:
    case NBD_CMD_TRIM:
        writes = true;
        break;
    case NBD_CMD_WRITE_ZEROES:
        writes = true;
        allowed |= NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
        break;
    case NBD_CMD_DISC:
    case NBD_CMD_FLUSH:
        ranged = false;
        break;
    case NBD_CMD_CACHE:
        break;
    case NBD_CMD_BLOCK_STATUS:
        allowed |= NBD_CMD_FLAG_REQ_ONE;
        break;
    default:
        *reason = "unknown command";
        return NBD_EINVAL;
    }
    if (r->flags & ~allowed) {
        *reason = "command flag not valid for this command";
        return NBD_EINVAL;
    }
    if (r->type == NBD_CMD_BLOCK_STATUS && !s->meta_allocation) {
        *reason = "BLOCK_STATUS without a selected meta context";
        return NBD_EINVAL;
    }
    if (writes && read_only) {
        *reason = "the export is read-only";
        return NBD_EPERM;
    }
    if (!ranged)
        return 0;
    if (r->offset % NBD_SERVER_MIN_BLOCK != 0 || r->length % NBD_SERVER_MIN_BLOCK != 0) {
        *reason = "offset or length not a multiple of 512";
        return NBD_EINVAL;
    }
    if ((r->type == NBD_CMD_READ || r->type == NBD_CMD_WRITE) &&
        r->length > NBD_SERVER_MAX_PAYLOAD) {
        *reason = "length above the 32 MiB maximum block size";
        return r->type == NBD_CMD_READ && s->structured ? NBD_EOVERFLOW : NBD_EINVAL;
    }
    /* A BLOCK_STATUS reply needs at least one non-empty descriptor. */
    if (r->type == NBD_CMD_BLOCK_STATUS && r->length == 0) {
        *reason = "zero-length BLOCK_STATUS";
        return NBD_EINVAL;
    }
    if (r->offset > s->size || r->length > s->size - r->offset) {
        *reason = "range past the end of the export";
        return (r->type == NBD_CMD_WRITE || r->type == NBD_CMD_WRITE_ZEROES) ? NBD_ENOSPC
                                                                             : NBD_EINVAL;
    }
    return 0;
}
