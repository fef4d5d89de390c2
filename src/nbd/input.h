/* input.h - the bytes a connection receives (input.c): its input buffer, request headers
 * and WRITE payloads, within the request deadline. */
#ifndef UZRAM_NBD_INPUT_H
#define UZRAM_NBD_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nbd_connection;
struct nbd_request;
struct nbd_request_data;

/* Wait until bytes can be received, at most `timeout_ms` (-1: no limit).
 * 1 readable, 0 timed out or interrupted (the caller looks again), -errno. */
int nbd_conn_wait_readable(struct nbd_connection *conn, int timeout_ms);

/* Make at least `need` (<= NBD_SERVER_INPUT_BUFFER) bytes available in the
 * input buffer. Each recv() takes whatever the client has sent, up to the free
 * space, so later requests usually need no system call at all. A recv()
 * returns after NBD_SERVER_IDLE_MS without bytes (SO_RCVTIMEO): between
 * requests (nothing buffered and `started` false) that is -EAGAIN, the
 * connection is idle; inside a request it is a turn to check the request's
 * deadline. Returns 1, 0 on end of file before any unparsed byte,
 * -ECONNRESET on end of file in the middle, -ETIMEDOUT, -errno on error. */
int nbd_input_fill(struct nbd_connection *conn, size_t need, bool started);

/* Whether a whole request (a WRITE with its payload) is buffered. Replies
 * may wait for such a request, so it must be able to run without waiting for
 * more bytes from the client. */
bool nbd_input_holds_request(const struct nbd_connection *conn);

/* Take in whatever the client has sent by now, without waiting (one recv()
 * at most): nbd_reply_send() looks for the next request this way before it sends
 * a reply alone. End of file and errors are left for the next nbd_input_fill()
 * to see. Only the worker holding the receiver role calls this, between
 * requests (no payload in the input buffer is in use). */
void nbd_input_top_up(struct nbd_connection *conn);

/* The fields of a 28-byte request header (its magic is checked apart). */
struct nbd_request nbd_parse_request_header(const unsigned char *header);

/* Receive a WRITE payload into d->buffer (NULL: skip it), or, `in_place`
 * (small payloads only), leave it in the input buffer and point d->buffer at
 * it there (borrowed: valid while this worker keeps the receiver role).
 * Returns 0 or a negative errno (-ECONNRESET when the client closed in the
 * middle, -ETIMEDOUT when it did not arrive whole in time). */
int nbd_receive_payload(struct nbd_connection *conn, struct nbd_request_data *d, uint32_t length,
                        bool in_place);

/* Receive the rest of a large WRITE payload straight from the socket into
 * d->buffer, which holds `done` bytes already (NULL: read and drop it). With
 * `budgeted`, budget is taken for the bytes as they arrive and added to
 * d->charged; a wait for the budget is the server's, so it restarts the
 * client's deadline. */
int nbd_receive_rest(struct nbd_connection *conn, struct nbd_request_data *d, size_t done,
                     size_t length, bool budgeted);

#endif
