/* transmission.h - the NBD transmission phase of one connection (transmission.c). */
#ifndef UZRAM_NBD_TRANSMISSION_H
#define UZRAM_NBD_TRANSMISSION_H

#include <stdbool.h>
#include <stdint.h>

struct nbd_session;

/* How the transmission phase of one connection runs. */
struct nbd_transmission_settings {
    bool read_only;
    /* Workers of this connection, the calling thread included (--threads). */
    unsigned threads;
    /* Helper workers over all connections of the process at once; a
     * connection that finds none free goes on with the workers it has. */
    unsigned helpers;
    /* Seconds a started request has to arrive whole, and a reply to go out. */
    unsigned timeout;
    /* A buffered request is handed to another worker only when requests take
     * this long on average (NBD_SERVER_HANDOFF_WORTH_NS; 0: always). */
    uint64_t handoff_worth_ns;
};

/* The transmission phase of a session whose handshake has finished: serve requests until
 * DISC, end of file, a failed send, a request that misses its deadline or a protocol
 * violation that forbids going on. The calling thread is the connection's first worker;
 * helpers are started as the settings allow. Returns when every worker has stopped: 0, or
 * -EPIPE when a reply could not be sent. The socket stays open; the caller closes it. */
int nbd_transmission(const struct nbd_session *session,
                     const struct nbd_transmission_settings *settings);

#endif
