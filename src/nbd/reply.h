/* reply.h - the replies of a connection (reply.c): sent whole, or held back and sent
 * together, and the worker buffers their data lies in. */
#ifndef UZRAM_NBD_REPLY_H
#define UZRAM_NBD_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct nbd_connection;
struct nbd_request;
struct nbd_worker;
struct nbd_request_data;

/* Send the replies held back, if any (a worker leaving does this). */
void nbd_conn_flush(struct nbd_connection *conn);

void nbd_put_chunk_header(unsigned char *h, uint16_t flags, uint16_t type, uint64_t cookie,
                          uint32_t length);

void nbd_put_simple_header(unsigned char *h, uint32_t error, uint64_t cookie);

/* A buffer for READ data of `length` bytes: the worker's own, or a fresh one
 * when the budget has room for it now. false when neither is possible: then
 * the READ goes out in pieces of the worker's buffer. */
bool nbd_read_buffer(struct nbd_worker *w, size_t length, struct nbd_request_data *d);

void nbd_release_data(struct nbd_request_data *d);

void nbd_reply_engine_error(struct nbd_worker *w, const struct nbd_request *r, int rc);

/* An error reply: a structured ERROR chunk with a message when structured
 * replies are on (required for READ, preferred for the rest), else simple. */
void nbd_reply_error(struct nbd_worker *w, const struct nbd_request *r, uint32_t error,
                     const char *message);

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
void nbd_reply_send(struct nbd_worker *w, struct iovec *iov, int count, bool data_in_worker);

void nbd_reply_simple(struct nbd_worker *w, uint64_t cookie, uint32_t error);

/* With send_lock held: the replies held back so far, then `iov`, in one
 * sendmsg when the iovec is short. A failed or timed out send kills the
 * connection: shutdown() wakes the worker that waits in recv() or poll(), and
 * the others stop at their next turn. Either way the held replies are gone
 * afterwards, and sent_gen says so to the workers whose buffers they used.
 * Returns 0 or a negative errno. */
int nbd_send_locked(struct nbd_connection *conn, struct iovec *iov, int count);

/* Give the worker's buffer back (an idle or leaving worker), after any held
 * replies that use it have gone out. */
void nbd_worker_buffer_free(struct nbd_worker *w);

/* `length` (<= NBD_SERVER_WORKER_BUFFER) bytes of the worker's own buffer
 * (made at first use) that no held reply uses: after the READ data of its
 * held replies, or from the start once they have gone out (sent now if the
 * rest of the buffer is too short). Held data advances w->used (nbd_reply_send()).
 * NULL when out of memory. */
unsigned char *nbd_worker_space(struct nbd_worker *w, size_t length);

/* A buffer for a WRITE payload of `length` bytes: the worker's own when it is
 * big enough, else a fresh one, charged to the budget later, as bytes come
 * (nbd_receive_rest()). false when out of memory. */
bool nbd_write_buffer(struct nbd_worker *w, size_t length, struct nbd_request_data *d);

#endif
