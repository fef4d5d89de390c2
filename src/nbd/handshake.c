/* handshake.c - NBD fixed newstyle option haggling for `uzram serve`.
 * Answers every option a client may send and decides when transmission starts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbd/protocol.h"
#include "nbd/exports.h"
#include "nbd/handshake.h"
#include "nbd/io.h"
#include "nbd/limits.h"
#include "nbd/log.h"
#include "nbd/request.h"
#include "nbd/session.h"
#include "nbd/tls.h"
#include "common/big_endian.h"

/* Options are small (names up to 4096 bytes plus a few lists); anything larger
 * than this is skipped with ERR_TOO_BIG, or drops the client past the cap. */
#define OPTION_MAX 65536u
#define OPTION_DISCARD_CAP (1u << 20)

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

/* The export a client names, held (see nbd_export_get()); NULL when there is none: names
 * longer than any device's, or with a NUL in them, name none. */
static struct nbd_export *find_export(struct nbd_exports *exports, const unsigned char *name,
                                      uint32_t length, bool client)
{
    char text[NBD_EXPORT_NAME_MAX + 1];
    if (length > NBD_EXPORT_NAME_MAX || memchr(name, '\0', length) != NULL)
        return NULL;
    memcpy(text, name, length);
    text[length] = '\0';
    return nbd_export_get(exports, text, client);
}

/* What INFO and GO tell about an export, taken while it is held, so that the replies can
 * go out after the hold ends (a client slow to read them must not hold up hot-remove). */
struct export_facts {
    char name[NBD_EXPORT_NAME_MAX + 1];
    uint64_t size; /* now: the device may have been resized through the control socket */
    uint16_t flags;
};

static void export_facts(const struct nbd_export *export, const struct nbd_session *s,
                         struct export_facts *facts)
{
    struct uzram_config config;
    uzram_get_config(export->dev, &config);
    snprintf(facts->name, sizeof facts->name, "%s", export->name);
    facts->size = config.disksize;
    facts->flags = nbd_transmission_flags(export, s);
}

/* The end of GO or EXPORT_NAME, whose answer went out with `rc`: on success transmission
 * starts with `export` (held as a client until the connection ends) and the facts the client
 * was told; returns 1. On failure the hold ends; returns rc. */
static int choose_export(struct nbd_session *s, struct nbd_exports *exports,
                         struct nbd_export *export, const struct export_facts *facts, int rc)
{
    if (rc < 0) {
        nbd_export_put(exports, export, true);
        return rc;
    }
    s->export = export;
    s->size = facts->size;
    s->flags = facts->flags;
    return 1;
}

/* ERR_UNKNOWN naming the exports there are, so that a user who typed a name wrong sees
 * the right ones ("" names the default export, which may have been removed). */
static int send_unknown(struct nbd_session *s, uint32_t option, struct nbd_exports *exports,
                        const unsigned char *name, uint32_t length)
{
    enum { SHOWN = 8 };
    struct nbd_export_entry entries[SHOWN + 1];
    size_t count = nbd_export_list(exports, entries, SHOWN + 1);
    char message[1024];
    int used =
        snprintf(message, sizeof message,
                 length == 0 ? "no default export (it was removed)" : "no export named '%.*s'",
                 (int)(length < 64 ? length : 64), (const char *)name);
    for (size_t i = 0; i < count && i < SHOWN && used > 0 && (size_t)used < sizeof message; i++)
        used += snprintf(message + used, sizeof message - (size_t)used, "%s%s%s",
                         i == 0 ? "; this server exports: " : ", ", entries[i].name,
                         i + 1 == SHOWN && count > SHOWN ? ", ..." : "");
    if (count == 0 && used > 0 && (size_t)used < sizeof message)
        snprintf(message + used, sizeof message - (size_t)used, "; this server exports nothing");
    /* The name came from the client: only printable bytes go back. */
    for (char *p = message; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            *p = '?';
    return send_error(s, option, NBD_REP_ERR_UNKNOWN, message);
}

static int send_info_export(struct nbd_session *s, uint32_t option,
                            const struct export_facts *facts)
{
    unsigned char info[12];
    util_put16(info, NBD_INFO_EXPORT);
    util_put64(info + 2, facts->size);
    util_put16(info + 10, facts->flags);
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

static int send_info_name(struct nbd_session *s, uint32_t option, const struct export_facts *facts)
{
    size_t length = strlen(facts->name);
    unsigned char info[2 + NBD_EXPORT_NAME_MAX];
    util_put16(info, NBD_INFO_NAME);
    memcpy(info + 2, facts->name, length);
    return send_reply(s, option, NBD_REP_INFO, info, (uint32_t)(2 + length));
}

/* NBD_OPT_INFO and NBD_OPT_GO. Returns 1 when GO succeeded. */
static int option_info_go(struct nbd_session *s, uint32_t option, const unsigned char *data,
                          uint32_t length, struct nbd_exports *exports)
{
    if (length < 6)
        return send_error(s, option, NBD_REP_ERR_INVALID, "option too short");
    uint32_t name_length = util_get32(data);
    if (name_length > NBD_MAX_STRING || (uint64_t)name_length + 6 > length)
        return send_error(s, option, NBD_REP_ERR_INVALID, "bad export name length");
    uint16_t count = util_get16(data + 4 + name_length);
    if ((uint64_t)4 + name_length + 2 + 2u * count != length)
        return send_error(s, option, NBD_REP_ERR_INVALID, "bad information request list");
    bool go = option == NBD_OPT_GO;
    /* GO holds the export as a client from here: hot-remove refuses from now on. */
    struct nbd_export *export = find_export(exports, data + 4, name_length, go);
    if (export == NULL)
        return send_unknown(s, option, exports, data + 4, name_length);
    struct export_facts facts;
    export_facts(export, s, &facts);
    if (!go)
        nbd_export_put(exports, export, false);

    bool want_name = false;
    for (uint16_t i = 0; i < count; i++)
        if (util_get16(data + 4 + name_length + 2 + 2u * i) == NBD_INFO_NAME)
            want_name = true;

    int rc = send_info_export(s, option, &facts);
    /* Block sizes are always sent: the engine cannot serve unaligned I/O. */
    if (rc == 0)
        rc = send_info_block_size(s, option);
    if (rc == 0 && want_name)
        rc = send_info_name(s, option, &facts);
    if (rc == 0)
        rc = send_reply(s, option, NBD_REP_ACK, NULL, 0);
    if (!go)
        return rc;
    return choose_export(s, exports, export, &facts, rc);
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
                               uint32_t length, struct nbd_exports *exports)
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
    struct nbd_export *export = find_export(exports, data + 4, name_length, false);
    if (export == NULL)
        return send_unknown(s, option, exports, data + 4, name_length);
    nbd_export_put(exports, export, false);

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

/* NBD_OPT_LIST: every export, the default first, each with a description (nbdinfo --list
 * shows it). */
static int option_list(struct nbd_session *s, uint32_t length, struct nbd_exports *exports)
{
    if (length != 0)
        return send_error(s, NBD_OPT_LIST, NBD_REP_ERR_INVALID, "LIST takes no data");
    struct nbd_export_entry *entries = malloc(NBD_SERVER_MAX_EXPORTS * sizeof *entries);
    if (entries == NULL)
        return -ENOMEM;
    size_t count = nbd_export_list(exports, entries, NBD_SERVER_MAX_EXPORTS);
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; i++) {
        size_t name_length = strlen(entries[i].name);
        size_t description_length = strlen(entries[i].description);
        unsigned char reply[4 + sizeof entries[i].name + sizeof entries[i].description];
        util_put32(reply, (uint32_t)name_length);
        memcpy(reply + 4, entries[i].name, name_length);
        memcpy(reply + 4 + name_length, entries[i].description, description_length);
        rc = send_reply(s, NBD_OPT_LIST, NBD_REP_SERVER, reply,
                        (uint32_t)(4 + name_length + description_length));
    }
    free(entries);
    if (rc == 0)
        rc = send_reply(s, NBD_OPT_LIST, NBD_REP_ACK, NULL, 0);
    return rc;
}

/* NBD_OPT_EXPORT_NAME: no reply header; unknown names close the connection. */
static int option_export_name(struct nbd_session *s, const unsigned char *data, uint32_t length,
                              struct nbd_exports *exports)
{
    struct nbd_export *export = find_export(exports, data, length, true);
    if (export == NULL) {
        nbd_log(s, "EXPORT_NAME asked for an unknown export; closing");
        return -ENOENT;
    }
    struct export_facts facts;
    export_facts(export, s, &facts);
    unsigned char reply[10 + NBD_EXPORT_NAME_PADDING] = {0};
    util_put64(reply, facts.size);
    util_put16(reply + 8, facts.flags);
    int rc =
        nbd_io_send_all_by(s, reply, s->no_zeroes ? 10 : sizeof reply, s->handshake_deadline_ms);
    return choose_export(s, exports, export, &facts, rc);
}

/* NBD_OPT_STARTTLS: ACK in the clear, then the TLS handshake; every later byte is
 * encrypted. Returns 0 to go on with the options, a negative errno to drop the client. */
static int option_starttls(struct nbd_session *s, uint32_t length)
{
    if (nbd_tls_mode(s->tls_config) == NBD_TLS_OFF)
        return send_error(
            s, NBD_OPT_STARTTLS, NBD_REP_ERR_UNSUP,
            "this server does not use TLS (serve --tls-psk FILE or --tls-certificates DIR)");
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

/* The server's greeting and the client's flags. 1 to go on with the options, 0 at end of
 * file, a negative errno to drop the client. */
static int greet(struct nbd_session *s)
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
    return 1;
}

int nbd_handshake(struct nbd_session *s, struct nbd_exports *exports)
{
    int rc = greet(s);
    if (rc <= 0)
        return rc;
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
            /* EXPORT_NAME has no reply to carry ERR_TOO_BIG: its only error answer is a
             * closed connection (NBD protocol, and what the man page says). */
            if (length > OPTION_DISCARD_CAP || option == NBD_OPT_EXPORT_NAME) {
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
            rc = option_export_name(s, data, length, exports);
            break;
        case NBD_OPT_ABORT:
            /* Best effort: the client may already have closed its end. */
            send_reply(s, option, NBD_REP_ACK, NULL, 0);
            rc = 0;
            goto out;
        case NBD_OPT_LIST:
            rc = option_list(s, length, exports);
            break;
        case NBD_OPT_INFO:
        case NBD_OPT_GO:
            rc = option_info_go(s, option, data, length, exports);
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
            rc = option_meta_context(s, option, data, length, exports);
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
