/* connection.h - one NBD connection in transmission and its workers, shared by the files of
 * the transmission phase: transmission.c (workers), input.c (receiving), reply.c (sending)
 * and reads.c (READ and BLOCK_STATUS). */
#ifndef UZRAM_NBD_CONNECTION_H
#define UZRAM_NBD_CONNECTION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "nbd/budget.h"
#include "nbd/limits.h"
#include "nbd/session.h"

/* A client connection in transmission (nbdkit's "parallel" model, with lazy
 * helpers). The thread that called nbd_transmission() is the connection's
 * first worker and stays with it to the end; helper workers are started only
 * when the connection has concurrent work worth handing off, within a
 * process-wide cap (settings.helpers), and leave again after
 * NBD_SERVER_IDLE_MS without work. One worker at a time holds the receiver
 * role: it reads one request, gives the role up and runs the request, sending
 * the reply whole under the send lock. A worker that gives the role up hands
 * the next request to another worker only when that request is already
 * buffered and requests are costly (settings.handoff_worth_ns); otherwise it
 * takes the role back itself after its request. So a client that keeps the
 * server idle is served by one thread with no hand-offs, a backlog of costly
 * requests spreads over up to settings.threads workers, and an idle
 * connection is one thread asleep in poll() with no buffers. A slow or
 * stalled client holds only its own threads; its started requests must
 * arrive whole within settings.timeout. Private to the transmission files (transmission.c, reads.c,
 * reply.c, input.c): the listener and the fuzz target see only nbd_transmission().
 *
 * Lock order: receive_lock, then budget_lock; send_lock is never held with
 * receive_lock. */
struct nbd_connection {
    struct nbd_session session;
    struct nbd_transmission_settings settings;

    pthread_mutex_t receive_lock; /* guards the fields up to input */
    pthread_cond_t receiver_wanted;
    pthread_cond_t helpers_gone;
    bool receiving;        /* a worker holds the receiver role */
    bool role_for_first;   /* the free role is kept for the first worker */
    unsigned idle_workers; /* workers waiting for the role */
    unsigned workers;      /* attached to the connection, the first included */
    /* Moving average of the time a request takes to run and answer. */
    _Atomic uint64_t request_ns;
    /* Only the receiver touches these: bytes not yet parsed are input[start,
     * end) of NBD_SERVER_INPUT_BUFFER bytes, allocated while the connection is
     * busy (NULL when idle). */
    unsigned char *input;
    size_t input_start, input_end;
    bool receive_done; /* DISC, end of file or an error: nobody reads any more */
    /* When the request being received must be whole (CLOCK_MONOTONIC ms);
     * 0 until the server first has to wait for its bytes. */
    uint64_t request_deadline_ms;

    /* Set by the receiver when it gives the role up with a whole request
     * still buffered: that request will be answered later, so replies may
     * wait for it (see NBD_SERVER_REPLY_BATCH). */
    atomic_bool requests_buffered;

    pthread_mutex_t send_lock; /* one reply goes out whole */
    /* Under send_lock: replies held back, whole, in arrival order: their
     * headers copied into `held`, their data (READ data in a worker's buffer)
     * referenced, both in held_iov, ready for one sendmsg. */
    unsigned char held[NBD_SERVER_REPLY_BATCH * NBD_SERVER_HELD_REPLY_MAX];
    size_t held_bytes;
    struct iovec held_iov[2 * NBD_SERVER_REPLY_BATCH];
    unsigned held_iovs;
    unsigned held_replies;
    /* Counts the times held replies were sent (or dropped with a dead
     * connection): a worker whose data was held may reuse its buffer once
     * this has moved on. Written under send_lock. */
    _Atomic uint64_t sent_gen;
    atomic_bool dead; /* sending failed: later replies are dropped */
};

/* One worker thread of a connection. */
struct nbd_worker {
    struct nbd_connection *conn;
    /* NBD_SERVER_WORKER_BUFFER bytes, reused for every request; allocated at
     * the first request that needs it, given back when the connection idles.
     * READ data of held replies fills it from the start: buffer[0, used) is
     * still to be sent while sent_gen equals held_gen (nbd_worker_space()). */
    unsigned char *buffer;
    size_t used;
    uint64_t held_gen;
    bool first;    /* the thread that called nbd_transmission() */
    bool has_role; /* this worker holds the receiver role */
};

/* Request data a worker holds: a WRITE's payload or a READ's data (in the
 * worker's own buffer unless `borrowed` or `allocated`). */
struct nbd_request_data {
    /* the worker's own buffer, one allocated for the request, or (borrowed)
     * the connection's input buffer, where a small WRITE payload is used in
     * place while its worker holds the receiver role */
    void *buffer;
    bool borrowed;
    size_t borrowed_length;
    bool allocated;              /* for this request alone: freed with it */
    enum nbd_budget_share share; /* the share `charged` bytes are taken from */
    uint64_t charged;
};

#endif
