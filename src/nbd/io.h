/* io.h - the byte I/O seam of an NBD session (io.c): plain socket or TLS, one contract. */
#ifndef UZRAM_NBD_IO_H
#define UZRAM_NBD_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct nbd_session;

/* The byte I/O seam (io.c): the socket functions' contracts (recv(); util_send_iov_timeout,
 * util_send_iov_by, util_send_all_by, util_read_full_by, util_discard_by), over the socket
 * or the connection's TLS session. nbd_io_wait_readable polls for input unless decrypted
 * bytes are already waiting: 1 readable, 0 timeout, negative errno. nbd_io_midway: bytes
 * have come that make nothing yet (part of a TLS record), so a request has started. */
ssize_t nbd_io_recv(struct nbd_session *s, void *buf, size_t length, int flags);
bool nbd_io_midway(struct nbd_session *s);
int nbd_io_wait_readable(struct nbd_session *s, int timeout_ms);
int nbd_io_send_iov_timeout(struct nbd_session *s, struct iovec *iov, int count,
                            int timeout_seconds);
int nbd_io_send_iov_by(struct nbd_session *s, struct iovec *iov, int count, uint64_t deadline_ms);
int nbd_io_send_all_by(struct nbd_session *s, const void *buf, size_t length, uint64_t deadline_ms);
int nbd_io_read_full_by(struct nbd_session *s, void *buf, size_t length, uint64_t deadline_ms);
int nbd_io_discard_by(struct nbd_session *s, uint64_t length, uint64_t deadline_ms);

#endif
