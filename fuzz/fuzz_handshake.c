/* fuzz_handshake.c - libFuzzer target: the fuzz input is a client's byte stream during the NBD
 * handshake, fed to nbd_handshake() over a socketpair; the server's replies must parse. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nbd/protocol.h"
#include "nbd/exports.h"
#include "nbd/handshake.h"
#include "nbd/log.h"
#include "nbd/request.h"
#include "nbd/session.h"
#include "nbd/tls.h"
#include "socket_client.h"
#include "uzram.h"
#include "common/big_endian.h"

/*
 * The input is exactly what a client would send after reading the greeting:
 * 4 bytes of client flags, then options (IHAVEOPT, u32 option, u32 length,
 * data). A helper thread writes it into one end of a socketpair, shuts that
 * direction down (so the server sees end of file rather than waiting) and
 * meanwhile drains everything the server sends, so neither side can block
 * the other. Then the reply stream is checked: the greeting, a sequence of
 * well-formed option replies, and, when the handshake says transmission
 * starts, either an ACK to NBD_OPT_GO or the EXPORT_NAME answer at the end.
 *
 * Each input is run three times: with --tls off, on and require (PSK credentials
 * from a key file written at start). With TLS the replies are checked up to the
 * ACK to NBD_OPT_STARTTLS; what follows is the TLS handshake, which the fuzz
 * bytes cannot complete (it needs the client's keys), so it ends in an error
 * path of tls.c and transmission never starts. Under require, every option
 * before STARTTLS but ABORT must get NBD_REP_ERR_TLS_REQD.
 *
 * Only the handshake and the socket helpers are linked; nbd_log() and the
 * server's export lookups are defined here: two exports, "fuzz" (the default)
 * and "other" (read-only, another size), whose holds are counted, so that a
 * handshake that keeps a hold it should have given back is caught.
 * fuzz-link: fuzz/socket_client.c src/nbd/handshake.c src/nbd/request.c src/nbd/io.c src/nbd/tls.c
 * fuzz-link: src/common/socket_io.c
 * fuzz-options: -max_len=16384
 */

#define DISK (1024u * 1024u)
#define EXPORT_NAME "fuzz"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_handshake: check failed: %s: ", #cond);                          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The handshake logs through this; format the message so that bad format
 * arguments still show up under the sanitizers, but print nothing. */
void nbd_log(struct nbd_session *session, const char *format, ...)
{
    char message[512];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    session->log_lines++;
}

static struct nbd_tls *tls_on, *tls_require;

/* TLS credentials for the on and require runs: one PSK in a file of its own. */
static void make_tls(void)
{
    if (tls_on != NULL)
        return;
    char path[] = "/tmp/fuzz_handshake_psk.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    static const char key[] = "fuzz:00112233445566778899aabbccddeeff\n";
    CHECK(write(fd, key, sizeof key - 1) == (ssize_t)(sizeof key - 1), "write the PSK file");
    close(fd);
    struct nbd_tls_options options = {.mode = NBD_TLS_ON, .psk_file = path};
    CHECK(nbd_tls_create(&options, &tls_on) == 0, "nbd_tls_create(on)");
    options.mode = NBD_TLS_REQUIRE;
    CHECK(nbd_tls_create(&options, &tls_require) == 0, "nbd_tls_create(require)");
    unlink(path); /* the credentials are loaded; GnuTLS re-reads the file only per handshake */
}

#define OTHER_NAME "other"
#define OTHER_DISK (2 * DISK)

/* The fuzz target's exports: two, and the holds on each. */
struct nbd_exports {
    struct nbd_export exports[2];
    int holds[2], clients[2];
};

static struct nbd_exports server;

/* Two devices for the whole run: the handshake only asks them for their size. */
static void make_server(void)
{
    if (server.exports[0].dev != NULL)
        return;
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK;
    server.exports[0] = (struct nbd_export){NULL, EXPORT_NAME, false, false};
    CHECK(uzram_create(&config, &server.exports[0].dev) == 0, "uzram_create");
    config.disksize = OTHER_DISK;
    server.exports[1] = (struct nbd_export){NULL, OTHER_NAME, true, false};
    CHECK(uzram_create(&config, &server.exports[1].dev) == 0, "uzram_create");
}

struct nbd_export *nbd_export_get(struct nbd_exports *s, const char *name, bool client)
{
    for (int i = 0; i < 2; i++) {
        if (strcmp(name, s->exports[i].name) == 0 || (i == 0 && name[0] == '\0')) {
            (client ? s->clients : s->holds)[i]++;
            return &s->exports[i];
        }
    }
    return NULL;
}

void nbd_export_put(struct nbd_exports *s, struct nbd_export *export, bool client)
{
    int i = (int)(export - s->exports);
    CHECK(i == 0 || i == 1, "put of an export that is not one");
    (client ? s->clients : s->holds)[i]--;
    CHECK(s->clients[i] >= 0 && s->holds[i] >= 0, "put without a get");
}

size_t nbd_export_list(struct nbd_exports *s, struct nbd_export_entry *entries, size_t max)
{
    size_t count = 0;
    for (int i = 0; i < 2 && count < max; i++, count++) {
        snprintf(entries[count].name, sizeof entries[count].name, "%s", s->exports[i].name);
        snprintf(entries[count].description, sizeof entries[count].description, "export %d", i);
    }
    return count;
}

static bool known_name(const uint8_t *name, size_t length)
{
    for (int i = 0; i < 2; i++)
        if (length == strlen(server.exports[i].name) &&
            memcmp(name, server.exports[i].name, length) == 0)
            return true;
    return false;
}

/* Check the server's byte stream against what nbd_handshake() returned. */
static void check_replies(const uint8_t *out, size_t size, int rc, const struct nbd_session *s,
                          enum nbd_tls_mode mode)
{
    CHECK(size >= 18, "no greeting (%zu bytes)", size);
    CHECK(util_get64(out) == NBD_MAGIC && util_get64(out + 8) == NBD_OPT_MAGIC, "bad greeting");
    CHECK(util_get16(out + 16) == (NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES), "greeting flags");

    size_t position = 18;
    uint32_t last_option = 0, last_type = 0;
    bool any_reply = false;
    while (size - position >= 20 && util_get64(out + position) == NBD_REP_MAGIC) {
        uint32_t option = util_get32(out + position + 8);
        uint32_t type = util_get32(out + position + 12);
        uint32_t length = util_get32(out + position + 16);
        CHECK(length <= 4096 + 64, "reply of %u bytes", length);
        CHECK(size - position - 20 >= length, "truncated reply");
        const uint8_t *data = out + position + 20;
        if (mode == NBD_TLS_REQUIRE && option != NBD_OPT_ABORT && option != NBD_OPT_STARTTLS)
            CHECK(type == NBD_REP_ERR_TLS_REQD, "reply 0x%x to option %u before TLS", type, option);
        if (option == NBD_OPT_STARTTLS && type == NBD_REP_ACK) {
            /* TLS from here on: the fuzz bytes cannot finish its handshake. */
            CHECK(mode != NBD_TLS_OFF, "STARTTLS acknowledged with TLS off");
            CHECK(length == 0, "ACK with data");
            CHECK(rc < 0 && s->tls == NULL, "TLS handshake on fuzz bytes returned %d", rc);
            return;
        }
        if (option == NBD_OPT_STARTTLS)
            CHECK(type == (mode == NBD_TLS_OFF ? NBD_REP_ERR_UNSUP : NBD_REP_ERR_INVALID),
                  "STARTTLS answered 0x%x", type);
        switch (type) {
        case NBD_REP_ACK:
            CHECK(length == 0, "ACK with data");
            break;
        case NBD_REP_SERVER:
            CHECK(option == NBD_OPT_LIST, "SERVER reply to option %u", option);
            CHECK(length >= 4 && util_get32(data) <= length - 4, "SERVER reply length");
            CHECK(known_name(data + 4, util_get32(data)), "SERVER reply names no export");
            break;
        case NBD_REP_INFO:
            CHECK(option == NBD_OPT_INFO || option == NBD_OPT_GO, "INFO reply to %u", option);
            CHECK(length >= 2, "INFO reply without type");
            if (util_get16(data) == NBD_INFO_EXPORT) {
                CHECK(length == 12, "INFO_EXPORT length %u", length);
                CHECK(util_get64(data + 2) == DISK || util_get64(data + 2) == OTHER_DISK,
                      "INFO_EXPORT size");
            } else if (util_get16(data) == NBD_INFO_BLOCK_SIZE) {
                CHECK(length == 14, "INFO_BLOCK_SIZE length %u", length);
            } else {
                CHECK(util_get16(data) == NBD_INFO_NAME, "INFO type %u", util_get16(data));
                CHECK(known_name(data + 2, length - 2), "INFO_NAME");
            }
            break;
        case NBD_REP_META_CONTEXT:
            CHECK(option == NBD_OPT_LIST_META_CONTEXT || option == NBD_OPT_SET_META_CONTEXT,
                  "META_CONTEXT reply to %u", option);
            CHECK(length == 4 + strlen(NBD_CONTEXT_BASE_ALLOCATION) &&
                      memcmp(data + 4, NBD_CONTEXT_BASE_ALLOCATION, length - 4) == 0,
                  "META_CONTEXT reply");
            break;
        default:
            CHECK(type & NBD_REP_FLAG_ERROR, "unknown reply type 0x%x", type);
            break;
        }
        last_option = option;
        last_type = type;
        any_reply = true;
        position += 20 + length;
    }

    size_t rest = size - position;
    if (rc != 1) {
        CHECK(rest == 0, "%zu stray bytes after the option replies (rc %d)", rest, rc);
        return;
    }
    CHECK(mode != NBD_TLS_REQUIRE, "transmission without TLS under --tls require");
    CHECK(s->export == &server.exports[0] || s->export == &server.exports[1], "session export");
    uint64_t disk = s->export == &server.exports[0] ? DISK : OTHER_DISK;
    CHECK(s->size == disk, "session size %llu", (unsigned long long)s->size);
    CHECK(s->flags == nbd_transmission_flags(s->export, s), "transmission flags");
    CHECK(!s->meta_allocation || s->structured, "meta context without structured replies");
    if (rest == 0) {
        CHECK(any_reply && last_option == NBD_OPT_GO && last_type == NBD_REP_ACK,
              "transmission without an ACK to GO");
    } else {
        /* NBD_OPT_EXPORT_NAME: size, flags and maybe 124 zero bytes. */
        CHECK(rest == (s->no_zeroes ? 10u : 10u + NBD_EXPORT_NAME_PADDING),
              "EXPORT_NAME answer of %zu bytes", rest);
        CHECK(util_get64(out + position) == disk, "EXPORT_NAME size");
        CHECK(util_get16(out + position + 8) == s->flags, "EXPORT_NAME flags");
        for (size_t i = 10; i < rest; i++)
            CHECK(out[position + i] == 0, "EXPORT_NAME padding");
    }
}

static void run(const uint8_t *data, size_t size, enum nbd_tls_mode mode)
{
    make_server();
    int fds[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");

    struct fuzz_client client = {.fd = fds[1], .input = data, .input_size = size};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, fuzz_client_main, &client) == 0, "pthread_create");

    struct nbd_session session = {.fd = fds[0], .id = 1};
    session.tls_config = mode == NBD_TLS_ON ? tls_on : mode == NBD_TLS_REQUIRE ? tls_require : NULL;
    int rc = nbd_handshake(&session, &server);
    CHECK(rc == 1 || rc == 0 || rc == -EPROTO || rc == -ENOENT || rc == -ECONNRESET,
          "nbd_handshake returned %d", rc);

    /* End of file for the client, after every reply already queued. */
    shutdown(fds[0], SHUT_WR);
    CHECK(pthread_join(thread, NULL) == 0, "pthread_join");
    close(fds[0]);
    close(fds[1]);

    check_replies(client.output, client.output_size, rc, &session, mode);
    nbd_tls_end(&session);
    /* Every short hold given back; a client hold only with transmission starting. */
    for (int i = 0; i < 2; i++) {
        CHECK(server.holds[i] == 0, "export %d: %d holds kept", i, server.holds[i]);
        int wanted = rc == 1 && session.export == &server.exports[i];
        CHECK(server.clients[i] == wanted, "export %d: %d client holds", i, server.clients[i]);
        server.clients[i] = 0;
    }
    free(client.output);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    make_tls();
    run(data, size, NBD_TLS_OFF);
    run(data, size, NBD_TLS_ON);
    run(data, size, NBD_TLS_REQUIRE);
    return 0;
}
