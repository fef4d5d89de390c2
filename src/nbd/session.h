/* session.h - one NBD connection: what its client negotiated during the handshake, and how
 * the server runs its transmission phase. Shared by the handshake, the transmission phase,
 * TLS and the byte I/O seam. */
#ifndef UZRAM_NBD_SESSION_H
#define UZRAM_NBD_SESSION_H

#include <stdbool.h>
#include <stdint.h>

struct nbd_export;
struct nbd_tls;
struct nbd_tls_session;

/* What a client negotiated during the handshake. */
struct nbd_session {
    int fd;
    unsigned id;          /* for log lines */
    bool no_zeroes;       /* NBD_FLAG_C_NO_ZEROES agreed */
    bool structured;      /* NBD_OPT_STRUCTURED_REPLY acknowledged */
    bool meta_allocation; /* base:allocation selected */
    /* The export chosen by GO or EXPORT_NAME, held as a client of it (see
     * nbd_export_get()) until the caller of nbd_handshake() puts it. */
    struct nbd_export *export;
    uint64_t size;      /* export size at GO/EXPORT_NAME time */
    uint16_t flags;     /* transmission flags sent */
    unsigned log_lines; /* violation lines printed, to cap log flooding */
    /* CLOCK_MONOTONIC milliseconds by which the handshake must be done; 0:
     * none. A receive timeout alone would let a client that trickles one
     * byte at a time hold its connection slot for ever. */
    uint64_t handshake_deadline_ms;
    /* The server's TLS credentials and --tls mode (NULL: off), and this connection's TLS
     * session once STARTTLS succeeded (NULL: plain). Bytes go through io.c either way. */
    const struct nbd_tls *tls_config;
    struct nbd_tls_session *tls;
};

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

#endif
