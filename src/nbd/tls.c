/* tls.c - TLS for the NBD server with GnuTLS: X.509 or PSK credentials, the handshake after
 * NBD_OPT_STARTTLS, and record I/O with the socket semantics the rest of the server expects. */
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nbd/log.h"
#include "nbd/session.h"
#include "nbd/tls.h"
#include "common/clock.h"

/* The largest plaintext of one TLS record: small pieces of a reply (headers) are gathered
 * into records of up to this size, so a reply is one record or a few, not one per piece. */
#define TLS_RECORD_MAX 16384u

/* Bytes taken from the socket in one recv() and handed to GnuTLS as it asks: GnuTLS asks
 * for a record's header, then its body, so without this a pipelining client's requests
 * would cost two system calls each instead of one for many (as without TLS). */
#define TLS_READ_AHEAD (32u << 10)

/* What GnuTLS may negotiate. TLS 1.2 at least, in the code rather than in a system policy:
 * SECURITY.md promises 1.3 or 1.2, and NORMAL alone still takes 1.0 and 1.1 (CBC with SHA-1).
 * With PSK only the PSK key exchanges, in the server's order, ECDHE and DHE before plain PSK,
 * so that a TLS 1.2 client that offers them gets forward secrecy; the certificate key
 * exchanges of NORMAL are taken out, as GnuTLS would pick one a client offers first and then
 * fail for want of a certificate ("Insufficient credentials"). */
#define NBD_TLS_PRIORITY_X509 "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"
#define NBD_TLS_PRIORITY_PSK                                                                       \
    NBD_TLS_PRIORITY_X509 ":-KX-ALL:+ECDHE-PSK:+DHE-PSK:+PSK:%SERVER_PRECEDENCE"

/* Lines of a PSK file: "username:hexkey", as psktool writes them. */
#define PSK_LINE_MAX 1024u

struct nbd_tls {
    enum nbd_tls_mode mode;
    gnutls_certificate_credentials_t x509; /* NULL without --tls-certificates */
    gnutls_psk_server_credentials_t psk;   /* NULL without --tls-psk */
    gnutls_priority_t priority;
    bool verify_peer;
};

/* One connection's TLS state: GnuTLS's session (its record buffers are bounded by the
 * record size) and the transport it reads and writes the socket through. */
struct nbd_tls_session {
    gnutls_session_t session;
    int fd;
    /* Where the receive stream is in the record it is reading (GnuTLS pulls exactly the
     * bytes of one record at a time): bytes of the 5-byte record header seen, and bytes of
     * the record's body still to come. Only the receiver touches them. */
    unsigned char header[5];
    unsigned header_seen;
    size_t body_left;
    /* Received, not yet handed to GnuTLS: ahead[ahead_start, ahead_end). Receiver only. */
    size_t ahead_start, ahead_end;
    unsigned char ahead[TLS_READ_AHEAD];
    /* Reply pieces gathered into one record; only the sender touches it. */
    unsigned char gather[TLS_RECORD_MAX];
};

enum nbd_tls_mode nbd_tls_mode(const struct nbd_tls *tls)
{
    return tls ? tls->mode : NBD_TLS_OFF;
}

const char *nbd_tls_kind(const struct nbd_tls *tls)
{
    if (tls == NULL)
        return "off";
    return tls->psk ? "PSK" : tls->verify_peer ? "X.509, client certificates verified" : "X.509";
}

void nbd_tls_free(struct nbd_tls *tls)
{
    if (tls == NULL)
        return;
    if (tls->priority)
        gnutls_priority_deinit(tls->priority);
    if (tls->x509)
        gnutls_certificate_free_credentials(tls->x509);
    if (tls->psk)
        gnutls_psk_free_server_credentials(tls->psk);
    free(tls);
}

/* A file the server needs at start: say which one it cannot read, and why. */
static int readable(const char *option, const char *path)
{
    if (access(path, R_OK) == 0)
        return 0;
    int err = errno;
    fprintf(stderr, "uzram: %s: cannot read %s: %s\n", option, path, strerror(err));
    return -err;
}

static int load_certificates(struct nbd_tls *tls, const char *dir, bool verify_peer)
{
    char ca[PATH_MAX], crl[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];
    snprintf(ca, sizeof ca, "%s/%s", dir, NBD_TLS_CA_CERT);
    snprintf(crl, sizeof crl, "%s/%s", dir, NBD_TLS_CA_CRL);
    snprintf(cert, sizeof cert, "%s/%s", dir, NBD_TLS_SERVER_CERT);
    snprintf(key, sizeof key, "%s/%s", dir, NBD_TLS_SERVER_KEY);
    int rc = readable("--tls-certificates", cert);
    if (rc == 0)
        rc = readable("--tls-certificates", key);
    if (rc == 0 && (verify_peer || access(ca, F_OK) == 0))
        rc = readable("--tls-certificates", ca);
    if (rc < 0)
        return rc;

    if (gnutls_certificate_allocate_credentials(&tls->x509) < 0)
        return -ENOMEM;
    rc = gnutls_certificate_set_x509_key_file(tls->x509, cert, key, GNUTLS_X509_FMT_PEM);
    if (rc < 0) {
        fprintf(stderr, "uzram: --tls-certificates: cannot load %s with key %s: %s\n", cert, key,
                gnutls_strerror(rc));
        return -EINVAL;
    }
    if (access(ca, F_OK) == 0) {
        rc = gnutls_certificate_set_x509_trust_file(tls->x509, ca, GNUTLS_X509_FMT_PEM);
        if (rc <= 0) {
            fprintf(stderr, "uzram: --tls-certificates: cannot load %s: %s\n", ca,
                    rc == 0 ? "no certificate in it" : gnutls_strerror(rc));
            return -EINVAL;
        }
    }
    if (access(crl, F_OK) == 0) {
        rc = gnutls_certificate_set_x509_crl_file(tls->x509, crl, GNUTLS_X509_FMT_PEM);
        if (rc < 0) {
            fprintf(stderr, "uzram: --tls-certificates: cannot load %s: %s\n", crl,
                    gnutls_strerror(rc));
            return -EINVAL;
        }
    }
    gnutls_certificate_set_known_dh_params(tls->x509, GNUTLS_SEC_PARAM_MEDIUM);
    return 0;
}

/* GnuTLS reads the PSK file at each handshake, so a key added later works without a
 * restart; the file is checked here so that a wrong one is a start-up error. */
static int check_psk_file(const char *path)
{
    int rc = readable("--tls-psk", path);
    if (rc < 0)
        return rc;
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        int err = errno;
        fprintf(stderr, "uzram: --tls-psk: cannot open %s: %s\n", path, strerror(err));
        return -err;
    }
    char line[PSK_LINE_MAX + 2];
    unsigned number = 0, keys = 0;
    rc = 0;
    while (rc == 0 && fgets(line, sizeof line, file) != NULL) {
        number++;
        size_t length = strcspn(line, "\r\n");
        if (line[length] == '\0' && !feof(file)) {
            rc = -EINVAL;
            break;
        }
        line[length] = '\0';
        if (length == 0)
            continue;
        const char *colon = strchr(line, ':');
        const char *hex = colon ? colon + 1 : "";
        size_t hex_length = strlen(hex);
        if (colon == NULL || colon == line || hex_length == 0 || hex_length % 2 != 0 ||
            strspn(hex, "0123456789abcdefABCDEF") != hex_length)
            rc = -EINVAL;
        else
            keys++;
    }
    fclose(file);
    if (rc == 0 && keys == 0) {
        fprintf(stderr, "uzram: --tls-psk: %s has no keys; make one with psktool -u NAME -p %s\n",
                path, path);
        return -EINVAL;
    }
    if (rc < 0)
        fprintf(stderr,
                "uzram: --tls-psk: %s:%u is not USERNAME:HEXKEY; make the file with psktool -u "
                "NAME -p FILE\n",
                path, number);
    return rc;
}

int nbd_tls_create(const struct nbd_tls_options *options, struct nbd_tls **out)
{
    *out = NULL;
    if (options->mode == NBD_TLS_OFF)
        return 0;
    struct nbd_tls *tls = calloc(1, sizeof *tls);
    if (tls == NULL)
        return -ENOMEM;
    tls->mode = options->mode;
    tls->verify_peer = options->verify_peer;
    int rc = 0;
    if (options->certificates)
        rc = load_certificates(tls, options->certificates, options->verify_peer);
    if (rc == 0 && options->psk_file) {
        rc = check_psk_file(options->psk_file);
        if (rc == 0 && gnutls_psk_allocate_server_credentials(&tls->psk) < 0)
            rc = -ENOMEM;
        if (rc == 0) {
            int grc = gnutls_psk_set_server_credentials_file(tls->psk, options->psk_file);
            if (grc < 0) {
                fprintf(stderr, "uzram: --tls-psk: cannot use %s: %s\n", options->psk_file,
                        gnutls_strerror(grc));
                rc = -EINVAL;
            }
        }
        if (rc == 0)
            gnutls_psk_set_server_known_dh_params(tls->psk, GNUTLS_SEC_PARAM_MEDIUM);
    }
    const char *priority = tls->psk ? NBD_TLS_PRIORITY_PSK : NBD_TLS_PRIORITY_X509;
    if (rc == 0 && gnutls_priority_init(&tls->priority, priority, NULL) < 0) {
        fprintf(stderr, "uzram: the TLS library refused the priority string %s\n", priority);
        rc = -EINVAL;
    }
    if (rc < 0) {
        nbd_tls_free(tls);
        return rc;
    }
    *out = tls;
    return 0;
}

/* ------------------------------------------------------------------------
 * The transport under GnuTLS: the connection's socket, never blocking (waits poll against
 * their deadline above GnuTLS, so a partial record always comes back to the caller).
 * ---------------------------------------------------------------------- */

/* Follow record boundaries in the bytes received, for nbd_tls_midway(). */
static void track_records(struct nbd_tls_session *t, const unsigned char *p, size_t n)
{
    while (n > 0) {
        if (t->body_left > 0) {
            size_t k = n < t->body_left ? n : t->body_left;
            t->body_left -= k;
            p += k;
            n -= k;
            continue;
        }
        t->header[t->header_seen++] = *p++;
        n--;
        if (t->header_seen == sizeof t->header) {
            t->body_left = (size_t)t->header[3] << 8 | t->header[4];
            t->header_seen = 0;
        }
    }
}

static ssize_t transport_pull(gnutls_transport_ptr_t pointer, void *buf, size_t length)
{
    struct nbd_tls_session *t = pointer;
    if (t->ahead_start == t->ahead_end) {
        ssize_t n;
        while ((n = recv(t->fd, t->ahead, sizeof t->ahead, MSG_DONTWAIT)) < 0 && errno == EINTR)
            ;
        if (n <= 0) {
            if (n < 0)
                gnutls_transport_set_errno(t->session, errno == EWOULDBLOCK ? EAGAIN : errno);
            return n;
        }
        t->ahead_start = 0;
        t->ahead_end = (size_t)n;
    }
    size_t k = t->ahead_end - t->ahead_start < length ? t->ahead_end - t->ahead_start : length;
    memcpy(buf, t->ahead + t->ahead_start, k);
    t->ahead_start += k;
    track_records(t, buf, k);
    return (ssize_t)k;
}

static ssize_t transport_push(gnutls_transport_ptr_t pointer, const giovec_t *iov, int count)
{
    struct nbd_tls_session *t = pointer;
    struct msghdr message = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)count};
    ssize_t n;
    while ((n = sendmsg(t->fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT)) < 0 && errno == EINTR)
        ;
    if (n < 0)
        gnutls_transport_set_errno(t->session, errno == EWOULDBLOCK ? EAGAIN : errno);
    return n;
}

static int transport_pull_timeout(gnutls_transport_ptr_t pointer, unsigned int ms)
{
    struct nbd_tls_session *t = pointer;
    if (t->ahead_start < t->ahead_end)
        return 1;
    struct pollfd p = {t->fd, POLLIN, 0};
    return poll(&p, 1, ms == GNUTLS_INDEFINITE_TIMEOUT ? -1 : (int)ms);
}

/* Wait for the socket to be ready for `events` until `deadline_ms` (0: for ever).
 * Returns 0, -ETIMEDOUT or a negative errno. */
static int wait_socket(int fd, short events, uint64_t deadline_ms)
{
    int timeout = -1;
    if (deadline_ms) {
        uint64_t now = util_now_ms();
        if (now >= deadline_ms)
            return -ETIMEDOUT;
        timeout = deadline_ms - now > 60000 ? 60000 : (int)(deadline_ms - now);
    }
    struct pollfd p = {fd, events, 0};
    if (poll(&p, 1, timeout) < 0 && errno != EINTR)
        return -errno;
    return 0;
}

/* One line for a failed handshake: GnuTLS's reason, with the alert or the certificate
 * check's verdict when there is one. */
static void log_handshake_failure(struct nbd_session *s, const struct nbd_tls *tls,
                                  gnutls_session_t session, int rc)
{
    if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR || rc == GNUTLS_E_NO_CERTIFICATE_FOUND) {
        gnutls_datum_t text = {NULL, 0};
        unsigned status = gnutls_session_get_verify_cert_status(session);
        if (rc == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR &&
            gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0) == 0) {
            nbd_log(s, "TLS handshake failed: client certificate refused: %s; closing",
                    (const char *)text.data);
            gnutls_free(text.data);
            return;
        }
    }
    if (rc == GNUTLS_E_WARNING_ALERT_RECEIVED || rc == GNUTLS_E_FATAL_ALERT_RECEIVED)
        nbd_log(s, "TLS handshake failed: the client sent alert '%s'; closing",
                gnutls_alert_get_name(gnutls_alert_get(session)));
    else if (rc == GNUTLS_E_RECEIVED_ILLEGAL_PARAMETER && tls->psk != NULL)
        /* What GnuTLS says when a TLS 1.3 client's key does not match ours. */
        nbd_log(s, "TLS handshake failed: %s (an unknown PSK user or a wrong key?); closing",
                gnutls_strerror(rc));
    else
        nbd_log(s, "TLS handshake failed: %s; closing", gnutls_strerror(rc));
}

int nbd_tls_start(struct nbd_session *s, const struct nbd_tls *tls)
{
    struct nbd_tls_session *t = calloc(1, sizeof *t);
    if (t == NULL)
        return -ENOMEM;
    t->fd = s->fd;
    if (gnutls_init(&t->session, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) < 0) {
        free(t);
        return -ENOMEM;
    }
    gnutls_session_t session = t->session;
    int rc = gnutls_priority_set(session, tls->priority);
    if (rc == 0 && tls->x509)
        rc = gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, tls->x509);
    if (rc == 0 && tls->psk)
        rc = gnutls_credentials_set(session, GNUTLS_CRD_PSK, tls->psk);
    if (rc == 0 && tls->verify_peer) {
        gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUIRE);
        /* Verified during the handshake: a bad certificate fails it. */
        gnutls_session_set_verify_cert(session, NULL, 0);
    }
    gnutls_transport_set_ptr(session, t);
    gnutls_transport_set_pull_function(session, transport_pull);
    gnutls_transport_set_pull_timeout_function(session, transport_pull_timeout);
    gnutls_transport_set_vec_push_function(session, transport_push);

    while (rc == 0 && (rc = gnutls_handshake(session)) < 0 && !gnutls_error_is_fatal(rc)) {
        int wait = wait_socket(s->fd, gnutls_record_get_direction(session) ? POLLOUT : POLLIN,
                               s->handshake_deadline_ms);
        if (wait < 0) {
            gnutls_deinit(session);
            free(t);
            return wait; /* -ETIMEDOUT: the NBD handshake's deadline, logged by the caller */
        }
        rc = 0;
    }
    if (rc < 0) {
        log_handshake_failure(s, tls, session, rc);
        gnutls_deinit(session);
        free(t);
        return -EPROTO;
    }
    s->tls = t;
    return 0;
}

void nbd_tls_end(struct nbd_session *s)
{
    struct nbd_tls_session *t = s->tls;
    if (t == NULL)
        return;
    /* close_notify if the socket takes it now; a client that is gone is not waited for. */
    gnutls_bye(t->session, GNUTLS_SHUT_WR);
    gnutls_deinit(t->session);
    free(t);
    s->tls = NULL;
}

/* What recv() without MSG_DONTWAIT waits at most: the socket's SO_RCVTIMEO (-1: no limit). */
static int receive_timeout_ms(int fd)
{
    struct timeval t = {0, 0};
    socklen_t size = sizeof t;
    if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, &size) < 0 || (t.tv_sec == 0 && t.tv_usec == 0))
        return -1;
    return (int)(t.tv_sec * 1000 + t.tv_usec / 1000);
}

ssize_t nbd_tls_recv(struct nbd_session *s, void *buf, size_t length, int flags)
{
    struct nbd_tls_session *t = s->tls;
    bool waited = false;
    for (;;) {
        ssize_t n = gnutls_record_recv(t->session, buf, length);
        if (n >= 0)
            return n;
        if (n == GNUTLS_E_INTERRUPTED)
            continue;
        if (n == GNUTLS_E_AGAIN) {
            /* Like recv(): without MSG_DONTWAIT, one wait of up to SO_RCVTIMEO for bytes,
             * and back to the caller with what they made, even half a record (so that its
             * request deadline is checked as often as without TLS). */
            if (!(flags & MSG_DONTWAIT) && !waited) {
                struct pollfd p = {t->fd, POLLIN, 0};
                int ready = poll(&p, 1, receive_timeout_ms(t->fd));
                if (ready < 0 && errno != EINTR)
                    return -1;
                if (ready > 0) {
                    waited = true;
                    continue;
                }
            }
            errno = EWOULDBLOCK;
            return -1;
        }
        /* The client closed the socket without close_notify: end of file, as for TCP. */
        if (n == GNUTLS_E_PREMATURE_TERMINATION)
            return 0;
        if (n == GNUTLS_E_PULL_ERROR) {
            errno = ECONNRESET;
            return -1;
        }
        /* A bad record, an alert, a renegotiation request: the one line says what, and the
         * connection ends as if the client had closed it. */
        if (n == GNUTLS_E_WARNING_ALERT_RECEIVED || n == GNUTLS_E_FATAL_ALERT_RECEIVED)
            nbd_log(s, "TLS: the client sent alert '%s'; closing",
                    gnutls_alert_get_name(gnutls_alert_get(t->session)));
        else
            nbd_log(s, "TLS receive failed: %s; closing", gnutls_strerror((int)n));
        shutdown(s->fd, SHUT_RD);
        return 0;
    }
}

size_t nbd_tls_pending(struct nbd_session *s)
{
    struct nbd_tls_session *t = s->tls;
    return gnutls_record_check_pending(t->session) + (t->ahead_end - t->ahead_start);
}

bool nbd_tls_midway(struct nbd_session *s)
{
    struct nbd_tls_session *t = s->tls;
    return t->header_seen > 0 || t->body_left > 0 || t->ahead_start < t->ahead_end;
}

/* Send `length` bytes as records (each call to gnutls_record_send sends at most one). */
static int send_records(struct nbd_tls_session *t, const unsigned char *data, size_t length,
                        int64_t timeout_ms, uint64_t *deadline_ms)
{
    while (length > 0) {
        size_t piece = length < TLS_RECORD_MAX ? length : TLS_RECORD_MAX;
        ssize_t n = gnutls_record_send(t->session, data, piece);
        if (n > 0) {
            data += n;
            length -= (size_t)n;
            continue;
        }
        if (n == GNUTLS_E_INTERRUPTED)
            continue;
        if (n != GNUTLS_E_AGAIN)
            return n == GNUTLS_E_PUSH_ERROR ? -EPIPE : -EIO;
        /* GnuTLS keeps the encrypted record; calling again with the same data sends it. */
        if (*deadline_ms == 0 && timeout_ms >= 0)
            *deadline_ms = util_now_ms() + (uint64_t)timeout_ms;
        int rc = wait_socket(t->fd, POLLOUT, *deadline_ms);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int nbd_tls_send_iov(struct nbd_session *s, struct iovec *iov, int count, int64_t timeout_ms,
                     uint64_t deadline_ms)
{
    struct nbd_tls_session *t = s->tls;
    size_t gathered = 0;
    for (int i = 0; i < count; i++) {
        const unsigned char *p = iov[i].iov_base;
        size_t left = iov[i].iov_len;
        while (left > 0) {
            /* Whole records straight from the caller's buffer; pieces are gathered. */
            if (gathered == 0 && left >= TLS_RECORD_MAX) {
                size_t whole = left - left % TLS_RECORD_MAX;
                int rc = send_records(t, p, whole, timeout_ms, &deadline_ms);
                if (rc < 0)
                    return rc;
                p += whole;
                left -= whole;
                continue;
            }
            size_t take = TLS_RECORD_MAX - gathered < left ? TLS_RECORD_MAX - gathered : left;
            memcpy(t->gather + gathered, p, take);
            gathered += take;
            p += take;
            left -= take;
            if (gathered == TLS_RECORD_MAX) {
                int rc = send_records(t, t->gather, gathered, timeout_ms, &deadline_ms);
                if (rc < 0)
                    return rc;
                gathered = 0;
            }
        }
    }
    return gathered ? send_records(t, t->gather, gathered, timeout_ms, &deadline_ms) : 0;
}
