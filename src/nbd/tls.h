/* tls.h - TLS for the NBD server (GnuTLS): credentials, the STARTTLS handshake and record I/O.
 * The rest of the server reaches it through the byte I/O seam in io.c, but for handshake.c,
 * which starts it (nbd_tls_start after STARTTLS) and asks its mode (nbd_tls_mode). */
#ifndef UZRAM_NBD_TLS_H
#define UZRAM_NBD_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct nbd_session;

/* --tls: off (STARTTLS refused), on (clients choose), require (nothing but STARTTLS and
 * ABORT before TLS: NBD_REP_ERR_TLS_REQD, as the protocol says). */
enum nbd_tls_mode { NBD_TLS_OFF, NBD_TLS_ON, NBD_TLS_REQUIRE };

/* File names in a --tls-certificates directory, as nbdkit and qemu-nbd use them. */
#define NBD_TLS_CA_CERT "ca-cert.pem"
#define NBD_TLS_CA_CRL "ca-crl.pem"
#define NBD_TLS_SERVER_CERT "server-cert.pem"
#define NBD_TLS_SERVER_KEY "server-key.pem"

struct nbd_tls_options {
    enum nbd_tls_mode mode;
    const char *certificates; /* directory with the files above, or NULL */
    const char *psk_file;     /* psktool's "username:hexkey" lines, or NULL */
    bool verify_peer;         /* clients must show a certificate signed by ca-cert.pem */
};

/* The server's credentials, shared read-only by every connection. */
struct nbd_tls;

/* Load the credentials for `options` (mode off: *tls = NULL, nothing loaded). A file that
 * cannot be loaded is one line on stderr naming it; returns 0 or a negative errno. */
int nbd_tls_create(const struct nbd_tls_options *options, struct nbd_tls **tls);
void nbd_tls_free(struct nbd_tls *tls);
/* NBD_TLS_OFF for NULL. */
enum nbd_tls_mode nbd_tls_mode(const struct nbd_tls *tls);
/* "X.509", "PSK" or "X.509 and PSK", for the banner. */
const char *nbd_tls_kind(const struct nbd_tls *tls);

/* After the ACK to NBD_OPT_STARTTLS: the TLS handshake on session->fd, within
 * session->handshake_deadline_ms (the NBD handshake's). On success session->tls is set and
 * every later byte goes through it. On failure one log line; returns a negative errno and
 * the connection must be dropped. */
int nbd_tls_start(struct nbd_session *session, const struct nbd_tls *tls);
/* Best-effort close_notify (never waits) and the session's memory. */
void nbd_tls_end(struct nbd_session *session);

/* Record I/O for io.c. nbd_tls_recv has recv()'s contract (bytes, 0 at end of file, or -1
 * with errno; EWOULDBLOCK when no whole record came within the socket's receive timeout, or
 * at once with MSG_DONTWAIT, even if part of one did). One receiver and one sender may run
 * at the same time. */
ssize_t nbd_tls_recv(struct nbd_session *session, void *buf, size_t length, int flags);
/* Decrypted bytes waiting in the session: poll() on the socket would not see them. */
size_t nbd_tls_pending(struct nbd_session *session);
/* Part of a record has arrived: the client has started sending something. */
bool nbd_tls_midway(struct nbd_session *session);
/* util_send_iov's contract: timeout_ms >= 0 from the first wait, or until deadline_ms. */
int nbd_tls_send_iov(struct nbd_session *session, struct iovec *iov, int count, int64_t timeout_ms,
                     uint64_t deadline_ms);

#endif
