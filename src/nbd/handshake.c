/* handshake.c - NBD fixed newstyle option haggling for `uzram serve`.
 * Answers every option a client may send and decides when transmission starts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd/protocol.h"
#include "nbd/server.h"
#include "common/util.h"

/* Options are small (names up to 4096 bytes plus a few lists); anything larger
 * than this is skipped with ERR_TOO_BIG, or drops the client past the cap. */
#define OPTION_MAX 65536u
#define OPTION_DISCARD_CAP (1u << 20)

uint16_t nbd_transmission_flags(const struct nbd_export *export, const struct nbd_session *s)
{
    uint16_t flags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
                     NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_CAN_MULTI_CONN |
                     NBD_FLAG_SEND_CACHE | NBD_FLAG_SEND_FAST_ZERO;

    if (export->read_only)
        flags |= NBD_FLAG_READ_ONLY;
    /* The spec forbids SEND_DF unless structured replies were negotiated. */
    if (s->structured)
        flags |= NBD_FLAG_SEND_DF;
    return flags;
}

static int send_reply(struct nbd_session *s, uint32_t option, uint32_t type, const void *data,
                      uint32_t length)
{
    unsigned char header[20];
    util_put64(header, NBD_REP_MAGIC);
    util_put32(header + 8, option);
    util_put32(header + 12, type);
    util_put32(header + 16, length);
    struct iovec iov[2] = {{header, sizeof header}, {(void *)data, length}};
    /* The deadline covers sends too: a client that sends options and does not
     * read the replies must not keep the handshake going. */
    return nbd_io_send_iov_by(s, iov, length ? 2 : 1, s->handshake_deadline_ms);
}

static int send_error(struct nbd_session *s, uint32_t option, uint32_t type, const char *message)
{
    return send_reply(s, option, type, message, (uint32_t)strlen(message));
}

/* The current export size: the device may have been resized through the
 * control socket while no client was connected. */
static uint64_t export_size(const struct nbd_export *export)
{
    struct uzram_config config;
    uzram_get_config(export->dev, &config);
    return config.disksize;
}

/* "" selects the one export too, so plain URIs like nbd+unix:///?socket=... work. */
static bool name_matches(const struct nbd_export *export, const unsigned char *name,
                         uint32_t length)
{
    if (length == 0)
        return true;
    return length == strlen(export->name) && memcmp(name, export->name, length) == 0;
}

static int send_info_export(struct nbd_session *s, uint32_t option, const struct nbd_export *export)
{
    unsigned char info[12];
    util_put16(info, NBD_INFO_EXPORT);
    util_put64(info + 2, s->size);
    util_put16(info + 10, nbd_transmission_flags(export, s));
    return send_reply(s, option, NBD_REP_INFO, info, sizeof info);
}

static int send_info_block_size(struct nbd_session *s, uint32_t option)
{
    unsigned char info[14];
    util_put16(info, NBD_INFO_BLOCK_SIZE);
    util_put32(info + 2, NBD_SERVER_MIN_BLOCK);
    util_put32(info + 6, NBD_SERVER_PREFERRED_BLOCK);
    util_put32(info + 10, NBD_SERVER_MAX_PAYLOAD);
    return send_reply(s, option, NBD_REP_INFO, info, sizeof info);
}

static int send_info_name(struct nbd_session *s, uint32_t option, const struct nbd_export *export)
{
    size_t length = strlen(export->name);
    unsigned char info[2 + 64];
    util_put16(info, NBD_INFO_NAME);
    memcpy(info + 2, export->name, length);
    return send_reply(s, option, NBD_REP_INFO, info, (uint32_t)(2 + length));
}

/* NBD_OPT_INFO and NBD_OPT_GO. Returns 1 when GO succeeded. */
static int option_info_go(struct nbd_session *s, uint32_t option, const unsigned char *data,
                          uint32_t length, const struct nbd_export *export)
{
    if (length < 6)
        return send_error(s, option, NBD_REP_ERR_INVALID, "option too short");
    uint32_t name_length = util_get32(data);
    if (name_length > NBD_MAX_STRING || (uint64_t)name_length + 6 > length)
        return send_error(s, option, NBD_REP_ERR_INVALID, "bad export name length");
    uint16_t count = util_get16(data + 4 + name_length);
    if ((uint64_t)4 + name_length + 2 + 2u * count != length)
        return send_error(s, option, NBD_REP_ERR_INVALID, "bad information request list");
    if (!name_matches(export, data + 4, name_length)) {
        char message[128];
        snprintf(message, sizeof message, "no export named that; this server exports \"%s\"",
                 export->name);
        return send_error(s, option, NBD_REP_ERR_UNKNOWN, message);
    }

    bool want_name = false;
    for (uint16_t i = 0; i < count; i++)
        if (util_get16(data + 4 + name_length + 2 + 2u * i) == NBD_INFO_NAME)
            want_name = true;

    s->size = export_size(export);
    int rc = send_info_export(s, option, export);
    /* Block sizes are always sent: the engine cannot serve unaligned I/O. */
    if (rc == 0)
        rc = send_info_block_size(s, option);
    if (rc == 0 && want_name)
        rc = send_info_name(s, option, export);
    if (rc == 0)
        rc = send_reply(s, option, NBD_REP_ACK, NULL, 0);
    if (rc < 0)
        return rc;
    if (option == NBD_OPT_GO) {
        s->flags = nbd_transmission_flags(export, s);
        return 1;
    }
    return 0;
}

/* Does the query select base:allocation? `exact` for SET (a namespace alone
 * selects nothing there); LIST also accepts the "base:" namespace. */
static bool query_matches(const unsigned char *query, uint32_t length, bool exact)
{
    static const char context[] = NBD_CONTEXT_BASE_ALLOCATION;
    if (length == sizeof context - 1 && memcmp(query, context, length) == 0)
        return true;
    return !exact && length == 5 && memcmp(query, "base:", 5) == 0;
}

static int option_meta_context(struct nbd_session *s, uint32_t option, const unsigned char *data,
                               uint32_t length, const struct nbd_export *export)
{
    bool set = option == NBD_OPT_SET_META_CONTEXT;

    if (!s->structured)
        return send_error(s, option, NBD_REP_ERR_INVALID, "negotiate structured replies first");
    if (length < 8)
        return send_error(s, option, NBD_REP_ERR_INVALID, "option too short");
    uint32_t name_length = util_get32(data);
    if (name_length > NBD_MAX_STRING || (uint64_t)name_length + 8 > length)
        return send_error(s, option, NBD_REP_ERR_INVALID, "bad export name length");
    uint32_t queries = util_get32(data + 4 + name_length);

    /* Walk the queries once to validate the whole option before answering. */
    bool match = false;
    uint64_t position = 8 + (uint64_t)name_length;
    for (uint32_t i = 0; i < queries; i++) {
        if (position + 4 > length)
            return send_error(s, option, NBD_REP_ERR_INVALID, "truncated query list");
        uint32_t query_length = util_get32(data + position);
        position += 4;
        if (query_length > NBD_MAX_STRING || position + query_length > length)
            return send_error(s, option, NBD_REP_ERR_INVALID, "bad query length");
        if (query_matches(data + position, query_length, set))
            match = true;
        position += query_length;
    }
    if (position != length)
        return send_error(s, option, NBD_REP_ERR_INVALID, "trailing bytes after queries");
    if (!name_matches(export, data + 4, name_length))
        return send_error(s, option, NBD_REP_ERR_UNKNOWN, "no export named that");

    /* LIST with no query lists every context we have. */
    if (!set && queries == 0)
        match = true;
    if (set)
        s->meta_allocation = match;
    if (match) {
        static const char context[] = NBD_CONTEXT_BASE_ALLOCATION;
        unsigned char reply[4 + sizeof context - 1];
        /* The spec asks for id 0 in LIST replies. */
        util_put32(reply, set ? NBD_CONTEXT_ID_BASE_ALLOCATION : 0);
        memcpy(reply + 4, context, sizeof context - 1);
        int rc = send_reply(s, option, NBD_REP_META_CONTEXT, reply, sizeof reply);
        if (rc < 0)
            return rc;
    }
    return send_reply(s, option, NBD_REP_ACK, NULL, 0);
}

static int option_list(struct nbd_session *s, uint32_t length, const struct nbd_export *export)
{
    if (length != 0)
        return send_error(s, NBD_OPT_LIST, NBD_REP_ERR_INVALID, "LIST takes no data");
    size_t name_length = strlen(export->name);
    unsigned char reply[4 + 64];
    util_put32(reply, (uint32_t)name_length);
    memcpy(reply + 4, export->name, name_length);
    int rc = send_reply(s, NBD_OPT_LIST, NBD_REP_SERVER, reply, (uint32_t)(4 + name_length));
    if (rc == 0)
        rc = send_reply(s, NBD_OPT_LIST, NBD_REP_ACK, NULL, 0);
    return rc;
}

/* NBD_OPT_EXPORT_NAME: no reply header; unknown names close the connection. */
static int option_export_name(struct nbd_session *s, const unsigned char *data, uint32_t length,
                              const struct nbd_export *export)
{
    if (!name_matches(export, data, length)) {
        nbd_log(s, "EXPORT_NAME asked for an unknown export; closing");
        return -ENOENT;
    }
    s->size = export_size(export);
    s->flags = nbd_transmission_flags(export, s);
    unsigned char reply[10 + NBD_EXPORT_NAME_PADDING] = {0};
    util_put64(reply, s->size);
    util_put16(reply + 8, s->flags);
    int rc =
        nbd_io_send_all_by(s, reply, s->no_zeroes ? 10 : sizeof reply, s->handshake_deadline_ms);
    return rc < 0 ? rc : 1;
}

/* NBD_OPT_STARTTLS: ACK in the clear, then the TLS handshake; every later byte is
 * encrypted. Returns 0 to go on with the options, a negative errno to drop the client. */
static int option_starttls(struct nbd_session *s, uint32_t length)
{
    if (nbd_tls_mode(s->tls_config) == NBD_TLS_OFF)
        return send_error(s, NBD_OPT_STARTTLS, NBD_REP_ERR_UNSUP,
                          "this server does not use TLS (uzram serve --tls on)");
    if (s->tls != NULL)
        return send_error(s, NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID, "TLS is already on");
    if (length != 0)
        return send_error(s, NBD_OPT_STARTTLS, NBD_REP_ERR_INVALID, "option takes no data");
    int rc = send_reply(s, NBD_OPT_STARTTLS, NBD_REP_ACK, NULL, 0);
    if (rc == 0)
        rc = nbd_tls_start(s, s->tls_config);
    if (rc < 0)
        return rc;
    /* Anything agreed in the clear could have been put there by someone in the middle:
     * the client negotiates it again inside TLS. */
    s->structured = false;
    s->meta_allocation = false;
    return 0;
}

/* With --tls require, before STARTTLS: only STARTTLS and ABORT are served. Returns 1 when
 * `option` may be handled, else what handling it returned (the refusal). */
static int tls_required(struct nbd_session *s, uint32_t option)
{
    if (s->tls != NULL || nbd_tls_mode(s->tls_config) != NBD_TLS_REQUIRE ||
        option == NBD_OPT_STARTTLS || option == NBD_OPT_ABORT)
        return 1;
    if (option == NBD_OPT_EXPORT_NAME) {
        /* It has no error reply: the protocol says to close. */
        nbd_log(s, "EXPORT_NAME without TLS, which this server requires; closing");
        return -EPROTO;
    }
    if (option == NBD_OPT_GO)
        nbd_log(s, "refused: TLS is required (--tls require) and the client did not start it");
    return send_error(s, option, NBD_REP_ERR_TLS_REQD,
                      "this server requires TLS: use NBD_OPT_STARTTLS (an nbds:// URI)");
}

int nbd_handshake(struct nbd_session *s, const struct nbd_export *export)
{
    unsigned char greeting[18];
    util_put64(greeting, NBD_MAGIC);
    util_put64(greeting + 8, NBD_OPT_MAGIC);
    util_put16(greeting + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
    int rc = nbd_io_send_all_by(s, greeting, sizeof greeting, s->handshake_deadline_ms);
    if (rc < 0)
        return rc;

    unsigned char client_flags[4];
    rc = nbd_io_read_full_by(s, client_flags, sizeof client_flags, s->handshake_deadline_ms);
    if (rc <= 0)
        return rc;
    uint32_t flags = util_get32(client_flags);
    if (flags & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
        nbd_log(s, "unknown client flags 0x%x; closing", (unsigned)flags);
        return -EPROTO;
    }
    s->no_zeroes = (flags & NBD_FLAG_C_NO_ZEROES) != 0;

    unsigned char *data = malloc(OPTION_MAX);
    if (data == NULL)
        return -ENOMEM;
    for (;;) {
        unsigned char header[16];
        rc = nbd_io_read_full_by(s, header, sizeof header, s->handshake_deadline_ms);
        if (rc <= 0)
            break;
        if (util_get64(header) != NBD_OPT_MAGIC) {
            nbd_log(s, "bad option magic; closing");
            rc = -EPROTO;
            break;
        }
        uint32_t option = util_get32(header + 8);
        uint32_t length = util_get32(header + 12);
        if (length > OPTION_MAX) {
            if (length > OPTION_DISCARD_CAP) {
                nbd_log(s, "option %u with %u bytes of data; closing", option, length);
                rc = -EPROTO;
                break;
            }
            nbd_log(s, "option %u with %u bytes of data refused as too big", option, length);
            rc = nbd_io_discard_by(s, length, s->handshake_deadline_ms);
            if (rc == 0)
                rc = send_error(s, option, NBD_REP_ERR_TOO_BIG, "option data too large");
            if (rc < 0)
                break;
            continue;
        }
        rc = nbd_io_read_full_by(s, data, length, s->handshake_deadline_ms);
        if (length > 0 && rc <= 0) {
            rc = rc == 0 ? -ECONNRESET : rc;
            break;
        }

        rc = tls_required(s, option);
        if (rc != 1) {
            if (rc != 0)
                break;
            continue;
        }
        switch (option) {
        case NBD_OPT_EXPORT_NAME:
            rc = option_export_name(s, data, length, export);
            break;
        case NBD_OPT_ABORT:
            /* Best effort: the client may already have closed its end. */
            send_reply(s, option, NBD_REP_ACK, NULL, 0);
            rc = 0;
            goto out;
        case NBD_OPT_LIST:
            rc = option_list(s, length, export);
            break;
        case NBD_OPT_INFO:
        case NBD_OPT_GO:
            rc = option_info_go(s, option, data, length, export);
            break;
        case NBD_OPT_STRUCTURED_REPLY:
            if (length != 0) {
                rc = send_error(s, option, NBD_REP_ERR_INVALID, "option takes no data");
            } else {
                s->structured = true;
                rc = send_reply(s, option, NBD_REP_ACK, NULL, 0);
            }
            break;
        case NBD_OPT_LIST_META_CONTEXT:
        case NBD_OPT_SET_META_CONTEXT:
            rc = option_meta_context(s, option, data, length, export);
            break;
        case NBD_OPT_STARTTLS:
            rc = option_starttls(s, length);
            break;
        default:
            /* Including EXTENDED_HEADERS: clients fall back to compact headers. */
            rc = send_error(s, option, NBD_REP_ERR_UNSUP, "option not supported");
            break;
        }
        if (rc != 0)
            break;
    }
out:
    free(data);
    return rc;
}
