/* service.h - the server end of the control socket (service.c), for whoever starts a server. */
#ifndef UZRAM_CONTROL_SERVICE_H
#define UZRAM_CONTROL_SERVICE_H

struct nbd_server;
struct control_service;

/* Control socket (service.c): serve the listening socket `listen_fd`
 * on a thread of its own (each request on its own thread, with a deadline)
 * until control_stop(), which also waits for the requests in progress. The
 * socket stays the caller's. Returns 0 or a negative errno. */
struct control_service;
int control_start(int listen_fd, struct nbd_server *server, struct control_service **service);
void control_stop(struct control_service *service);

#endif
