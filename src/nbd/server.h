/* server.h - the NBD server behind `uzram serve` (server.c): its sockets, its connections and
 * their threads, and its lifetime, for whoever starts it (cli/serve.c) and the control
 * service (control/service.c). */
#ifndef UZRAM_NBD_SERVER_H
#define UZRAM_NBD_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "nbd/limits.h"
#include "nbd/server_settings.h"

struct nbd_server;

/* A server's life, in three steps, so that its starter can serve the control socket beside
 * it (control_start() between create and serve, control_stop() between serve and destroy):
 *
 * nbd_server_create: take the devices of `options` (the server owns them, and the hot-added
 * ones, from here on, even when it fails), block the stop signals, load the TLS credentials,
 * listen on the NBD and control sockets. 0, or -1 after printing what went wrong (*out NULL).
 *
 * nbd_server_serve: print the banner, tell the service manager it is ready, accept clients
 * until SIGINT/SIGTERM, then stop listening. Returns the exit status.
 *
 * nbd_server_destroy: end every /dev node of `uzram attach`, let the connections finish
 * (NBD_SERVER_STOP_GRACE), quiesce the devices whose state outlives the process (--persist),
 * destroy the devices and remove the socket names made. NULL: nothing. */
int nbd_server_create(const struct nbd_server_options *options, struct nbd_server **out);
int nbd_server_serve(struct nbd_server *server);
void nbd_server_destroy(struct nbd_server *server);

/* Planned restart (server/reexec.c). nbd_server_restart_soon(), from any thread, ends
 * nbd_server_serve() without closing the sockets, and then nbd_server_restarting() is true;
 * nbd_server_hand_over() gives the listening sockets into `fds`, with their names in `names`
 * (NBD ones "nbd", the control socket "control"; at most `max`; returns how many) for the
 * next process: nbd_server_destroy() neither closes them nor removes their names, and hands
 * ublk devices over (attachment_hand_over) instead of deleting them. */
void nbd_server_restart_soon(struct nbd_server *server);
bool nbd_server_restarting(const struct nbd_server *server);
size_t nbd_server_hand_over(struct nbd_server *server, int *fds, const char **names, size_t max);

/* The listening control socket, for control_start(). */
int nbd_server_control_fd(struct nbd_server *server);

/* The devices the server serves. */
struct nbd_exports *nbd_server_exports(struct nbd_server *server);
/* Number of connected clients (handshaking or transmitting), over all exports. */
unsigned nbd_server_clients(struct nbd_server *server);
/* The server's name (its control socket is NAME.ctl). */
const char *nbd_server_name(struct nbd_server *server);
/* Where the server listens, for `uzram status`: its Unix socket ("" if none) and its TCP
 * address ("ADDR:PORT", "" if none), the first of each. */
const char *nbd_server_unix_path(struct nbd_server *server);
const char *nbd_server_tcp_address(struct nbd_server *server);
/* nbd_connect_uri() of this server's sockets and TLS settings ("-" when it cannot be made). */
int nbd_server_uri(struct nbd_server *server, const char *export_name, char *uri, size_t size);

#endif
