/* transmission.h - the NBD transmission phase of one connection (transmission.c). */
#ifndef UZRAM_NBD_TRANSMISSION_H
#define UZRAM_NBD_TRANSMISSION_H

#include "nbd/session.h"

/* The transmission phase of a session whose handshake has finished: serve requests until
 * DISC, end of file, a failed send, a request that misses its deadline or a protocol
 * violation that forbids going on. The calling thread is the connection's first worker;
 * helpers are started as the settings allow. Returns when every worker has stopped: 0, or
 * -EPIPE when a reply could not be sent. The socket stays open; the caller closes it. */
int nbd_transmission(const struct nbd_session *session,
                     const struct nbd_transmission_settings *settings);

#endif
