/* nbd_load.c - `uzram bench nbd`: load on a running NBD server from one thread that keeps
 * --depth requests in flight until --requests are done, costing itself as little as it can
 * (each batch of requests is one sendmsg, replies come in large recv()s, write payloads are
 * sent from pre-made pages), so that requests/s and CPU a request show the server. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/nbd_connect.h"
#include "bench/nbd_load.h"
#include "common/datagen.h"
#include "common/big_endian.h"
#include "common/clock.h"
#include "common/socket_io.h"
#include "nbd/protocol.h"

/* A write's header and the 8 bytes that make its block's contents its own. */
#define STAMP_SIZE 8
#define HEAD_MAX (NBD_REQUEST_SIZE + STAMP_SIZE)
/* Payloads are drawn from this many bytes of pre-made 50%-compressible blocks. */
#define POOL_BYTES (8u << 20)
#define POOL_MAX_BLOCKS 256u
/* The cookie's low bits are the slot (BENCH_NBD_MAX_DEPTH < 2^16), the rest the serial. */
#define SLOT_BITS 16

struct slot {
    uint64_t cookie;
    uint64_t block;
    bool busy;
    bool write;
    bool must_match; /* a read sent after this run's write of the block completed */
};

struct load {
    const struct bench_nbd_options *o;
    uint64_t seed;
    int fd;
    uint32_t bs;
    uint64_t blocks; /* in the region */
    unsigned char *pool;
    unsigned pool_blocks;
    struct slot *slots;
    unsigned *free_slots;
    unsigned free_count;
    unsigned char *heads; /* this batch's headers, one after another */
    struct iovec *iov;    /* this batch, from iov_next on still to send */
    int iov_count, iov_next;
    unsigned char *rbuf;
    size_t rcap, rhave;
    uint8_t *written; /* with --verify: blocks this run has written (bitmap) */
    struct datagen_rng rng;
    uint64_t next_block; /* --pattern seq */
    uint64_t issued;
    struct bench_nbd_result *res;
    uint64_t last_reply_ms;
    bool short_timeout; /* SO_RCVTIMEO is set below --timeout */
};

/* The 8 bytes that start block `block`'s contents: a mix of the seed and the block. */
static uint64_t stamp_of(uint64_t seed, uint64_t block)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + block + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const unsigned char *pool_block(const struct load *l, uint64_t block)
{
    return l->pool + (size_t)(block % l->pool_blocks) * l->bs;
}

/* The pool: blocks of datagen's 50%-compressible pages (fio's buffer_compress_percentage=50),
 * made before the clock starts. */
static int make_pool(struct load *l)
{
    l->pool_blocks = POOL_BYTES / l->bs;
    if (l->pool_blocks > POOL_MAX_BLOCKS)
        l->pool_blocks = POOL_MAX_BLOCKS;
    size_t pages = ((size_t)l->pool_blocks * l->bs + BENCH_PAGE - 1) / BENCH_PAGE;
    l->pool = malloc(pages * BENCH_PAGE);
    if (!l->pool)
        return -ENOMEM;
    for (size_t i = 0; i < pages; i++)
        datagen_page(l->seed, DATAGEN_HALF, i, l->pool + i * BENCH_PAGE);
    return 0;
}

static int setup(struct load *l, const struct bench_options *opt)
{
    unsigned depth = l->o->depth;
    l->slots = calloc(depth, sizeof *l->slots);
    l->free_slots = calloc(depth, sizeof *l->free_slots);
    l->heads = malloc((size_t)depth * HEAD_MAX);
    l->iov = calloc(2 * (size_t)depth + 1, sizeof *l->iov);
    size_t message = NBD_SIMPLE_REPLY_SIZE + l->bs;
    l->rcap = (size_t)depth * message;
    if (l->rcap > (4u << 20))
        l->rcap = 4u << 20;
    if (l->rcap < 2 * message)
        l->rcap = 2 * message;
    l->rbuf = malloc(l->rcap);
    if (l->o->verify)
        l->written = calloc(l->blocks / 8 + 1, 1);
    if (!l->slots || !l->free_slots || !l->heads || !l->iov || !l->rbuf ||
        (l->o->verify && !l->written))
        return -ENOMEM;
    for (unsigned i = 0; i < depth; i++)
        l->free_slots[i] = depth - 1 - i;
    l->free_count = depth;
    datagen_rng_seed(&l->rng, opt->seed ^ 0x6e6264u);
    return make_pool(l);
}

static void teardown(struct load *l)
{
    free(l->slots);
    free(l->free_slots);
    free(l->heads);
    free(l->iov);
    free(l->rbuf);
    free(l->written);
    free(l->pool);
}

/* The next request's block and direction. */
static uint64_t next_block(struct load *l)
{
    if (!l->o->sequential)
        return datagen_rng_below(&l->rng, l->blocks);
    uint64_t block = l->next_block;
    l->next_block = (block + 1) % l->blocks;
    return block;
}

static bool next_is_write(struct load *l)
{
    if (l->o->rw == BENCH_NBD_MIX)
        return datagen_rng_below(&l->rng, 100) >= BENCH_NBD_MIX_READ_PERCENT;
    return l->o->rw == BENCH_NBD_WRITE;
}

static bool block_written(const struct load *l, uint64_t block)
{
    return l->written && (l->written[block / 8] >> (block % 8)) & 1;
}

/* Fill every free slot with a request (as many as remain to do), their headers one after
 * another in l->heads so that a run of reads is one iovec, a write adding its payload's. */
static void fill_batch(struct load *l)
{
    unsigned char *run = l->heads, *p = l->heads;
    l->iov_count = l->iov_next = 0;
    while (l->free_count && l->issued < l->o->requests) {
        unsigned index = l->free_slots[--l->free_count];
        struct slot *s = &l->slots[index];
        s->block = next_block(l);
        s->write = next_is_write(l);
        s->must_match = !s->write && block_written(l, s->block);
        s->cookie = (l->issued++ << SLOT_BITS) | index;
        s->busy = true;
        util_put32(p, NBD_REQUEST_MAGIC);
        util_put16(p + 4, 0);
        util_put16(p + 6, s->write ? NBD_CMD_WRITE : NBD_CMD_READ);
        util_put64(p + 8, s->cookie);
        util_put64(p + 16, s->block * l->bs);
        util_put32(p + 24, l->bs);
        p += NBD_REQUEST_SIZE;
        if (!s->write)
            continue;
        util_put64(p, stamp_of(l->seed, s->block));
        p += STAMP_SIZE;
        l->iov[l->iov_count++] = (struct iovec){run, (size_t)(p - run)};
        l->iov[l->iov_count++] =
            (struct iovec){(void *)(pool_block(l, s->block) + STAMP_SIZE), l->bs - STAMP_SIZE};
        run = p;
    }
    if (p > run)
        l->iov[l->iov_count++] = (struct iovec){run, (size_t)(p - run)};
}

/* Send what the socket takes now of the batch. 0, or a negative errno. */
static int send_some(struct load *l)
{
    int count = l->iov_count - l->iov_next;
    struct msghdr msg = {.msg_iov = l->iov + l->iov_next,
                         .msg_iovlen = (size_t)(count > IOV_MAX ? IOV_MAX : count)};
    ssize_t n = sendmsg(l->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        int err = errno;
        fprintf(stderr, "uzram bench nbd: sending requests failed: %s\n", strerror(err));
        return -err;
    }
    while (n > 0) {
        struct iovec *v = &l->iov[l->iov_next];
        if ((size_t)n >= v->iov_len) {
            n -= (ssize_t)v->iov_len;
            l->iov_next++;
        } else {
            v->iov_base = (char *)v->iov_base + n;
            v->iov_len -= (size_t)n;
            n = 0;
        }
    }
    return 0;
}

static bool all_zero(const unsigned char *p, size_t length)
{
    return p[0] == 0 && memcmp(p, p + 1, length - 1) == 0;
}

/* A read's bytes against its block's contents. 0, or -EIO after a message. */
static int verify_read(struct load *l, const struct slot *s, const unsigned char *data)
{
    unsigned char stamp[STAMP_SIZE];
    util_put64(stamp, stamp_of(l->seed, s->block));
    if (memcmp(data, stamp, STAMP_SIZE) == 0 &&
        memcmp(data + STAMP_SIZE, pool_block(l, s->block) + STAMP_SIZE, l->bs - STAMP_SIZE) == 0) {
        l->res->verified++;
        return 0;
    }
    if (!s->must_match && all_zero(data, l->bs)) {
        l->res->verified_zero++;
        return 0;
    }
    if (s->must_match)
        fprintf(stderr,
                "uzram bench nbd: --verify: the read at offset %" PRIu64
                " returned other bytes than this run wrote there\n",
                s->block * l->bs);
    else
        fprintf(stderr,
                "uzram bench nbd: --verify: the read at offset %" PRIu64
                " returned neither zeros nor what a run with --seed %" PRIu64
                " and --block-size %" PRIu32 " writes there (written with others?)\n",
                s->block * l->bs, l->seed, l->bs);
    return -EIO;
}

/* One whole reply at p (`have` bytes there): its length, 0 when not all of it is here yet,
 * or a negative errno after a message. */
static long take_reply(struct load *l, const unsigned char *p, size_t have)
{
    uint32_t error = util_get32(p + 4);
    uint64_t cookie = util_get64(p + 8);
    unsigned index = (unsigned)(cookie & ((1u << SLOT_BITS) - 1));
    if (util_get32(p) != NBD_SIMPLE_REPLY_MAGIC) {
        fprintf(stderr, "uzram bench nbd: bad reply magic 0x%08" PRIx32 " from the server\n",
                util_get32(p));
        return -EPROTO;
    }
    struct slot *s = index < l->o->depth ? &l->slots[index] : NULL;
    if (!s || !s->busy || s->cookie != cookie) {
        fprintf(stderr, "uzram bench nbd: reply with a handle no request has (0x%" PRIx64 ")\n",
                cookie);
        return -EPROTO;
    }
    if (error) {
        fprintf(stderr, "uzram bench nbd: the server failed a %s at offset %" PRIu64 ": %s\n",
                s->write ? "write" : "read", s->block * l->bs, strerror((int)error));
        return -EIO;
    }
    size_t length = NBD_SIMPLE_REPLY_SIZE + (s->write ? 0 : l->bs);
    if (have < length)
        return 0;
    if (!s->write && l->o->verify) {
        int rc = verify_read(l, s, p + NBD_SIMPLE_REPLY_SIZE);
        if (rc)
            return rc;
    }
    if (s->write) {
        l->res->writes++;
        if (l->written)
            l->written[s->block / 8] |= (uint8_t)(1u << (s->block % 8));
    } else {
        l->res->reads++;
    }
    s->busy = false;
    l->free_slots[l->free_count++] = index;
    return (long)length;
}

/* The replies whole in the receive buffer; what is left of the last moves to its start. */
static int take_replies(struct load *l)
{
    size_t pos = 0;
    uint64_t before = l->res->reads + l->res->writes;
    while (l->rhave - pos >= NBD_SIMPLE_REPLY_SIZE) {
        long n = take_reply(l, l->rbuf + pos, l->rhave - pos);
        if (n < 0)
            return (int)n;
        if (n == 0)
            break;
        pos += (size_t)n;
    }
    memmove(l->rbuf, l->rbuf + pos, l->rhave - pos);
    l->rhave -= pos;
    return l->res->reads + l->res->writes > before;
}

static int set_receive_timeout(struct load *l, uint64_t ms)
{
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    if (setsockopt(l->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
        int err = errno;
        fprintf(stderr, "uzram bench nbd: cannot set the receive timeout: %s\n", strerror(err));
        return -err;
    }
    return 0;
}

static int stalled(struct load *l)
{
    fprintf(stderr,
            "uzram bench nbd: no reply from the server for %d s (--timeout) with %u requests in"
            " flight and %" PRIu64 " done: giving up\n",
            l->o->timeout, l->o->depth - l->free_count, l->res->reads + l->res->writes);
    return -ETIMEDOUT;
}

/* Wait for the server: for room to send when a batch is half out, else in recv() itself
 * (SO_RCVTIMEO is the time left before --timeout, so no poll() a batch). Then take the
 * replies that came. 0, or a negative errno after a message. */
static int receive(struct load *l)
{
    uint64_t timeout_ms = (uint64_t)l->o->timeout * 1000, now = util_now_ms();
    uint64_t deadline = l->last_reply_ms + timeout_ms;
    if (now >= deadline)
        return stalled(l);
    if (l->iov_next < l->iov_count) {
        struct pollfd wait = {.fd = l->fd, .events = POLLIN | POLLOUT};
        int ready = poll(&wait, 1, (int)(deadline - now));
        if (ready < 0) {
            int err = errno;
            if (err == EINTR)
                return 0;
            fprintf(stderr, "uzram bench nbd: waiting for the server failed: %s\n", strerror(err));
            return -err;
        }
        if (!(wait.revents & (POLLIN | POLLHUP | POLLERR)))
            return 0;
    }
    ssize_t n = recv(l->fd, l->rbuf + l->rhave, l->rcap - l->rhave, 0);
    if (n == 0) {
        fprintf(stderr,
                "uzram bench nbd: the server closed the connection with %u requests in"
                " flight\n",
                l->o->depth - l->free_count);
        return -ECONNRESET;
    }
    if (n < 0) {
        int err = errno;
        if (err == EINTR)
            return 0;
        if (err == EAGAIN)
            return stalled(l);
        fprintf(stderr, "uzram bench nbd: receiving replies failed: %s\n", strerror(err));
        return -err;
    }
    l->rhave += (size_t)n;
    int progress = take_replies(l);
    if (progress < 0)
        return progress;
    /* A server that trickles bytes but finishes no reply still gives up at the deadline. */
    now = util_now_ms();
    if (progress) {
        l->last_reply_ms = now;
        if (l->short_timeout && set_receive_timeout(l, timeout_ms) == 0)
            l->short_timeout = false;
    } else if (now >= deadline) {
        return stalled(l);
    } else {
        l->short_timeout = true;
        return set_receive_timeout(l, deadline - now);
    }
    return 0;
}

/* The run itself: until every request has its reply. */
static int run(struct load *l)
{
    int rc = set_receive_timeout(l, (uint64_t)l->o->timeout * 1000);
    l->last_reply_ms = util_now_ms();
    while (rc == 0 && l->res->reads + l->res->writes < l->o->requests) {
        if (l->iov_next == l->iov_count && l->free_count && l->issued < l->o->requests)
            fill_batch(l);
        if (l->iov_next < l->iov_count)
            rc = send_some(l);
        if (rc == 0)
            rc = receive(l);
    }
    return rc; /* what went wrong has been said */
}

/* The export's size against the options: the region and block count. 0 or -EINVAL. */
static int check_export(struct load *l, const struct bench_nbd_export *export)
{
    uint64_t region = l->o->region ? l->o->region : export->size;
    if (region > export->size) {
        fprintf(stderr,
                "uzram bench nbd: --region %" PRIu64 " is larger than the export (%" PRIu64
                " bytes)\n",
                region, export->size);
        return -EINVAL;
    }
    l->blocks = region / l->bs;
    if (l->blocks == 0) {
        fprintf(stderr,
                "uzram bench nbd: the export (%" PRIu64 " bytes) is smaller than one block\n",
                export->size);
        return -EINVAL;
    }
    if (l->o->rw != BENCH_NBD_READ && (export->flags & NBD_FLAG_READ_ONLY)) {
        fprintf(stderr, "uzram bench nbd: the export is read-only: use --rw read\n");
        return -EROFS;
    }
    l->res->region = l->blocks * l->bs;
    l->res->export_size = export->size;
    return 0;
}

int bench_nbd_process_cpu(long pid, struct bench_nbd_cpu *cpu)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    size_t length = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[length] = '\0';
    /* The name in parentheses may hold spaces: the fields count from its last ')'. Field 3
     * (state) follows it; utime and stime are fields 14 and 15. */
    char *p = strrchr(text, ')');
    unsigned long long utime, stime;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                     &stime) != 2)
        return -EINVAL;
    double tick = (double)sysconf(_SC_CLK_TCK);
    cpu->user = (double)utime / tick;
    cpu->system = (double)stime / tick;
    return 0;
}

/* This process's CPU time so far, user and system, in seconds. */
static struct bench_nbd_cpu own_cpu(void)
{
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (struct bench_nbd_cpu){
        .user = (double)usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6,
        .system = (double)usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6};
}

/* NBD_CMD_DISC, so that the server ends the session cleanly; then the socket closes. */
static void disconnect(struct load *l)
{
    unsigned char head[NBD_REQUEST_SIZE] = {0};
    util_put32(head, NBD_REQUEST_MAGIC);
    util_put16(head + 6, NBD_CMD_DISC);
    util_send_all_by(l->fd, head, sizeof head, util_now_ms() + 1000);
}

int bench_nbd_load(const struct bench_options *opt, struct bench_nbd_result *res)
{
    struct load l = {.o = &opt->nbd, .seed = opt->seed, .bs = opt->nbd.block_size, .res = res};
    struct bench_nbd_export export;
    memset(res, 0, sizeof *res);
    struct bench_nbd_cpu server_before;
    if (opt->nbd.server_pid && bench_nbd_process_cpu(opt->nbd.server_pid, &server_before) != 0) {
        fprintf(stderr, "uzram bench nbd: cannot read the CPU time of process %ld\n",
                opt->nbd.server_pid);
        return -ESRCH;
    }
    l.fd = bench_nbd_connect(&opt->nbd, &export);
    if (l.fd < 0)
        return l.fd;
    int rc = check_export(&l, &export);
    if (rc == 0)
        rc = setup(&l, opt);
    if (rc == -ENOMEM)
        fprintf(stderr, "uzram bench nbd: out of memory\n");
    if (rc == 0 && opt->nbd.server_pid)
        rc = bench_nbd_process_cpu(opt->nbd.server_pid, &server_before);
    if (rc == 0) {
        struct bench_nbd_cpu cpu_before = own_cpu();
        uint64_t start = util_now_ns();
        rc = run(&l);
        res->seconds = (double)(util_now_ns() - start) / 1e9;
        struct bench_nbd_cpu cpu_after = own_cpu();
        res->client_user = cpu_after.user - cpu_before.user;
        res->client_system = cpu_after.system - cpu_before.system;
        struct bench_nbd_cpu server_after;
        if (rc == 0 && opt->nbd.server_pid &&
            bench_nbd_process_cpu(opt->nbd.server_pid, &server_after) == 0) {
            res->server_measured = true;
            res->server_user = server_after.user - server_before.user;
            res->server_system = server_after.system - server_before.system;
        }
        if (rc == 0)
            disconnect(&l);
    }
    teardown(&l);
    close(l.fd);
    return rc;
}
