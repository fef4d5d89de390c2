/* socket_client.c - the client side of the NBD fuzz targets' socketpairs.
 * Writing and reading in one poll loop keeps a full socket buffer from deadlocking. */
#include "socket_client.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static void fail(const char *what)
{
    fprintf(stderr, "fuzz client: %s: %s\n", what, strerror(errno));
    abort();
}

void *fuzz_client_main(void *arg)
{
    struct fuzz_client *c = arg;
    size_t written = 0;
    bool writing = c->input_size > 0;

    if (!writing)
        shutdown(c->fd, SHUT_WR);
    for (;;) {
        struct pollfd p = {c->fd, POLLIN | (writing ? POLLOUT : 0), 0};
        if (poll(&p, 1, -1) < 0) {
            if (errno != EINTR)
                fail("poll");
            continue;
        }
        if (writing && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t n = send(c->fd, c->input + written, c->input_size - written,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0)
                written += (size_t)n;
            /* EPIPE: the server stopped reading; the rest is never needed. */
            if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == c->input_size) {
                shutdown(c->fd, SHUT_WR);
                writing = false;
            }
        }
        if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
            if (c->output_capacity - c->output_size < 65536) {
                c->output_capacity = c->output_capacity * 2 + 65536;
                c->output = realloc(c->output, c->output_capacity);
                if (!c->output)
                    fail("out of memory");
            }
            ssize_t n = recv(c->fd, c->output + c->output_size, c->output_capacity - c->output_size,
                             MSG_DONTWAIT);
            if (n > 0)
                c->output_size += (size_t)n;
            else if (n == 0)
                return NULL; /* the server closed its sending side */
            else if (errno != EAGAIN && errno != EINTR)
                fail("recv");
        }
    }
}
