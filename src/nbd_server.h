/* nbd_server.h - internal interfaces of the NBD server behind `uzram serve`.
 * Shared by the handshake, transmission, worker pool, control and listener files. */
#ifndef UZRAM_NBD_SERVER_H
#define UZRAM_NBD_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "uzram.h"

/* Block size constraints advertised in NBD_INFO_BLOCK_SIZE. The engine needs
 * 512-byte alignment, so that is the minimum; 4096 is its page size. */
#define NBD_SERVER_MIN_BLOCK 512u
#define NBD_SERVER_PREFERRED_BLOCK 4096u
#define NBD_SERVER_MAX_PAYLOAD (32u << 20)
/* A WRITE larger than the maximum but at most this is read and thrown away
 * (EINVAL); a larger one cannot be skipped cheaply, so the client is dropped. */
#define NBD_SERVER_WRITE_DISCARD_CAP (64u << 20)
/* Per connection: the reader stops reading requests while this many are
 * queued or being served, or while their payloads add up to this many bytes. */
#define NBD_SERVER_MAX_IN_FLIGHT 64u
#define NBD_SERVER_MAX_IN_FLIGHT_BYTES (64u << 20)
/* A client that does not read its replies for this long is dropped. */
#define NBD_SERVER_SEND_TIMEOUT 30
/* A client must finish the handshake within this time. */
#define NBD_SERVER_HANDSHAKE_TIMEOUT 30
/* At most this many descriptors in one BLOCK_STATUS reply. */
#define NBD_SERVER_MAX_EXTENTS 1024u
/* Zero runs at least this long become OFFSET_HOLE chunks in structured reads. */
#define NBD_SERVER_HOLE_MIN (32u << 10)
/* More connections than this are refused at accept time. */
#define NBD_SERVER_MAX_CONNECTIONS 1000u

/* What is exported: one device under one name. */
struct nbd_export {
    struct uzram *dev;
    const char *name;
    bool read_only;
};

/* What a client negotiated during the handshake. */
struct nbd_session {
    int fd;
    unsigned id;          /* for log lines */
    bool no_zeroes;       /* NBD_FLAG_C_NO_ZEROES agreed */
    bool structured;      /* NBD_OPT_STRUCTURED_REPLY acknowledged */
    bool meta_allocation; /* base:allocation selected */
    uint64_t size;        /* export size at GO/EXPORT_NAME time */
    uint16_t flags;       /* transmission flags sent */
    unsigned log_lines;   /* violation lines printed, to cap log flooding */
};

/* One parsed transmission request. */
struct nbd_request {
    uint16_t flags;
    uint16_t type;
    uint64_t cookie;
    uint64_t offset;
    uint32_t length;
};

struct nbd_server;

/* A client connection. Reference counted: the reader thread holds one
 * reference and every queued request holds one; the last put closes the
 * socket, so DISC and client exits let in-flight requests finish first. */
struct nbd_connection {
    struct nbd_session session;
    struct nbd_server *server;
    pthread_mutex_t send_lock; /* one reply goes out whole */
    pthread_mutex_t lock;      /* in-flight accounting */
    pthread_cond_t room;       /* signalled when a request finishes */
    unsigned in_flight;
    uint64_t in_flight_bytes;
    atomic_int refs;
    atomic_bool dead; /* sending failed: later replies are dropped */
    struct nbd_connection *prev, *next;
};

/* A request handed to the worker pool. */
struct nbd_job {
    struct nbd_job *next;
    struct nbd_connection *conn;
    struct nbd_request request;
    void *payload; /* WRITE data, owned by the job */
    uint64_t charged_bytes;
};

/* Log one line to stderr about a client: "uzram: client N: ...". Capped per
 * client so a misbehaving client cannot flood the log. */
void nbd_log(struct nbd_session *session, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* Global switch set by --quiet. */
extern bool nbd_log_quiet;

/* Transmission flags for this export and session state. */
uint16_t nbd_transmission_flags(const struct nbd_export *export, const struct nbd_session *s);

/* Run the option haggling. Returns 1 when transmission starts (session
 * filled in), 0 when the client ended it cleanly (ABORT or EOF), a negative
 * errno when the connection must be dropped. */
int nbd_handshake(struct nbd_session *session, const struct nbd_export *export);

/* Check a request against the negotiated session before anything is done
 * with it. Returns 0 or the NBD error to reply with; *reason (if not NULL)
 * then says why, for the log line and the error message. */
uint32_t nbd_check_request(const struct nbd_session *session, bool read_only,
                           const struct nbd_request *request, const char **reason);

/* Map a positive errno from the engine to the NBD error value. */
uint32_t nbd_errno_to_wire(int err);

/* The reader loop of one connection after a successful handshake: parses
 * requests, answers invalid ones, queues the others, returns on DISC, EOF or
 * a violation that forbids going on. */
void nbd_transmission(struct nbd_connection *conn);

/* Serve one queued request and send its reply (worker threads). Frees the job
 * and drops its connection reference. */
void nbd_execute(struct nbd_job *job);

/* Connection references (server.c). */
void nbd_connection_put(struct nbd_connection *conn);

/* Worker pool (server.c): queue a job; never blocks. */
void nbd_pool_submit(struct nbd_server *server, struct nbd_job *job);

/* The device exported by this server. */
const struct nbd_export *nbd_server_export(struct nbd_server *server);

/* Number of connected clients (handshaking or transmitting). */
unsigned nbd_server_clients(struct nbd_server *server);

/* Settings of `uzram serve`, filled by serve.c. */
struct nbd_server_options {
    const char *name;
    const char *unix_path; /* NULL: no Unix socket */
    const char *ctl_path;
    const char *tcp;       /* "[ADDR:]PORT" or NULL */
    unsigned socket_mode;
    long socket_gid; /* -1: leave the group alone */
    unsigned threads;
    bool read_only;
    bool quiet;
};

/* Listen, serve until SIGINT/SIGTERM, clean up. Returns the exit status;
 * prints its own error lines. The device stays owned by the caller. */
int nbd_server_run(struct uzram *dev, const struct nbd_server_options *options);

/* Control socket (control.c): serve one request on an accepted connection. */
void control_serve_one(int fd, struct nbd_server *server);

#endif
