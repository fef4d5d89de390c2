/* transmission.c - the NBD transmission phase of `uzram serve`: requests and replies.
 * Each connection's workers take turns reading a request, run it on the engine and reply. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "nbd/protocol.h"
#include "nbd/server.h"
#include "common/util.h"

#define LOG_LINES_PER_CLIENT 20

/* A client connection in transmission: a small group of worker threads of its
 * own (nbdkit's "parallel" model, with lazy helpers). One worker at a time
 * holds the receiver role: it reads one request, gives the role up and runs
 * the request, sending the reply whole under the send lock. A worker that
 * gives the role up wakes an idle one only when another whole request is
 * already buffered; otherwise it takes the role back itself after its
 * request. A client that keeps the server idle is thus served by one thread
 * with no hand-offs (no wake-ups, no stealing the client's CPU), and a
 * backlog spreads over every worker. A slow or stalled client holds only its
 * own threads, and per-connection memory stays bounded by threads x request
 * size. The thread that did the handshake runs one worker and joins the others
 * (nbd_transmission()). Private to this file: the listener and the fuzz
 * target see only nbd_transmission(). */
struct nbd_connection {
    struct nbd_session session;
    struct nbd_server *server;
    bool read_only;

    pthread_mutex_t receive_lock; /* guards receiving and idle_workers */
    pthread_cond_t receiver_wanted;
    bool receiving;        /* a worker holds the receiver role */
    unsigned idle_workers; /* workers waiting for the role */
    /* Moving average of the time a request takes to run and answer. */
    _Atomic uint64_t request_ns;
    /* Only the receiver touches these: bytes not yet parsed are input[start, end). */
    unsigned char *input;
    size_t input_start, input_end;
    bool receive_done; /* DISC, end of file or an error: nobody reads any more */

    /* Set by the receiver when it gives the role up with a whole request
     * still buffered: that request will be answered later, so replies may
     * wait for it (see NBD_SERVER_REPLY_BATCH). */
    atomic_bool requests_buffered;

    pthread_mutex_t send_lock; /* one reply goes out whole */
    /* Under send_lock: short replies held back, whole, in arrival order. */
    unsigned char held[NBD_SERVER_REPLY_BATCH * NBD_SERVER_HELD_REPLY_MAX];
    size_t held_bytes;
    unsigned held_replies;
    atomic_bool dead; /* sending failed: later replies are dropped */
};

/* One worker thread of a connection. */
struct nbd_worker {
    struct nbd_connection *conn;
    unsigned char *buffer; /* NBD_SERVER_WORKER_BUFFER bytes, reused for every request */
    pthread_t thread;
};

bool nbd_log_quiet;

void nbd_log(struct nbd_session *session, const char *format, ...)
{
    if (nbd_log_quiet)
        return;
    /* Only the connection's own threads log about it, but they may race on
     * the counter; an off-by-one in the cap is harmless. */
    unsigned lines = __atomic_fetch_add(&session->log_lines, 1, __ATOMIC_RELAXED);
    if (lines > LOG_LINES_PER_CLIENT)
        return;
    char message[512];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    if (lines == LOG_LINES_PER_CLIENT)
        fprintf(stderr, "uzram: client %u: %s (further messages about this client suppressed)\n",
                session->id, message);
    else
        fprintf(stderr, "uzram: client %u: %s\n", session->id, message);
}

uint32_t nbd_errno_to_wire(int err)
{
    switch (err) {
    case 0:
        return 0;
    case EPERM:
    case EROFS:
        return NBD_EPERM;
    case ENOMEM:
        return NBD_ENOMEM;
    case EINVAL:
        return NBD_EINVAL;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        return NBD_ENOSPC;
    case EOVERFLOW:
        return NBD_EOVERFLOW;
    case ENOTSUP:
        return NBD_ENOTSUP;
    case ESHUTDOWN:
        return NBD_ESHUTDOWN;
    default:
        return NBD_EIO;
    }
}

static const char *command_name(uint16_t type)
{
    static const char *const names[] = {"READ", "WRITE", "DISC",         "FLUSH",
                                        "TRIM", "CACHE", "WRITE_ZEROES", "BLOCK_STATUS"};
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown command";
}

static const char *wire_error_name(uint32_t error)
{
    switch (error) {
    case NBD_EPERM:
        return "EPERM";
    case NBD_EIO:
        return "EIO";
    case NBD_ENOMEM:
        return "ENOMEM";
    case NBD_EINVAL:
        return "EINVAL";
    case NBD_ENOSPC:
        return "ENOSPC";
    case NBD_EOVERFLOW:
        return "EOVERFLOW";
    case NBD_ENOTSUP:
        return "ENOTSUP";
    default:
        return "error";
    }
}

uint32_t nbd_check_request(const struct nbd_session *s, bool read_only, const struct nbd_request *r,
                           const char **reason)
{
    /* FUA must be accepted on every command once SEND_FUA is advertised. */
    uint16_t allowed = NBD_CMD_FLAG_FUA;
    bool ranged = true, writes = false;
    const char *unused;

    if (reason == NULL)
        reason = &unused;
    switch (r->type) {
    case NBD_CMD_READ:
        if (s->structured)
            allowed |= NBD_CMD_FLAG_DF;
        break;
    case NBD_CMD_WRITE:
    case NBD_CMD_TRIM:
        writes = true;
        break;
    case NBD_CMD_WRITE_ZEROES:
        writes = true;
        allowed |= NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO;
        break;
    case NBD_CMD_DISC:
    case NBD_CMD_FLUSH:
        ranged = false;
        break;
    case NBD_CMD_CACHE:
        break;
    case NBD_CMD_BLOCK_STATUS:
        allowed |= NBD_CMD_FLAG_REQ_ONE;
        break;
    default:
        *reason = "unknown command";
        return NBD_EINVAL;
    }
    if (r->flags & ~allowed) {
        *reason = "command flag not valid for this command";
        return NBD_EINVAL;
    }
    if (r->type == NBD_CMD_BLOCK_STATUS && !s->meta_allocation) {
        *reason = "BLOCK_STATUS without a selected meta context";
        return NBD_EINVAL;
    }
    if (writes && read_only) {
        *reason = "the export is read-only";
        return NBD_EPERM;
    }
    if (!ranged)
        return 0;
    if (r->offset % NBD_SERVER_MIN_BLOCK != 0 || r->length % NBD_SERVER_MIN_BLOCK != 0) {
        *reason = "offset or length not a multiple of 512";
        return NBD_EINVAL;
    }
    if ((r->type == NBD_CMD_READ || r->type == NBD_CMD_WRITE) &&
        r->length > NBD_SERVER_MAX_PAYLOAD) {
        *reason = "length above the 32 MiB maximum block size";
        return r->type == NBD_CMD_READ && s->structured ? NBD_EOVERFLOW : NBD_EINVAL;
    }
    /* A BLOCK_STATUS reply needs at least one non-empty descriptor. */
    if (r->type == NBD_CMD_BLOCK_STATUS && r->length == 0) {
        *reason = "zero-length BLOCK_STATUS";
        return NBD_EINVAL;
    }
    if (r->offset > s->size || r->length > s->size - r->offset) {
        *reason = "range past the end of the export";
        return (r->type == NBD_CMD_WRITE || r->type == NBD_CMD_WRITE_ZEROES) ? NBD_ENOSPC
                                                                             : NBD_EINVAL;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Sending replies
 * ---------------------------------------------------------------------- */

/* Send one whole reply under the connection's send lock, after the replies
 * held back so far; or hold it back too when it is short and another request
 * is already buffered (whoever answers that one sends them all: a request
 * whose reply is held always has a successor, or the connection stops and
 * the exiting workers flush). A failed or timed out send kills the
 * connection: shutdown() wakes the worker that waits in recv(), and the
 * others stop at their next turn. */
static void conn_send(struct nbd_connection *conn, struct iovec *iov, int count)
{
    size_t length = 0;
    for (int i = 0; i < count; i++)
        length += iov[i].iov_len;
    if (atomic_load(&conn->dead))
        return;
    pthread_mutex_lock(&conn->send_lock);
    int rc = 0;
    if (atomic_load(&conn->dead)) {
        conn->held_bytes = 0;
        conn->held_replies = 0;
    } else if (count > 0 && length <= NBD_SERVER_HELD_REPLY_MAX &&
               conn->held_replies + 1 < NBD_SERVER_REPLY_BATCH &&
               atomic_load_explicit(&conn->requests_buffered, memory_order_relaxed)) {
        for (int i = 0; i < count; i++) {
            memcpy(conn->held + conn->held_bytes, iov[i].iov_base, iov[i].iov_len);
            conn->held_bytes += iov[i].iov_len;
        }
        conn->held_replies++;
    } else {
        /* Held replies first, in the same sendmsg when the iovec is short. */
        struct iovec joined[4] = {{conn->held, conn->held_bytes}};
        if (conn->held_bytes > 0 && count < 4) {
            for (int i = 0; i < count; i++)
                joined[i + 1] = iov[i];
            iov = joined;
            count++;
        } else if (conn->held_bytes > 0) {
            rc = util_send_iov_timeout(conn->session.fd, joined, 1, NBD_SERVER_SEND_TIMEOUT);
        }
        if (rc == 0)
            rc = util_send_iov_timeout(conn->session.fd, iov, count, NBD_SERVER_SEND_TIMEOUT);
        conn->held_bytes = 0;
        conn->held_replies = 0;
    }
    if (rc < 0) {
        atomic_store(&conn->dead, true);
        shutdown(conn->session.fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&conn->send_lock);
    if (rc == -ETIMEDOUT)
        nbd_log(&conn->session,
                "a reply could not be sent within %d s (client not reading); "
                "dropping the connection",
                NBD_SERVER_SEND_TIMEOUT);
}

/* Send the replies held back, if any (a worker leaving does this). */
static void conn_flush(struct nbd_connection *conn)
{
    conn_send(conn, NULL, 0);
}

static void put_simple_header(unsigned char *h, uint32_t error, uint64_t cookie)
{
    util_put32(h, NBD_SIMPLE_REPLY_MAGIC);
    util_put32(h + 4, error);
    util_put64(h + 8, cookie);
}

static void put_chunk_header(unsigned char *h, uint16_t flags, uint16_t type, uint64_t cookie,
                             uint32_t length)
{
    util_put32(h, NBD_STRUCTURED_REPLY_MAGIC);
    util_put16(h + 4, flags);
    util_put16(h + 6, type);
    util_put64(h + 8, cookie);
    util_put32(h + 16, length);
}

static void reply_simple(struct nbd_connection *conn, uint64_t cookie, uint32_t error)
{
    unsigned char header[NBD_SIMPLE_REPLY_SIZE];
    put_simple_header(header, error, cookie);
    struct iovec iov = {header, sizeof header};
    conn_send(conn, &iov, 1);
}

/* An error reply: a structured ERROR chunk with a message when structured
 * replies are on (required for READ, preferred for the rest), else simple. */
static void reply_error(struct nbd_connection *conn, const struct nbd_request *r, uint32_t error,
                        const char *message)
{
    if (!conn->session.structured) {
        reply_simple(conn, r->cookie, error);
        return;
    }
    size_t message_length = strlen(message);
    unsigned char header[NBD_STRUCTURED_REPLY_SIZE + 6];
    put_chunk_header(header, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR, r->cookie,
                     (uint32_t)(6 + message_length));
    util_put32(header + NBD_STRUCTURED_REPLY_SIZE, error);
    util_put16(header + NBD_STRUCTURED_REPLY_SIZE + 4, (uint16_t)message_length);
    struct iovec iov[2] = {{header, sizeof header}, {(void *)message, message_length}};
    conn_send(conn, iov, 2);
}

static void reply_engine_error(struct nbd_connection *conn, const struct nbd_request *r, int rc)
{
    uint32_t error = nbd_errno_to_wire(-rc);
    char message[128];
    snprintf(message, sizeof message, "%s failed: %s", command_name(r->type), strerror(-rc));
    /* ENOSPC from a full mem_limit is the user's setting, not a fault. */
    if (error != NBD_ENOSPC)
        nbd_log(&conn->session, "%s at %llu+%u: %s", command_name(r->type),
                (unsigned long long)r->offset, r->length, strerror(-rc));
    reply_error(conn, r, error, message);
}

/* ------------------------------------------------------------------------
 * Commands
 * ---------------------------------------------------------------------- */

/* Large request buffers of all connections together stay under
 * NBD_SERVER_BUFFER_BUDGET: a worker that would pass it waits for others to
 * finish, so many clients sending 32 MiB requests cannot exhaust memory. */
static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t budget_freed = PTHREAD_COND_INITIALIZER;
static uint64_t budget_used;

/* A buffer for `length` bytes of request data: the worker's own when it is
 * big enough (no allocation per request), else a fresh one. */
static void *request_buffer(struct nbd_worker *w, size_t length)
{
    if (length <= NBD_SERVER_WORKER_BUFFER)
        return w->buffer;
    pthread_mutex_lock(&budget_lock);
    while (budget_used + length > NBD_SERVER_BUFFER_BUDGET)
        pthread_cond_wait(&budget_freed, &budget_lock);
    budget_used += length;
    pthread_mutex_unlock(&budget_lock);
    void *buffer = malloc(length);
    if (!buffer) {
        pthread_mutex_lock(&budget_lock);
        budget_used -= length;
        pthread_cond_broadcast(&budget_freed);
        pthread_mutex_unlock(&budget_lock);
    }
    return buffer;
}

static void release_buffer(struct nbd_worker *w, void *buffer, size_t length)
{
    if (buffer == w->buffer || buffer == NULL)
        return;
    free(buffer);
    pthread_mutex_lock(&budget_lock);
    budget_used -= length;
    pthread_cond_broadcast(&budget_freed);
    pthread_mutex_unlock(&budget_lock);
}

struct read_segment {
    uint64_t offset; /* relative to the request */
    uint64_t length;
    bool hole;
};

static int add_segment(struct read_segment *segs, size_t max_segs, size_t *n, uint64_t offset,
                       uint64_t length, bool hole)
{
    if (*n > 0 && segs[*n - 1].hole == hole) {
        segs[*n - 1].length += length;
        return 0;
    }
    if (*n == max_segs)
        return -ENOBUFS;
    segs[(*n)++] = (struct read_segment){offset, length, hole};
    return 0;
}

/* Split a read into data and hole segments using the engine's extents. Zero
 * runs shorter than NBD_SERVER_HOLE_MIN stay inside data segments so that
 * fragmented devices do not turn every read into hundreds of chunks.
 * -ENOBUFS when the table is too small (the caller then sends one chunk). */
static int plan_read(struct uzram *dev, const struct nbd_request *r, struct read_segment *segs,
                     size_t max_segs, size_t *count)
{
    size_t n = 0;
    uint64_t position = 0, zero_start = 0, zero_length = 0;
    int rc = 0;

    while (rc == 0 && position < r->length) {
        uint64_t run = 0;
        unsigned flags = 0;
        rc = uzram_extent(dev, r->offset + position, r->length - position, &run, &flags);
        if (rc < 0)
            return rc;
        if (run == 0 || run > r->length - position)
            run = r->length - position;
        if (flags & UZRAM_EXTENT_ZERO) {
            if (zero_length == 0)
                zero_start = position;
            zero_length += run;
        } else {
            if (zero_length > 0)
                rc = add_segment(segs, max_segs, &n, zero_start, zero_length,
                                 zero_length >= NBD_SERVER_HOLE_MIN);
            zero_length = 0;
            if (rc == 0)
                rc = add_segment(segs, max_segs, &n, position, run, false);
        }
        position += run;
    }
    if (rc == 0 && zero_length > 0)
        rc = add_segment(segs, max_segs, &n, zero_start, zero_length,
                         zero_length >= NBD_SERVER_HOLE_MIN);
    *count = n;
    return rc;
}

static void do_read_simple(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r)
{
    struct nbd_connection *conn = w->conn;
    unsigned char header[NBD_SIMPLE_REPLY_SIZE];
    void *buf = request_buffer(w, r->length);
    int rc = 0;

    if (buf == NULL)
        rc = -ENOMEM;
    else if (r->length)
        rc = uzram_read(dev, r->offset, buf, r->length);
    if (rc < 0) {
        reply_engine_error(conn, r, rc);
    } else {
        put_simple_header(header, 0, r->cookie);
        struct iovec iov[2] = {{header, sizeof header}, {buf, r->length}};
        conn_send(conn, iov, r->length ? 2 : 1);
    }
    if (buf != NULL)
        release_buffer(w, buf, r->length);
}

/* The chunk headers of a structured read: OFFSET_DATA needs 8 bytes after the
 * common header, OFFSET_HOLE 12. */
#define CHUNK_HEADER_MAX (NBD_STRUCTURED_REPLY_SIZE + 12)

static void do_read_structured(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r)
{
    struct nbd_connection *conn = w->conn;
    if (r->length == 0) {
        unsigned char header[NBD_STRUCTURED_REPLY_SIZE];
        put_chunk_header(header, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, r->cookie, 0);
        struct iovec iov = {header, sizeof header};
        conn_send(conn, &iov, 1);
        return;
    }

    /* Holes are at least NBD_SERVER_HOLE_MIN long and alternate with data segments. */
    enum { MAX_SEGMENTS = 2 * (NBD_SERVER_MAX_PAYLOAD / NBD_SERVER_HOLE_MIN) + 2 };
    /* Small reads and DF reads are one chunk: no tables to allocate. */
    bool planned = !(r->flags & NBD_CMD_FLAG_DF) && r->length >= 2 * NBD_SERVER_HOLE_MIN;
    struct read_segment one_segment;
    unsigned char one_header[CHUNK_HEADER_MAX];
    struct iovec one_iov[2];
    struct read_segment *segs = &one_segment;
    unsigned char *headers = one_header;
    struct iovec *iov = one_iov;
    void *buf = request_buffer(w, r->length);
    size_t count = 1;
    int rc = 0;

    if (planned) {
        segs = malloc(MAX_SEGMENTS * sizeof *segs);
        headers = malloc(MAX_SEGMENTS * CHUNK_HEADER_MAX);
        iov = malloc(MAX_SEGMENTS * 2 * sizeof *iov);
    }
    if (segs == NULL || headers == NULL || iov == NULL || buf == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    segs[0] = (struct read_segment){0, r->length, false};
    if (planned)
        rc = plan_read(dev, r, segs, MAX_SEGMENTS, &count);
    if (rc == -ENOBUFS) {
        segs[0] = (struct read_segment){0, r->length, false};
        count = 1;
        rc = 0;
    }
    if (rc == 0 && (r->flags & NBD_CMD_FLAG_DF)) {
        /* DF: one content chunk; a hole only if the whole range is zero. */
        uint64_t run = 0;
        unsigned flags = 0;
        rc = uzram_extent(dev, r->offset, r->length, &run, &flags);
        if (rc == 0 && run == r->length && (flags & UZRAM_EXTENT_ZERO))
            segs[0].hole = true;
    }
    for (size_t i = 0; rc == 0 && i < count; i++)
        if (!segs[i].hole)
            rc = uzram_read(dev, r->offset + segs[i].offset, (char *)buf + segs[i].offset,
                            segs[i].length);
    if (rc < 0)
        goto out;

    int n = 0;
    for (size_t i = 0; i < count; i++) {
        unsigned char *h = headers + i * CHUNK_HEADER_MAX;
        uint16_t done = i + 1 == count ? NBD_REPLY_FLAG_DONE : 0;
        if (segs[i].hole) {
            put_chunk_header(h, done, NBD_REPLY_TYPE_OFFSET_HOLE, r->cookie, 12);
            util_put64(h + NBD_STRUCTURED_REPLY_SIZE, r->offset + segs[i].offset);
            util_put32(h + NBD_STRUCTURED_REPLY_SIZE + 8, (uint32_t)segs[i].length);
            iov[n++] = (struct iovec){h, NBD_STRUCTURED_REPLY_SIZE + 12};
        } else {
            put_chunk_header(h, done, NBD_REPLY_TYPE_OFFSET_DATA, r->cookie,
                             (uint32_t)(8 + segs[i].length));
            util_put64(h + NBD_STRUCTURED_REPLY_SIZE, r->offset + segs[i].offset);
            iov[n++] = (struct iovec){h, NBD_STRUCTURED_REPLY_SIZE + 8};
            iov[n++] = (struct iovec){(char *)buf + segs[i].offset, segs[i].length};
        }
    }
    conn_send(conn, iov, n);
out:
    if (rc < 0)
        reply_engine_error(conn, r, rc);
    if (buf != NULL)
        release_buffer(w, buf, r->length);
    if (planned) {
        free(iov);
        free(headers);
        free(segs);
    }
}

static void do_block_status(struct nbd_connection *conn, struct uzram *dev,
                            const struct nbd_request *r)
{
    unsigned max = (r->flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : NBD_SERVER_MAX_EXTENTS;
    size_t size = NBD_STRUCTURED_REPLY_SIZE + 4 + 8 * (size_t)max;
    unsigned char *reply = malloc(size);
    unsigned count = 0;
    uint64_t position = 0;
    uint32_t last_flags = 0;
    int rc = 0;

    if (reply == NULL) {
        reply_engine_error(conn, r, -ENOMEM);
        return;
    }
    unsigned char *descriptors = reply + NBD_STRUCTURED_REPLY_SIZE + 4;
    while (position < r->length) {
        uint64_t run = 0;
        unsigned flags = 0;
        rc = uzram_extent(dev, r->offset + position, r->length - position, &run, &flags);
        if (rc < 0)
            break;
        if (run == 0 || run > r->length - position)
            run = r->length - position;
        uint32_t state = ((flags & UZRAM_EXTENT_HOLE) ? NBD_STATE_HOLE : 0) |
                         ((flags & UZRAM_EXTENT_ZERO) ? NBD_STATE_ZERO : 0);
        if (count > 0 && state == last_flags) {
            unsigned char *d = descriptors + 8 * (count - 1);
            util_put32(d, util_get32(d) + (uint32_t)run);
        } else if (count == max) {
            break;
        } else {
            unsigned char *d = descriptors + 8 * count;
            util_put32(d, (uint32_t)run);
            util_put32(d + 4, state);
            last_flags = state;
            count++;
        }
        position += run;
    }
    if (rc < 0 || count == 0) {
        free(reply);
        reply_engine_error(conn, r, rc < 0 ? rc : -EIO);
        return;
    }
    put_chunk_header(reply, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS, r->cookie,
                     4 + 8 * count);
    util_put32(reply + NBD_STRUCTURED_REPLY_SIZE, NBD_CONTEXT_ID_BASE_ALLOCATION);
    struct iovec iov = {reply, NBD_STRUCTURED_REPLY_SIZE + 4 + 8 * (size_t)count};
    conn_send(conn, &iov, 1);
    free(reply);
}

/* Run one checked request on the engine and send its reply. */
static void execute(struct nbd_worker *w, const struct nbd_request *r, const void *payload)
{
    struct nbd_connection *conn = w->conn;
    struct uzram *dev = nbd_server_export(conn->server)->dev;
    int rc = 0;

    /* Nobody will see the reply of a dead connection; skip the work. */
    if (atomic_load_explicit(&conn->dead, memory_order_relaxed))
        return;

    switch (r->type) {
    case NBD_CMD_READ:
        if (conn->session.structured)
            do_read_structured(w, dev, r);
        else
            do_read_simple(w, dev, r);
        return;
    case NBD_CMD_BLOCK_STATUS:
        do_block_status(conn, dev, r);
        return;
    case NBD_CMD_WRITE:
        if (r->length)
            rc = uzram_write(dev, r->offset, payload, r->length);
        break;
    case NBD_CMD_TRIM:
        if (r->length)
            rc = uzram_discard(dev, r->offset, r->length);
        break;
    case NBD_CMD_WRITE_ZEROES:
        /* FAST_ZERO needs no check: zeroing is as fast as it gets here. */
        if (r->length)
            rc = uzram_write_zeroes(dev, r->offset, r->length,
                                    (r->flags & NBD_CMD_FLAG_NO_HOLE) != 0);
        break;
    case NBD_CMD_FLUSH:
    case NBD_CMD_CACHE:
        /* Data lives in RAM and writes finish before their reply, so there is
         * nothing to flush (which is also why FUA and MULTI_CONN are true). */
        break;
    default:
        rc = -EINVAL;
        break;
    }
    if (rc < 0)
        reply_engine_error(conn, r, rc);
    else
        reply_simple(conn, r->cookie, 0);
}

/* ------------------------------------------------------------------------
 * Receiving (every function here runs in the worker holding the receiver role)
 * ---------------------------------------------------------------------- */

static size_t input_available(const struct nbd_connection *conn)
{
    return conn->input_end - conn->input_start;
}

/* Make at least `need` (<= NBD_SERVER_INPUT_BUFFER) bytes available in the
 * input buffer. Each recv() takes whatever the client has sent, up to the free
 * space, so later requests usually need no system call at all. Returns 1, 0
 * on end of file before any unparsed byte, -ECONNRESET on end of file in the
 * middle, -errno on error. */
static int input_fill(struct nbd_connection *conn, size_t need)
{
    while (input_available(conn) < need) {
        if (conn->input_start == conn->input_end) {
            conn->input_start = conn->input_end = 0;
        } else if (NBD_SERVER_INPUT_BUFFER - conn->input_start < need) {
            memmove(conn->input, conn->input + conn->input_start, input_available(conn));
            conn->input_end -= conn->input_start;
            conn->input_start = 0;
        }
        ssize_t n = recv(conn->session.fd, conn->input + conn->input_end,
                         NBD_SERVER_INPUT_BUFFER - conn->input_end, 0);
        if (n > 0) {
            conn->input_end += (size_t)n;
            continue;
        }
        if (n == 0)
            return input_available(conn) == 0 ? 0 : -ECONNRESET;
        if (errno == EINTR)
            continue;
        if (errno == EWOULDBLOCK)
            return -EAGAIN;
        return -errno;
    }
    return 1;
}

/* Copy up to `length` buffered bytes to `to` (NULL: drop them); returns how many. */
static size_t input_take(struct nbd_connection *conn, void *to, size_t length)
{
    size_t n = input_available(conn) < length ? input_available(conn) : length;
    if (to != NULL)
        memcpy(to, conn->input + conn->input_start, n);
    conn->input_start += n;
    return n;
}

/* The fields of a 28-byte request header (its magic is checked apart). */
static struct nbd_request parse_request_header(const unsigned char *header)
{
    return (struct nbd_request){
        .flags = util_get16(header + 4),
        .type = util_get16(header + 6),
        .cookie = util_get64(header + 8),
        .offset = util_get64(header + 16),
        .length = util_get32(header + 24),
    };
}

/* Whether a whole request (a WRITE with its payload) is buffered. Replies
 * may wait for such a request, so it must be able to run without waiting for
 * more bytes from the client. */
static bool input_holds_request(const struct nbd_connection *conn)
{
    if (conn->receive_done || input_available(conn) < NBD_REQUEST_SIZE)
        return false;
    struct nbd_request r = parse_request_header(conn->input + conn->input_start);
    size_t whole = NBD_REQUEST_SIZE;
    if (r.type == NBD_CMD_WRITE)
        whole += r.length;
    return input_available(conn) >= whole;
}

/* Receive a WRITE payload into `buf` (NULL: skip it). Returns 0 or a negative
 * errno (-ECONNRESET when the client closed in the middle). */
static int receive_payload(struct nbd_connection *conn, void *buf, uint32_t length)
{
    if (length <= NBD_SERVER_SMALL_PAYLOAD) {
        int rc = input_fill(conn, length);
        if (rc <= 0)
            return rc == 0 ? -ECONNRESET : rc;
        input_take(conn, buf, length);
        return 0;
    }
    /* Large: what is buffered already, then the rest straight from the socket. */
    size_t done = input_take(conn, buf, length);
    if (buf == NULL)
        return util_discard(conn->session.fd, length - done);
    int rc = util_read_full(conn->session.fd, (char *)buf + done, length - done);
    return rc == 1 ? 0 : rc == 0 ? -ECONNRESET : rc;
}

/* What the worker should do after receive_request(). */
enum receive_result {
    RECEIVE_STOP,    /* no more requests on this connection */
    RECEIVE_REQUEST, /* run *r (with *payload for a WRITE) */
    RECEIVE_REFUSED, /* reply *error / *reason to *r */
};

static void log_receive_failure(struct nbd_connection *conn, int rc)
{
    if (rc == -ECONNRESET)
        nbd_log(&conn->session, "connection closed in the middle of a request");
    else if (!atomic_load(&conn->dead))
        nbd_log(&conn->session, "receive failed: %s", strerror(-rc));
}

/* Read and check one request (and a WRITE's payload). Called with the
 * receiver role held; sets receive_done when the connection must not be read again. */
static enum receive_result receive_request(struct nbd_worker *w, struct nbd_request *r,
                                           void **payload, uint32_t *error, const char **reason)
{
    struct nbd_connection *conn = w->conn;
    struct nbd_session *s = &conn->session;

    *payload = NULL;
    /* After a failed send nobody would see the replies: stop reading. */
    if (conn->receive_done || atomic_load_explicit(&conn->dead, memory_order_relaxed))
        goto stop;
    int rc = input_fill(conn, NBD_REQUEST_SIZE);
    if (rc <= 0) {
        /* rc == 0: the client closed without DISC: allowed, nothing to say. */
        if (rc < 0)
            log_receive_failure(conn, rc);
        goto stop;
    }
    const unsigned char *header = conn->input + conn->input_start;
    uint32_t magic = util_get32(header);
    if (magic != NBD_REQUEST_MAGIC) {
        nbd_log(s, "bad request magic 0x%08x; closing", (unsigned)magic);
        goto stop;
    }
    *r = parse_request_header(header);
    conn->input_start += NBD_REQUEST_SIZE;

    *reason = NULL;
    *error = nbd_check_request(s, conn->read_only, r, reason);
    if (r->type == NBD_CMD_DISC) {
        if (*error)
            nbd_log(s, "DISC with invalid flags 0x%x; disconnecting anyway", (unsigned)r->flags);
        /* Requests already read finish and reply on their own threads. */
        goto stop;
    }
    if (r->type == NBD_CMD_WRITE && r->length > NBD_SERVER_WRITE_DISCARD_CAP) {
        nbd_log(s, "WRITE of %u bytes exceeds the %u byte limit; closing", r->length,
                NBD_SERVER_WRITE_DISCARD_CAP);
        goto stop;
    }
    if (*error) {
        nbd_log(s, "%s (type %u, flags 0x%x) at %llu+%u refused with %s: %s", command_name(r->type),
                r->type, (unsigned)r->flags, (unsigned long long)r->offset, r->length,
                wire_error_name(*error), *reason);
    } else if (r->type == NBD_CMD_WRITE && r->length > 0) {
        *payload = request_buffer(w, r->length);
        if (*payload == NULL) {
            *error = NBD_ENOMEM;
            *reason = "server out of memory";
        }
    }
    if (r->type == NBD_CMD_WRITE && r->length > 0) {
        /* A refused WRITE's payload is skipped to stay in step. */
        rc = receive_payload(conn, *payload, r->length);
        if (rc < 0) {
            if (rc == -ECONNRESET)
                nbd_log(s, "connection closed in the middle of a WRITE payload");
            else
                log_receive_failure(conn, rc);
            if (*payload != NULL)
                release_buffer(w, *payload, r->length);
            *payload = NULL;
            goto stop;
        }
    }
    return *error ? RECEIVE_REFUSED : RECEIVE_REQUEST;

stop:
    conn->receive_done = true;
    return RECEIVE_STOP;
}

/* ------------------------------------------------------------------------
 * Workers
 * ---------------------------------------------------------------------- */

static void connection_init(struct nbd_connection *conn, const struct nbd_session *session,
                            struct nbd_server *server, bool read_only)
{
    conn->session = *session;
    conn->server = server;
    conn->read_only = read_only;
    pthread_mutex_init(&conn->receive_lock, NULL);
    pthread_cond_init(&conn->receiver_wanted, NULL);
    pthread_mutex_init(&conn->send_lock, NULL);
    atomic_init(&conn->dead, false);
    atomic_init(&conn->requests_buffered, false);
    atomic_init(&conn->request_ns, 0);
}

static void connection_destroy(struct nbd_connection *conn)
{
    pthread_mutex_destroy(&conn->receive_lock);
    pthread_cond_destroy(&conn->receiver_wanted);
    pthread_mutex_destroy(&conn->send_lock);
}

static int worker_init(struct nbd_worker *worker, struct nbd_connection *conn)
{
    worker->conn = conn;
    worker->buffer = malloc(NBD_SERVER_WORKER_BUFFER);
    return worker->buffer ? 0 : -ENOMEM;
}

static void worker_destroy(struct nbd_worker *worker)
{
    free(worker->buffer);
    worker->buffer = NULL;
}

/* Wait until the receiver role is free and take it; false once the
 * connection is done with receiving. */
static bool take_receiver_role(struct nbd_connection *conn)
{
    pthread_mutex_lock(&conn->receive_lock);
    /* receive_done is only read while nobody holds the role (it is written by
     * the holder), which release_receiver_role() broadcasts about. */
    while (conn->receiving) {
        conn->idle_workers++;
        pthread_cond_wait(&conn->receiver_wanted, &conn->receive_lock);
        conn->idle_workers--;
    }
    bool taken = !conn->receive_done;
    conn->receiving = taken;
    pthread_mutex_unlock(&conn->receive_lock);
    return taken;
}

/* Give the role up. An idle worker is woken for a buffered request only when
 * this connection's requests take long enough to be worth a hand-off
 * (NBD_SERVER_HANDOFF_WORTH_NS); otherwise this worker takes the role back
 * itself after its request. */
static void release_receiver_role(struct nbd_connection *conn)
{
    bool waiting = input_holds_request(conn);
    bool worth_it = atomic_load_explicit(&conn->request_ns, memory_order_relaxed) >=
                    NBD_SERVER_HANDOFF_WORTH_NS;
    /* Relaxed is enough: it is read under send_lock, which every later
     * answer takes, so a stale "true" is always followed by a flush. A
     * seq_cst store would fence every request. */
    atomic_store_explicit(&conn->requests_buffered, waiting, memory_order_relaxed);
    pthread_mutex_lock(&conn->receive_lock);
    conn->receiving = false;
    if (conn->receive_done)
        pthread_cond_broadcast(&conn->receiver_wanted);
    else if (waiting && worth_it && conn->idle_workers > 0)
        pthread_cond_signal(&conn->receiver_wanted);
    pthread_mutex_unlock(&conn->receive_lock);
}

/* Fold the time one request took into the connection's average (weight 1/8;
 * workers racing on it lose an update at worst). */
static void account_request_time(struct nbd_connection *conn, uint64_t took_ns)
{
    uint64_t average = atomic_load_explicit(&conn->request_ns, memory_order_relaxed);
    average = average == 0 ? took_ns : average - average / 8 + took_ns / 8;
    atomic_store_explicit(&conn->request_ns, average, memory_order_relaxed);
}

/* A worker's loop: serve requests until DISC, end of file, a failed send or a
 * protocol violation that forbids going on. Runs as a thread start routine. */
static void *worker_main(void *arg)
{
    struct nbd_worker *w = arg;
    struct nbd_connection *conn = w->conn;

    while (take_receiver_role(conn)) {
        struct nbd_request r;
        void *payload;
        uint32_t error = 0;
        const char *reason = NULL;

        enum receive_result result = receive_request(w, &r, &payload, &error, &reason);
        release_receiver_role(conn);

        if (result == RECEIVE_STOP)
            break;
        uint64_t started = util_now_ns();
        if (result == RECEIVE_REFUSED)
            reply_error(conn, &r, error, reason);
        else
            execute(w, &r, payload);
        if (payload != NULL)
            release_buffer(w, payload, r.length);
        account_request_time(conn, util_now_ns() - started);
    }
    conn_flush(conn);
    return NULL;
}

int nbd_transmission(const struct nbd_session *session, struct nbd_server *server, bool read_only,
                     unsigned threads)
{
    struct nbd_connection *conn = calloc(1, sizeof *conn);
    struct nbd_worker *workers = calloc(threads < 1 ? 1 : threads, sizeof *workers);
    unsigned started = 0;
    int rc = -ENOMEM;

    if (conn == NULL || workers == NULL) {
        struct nbd_session copy = *session;
        nbd_log(&copy, "out of memory; closing");
        goto out;
    }
    connection_init(conn, session, server, read_only);
    conn->input = malloc(NBD_SERVER_INPUT_BUFFER);
    if (conn->input == NULL || worker_init(&workers[0], conn) < 0) {
        nbd_log(&conn->session, "out of memory; closing");
        goto out_conn;
    }
    started = 1;

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, NBD_SERVER_THREAD_STACK);
    for (unsigned i = 1; i < threads; i++) {
        /* Fewer threads than asked for still serve the client correctly. */
        if (worker_init(&workers[i], conn) < 0 ||
            pthread_create(&workers[i].thread, &attr, worker_main, &workers[i]) != 0) {
            worker_destroy(&workers[i]);
            break;
        }
        started++;
    }
    pthread_attr_destroy(&attr);

    worker_main(&workers[0]);
    for (unsigned i = 1; i < started; i++)
        pthread_join(workers[i].thread, NULL);
    rc = atomic_load(&conn->dead) ? -EPIPE : 0;
out_conn:
    for (unsigned i = 0; i < started; i++)
        worker_destroy(&workers[i]);
    free(conn->input);
    connection_destroy(conn);
out:
    free(workers);
    free(conn);
    return rc;
}
