/* server.h - internal interfaces of the NBD server behind `uzram serve`.
 * Shared by the handshake, transmission, control and listener files. */
#ifndef UZRAM_NBD_SERVER_H
#define UZRAM_NBD_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <sys/types.h>
#include <sys/uio.h>

#include "nbd/tls.h"
#include "uzram.h"

/* Block size constraints advertised in NBD_INFO_BLOCK_SIZE. The engine needs
 * 512-byte alignment, so that is the minimum; 4096 is its page size. */
#define NBD_SERVER_MIN_BLOCK 512u
#define NBD_SERVER_PREFERRED_BLOCK 4096u
#define NBD_SERVER_MAX_PAYLOAD (32u << 20)
/* A WRITE larger than the maximum but at most this is read and thrown away
 * (EINVAL); a larger one cannot be skipped cheaply, so the client is dropped. */
#define NBD_SERVER_WRITE_DISCARD_CAP (64u << 20)
/* Each connection reads requests into an input buffer of this size with one
 * recv() that takes whatever the client has sent, so a pipelining client's
 * headers and small WRITE payloads cost one system call for many requests. */
#define NBD_SERVER_INPUT_BUFFER (256u << 10)
/* WRITE payloads up to this size are gathered in the input buffer; the rest of
 * a larger one is received straight into the request's buffer. */
#define NBD_SERVER_SMALL_PAYLOAD (64u << 10)
/* Every worker keeps a buffer this large for WRITE payloads and READ data;
 * only larger requests allocate. */
#define NBD_SERVER_WORKER_BUFFER (128u << 10)
/* Short replies (no data) are held back while more requests are already
 * buffered, and go out together: one send, one wake-up of the client, for up
 * to this many replies (so at most one fewer is ever held). Small enough that a pipelining client
 * keeps getting completions (and sending new requests) while the server works. */
#define NBD_SERVER_REPLY_BATCH 4u
#define NBD_SERVER_HELD_REPLY_MAX 256u
/* An idle worker is woken (or a helper started) for a buffered request only
 * when the connection's requests take at least this long on average. A hand-off costs both threads
 * several microseconds of wake-up and cache misses, and where the client
 * shares the cores (fio on 2 CPUs) it also takes CPU from the client: for
 * 4 KiB lz4 writes (~6 us each) a second worker made one connection ~15%
 * slower, not faster. zstd, large requests and slow reads spread at once;
 * cheap requests scale over connections instead (CAN_MULTI_CONN). */
#define NBD_SERVER_HANDOFF_WORTH_NS 20000u
/* Most worker threads per connection (--threads). */
#define NBD_SERVER_MAX_THREADS 256u
/* Helper workers (beyond each connection's first) over all connections at
 * once: this many per --threads, and at most NBD_SERVER_MAX_HELPERS. */
#define NBD_SERVER_HELPERS_PER_THREAD 4u
#define NBD_SERVER_MAX_HELPERS 1024u
/* A connection with no request for this long gives its helpers and buffers
 * back: an idle connection is one sleeping thread. Receives wake up this
 * often inside a request to check its deadline. */
#define NBD_SERVER_IDLE_MS 1000u
/* Request buffers larger than a worker's own, over all connections. WRITE
 * payloads are charged as their bytes arrive, up to this much per receive. */
#define NBD_SERVER_BUFFER_BUDGET (1ull << 30)
#define NBD_SERVER_RECEIVE_STEP (1u << 20)
/* Default of the client deadlines (seconds; the environment variable
 * UZRAM_SERVE_TIMEOUT sets another, for tests): the whole handshake, sends
 * included; a started request, from the first wait for its bytes to its
 * last byte; a reply, from the socket first refusing bytes to its last. */
#define NBD_SERVER_TIMEOUT 30
/* On SIGINT/SIGTERM, clients get this long to take the replies to requests in
 * flight; then the connections left are shut down both ways. */
#define NBD_SERVER_STOP_GRACE 5
/* At most this many descriptors in one BLOCK_STATUS reply. */
#define NBD_SERVER_MAX_EXTENTS 1024u
/* Zero runs at least this long become OFFSET_HOLE chunks in structured reads. */
#define NBD_SERVER_HOLE_MIN (32u << 10)
/* More connections than this are refused at accept time. */
#define NBD_SERVER_MAX_CONNECTIONS 1000u
/* Stack of every connection and worker thread: the engine keeps page
 * buffers on it (lzo needs over 128 KiB), and sanitizers make frames larger.
 * Only touched pages cost memory. */
#define NBD_SERVER_THREAD_STACK (2u << 20)

/* What is exported: one device under one name. */
struct nbd_export {
    struct uzram *dev;
    const char *name;
    bool read_only;
    bool swap; /* serve --swap: swap safety is on */
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
    /* CLOCK_MONOTONIC milliseconds by which the handshake must be done; 0:
     * none. A receive timeout alone would let a client that trickles one
     * byte at a time hold its connection slot for ever. */
    uint64_t handshake_deadline_ms;
    /* The server's TLS credentials and --tls mode (NULL: off), and this connection's TLS
     * session once STARTTLS succeeded (NULL: plain). Bytes go through io.c either way. */
    const struct nbd_tls *tls_config;
    struct nbd_tls_session *tls;
};

/* The byte I/O seam (io.c): the socket functions' contracts (recv(); util_send_iov_timeout,
 * util_send_iov_by, util_send_all_by, util_read_full_by, util_discard_by), over the socket
 * or the connection's TLS session. nbd_io_wait_readable polls for input unless decrypted
 * bytes are already waiting: 1 readable, 0 timeout, negative errno. nbd_io_midway: bytes
 * have come that make nothing yet (part of a TLS record), so a request has started. */
ssize_t nbd_io_recv(struct nbd_session *s, void *buf, size_t length, int flags);
bool nbd_io_midway(struct nbd_session *s);
int nbd_io_wait_readable(struct nbd_session *s, int timeout_ms);
int nbd_io_send_iov_timeout(struct nbd_session *s, struct iovec *iov, int count,
                            int timeout_seconds);
int nbd_io_send_iov_by(struct nbd_session *s, struct iovec *iov, int count, uint64_t deadline_ms);
int nbd_io_send_all_by(struct nbd_session *s, const void *buf, size_t length, uint64_t deadline_ms);
int nbd_io_read_full_by(struct nbd_session *s, void *buf, size_t length, uint64_t deadline_ms);
int nbd_io_discard_by(struct nbd_session *s, uint64_t length, uint64_t deadline_ms);

/* One parsed transmission request. */
struct nbd_request {
    uint16_t flags;
    uint16_t type;
    uint64_t cookie;
    uint64_t offset;
    uint32_t length;
};

struct nbd_server;

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

/* The transmission phase of a session whose handshake has finished
 * (transmission.c): serve requests until DISC, end of file, a failed send,
 * a request that misses its deadline or a protocol violation that forbids
 * going on. The calling thread is the connection's first worker; helpers are
 * started as the settings allow. Returns when every worker has stopped: 0,
 * or -EPIPE when a reply could not be sent. The socket stays open; the
 * caller closes it. */
int nbd_transmission(const struct nbd_session *session, struct nbd_server *server,
                     const struct nbd_transmission_settings *settings);

/* The device exported by this server. */
const struct nbd_export *nbd_server_export(struct nbd_server *server);

/* The device's /dev node, if `uzram attach` made one (attach/attachment.c). */
struct attachment *nbd_server_attachment(struct nbd_server *server);

/* Number of connected clients (handshaking or transmitting). */
unsigned nbd_server_clients(struct nbd_server *server);

/* Where the server listens, for `uzram status`: its Unix socket ("" if none) and its TCP
 * address ("ADDR:PORT", "" if none), the first of each. */
const char *nbd_server_unix_path(struct nbd_server *server);
const char *nbd_server_tcp_address(struct nbd_server *server);

/* Settings of `uzram serve`, filled by cli/serve.c. */
struct nbd_server_options {
    const char *name;
    const char *unix_path; /* NULL: no Unix socket */
    const char *ctl_path;
    const char *tcp; /* "[ADDR:]PORT" or NULL */
    /* Socket activation: listening NBD sockets handed over by a service manager, served
     * instead of binding unix_path and tcp, and a control socket (-1: bind ctl_path). The
     * manager owns their names: they are not removed at exit. */
    const int *inherited;
    size_t inherited_count;
    int inherited_ctl;
    unsigned socket_mode;
    long socket_gid;  /* -1: leave the group alone */
    unsigned threads; /* worker threads per connection */
    unsigned timeout; /* client deadlines in seconds; 0: NBD_SERVER_TIMEOUT */
    bool read_only;
    bool quiet;
    bool swap; /* swap safety is on (cli/serve.c set it up): `attach --swap` may go on */
    struct nbd_tls_options tls;
};

/* Listen, serve until SIGINT/SIGTERM, clean up. Returns the exit status;
 * prints its own error lines. The device stays owned by the caller. */
int nbd_server_run(struct uzram *dev, const struct nbd_server_options *options);

/* Control socket (control/control.c): serve the listening socket `listen_fd`
 * on a thread of its own (each request on its own thread, with a deadline)
 * until control_stop(), which also waits for the requests in progress. The
 * socket stays the caller's. Returns 0 or a negative errno. */
struct control_service;
int control_start(int listen_fd, struct nbd_server *server, struct control_service **service);
void control_stop(struct control_service *service);

#endif
