/* socket_io.h - bytes over a socket, whole: reads and sends that survive partial transfers
 * and keep a deadline (on clock.h's clock) however slowly the peer goes, a reply read to its
 * end within a size, and a socket's own timeouts. The NBD server, the control socket's both
 * sides and `uzram bench nbd` move their bytes with these. */
#ifndef UZRAM_COMMON_SOCKET_IO_H
#define UZRAM_COMMON_SOCKET_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Read exactly `length` bytes. Returns 1 when done, 0 on end of file before
 * the first byte, -ECONNRESET on end of file in the middle, -errno on error
 * (-EAGAIN when a receive timeout expired), -ETIMEDOUT once CLOCK_MONOTONIC
 * passes `deadline_ms` (0: no deadline), however the bytes trickle in. */
int util_read_full_by(int fd, void *buf, size_t length, uint64_t deadline_ms);

/* Read and throw away `length` bytes (a payload we refuse but must skip), with a
 * deadline as util_read_full_by(). */
int util_discard_by(int fd, uint64_t length, uint64_t deadline_ms);

/* Send every byte of the iovec array (which is modified), looping over
 * partial sends and IOV_MAX. MSG_NOSIGNAL: a vanished peer is -EPIPE, not a
 * signal. Returns 0 or -errno (-EAGAIN when a send timeout expired). */
int util_send_iov(int fd, struct iovec *iov, int count);
/* The same with an overall deadline: -ETIMEDOUT if the whole message is not
 * out within `timeout_seconds` (a peer that reads a trickle cannot hold the
 * sender for longer). */
int util_send_iov_timeout(int fd, struct iovec *iov, int count, int timeout_seconds);
/* The same with a deadline on CLOCK_MONOTONIC (milliseconds, 0: none), for a
 * whole exchange that must end in time (a handshake, a control request):
 * -ETIMEDOUT once it has passed, however slowly the peer reads. */
int util_send_iov_by(int fd, struct iovec *iov, int count, uint64_t deadline_ms);
/* util_send_iov_by() of one buffer. */
int util_send_all_by(int fd, const void *buf, size_t length, uint64_t deadline_ms);

/* Read from `fd` until the peer closes, by `deadline_ms` (CLOCK_MONOTONIC), at most `max`
 * bytes: 0 with *out (malloc'd, NUL-terminated; NULL when nothing came) and *length;
 * -EFBIG when more than `max` bytes came, -ETIMEDOUT, -ENOMEM, or -errno of recv. */
int util_read_to_end(int fd, size_t max, uint64_t deadline_ms, char **out, size_t *length);

/* Set SO_RCVTIMEO / SO_SNDTIMEO in seconds (0: no timeout). */
int util_set_timeouts(int fd, int receive_seconds, int send_seconds);

#endif
