/* input.c - what a connection receives: one recv() fills the input buffer with whatever the
 * client has sent, from which request headers and small WRITE payloads are taken; large
 * payloads go straight to their buffer, charged to the budget; every started request must
 * arrive whole within its deadline. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "nbd/budget.h"
#include "nbd/connection.h"
#include "nbd/input.h"
#include "nbd/io.h"
#include "nbd/limits.h"
#include "nbd/protocol.h"
#include "nbd/request.h"
#include "common/big_endian.h"
#include "common/clock.h"

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

int nbd_conn_wait_readable(struct nbd_connection *conn, int timeout_ms)
{
    return nbd_io_wait_readable(&conn->session, timeout_ms);
}

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

int nbd_input_fill(struct nbd_connection *conn, size_t need, bool started)
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

void nbd_input_top_up(struct nbd_connection *conn)
{
    if (conn->input == NULL || conn->receive_done)
        return;
    input_make_room(conn, input_available(conn) + NBD_REQUEST_SIZE);
    ssize_t n = conn_recv(conn, conn->input + conn->input_end,
                          NBD_SERVER_INPUT_BUFFER - conn->input_end, false);
    if (n > 0)
        conn->input_end += (size_t)n;
}

struct nbd_request nbd_parse_request_header(const unsigned char *header)
{
    return (struct nbd_request){
        .flags = util_get16(header + 4),
        .type = util_get16(header + 6),
        .cookie = util_get64(header + 8),
        .offset = util_get64(header + 16),
        .length = util_get32(header + 24),
    };
}

bool nbd_input_holds_request(const struct nbd_connection *conn)
{
    if (conn->receive_done || input_available(conn) < NBD_REQUEST_SIZE)
        return false;
    struct nbd_request r = nbd_parse_request_header(conn->input + conn->input_start);
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
    rc = nbd_conn_wait_readable(conn, (int)(left < NBD_SERVER_IDLE_MS ? left : NBD_SERVER_IDLE_MS));
    return rc < 0 ? rc : 0;
}

int nbd_receive_rest(struct nbd_connection *conn, struct nbd_request_data *d, size_t done,
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

int nbd_receive_payload(struct nbd_connection *conn, struct nbd_request_data *d, uint32_t length,
                        bool in_place)
{
    if (length <= NBD_SERVER_SMALL_PAYLOAD) {
        int rc = nbd_input_fill(conn, length, true);
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
    return nbd_receive_rest(conn, d, done, length, budgeted);
}
