/* reply.c - what a connection sends: each reply whole under the send lock, or held back
 * while more requests are buffered and sent together; and the worker buffers that READ data
 * and WRITE payloads lie in. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "nbd/budget.h"
#include "nbd/connection.h"
#include "nbd/input.h"
#include "nbd/io.h"
#include "nbd/limits.h"
#include "nbd/log.h"
#include "nbd/protocol.h"
#include "nbd/reply.h"
#include "nbd/request.h"
#include "common/big_endian.h"

/* READ data in a worker's buffer starts at multiples of this. */
#define WORKER_SPACE_ALIGN 64u
/* Most iovecs of a reply that are joined with the held replies into one
 * sendmsg (a longer reply goes out in a send of its own after them). */
#define SEND_JOIN_MAX 8

/* Send `iov` whole within settings.timeout seconds. 0, -ETIMEDOUT or -errno. */
static int conn_send_iov(struct nbd_connection *conn, struct iovec *iov, int count)
{
    return nbd_io_send_iov_timeout(&conn->session, iov, count, (int)conn->settings.timeout);
}

int nbd_send_locked(struct nbd_connection *conn, struct iovec *iov, int count)
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

void nbd_reply_send(struct nbd_worker *w, struct iovec *iov, int count, bool data_in_worker)
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
        nbd_input_top_up(conn);
        atomic_store_explicit(&conn->requests_buffered, nbd_input_holds_request(conn),
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
        nbd_send_locked(conn, iov, count);
    }
    pthread_mutex_unlock(&conn->send_lock);
}

void nbd_conn_flush(struct nbd_connection *conn)
{
    pthread_mutex_lock(&conn->send_lock);
    if (conn->held_iovs > 0)
        nbd_send_locked(conn, NULL, 0);
    pthread_mutex_unlock(&conn->send_lock);
}

void nbd_put_simple_header(unsigned char *h, uint32_t error, uint64_t cookie)
{
    util_put32(h, NBD_SIMPLE_REPLY_MAGIC);
    util_put32(h + 4, error);
    util_put64(h + 8, cookie);
}

void nbd_put_chunk_header(unsigned char *h, uint16_t flags, uint16_t type, uint64_t cookie,
                          uint32_t length)
{
    util_put32(h, NBD_STRUCTURED_REPLY_MAGIC);
    util_put16(h + 4, flags);
    util_put16(h + 6, type);
    util_put64(h + 8, cookie);
    util_put32(h + 16, length);
}

void nbd_reply_simple(struct nbd_worker *w, uint64_t cookie, uint32_t error)
{
    unsigned char header[NBD_SIMPLE_REPLY_SIZE];
    nbd_put_simple_header(header, error, cookie);
    struct iovec iov = {header, sizeof header};
    nbd_reply_send(w, &iov, 1, false);
}

void nbd_reply_error(struct nbd_worker *w, const struct nbd_request *r, uint32_t error,
                     const char *message)
{
    if (!w->conn->session.structured) {
        nbd_reply_simple(w, r->cookie, error);
        return;
    }
    size_t message_length = strlen(message);
    unsigned char header[NBD_STRUCTURED_REPLY_SIZE + 6];
    nbd_put_chunk_header(header, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_ERROR, r->cookie,
                         (uint32_t)(6 + message_length));
    util_put32(header + NBD_STRUCTURED_REPLY_SIZE, error);
    util_put16(header + NBD_STRUCTURED_REPLY_SIZE + 4, (uint16_t)message_length);
    struct iovec iov[2] = {{header, sizeof header}, {(void *)message, message_length}};
    nbd_reply_send(w, iov, 2, false);
}

void nbd_reply_engine_error(struct nbd_worker *w, const struct nbd_request *r, int rc)
{
    struct nbd_connection *conn = w->conn;
    uint32_t error = nbd_errno_to_wire(-rc);
    char message[128];
    snprintf(message, sizeof message, "%s failed: %s", nbd_command_name(r->type), strerror(-rc));
    /* ENOSPC from a full mem_limit is the user's setting, not a fault. */
    if (error != NBD_ENOSPC)
        nbd_log(&conn->session, "%s at %llu+%u: %s", nbd_command_name(r->type),
                (unsigned long long)r->offset, r->length, strerror(-rc));
    nbd_reply_error(w, r, error, message);
}

unsigned char *nbd_worker_space(struct nbd_worker *w, size_t length)
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
        nbd_conn_flush(w->conn);
        w->used = 0;
    }
    return w->buffer + w->used;
}

void nbd_worker_buffer_free(struct nbd_worker *w)
{
    if (w->used > 0)
        nbd_conn_flush(w->conn);
    free(w->buffer);
    w->buffer = NULL;
    w->used = 0;
}

bool nbd_write_buffer(struct nbd_worker *w, size_t length, struct nbd_request_data *d)
{
    *d = (struct nbd_request_data){.share = NBD_BUDGET_WRITE};
    if (length <= NBD_SERVER_WORKER_BUFFER) {
        d->buffer = nbd_worker_space(w, length);
    } else {
        d->buffer = malloc(length);
        d->allocated = true;
    }
    return d->buffer != NULL;
}

bool nbd_read_buffer(struct nbd_worker *w, size_t length, struct nbd_request_data *d)
{
    *d = (struct nbd_request_data){.share = NBD_BUDGET_READ};
    if (length <= NBD_SERVER_WORKER_BUFFER) {
        d->buffer = nbd_worker_space(w, length);
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

void nbd_release_data(struct nbd_request_data *d)
{
    if (d->allocated)
        free(d->buffer);
    if (d->charged)
        nbd_budget_give(d->share, d->charged);
    *d = (struct nbd_request_data){0};
}
