/* systemd.c - the service manager's protocols: readiness notification (one datagram of
 * "KEY=VALUE" lines to the Unix socket named by $NOTIFY_SOCKET), the descriptor store
 * (FDSTORE=1 with the descriptor attached) and socket activation (descriptors from 3 on, for
 * the process named by $LISTEN_PID: listening sockets, and the store's descriptors back). */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/systemd.h"

static struct sockaddr_un notify_address;
static socklen_t notify_length; /* 0: no manager to tell */

static struct systemd_socket sockets[SYSTEMD_MAX_LISTEN_FDS];
static size_t socket_count;
static struct systemd_socket states[SYSTEMD_MAX_STATES];
static size_t state_count;

static void take_notify_socket(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path != NULL) {
        size_t length = strlen(path);
        /* A path, or '@' for a name in the abstract namespace (a leading NUL byte). */
        if ((path[0] == '/' || path[0] == '@') && length >= 2 &&
            length < sizeof notify_address.sun_path) {
            notify_address.sun_family = AF_UNIX;
            memcpy(notify_address.sun_path, path, length);
            if (path[0] == '@')
                notify_address.sun_path[0] = '\0';
            notify_length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + length +
                                        (path[0] == '/' ? 1 : 0));
        }
    }
    unsetenv("NOTIFY_SOCKET");
}

/* Is `fd` a listening stream socket of a family the server serves? */
static const char *not_a_listener(int fd, int *family)
{
    struct stat st;
    int type = 0, listening = 0;
    socklen_t length = sizeof type;
    struct sockaddr_storage address;
    socklen_t address_length = sizeof address;
    if (fstat(fd, &st) < 0)
        return "is not open";
    if (!S_ISSOCK(st.st_mode))
        return "is not a socket";
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) < 0 || type != SOCK_STREAM)
        return "is not a stream socket (the socket unit needs ListenStream=)";
    length = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) < 0 || !listening)
        return "is not listening (the socket unit needs ListenStream= and Accept=no)";
    if (getsockname(fd, (struct sockaddr *)&address, &address_length) < 0)
        return "has no address";
    *family = address.ss_family;
    if (*family != AF_UNIX && *family != AF_INET && *family != AF_INET6)
        return "is neither a Unix nor a TCP socket";
    return NULL;
}

/* Is `fd` something a state can live in: a regular file (a memfd is one)? */
static const char *not_a_state(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return "is not open";
    return S_ISREG(st.st_mode) ? NULL : "is not a file (a device's state is a memfd or a file)";
}

/* The descriptors handed over to this process, as sd_listen_fds(3) defines them: LISTEN_PID is
 * our pid, LISTEN_FDS their number from descriptor 3 on, LISTEN_FDNAMES their names. */
static int take_listen_fds(char *error, size_t error_size)
{
    const char *pid_text = getenv("LISTEN_PID"), *fds_text = getenv("LISTEN_FDS");
    const char *names = getenv("LISTEN_FDNAMES");
    int rc = 0;
    char *end;
    if (pid_text == NULL || fds_text == NULL)
        goto out;
    errno = 0;
    unsigned long pid = strtoul(pid_text, &end, 10);
    if (errno || *end != '\0' || pid != (unsigned long)getpid())
        goto out; /* meant for another process: inherited by mistake */
    unsigned long count = strtoul(fds_text, &end, 10);
    if (errno || *end != '\0' || count == 0 ||
        count > SYSTEMD_MAX_LISTEN_FDS + SYSTEMD_MAX_STATES) {
        snprintf(error, error_size,
                 "LISTEN_FDS=%s: the service manager handed over no usable number of "
                 "descriptors (1 to %d sockets and %d states)",
                 fds_text, SYSTEMD_MAX_LISTEN_FDS, SYSTEMD_MAX_STATES);
        rc = -EINVAL;
        goto out;
    }
    for (unsigned long i = 0; i < count; i++) {
        struct systemd_socket handed = {.fd = SYSTEMD_LISTEN_FDS_START + (int)i};
        /* LISTEN_FDNAMES: colon-separated, in descriptor order. */
        if (names != NULL) {
            size_t length = strcspn(names, ":");
            snprintf(handed.name, sizeof handed.name, "%.*s", (int)length, names);
            names = names[length] == ':' ? names + length + 1 : NULL;
        }
        bool state = strncmp(handed.name, SYSTEMD_STATE_PREFIX, strlen(SYSTEMD_STATE_PREFIX)) == 0;
        const char *why =
            state ? not_a_state(handed.fd) : not_a_listener(handed.fd, &handed.family);
        if (why != NULL) {
            snprintf(error, error_size, "%s: descriptor %d%s%s%s %s; check the %s",
                     state ? "descriptor store" : "socket activation", handed.fd,
                     handed.name[0] ? " (" : "", handed.name, handed.name[0] ? ")" : "", why,
                     state ? "service's FileDescriptorStoreMax=" : "socket unit");
            rc = -EINVAL;
            goto out;
        }
        if ((state ? state_count == SYSTEMD_MAX_STATES : socket_count == SYSTEMD_MAX_LISTEN_FDS)) {
            snprintf(error, error_size, "more than %d %s handed over",
                     state ? SYSTEMD_MAX_STATES : SYSTEMD_MAX_LISTEN_FDS,
                     state ? "states" : "sockets");
            rc = -EINVAL;
            goto out;
        }
        fcntl(handed.fd, F_SETFD, FD_CLOEXEC);
        if (state)
            states[state_count++] = handed;
        else
            sockets[socket_count++] = handed;
    }
    rc = (int)socket_count;
out:
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return rc;
}

int systemd_init(char *error, size_t error_size)
{
    take_notify_socket();
    return take_listen_fds(error, error_size);
}

const struct systemd_socket *systemd_sockets(size_t *count)
{
    *count = socket_count;
    return sockets;
}

const struct systemd_socket *systemd_states(size_t *count)
{
    *count = state_count;
    return states;
}

bool systemd_can_store(void)
{
    return notify_length != 0;
}

/* One notification with descriptor `fd` attached (SCM_RIGHTS); the manager takes its own copy. */
static int notify_with_fd(const char *state, int fd)
{
    int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return -errno;
    union {
        char buffer[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {(void *)state, strlen(state)};
    struct msghdr message = {.msg_name = &notify_address,
                             .msg_namelen = notify_length,
                             .msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.buffer,
                             .msg_controllen = sizeof control.buffer};
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &fd, sizeof fd);
    int rc = sendmsg(sock, &message, MSG_NOSIGNAL) < 0 ? -errno : 1;
    close(sock);
    return rc;
}

int systemd_store(int fd, const char *name)
{
    if (notify_length == 0)
        return 0;
    char state[128];
    snprintf(state, sizeof state, "FDSTORE=1\nFDNAME=%s%s", SYSTEMD_STATE_PREFIX, name);
    return notify_with_fd(state, fd);
}

int systemd_unstore(const char *name)
{
    char state[128];
    snprintf(state, sizeof state, "FDSTOREREMOVE=1\nFDNAME=%s%s", SYSTEMD_STATE_PREFIX, name);
    return systemd_notify(state);
}

int systemd_notify(const char *state)
{
    if (notify_length == 0)
        return 0;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = 1;
    if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&notify_address,
               notify_length) < 0)
        rc = -errno;
    close(fd);
    return rc;
}
