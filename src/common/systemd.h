/* systemd.h - the service manager's protocols, spoken without libsystemd: readiness
 * notification (sd_notify(3): NOTIFY_SOCKET), the descriptor store (sd_pid_notify_with_fds(3):
 * FDSTORE=1, FDNAME=) and socket activation (sd_listen_fds(3): LISTEN_PID, LISTEN_FDS,
 * LISTEN_FDNAMES), which also hands the store's descriptors back. Any manager that speaks
 * them will do; `uzram serve`'s planned restart (server/reexec.c) speaks the last to itself. */
#ifndef UZRAM_SYSTEMD_H
#define UZRAM_SYSTEMD_H

#include <stdbool.h>
#include <stddef.h>

/* The first descriptor a service manager hands over (SD_LISTEN_FDS_START). */
#define SYSTEMD_LISTEN_FDS_START 3
/* Most handed-over sockets taken. */
#define SYSTEMD_MAX_LISTEN_FDS 16
/* Most handed-over states taken: one per device (NBD_SERVER_MAX_EXPORTS). */
#define SYSTEMD_MAX_STATES 256

/* The name a device's state has in the descriptor store: "state-" and the device's name. */
#define SYSTEMD_STATE_PREFIX "state-"

/* A descriptor handed over by the service manager: a listening socket, or a state. */
struct systemd_socket {
    int fd;
    int family;     /* a socket's: AF_UNIX, AF_INET or AF_INET6 */
    char name[128]; /* its FileDescriptorName= or FDNAME=, or "" */
};

/* Take NOTIFY_SOCKET, and the sockets a service manager handed over, from the environment,
 * and remove those variables, so that programs this process starts do not speak for it or
 * take its sockets. Call once, before any thread starts. Returns the number of sockets
 * handed over to this process (LISTEN_PID is ours), 0 when none, or a negative errno after
 * a message in `error` when one of them is not a listening stream socket. */
int systemd_init(char *error, size_t error_size);

/* The sockets systemd_init() found. */
const struct systemd_socket *systemd_sockets(size_t *count);
/* The states systemd_init() found: descriptors named "state-NAME", regular files (memfds). */
const struct systemd_socket *systemd_states(size_t *count);

/* Is there a service manager to keep descriptors (NOTIFY_SOCKET was set)? Whether it keeps
 * them depends on the unit's FileDescriptorStoreMax=. */
bool systemd_can_store(void);
/* Put `fd` in the manager's descriptor store as "state-NAME" (a copy: `fd` stays ours); it
 * comes back in LISTEN_FDS when the service starts again. Returns 1 when sent, 0 when no
 * manager listens, or a negative errno. */
int systemd_store(int fd, const char *name);
/* Take "state-NAME" out of the store (FDSTOREREMOVE=1): the manager closes its copy. */
int systemd_unstore(const char *name);

/* Send `state` ("READY=1", "STOPPING=1", "STATUS=...", several separated by '\n') to the
 * service manager. Returns 1 when sent, 0 when no manager listens (NOTIFY_SOCKET was unset),
 * or a negative errno. */
int systemd_notify(const char *state);

#endif
