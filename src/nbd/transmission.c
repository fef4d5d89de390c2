/* transmission.c - the NBD transmission phase of one connection: its workers, who take turns
 * at the receiver role, read a request (input.c), check it and run it on the engine; replies
 * go out through reply.c, READ and BLOCK_STATUS through reads.c. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "nbd/protocol.h"
#include "nbd/budget.h"
#include "nbd/connection.h"
#include "nbd/input.h"
#include "nbd/reads.h"
#include "nbd/reply.h"
#include "nbd/exports.h"
#include "nbd/io.h"
#include "nbd/limits.h"
#include "nbd/log.h"
#include "nbd/request.h"
#include "nbd/session.h"
#include "nbd/transmission.h"
#include "common/big_endian.h"
#include "common/clock.h"
#include "common/threads.h"

/* Run one checked request on the engine and send its reply. A WRITE's
 * payload (*payload) is given back before the reply goes out, so a client
 * that is slow to take its replies holds no request buffer. */
static void execute(struct nbd_worker *w, const struct nbd_request *r,
                    struct nbd_request_data *payload)
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
            nbd_read_structured(w, dev, r);
        else
            nbd_read_simple(w, dev, r);
        return;
    case NBD_CMD_BLOCK_STATUS:
        nbd_block_status(w, dev, r);
        return;
    case NBD_CMD_WRITE:
        if (r->length)
            rc = uzram_write(dev, r->offset, payload->buffer, r->length);
        nbd_release_data(payload);
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
        nbd_reply_engine_error(w, r, rc);
    else
        nbd_reply_simple(w, r->cookie, 0);
}

/* ------------------------------------------------------------------------
 * Receiving (every function here runs in the worker holding the receiver role)
 * ---------------------------------------------------------------------- */

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
    nbd_worker_buffer_free(w);
    int rc;
    while ((rc = nbd_conn_wait_readable(conn, -1)) == 0)
        ;
    return rc < 0 ? rc : 0;
}

/* Read and check one request (and a WRITE's payload). Called with the
 * receiver role held; sets receive_done when the connection must not be read again. */
static enum receive_result receive_request(struct nbd_worker *w, struct nbd_request *r,
                                           struct nbd_request_data *payload, uint32_t *error,
                                           const char **reason)
{
    struct nbd_connection *conn = w->conn;
    struct nbd_session *s = &conn->session;
    int rc;

    *payload = (struct nbd_request_data){0};
    conn->request_deadline_ms = 0;
    /* After a failed send nobody would see the replies: stop reading. */
    if (conn->receive_done || atomic_load_explicit(&conn->dead, memory_order_relaxed))
        goto stop;
    while ((rc = nbd_input_fill(conn, NBD_REQUEST_SIZE, false)) == -EAGAIN) {
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
    *r = nbd_parse_request_header(header);
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
               !nbd_write_buffer(w, r->length, payload)) {
        *error = NBD_ENOMEM;
        *reason = "server out of memory";
    }
    if (r->type == NBD_CMD_WRITE && r->length > 0) {
        /* A small payload is compressed straight from the input buffer. A
         * refused WRITE's payload is skipped to stay in step. */
        bool in_place = *error == 0 && r->length <= NBD_SERVER_SMALL_PAYLOAD;
        rc = nbd_receive_payload(conn, payload, r->length, in_place);
        if (rc < 0) {
            if (rc == -ECONNRESET)
                nbd_log(s, "connection closed in the middle of a WRITE payload");
            else
                log_receive_failure(conn, rc);
            nbd_release_data(payload);
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
           nbd_input_holds_request(conn);
}

/* Before the receiver role is given up: a borrowed payload must leave the
 * input buffer, which the next receiver reuses. false (keep the role and the
 * payload where it is) when the worker has no buffer for it. */
static bool unborrow(struct nbd_worker *w, struct nbd_request_data *d)
{
    if (!d->borrowed)
        return true;
    size_t length = d->borrowed_length;
    unsigned char *copy = nbd_worker_space(w, length);
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
    bool waiting = nbd_input_holds_request(conn);
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
        struct nbd_request_data payload;
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
            atomic_store_explicit(&conn->requests_buffered, nbd_input_holds_request(conn),
                                  memory_order_relaxed);
        }

        if (result == RECEIVE_STOP)
            break;
        uint64_t started = util_now_ns();
        if (result == RECEIVE_REFUSED)
            nbd_reply_error(w, &r, error, reason);
        else
            execute(w, &r, &payload);
        nbd_release_data(&payload);
        account_request_time(conn, util_now_ns() - started);
    }
    nbd_conn_flush(conn);
    nbd_worker_buffer_free(w);
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
