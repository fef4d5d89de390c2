/* request.h - what an NBD request may be (request.c): the transmission flags a session is
 * offered, the check of each request against them, and the engine's errors on the wire. */
#ifndef UZRAM_NBD_REQUEST_H
#define UZRAM_NBD_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

struct nbd_export;
struct nbd_session;

/* One parsed transmission request. */
struct nbd_request {
    uint16_t flags;
    uint16_t type;
    uint64_t cookie;
    uint64_t offset;
    uint32_t length;
};

/* Transmission flags for this export and session state. */
uint16_t nbd_transmission_flags(const struct nbd_export *export, const struct nbd_session *s);

/* Check a request against the negotiated session before anything is done
 * with it. Returns 0 or the NBD error to reply with; *reason (if not NULL)
 * then says why, for the log line and the error message. */
uint32_t nbd_check_request(const struct nbd_session *session, bool read_only,
                           const struct nbd_request *request, const char **reason);

/* Map a positive errno from the engine to the NBD error value. */
uint32_t nbd_errno_to_wire(int err);

/* "READ", "WRITE", ... and "EIO", "EINVAL", ...: names for log lines and error messages. */
const char *nbd_command_name(uint16_t type);
const char *nbd_wire_error_name(uint32_t error);

#endif
