/* systemd.c - readiness notification to the service manager (sd_notify(3) protocol: one
 * datagram of "KEY=VALUE" lines to the Unix socket named by $NOTIFY_SOCKET). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/systemd.h"

static struct sockaddr_un notify_address;
static socklen_t notify_length; /* 0: no manager to tell */

void systemd_init(void)
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
