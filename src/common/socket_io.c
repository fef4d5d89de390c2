/* socket_io.c - bytes over a socket, whole and in time (socket_io.h): partial reads and sends
 * looped over, every wait bounded by poll() against a deadline. */
#include "common/socket_io.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "common/clock.h"

int util_read_full_by(int fd, void *buf, size_t length, uint64_t deadline_ms)
{
    unsigned char *p = buf;
    size_t done = 0;

    while (done < length) {
        if (deadline_ms) {
            uint64_t now = util_now_ms();
            if (now >= deadline_ms)
                return -ETIMEDOUT;
            struct pollfd wait = {.fd = fd, .events = POLLIN};
            int ready = poll(&wait, 1, (int)(deadline_ms - now));
            if (ready < 0 && errno != EINTR)
                return -errno;
            if (ready <= 0)
                continue;
        }
        ssize_t n = recv(fd, p + done, length - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return done == 0 ? 0 : -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno == EWOULDBLOCK)
            return -EAGAIN;
        return -errno;
    }
    return 1;
}

int util_discard_by(int fd, uint64_t length, uint64_t deadline_ms)
{
    unsigned char scratch[65536];

    while (length > 0) {
        size_t chunk = length < sizeof scratch ? (size_t)length : sizeof scratch;
        int rc = util_read_full_by(fd, scratch, chunk, deadline_ms);
        if (rc <= 0)
            return rc == 0 ? -ECONNRESET : rc;
        length -= chunk;
    }
    return 0;
}

/* Plain blocking sends when timeout_ms < 0 and deadline_ms == 0 (SO_SNDTIMEO
 * still applies). Otherwise non-blocking sends that poll while the socket is
 * full, until CLOCK_MONOTONIC `deadline_ms` when one is given, else for
 * `timeout_ms` from the moment the socket is first full: that deadline is only
 * read off the clock then, as most sends never wait. */
static int send_iov(int fd, struct iovec *iov, int count, int64_t timeout_ms, uint64_t deadline_ms)
{
    bool waits = timeout_ms >= 0 || deadline_ms != 0;
    while (count > 0) {
        /* Skip exhausted entries so a zero-length buffer never stalls the loop. */
        if (iov->iov_len == 0) {
            iov++;
            count--;
            continue;
        }
        struct msghdr message = {0};
        message.msg_iov = iov;
        message.msg_iovlen = count < IOV_MAX ? (size_t)count : IOV_MAX;
        ssize_t n = sendmsg(fd, &message, MSG_NOSIGNAL | (waits ? MSG_DONTWAIT : 0));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EWOULDBLOCK && waits) {
                if (deadline_ms == 0)
                    deadline_ms = util_now_ms() + (uint64_t)timeout_ms;
                uint64_t now = util_now_ms();
                if (now >= deadline_ms)
                    return -ETIMEDOUT;
                uint64_t left = deadline_ms - now;
                struct pollfd pfd = {fd, POLLOUT, 0};
                if (poll(&pfd, 1, (int)(left > 60000 ? 60000 : left)) < 0 && errno != EINTR)
                    return -errno;
                continue;
            }
            if (errno == EWOULDBLOCK)
                return -EAGAIN;
            return -errno;
        }
        size_t sent = (size_t)n;
        while (count > 0 && sent >= iov->iov_len) {
            sent -= iov->iov_len;
            iov++;
            count--;
        }
        if (count > 0) {
            iov->iov_base = (char *)iov->iov_base + sent;
            iov->iov_len -= sent;
        }
    }
    return 0;
}

int util_send_iov(int fd, struct iovec *iov, int count)
{
    return send_iov(fd, iov, count, -1, 0);
}

int util_send_iov_timeout(int fd, struct iovec *iov, int count, int timeout_seconds)
{
    return send_iov(fd, iov, count, (int64_t)timeout_seconds * 1000, 0);
}

int util_send_iov_by(int fd, struct iovec *iov, int count, uint64_t deadline_ms)
{
    return send_iov(fd, iov, count, -1, deadline_ms);
}

int util_send_all_by(int fd, const void *buf, size_t length, uint64_t deadline_ms)
{
    struct iovec iov = {(void *)buf, length};
    return send_iov(fd, &iov, 1, -1, deadline_ms);
}

int util_set_timeouts(int fd, int receive_seconds, int send_seconds)
{
    struct timeval receive = {receive_seconds, 0};
    struct timeval send = {send_seconds, 0};

    if (receive_seconds >= 0 &&
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &receive, sizeof receive) < 0)
        return -errno;
    if (send_seconds >= 0 && setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send, sizeof send) < 0)
        return -errno;
    return 0;
}

int util_read_to_end(int fd, size_t max, uint64_t deadline_ms, char **out, size_t *length)
{
    char *text = NULL;
    size_t used = 0, capacity = 0;
    int rc = 0;
    *out = NULL;
    *length = 0;
    for (;;) {
        if (capacity - used < 4096 && capacity <= max) {
            capacity = capacity ? capacity * 2 : 8192;
            char *bigger = realloc(text, capacity + 1);
            if (bigger == NULL) {
                rc = -ENOMEM;
                break;
            }
            text = bigger;
        }
        uint64_t now = util_now_ms();
        if (now >= deadline_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        struct pollfd wait = {.fd = fd, .events = POLLIN};
        int ready = poll(&wait, 1, (int)(deadline_ms - now));
        if (ready < 0 && errno != EINTR) {
            rc = -errno;
            break;
        }
        if (ready <= 0)
            continue;
        /* One byte past `max` is asked for, to tell a reply of exactly `max` from a longer one. */
        size_t room = capacity - used < max + 1 - used ? capacity - used : max + 1 - used;
        ssize_t n = recv(fd, text + used, room, MSG_DONTWAIT);
        if (n == 0)
            break;
        if (n < 0 && errno != EINTR && errno != EAGAIN) {
            rc = -errno;
            break;
        }
        used += n > 0 ? (size_t)n : 0;
        if (used > max) {
            rc = -EFBIG;
            break;
        }
    }
    if (rc < 0) {
        free(text);
        return rc;
    }
    if (text != NULL)
        text[used] = '\0';
    *out = text;
    *length = used;
    return 0;
}
