/* nbd_connect.c - the client side of `uzram bench nbd`'s connection: connect over a Unix
 * socket or TCP, then the fixed newstyle handshake with NBD_OPT_GO, all by one deadline. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bench/nbd_connect.h"
#include "common/big_endian.h"
#include "common/clock.h"
#include "common/socket_io.h"
#include "nbd/protocol.h"

/* Longest option reply payload read: NBD_REP_INFO and error messages are far shorter. */
#define REPLY_DATA_MAX 65536

static int connect_unix(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) {
        fprintf(stderr, "uzram bench nbd: socket path too long: %s\n", path);
        return -ENAMETOOLONG;
    }
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        int err = errno;
        fprintf(stderr, "uzram bench nbd: cannot connect to %s: %s\n", path, strerror(err));
        close(fd);
        return -err;
    }
    return fd;
}

/* One address: a connected socket (non-blocking), or a negative errno. A connect() to a
 * stopped host can hang for minutes, so it waits by the handshake's deadline. */
static int connect_address(const struct addrinfo *address, uint64_t deadline_ms)
{
    int fd = socket(address->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int err = 0;
    if (connect(fd, address->ai_addr, address->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
            int remaining = (int)(deadline_ms - util_now_ms());
            struct pollfd wait = {.fd = fd, .events = POLLOUT};
            socklen_t length = sizeof err;
            if (remaining <= 0 || poll(&wait, 1, remaining) <= 0)
                err = ETIMEDOUT;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &length) != 0)
                err = errno;
        }
    }
    if (err) {
        close(fd);
        return -err;
    }
    return fd;
}

/* TCP: each address the name has (localhost: 127.0.0.1 and ::1) in turn, until one answers. */
static int connect_tcp(const char *host, const char *port, uint64_t deadline_ms)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *list;
    int rc = getaddrinfo(host, port, &hints, &list);
    if (rc != 0) {
        fprintf(stderr, "uzram bench nbd: cannot resolve %s: %s\n", host, gai_strerror(rc));
        return -EINVAL;
    }
    int fd = -ENOENT;
    for (const struct addrinfo *address = list; address && fd < 0; address = address->ai_next)
        fd = connect_address(address, deadline_ms);
    freeaddrinfo(list);
    if (fd < 0) {
        fprintf(stderr, "uzram bench nbd: cannot connect to %s port %s: %s\n", host, port,
                strerror(-fd));
        return fd;
    }
    int flags = fcntl(fd, F_GETFL);
    int one = 1;
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

/* What a failed exchange means to the user. */
static int io_error(int rc, const char *during)
{
    if (rc == -ETIMEDOUT)
        fprintf(stderr, "uzram bench nbd: the server did not answer in time during %s\n", during);
    else if (rc == 0 || rc == -ECONNRESET)
        fprintf(stderr, "uzram bench nbd: the server closed the connection during %s\n", during);
    else
        fprintf(stderr, "uzram bench nbd: %s failed: %s\n", during, strerror(-rc));
    return rc < 0 ? rc : -ECONNRESET;
}

static const char *rep_error_name(uint32_t type)
{
    switch (type) {
    case NBD_REP_ERR_UNSUP:
        return "NBD_REP_ERR_UNSUP";
    case NBD_REP_ERR_POLICY:
        return "NBD_REP_ERR_POLICY";
    case NBD_REP_ERR_INVALID:
        return "NBD_REP_ERR_INVALID";
    case NBD_REP_ERR_PLATFORM:
        return "NBD_REP_ERR_PLATFORM";
    case NBD_REP_ERR_TLS_REQD:
        return "NBD_REP_ERR_TLS_REQD (this client does not do TLS)";
    case NBD_REP_ERR_UNKNOWN:
        return "NBD_REP_ERR_UNKNOWN (no such export)";
    case NBD_REP_ERR_SHUTDOWN:
        return "NBD_REP_ERR_SHUTDOWN";
    case NBD_REP_ERR_BLOCK_SIZE_REQD:
        return "NBD_REP_ERR_BLOCK_SIZE_REQD";
    case NBD_REP_ERR_TOO_BIG:
        return "NBD_REP_ERR_TOO_BIG";
    default:
        return "an error";
    }
}

/* The greeting and the client flags. */
static int greet(int fd, uint64_t deadline_ms)
{
    unsigned char hello[18];
    int rc = util_read_full_by(fd, hello, sizeof hello, deadline_ms);
    if (rc != 1)
        return io_error(rc, "the greeting");
    if (util_get64(hello) != NBD_MAGIC ||
        (util_get64(hello + 8) != NBD_OPT_MAGIC && util_get64(hello + 8) != NBD_OLD_VERSION)) {
        fprintf(stderr, "uzram bench nbd: the peer is not an NBD server (no NBDMAGIC)\n");
        return -EPROTO;
    }
    uint16_t flags = util_get16(hello + 16);
    if (util_get64(hello + 8) != NBD_OPT_MAGIC || !(flags & NBD_FLAG_FIXED_NEWSTYLE)) {
        fprintf(stderr, "uzram bench nbd: the server does not speak fixed newstyle NBD\n");
        return -EPROTO;
    }
    unsigned char client_flags[4];
    util_put32(client_flags,
               NBD_FLAG_C_FIXED_NEWSTYLE | (flags & NBD_FLAG_NO_ZEROES ? NBD_FLAG_C_NO_ZEROES : 0));
    rc = util_send_all_by(fd, client_flags, sizeof client_flags, deadline_ms);
    return rc ? io_error(rc, "the handshake") : 0;
}

/* NBD_OPT_GO for `name`, asking for no extra information (the export's size and flags always
 * come). */
static int send_go(int fd, const char *name, uint64_t deadline_ms)
{
    size_t length = strlen(name);
    unsigned char head[16 + 4], tail[2];
    util_put64(head, NBD_OPT_MAGIC);
    util_put32(head + 8, NBD_OPT_GO);
    util_put32(head + 12, (uint32_t)(4 + length + 2));
    util_put32(head + 16, (uint32_t)length);
    util_put16(tail, 0);
    struct iovec iov[3] = {{head, sizeof head}, {(void *)name, length}, {tail, sizeof tail}};
    int rc = util_send_iov_by(fd, iov, 3, deadline_ms);
    return rc ? io_error(rc, "the handshake") : 0;
}

/* The replies to NBD_OPT_GO, up to its ACK. */
static int read_go_replies(int fd, const char *name, uint64_t deadline_ms,
                           struct bench_nbd_export *export)
{
    bool have_size = false;
    char *data = malloc(REPLY_DATA_MAX + 1);
    if (!data)
        return -ENOMEM;
    int rc;
    for (;;) {
        unsigned char head[20];
        rc = util_read_full_by(fd, head, sizeof head, deadline_ms);
        if (rc != 1) {
            rc = io_error(rc, "the handshake");
            break;
        }
        uint32_t type = util_get32(head + 12), length = util_get32(head + 16);
        if (util_get64(head) != NBD_REP_MAGIC || util_get32(head + 8) != NBD_OPT_GO ||
            length > REPLY_DATA_MAX) {
            fprintf(stderr, "uzram bench nbd: malformed option reply from the server\n");
            rc = -EPROTO;
            break;
        }
        rc = length ? util_read_full_by(fd, data, length, deadline_ms) : 1;
        if (rc != 1) {
            rc = io_error(rc, "the handshake");
            break;
        }
        data[length] = '\0';
        if (type & NBD_REP_FLAG_ERROR) {
            fprintf(stderr, "uzram bench nbd: the server refused export '%s': %s%s%.200s\n", name,
                    rep_error_name(type), length ? ": " : "", data);
            rc = type == NBD_REP_ERR_UNKNOWN ? -ENOENT : -EPERM;
            break;
        }
        if (type == NBD_REP_INFO && length >= 12 &&
            util_get16((unsigned char *)data) == NBD_INFO_EXPORT) {
            export->size = util_get64((unsigned char *)data + 2);
            export->flags = util_get16((unsigned char *)data + 10);
            have_size = true;
        } else if (type == NBD_REP_ACK) {
            rc = have_size ? 0 : -EPROTO;
            if (!have_size)
                fprintf(stderr, "uzram bench nbd: the server did not say the export's size\n");
            break;
        } else if (type != NBD_REP_INFO) {
            fprintf(stderr, "uzram bench nbd: unexpected option reply type %" PRIu32 "\n", type);
            rc = -EPROTO;
            break;
        }
    }
    free(data);
    return rc;
}

int bench_nbd_connect(const struct bench_nbd_options *nbd, struct bench_nbd_export *export)
{
    uint64_t deadline_ms = util_now_ms() + (uint64_t)nbd->timeout * 1000;
    int fd = nbd->unix_path ? connect_unix(nbd->unix_path)
                            : connect_tcp(nbd->host, nbd->port, deadline_ms);
    if (fd < 0)
        return fd;
    int rc = greet(fd, deadline_ms);
    if (rc == 0)
        rc = send_go(fd, nbd->export_name, deadline_ms);
    if (rc == 0)
        rc = read_go_replies(fd, nbd->export_name, deadline_ms, export);
    if (rc) {
        close(fd);
        return rc;
    }
    return fd;
}
