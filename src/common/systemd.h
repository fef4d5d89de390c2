/* systemd.h - the service manager's protocols, spoken without libsystemd: readiness
 * notification (sd_notify(3): NOTIFY_SOCKET) and socket activation (sd_listen_fds(3):
 * LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES). Any manager that speaks them will do. */
#ifndef UZRAM_SYSTEMD_H
#define UZRAM_SYSTEMD_H

#include <stddef.h>

/* The first descriptor a service manager hands over (SD_LISTEN_FDS_START). */
#define SYSTEMD_LISTEN_FDS_START 3
/* Most handed-over sockets taken. */
#define SYSTEMD_MAX_LISTEN_FDS 16

/* A listening socket handed over by the service manager. */
struct systemd_socket {
    int fd;
    int family;    /* AF_UNIX, AF_INET or AF_INET6 */
    char name[64]; /* its FileDescriptorName=, or "" */
};

/* Take NOTIFY_SOCKET, and the sockets a service manager handed over, from the environment,
 * and remove those variables, so that programs this process starts do not speak for it or
 * take its sockets. Call once, before any thread starts. Returns the number of sockets
 * handed over to this process (LISTEN_PID is ours), 0 when none, or a negative errno after
 * a message in `error` when one of them is not a listening stream socket. */
int systemd_init(char *error, size_t error_size);

/* The sockets systemd_init() found. */
const struct systemd_socket *systemd_sockets(size_t *count);

/* Send `state` ("READY=1", "STOPPING=1", "STATUS=...", several separated by '\n') to the
 * service manager. Returns 1 when sent, 0 when no manager listens (NOTIFY_SOCKET was unset),
 * or a negative errno. */
int systemd_notify(const char *state);

#endif
