/* io.c - the byte I/O seam of an NBD connection: every byte the handshake and the
 * transmission phase read or write goes through here, to the socket or, after STARTTLS, to
 * the connection's TLS session (tls.c). Each function keeps the socket function's contract. */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include "nbd/io.h"
#include "nbd/session.h"
#include "nbd/tls.h"
#include "common/clock.h"
#include "common/socket_io.h"

ssize_t nbd_io_recv(struct nbd_session *s, void *buf, size_t length, int flags)
{
    if (s->tls)
        return nbd_tls_recv(s, buf, length, flags);
    return recv(s->fd, buf, length, flags);
}

bool nbd_io_midway(struct nbd_session *s)
{
    return s->tls != NULL && nbd_tls_midway(s);
}

int nbd_io_wait_readable(struct nbd_session *s, int timeout_ms)
{
    if (s->tls && nbd_tls_pending(s) > 0)
        return 1;
    struct pollfd p = {s->fd, POLLIN, 0};
    int ready = poll(&p, 1, timeout_ms);
    if (ready < 0 && errno != EINTR)
        return -errno;
    return ready > 0;
}

int nbd_io_send_iov_timeout(struct nbd_session *s, struct iovec *iov, int count,
                            int timeout_seconds)
{
    if (s->tls)
        return nbd_tls_send_iov(s, iov, count, (int64_t)timeout_seconds * 1000, 0);
    return util_send_iov_timeout(s->fd, iov, count, timeout_seconds);
}

int nbd_io_send_iov_by(struct nbd_session *s, struct iovec *iov, int count, uint64_t deadline_ms)
{
    if (s->tls)
        return nbd_tls_send_iov(s, iov, count, -1, deadline_ms);
    return util_send_iov_by(s->fd, iov, count, deadline_ms);
}

int nbd_io_send_all_by(struct nbd_session *s, const void *buf, size_t length, uint64_t deadline_ms)
{
    struct iovec iov = {(void *)buf, length};
    return nbd_io_send_iov_by(s, &iov, 1, deadline_ms);
}

/* util_read_full_by() through TLS: records are taken without waiting, and the socket is
 * polled against the deadline only when no decrypted byte is left. */
static int tls_read_full_by(struct nbd_session *s, unsigned char *p, size_t length,
                            uint64_t deadline_ms)
{
    size_t done = 0;
    while (done < length) {
        ssize_t n = nbd_tls_recv(s, p + done, length - done, MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return done == 0 ? 0 : -ECONNRESET;
        if (errno != EWOULDBLOCK)
            return -errno;
        int timeout = -1;
        if (deadline_ms) {
            uint64_t now = util_now_ms();
            if (now >= deadline_ms)
                return -ETIMEDOUT;
            timeout = (int)(deadline_ms - now);
        }
        int ready = nbd_io_wait_readable(s, timeout);
        if (ready < 0)
            return ready;
    }
    return 1;
}

int nbd_io_read_full_by(struct nbd_session *s, void *buf, size_t length, uint64_t deadline_ms)
{
    if (s->tls)
        return tls_read_full_by(s, buf, length, deadline_ms);
    return util_read_full_by(s->fd, buf, length, deadline_ms);
}

int nbd_io_discard_by(struct nbd_session *s, uint64_t length, uint64_t deadline_ms)
{
    if (!s->tls)
        return util_discard_by(s->fd, length, deadline_ms);
    unsigned char scratch[16384];
    while (length > 0) {
        size_t chunk = length < sizeof scratch ? (size_t)length : sizeof scratch;
        int rc = tls_read_full_by(s, scratch, chunk, deadline_ms);
        if (rc <= 0)
            return rc == 0 ? -ECONNRESET : rc;
        length -= chunk;
    }
    return 0;
}
