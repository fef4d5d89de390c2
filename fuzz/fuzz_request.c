/* fuzz_request.c - libFuzzer target: the NBD transmission phase. The fuzz input is a client's
 * request stream, served by the real worker loop over a socketpair and checked against a model. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nbd/protocol.h"
#include "nbd/exports.h"
#include "nbd/limits.h"
#include "nbd/log.h"
#include "nbd/request.h"
#include "nbd/session.h"
#include "nbd/transmission.h"
#include "socket_client.h"
#include "uzram.h"
#include "common/big_endian.h"

/*
 * Input: byte 0 chooses the session, the rest is sent as the client's byte
 * stream of requests (28-byte headers, WRITE payloads) after the handshake.
 *   bit 0  simple replies only (else structured replies were negotiated)
 *   bit 1  no meta context (else base:allocation was selected; needs bit 0 clear)
 *   bit 2  read-only export
 *   bit 3  mem_limit of 64 KiB, so that writes of incompressible data fail with ENOSPC
 *   bit 4  two worker threads instead of one
 *   bit 5  dedup on
 * A fresh 256 KiB device per input keeps runs reproducible.
 *
 * With one worker the replies come in request order, so each reply is
 * matched with its request: errors agree with nbd_check_request() and with
 * an independent range check, READ data and OFFSET_HOLE chunks and
 * BLOCK_STATUS zero extents agree with a plain array that follows every
 * acknowledged WRITE, TRIM and WRITE_ZEROES, chunks of a structured READ
 * cover the request exactly once, and nothing is sent after the last reply.
 * With two workers the server must only survive (the sanitizers watch it).
 *
 * The worker loop needs no server: the session carries its export, so only
 * the transmission files and the socket helpers are linked.
 * fuzz-link: fuzz/socket_client.c src/nbd/transmission.c src/nbd/input.c src/nbd/reply.c
 * fuzz-link: src/nbd/reads.c src/nbd/request.c src/nbd/budget.c src/nbd/log.c src/nbd/io.c
 * fuzz-link: src/nbd/tls.c src/common/socket_io.c src/common/threads.c
 * fuzz-options: -max_len=131072
 */

#define DISK (256u * 1024u)
#define SECTOR 512u
#define SECTORS (DISK / SECTOR)
#define MEM_LIMIT (64u * 1024u)

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_request: request %u: check failed: %s: ", request_index, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static unsigned request_index;

/* ------------------------------------------------------------------------
 * The model and the reply checker (one worker: replies in request order)
 * ---------------------------------------------------------------------- */

static uint8_t model[DISK];
static bool unknown[SECTORS]; /* content after a failed write: not checked */

struct stream {
    const uint8_t *data;
    size_t size, position;
};

static const uint8_t *take(struct stream *s, size_t length, const char *what)
{
    CHECK(s->size - s->position >= length, "reply stream ends inside %s (%zu of %zu bytes)", what,
          s->size - s->position, length);
    const uint8_t *p = s->data + s->position;
    s->position += length;
    return p;
}

static bool range_valid(const struct nbd_request *r)
{
    return r->offset % SECTOR == 0 && r->length % SECTOR == 0 && r->offset <= DISK &&
           r->length <= DISK - r->offset;
}

static void mark_unknown(uint64_t offset, uint64_t length)
{
    for (uint64_t s = offset / SECTOR; s < (offset + length) / SECTOR; s++)
        unknown[s] = true;
}

/* `data` (NULL: zeros) must match the model wherever the model is known. */
static void check_content(uint64_t offset, const uint8_t *data, uint64_t length)
{
    CHECK(offset <= DISK && length <= DISK - offset, "content range %llu+%llu",
          (unsigned long long)offset, (unsigned long long)length);
    for (uint64_t i = 0; i < length; i++) {
        uint64_t at = offset + i;
        if (unknown[at / SECTOR])
            continue;
        uint8_t got = data ? data[i] : 0;
        CHECK(got == model[at], "byte at %llu reads 0x%02x, model has 0x%02x%s",
              (unsigned long long)at, got, model[at], data ? "" : " (reported as zero)");
    }
}

struct session_settings {
    bool structured, meta, read_only, mem_limit;
};

/* What the server may answer to a request that passed nbd_check_request(). */
static bool engine_error_allowed(const struct session_settings *set, const struct nbd_request *r,
                                 uint32_t error)
{
    if (error == NBD_ENOMEM)
        return true;
    bool writes =
        r->type == NBD_CMD_WRITE || r->type == NBD_CMD_TRIM || r->type == NBD_CMD_WRITE_ZEROES;
    return writes && set->mem_limit && error == NBD_ENOSPC;
}

/* One structured reply (chunks up to DONE, or a simple reply for commands
 * that may get one). Returns the error, 0 for success. */
static uint32_t check_structured(struct stream *out, const struct nbd_request *r)
{
    static bool covered[SECTORS];
    uint64_t covered_bytes = 0;
    uint32_t error = 0;
    bool done = false, any_chunk = false, block_status = false;

    memset(covered, 0, sizeof covered);
    if (out->size - out->position >= 4 &&
        util_get32(out->data + out->position) == NBD_SIMPLE_REPLY_MAGIC) {
        CHECK(r->type != NBD_CMD_READ && r->type != NBD_CMD_BLOCK_STATUS,
              "simple reply to type %u with structured replies on", r->type);
        const uint8_t *h = take(out, NBD_SIMPLE_REPLY_SIZE, "a simple reply");
        CHECK(util_get64(h + 8) == r->cookie, "cookie");
        return util_get32(h + 4);
    }
    while (!done) {
        const uint8_t *h = take(out, NBD_STRUCTURED_REPLY_SIZE, "a chunk header");
        CHECK(util_get32(h) == NBD_STRUCTURED_REPLY_MAGIC, "chunk magic 0x%08x", util_get32(h));
        uint16_t flags = util_get16(h + 4), type = util_get16(h + 6);
        uint32_t length = util_get32(h + 16);
        CHECK(util_get64(h + 8) == r->cookie, "chunk cookie");
        CHECK((flags & ~NBD_REPLY_FLAG_DONE) == 0, "chunk flags 0x%x", flags);
        const uint8_t *p = take(out, length, "a chunk payload");
        done = flags & NBD_REPLY_FLAG_DONE;

        if (NBD_REPLY_TYPE_IS_ERROR(type)) {
            CHECK(type == NBD_REPLY_TYPE_ERROR, "error chunk type 0x%x", type);
            CHECK(length >= 6 && util_get16(p + 4) == length - 6, "error chunk length");
            error = util_get32(p);
            CHECK(error != 0, "error chunk with error 0");
            CHECK(done && !any_chunk, "error chunk not alone");
            return error;
        }
        any_chunk = true;
        switch (type) {
        case NBD_REPLY_TYPE_NONE:
            CHECK(length == 0 && done, "NONE chunk");
            break;
        case NBD_REPLY_TYPE_OFFSET_DATA:
        case NBD_REPLY_TYPE_OFFSET_HOLE: {
            CHECK(r->type == NBD_CMD_READ, "content chunk for type %u", r->type);
            bool hole = type == NBD_REPLY_TYPE_OFFSET_HOLE;
            CHECK(hole ? length == 12 : length > 8, "content chunk length %u", length);
            uint64_t offset = util_get64(p);
            uint64_t size = hole ? util_get32(p + 8) : length - 8;
            CHECK(offset >= r->offset && size > 0 && size <= r->length &&
                      offset - r->offset <= r->length - size,
                  "chunk %llu+%llu outside the request %llu+%u", (unsigned long long)offset,
                  (unsigned long long)size, (unsigned long long)r->offset, r->length);
            CHECK(!(r->flags & NBD_CMD_FLAG_DF) || size == r->length, "DF read split into chunks");
            /* The server splits on 512-byte boundaries (it only serves
             * aligned requests), so a sector table finds overlaps. */
            CHECK(offset % SECTOR == 0 && size % SECTOR == 0, "unaligned chunk");
            for (uint64_t s = (offset - r->offset) / SECTOR;
                 s < (offset - r->offset + size) / SECTOR; s++) {
                CHECK(!covered[s], "chunks overlap at sector %llu", (unsigned long long)s);
                covered[s] = true;
            }
            covered_bytes += size;
            check_content(offset, hole ? NULL : p + 8, size);
            break;
        }
        case NBD_REPLY_TYPE_BLOCK_STATUS: {
            CHECK(r->type == NBD_CMD_BLOCK_STATUS && !block_status, "BLOCK_STATUS chunk");
            block_status = true;
            CHECK(length >= 12 && (length - 4) % 8 == 0, "BLOCK_STATUS length %u", length);
            CHECK(util_get32(p) == NBD_CONTEXT_ID_BASE_ALLOCATION, "context id %u", util_get32(p));
            uint32_t count = (length - 4) / 8;
            CHECK(!(r->flags & NBD_CMD_FLAG_REQ_ONE) || count == 1, "REQ_ONE gave %u", count);
            uint64_t position = r->offset;
            for (uint32_t i = 0; i < count; i++) {
                uint32_t extent = util_get32(p + 4 + 8 * i);
                uint32_t state = util_get32(p + 8 + 8 * i);
                CHECK(extent > 0, "empty extent");
                CHECK((state & ~(uint32_t)(NBD_STATE_HOLE | NBD_STATE_ZERO)) == 0, "state %u",
                      state);
                CHECK(extent <= r->offset + r->length - position, "extents past the request");
                if (state & NBD_STATE_ZERO)
                    check_content(position, NULL, extent);
                position += extent;
            }
            break;
        }
        default:
            CHECK(false, "unknown chunk type %u", type);
        }
    }
    if (r->type == NBD_CMD_READ)
        CHECK(covered_bytes == r->length, "READ chunks cover %llu of %u bytes",
              (unsigned long long)covered_bytes, r->length);
    if (r->type == NBD_CMD_BLOCK_STATUS)
        CHECK(block_status, "BLOCK_STATUS without descriptors");
    return 0;
}

static uint32_t check_simple(struct stream *out, const struct nbd_request *r)
{
    const uint8_t *h = take(out, NBD_SIMPLE_REPLY_SIZE, "a simple reply");
    CHECK(util_get32(h) == NBD_SIMPLE_REPLY_MAGIC, "simple reply magic 0x%08x", util_get32(h));
    CHECK(util_get64(h + 8) == r->cookie, "cookie");
    uint32_t error = util_get32(h + 4);
    if (error == 0 && r->type == NBD_CMD_READ)
        check_content(r->offset, take(out, r->length, "READ data"), r->length);
    return error;
}

/* Walk the request stream the way the server reads it and check each reply. */
static void check_replies(const uint8_t *input, size_t size, const uint8_t *output,
                          size_t output_size, const struct session_settings *set,
                          const struct nbd_session *session)
{
    struct stream out = {output, output_size, 0};
    size_t position = 0;

    memset(model, 0, sizeof model);
    memset(unknown, 0, sizeof unknown);
    for (request_index = 0;; request_index++) {
        if (size - position < NBD_REQUEST_SIZE)
            break;
        const uint8_t *h = input + position;
        if (util_get32(h) != NBD_REQUEST_MAGIC)
            break;
        struct nbd_request r = {
            .flags = util_get16(h + 4),
            .type = util_get16(h + 6),
            .cookie = util_get64(h + 8),
            .offset = util_get64(h + 16),
            .length = util_get32(h + 24),
        };
        position += NBD_REQUEST_SIZE;
        if (r.type == NBD_CMD_DISC)
            break;
        const uint8_t *payload = NULL;
        if (r.type == NBD_CMD_WRITE) {
            if (r.length > NBD_SERVER_WRITE_DISCARD_CAP || size - position < r.length)
                break;
            payload = input + position;
            position += r.length;
        }

        uint32_t expected = nbd_check_request(session, set->read_only, &r, NULL);
        uint32_t error = set->structured ? check_structured(&out, &r) : check_simple(&out, &r);
        if (expected != 0) {
            CHECK(error == expected, "error %u, nbd_check_request says %u", error, expected);
        } else {
            CHECK(error == 0 || engine_error_allowed(set, &r, error), "error %u for type %u", error,
                  r.type);
        }
        /* Independent of nbd_check_request: what must never succeed. */
        if (error == 0) {
            CHECK(r.type <= NBD_CMD_BLOCK_STATUS, "unknown type %u accepted", r.type);
            if (r.type != NBD_CMD_FLUSH)
                CHECK(range_valid(&r), "range %llu+%u accepted", (unsigned long long)r.offset,
                      r.length);
            CHECK(!set->read_only || r.type == NBD_CMD_READ || r.type == NBD_CMD_FLUSH ||
                      r.type == NBD_CMD_CACHE || r.type == NBD_CMD_BLOCK_STATUS,
                  "type %u accepted on a read-only export", r.type);
            CHECK(r.type != NBD_CMD_BLOCK_STATUS || set->meta, "BLOCK_STATUS without context");
        }

        bool writes =
            r.type == NBD_CMD_WRITE || r.type == NBD_CMD_TRIM || r.type == NBD_CMD_WRITE_ZEROES;
        if (writes && error == 0) {
            if (r.type == NBD_CMD_WRITE)
                memcpy(model + r.offset, payload, r.length);
            else
                memset(model + r.offset, 0, r.length);
            for (uint64_t s = r.offset / SECTOR; s < (r.offset + r.length) / SECTOR; s++)
                unknown[s] = false;
        } else if (writes && expected == 0 && range_valid(&r)) {
            /* The engine failed part way: some pages may hold the new data. */
            mark_unknown(r.offset, r.length);
        }
    }
    CHECK(out.position == out.size, "%zu bytes after the last reply", out.size - out.position);
}

/* ------------------------------------------------------------------------
 * One run
 * ---------------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    nbd_log_quiet = true; /* the log lines are formatted in tests elsewhere */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t settings = size > 0 ? data[0] : 0;
    struct session_settings set = {
        .structured = !(settings & 1),
        .meta = !(settings & 1) && !(settings & 2),
        .read_only = settings & 4,
        .mem_limit = settings & 8,
    };
    unsigned workers_wanted = settings & 16 ? 2 : 1;
    const uint8_t *stream = size > 0 ? data + 1 : data;
    size_t stream_size = size > 0 ? size - 1 : 0;

    nbd_log_quiet = true;
    struct uzram_config config;
    uzram_config_init(&config);
    config.disksize = DISK;
    config.use_dedup = settings & 32;
    config.mem_limit = set.mem_limit ? MEM_LIMIT : 0;
    struct nbd_export export = {.name = "fuzz", .read_only = set.read_only};
    request_index = 0;
    CHECK(uzram_create(&config, &export.dev) == 0, "uzram_create");

    int fds[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
    struct fuzz_client client = {.fd = fds[1], .input = stream, .input_size = stream_size};
    pthread_t client_thread;
    CHECK(pthread_create(&client_thread, NULL, fuzz_client_main, &client) == 0, "pthread_create");

    /* What the handshake would have left behind (see src/nbd/server.c). */
    struct nbd_session session = {
        .fd = fds[0],
        .id = 1,
        .no_zeroes = true,
        .structured = set.structured,
        .meta_allocation = set.meta,
        .size = DISK,
        .export = &export,
    };
    session.flags = nbd_transmission_flags(&export, &session);
    /* With two workers, every buffered request is handed to the helper (no
     * cost threshold), so the concurrent paths run as often as they can. */
    struct nbd_transmission_settings transmission = {
        .read_only = set.read_only,
        .threads = workers_wanted,
        .helpers = workers_wanted - 1,
        .timeout = NBD_SERVER_TIMEOUT,
        .handoff_worth_ns = 0,
    };
    int rc = nbd_transmission(&session, &transmission);

    /* End of file for the client once every reply is out. */
    shutdown(fds[0], SHUT_WR);
    CHECK(pthread_join(client_thread, NULL) == 0, "pthread_join");
    CHECK(rc != -ENOMEM, "nbd_transmission: out of memory");
    CHECK(rc == 0, "a send failed although the client reads everything");
    if (workers_wanted == 1)
        check_replies(stream, stream_size, client.output, client.output_size, &set, &session);

    close(fds[0]);
    close(fds[1]);
    free(client.output);
    uzram_destroy(export.dev);
    return 0;
}
