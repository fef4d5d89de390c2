/* reads.c - READ and BLOCK_STATUS of the transmission phase: the engine's data (and its
 * zero runs, as holes) sent back in simple or structured replies, in pieces when the buffer
 * budget is short. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "nbd/connection.h"
#include "nbd/limits.h"
#include "nbd/log.h"
#include "nbd/protocol.h"
#include "nbd/reads.h"
#include "nbd/reply.h"
#include "nbd/request.h"
#include "common/big_endian.h"
#include "uzram.h"

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
    unsigned char *buf = nbd_worker_space(w, piece);
    int rc = buf == NULL ? -ENOMEM : uzram_read(dev, r->offset, buf, piece);
    if (rc < 0) {
        nbd_reply_engine_error(w, r, rc);
        return;
    }

    unsigned char header[NBD_STRUCTURED_REPLY_SIZE + 8];
    struct iovec iov[2] = {{header, NBD_SIMPLE_REPLY_SIZE}, {buf, piece}};
    if (conn->session.structured) {
        nbd_put_chunk_header(header, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_OFFSET_DATA, r->cookie,
                             8 + r->length);
        util_put64(header + NBD_STRUCTURED_REPLY_SIZE, r->offset);
        iov[0].iov_len = NBD_STRUCTURED_REPLY_SIZE + 8;
    } else {
        nbd_put_simple_header(header, 0, r->cookie);
    }
    pthread_mutex_lock(&conn->send_lock);
    rc = nbd_send_locked(conn, iov, 2);
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
        rc = nbd_send_locked(conn, &data, 1);
    }
    pthread_mutex_unlock(&conn->send_lock);
}

void nbd_read_simple(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r)
{
    unsigned char header[NBD_SIMPLE_REPLY_SIZE];
    struct nbd_request_data data;
    int rc = 0;

    if (!nbd_read_buffer(w, r->length, &data)) {
        read_in_pieces(w, dev, r);
        return;
    }
    if (r->length)
        rc = uzram_read(dev, r->offset, data.buffer, r->length);
    if (rc < 0) {
        nbd_reply_engine_error(w, r, rc);
    } else {
        nbd_put_simple_header(header, 0, r->cookie);
        struct iovec iov[2] = {{header, sizeof header}, {data.buffer, r->length}};
        nbd_reply_send(w, iov, r->length ? 2 : 1, r->length && !data.allocated);
    }
    nbd_release_data(&data);
}

/* The chunk headers of a structured read: OFFSET_DATA needs 8 bytes after the
 * common header, OFFSET_HOLE 12. */
#define CHUNK_HEADER_MAX (NBD_STRUCTURED_REPLY_SIZE + 12)

void nbd_read_structured(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r)
{
    if (r->length == 0) {
        unsigned char header[NBD_STRUCTURED_REPLY_SIZE];
        nbd_put_chunk_header(header, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, r->cookie, 0);
        struct iovec iov = {header, sizeof header};
        nbd_reply_send(w, &iov, 1, false);
        return;
    }
    struct nbd_request_data data;
    if (!nbd_read_buffer(w, r->length, &data)) {
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
            nbd_put_chunk_header(h, done, NBD_REPLY_TYPE_OFFSET_HOLE, r->cookie, 12);
            util_put64(h + NBD_STRUCTURED_REPLY_SIZE, r->offset + segs[i].offset);
            util_put32(h + NBD_STRUCTURED_REPLY_SIZE + 8, (uint32_t)segs[i].length);
            iov[n++] = (struct iovec){h, NBD_STRUCTURED_REPLY_SIZE + 12};
        } else {
            nbd_put_chunk_header(h, done, NBD_REPLY_TYPE_OFFSET_DATA, r->cookie,
                                 (uint32_t)(8 + segs[i].length));
            util_put64(h + NBD_STRUCTURED_REPLY_SIZE, r->offset + segs[i].offset);
            iov[n++] = (struct iovec){h, NBD_STRUCTURED_REPLY_SIZE + 8};
            iov[n++] = (struct iovec){(char *)buf + segs[i].offset, segs[i].length};
        }
    }
    /* One data chunk in the worker's buffer may be held with other replies. */
    nbd_reply_send(w, iov, n, n == 2 && !data.allocated);
out:
    if (rc < 0)
        nbd_reply_engine_error(w, r, rc);
    nbd_release_data(&data);
    if (planned) {
        free(iov);
        free(headers);
        free(segs);
    }
}

void nbd_block_status(struct nbd_worker *w, struct uzram *dev, const struct nbd_request *r)
{
    unsigned max = (r->flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : NBD_SERVER_MAX_EXTENTS;
    size_t size = NBD_STRUCTURED_REPLY_SIZE + 4 + 8 * (size_t)max;
    unsigned char *reply = malloc(size);
    unsigned count = 0;
    uint64_t position = 0;
    uint32_t last_flags = 0;
    int rc = 0;

    if (reply == NULL) {
        nbd_reply_engine_error(w, r, -ENOMEM);
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
        nbd_reply_engine_error(w, r, rc < 0 ? rc : -EIO);
        return;
    }
    nbd_put_chunk_header(reply, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS, r->cookie,
                         4 + 8 * count);
    util_put32(reply + NBD_STRUCTURED_REPLY_SIZE, NBD_CONTEXT_ID_BASE_ALLOCATION);
    struct iovec iov = {reply, NBD_STRUCTURED_REPLY_SIZE + 4 + 8 * (size_t)count};
    nbd_reply_send(w, &iov, 1, false);
    free(reply);
}
