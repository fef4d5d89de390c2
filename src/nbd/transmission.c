/* transmission.c - the NBD transmission phase of `uzram serve`: requests and replies.
 * Each connection's workers take turns reading a request, run it on the engine and reply. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "nbd/protocol.h"
#include "nbd/budget.h"
#include "nbd/exports.h"
#include "nbd/io.h"
#include "nbd/limits.h"
#include "nbd/log.h"
#include "nbd/request.h"
#include "nbd/session.h"
#include "nbd/transmission.h"
#include "common/util.h"

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
 * arrive whole within settings.timeout. Private to this file: the listener
 * and the fuzz target see only nbd_transmission().
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
     * still to be sent while sent_gen equals held_gen (worker_space()). */
    unsigned char *buffer;
    size_t used;
    uint64_t held_gen;
    bool first;    /* the thread that called nbd_transmission() */
    bool has_role; /* this worker holds the receiver role */
};

/* READ data in a worker's buffer starts at multiples of this. */
#define WORKER_SPACE_ALIGN 64u
/* Most iovecs of a reply that are joined with the held replies into one
 * sendmsg (a longer reply goes out in a send of its own after them). */
#define SEND_JOIN_MAX 8

/* Request data a worker holds: a WRITE's payload or a READ's data (in the
 * worker's own buffer unless `borrowed` or `allocated`). */
struct request_data {
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

static void input_top_up(struct nbd_connection *conn);
static bool input_holds_request(const struct nbd_connection *conn);

/* ------------------------------------------------------------------------
 * Sending replies
 * ---------------------------------------------------------------------- */

/* ------------------------------------------------------------------------
 * Byte I/O: the transmission phase reaches the client only through these
 * three adapters over the connection's seam (io.c: the socket, or the TLS
 * session after STARTTLS), in errno-returning form.
 * ---------------------------------------------------------------------- */

/* Receive up to `length` bytes into `to`. `wait`: until some arrive or the
 * socket's receive timeout passes (SO_RCVTIMEO, NBD_SERVER_IDLE_MS); else
 * only what is there already. Returns the count, 0 at end of file, -EAGAIN
 * when nothing came, -EINTR (the caller retries) or another -errno. */
static ssize_t conn_recv(struct nbd_connection *conn, void *to, size_t length, bool wait)
{
    ssize_t n = nbd_io_recv(&conn->session, to, length, wait ? 0 : MSG_DONTWAIT);
    if (n >= 0)
        return n;
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

/* Send `iov` whole within settings.timeout seconds. 0, -ETIMEDOUT or -errno. */
static int conn_send_iov(struct nbd_connection *conn, struct iovec *iov, int count)
{
    return nbd_io_send_iov_timeout(&conn->session, iov, count, (int)conn->settings.timeout);
}

/* Wait until bytes can be received, at most `timeout_ms` (-1: no limit).
 * 1 readable, 0 timed out or interrupted (the caller looks again), -errno. */
static int conn_wait_readable(struct nbd_connection *conn, int timeout_ms)
{
    return nbd_io_wait_readable(&conn->session, timeout_ms);
}

/* With send_lock held: the replies held back so far, then `iov`, in one
 * sendmsg when the iovec is short. A failed or timed out send kills the
 * connection: shutdown() wakes the worker that waits in recv() or poll(), and
 * the others stop at their next turn. Either way the held replies are gone
 * afterwards, and sent_gen says so to the workers whose buffers they used.
 * Returns 0 or a negative errno. */
static int send_locked(struct nbd_connection *conn, struct iovec *iov, int count)
{
    int rc = 0;
    unsigned held = conn->held_iovs;

    if (atomic_load(&conn->dead)) {
        rc = -EPIPE;
    } else if (held > 0 && count <= SEND_JOIN_MAX) {
        struct iovec joined[2 * NBD_SERVER_REPLY_BATCH + SEND_JOIN_MAX];
        memcpy(joined, conn->held_iov, held * sizeof joined[0]);
        if (count > 0)
            memcpy(joined + held, iov, (size_t)count * sizeof joined[0]);
        rc = conn_send_iov(conn, joined, (int)held + count);
    } else {
        if (held > 0)
            rc = conn_send_iov(conn, conn->held_iov, (int)held);
        if (rc == 0 && count > 0)
            rc = conn_send_iov(conn, iov, count);
    }
    if (held > 0) {
        conn->held_bytes = 0;
        conn->held_iovs = 0;
        conn->held_replies = 0;
        atomic_fetch_add_explicit(&conn->sent_gen, 1, memory_order_release);
    }
    if (rc < 0 && rc != -EPIPE) {
        atomic_store(&conn->dead, true);
        shutdown(conn->session.fd, SHUT_RDWR);
        if (rc == -ETIMEDOUT)
            nbd_log(&conn->session,
                    "a reply could not be sent within %u s (client not reading); "
                    "dropping the connection",
                    conn->settings.timeout);
    }
    return rc;
}

/* With send_lock held: add a reply to the held ones. Its header part (every
 * iovec but the data) is copied; the data, if any, is referenced. */
static void hold_locked(struct nbd_connection *conn, const struct iovec *iov, int count,
                        const struct iovec *data)
{
    for (int i = 0; i < count; i++) {
        unsigned char *to = conn->held + conn->held_bytes;
        memcpy(to, iov[i].iov_base, iov[i].iov_len);
        conn->held_bytes += iov[i].iov_len;
        struct iovec *last = conn->held_iovs ? &conn->held_iov[conn->held_iovs - 1] : NULL;
        if (last && (unsigned char *)last->iov_base + last->iov_len == to)
            last->iov_len += iov[i].iov_len; /* contiguous with the last header */
        else
            conn->held_iov[conn->held_iovs++] = (struct iovec){to, iov[i].iov_len};
    }
    if (data != NULL && data->iov_len > 0)
        conn->held_iov[conn->held_iovs++] = *data;
    conn->held_replies++;
}

/* Send one whole reply under the connection's send lock, after the replies
 * held back so far; or hold it back too while another whole request is
 * already buffered (whoever answers that one sends them all: a request whose
 * reply is held always has a successor, or the connection stops and the
 * exiting workers flush). A reply can be held when its header part is at most
 * NBD_SERVER_HELD_REPLY_MAX bytes and its data, if any, lies in the worker's
 * own buffer (`data_in_worker`: the last iovec), which the worker does not
 * touch again until sent_gen says the data went out. At most
 * NBD_SERVER_REPLY_BATCH - 1 replies are held, so one send carries at most
 * NBD_SERVER_REPLY_BATCH.
 *
 * A worker that holds the receiver role looks for more requests first (one
 * recv() that does not wait): a reply is not sent alone while the client's
 * next requests are already on their way. */
static void reply_send(struct nbd_worker *w, struct iovec *iov, int count, bool data_in_worker)
{
    struct nbd_connection *conn = w->conn;
    const struct iovec *data = data_in_worker && count > 0 ? &iov[count - 1] : NULL;
    int header_count = data ? count - 1 : count;
    size_t header_length = 0;
    for (int i = 0; i < header_count; i++)
        header_length += iov[i].iov_len;
    if (atomic_load(&conn->dead))
        return;
    bool holdable = count > 0 && header_length <= NBD_SERVER_HELD_REPLY_MAX;
    if (holdable && w->has_role &&
        !atomic_load_explicit(&conn->requests_buffered, memory_order_relaxed)) {
        input_top_up(conn);
        atomic_store_explicit(&conn->requests_buffered, input_holds_request(conn),
                              memory_order_relaxed);
    }
    pthread_mutex_lock(&conn->send_lock);
    if (!atomic_load(&conn->dead) && holdable && conn->held_replies + 1 < NBD_SERVER_REPLY_BATCH &&
        atomic_load_explicit(&conn->requests_buffered, memory_order_relaxed)) {
        hold_locked(conn, iov, header_count, data);
        if (data) {
            w->used += (data->iov_len + WORKER_SPACE_ALIGN - 1) & ~(size_t)(WORKER_SPACE_ALIGN - 1);
            w->held_gen = atomic_load_explicit(&conn->sent_gen, memory_order_relaxed);
        }
    } else {
        send_locked(conn, iov, count);
    }
    pthread_mutex_unlock(&conn->send_lock);
}

/* Send the replies held back, if any (a worker leaving does this). */
static void conn_flush(struct nbd_connection *conn)
{
    pthread_mutex_lock(&conn->send_lock);
    if (conn->held_iovs > 0)
        send_locked(conn, NULL, 0);
    pthread_mutex_unlock(&conn->send_lock);
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

static void reply_simple(struct nbd_worker *w, uint64_t cookie, uint32_t error)
{
    unsigned char header[NBD_SIMPLE_REPLY_SIZE];
    put_simple_header(header, error, cookie);
    struct iovec iov = {header, sizeof header};
    reply_send(w, &iov, 1, false);
}

/* An error reply: a structured ERROR chunk with a message when structured
 * replies are on (required for READ, preferred for the rest), else simple. */
static void reply_error(struct nbd_worker *w, const struct nbd_request *r, uint32_t error,
                        const char *message)
{
    if (!w->conn->session.structured) {
        reply_simple(w, r->cookie, error);
        return;
    }
    size_t message_length = strlen(message);
    unsigned char header[NBD_STRUCTURED_REPLY_SIZE + 6];
    put_chunk_header(header, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR, r->cookie,
                     (uint32_t)(6 + message_length));
    util_put32(header + NBD_STRUCTURED_REPLY_SIZE, error);
    util_put16(header + NBD_STRUCTURED_REPLY_SIZE + 4, (uint16_t)message_length);
    struct iovec iov[2] = {{header, sizeof header}, {(void *)message, message_length}};
    reply_send(w, iov, 2, false);
}

static void reply_engine_error(struct nbd_worker *w, const struct nbd_request *r, int rc)
{
    struct nbd_connection *conn = w->conn;
    uint32_t error = nbd_errno_to_wire(-rc);
    char message[128];
    snprintf(message, sizeof message, "%s failed: %s", nbd_command_name(r->type), strerror(-rc));
    /* ENOSPC from a full mem_limit is the user's setting, not a fault. */
    if (error != NBD_ENOSPC)
        nbd_log(&conn->session, "%s at %llu+%u: %s", nbd_command_name(r->type),
                (unsigned long long)r->offset, r->length, strerror(-rc));
    reply_error(w, r, error, message);
}

/* ------------------------------------------------------------------------
 * Request buffers
 * ---------------------------------------------------------------------- */

/* `length` (<= NBD_SERVER_WORKER_BUFFER) bytes of the worker's own buffer
 * (made at first use) that no held reply uses: after the READ data of its
 * held replies, or from the start once they have gone out (sent now if the
 * rest of the buffer is too short). Held data advances w->used (reply_send).
 * NULL when out of memory. */
static unsigned char *worker_space(struct nbd_worker *w, size_t length)
{
    if (w->buffer == NULL) {
        w->buffer = malloc(NBD_SERVER_WORKER_BUFFER);
        w->used = 0;
        if (w->buffer == NULL)
            return NULL;
    }
    if (w->used > 0 &&
        atomic_load_explicit(&w->conn->sent_gen, memory_order_acquire) != w->held_gen)
        w->used = 0;
    if (w->used + length > NBD_SERVER_WORKER_BUFFER) {
        conn_flush(w->conn);
        w->used = 0;
    }
    return w->buffer + w->used;
}

/* Give the worker's buffer back (an idle or leaving worker), after any held
 * replies that use it have gone out. */
static void worker_buffer_free(struct nbd_worker *w)
{
    if (w->used > 0)
        conn_flush(w->conn);
    free(w->buffer);
    w->buffer = NULL;
    w->used = 0;
}

/* A buffer for a WRITE payload of `length` bytes: the worker's own when it is
 * big enough, else a fresh one, charged to the budget later, as bytes come
 * (receive_rest()). false when out of memory. */
static bool write_buffer(struct nbd_worker *w, size_t length, struct request_data *d)
{
    *d = (struct request_data){.share = NBD_BUDGET_WRITE};
    if (length <= NBD_SERVER_WORKER_BUFFER) {
        d->buffer = worker_space(w, length);
    } else {
        d->buffer = malloc(length);
        d->allocated = true;
    }
    return d->buffer != NULL;
}

/* A buffer for READ data of `length` bytes: the worker's own, or a fresh one
 * when the budget has room for it now. false when neither is possible: then
 * the READ goes out in pieces of the worker's buffer. */
static bool read_buffer(struct nbd_worker *w, size_t length, struct request_data *d)
{
    *d = (struct request_data){.share = NBD_BUDGET_READ};
    if (length <= NBD_SERVER_WORKER_BUFFER) {
        d->buffer = worker_space(w, length);
        return d->buffer != NULL;
    }
    if (!nbd_budget_try_take(NBD_BUDGET_READ, length))
        return false;
    d->buffer = malloc(length);
    if (d->buffer == NULL) {
        nbd_budget_give(NBD_BUDGET_READ, length);
        return false;
    }
    d->allocated = true;
    d->charged = length;
    return true;
}

static void release_data(struct request_data *d)
{
    if (d->allocated)
        free(d->buffer);
    if (d->charged)
        nbd_budget_give(d->share, d->charged);
    *d = (struct request_data){0};
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

/* A READ larger than the worker's buffer while the budget has no room for
 * it: read and sent in pieces of the worker's buffer, under one hold of the
 * send lock (a reply goes out whole), so that a READ never waits for budget
 * that others hold (32 clients that do not take 32 MiB replies hold all of
 * it). One reply header (simple, or one OFFSET_DATA chunk) and the data
 * after it; an engine error after the first piece cannot be reported in
 * that reply any more, so it closes the connection. */
static void read_in_pieces(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r)
{
    struct nbd_connection *conn = w->conn;
    size_t piece = r->length < NBD_SERVER_WORKER_BUFFER ? r->length : NBD_SERVER_WORKER_BUFFER;
    unsigned char *buf = worker_space(w, piece);
    int rc = buf == NULL ? -ENOMEM : uzram_read(dev, r->offset, buf, piece);
    if (rc < 0) {
        reply_engine_error(w, r, rc);
        return;
    }

    unsigned char header[NBD_STRUCTURED_REPLY_SIZE + 8];
    struct iovec iov[2] = {{header, NBD_SIMPLE_REPLY_SIZE}, {buf, piece}};
    if (conn->session.structured) {
        put_chunk_header(header, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_OFFSET_DATA, r->cookie,
                         8 + r->length);
        util_put64(header + NBD_STRUCTURED_REPLY_SIZE, r->offset);
        iov[0].iov_len = NBD_STRUCTURED_REPLY_SIZE + 8;
    } else {
        put_simple_header(header, 0, r->cookie);
    }
    pthread_mutex_lock(&conn->send_lock);
    rc = send_locked(conn, iov, 2);
    for (uint32_t done = piece; rc == 0 && done < r->length; done += piece) {
        piece = r->length - done < piece ? r->length - done : piece;
        rc = uzram_read(dev, r->offset + done, buf, piece);
        if (rc < 0) {
            nbd_log(&conn->session,
                    "READ at %llu+%u failed after part of its reply was sent (%s); closing",
                    (unsigned long long)r->offset, r->length, strerror(-rc));
            atomic_store(&conn->dead, true);
            shutdown(conn->session.fd, SHUT_RDWR);
            break;
        }
        struct iovec data = {buf, piece};
        rc = send_locked(conn, &data, 1);
    }
    pthread_mutex_unlock(&conn->send_lock);
}

static void do_read_simple(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r)
{
    unsigned char header[NBD_SIMPLE_REPLY_SIZE];
    struct request_data data;
    int rc = 0;

    if (!read_buffer(w, r->length, &data)) {
        read_in_pieces(w, dev, r);
        return;
    }
    if (r->length)
        rc = uzram_read(dev, r->offset, data.buffer, r->length);
    if (rc < 0) {
        reply_engine_error(w, r, rc);
    } else {
        put_simple_header(header, 0, r->cookie);
        struct iovec iov[2] = {{header, sizeof header}, {data.buffer, r->length}};
        reply_send(w, iov, r->length ? 2 : 1, r->length && !data.allocated);
    }
    release_data(&data);
}

/* The chunk headers of a structured read: OFFSET_DATA needs 8 bytes after the
 * common header, OFFSET_HOLE 12. */
#define CHUNK_HEADER_MAX (NBD_STRUCTURED_REPLY_SIZE + 12)

static void do_read_structured(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r)
{
    if (r->length == 0) {
        unsigned char header[NBD_STRUCTURED_REPLY_SIZE];
        put_chunk_header(header, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, r->cookie, 0);
        struct iovec iov = {header, sizeof header};
        reply_send(w, &iov, 1, false);
        return;
    }
    struct request_data data;
    if (!read_buffer(w, r->length, &data)) {
        read_in_pieces(w, dev, r);
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
    void *buf = data.buffer;
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
    /* One data chunk in the worker's buffer may be held with other replies. */
    reply_send(w, iov, n, n == 2 && !data.allocated);
out:
    if (rc < 0)
        reply_engine_error(w, r, rc);
    release_data(&data);
    if (planned) {
        free(iov);
        free(headers);
        free(segs);
    }
}

static void do_block_status(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r)
{
    unsigned max = (r->flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : NBD_SERVER_MAX_EXTENTS;
    size_t size = NBD_STRUCTURED_REPLY_SIZE + 4 + 8 * (size_t)max;
    unsigned char *reply = malloc(size);
    unsigned count = 0;
    uint64_t position = 0;
    uint32_t last_flags = 0;
    int rc = 0;

    if (reply == NULL) {
        reply_engine_error(w, r, -ENOMEM);
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
        reply_engine_error(w, r, rc < 0 ? rc : -EIO);
        return;
    }
    put_chunk_header(reply, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS, r->cookie,
                     4 + 8 * count);
    util_put32(reply + NBD_STRUCTURED_REPLY_SIZE, NBD_CONTEXT_ID_BASE_ALLOCATION);
    struct iovec iov = {reply, NBD_STRUCTURED_REPLY_SIZE + 4 + 8 * (size_t)count};
    reply_send(w, &iov, 1, false);
    free(reply);
}

/* Run one checked request on the engine and send its reply. A WRITE's
 * payload (*payload) is given back before the reply goes out, so a client
 * that is slow to take its replies holds no request buffer. */
static void execute(struct nbd_worker *w, const struct nbd_request *r, struct request_data *payload)
{
    struct nbd_connection *conn = w->conn;
    struct uzram *dev = conn->session.export->dev;
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
        do_block_status(w, dev, r);
        return;
    case NBD_CMD_WRITE:
        if (r->length)
            rc = uzram_write(dev, r->offset, payload->buffer, r->length);
        release_data(payload);
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
        reply_engine_error(w, r, rc);
    else
        reply_simple(w, r->cookie, 0);
}

/* ------------------------------------------------------------------------
 * Receiving (every function here runs in the worker holding the receiver role)
 * ---------------------------------------------------------------------- */

static size_t input_available(const struct nbd_connection *conn)
{
    return conn->input_end - conn->input_start;
}

/* The server waits for more bytes of a request that has started: it must be
 * whole within the timeout from the moment the server first waited for it,
 * however the bytes trickle in. -ETIMEDOUT once that has passed. (Only this
 * slow path reads the clock.) */
static int request_waits(struct nbd_connection *conn)
{
    uint64_t now = util_now_ms();
    if (conn->request_deadline_ms == 0)
        conn->request_deadline_ms = now + conn->settings.timeout * 1000ull;
    else if (now >= conn->request_deadline_ms)
        return -ETIMEDOUT;
    return 0;
}

/* Move the unparsed bytes to the start of the input buffer when fewer than
 * `need` bytes fit from where they start. */
static void input_make_room(struct nbd_connection *conn, size_t need)
{
    if (conn->input_start == conn->input_end) {
        conn->input_start = conn->input_end = 0;
    } else if (NBD_SERVER_INPUT_BUFFER - conn->input_start < need) {
        memmove(conn->input, conn->input + conn->input_start, input_available(conn));
        conn->input_end -= conn->input_start;
        conn->input_start = 0;
    }
}

/* Make at least `need` (<= NBD_SERVER_INPUT_BUFFER) bytes available in the
 * input buffer. Each recv() takes whatever the client has sent, up to the free
 * space, so later requests usually need no system call at all. A recv()
 * returns after NBD_SERVER_IDLE_MS without bytes (SO_RCVTIMEO): between
 * requests (nothing buffered and `started` false) that is -EAGAIN, the
 * connection is idle; inside a request it is a turn to check the request's
 * deadline. Returns 1, 0 on end of file before any unparsed byte,
 * -ECONNRESET on end of file in the middle, -ETIMEDOUT, -errno on error. */
static int input_fill(struct nbd_connection *conn, size_t need, bool started)
{
    if (conn->input == NULL && (conn->input = malloc(NBD_SERVER_INPUT_BUFFER)) == NULL)
        return -ENOMEM;
    while (input_available(conn) < need) {
        input_make_room(conn, need);
        ssize_t n = conn_recv(conn, conn->input + conn->input_end,
                              NBD_SERVER_INPUT_BUFFER - conn->input_end, true);
        int rc = 0;
        if (n > 0) {
            conn->input_end += (size_t)n;
            if (input_available(conn) < need)
                rc = request_waits(conn);
        } else if (n == 0) {
            return input_available(conn) == 0 && !started ? 0 : -ECONNRESET;
        } else if (n == -EAGAIN) {
            /* A TLS record begun is a request begun (nbd_io_midway). */
            if (input_available(conn) == 0 && !started && !nbd_io_midway(&conn->session))
                return -EAGAIN;
            rc = request_waits(conn);
        } else if (n != -EINTR) {
            return (int)n;
        }
        if (rc < 0)
            return rc;
    }
    return 1;
}

static size_t input_take(struct nbd_connection *conn, void *to, size_t length)
{
    size_t n = input_available(conn) < length ? input_available(conn) : length;
    if (to != NULL)
        memcpy(to, conn->input + conn->input_start, n);
    conn->input_start += n;
    return n;
}

/* Take in whatever the client has sent by now, without waiting (one recv()
 * at most): reply_send() looks for the next request this way before it sends
 * a reply alone. End of file and errors are left for the next input_fill()
 * to see. Only the worker holding the receiver role calls this, between
 * requests (no payload in the input buffer is in use). */
static void input_top_up(struct nbd_connection *conn)
{
    if (conn->input == NULL || conn->receive_done)
        return;
    input_make_room(conn, input_available(conn) + NBD_REQUEST_SIZE);
    ssize_t n = conn_recv(conn, conn->input + conn->input_end,
                          NBD_SERVER_INPUT_BUFFER - conn->input_end, false);
    if (n > 0)
        conn->input_end += (size_t)n;
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

/* Wait (at most NBD_SERVER_IDLE_MS) for more bytes of a started request. */
static int wait_readable(struct nbd_connection *conn)
{
    int rc = request_waits(conn);
    if (rc < 0)
        return rc;
    uint64_t now = util_now_ms();
    uint64_t left = conn->request_deadline_ms > now ? conn->request_deadline_ms - now : 0;
    rc = conn_wait_readable(conn, (int)(left < NBD_SERVER_IDLE_MS ? left : NBD_SERVER_IDLE_MS));
    return rc < 0 ? rc : 0;
}

/* Receive the rest of a large WRITE payload straight from the socket into
 * d->buffer, which holds `done` bytes already (NULL: read and drop it). With
 * `budgeted`, budget is taken for the bytes as they arrive and added to
 * d->charged; a wait for the budget is the server's, so it restarts the
 * client's deadline. */
static int receive_rest(struct nbd_connection *conn, struct request_data *d, size_t done,
                        size_t length, bool budgeted)
{
    unsigned char scratch[65536];
    while (done < length) {
        size_t step =
            length - done < NBD_SERVER_RECEIVE_STEP ? length - done : NBD_SERVER_RECEIVE_STEP;
        unsigned char *to = d->buffer ? (unsigned char *)d->buffer + done : scratch;
        if (d->buffer == NULL && step > sizeof scratch)
            step = sizeof scratch;
        if (budgeted && nbd_budget_take(d->share, step))
            conn->request_deadline_ms = 0;
        ssize_t n = conn_recv(conn, to, step, false);
        size_t got = n > 0 ? (size_t)n : 0;
        if (budgeted) {
            nbd_budget_give(d->share, step - got);
            d->charged += got;
        }
        if (n > 0) {
            done += got;
            continue;
        }
        if (n == 0)
            return -ECONNRESET;
        if (n == -EINTR)
            continue;
        if (n != -EAGAIN)
            return (int)n;
        int rc = wait_readable(conn);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Receive a WRITE payload into d->buffer (NULL: skip it), or, `in_place`
 * (small payloads only), leave it in the input buffer and point d->buffer at
 * it there (borrowed: valid while this worker keeps the receiver role).
 * Returns 0 or a negative errno (-ECONNRESET when the client closed in the
 * middle, -ETIMEDOUT when it did not arrive whole in time). */
static int receive_payload(struct nbd_connection *conn, struct request_data *d, uint32_t length,
                           bool in_place)
{
    if (length <= NBD_SERVER_SMALL_PAYLOAD) {
        int rc = input_fill(conn, length, true);
        if (rc < 0)
            return rc;
        if (in_place) {
            d->buffer = conn->input + conn->input_start;
            d->borrowed = true;
            d->borrowed_length = length;
        }
        input_take(conn, in_place ? NULL : d->buffer, length);
        return 0;
    }
    /* Large: what is buffered already, then the rest straight from the socket. */
    bool budgeted = d->buffer != NULL && length > NBD_SERVER_WORKER_BUFFER;
    if (budgeted) {
        size_t have = input_available(conn) < length ? input_available(conn) : length;
        if (nbd_budget_take(d->share, have))
            conn->request_deadline_ms = 0;
        d->charged = have;
    }
    size_t done = input_take(conn, d->buffer, length);
    return receive_rest(conn, d, done, length, budgeted);
}

/* What the worker should do after receive_request(). */
enum receive_result {
    RECEIVE_STOP,    /* no more requests on this connection */
    RECEIVE_REQUEST, /* run *r (with *payload for a WRITE) */
    RECEIVE_REFUSED, /* reply *error / *reason to *r */
    RECEIVE_IDLE,    /* a helper found no request coming: it leaves */
};

static void log_receive_failure(struct nbd_connection *conn, int rc)
{
    if (rc == -ECONNRESET)
        nbd_log(&conn->session, "connection closed in the middle of a request");
    else if (rc == -ETIMEDOUT)
        nbd_log(&conn->session, "request not complete within %u s; closing",
                conn->settings.timeout);
    else if (!atomic_load(&conn->dead))
        nbd_log(&conn->session, "receive failed: %s", strerror(-rc));
}

/* The first worker of a connection with no request coming for
 * NBD_SERVER_IDLE_MS: give the buffers back (the helpers give theirs back
 * as they leave) and sleep until the client sends something. An idle
 * connection is then one sleeping thread, its stack and the socket. */
static int wait_idle(struct nbd_worker *w)
{
    struct nbd_connection *conn = w->conn;
    free(conn->input);
    conn->input = NULL;
    conn->input_start = conn->input_end = 0;
    worker_buffer_free(w);
    int rc;
    while ((rc = conn_wait_readable(conn, -1)) == 0)
        ;
    return rc < 0 ? rc : 0;
}

/* Read and check one request (and a WRITE's payload). Called with the
 * receiver role held; sets receive_done when the connection must not be read again. */
static enum receive_result receive_request(struct nbd_worker *w, struct nbd_request *r,
                                           struct request_data *payload, uint32_t *error,
                                           const char **reason)
{
    struct nbd_connection *conn = w->conn;
    struct nbd_session *s = &conn->session;
    int rc;

    *payload = (struct request_data){0};
    conn->request_deadline_ms = 0;
    /* After a failed send nobody would see the replies: stop reading. */
    if (conn->receive_done || atomic_load_explicit(&conn->dead, memory_order_relaxed))
        goto stop;
    while ((rc = input_fill(conn, NBD_REQUEST_SIZE, false)) == -EAGAIN) {
        if (!w->first)
            return RECEIVE_IDLE;
        rc = wait_idle(w);
        if (rc < 0)
            break;
    }
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
    *error = nbd_check_request(s, conn->settings.read_only, r, reason);
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
        nbd_log(s, "%s (type %u, flags 0x%x) at %llu+%u refused with %s: %s",
                nbd_command_name(r->type), r->type, (unsigned)r->flags,
                (unsigned long long)r->offset, r->length, nbd_wire_error_name(*error), *reason);
    } else if (r->type == NBD_CMD_WRITE && r->length > NBD_SERVER_SMALL_PAYLOAD &&
               !write_buffer(w, r->length, payload)) {
        *error = NBD_ENOMEM;
        *reason = "server out of memory";
    }
    if (r->type == NBD_CMD_WRITE && r->length > 0) {
        /* A small payload is compressed straight from the input buffer. A
         * refused WRITE's payload is skipped to stay in step. */
        bool in_place = *error == 0 && r->length <= NBD_SERVER_SMALL_PAYLOAD;
        rc = receive_payload(conn, payload, r->length, in_place);
        if (rc < 0) {
            if (rc == -ECONNRESET)
                nbd_log(s, "connection closed in the middle of a WRITE payload");
            else
                log_receive_failure(conn, rc);
            release_data(payload);
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

/* CLOCK_MONOTONIC `ms` from now, for pthread_cond_timedwait(). */
static struct timespec monotonic_in(unsigned ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000;
    if (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
    }
    return t;
}

/* Wait until the receiver role is free and take it; false once the
 * connection is done with receiving, and for a helper that waited
 * NBD_SERVER_IDLE_MS in vain (it leaves: the connection needs it no more). */
static bool take_receiver_role(struct nbd_worker *w)
{
    struct nbd_connection *conn = w->conn;
    bool taken = false;

    pthread_mutex_lock(&conn->receive_lock);
    /* receive_done is only read while nobody holds the role (it is written by
     * the holder), which release_receiver_role() broadcasts about. */
    while (conn->receiving || (conn->role_for_first && !w->first && !conn->receive_done)) {
        conn->idle_workers++;
        int rc = 0;
        if (w->first) {
            pthread_cond_wait(&conn->receiver_wanted, &conn->receive_lock);
        } else {
            struct timespec until = monotonic_in(NBD_SERVER_IDLE_MS);
            rc = pthread_cond_timedwait(&conn->receiver_wanted, &conn->receive_lock, &until);
        }
        conn->idle_workers--;
        if (rc == ETIMEDOUT && (conn->receiving || conn->role_for_first))
            goto out;
    }
    if (w->first)
        conn->role_for_first = false;
    taken = !conn->receive_done;
    conn->receiving = taken;
out:
    pthread_mutex_unlock(&conn->receive_lock);
    return taken;
}

static void *worker_main(void *arg);

/* Start a helper for `conn` (whose workers count already includes it). */
static void helper_start(struct nbd_connection *conn)
{
    struct nbd_worker *helper = calloc(1, sizeof *helper);
    if (helper != NULL) {
        helper->conn = conn;
        if (util_thread_start(NULL, worker_main, helper, NBD_SERVER_THREAD_STACK) == 0)
            return;
    }
    /* Fewer workers still serve the client correctly. */
    free(helper);
    nbd_helper_slot_give();
    pthread_mutex_lock(&conn->receive_lock);
    conn->workers--;
    pthread_cond_broadcast(&conn->helpers_gone);
    pthread_mutex_unlock(&conn->receive_lock);
}

/* Whether the next request is already buffered and this connection's
 * requests take long enough to be worth running on another worker
 * (settings.handoff_worth_ns). Otherwise the worker keeps the receiver role
 * and reads the next request itself after this one. */
static bool hand_off_worth_it(const struct nbd_connection *conn)
{
    return atomic_load_explicit(&conn->request_ns, memory_order_relaxed) >=
               conn->settings.handoff_worth_ns &&
           input_holds_request(conn);
}

/* Before the receiver role is given up: a borrowed payload must leave the
 * input buffer, which the next receiver reuses. false (keep the role and the
 * payload where it is) when the worker has no buffer for it. */
static bool unborrow(struct nbd_worker *w, struct request_data *d)
{
    if (!d->borrowed)
        return true;
    size_t length = d->borrowed_length;
    unsigned char *copy = worker_space(w, length);
    if (copy == NULL)
        return false;
    memcpy(copy, d->buffer, length);
    d->buffer = copy;
    d->borrowed = false;
    return true;
}

/* Give the role up. The next request goes to another worker only when it is
 * already buffered and this connection's requests take long enough to be
 * worth a hand-off (settings.handoff_worth_ns): to an idle worker, or to a
 * new helper while the connection and the process have room for one.
 * Otherwise this worker takes the role back itself after its request. */
static void release_receiver_role(struct nbd_connection *conn)
{
    bool waiting = input_holds_request(conn);
    bool worth_it = atomic_load_explicit(&conn->request_ns, memory_order_relaxed) >=
                    conn->settings.handoff_worth_ns;
    bool start_helper = false;
    /* Relaxed is enough: it is read under send_lock, which every later
     * answer takes, so a stale "true" is always followed by a flush. A
     * seq_cst store would fence every request. */
    atomic_store_explicit(&conn->requests_buffered, waiting, memory_order_relaxed);
    pthread_mutex_lock(&conn->receive_lock);
    conn->receiving = false;
    if (conn->receive_done) {
        pthread_cond_broadcast(&conn->receiver_wanted);
    } else if (waiting && worth_it) {
        if (conn->idle_workers > 0) {
            pthread_cond_signal(&conn->receiver_wanted);
        } else if (conn->workers < conn->settings.threads &&
                   nbd_helper_slot_take(conn->settings.helpers)) {
            conn->workers++;
            start_helper = true;
        }
    }
    pthread_mutex_unlock(&conn->receive_lock);
    if (start_helper)
        helper_start(conn);
}

/* A helper found the connection idle: the role goes back to the first
 * worker, which waits for the client from then on, and the helper leaves. */
static void hand_role_to_first(struct nbd_connection *conn)
{
    atomic_store_explicit(&conn->requests_buffered, false, memory_order_relaxed);
    pthread_mutex_lock(&conn->receive_lock);
    conn->receiving = false;
    conn->role_for_first = true;
    pthread_cond_broadcast(&conn->receiver_wanted);
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
 * protocol violation that forbids going on, or (a helper) until it is not
 * needed any more. Runs as a thread start routine for helpers. */
static void *worker_main(void *arg)
{
    struct nbd_worker *w = arg;
    struct nbd_connection *conn = w->conn;

    for (;;) {
        if (!w->has_role && !take_receiver_role(w))
            break;
        w->has_role = true;
        struct nbd_request r;
        struct request_data payload;
        uint32_t error = 0;
        const char *reason = NULL;

        enum receive_result result = receive_request(w, &r, &payload, &error, &reason);
        if (result == RECEIVE_IDLE) {
            w->has_role = false;
            hand_role_to_first(conn);
            break;
        }
        if (result == RECEIVE_STOP || (hand_off_worth_it(conn) && unborrow(w, &payload))) {
            w->has_role = false;
            release_receiver_role(conn);
        } else {
            /* Keep the role: nobody else could take the next request sooner
             * than this worker, and a borrowed payload stays valid. Relaxed,
             * as in release_receiver_role(). */
            atomic_store_explicit(&conn->requests_buffered, input_holds_request(conn),
                                  memory_order_relaxed);
        }

        if (result == RECEIVE_STOP)
            break;
        uint64_t started = util_now_ns();
        if (result == RECEIVE_REFUSED)
            reply_error(w, &r, error, reason);
        else
            execute(w, &r, &payload);
        release_data(&payload);
        account_request_time(conn, util_now_ns() - started);
    }
    conn_flush(conn);
    worker_buffer_free(w);
    if (!w->first) {
        /* After this unlock the connection may be gone: touch it no more. */
        pthread_mutex_lock(&conn->receive_lock);
        conn->workers--;
        pthread_cond_broadcast(&conn->helpers_gone);
        pthread_mutex_unlock(&conn->receive_lock);
        nbd_helper_slot_give();
        free(w);
    }
    return NULL;
}

int nbd_transmission(const struct nbd_session *session,
                     const struct nbd_transmission_settings *settings)
{
    struct nbd_connection *conn = calloc(1, sizeof *conn);
    if (conn == NULL) {
        struct nbd_session copy = *session;
        nbd_log(&copy, "out of memory; closing");
        return -ENOMEM;
    }
    conn->session = *session;
    conn->settings = *settings;
    if (conn->settings.threads < 1)
        conn->settings.threads = 1;
    if (conn->settings.timeout < 1)
        conn->settings.timeout = 1;
    pthread_mutex_init(&conn->receive_lock, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&conn->receiver_wanted, &monotonic);
    pthread_condattr_destroy(&monotonic);
    pthread_cond_init(&conn->helpers_gone, NULL);
    pthread_mutex_init(&conn->send_lock, NULL);
    atomic_init(&conn->dead, false);
    atomic_init(&conn->requests_buffered, false);
    atomic_init(&conn->request_ns, 0);
    conn->workers = 1;

    /* Receives wake up every NBD_SERVER_IDLE_MS without bytes: to notice an
     * idle connection, and a request that misses its deadline. */
    struct timeval idle = {NBD_SERVER_IDLE_MS / 1000, (NBD_SERVER_IDLE_MS % 1000) * 1000};
    setsockopt(conn->session.fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);

    struct nbd_worker first = {.conn = conn, .first = true};
    worker_main(&first);
    pthread_mutex_lock(&conn->receive_lock);
    while (conn->workers > 1)
        pthread_cond_wait(&conn->helpers_gone, &conn->receive_lock);
    pthread_mutex_unlock(&conn->receive_lock);
    int rc = atomic_load(&conn->dead) ? -EPIPE : 0;

    free(conn->input);
    pthread_mutex_destroy(&conn->receive_lock);
    pthread_cond_destroy(&conn->receiver_wanted);
    pthread_cond_destroy(&conn->helpers_gone);
    pthread_mutex_destroy(&conn->send_lock);
    free(conn);
    return rc;
}
