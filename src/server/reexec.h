/* reexec.h - planned restart of `uzram serve` in place (reexec.c): the control request
 * `restart` checks that the program now installed can take every state over, then the server
 * stops and executes that program again, same pid, with its states and listening sockets.
 * Used by cli/serve.c (start and the handover) and control/service.c (the request). */
#ifndef UZRAM_SERVER_REEXEC_H
#define UZRAM_SERVER_REEXEC_H

#include <stdbool.h>
#include <stddef.h>

/* How long the program's `uzram state-check` may take before the restart is refused. */
#define RESTART_CHECK_MS 10000u

/* At the start of `uzram serve`, before anything reads the environment: the program's path
 * (the one an upgrade replaces), the command line and NOTIFY_SOCKET to execute again with,
 * and what the previous process of a planned restart left (UZRAM_RESTARTED). */
void restart_init(void);
/* Planned restarts of this process so far (0 when started afresh). */
unsigned restart_count(void);
/* The sockets handed over are the previous process's own (it bound them from this command
 * line), not a service manager's. */
bool restart_sockets_owned(void);

/* May the server restart now? Every device in `names` (`count` of them) must have a state
 * (--persist), and the program at the path it was started from must say it can take each
 * one over (`PROGRAM state-check`, within RESTART_CHECK_MS). Returns 0, or a negative errno
 * with one line in `message` saying why not (the server keeps serving). */
int restart_check(const char *const *names, size_t count, char *message, size_t size);

/* Execute the program again, same pid, with the states and the listening sockets `fds` named
 * `names` (`count` of them, from nbd_server_hand_over(); `owned`: bound by this process, not a
 * service manager) as descriptors 3... named in LISTEN_FDNAMES. Call once every thread is gone
 * and every device destroyed. Returns only when exec fails, after saying so; the states are
 * kept. */
void restart_exec(const int *socket_fds, const char *const *socket_names, size_t count, bool owned);

#endif
