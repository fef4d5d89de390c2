/* server.h - internal interfaces of the NBD server behind `uzram serve`.
 * Shared by the handshake, transmission, control and listener files. */
#ifndef UZRAM_NBD_SERVER_H
#define UZRAM_NBD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

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

/* Most devices one server serves at once (the command line's, the configuration's and
 * hot-added ones). */
#define NBD_SERVER_MAX_EXPORTS 256u
/* Export names are device names (util_valid_name()): at most this long. */
#define NBD_EXPORT_NAME_MAX 64u

/* What is exported: one device under one name. A server has one or several; server.c keeps
 * them (and who uses each), the handshake finds them by name through nbd_export_get(). */
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

/* Run the option haggling, choosing among the exports of `server`. Returns 1 when
 * transmission starts (session filled in, session->export held as a client: the caller
 * puts it with nbd_export_put(server, export, true) when the connection ends), 0 when the
 * client ended it cleanly (ABORT or EOF), a negative errno when the connection must be
 * dropped. */
int nbd_handshake(struct nbd_session *session, struct nbd_server *server);

/* The exports of a server by name, for the handshake (server.c; the handshake's fuzz
 * target has its own). nbd_export_get() returns the export called `name` ("" is the
 * default export: the server's first device) held so that it cannot be removed, or NULL.
 * A `client` hold is a session that chose the export and uses it until it ends (it makes
 * hot-remove refuse); any other hold is short (a lookup, a control request) and only
 * makes hot-remove wait. Every hold ends with nbd_export_put() with the same `client`. */
struct nbd_export *nbd_export_get(struct nbd_server *server, const char *name, bool client);
void nbd_export_put(struct nbd_server *server, struct nbd_export *export, bool client);

/* One line of NBD_OPT_LIST's answer. */
struct nbd_export_entry {
    char name[NBD_EXPORT_NAME_MAX + 1];
    char description[160];
};
/* The exports now, the default first, at most `max`; returns how many. */
size_t nbd_export_list(struct nbd_server *server, struct nbd_export_entry *entries, size_t max);

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

/* The /dev node of device `export`, if `uzram attach` made one (attach/attachment.c). */
struct attachment *nbd_export_attachment(struct nbd_server *server,
                                         const struct nbd_export *export);

/* Reset `export` (the control socket's `set reset VALUE`; the caller holds it) only if nobody
 * uses it: no NBD session, no /dev node of `uzram attach` (mounted or not), no attach or
 * detach running. The check and the reset are one step: clients that choose the export and
 * attach requests meanwhile wait until the reset is over. Returns 0, -EBUSY with one line in
 * `message` saying who uses it and what to end first, or what uzram_attr_set() returns. */
int nbd_export_reset(struct nbd_server *server, struct nbd_export *export, const char *value,
                     char *message, size_t size);
/* attachment_attach() and attachment_detach() on the attachment of `export` (the caller holds
 * it), as a user of the device while they run (see nbd_export_reset()). */
int nbd_export_attach(struct nbd_server *server, struct nbd_export *export, const char *via,
                      bool swap, const char *file, char *reply, size_t reply_size, char *message,
                      size_t message_size);
int nbd_export_detach(struct nbd_server *server, struct nbd_export *export, char *reply,
                      size_t reply_size, char *message, size_t message_size);

/* Number of connected clients (handshaking or transmitting), over all exports. */
unsigned nbd_server_clients(struct nbd_server *server);
/* Sessions using `export` (held as clients). */
unsigned nbd_export_clients(struct nbd_server *server, const struct nbd_export *export);

/* The server's name (its control socket is NAME.ctl) and the memory limit all its devices
 * share (--server-mem-limit; a group with no limit when none was given). */
const char *nbd_server_name(struct nbd_server *server);
struct uzram_group *nbd_server_group(struct nbd_server *server);

/* Hot-add and hot-remove (the control socket's requests), as zram's hot_add and
 * hot_remove: add the device `spec` describes (what serve --device takes), or remove the
 * device `name` and drop its data, refused with -EBUSY while anybody uses it (as a reset). Both
 * return 0 or a negative errno, with one line in `message` saying what was done or what to do. */
int nbd_server_add(struct nbd_server *server, const char *spec, char *message, size_t size);
int nbd_server_remove(struct nbd_server *server, const char *name, char *message, size_t size);

/* Where the server listens, for `uzram status`: its Unix socket ("" if none) and its TCP
 * address ("ADDR:PORT", "" if none), the first of each. */
const char *nbd_server_unix_path(struct nbd_server *server);
const char *nbd_server_tcp_address(struct nbd_server *server);

/* A device made for the server (by cli/serve.c): the server owns it from then on. */
struct nbd_new_device {
    struct uzram *dev;
    char name[NBD_EXPORT_NAME_MAX + 1];
    bool read_only;
};

/* Makes the device a hot-add request describes: `spec` is what serve --device takes
 * (NAME[:SIZE[:KEY=VALUE]...]). Returns 0 with *out filled, or a negative errno with one
 * line in `message`. */
typedef int nbd_make_device_fn(void *context, const char *spec, struct nbd_new_device *out,
                               char *message, size_t message_size);

/* The devices of a server (exports.c), made and destroyed by server.c. */
struct nbd_exports;
struct nbd_server_options;
struct nbd_exports *nbd_server_exports(struct nbd_server *server);
int nbd_exports_create(const struct nbd_server_options *options, struct nbd_exports **out);
/* Destroys every device too. */
void nbd_exports_destroy(struct nbd_exports *exports);
/* Add a device made for the server: 0, or a negative errno with a message (the device is
 * then still the caller's); on success `message` describes it: "NAME (4G, lz4)". */
int nbd_exports_add(struct nbd_exports *exports, const struct nbd_new_device *made, char *message,
                    size_t size);
/* What the log has said about a device's backing store (server.c's watch_device()), kept
 * with the device. */
struct nbd_device_watch {
    struct uzram_stats seen;
    bool full, write_failing, corrupt;
    time_t read_failure_said;
};
typedef void nbd_watch_fn(struct uzram *dev, const char *name, struct nbd_device_watch *watch);
/* Call `watch` for every device, with its own watch state. */
void nbd_exports_watch(struct nbd_exports *exports, nbd_watch_fn *watch);
/* The settings every device's attachment shares (unix_path, runtime_dir, fuse_threads,
 * swap; the rest is the device's): call before the first nbd_exports_add(). */
struct attach_settings;
void nbd_exports_set_attach(struct nbd_exports *exports, const struct attach_settings *settings);
/* The server stops: every device's attachment ends (attachment_destroy). */
void nbd_exports_detach_all(struct nbd_exports *exports);
/* What "" selects. */
const char *nbd_exports_default(struct nbd_exports *exports);
/* The data held by all devices (orig_data_size), and how many there are. */
uint64_t nbd_exports_data(struct nbd_exports *exports, size_t *count);
/* "NAME (4294967296 bytes, lz4), NAME2 (...)" (`detailed`) or "NAME, NAME2" into `text`;
 * returns the number of devices. */
size_t nbd_exports_describe(struct nbd_exports *exports, bool detailed, char *text, size_t size);

/* Settings of `uzram serve`, filled by cli/serve.c. */
struct nbd_server_options {
    const char *name; /* the server's: its control socket is NAME.ctl */
    /* The devices to serve at start (at least one), the first the default export; and how
     * hot-add makes more. */
    const struct nbd_new_device *devices;
    size_t device_count;
    nbd_make_device_fn *make_device;
    void *make_device_context;
    uint64_t server_mem_limit; /* --server-mem-limit: bytes, 0 none */
    const char *unix_path;     /* NULL: no Unix socket */
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
    bool quiet;
    bool swap; /* swap safety is on (cli/serve.c set it up): `attach --swap` may go on */
    struct nbd_tls_options tls;
};

/* What the banner says besides the options (banner.c). */
struct nbd_banner {
    const char *devices; /* "NAME (SIZE bytes, ALGO)", for each device */
    size_t device_count;
    const char *unix_path, *tcp_address; /* "" when none */
    const char *tls_kind;                /* NULL without TLS */
};
/* The ready banner on stdout: what is served where, and a connect line to paste. */
void nbd_banner_print(const struct nbd_server_options *options, const struct nbd_banner *banner);
/* The URI a client on this machine connects to export `export_name` ("": the default) with,
 * percent-encoded, in libnbd's form (nbds+unix://USER@/NAME?socket=...&tls-psk-file=FILE
 * under TLS required). 0, or -ENAMETOOLONG. */
int nbd_connect_uri(const struct nbd_server_options *options, const char *unix_path,
                    const char *tcp_address, const char *export_name, char *uri, size_t size);
/* nbd_connect_uri() of this server's sockets and TLS settings ("-" when it cannot be made). */
int nbd_server_uri(struct nbd_server *server, const char *export_name, char *uri, size_t size);

/* Listen, serve until SIGINT/SIGTERM, clean up. Returns the exit status;
 * prints its own error lines. The server owns the devices of `options` (and
 * the hot-added ones) and destroys them when it ends, even on an error. */
int nbd_server_run(const struct nbd_server_options *options);

#endif
